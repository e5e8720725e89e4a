//! `bookend render`: apply the policies to the TaskRuns in a file, exactly as the webhook would.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::Value;

use super::{EngineArgs, exit};
use crate::engine::{self, Catalog, Lookup, Outcome, Request, refuses_inline_task_spec};
use crate::patch::Operation;
use crate::policy::api::Mode;
use crate::policy::load::yaml_documents;
use crate::policy::select::Labels;
use crate::policy::{PolicySet, Settings};
use crate::source::files::load_catalog;
use crate::source::walk::policy_set;
use crate::tekton::{TaskObject, TaskRunView};

#[derive(Args, Debug)]
pub struct RenderArgs {
    /// Policy file or directory (repeatable).
    #[arg(long, required = true)]
    pub policies: Vec<PathBuf>,
    /// TaskRuns to render: a file (multi-document YAML or JSON, `kind: List` as `kubectl get -o
    /// yaml` prints it), a directory (its .yaml, .yml and .json files, recursively), or `-` for
    /// stdin. Repeatable; rendered in the order given. A PipelineRun is rendered as the TaskRuns
    /// Tekton's controller would create for it (its Pipeline from FILE or --tasks).
    #[arg(short = 'f', long = "filename", required = true)]
    pub file: Vec<PathBuf>,
    /// Output: the admitted objects as YAML or JSON; one JSON patch per admitted TaskRun per
    /// line (`patch`); or one JSON decision per TaskRun per line, denied ones included
    /// (`decisions`: input, outcome, message, warnings, policies, patch; docs/cli.md).
    #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Namespace the TaskRuns are created in (default: their metadata.namespace, else
    /// `default`).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Labels of the namespace, as `k=v,k2=v2` (for namespaceSelector).
    #[arg(long, value_parser = parse_labels)]
    pub namespace_labels: Option<Labels>,
    /// Task, Pipeline, StepAction and Namespace objects for resolving refs (file or directory,
    /// repeatable). Those in FILE itself are used too.
    #[arg(long)]
    pub tasks: Vec<PathBuf>,
    /// Print why each policy matched or not, on stderr.
    #[arg(long)]
    pub explain: bool,
    /// Render as a `--dry-run=server` request (the warnings list injected steps).
    #[arg(long)]
    pub dry_run: bool,
    /// The value of Tekton's `disable-inline-spec` feature flag (e.g. `taskrun,pipelinerun`),
    /// as the cluster's `feature-flags` ConfigMap sets it. (A `feature-flags` ConfigMap among
    /// the `--tasks` objects counts too.)
    #[arg(long, value_name = "KINDS")]
    pub disable_inline_spec: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
    Patch,
    Decisions,
}

/// Where an input document came from: the file (`-` for stdin), the document in it (1-based)
/// and, for an item of a `kind: List`, its position (1-based; nested Lists: the innermost).
#[derive(Clone, Debug, Serialize)]
pub struct InputId {
    pub file: String,
    pub document: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
}

/// One input document and where it came from.
#[derive(Debug)]
struct Input {
    id: InputId,
    value: Value,
}

/// One line of `-o decisions`: a TaskRun and what bookend decided for it.
#[derive(Serialize)]
struct DecisionLine<'a> {
    #[serde(flatten)]
    input: &'a InputId,
    kind: &'static str,
    namespace: &'a str,
    /// metadata.name, or metadata.generateName when the name is left to the API server.
    name: String,
    /// For a TaskRun of a PipelineRun (previewed from it, or as stored): the PipelineRun and
    /// the PipelineTask (its `tekton.dev/pipelineRun` and `tekton.dev/pipelineTask` labels).
    #[serde(rename = "pipelineRun", skip_serializing_if = "Option::is_none")]
    pipeline_run: Option<&'a str>,
    #[serde(rename = "pipelineTask", skip_serializing_if = "Option::is_none")]
    pipeline_task: Option<&'a str>,
    /// `mutated`, `admitted` (unchanged) or `denied`.
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    warnings: &'a [String],
    /// Every policy that could apply: whether it matched and why.
    policies: Vec<PolicyLine>,
    /// The RFC 6902 patch (empty unless mutated).
    patch: &'a [Operation],
}

#[derive(Serialize)]
struct PolicyLine {
    policy: String,
    mode: &'static str,
    verdict: String,
    why: String,
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

/// Loads policies for an offline command; problems are printed and mean exit 2.
fn load_policies(paths: &[PathBuf], settings: Settings) -> Result<PolicySet, u8> {
    let loaded = policy_set(paths, settings);
    for note in &loaded.skipped {
        eprintln!("note: {note}");
    }
    if loaded.issues.is_empty() {
        return Ok(loaded.set);
    }
    for issue in &loaded.issues {
        eprintln!("{issue}");
    }
    eprintln!("error: the policies are invalid (see `bookend validate`)");
    Err(exit::USAGE)
}

/// The catalog, with the namespace labels of `--namespace-labels` winning over any Namespace
/// object.
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

    fn step_action(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        self.catalog.step_action(namespace, name)
    }

    fn inline_task_spec_refused(&self) -> bool {
        self.catalog.inline_task_spec_refused()
    }

    fn default_pod_template(&self) -> Option<serde_json::Value> {
        self.catalog.default_pod_template()
    }
}

