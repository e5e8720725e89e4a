//! The command line: `serve`, `render`, `validate`, `test`, `certs`, `crds`, `version`,
//! `completions`. Each subcommand's
//! arguments, their translation into the library's typed configuration, and the exit codes
//! live here and nowhere else; offline commands run the same engine as the webhook.

mod certs;
mod crds;
mod pipeline;
mod render;
mod serve;
mod test;
mod validate;
mod version;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use std::path::PathBuf;

use crate::policy::Settings;
use crate::tekton::cluster::{
    BadFlag, BadVersion, Cluster, FeatureFlags, OLDEST_SUPPORTED, Version,
};

pub use certs::CertsArgs;
pub use render::{OutputFormat, RenderArgs};
pub use serve::{ServeArgs, SourceArg, parse_duration};
pub use test::TestArgs;
pub use validate::ValidateArgs;
pub use version::{TESTED_KUBERNETES, TESTED_TEKTON};

/// Org-wide pre-steps and post-steps for Tekton TaskRuns, enforced at admission.
#[derive(Parser, Debug)]
#[command(name = "bookend", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the admission webhook (HTTPS) and the admin endpoints (HTTP).
    #[command(after_help = help::SERVE)]
    Serve(ServeArgs),
    /// Apply the policies to the TaskRuns in a file, exactly as the webhook would.
    #[command(after_help = help::RENDER)]
    Render(RenderArgs),
    /// Check policies; prints `file: policy: field.path: message` for each problem.
    #[command(after_help = help::VALIDATE)]
    Validate(ValidateArgs),
    /// Run declarative policy tests: expected decisions for TaskRuns, as the webhook makes them.
    #[command(after_help = help::TEST)]
    Test(TestArgs),
    /// Write a development CA and serving certificate.
    #[command(after_help = help::CERTS)]
    Certs(CertsArgs),
    /// Print the CustomResourceDefinitions of the policy kinds.
    #[command(after_help = help::CRDS)]
    Crds,
    /// Print the release, the commit it was built from and the Tekton and Kubernetes versions
    /// its tests run.
    #[command(after_help = help::VERSION)]
    Version,
    /// Print a shell completion script, e.g. `source <(bookend completions bash)`.
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// bash, zsh, fish, powershell or elvish.
        shell: clap_complete::Shell,
    },
}

/// Examples and exit codes, shown after each subcommand's options (`bookend <command> --help`).
mod help {
    pub const SERVE: &str = "\
Examples:
  bookend serve                                  # examples/policies, dev certificate in certs/
  bookend serve --policies policies/ --tls-cert tls.crt --tls-key tls.key --listen 0.0.0.0:8443
  bookend serve --source kubernetes              # policies and Tasks from the cluster (in a Pod)

Exit codes: 0 stopped cleanly (SIGTERM/SIGINT, after draining); 2 could not start (bad flags,
unreadable certificate, port in use).";

    pub const RENDER: &str = "\
Examples:
  bookend render --policies examples/policies -f examples/taskruns/build.yaml --explain
  bookend render --policies policies/ -f taskruns/ -o patch
  kubectl get taskruns -n team-a -o yaml | bookend render --policies policies/ -f - -o decisions
  bookend render --policies policies/ -f run.yaml --tasks tasks/ --namespace-labels team=a

Exit codes: 0 every TaskRun admitted; 1 one was denied (the reason on stderr); 2 bad input or
usage (unreadable file, invalid policies, no TaskRun in the input).";

    pub const VALIDATE: &str = "\
Examples:
  bookend validate --policies examples/policies
  bookend validate --policies policies/ --policies team-a/policies.yaml

Exit codes: 0 every policy is valid; 1 a policy is invalid (one `file: policy: field.path:
message` line per problem on stdout); 2 a path cannot be read or holds no policy.";

