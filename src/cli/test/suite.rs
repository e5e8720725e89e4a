//! Test files (`cli.bookend.dev/v1alpha1` `Test`): reading them, and running their cases through
//! the same engine as `bookend render` and the webhook.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::diff::diff;
use crate::cli::pipeline;
use crate::engine::{self, Catalog, Outcome, Request};
use crate::policy::load::yaml_documents;
use crate::policy::{PolicySet, Settings};
use crate::source::files::load_catalog;
use crate::source::walk::{policy_files, policy_set};
use crate::tekton::pipeline::{PIPELINE_RUN_LABEL, PIPELINE_TASK_LABEL};
use crate::tekton::{self, TaskRunView};

/// `apiVersion` of a test file.
pub const API_VERSION: &str = "cli.bookend.dev/v1alpha1";
/// `kind` of a test file.
pub const KIND: &str = "Test";
/// Directories are searched for files with this name, or ending in `.<FILE_NAME>`.
pub const FILE_NAME: &str = "bookend-test.yaml";

/// One `Test` document as written.
#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestDoc {
    api_version: String,
    kind: String,
    metadata: Metadata,
    /// Policy files or directories, relative to the test file.
    policies: Vec<PathBuf>,
    /// Files or directories with the TaskRuns and PipelineRuns under test and the Tasks,
    /// Pipelines, StepActions and Namespaces (with their labels) they need, relative to the test
    /// file.
    #[serde(default)]
    resources: Vec<PathBuf>,
    /// What each TaskRun must become.
    results: Vec<Expect>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Metadata {
    name: String,
}

/// The expected decision for one TaskRun.
#[derive(Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Case name in the output (default: `<namespace>/<taskRun>`, or
    /// `<namespace>/<pipelineRun>/<pipelineTask>`).
    #[serde(default)]
    pub name: Option<String>,
    /// `metadata.name` or `metadata.generateName` of a TaskRun in the resources
    /// (`namespace/name` when the name alone is ambiguous). Either this or `pipelineRun`.
    #[serde(default)]
    pub task_run: Option<String>,
    /// `metadata.name` or `metadata.generateName` of a PipelineRun in the resources: the case
    /// is the TaskRun its controller creates for `pipelineTask` (every instance of a matrix).
    #[serde(default)]
    pub pipeline_run: Option<String>,
    /// The PipelineTask (of `tasks` or `finally`) of `pipelineRun`.
    #[serde(default)]
    pub pipeline_task: Option<String>,
    /// Namespace the TaskRun is created in (default: its metadata.namespace, else `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Decide as for `kubectl create --dry-run=server` (the warnings then list injected steps).
    #[serde(default)]
    pub dry_run: bool,
    /// mutated, admitted (unchanged) or denied.
    pub result: Expected,
    /// The steps the policies put in the TaskRun, in the order they run (bookend's gate and
    /// verdict helpers left out).
    #[serde(default)]
    pub injected: Option<Vec<String>>,
    /// Every step of the admitted TaskRun, in order.
    #[serde(default)]
    pub steps: Option<Vec<String>>,
    /// A file with the whole admitted TaskRun, compared semantically (key order free). Its
    /// `bookend.dev/injected` annotation is only compared when the file has one.
    #[serde(default)]
    pub patched_task_run: Option<PathBuf>,
    /// Substrings, each of which some warning must contain; `[]`: no warnings at all.
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
    /// A substring of the denial message.
    #[serde(default)]
    pub message: Option<String>,
}

/// The three outcomes, as test files spell them.
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Expected {
    Mutated,
    Admitted,
    Denied,
}

impl Expected {
    fn of(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Mutated => Self::Mutated,
            Outcome::Admitted => Self::Admitted,
            Outcome::Denied => Self::Denied,
        }
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mutated => "mutated",
            Self::Admitted => "admitted",
            Self::Denied => "denied",
        })
    }
}

/// A test file that cannot be run: what is wrong, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct BadInput {
    pub file: String,
    pub message: String,
}

/// A `Test` ready to run: policies loaded, resources read, every case's TaskRun found.
pub struct Suite {
    /// The test file.
    pub file: String,
    pub name: String,
    set: PolicySet,
    catalog: Catalog,
    cases: Vec<Case>,
}

struct Case {
    name: String,
    namespace: String,
    object: Value,
    expect: Expect,
    patched: Option<Value>,
}

/// What one case gave.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: String,
    pub outcome: Expected,
    /// The injected steps, for the table.
    pub injected: Vec<String>,
    /// Why it failed, one line each; empty when it passed.
    pub failures: Vec<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The test files in `paths`: files as given, directories searched recursively for
