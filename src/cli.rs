//! The command line: `serve`, `render`, `validate`, `certs`, `crds`. Offline commands run the
//! same engine as the webhook.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::engine::{self, Catalog, Lookup, Outcome, Request, TaskObject};
use crate::policy::load::{load_paths, yaml_documents};
use crate::policy::select::Labels;
use crate::policy::{PolicySet, Settings, Verdict};
use crate::tekton::TaskRunView;

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
    Serve(crate::server::ServeArgs),
    /// Apply the policies to the TaskRuns in a file, exactly as the webhook would.
    Render(RenderArgs),
    /// Check policies; prints `file: policy: field.path: message` for each problem.
    Validate(ValidateArgs),
    /// Write a development CA and serving certificate.
    Certs(crate::certs::CertsArgs),
    /// Print the CustomResourceDefinitions of the policy kinds.
    Crds,
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
            tekton_controller: self.tekton_controller.clone(),
        }
    }
}

#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Policy file or directory (repeatable).
    #[arg(long, required = true)]
    pub policies: Vec<PathBuf>,
    /// TaskRuns to render (multi-document YAML or JSON; `-` reads stdin).
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Output: the admitted objects as YAML or JSON, or one JSON patch per TaskRun per line.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Namespace the TaskRuns are created in (default: their metadata.namespace, else
    /// `default`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Labels of the namespace, as `k=v,k2=v2` (for namespaceSelector).
    #[arg(long, value_parser = parse_labels)]
    pub namespace_labels: Option<Labels>,
    /// Task, StepAction and Namespace objects for resolving refs (file or directory,
    /// repeatable). Tasks in FILE itself are used too.
    #[arg(long)]
    pub tasks: Vec<PathBuf>,
    /// Print why each policy matched or not, on stderr.
    #[arg(long)]
    pub explain: bool,
    /// Render as a `--dry-run=server` request (the warnings list injected steps).
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
    Patch,
}

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Policy file or directory (repeatable).
    #[arg(long, required = true)]
    pub policies: Vec<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = Labels::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?} is not key=value"))?;
        labels.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    Ok(labels)
}

/// Exit codes shared by the offline commands.
pub mod exit {
    pub const OK: u8 = 0;
    /// A TaskRun was denied, or a policy is invalid.
    pub const DENIED: u8 = 1;
    /// Bad input or usage.
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
    match cli.command {
        Command::Serve(args) => crate::server::main(args),
        Command::Render(args) => ExitCode::from(render(&args)),
        Command::Validate(args) => ExitCode::from(validate(&args)),
        Command::Certs(args) => crate::certs::main(&args),
        Command::Crds => {
            let yaml = crate::policy::api::crds_yaml();
            // A closed pipe (`bookend crds | head`) is not an error worth a panic.
            let _ = std::io::stdout().lock().write_all(yaml.as_bytes());
            ExitCode::SUCCESS
        }
    }
}

fn validate(args: &ValidateArgs) -> u8 {
    let (docs, mut issues) = load_paths(&args.policies);
    let count = docs.len();
    let (set, build_issues) = PolicySet::build(docs, args.engine.settings());
    issues.extend(build_issues);
    if issues.is_empty() {
        println!(
            "valid: {} {}",
            set.len(),
            plural(set.len(), "policy", "policies")
        );
        exit::OK
    } else {
        for issue in &issues {
            println!("{issue}");
        }
        eprintln!(
            "invalid: {} {} in {count} {}",
            issues.len(),
            plural(issues.len(), "problem", "problems"),
            plural(count, "policy", "policies")
        );
        exit::DENIED
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// Loads policies for an offline command; problems are printed and mean exit 2.
pub fn load_policy_set(paths: &[PathBuf], settings: Settings) -> Result<PolicySet, u8> {
    let (docs, mut issues) = load_paths(paths);
    let (set, build_issues) = PolicySet::build(docs, settings);
    issues.extend(build_issues);
    if issues.is_empty() {
        return Ok(set);
    }
    for issue in &issues {
        eprintln!("{issue}");
    }
    eprintln!("error: the policies are invalid (see `bookend validate`)");
    Err(exit::USAGE)
}

/// Reads Task, StepAction and Namespace objects from files or directories.
pub fn load_catalog(paths: &[PathBuf], catalog: &mut Catalog) -> Result<(), String> {
    let files = crate::policy::load::policy_files(paths).map_err(|i| i.to_string())?;
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let docs = yaml_documents(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        catalog.add_objects(&docs, "default");
    }
    Ok(())
}

struct RenderLookup<'a> {
    catalog: &'a Catalog,
    labels: Option<&'a Labels>,
}

impl Lookup for RenderLookup<'_> {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.labels
            .cloned()
            .or_else(|| self.catalog.namespace_labels(namespace))
    }

    fn task(&self, namespace: &str, name: &str) -> Option<TaskObject> {
        self.catalog.task(namespace, name)
    }

    fn step_action_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        self.catalog.step_action_exists(namespace, name)
    }
}