    pub const TEST: &str = "\
Examples:
  bookend test examples/
  bookend test policies/tests/bookend-test.yaml --junit report.xml

Exit codes: 0 every case passed; 1 a case failed (a diff per failure); 2 bad input (an unreadable
or invalid test file, invalid policies, a TaskRun not in the resources).";

    pub const CERTS: &str = "\
Examples:
  bookend certs --host 127.0.0.1 --host localhost
  bookend certs --out-dir certs/ --host bookend.bookend-system.svc --days 90 --force

Exit codes: 0 written; 2 bad input, or a CA already in the directory without --force.";

    pub const CRDS: &str = "\
Examples:
  bookend crds | kubectl apply --server-side -f -

Exit codes: 0.";

    pub const VERSION: &str = "\
Examples:
  bookend version

Exit codes: 0.";

    pub const COMPLETIONS: &str = "\
Examples:
  source <(bookend completions bash)
  bookend completions zsh > \"${fpath[1]}/_bookend\"

Exit codes: 0; 2 an unknown shell.";
}

/// Settings shared by every command that runs the engine.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Step-name prefix reserved for injected steps.
    #[arg(long, default_value = crate::policy::DEFAULT_PREFIX, env = "BOOKEND_RESERVED_PREFIX")]
    pub reserved_prefix: String,
    /// Image of the gate and verdict steps of `postStepsRun: Always` and of the jail check of `userSteps.network: None` (needs /bin/sh).
    #[arg(long, default_value = crate::policy::DEFAULT_HELPER_IMAGE, env = "BOOKEND_HELPER_IMAGE")]
    pub helper_image: String,
    /// User ID the gate and verdict steps run as (their securityContext meets Pod Security
    /// `restricted`); `none` leaves runAsUser out, for platforms that assign one (OpenShift).
    #[arg(long, default_value = "65532", env = "BOOKEND_HELPER_RUN_AS_USER", value_parser = parse_run_as_user)]
    pub helper_run_as_user: RunAsUser,
    /// User of Tekton's controller: its dry-run Task CREATEs (remote Task resolution) get the
    /// steps of policies whose criteria are all namespace-level.
    #[arg(long, default_value = crate::policy::DEFAULT_TEKTON_CONTROLLER, env = "BOOKEND_TEKTON_CONTROLLER")]
    pub tekton_controller: String,
    /// The cluster's Tekton Pipelines version (v0.62.0 or later): policies that need what it
    /// lacks refuse the TaskRuns they match. `serve --source kubernetes` reads it from the
    /// cluster instead.
    #[arg(long, value_name = "VERSION", default_value_t = crate::tekton::cluster::NEWEST, value_parser = parse_tekton_version, env = "BOOKEND_TEKTON_VERSION")]
    pub tekton_version: Version,
    /// Tekton's feature-flags ConfigMap (YAML or JSON, as `kubectl get cm feature-flags -n
    /// tekton-pipelines -o yaml` prints it); its flags, then `--tekton-feature-flag`s, apply.
    #[arg(long, value_name = "FILE")]
    pub tekton_feature_flags: Option<PathBuf>,
    /// One Tekton feature flag, as in its ConfigMap (repeatable): enable-step-actions=true,
    /// enable-api-fields=stable|beta|alpha, enable-cel-in-whenexpression=true,
    /// disable-inline-spec=taskrun.
    #[arg(long, value_name = "KEY=VALUE")]
    pub tekton_feature_flag: Vec<String>,
}

/// The Tekton facts given on the command line are unusable; the message names the flag.
#[derive(Debug, thiserror::Error)]
pub enum BadTektonArgs {
    #[error("--tekton-feature-flags {}: cannot read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--tekton-feature-flags {}: {message}", path.display())]
    NotAConfigMap { path: PathBuf, message: String },
    #[error("--tekton-feature-flag {0:?}: expected KEY=VALUE, e.g. enable-step-actions=true")]
    NotKeyValue(String),
    #[error("{flag}: {source}")]
    Flag {
        flag: &'static str,
        #[source]
        source: BadFlag,
    },
    #[error("--tekton-feature-flag {0:?}: bookend does not read this flag (it reads {1})")]
    UnknownFlag(String, String),
}