/// `bookend-test.yaml` and `*.bookend-test.yaml`, sorted.
pub fn test_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, BadInput> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| BadInput {
            file: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        if meta.is_file() {
            out.push(path.clone());
            continue;
        }
        let found = policy_files(std::slice::from_ref(path)).map_err(|issue| BadInput {
            file: path.display().to_string(),
            message: issue.message,
        })?;
        out.extend(found.into_iter().filter(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == FILE_NAME || n.ends_with(&format!(".{FILE_NAME}")))
        }));
    }
    Ok(out)
}

/// Reads a test file: every `Test` document in it, loaded.
pub fn load(file: &Path, settings: &Settings) -> Result<Vec<Suite>, BadInput> {
    let label = file.display().to_string();
    let bad = |message: String| BadInput {
        file: label.clone(),
        message,
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(format!("cannot read: {e}")))?;
    let docs = yaml_documents(&text).map_err(bad)?;
    if docs.is_empty() {
        return Err(bad("no Test document".to_owned()));
    }
    let dir = file.parent().unwrap_or(Path::new("."));
    docs.into_iter()
        .enumerate()
        .map(|(i, doc)| {
            let doc: TestDoc = serde_path_to_error::deserialize(doc)
                .map_err(|e| bad(format!("document {}: {}: {}", i + 1, e.path(), e.inner())))?;
            if doc.api_version != API_VERSION || doc.kind != KIND {
                return Err(bad(format!(
                    "document {}: expected apiVersion {API_VERSION}, kind {KIND}; got {}, {}",
                    i + 1,
                    doc.api_version,
                    doc.kind
                )));
            }
            Suite::build(&label, dir, doc, settings).map_err(bad)
        })
        .collect()
}

impl Suite {
    fn build(file: &str, dir: &Path, doc: TestDoc, settings: &Settings) -> Result<Self, String> {
        let test = &doc.metadata.name;
        let at = |p: &PathBuf| dir.join(p);
        if doc.policies.is_empty() {
            return Err(format!(
                "{test}: policies: list at least one file or directory"
            ));
        }
        let loaded = policy_set(
            &doc.policies.iter().map(at).collect::<Vec<_>>(),
            settings.clone(),
        );
        if !loaded.issues.is_empty() {
            let lines: Vec<String> = loaded.issues.iter().map(ToString::to_string).collect();
            return Err(format!(
                "{test}: the policies are invalid (see `bookend validate`):\n  {}",
                lines.join("\n  ")
            ));
        }
        let resources: Vec<PathBuf> = doc.resources.iter().map(at).collect();
        let catalog = load_catalog(&resources).map_err(|e| format!("{test}: resources: {e}"))?;
        let mut taskruns = Vec::new();
        let mut expanded = Vec::new();
        let files = policy_files(&resources).map_err(|i| format!("{test}: resources: {i}"))?;
        for f in files {
            let text = std::fs::read_to_string(&f)
                .map_err(|e| format!("{test}: {}: cannot read: {e}", f.display()))?;
            let objects =
                yaml_documents(&text).map_err(|e| format!("{test}: {}: {e}", f.display()))?;
            let pipeline_runs: Vec<Value> = objects
                .iter()
                .filter(|o| pipeline::is_pipeline_run(o))
                .cloned()
                .collect();
            taskruns.extend(
                objects
                    .into_iter()
                    .filter(|o| TaskRunView::new(o).is_some()),
            );
            // The TaskRuns of each PipelineRun, as its controller would create them.
            let mut notes = Vec::new();
            expanded.extend(
                pipeline::expand(
                    pipeline_runs,
                    &catalog,
                    "default",
                    None,
                    settings.tekton.version,
                    &mut notes,
                )
                .map_err(|e| format!("{test}: {}: {e}", f.display()))?,
            );
        }
        let mut cases = Vec::new();
        for (i, expect) in doc.results.into_iter().enumerate() {
            let found = match (&expect.task_run, &expect.pipeline_run, &expect.pipeline_task) {
                (Some(reference), None, None) => find(&taskruns, reference)
                    .map(|object| vec![(format!("/{reference}"), String::new(), object)]),
                (None, Some(run), Some(task)) => children(&expanded, run, task).map(|objects| {
                    let many = objects.len() > 1;
                    objects
                        .into_iter()
                        .enumerate()
                        .map(|(n, o)| {
                            let instance = if many { format!(" [{n}]") } else { String::new() };
                            (format!("/{run}/{task}"), instance, o)
                        })
                        .collect()
                }),
                _ => Err(format!(
                    "results[{i}]: name the TaskRun under test with taskRun, or with pipelineRun and pipelineTask"
                )),
            }
            .map_err(|e| format!("{test}: {e}"))?;
            let patched = match &expect.patched_task_run {
                None => None,
                Some(p) => Some(read_one(&at(p)).map_err(|e| format!("{test}: {e}"))?),
            };
            for (what, instance, object) in found {
                let view = TaskRunView::new(&object).expect("filtered to TaskRuns");
                let namespace = expect
                    .namespace
                    .clone()
                    .or_else(|| view.namespace().map(str::to_owned))
                    .unwrap_or_else(|| "default".to_owned());
                cases.push(Case {
                    name: format!(
                        "{}{instance}",
                        expect
                            .name
                            .clone()
                            .unwrap_or_else(|| format!("{namespace}{what}"))
                    ),
                    namespace,
                    object,
                    expect: expect.clone(),
                    patched: patched.clone(),
                });
            }
        }
        Ok(Self {
            file: file.to_owned(),
            name: doc.metadata.name,
            set: loaded.set,
            catalog,
            cases,
        })
    }