/// Exit 0 when every TaskRun is admitted, 1 when one is denied, 2 on bad input.
pub(super) fn run(args: &RenderArgs) -> u8 {
    let settings = match args.engine.settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let inline_refused = settings.tekton.flags.inline_task_spec_refused;
    let tekton_version = settings.tekton.version;
    let set = match load_policies(&args.policies, settings) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let inputs = match read_inputs(&args.file) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let mut catalog = match load_catalog(&args.tasks) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let default_ns = args.namespace.as_deref().unwrap_or("default");
    let values: Vec<Value> = inputs.iter().map(|i| i.value.clone()).collect();
    catalog.add_objects(&values, default_ns);
    // A PipelineRun becomes the TaskRuns its controller would create; they go on as TaskRuns,
    // each identified by the PipelineRun's input.
    let mut notes = Vec::new();
    let mut expanded = Vec::with_capacity(inputs.len());
    for input in inputs {
        match super::pipeline::expand(
            vec![input.value],
            &catalog,
            default_ns,
            args.namespace.as_deref(),
            tekton_version,
            &mut notes,
        ) {
            Ok(values) => expanded.extend(values.into_iter().map(|value| Input {
                id: input.id.clone(),
                value,
            })),
            Err(e) => {
                for note in &notes {
                    eprintln!("note: {note}");
                }
                eprintln!("error: {e}");
                return exit::USAGE;
            }
        }
    }
    for note in &notes {
        eprintln!("note: {note}");
    }
    let inputs = expanded;
    if let Some(kinds) = &args.disable_inline_spec {
        catalog.inline_task_spec_refused = refuses_inline_task_spec(kinds);
    }
    catalog.inline_task_spec_refused |= inline_refused;
    let lookup = RenderLookup {
        catalog: &catalog,
        labels: args.namespace_labels.as_ref(),
    };

    let mut code = exit::OK;
    let mut outputs = Vec::with_capacity(inputs.len());
    let mut patches = Vec::new();
    let mut lines = Vec::new();
    let mut taskruns = 0;
    for input in &inputs {
        let doc = &input.value;
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
        let label = format!(
            "TaskRun {namespace}/{}{}",
            view.display_name(),
            super::pipeline::identity(&view)
        );
        let explained = (args.explain || args.output == OutputFormat::Decisions)
            .then(|| engine::explain(request, &set, &lookup));
        if let (true, Some(explained)) = (args.explain, &explained) {
            eprintln!("{label}:");
            for e in explained {
                eprintln!("  {} ({:?}): {}: {}", e.policy, e.mode, e.verdict, e.why);
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
        if args.output == OutputFormat::Decisions {
            let line = DecisionLine {
                input: &input.id,
                kind: "TaskRun",
                namespace,
                name: view.display_name(),
                pipeline_run: label_of(&view, crate::tekton::pipeline::PIPELINE_RUN_LABEL),
                pipeline_task: label_of(&view, crate::tekton::pipeline::PIPELINE_TASK_LABEL),
                outcome: decision.outcome.as_str(),
                message: decision.message.as_deref(),
                warnings: &decision.warnings,
                policies: explained
                    .unwrap_or_default()
                    .into_iter()
                    .map(|e| PolicyLine {
                        policy: e.policy,
                        mode: match e.mode {
                            Mode::Enforce => "Enforce",
                            Mode::Audit => "Audit",
                        },
                        verdict: e.verdict.to_string(),
                        why: e.why,
                    })
                    .collect(),
                patch: &decision.patch,
            };
            lines.push(serde_json::to_string(&line).unwrap_or_default());
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
        let named: Vec<String> = args.file.iter().map(|p| p.display().to_string()).collect();
        eprintln!("error: {}: no TaskRun found", named.join(", "));
        return exit::USAGE;
    }
    if let Err(e) = write_output(args.output, &outputs, &patches, &lines) {
        eprintln!("error: cannot write output: {e}");
        return exit::USAGE;
    }
    code
}

fn label_of<'a>(view: &TaskRunView<'a>, key: &str) -> Option<&'a str> {
    view.labels()?.get(key)?.as_str()
}

/// Every document of the inputs, in the order given (a directory's files sorted).
fn read_inputs(paths: &[PathBuf]) -> Result<Vec<Input>, String> {
    let mut inputs = Vec::new();
    for path in paths {
        let files = if path.as_os_str() == "-" || !path.is_dir() {
            vec![path.clone()]
        } else {
            crate::source::walk::policy_files(std::slice::from_ref(path))
                .map_err(|issue| format!("{}: {}", issue.source, issue.message))?
        };
        for file in files {
            let text = read_input(&file)?;
            let docs = yaml_documents(&text).map_err(|e| format!("{}: {e}", file.display()))?;
            for (i, doc) in docs.into_iter().enumerate() {
                let id = InputId {
                    file: file.display().to_string(),
                    document: i + 1,
                    item: None,
                };
                unpack_lists(id, doc, &mut inputs);
            }
        }
    }
    Ok(inputs)
}

/// `kind: List` (what `kubectl get taskruns -o yaml` prints) is its items, nested Lists too.
fn unpack_lists(id: InputId, doc: Value, into: &mut Vec<Input>) {
    if doc.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(Value::Array(items)) = doc.get("items").cloned() {
            for (j, item) in items.into_iter().enumerate() {
                let id = InputId {
                    item: Some(j + 1),
                    ..id.clone()
                };
                unpack_lists(id, item, into);
            }
        }
    } else {
        into.push(Input { id, value: doc });
    }
}

fn read_input(path: &Path) -> Result<String, String> {
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
    patches: &[Vec<Operation>],
    decisions: &[String],
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
        OutputFormat::Decisions => {
            for line in decisions {
                writeln!(out, "{line}")?;
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
}