/// `--tekton-version`: a version bookend supports.
fn parse_tekton_version(text: &str) -> Result<Version, String> {
    let version: Version = text.parse().map_err(|e: BadVersion| e.to_string())?;
    if version < OLDEST_SUPPORTED {
        return Err(format!(
            "bookend supports Tekton {OLDEST_SUPPORTED} and later (step when, which its Always gates need, first shipped there); got {version}"
        ));
    }
    Ok(version)
}

impl EngineArgs {
    pub fn settings(&self) -> Result<Settings, BadTektonArgs> {
        Ok(Settings {
            prefix: self.reserved_prefix.clone(),
            helper_image: self.helper_image.clone(),
            helper_run_as_user: self.helper_run_as_user.0,
            tekton_controller: self.tekton_controller.clone(),
            own_user: None,
            tekton: self.tekton()?,
        })
    }

    /// The cluster the offline commands (and files mode) decide for.
    fn tekton(&self) -> Result<Cluster, BadTektonArgs> {
        let mut flags = FeatureFlags::default();
        if let Some(path) = &self.tekton_feature_flags {
            let text =
                std::fs::read_to_string(path).map_err(|source| BadTektonArgs::Unreadable {
                    path: path.clone(),
                    source,
                })?;
            let not_a_config_map = |message: String| BadTektonArgs::NotAConfigMap {
                path: path.clone(),
                message,
            };
            let object: serde_json::Value =
                serde_yaml_ng::from_str(&text).map_err(|e| not_a_config_map(e.to_string()))?;
            if object.get("kind").and_then(serde_json::Value::as_str) != Some("ConfigMap") {
                return Err(not_a_config_map(
                    "expected Tekton's feature-flags ConfigMap (kind: ConfigMap, data: {enable-step-actions: \"true\", ...})".to_owned(),
                ));
            }
            flags =
                FeatureFlags::from_config_map(&object).map_err(|source| BadTektonArgs::Flag {
                    flag: "--tekton-feature-flags",
                    source,
                })?;
        }
        for pair in &self.tekton_feature_flag {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| BadTektonArgs::NotKeyValue(pair.clone()))?;
            let known =
                flags
                    .set(key.trim(), value.trim())
                    .map_err(|source| BadTektonArgs::Flag {
                        flag: "--tekton-feature-flag",
                        source,
                    })?;
            if !known {
                return Err(BadTektonArgs::UnknownFlag(
                    pair.clone(),
                    crate::tekton::cluster::KNOWN_FLAGS.join(", "),
                ));
            }
        }
        Ok(Cluster {
            version: self.tekton_version,
            flags,
        })
    }
}

/// `--helper-run-as-user`: a user ID, or none.
#[derive(Clone, Copy, Debug)]
pub struct RunAsUser(pub Option<i64>);

fn parse_run_as_user(text: &str) -> Result<RunAsUser, String> {
    match text {
        "none" | "" => Ok(RunAsUser(None)),
        uid => uid
            .parse()
            .map(|uid| RunAsUser(Some(uid)))
            .map_err(|_| format!("{uid:?} is not a user ID or `none`")),
    }
}

/// Exit codes of every subcommand.
pub mod exit {
    pub const OK: u8 = 0;
    /// A TaskRun was denied, or a policy is invalid.
    pub const DENIED: u8 = 1;
    /// Bad input or usage; `serve` could not start.
    pub const USAGE: u8 = 2;
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    ExitCode::from(match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::Render(args) => render::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Certs(args) => certs::run(&args),
        Command::Crds => crds::run(),
        Command::Version => version::run(),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "bookend",
                &mut std::io::stdout(),
            );
            exit::OK
        }
    })
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