    /// Runs every case.
    pub fn run(&self) -> Vec<CaseResult> {
        self.cases.iter().map(|c| self.run_case(c)).collect()
    }

    fn run_case(&self, case: &Case) -> CaseResult {
        let expect = &case.expect;
        let decision = engine::decide(
            Request {
                object: &case.object,
                namespace: &case.namespace,
                dry_run: expect.dry_run,
            },
            &self.set,
            &self.catalog,
        );
        let outcome = Expected::of(decision.outcome);
        let steps = step_names(&decision.object);
        let injected: Vec<String> = steps
            .iter()
            .filter(|s| {
                decision.outcome != Outcome::Denied
                    && self.set.defines_step(s)
                    && !self.set.settings().is_reset_name(s)
            })
            .cloned()
            .collect();
        let mut failures = Vec::new();
        if outcome != expect.result {
            let mut line = format!("result: expected {}, got {outcome}", expect.result);
            if let Some(message) = &decision.message {
                line.push_str(&format!(" ({message})"));
            }
            failures.push(line);
        }
        if let Some(want) = &expect.injected
            && *want != injected
        {
            failures.push(format!("injected: expected {want:?}, got {injected:?}"));
        }
        if let Some(want) = &expect.steps
            && *want != steps
        {
            failures.push(format!("steps: expected {want:?}, got {steps:?}"));
        }
        if let Some(want) = &expect.message {
            match &decision.message {
                Some(got) if got.contains(want.as_str()) => {}
                Some(got) => failures.push(format!(
                    "message: expected it to contain {want:?}, got {got:?}"
                )),
                None => failures.push(format!(
                    "message: expected a denial containing {want:?}, got none"
                )),
            }
        }
        match &expect.warnings {
            Some(want) if want.is_empty() && !decision.warnings.is_empty() => {
                failures.push(format!(
                    "warnings: expected none, got {:?}",
                    decision.warnings
                ));
            }
            Some(want) => {
                for w in want {
                    if !decision.warnings.iter().any(|g| g.contains(w.as_str())) {
                        failures.push(format!(
                            "warnings: none contains {w:?}; got {:?}",
                            decision.warnings
                        ));
                    }
                }
            }
            None => {}
        }
        if let Some(want) = &case.patched {
            let mut got = decision.object.clone();
            if want
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(engine::record::ANNOTATION))
                .is_none()
            {
                drop_record(&mut got);
            }
            let lines = diff(want, &got);
            if !lines.is_empty() {
                failures.push(format!(
                    "patchedTaskRun {}: the admitted TaskRun differs:",
                    expect
                        .patched_task_run
                        .as_ref()
                        .map_or(String::new(), |p| p.display().to_string())
                ));
                failures.extend(lines.into_iter().map(|l| format!("  {l}")));
            }
        }
        CaseResult {
            name: case.name.clone(),
            outcome,
            injected,
            failures,
        }
    }

    /// How many cases.
    pub fn len(&self) -> usize {
        self.cases.len()
    }
}

/// Removes the record annotation (and `annotations` when that leaves it empty).
fn drop_record(object: &mut Value) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.remove(engine::record::ANNOTATION);
        if annotations.is_empty() {
            meta.remove("annotations");
        }
    }
}