fn render(args: &RenderArgs) -> u8 {
    let set = match load_policy_set(&args.policies, args.engine.settings()) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let text = match read_input(&args.file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let docs = match yaml_documents(&text) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}: {e}", args.file.display());
            return exit::USAGE;
        }
    };
    let mut catalog = Catalog::default();
    if let Err(e) = load_catalog(&args.tasks, &mut catalog) {
        eprintln!("error: {e}");
        return exit::USAGE;
    }
    let default_ns = args.namespace.as_deref().unwrap_or("default");
    catalog.add_objects(&docs, default_ns);
    let lookup = RenderLookup {
        catalog: &catalog,
        labels: args.namespace_labels.as_ref(),
    };

    let mut code = exit::OK;
    let mut outputs = Vec::with_capacity(docs.len());
    let mut patches = Vec::new();
    let mut taskruns = 0;
    for doc in &docs {
        let Some(view) = TaskRunView::new(doc) else {
            outputs.push(doc.clone());
            continue;
        };
        taskruns += 1;
        let namespace = args
            .namespace
            .as_deref()
            .or(view.namespace())
            .unwrap_or("default");
        let request = Request {
            object: doc,
            namespace,
            dry_run: args.dry_run,
        };
        let label = format!("TaskRun {namespace}/{}", view.display_name());
        if args.explain {
            eprintln!("{label}:");
            for e in engine::explain(request, &set, &lookup) {
                let (word, why) = match &e.verdict {
                    Verdict::Matched(w) => ("matched", w),
                    Verdict::NotMatched(w) => ("not matched", w),
                    Verdict::Excluded(w) => ("excluded", w),
                };
                eprintln!("  {} ({:?}): {word}: {why}", e.policy, e.mode);
            }
        }
        let decision = engine::decide(request, &set, &lookup);
        for w in &decision.warnings {
            eprintln!("warning: {label}: {w}");
        }
        if args.explain {
            eprintln!(
                "  decision: {} ({} patch operations)",
                decision.outcome.as_str(),
                decision.patch.len()
            );
        }
        match decision.outcome {
            Outcome::Denied => {
                eprintln!(
                    "denied: {label}: {}",
                    decision.message.as_deref().unwrap_or("")
                );
                code = exit::DENIED;
            }
            _ => {
                patches.push(decision.patch.clone());
                outputs.push(decision.object);
            }
        }
    }
    if taskruns == 0 {
        eprintln!("error: {}: no TaskRun found", args.file.display());
        return exit::USAGE;
    }
    if let Err(e) = write_output(args.output, &outputs, &patches) {
        eprintln!("error: cannot write output: {e}");
        return exit::USAGE;
    }
    code
}

fn read_input(path: &PathBuf) -> Result<String, String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
    }
}

fn write_output(
    format: OutputFormat,
    outputs: &[Value],
    patches: &[Vec<crate::patch::Operation>],
) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match format {
        OutputFormat::Yaml => {
            for (i, doc) in outputs.iter().enumerate() {
                if i > 0 {
                    writeln!(out, "---")?;
                }
                let text = serde_yaml_ng::to_string(doc).map_err(std::io::Error::other)?;
                out.write_all(text.as_bytes())?;
            }
        }
        OutputFormat::Json => {
            let value = match outputs {
                [one] => one.clone(),
                many => serde_json::json!({"apiVersion": "v1", "kind": "List", "items": many}),
            };
            serde_json::to_writer_pretty(&mut out, &value)?;
            writeln!(out)?;
        }
        OutputFormat::Patch => {
            for patch in patches {
                serde_json::to_writer(&mut out, patch)?;
                writeln!(out)?;
            }
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse() {
        let l = parse_labels("team=a, tier=gold").unwrap();
        assert_eq!(l.get("team").map(String::as_str), Some("a"));
        assert_eq!(l.get("tier").map(String::as_str), Some("gold"));
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("").unwrap().is_empty());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
