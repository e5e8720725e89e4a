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

use crate::policy::Settings;

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
    Serve(ServeArgs),
    /// Apply the policies to the TaskRuns in a file, exactly as the webhook would.
    Render(RenderArgs),
    /// Check policies; prints `file: policy: field.path: message` for each problem.
    Validate(ValidateArgs),
    /// Run declarative policy tests: expected decisions for TaskRuns, as the webhook makes them.
    Test(TestArgs),
    /// Write a development CA and serving certificate.
    Certs(CertsArgs),
    /// Print the CustomResourceDefinitions of the policy kinds.
    Crds,
    /// Print the release, the commit it was built from and the Tekton and Kubernetes versions
    /// its tests run.
    Version,
    /// Print a shell completion script, e.g. `source <(bookend completions bash)`.
    Completions {
        /// bash, zsh, fish, powershell or elvish.
        shell: clap_complete::Shell,
    },
}

/// Settings shared by every command that runs the engine.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// Step-name prefix reserved for injected steps.
    #[arg(long, default_value = crate::policy::DEFAULT_PREFIX, env = "BOOKEND_RESERVED_PREFIX")]
    pub reserved_prefix: String,
    /// Image of the gate and verdict steps of `postStepsRun: Always` (needs /bin/sh).
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
}

impl EngineArgs {
    pub fn settings(&self) -> Settings {
        Settings {
            prefix: self.reserved_prefix.clone(),
            helper_image: self.helper_image.clone(),
            helper_run_as_user: self.helper_run_as_user.0,
            tekton_controller: self.tekton_controller.clone(),
        }
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