fn step_names(object: &Value) -> Vec<String> {
    TaskRunView::new(object)
        .map(|v| {
            v.steps()
                .iter()
                .map(|s| tekton::step_name(s).unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The TaskRun `reference` names: `name` or `namespace/name`, matched against
/// `metadata.name` and `metadata.generateName`.
fn find(taskruns: &[Value], reference: &str) -> Result<Value, String> {
    let (namespace, name) = match reference.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, reference),
    };
    let meta = |o: &Value, k: &str| {
        o.pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let found: Vec<&Value> = taskruns
        .iter()
        .filter(|o| {
            (meta(o, "name").as_deref() == Some(name)
                || meta(o, "generateName").as_deref() == Some(name))
                && namespace
                    .is_none_or(|ns| meta(o, "namespace").as_deref().unwrap_or("default") == ns)
        })
        .collect();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let known: BTreeMap<String, ()> = taskruns
                .iter()
                .filter_map(|o| meta(o, "name").or_else(|| meta(o, "generateName")))
                .map(|n| (n, ()))
                .collect();
            Err(format!(
                "results: taskRun {reference:?} is not among the resources' TaskRuns {:?}",
                known.keys().collect::<Vec<_>>()
            ))
        }
        _ => Err(format!(
            "results: taskRun {reference:?} names {} TaskRuns; write it as namespace/name",
            found.len()
        )),
    }
}

/// The TaskRuns a PipelineRun (`name` or `namespace/name`, its name or generateName) creates
/// for one PipelineTask, every matrix instance.
fn children(expanded: &[Value], run: &str, task: &str) -> Result<Vec<Value>, String> {
    let (namespace, name) = match run.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, run),
    };
    let label = |o: &Value, k: &str| {
        o.pointer("/metadata/labels")
            .and_then(|l| l.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let generated = format!("{name}{}", crate::tekton::pipeline::GENERATED_SUFFIX);
    let of_run: Vec<&Value> = expanded
        .iter()
        .filter(|o| {
            label(o, PIPELINE_RUN_LABEL).is_some_and(|l| l == name || l == generated)
                && namespace.is_none_or(|ns| {
                    o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
                })
        })
        .collect();
    if of_run.is_empty() {
        return Err(format!(
            "results: pipelineRun {run:?} is not among the resources' PipelineRuns (or creates no TaskRun)"
        ));
    }
    let found: Vec<Value> = of_run
        .iter()
        .filter(|o| label(o, PIPELINE_TASK_LABEL).as_deref() == Some(task))
        .map(|o| (*o).clone())
        .collect();
    if found.is_empty() {
        let known: BTreeMap<String, ()> = of_run
            .iter()
            .filter_map(|o| label(o, PIPELINE_TASK_LABEL))
            .map(|t| (t, ()))
            .collect();
        return Err(format!(
            "results: pipelineTask {task:?} of PipelineRun {run:?} creates no TaskRun; those that do: {:?}",
            known.keys().collect::<Vec<_>>()
        ));
    }
    Ok(found)
}

/// A file with exactly one object.
fn read_one(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut docs = yaml_documents(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if docs.len() != 1 {
        return Err(format!(
            "{}: expected one object, found {}",
            path.display(),
            docs.len()
        ));
    }
    Ok(docs.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: creds}\nspec:\n  match: {namespaces: [team-*]}\n  preSteps: [{name: bookend-creds, image: alpine}]\n";
    const RUN: &str = "apiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {generateName: build-, namespace: team-a}\nspec:\n  taskSpec:\n    steps: [{name: build, image: go}]\n";

    fn suite(results: &str) -> Result<Vec<Suite>, BadInput> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
        std::fs::write(dir.path().join("run.yaml"), RUN).unwrap();
        let file = dir.path().join("bookend-test.yaml");
        std::fs::write(
            &file,
            format!(
                "apiVersion: cli.bookend.dev/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [policy.yaml]\nresources: [run.yaml]\nresults:\n{results}"
            ),
        )
        .unwrap();
        load(&file, &Settings::default())
    }

    #[test]
    fn a_matching_expectation_passes_and_a_wrong_one_says_why() {
        let suites = suite(
            "- {taskRun: build-, result: mutated, injected: [bookend-creds], steps: [bookend-creds, build], warnings: []}\n\
             - {taskRun: build-, namespace: other, result: mutated, injected: [bookend-x]}\n",
        )
        .unwrap();
        let results = suites[0].run();
        assert!(results[0].passed(), "{:?}", results[0].failures);
        assert_eq!(results[0].name, "team-a/build-");
        assert_eq!(
            results[1].failures,
            [
                "result: expected mutated, got admitted",
                "injected: expected [\"bookend-x\"], got []",
            ]
        );
    }

    #[test]
    fn unknown_taskruns_fields_and_kinds_are_bad_input() {
        let e = suite("- {taskRun: nope, result: mutated}\n").err().unwrap();
        assert!(e.message.contains("\"nope\" is not among"), "{e}");
        let e = suite("- {taskRun: build-, result: mutate}\n")
            .err()
            .unwrap();
        assert!(e.message.contains("results[0].result"), "{e}");
        let e = suite("- {taskRun: build-, result: mutated, injectd: []}\n")
            .err()
            .unwrap();
        assert!(e.message.contains("injectd"), "{e}");
    }
}
