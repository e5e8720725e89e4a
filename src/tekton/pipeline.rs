//! The TaskRuns Tekton's PipelineRun controller creates for a PipelineRun, computed offline so
//! that `bookend render` and `bookend test` can put each one through the engine.
//!
//! Pure: the PipelineRun and, for a `pipelineRef`, the Pipeline come in as JSON; the TaskRuns go
//! out as JSON, as the controller builds them before it sends the CREATE (so before any
//! admission webhook, bookend's included). Each rule follows Tekton v1.15.0 (where an older
//! release the cluster runs differs and the difference is known, that release: see
//! [`preview_for`]), named by its upstream function (`pkg/reconciler/pipelinerun/`, `pkg/apis/pipeline/v1/`, knative's
//! `kmeta`):
//!
//! - the PipelineRun's defaults (`PipelineRun.SetDefaults`, which the reconciler calls itself:
//!   `timeouts.pipeline` 1h, `taskRunTemplate.serviceAccountName: default`), its
//!   `tekton.dev/pipeline` label (`propagatePipelineNameLabelToPipelineRun`) and the Pipeline's
//!   labels and annotations merged in (`storePipelineSpecAndMergeMeta`);
//! - the Pipeline's defaults (`PipelineSpec.SetDefaults`: `taskRef.kind: Task`, param and result
//!   types of embedded Tasks);
//! - parameters and context (`ApplyParameters`, `ApplyContexts`, `ApplyPipelineTaskContexts`):
//!   `$(params.…)` and `$(context.…)` are substituted; `$(tasks.<t>.results.<r>)` is known only
//!   when that task has run, so it stays as written and is reported;
//! - names (`GetNamesOfTaskRuns`, `getNewRunNames`, `kmeta.ChildName`), matrix fan-out
//!   (`Matrix.FanOut`), and the TaskRun itself (`createTaskRun`: labels by
//!   `combineTaskRunAndTaskSpecLabels`, annotations by `combineTaskRunAndTaskSpecAnnotations`,
//!   the controller reference, `GetTaskRunSpec` for the service account, pod template, step and
//!   sidecar specs, `pipelineRunTimeout` for the timeout (since v1.11.0; and the
//!   `taskRunSpecs` entry's `timeout` since v1.4.0), `getTaskrunWorkspaces`);
//! - `when` expressions are stated; those without result references are evaluated, as the
//!   controller does before it creates anything (a false one: no TaskRun).
//!
//! What it does not model is said in each [`Preview`]'s notes (see docs/policy.md, "PipelineRuns").

use std::collections::{BTreeMap, BTreeSet};

use md5::{Digest, Md5};
use serde_json::{Map, Value, json};

use super::cluster::{self, Version};
use super::restrict_length;

/// First Tekton whose `createTaskRun` gives a child TaskRun without a timeout of its own the
/// PipelineRun's `timeouts.tasks` (or `finally`) when longer than the default
/// (`pipelineRunTimeout`); before, `spec.timeout` comes from the pipeline task's only.
const PIPELINE_RUN_TIMEOUT_SINCE: Version = Version::new(1, 11, 0);
/// First Tekton whose `getTaskrunLabels` gives a child TaskRun the `tekton.dev/pipelineRunUID`
/// label; before, only the PipelineRun's name.
const PIPELINE_RUN_UID_LABEL_SINCE: Version = Version::new(0, 63, 0);
/// First Tekton with `taskRunSpecs[].timeout` (`PipelineTaskRunSpec.Timeout`, which overrides
/// the pipeline task's); before, the field does not exist and is ignored.
const TASK_RUN_SPEC_TIMEOUT_SINCE: Version = Version::new(1, 4, 0);

/// Label with the PipelineRun's name on every TaskRun it creates.
pub const PIPELINE_RUN_LABEL: &str = "tekton.dev/pipelineRun";
/// Label with the PipelineRun's uid.
pub const PIPELINE_RUN_UID_LABEL: &str = "tekton.dev/pipelineRunUID";
/// Label with the PipelineTask's name.
pub const PIPELINE_TASK_LABEL: &str = "tekton.dev/pipelineTask";
/// Label with the Pipeline's name.
pub const PIPELINE_LABEL: &str = "tekton.dev/pipeline";
/// Label saying whether the PipelineTask is one of `tasks` or `finally`.
pub const MEMBER_OF_LABEL: &str = "tekton.dev/memberOf";
/// Annotation of a PipelineTask with `onError: continue`.
pub const ON_ERROR_ANNOTATION: &str = "pipeline.tekton.dev/pipeline-task-on-error";

/// Tekton's `default-timeout-minutes` when the cluster's `config-defaults` does not set it.
const DEFAULT_TIMEOUT_SECONDS: u128 = 60 * 60;
/// `metadata.name` shown for a PipelineRun that has only a `generateName`: the API server adds
/// five random characters.
pub const GENERATED_SUFFIX: &str = "xxxxx";

/// Why a PipelineRun cannot be previewed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PreviewError {
    /// A field that is missing or of the wrong shape.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// `spec.pipelineRef` names a Pipeline that was not given.
    #[error(
        "spec.pipelineRef: Pipeline {namespace}/{name} is not among the objects given; pass its file with --tasks (or -f)"
    )]
    PipelineNotFound { namespace: String, name: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> PreviewError {
    PreviewError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// Everything the controller would create for one PipelineRun.
#[derive(Debug, Clone)]
pub struct Preview {
    /// `metadata.name` (a `generateName` with [`GENERATED_SUFFIX`]).
    pub name: String,
    pub namespace: String,
    /// One entry per PipelineTask and matrix instance, `tasks` first, then `finally`.
    pub children: Vec<Child>,
    /// What the preview could not know (a remote Pipeline, a PVC's name, …), one line each.
    pub notes: Vec<String>,
}

/// One run the controller creates for a PipelineTask.
#[derive(Debug, Clone)]
pub struct Child {
    pub pipeline_task: String,
    /// One of the Pipeline's `finally` tasks.
    pub finally: bool,
    /// `(index, count)` of a matrix instance.
    pub matrix: Option<(usize, usize)>,
    pub when: When,
    /// Result references (`$(tasks.build.results.digest)`) left as written in the params: the
    /// controller substitutes them when the task they name has run.
    pub unresolved: Vec<String>,
    pub run: Run,
}

/// Whether the PipelineTask's `when` expressions let it run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// No `when` expressions.
    Always,
    /// True as far as can be known now; those that read results are listed, evaluated at run time.
    OnlyIf(Vec<String>),
    /// One is false: the controller creates no TaskRun.
    Skipped(String),
}

/// What the controller creates.
#[derive(Debug, Clone)]
pub enum Run {
    /// A TaskRun, as the controller sends it to the API server.
    TaskRun(Value),
    /// Something else (a CustomRun, a child PipelineRun): not a TaskRun, so nothing for bookend.
    Other(String),
}

impl Child {
    /// `metadata.name` of the run.
    pub fn name(&self) -> Option<&str> {
        match &self.run {
            Run::TaskRun(tr) => tr.pointer("/metadata/name").and_then(Value::as_str),
            Run::Other(_) => None,
        }
    }
}

/// Expands a `tekton.dev/v1` PipelineRun into what the newest Tekton's controller creates.
/// `namespace` is used when the PipelineRun has none; `pipeline` finds a Pipeline object by
/// (namespace, name).
pub fn preview(
    pipeline_run: &Value,
    namespace: &str,
    pipeline: &dyn Fn(&str, &str) -> Option<Value>,
) -> Result<Preview, PreviewError> {
    preview_for(pipeline_run, namespace, pipeline, cluster::NEWEST)
}

/// [`preview`] as the controller of Tekton `version` creates the TaskRuns. Known differences
/// from the newest: a child TaskRun's timeout (before v1.11.0 the PipelineRun's
/// `timeouts.tasks`/`finally` do not reach it; before v1.4.0 neither does `taskRunSpecs[]`'s
/// `timeout`). Found by running the runtime suite's scenario 17 on each Tekton line
/// (docs/compatibility.md).
pub fn preview_for(
    pipeline_run: &Value,
    namespace: &str,
    pipeline: &dyn Fn(&str, &str) -> Option<Value>,
    version: Version,
) -> Result<Preview, PreviewError> {
    if pipeline_run.get("kind").and_then(Value::as_str) != Some("PipelineRun") {
        return Err(invalid("kind", "not a PipelineRun"));
    }
    match pipeline_run.get("apiVersion").and_then(Value::as_str) {
        Some("tekton.dev/v1") => {}
        other => {
            return Err(invalid(
                "apiVersion",
                format!(
                    "{} is not previewed; write the PipelineRun as tekton.dev/v1 (what Tekton stores)",
                    other.unwrap_or("(none)")
                ),
            ));
        }
    }
    let mut notes = Vec::new();
    let meta = pipeline_run.get("metadata").and_then(Value::as_object);
    let meta_str = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let generate_name = meta_str("generateName");
    let name = match (meta_str("name"), generate_name) {
        (Some(n), _) => n.to_owned(),
        (None, Some(g)) => {
            notes.push(format!(
                "metadata.generateName {g:?}: the API server adds five random characters, shown as {GENERATED_SUFFIX:?}; TaskRun names follow from the real name"
            ));
            format!("{g}{GENERATED_SUFFIX}")
        }
        (None, None) => {
            return Err(invalid(
                "metadata.name",
                "a PipelineRun needs metadata.name or metadata.generateName",
            ));
        }
    };
    let namespace = meta_str("namespace").unwrap_or(namespace).to_owned();
    let uid = meta_str("uid").unwrap_or("").to_owned();
    let spec = pipeline_run
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("spec", "a PipelineRun needs a spec"))?;

    // PipelineRun.SetDefaults: the reconciler calls it on every PipelineRun it reads.
    let mut pr_labels = string_map(meta.and_then(|m| m.get("labels")));
    let mut pr_annotations = string_map(meta.and_then(|m| m.get("annotations")));
    let mut timeouts = spec
        .get("timeouts")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    timeouts
        .entry("pipeline")
        .or_insert_with(|| Value::from(format_duration(DEFAULT_TIMEOUT_SECONDS * NANOS)));
    let mut template = spec
        .get("taskRunTemplate")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if template
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        template.insert("serviceAccountName".into(), "default".into());
    }

    // The Pipeline: inline, or by name (GetPipelineData).
    let (pipeline_spec, pipeline_meta) = match (spec.get("pipelineSpec"), spec.get("pipelineRef")) {
        (Some(ps), None) => (ps.clone(), meta.cloned().unwrap_or_default()),
        (None, Some(pref)) => {
            let ref_name = pref.get("name").and_then(Value::as_str).unwrap_or("");
            if ref_name.is_empty() {
                let resolver = pref
                    .get("resolver")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                notes.push(format!(
                    "spec.pipelineRef: the Pipeline comes through the {resolver} resolver when the PipelineRun runs; it is unresolved here (fetch it and pass it with --tasks, as a PipelineRun with pipelineRef.name or pipelineSpec)"
                ));
                return Ok(Preview {
                    name,
                    namespace,
                    children: Vec::new(),
                    notes,
                });
            }
            let p =
                pipeline(&namespace, ref_name).ok_or_else(|| PreviewError::PipelineNotFound {
                    namespace: namespace.clone(),
                    name: ref_name.to_owned(),
                })?;
            let ps = p
                .get("spec")
                .cloned()
                .ok_or_else(|| invalid("spec.pipelineRef", "the Pipeline has no spec"))?;
            let pm = p
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            (ps, pm)
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "spec",
                "expected exactly one of pipelineRef and pipelineSpec, got both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "spec",
                "expected exactly one of pipelineRef and pipelineSpec",
            ));
        }
    };

    // propagatePipelineNameLabelToPipelineRun, then storePipelineSpecAndMergeMeta (PipelineRun
    // labels and annotations win over the Pipeline's).
    let pipeline_ref_name = spec
        .get("pipelineRef")
        .and_then(|r| r.get("name"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    if !pr_labels.contains_key(PIPELINE_LABEL) {
        let value = match (pipeline_ref_name, generate_name) {
            (Some(n), _) => n.to_owned(),
            (None, Some(g)) => Some(restrict_length(g))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| name.clone()),
            (None, None) => name.clone(),
        };
        pr_labels.insert(PIPELINE_LABEL.into(), value);
    }
    let pm_str = |k: &str| {
        pipeline_meta
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    for (k, v) in string_map(pipeline_meta.get("labels")) {
        pr_labels.entry(k).or_insert(v);
    }
    // An inline spec's metadata is the PipelineRun's own (its name, once the API server set it).
    let pipeline_name = match pm_str("name") {
        Some(n) => n.to_owned(),
        None if spec.contains_key("pipelineSpec") => name.clone(),
        None => String::new(),
    };
    if !pipeline_name.is_empty()
        && (pr_labels.get(PIPELINE_LABEL).is_none_or(String::is_empty)
            || pm_str("generateName").is_none())
    {
        pr_labels.insert(PIPELINE_LABEL.into(), pipeline_name.clone());
    }
    for (k, v) in string_map(pipeline_meta.get("annotations")) {
        if k != "kubectl.kubernetes.io/last-applied-configuration" {
            pr_annotations.entry(k).or_insert(v);
        }
    }

    let mut pipeline_spec = pipeline_spec;
    set_pipeline_defaults(&mut pipeline_spec);
    let replacements = Replacements::of(
        spec.get("params"),
        pipeline_spec.get("params"),
        &name,
        &namespace,
        &uid,
        &pipeline_name,
    );

    let pr = PipelineRunFacts {
        name: &name,
        namespace: &namespace,
        uid: &uid,
        labels: &pr_labels,
        annotations: &pr_annotations,
        template: &template,
        task_run_specs: spec
            .get("taskRunSpecs")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice),
        workspaces: spec
            .get("workspaces")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice),
        timeouts: &timeouts,
        version,
    };
    let mut children = Vec::new();
    for (member, finally) in [("tasks", false), ("finally", true)] {
        let Some(tasks) = pipeline_spec.get(member).and_then(Value::as_array) else {
            continue;
        };
        for (i, task) in tasks.iter().enumerate() {
            let field = format!("pipelineSpec.{member}[{i}]");
            let task = replacements.apply_to_pipeline_task(task);
            children.extend(expand_task(&pr, &task, finally, &field, &mut notes)?);
        }
    }
    Ok(Preview {
        name,
        namespace,
        children,
        notes,
    })
}

/// The PipelineRun's parts each TaskRun takes something from.
struct PipelineRunFacts<'a> {
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    template: &'a Map<String, Value>,
    task_run_specs: &'a [Value],
    workspaces: &'a [Value],
    timeouts: &'a Map<String, Value>,
    /// The Tekton whose controller creates the TaskRuns.
    version: Version,
}

impl PipelineRunFacts<'_> {
    /// `PipelineRun.GetTaskRunSpec`: the template, overridden by the task's `taskRunSpecs` entry.
    fn task_run_spec(&self, pipeline_task: &str) -> Map<String, Value> {
        let mut s = Map::new();
        for key in ["serviceAccountName", "podTemplate"] {
            if let Some(v) = self.template.get(key) {
                s.insert(key.into(), v.clone());
            }
        }
        for entry in self.task_run_specs {
            if entry.get("pipelineTaskName").and_then(Value::as_str) != Some(pipeline_task) {
                continue;
            }
            if let Some(pod) = entry.get("podTemplate") {
                // pod.MergePodTemplateWithDefault: the task's fields win, field by field.
                let mut merged = s
                    .get("podTemplate")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                if let Some(pod) = pod.as_object() {
                    for (k, v) in pod {
                        merged.insert(k.clone(), v.clone());
                    }
                }
                s.insert("podTemplate".into(), Value::Object(merged));
            }
            if let Some(sa) = entry
                .get("serviceAccountName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                s.insert("serviceAccountName".into(), sa.into());
            }
            for key in [
                "stepSpecs",
                "sidecarSpecs",
                "metadata",
                "computeResources",
                "timeout",
            ] {
                match entry.get(key) {
                    Some(v) => s.insert(key.into(), v.clone()),
                    None => s.remove(key),
                };
            }
        }
        s
    }
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `PipelineSpec.SetDefaults`: a `taskRef` without a resolver gets `kind: Task`; an embedded
/// Task's params and results get their types (`ParamSpec.SetDefaults`, `TaskResult.SetDefaults`).
fn set_pipeline_defaults(spec: &mut Value) {
    for member in ["tasks", "finally"] {
        let Some(tasks) = spec.get_mut(member).and_then(Value::as_array_mut) else {
            continue;
        };
        for task in tasks {
            if let Some(task_ref) = task.get_mut("taskRef").and_then(Value::as_object_mut) {
                let has = |k: &str| {
                    task_ref
                        .get(k)
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty())
                };
                if !has("kind") && !has("resolver") && has("name") {
                    task_ref.insert("kind".into(), "Task".into());
                }
            }
            if let Some(task_spec) = task.get_mut("taskSpec") {
                set_task_spec_defaults(task_spec);
            }
        }
    }
}

fn set_task_spec_defaults(task_spec: &mut Value) {
    if let Some(params) = task_spec.get_mut("params").and_then(Value::as_array_mut) {
        for p in params.iter_mut().filter_map(Value::as_object_mut) {
            if p.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
            {
                continue;
            }
            let kind = if p.contains_key("properties") {
                "object"
            } else {
                match p.get("default") {
                    Some(Value::Array(_)) => "array",
                    Some(Value::Object(_)) => "object",
                    _ => "string",
                }
            };
            p.insert("type".into(), kind.into());
        }
    }
    if let Some(results) = task_spec.get_mut("results").and_then(Value::as_array_mut) {
        for r in results.iter_mut().filter_map(Value::as_object_mut) {
            if r.get("type")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                let kind = if r.contains_key("properties") {
                    "object"
                } else {
                    "string"
                };
                r.insert("type".into(), kind.into());
            }
        }
    }
}

/// The substitutions of `ApplyParameters` and `ApplyContexts`: `$(params.x)` (also
/// `params["x"]`, `params['x']`), `$(params.a[1])`, `$(params.a[*])`, `$(params.o.key)`,
/// `$(context.pipelineRun.name|namespace|uid)`, `$(context.pipeline.name)`.
struct Replacements {
    strings: BTreeMap<String, String>,
    arrays: BTreeMap<String, Vec<Value>>,
    objects: BTreeMap<String, Map<String, Value>>,
}

impl Replacements {
    fn of(
        run_params: Option<&Value>,
        declared: Option<&Value>,
        name: &str,
        namespace: &str,
        uid: &str,
        pipeline_name: &str,
    ) -> Self {
        let mut r = Self {
            strings: BTreeMap::new(),
            arrays: BTreeMap::new(),
            objects: BTreeMap::new(),
        };
        let given: Vec<(String, Value)> = run_params
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p.get("name")?.as_str()?.to_owned(), p.get("value")?.clone())))
            .collect();
        for (n, v) in &given {
            r.add(n, v);
        }
        // Defaults of params the PipelineRun does not set, after the given ones
        // (buildUnresolved*ParamDefaults: a default may refer to a given param).
        let defaults: Vec<(String, Value)> = declared
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let n = p.get("name")?.as_str()?;
                (!given.iter().any(|(g, _)| g == n))
                    .then(|| Some((n.to_owned(), p.get("default")?.clone())))?
            })
            .collect();
        for (n, v) in defaults {
            let v = r.apply_value(&v);
            r.add(&n, &v);
        }
        for (k, v) in [
            ("context.pipelineRun.name", name),
            ("context.pipeline.name", pipeline_name),
            ("context.pipelineRun.namespace", namespace),
            ("context.pipelineRun.uid", uid),
        ] {
            r.strings.insert(k.into(), v.into());
        }
        r
    }

    fn keys(name: &str) -> [String; 3] {
        [
            format!("params.{name}"),
            format!("params[\"{name}\"]"),
            format!("params['{name}']"),
        ]
    }

    fn add(&mut self, name: &str, value: &Value) {
        for key in Self::keys(name) {
            match value {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Some(s) = item.as_str() {
                            self.strings.insert(format!("{key}[{i}]"), s.to_owned());
                        }
                    }
                    self.arrays.insert(key, items.clone());
                }
                Value::Object(map) => {
                    self.objects.insert(key, map.clone());
                }
                other => {
                    self.strings
                        .insert(key, other.as_str().unwrap_or_default().to_owned());
                }
            }
        }
        if let Value::Object(map) = value {
            for (k, v) in map {
                if let Some(s) = v.as_str() {
                    self.strings
                        .insert(format!("params.{name}.{k}"), s.to_owned());
                }
            }
        }
    }

    /// Replaces every `$(key)` in a string.
    fn apply_str(&self, text: &str) -> String {
        super::replace_variables(text, |key| self.strings.get(key).map(String::as_str))
    }

    /// `key` when `text` is exactly `$(key[*])` (a whole array or object).
    fn whole(text: &str) -> Option<&str> {
        text.strip_prefix("$(")?.strip_suffix("[*])")
    }

    /// A param value (`ParamValue.ApplyReplacements`): a string that is exactly `$(p[*])` becomes
    /// the array or object; an array element that is exactly `$(a[*])` is expanded in place.
    fn apply_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => {
                if let Some(key) = Self::whole(s) {
                    if let Some(items) = self.arrays.get(key) {
                        return Value::Array(items.clone());
                    }
                    if let Some(map) = self.objects.get(key) {
                        return Value::Object(map.clone());
                    }
                }
                Value::String(self.apply_str(s))
            }
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item.as_str().and_then(Self::whole) {
                        Some(key) if self.arrays.contains_key(key) => {
                            out.extend(self.arrays[key].iter().cloned());
                        }
                        _ => out.push(self.apply_value(item)),
                    }
                }
                Value::Array(out)
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.apply_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Every string in a JSON tree (an embedded Task's spec, `ApplyReplacements`).
    fn apply_tree(&self, value: &mut Value) {
        match value {
            Value::String(s) if s.contains("$(") => *s = self.apply_str(s),
            Value::Array(items) => {
                // A command or args element that is exactly `$(params.a[*])` is expanded.
                let mut out = Vec::with_capacity(items.len());
                for mut item in std::mem::take(items) {
                    match item.as_str().and_then(Self::whole) {
                        Some(key) if self.arrays.contains_key(key) => {
                            out.extend(self.arrays[key].iter().cloned());
                        }
                        _ => {
                            self.apply_tree(&mut item);
                            out.push(item);
                        }
                    }
                }
                *items = out;
            }
            Value::Object(map) => map.values_mut().for_each(|v| self.apply_tree(v)),
            _ => {}
        }
    }

    fn apply_params(&self, params: &mut Value) {
        if let Some(list) = params.as_array_mut() {
            for p in list.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(v) = p.get("value") {
                    let v = self.apply_value(v);
                    p.insert("value".into(), v);
                }
            }
        }
    }

    /// `replaceVariablesInPipelineTasks` and `propagateParams` on one PipelineTask.
    fn apply_to_pipeline_task(&self, task: &Value) -> Value {
        let mut task = task.clone();
        let Some(t) = task.as_object_mut() else {
            return task;
        };
        if let Some(params) = t.get_mut("params") {
            self.apply_params(params);
        }
        if let Some(matrix) = t.get_mut("matrix") {
            if let Some(params) = matrix.get_mut("params") {
                self.apply_params(params);
            }
            if let Some(include) = matrix.get_mut("include").and_then(Value::as_array_mut) {
                for inc in include {
                    if let Some(params) = inc.get_mut("params") {
                        self.apply_params(params);
                    }
                }
            }
        }
        if let Some(when) = t.get_mut("when").and_then(Value::as_array_mut) {
            for w in when.iter_mut().filter_map(Value::as_object_mut) {
                for key in ["input", "cel"] {
                    if let Some(Value::String(s)) = w.get_mut(key) {
                        *s = self.apply_str(s);
                    }
                }
                if let Some(values) = w.get("values") {
                    let v = self.apply_value(values);
                    w.insert("values".into(), v);
                }
            }
        }
        if let Some(task_ref) = t.get_mut("taskRef").and_then(Value::as_object_mut) {
            if let Some(params) = task_ref.get_mut("params") {
                self.apply_params(params);
            }
            if let Some(Value::String(n)) = task_ref.get_mut("name") {
                *n = self.apply_str(n);
            }
        }
        if let Some(Value::String(on_error)) = t.get_mut("onError") {
            *on_error = self.apply_str(on_error);
        }
        for ws in t
            .get_mut("workspaces")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(Value::String(sub)) = ws.get_mut("subPath") {
                *sub = self.apply_str(sub);
            }
        }
        // propagateParams: the embedded Task sees the pipeline's params, a PipelineTask param of
        // the same name taking their place.
        let task_params = t.get("params").cloned();
        if let Some(task_spec) = t.get_mut("taskSpec") {
            let mut scoped = Self {
                strings: self.strings.clone(),
                arrays: self.arrays.clone(),
                objects: self.objects.clone(),
            };
            for p in task_params
                .as_ref()
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(n), Some(v)) = (p.get("name").and_then(Value::as_str), p.get("value"))
                else {
                    continue;
                };
                for key in Self::keys(n) {
                    match v {
                        Value::String(s) if scoped.strings.contains_key(&key) => {
                            scoped.strings.insert(key, s.clone());
                        }
                        Value::Array(a) if scoped.arrays.contains_key(&key) => {
                            scoped.arrays.insert(key, a.clone());
                        }
                        Value::Object(o) if scoped.objects.contains_key(&key) => {
                            scoped.objects.insert(key, o.clone());
                            for (k, v) in o {
                                if let Some(s) = v.as_str() {
                                    scoped.strings.insert(format!("params.{n}.{k}"), s.into());
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            // The embedded Task's own declarations are not substituted, its steps and the rest are.
            if let Some(spec) = task_spec.as_object_mut() {
                for (k, v) in spec.iter_mut() {
                    if !matches!(k.as_str(), "params" | "results" | "metadata") {
                        scoped.apply_tree(v);
                    }
                }
            }
        }
        task
    }
}

/// The runs of one PipelineTask (several for a matrix).
fn expand_task(
    pr: &PipelineRunFacts<'_>,
    task: &Value,
    finally: bool,
    field: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Child>, PreviewError> {
    let pt_name = task
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(format!("{field}.name"), "a PipelineTask needs a name"))?;
    let when = when_of(task);
    // A taskRef to something other than a Task is a custom task (a CustomRun); pipelineRef or
    // pipelineSpec a child PipelineRun. Neither is a TaskRun.
    let other = if task.get("pipelineRef").is_some() || task.get("pipelineSpec").is_some() {
        Some("a child PipelineRun (pipelines in pipelines), not a TaskRun")
    } else if let Some(r) = task.get("taskRef") {
        let api = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        (!api.is_empty() && !matches!(kind, "Task" | "ClusterTask" | ""))
            .then_some("a CustomRun (custom task), not a TaskRun")
    } else {
        None
    };
    if other.is_none() && task.get("taskRef").is_none() && task.get("taskSpec").is_none() {
        return Err(invalid(
            field,
            format!(
                "PipelineTask {pt_name:?} must specify one of taskRef, taskSpec, pipelineRef or pipelineSpec"
            ),
        ));
    }
    let combinations = match task.get("matrix") {
        Some(m) => fan_out(m),
        None => Vec::new(),
    };
    let count = if task.get("matrix").is_some() {
        combinations.len()
    } else {
        1
    };
    let names = run_names(pt_name, pr.name, count);
    let mut children = Vec::new();
    for (i, run_name) in names.into_iter().enumerate() {
        let matrix = task.get("matrix").map(|_| (i, count));
        if let Some(what) = other {
            children.push(Child {
                pipeline_task: pt_name.to_owned(),
                finally,
                matrix,
                when: when.clone(),
                unresolved: Vec::new(),
                run: Run::Other(what.to_owned()),
            });
            continue;
        }
        let combination = combinations.get(i).cloned().unwrap_or_default();
        let task_run = task_run(pr, task, pt_name, &run_name, combination, finally, notes);
        let unresolved = result_refs(task_run.pointer("/spec/params"));
        children.push(Child {
            pipeline_task: pt_name.to_owned(),
            finally,
            matrix,
            when: when.clone(),
            unresolved,
            run: Run::TaskRun(task_run),
        });
    }
    Ok(children)
}

/// `createTaskRun`: the TaskRun as the controller sends it.
fn task_run(
    pr: &PipelineRunFacts<'_>,
    task: &Value,
    pt_name: &str,
    run_name: &str,
    combination: Vec<Value>,
    finally: bool,
    notes: &mut Vec<String>,
) -> Value {
    let trs = pr.task_run_spec(pt_name);
    let retries = task.get("retries").and_then(Value::as_i64).unwrap_or(0);
    // ApplyPipelineTaskContexts: $(context.pipelineTask.retries) in the params.
    let mut params: Vec<Value> = combination;
    for p in task
        .get("params")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut p = p.clone();
        if let Some(Value::String(s)) = p.get_mut("value") {
            *s = s.replace("$(context.pipelineTask.retries)", &retries.to_string());
        }
        params.push(p);
    }

    // combineTaskRunAndTaskSpecLabels / …Annotations: the taskRunSpecs metadata first, then the
    // PipelineRun's (createChildResourceLabels), then the embedded Task's metadata; the first
    // writer of a key wins (addMetadataByPrecedence).
    let trs_meta = trs.get("metadata");
    let spec_meta = task.get("taskSpec").and_then(|s| s.get("metadata"));
    let mut labels = Map::new();
    let mut child_labels = pr.labels.clone();
    child_labels.insert(PIPELINE_RUN_LABEL.into(), pr.name.into());
    if pr.version >= PIPELINE_RUN_UID_LABEL_SINCE {
        child_labels.insert(PIPELINE_RUN_UID_LABEL.into(), pr.uid.into());
    }
    child_labels.insert(PIPELINE_TASK_LABEL.into(), pt_name.into());
    child_labels.insert(
        MEMBER_OF_LABEL.into(),
        if finally { "finally" } else { "tasks" }.into(),
    );
    for source in [
        string_map(trs_meta.and_then(|m| m.get("labels"))),
        child_labels,
        string_map(spec_meta.and_then(|m| m.get("labels"))),
    ] {
        for (k, v) in source {
            labels.entry(k).or_insert(Value::String(v));
        }
    }
    let mut annotations = Map::new();
    let child_annotations: BTreeMap<String, String> = pr
        .annotations
        .iter()
        .filter(|(k, _)| !k.starts_with("chains.tekton.dev/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for source in [
        string_map(trs_meta.and_then(|m| m.get("annotations"))),
        child_annotations,
        string_map(spec_meta.and_then(|m| m.get("annotations"))),
    ] {
        for (k, v) in source {
            annotations.entry(k).or_insert(Value::String(v));
        }
    }
    if task.get("onError").and_then(Value::as_str) == Some("continue") {
        annotations.insert(ON_ERROR_ANNOTATION.into(), "continue".into());
    }

    let mut metadata = Map::new();
    metadata.insert("name".into(), run_name.into());
    metadata.insert("namespace".into(), pr.namespace.into());
    metadata.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": "tekton.dev/v1",
            "kind": "PipelineRun",
            "name": pr.name,
            "uid": pr.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]),
    );
    metadata.insert("labels".into(), Value::Object(labels));
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }

    let mut spec = Map::new();
    if retries != 0 {
        spec.insert("retries".into(), retries.into());
    }
    if !params.is_empty() {
        spec.insert("params".into(), Value::Array(params));
    }
    for key in [
        "serviceAccountName",
        "podTemplate",
        "stepSpecs",
        "sidecarSpecs",
        "computeResources",
    ] {
        if let Some(v) = trs.get(key).filter(|v| !is_empty(v)) {
            spec.insert(key.into(), v.clone());
        }
    }
    let timeout = task
        .get("timeout")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            (pr.version >= PIPELINE_RUN_TIMEOUT_SINCE)
                .then(|| pipeline_run_timeout(pr.timeouts, finally))
                .flatten()
        });
    let timeout = trs
        .get("timeout")
        .and_then(Value::as_str)
        .filter(|_| pr.version >= TASK_RUN_SPEC_TIMEOUT_SINCE)
        .map(str::to_owned)
        .or(timeout);
    if let Some(t) = timeout {
        let normal = parse_duration(&t).map_or(t, format_duration);
        spec.insert("timeout".into(), normal.into());
    }
    if let Some(task_ref) = task.get("taskRef") {
        spec.insert("taskRef".into(), task_ref.clone());
    } else if let Some(task_spec) = task.get("taskSpec") {
        // The embedded Task without its metadata (`EmbeddedTask.TaskSpec`).
        let mut ts = task_spec.clone();
        if let Some(o) = ts.as_object_mut() {
            o.remove("metadata");
            o.remove("apiVersion");
            o.remove("kind");
            o.remove("spec");
        }
        spec.insert("taskSpec".into(), ts);
    }
    let workspaces = task_workspaces(pr, task, pt_name, notes);
    if !workspaces.is_empty() {
        spec.insert("workspaces".into(), Value::Array(workspaces));
    }
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": metadata,
        "spec": spec,
    })
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// `getTaskrunWorkspaces` and `taskWorkspaceByWorkspaceVolumeSource`: each PipelineTask
/// workspace bound to the PipelineRun's binding of the pipeline workspace it names.
fn task_workspaces(
    pr: &PipelineRunFacts<'_>,
    task: &Value,
    pt_name: &str,
    notes: &mut Vec<String>,
) -> Vec<Value> {
    let mut out = Vec::new();
    for ws in task
        .get("workspaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(ws_name) = ws.get("name").and_then(Value::as_str) else {
            continue;
        };
        let pipeline_ws = ws
            .get("workspace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(ws_name);
        let Some(binding) = pr
            .workspaces
            .iter()
            .find(|b| b.get("name").and_then(Value::as_str) == Some(pipeline_ws))
        else {
            continue;
        };
        let sub_path = combined_sub_path(
            binding.get("subPath").and_then(Value::as_str).unwrap_or(""),
            ws.get("subPath").and_then(Value::as_str).unwrap_or(""),
        );
        let mut b = binding.as_object().cloned().unwrap_or_default();
        if b.remove("volumeClaimTemplate").is_some() {
            notes.push(format!(
                "{pt_name}: workspace {ws_name:?} is a volumeClaimTemplate; the controller names its PVC at run time (shown as <generated>)"
            ));
            b.insert(
                "persistentVolumeClaim".into(),
                json!({"claimName": "<generated>"}),
            );
        }
        b.insert("name".into(), ws_name.into());
        if sub_path.is_empty() {
            b.remove("subPath");
        } else {
            b.insert("subPath".into(), sub_path.into());
        }
        out.push(Value::Object(b));
    }
    out
}

fn combined_sub_path(binding: &str, task: &str) -> String {
    match (binding.is_empty(), task.is_empty()) {
        (true, _) => task.to_owned(),
        (_, true) => binding.to_owned(),
        _ => format!("{binding}/{task}"),
    }
}

/// `pipelineRunTimeout`: the PipelineRun's tasks (or finally) timeout, only when it is longer
/// than the cluster's default (or 0, no timeout); otherwise none, and the TaskRun gets the
/// default.
fn pipeline_run_timeout(timeouts: &Map<String, Value>, finally: bool) -> Option<String> {
    let get = |k: &str| {
        timeouts
            .get(k)
            .and_then(Value::as_str)
            .and_then(parse_duration)
    };
    let (own, other) = if finally {
        ("finally", "tasks")
    } else {
        ("tasks", "finally")
    };
    let nanos = match (get(own), get("pipeline"), get(other)) {
        (Some(t), _, _) => t,
        (None, Some(p), Some(o)) => {
            if p == 0 || o == 0 {
                return None;
            }
            p.checked_sub(o)?
        }
        _ => return None,
    };
    (nanos == 0 || nanos > DEFAULT_TIMEOUT_SECONDS * NANOS).then(|| format_duration(nanos))
}

const NANOS: u128 = 1_000_000_000;

/// Parses Go's `time.ParseDuration` text (`1h30m`, `90s`, `1.5h`, `300ms`) into nanoseconds.
/// Go's own grammar, not a human one: Tekton writes and reads these.
fn parse_duration(text: &str) -> Option<u128> {
    if text == "0" {
        return Some(0);
    }
    let mut rest = text;
    let mut total: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale: f64 = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    Some(total.round() as u128)
}

/// Go's `time.Duration.String` (`1h0m0s`, `1m30s`, `500ms`), as `metav1.Duration` marshals.
fn format_duration(nanos: u128) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < NANOS {
        let (unit, scale) = match nanos {
            n if n < 1_000 => ("ns", 1),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", fraction(nanos, scale));
    }
    let hours = nanos / (3600 * NANOS);
    let minutes = nanos / (60 * NANOS) % 60;
    let seconds = fraction(nanos % (60 * NANOS), NANOS);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

fn fraction(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let rest = value % scale;
    if rest == 0 {
        return whole.to_string();
    }
    let digits = scale.to_string().len() - 1;
    let frac = format!("{rest:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// `GetNamesOfTaskRuns` for a new PipelineRun (`getNewRunNames`): `<run>-<task>`, a matrix
/// `<run>-<task>-<i>`, each through `kmeta.ChildName`; a matrix name whose index the hash
/// truncation cut off is cut to leave room for `-<i>`.
pub fn run_names(pipeline_task: &str, pipeline_run: &str, count: usize) -> Vec<String> {
    if count == 1 {
        return vec![child_name(pipeline_run, &format!("-{pipeline_task}"))];
    }
    (0..count)
        .map(|i| {
            let name = child_name(pipeline_run, &format!("-{pipeline_task}-{i}"));
            if name.ends_with(&format!("-{i}")) {
                return name;
            }
            let name = child_name(pipeline_run, &format!("-{pipeline_task}"));
            let longest = 63 - format!("-{count}").len();
            format!("{}-{i}", &name[..longest.min(name.len())])
        })
        .collect()
}

/// knative's `kmeta.ChildName`: `parent + suffix`, and when that exceeds 63 characters the
/// parent cut and followed by the MD5 of the parent (or, for a suffix of 31 characters or more,
/// of both, with the suffix's start as padding).
pub fn child_name(parent: &str, suffix: &str) -> String {
    const LONGEST: usize = 63;
    const HEAD: usize = LONGEST - 32;
    if parent.len() <= LONGEST.saturating_sub(suffix.len()) {
        return format!("{parent}{suffix}");
    }
    if HEAD <= suffix.len() {
        let hash = hex(&Md5::digest(format!("{parent}{suffix}").as_bytes()));
        let mut ret = format!("{}{hash}", &parent[..HEAD.min(parent.len())]);
        if ret.len() < LONGEST {
            let d = LONGEST - ret.len();
            ret.push_str(&suffix[..d.min(suffix.len())]);
        }
        // makeValidName: no trailing non-alphanumeric character.
        while ret.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
            ret.pop();
        }
        return ret;
    }
    let hash = hex(&Md5::digest(parent.as_bytes()));
    format!("{}{hash}{suffix}", &parent[..HEAD - suffix.len()])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `Matrix.FanOut`: the combinations of the matrix params (each new param's values outermost),
/// `include` entries overwriting the combinations they fit and adding those that fit none;
/// each combination's params sorted by name.
fn fan_out(matrix: &Value) -> Vec<Vec<Value>> {
    type Combination = BTreeMap<String, String>;
    let params: Vec<(String, Vec<String>)> = matrix
        .get("params")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let name = p.get("name")?.as_str()?.to_owned();
            let values = p
                .get("value")?
                .as_array()?
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect();
            Some((name, values))
        })
        .collect();
    let include: Vec<Combination> = matrix
        .get("include")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|inc| {
            inc.get("params")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    Some((
                        p.get("name")?.as_str()?.to_owned(),
                        p.get("value")?.as_str().unwrap_or_default().to_owned(),
                    ))
                })
                .collect()
        })
        .collect();
    let mut combinations: Vec<Combination> = Vec::new();
    if params.is_empty() {
        combinations = include;
    } else {
        for (name, values) in &params {
            if combinations.is_empty() {
                combinations = values
                    .iter()
                    .map(|v| Combination::from([(name.clone(), v.clone())]))
                    .collect();
                continue;
            }
            let mut expanded = Vec::new();
            for v in values {
                for c in &combinations {
                    let mut c = c.clone();
                    c.insert(name.clone(), v.clone());
                    expanded.push(c);
                }
            }
            combinations = expanded;
        }
        // overwriteCombinations, then addNewCombinations.
        let fits = |c: &Combination, inc: &Combination| {
            inc.iter().all(|(k, v)| c.get(k).is_none_or(|cv| cv == v))
        };
        for c in &mut combinations {
            for inc in &include {
                if fits(c, inc) {
                    for (k, v) in inc {
                        c.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        for inc in &include {
            let shares_a_value = combinations
                .iter()
                .any(|c| inc.iter().any(|(k, v)| c.get(k) == Some(v)));
            if !inc.is_empty() && !shares_a_value {
                combinations.push(inc.clone());
            }
        }
    }
    combinations
        .into_iter()
        .map(|c| {
            c.into_iter()
                .map(|(name, value)| json!({"name": name, "value": value}))
                .collect()
        })
        .collect()
}

/// `$(tasks.<t>.results.<r>…)` references in a params list, in order, each once.
fn result_refs(params: Option<&Value>) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    let mut strings = Vec::new();
    collect_strings(params.unwrap_or(&Value::Null), &mut strings);
    for s in strings {
        let mut rest = s.as_str();
        while let Some(start) = rest.find("$(tasks.") {
            let after = &rest[start..];
            let Some(end) = after.find(')') else { break };
            let reference = &after[..=end];
            if seen.insert(reference.to_owned()) {
                found.push(reference.to_owned());
            }
            rest = &after[end + 1..];
        }
    }
    found
}

fn collect_strings(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::String(s) => into.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| collect_strings(v, into)),
        Value::Object(o) => o.values().for_each(|v| collect_strings(v, into)),
        _ => {}
    }
}

/// The PipelineTask's `when` expressions, stated; those that read no result are evaluated
/// (`WhenExpression.isTrue`: `in` / `notin` of the input among the values).
fn when_of(task: &Value) -> When {
    let Some(list) = task.get("when").and_then(Value::as_array) else {
        return When::Always;
    };
    if list.is_empty() {
        return When::Always;
    }
    let mut stated = Vec::new();
    for w in list {
        if let Some(cel) = w.get("cel").and_then(Value::as_str) {
            stated.push(format!("cel: {cel} (evaluated by the controller)"));
            continue;
        }
        let input = w.get("input").and_then(Value::as_str).unwrap_or("");
        let operator = w.get("operator").and_then(Value::as_str).unwrap_or("in");
        let values: Vec<&str> = w
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let text = format!("{input:?} {operator} {values:?}");
        let runtime = input.contains("$(") || values.iter().any(|v| v.contains("$("));
        if runtime {
            stated.push(format!("{text} (known when the tasks it reads have run)"));
            continue;
        }
        let member = values.contains(&input);
        let holds = match operator {
            "notin" => !member,
            _ => member,
        };
        if !holds {
            return When::Skipped(format!("{text} is false"));
        }
        stated.push(format!("{text} (true)"));
    }
    When::OnlyIf(stated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(yaml: &str) -> Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn none(_: &str, _: &str) -> Option<Value> {
        None
    }

    fn task_runs(p: &Preview) -> Vec<&Value> {
        p.children
            .iter()
            .filter_map(|c| match &c.run {
                Run::TaskRun(t) => Some(t),
                Run::Other(_) => None,
            })
            .collect()
    }

    const INLINE: &str = r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata:
  name: build-7
  namespace: team-a
  uid: "1111"
  labels: {app: web}
  annotations: {note: kept, chains.tekton.dev/signed: "true"}
spec:
  params: [{name: repo, value: https://example.dev/web}, {name: platforms, value: [linux, darwin]}]
  taskRunTemplate: {serviceAccountName: builder}
  pipelineSpec:
    params:
      - {name: repo}
      - {name: platforms, type: array}
      - {name: mode, default: fast}
    tasks:
      - name: clone
        params: [{name: url, value: $(params.repo)}, {name: mode, value: "$(params.mode)-$(context.pipelineRun.name)"}]
        taskSpec:
          params: [{name: url}, {name: mode}]
          steps: [{name: clone, image: alpine, script: "git clone $(params.url) # $(params.repo)"}]
      - name: build
        runAfter: [clone]
        params: [{name: commit, value: $(tasks.clone.results.commit)}, {name: all, value: ["$(params.platforms[*])"]}]
        taskRef: {name: go-build}
    finally:
      - name: notify
        taskRef: {name: notify, kind: Task}
"#;

    #[test]
    fn an_inline_pipeline_gives_one_taskrun_per_task_named_labelled_and_owned_as_tekton_does() {
        let p = preview(&pr(INLINE), "default", &none).unwrap();
        let names: Vec<_> = p.children.iter().filter_map(Child::name).collect();
        assert_eq!(names, ["build-7-clone", "build-7-build", "build-7-notify"]);
        let clone = task_runs(&p)[0];
        assert_eq!(
            clone["metadata"]["labels"],
            json!({
                "app": "web",
                "tekton.dev/pipeline": "build-7",
                "tekton.dev/pipelineRun": "build-7",
                "tekton.dev/pipelineRunUID": "1111",
                "tekton.dev/pipelineTask": "clone",
                "tekton.dev/memberOf": "tasks",
            })
        );
        assert_eq!(clone["metadata"]["annotations"], json!({"note": "kept"}));
        assert_eq!(
            clone["metadata"]["ownerReferences"],
            json!([{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "build-7",
                     "uid": "1111", "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(clone["metadata"]["namespace"], "team-a");
        assert_eq!(clone["spec"]["serviceAccountName"], "builder");
        // Pipeline params (given, and a default) substituted, context too; the embedded Task's
        // own `$(params.url)` stays for the TaskRun to resolve.
        assert_eq!(
            clone["spec"]["params"],
            json!([{"name": "url", "value": "https://example.dev/web"},
                   {"name": "mode", "value": "fast-build-7"}])
        );
        assert_eq!(
            clone["spec"]["taskSpec"]["steps"][0]["script"],
            "git clone $(params.url) # https://example.dev/web"
        );
        assert_eq!(
            clone["spec"]["taskSpec"]["params"][0]["type"], "string",
            "ParamSpec.SetDefaults"
        );
        assert!(clone["spec"].get("timeout").is_none(), "1h is the default");
        let build = task_runs(&p)[1];
        assert_eq!(
            build["spec"]["taskRef"],
            json!({"name": "go-build", "kind": "Task"})
        );
        assert_eq!(
            build["spec"]["params"],
            json!([{"name": "commit", "value": "$(tasks.clone.results.commit)"},
                   {"name": "all", "value": ["linux", "darwin"]}])
        );
        assert_eq!(p.children[1].unresolved, ["$(tasks.clone.results.commit)"]);
        let notify = &p.children[2];
        assert!(notify.finally);
        assert_eq!(
            task_runs(&p)[2]["metadata"]["labels"]["tekton.dev/memberOf"],
            "finally"
        );
    }

    #[test]
    fn a_pipeline_ref_takes_the_pipeline_and_its_labels_and_a_missing_one_is_named() {
        let run = pr(
            "apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata: {generateName: ci-, namespace: team-b}\nspec:\n  pipelineRef: {name: ci}\n",
        );
        let err = preview(&run, "default", &none).unwrap_err();
        assert_eq!(
            err,
            PreviewError::PipelineNotFound {
                namespace: "team-b".into(),
                name: "ci".into()
            }
        );
        let pipeline = pr(
            "apiVersion: tekton.dev/v1\nkind: Pipeline\nmetadata: {name: ci, labels: {tier: gold}, annotations: {owner: platform}}\nspec:\n  tasks: [{name: unit, taskRef: {name: unit}}]\n",
        );
        let lookup = |ns: &str, n: &str| (ns == "team-b" && n == "ci").then(|| pipeline.clone());
        let p = preview(&run, "default", &lookup).unwrap();
        assert_eq!(p.name, "ci-xxxxx");
        assert!(p.notes[0].contains("generateName"), "{:?}", p.notes);
        let tr = task_runs(&p)[0];
        assert_eq!(tr["metadata"]["name"], "ci-xxxxx-unit");
        assert_eq!(tr["metadata"]["labels"]["tekton.dev/pipeline"], "ci");
        assert_eq!(tr["metadata"]["labels"]["tier"], "gold");
        assert_eq!(tr["metadata"]["annotations"]["owner"], "platform");
        assert_eq!(tr["spec"]["serviceAccountName"], "default");
    }

    #[test]
    fn a_remote_pipeline_is_stated_unresolved() {
        let run = pr(
            "apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata: {name: r}\nspec:\n  pipelineRef: {resolver: git, params: [{name: url, value: x}]}\n",
        );
        let p = preview(&run, "default", &none).unwrap();
        assert!(p.children.is_empty());
        assert!(
            p.notes[0].contains("git resolver") && p.notes[0].contains("unresolved"),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn child_names_follow_kmeta_child_name() {
        assert_eq!(child_name("pr", "-task"), "pr-task");
        // 63 characters fit; 64 do not: the parent is cut and its MD5 follows.
        let parent = "p".repeat(58);
        assert_eq!(child_name(&parent, "-abcd"), format!("{parent}-abcd"));
        let parent = "p".repeat(59);
        let long = child_name(&parent, "-abcd");
        assert_eq!(long.len(), 63);
        assert_eq!(
            long,
            format!(
                "{}{}-abcd",
                &parent[..26],
                hex(&Md5::digest(parent.as_bytes()))
            )
        );
        // A suffix of 31 characters or more: the hash of both, padded with the suffix.
        // Padded with the suffix's start, then no trailing non-alphanumeric (makeValidName).
        let parent = "p".repeat(30);
        let suffix = format!("-{}", "s".repeat(40));
        let both = child_name(&parent, &suffix);
        let hash = hex(&Md5::digest(format!("{parent}{suffix}").as_bytes()));
        assert_eq!(both, format!("{parent}{hash}"));
        let parent = "p".repeat(29);
        let hash = hex(&Md5::digest(format!("{parent}{suffix}").as_bytes()));
        assert_eq!(child_name(&parent, &suffix), format!("{parent}{hash}-s"));
    }

    #[test]
    fn matrix_names_keep_their_index_when_the_hash_would_cut_it() {
        assert_eq!(run_names("t", "pr", 2), ["pr-t-0", "pr-t-1"]);
        // A long pipeline task name: ChildName hashes the whole, the index is gone, so the
        // single name is cut to leave room for "-<i>".
        let pt = "x".repeat(40);
        let run = "r".repeat(30);
        let names = run_names(&pt, &run, 12);
        let base = child_name(&run, &format!("-{pt}"));
        assert!(!child_name(&run, &format!("-{pt}-0")).ends_with("-0"));
        assert_eq!(names[0], format!("{}-0", &base[..60]));
        assert_eq!(names[11], format!("{}-11", &base[..60]));
        assert!(names.iter().all(|n| n.len() <= 63));
    }

    #[test]
    fn a_matrix_fans_out_in_tekton_order_with_include() {
        let run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: m}
spec:
  params: [{name: goos, value: [linux, windows]}]
  pipelineSpec:
    params: [{name: goos, type: array}]
    tasks:
      - name: build
        matrix:
          params:
            - {name: os, value: "$(params.goos[*])"}
            - {name: arch, value: [amd64, arm64]}
          include:
            - params: [{name: os, value: linux}, {name: arch, value: arm64}, {name: cgo, value: "1"}]
            - params: [{name: os, value: plan9}]
        params: [{name: v, value: "1"}]
        taskRef: {name: build}
"#);
        let p = preview(&run, "default", &none).unwrap();
        let got: Vec<(String, Value)> = p
            .children
            .iter()
            .map(|c| {
                let Run::TaskRun(t) = &c.run else { panic!() };
                (c.name().unwrap().to_owned(), t["spec"]["params"].clone())
            })
            .collect();
        let param = |n: &str, v: &str| json!({"name": n, "value": v});
        assert_eq!(
            got,
            [
                (
                    "m-build-0".into(),
                    json!([
                        param("arch", "amd64"),
                        param("os", "linux"),
                        param("v", "1")
                    ])
                ),
                (
                    "m-build-1".into(),
                    json!([
                        param("arch", "amd64"),
                        param("os", "windows"),
                        param("v", "1")
                    ])
                ),
                (
                    "m-build-2".into(),
                    json!([
                        param("arch", "arm64"),
                        param("cgo", "1"),
                        param("os", "linux"),
                        param("v", "1")
                    ])
                ),
                (
                    "m-build-3".into(),
                    json!([
                        param("arch", "arm64"),
                        param("os", "windows"),
                        param("v", "1")
                    ])
                ),
                (
                    "m-build-4".into(),
                    json!([param("os", "plan9"), param("v", "1")])
                ),
            ]
        );
        assert_eq!(p.children[4].matrix, Some((4, 5)));
    }

    #[test]
    fn when_expressions_are_stated_and_evaluated_when_they_read_no_result() {
        let run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: w}
spec:
  params: [{name: env, value: prod}]
  pipelineSpec:
    params: [{name: env}]
    tasks:
      - {name: deploy, taskRef: {name: d}, when: [{input: $(params.env), operator: in, values: [prod]}]}
      - {name: skip, taskRef: {name: d}, when: [{input: $(params.env), operator: notin, values: [prod]}]}
      - {name: later, taskRef: {name: d}, when: [{input: $(tasks.deploy.results.ok), operator: in, values: ["yes"]}]}
"#);
        let p = preview(&run, "default", &none).unwrap();
        assert_eq!(
            p.children[0].when,
            When::OnlyIf(vec!["\"prod\" in [\"prod\"] (true)".into()])
        );
        assert_eq!(
            p.children[1].when,
            When::Skipped("\"prod\" notin [\"prod\"] is false".into())
        );
        let When::OnlyIf(later) = &p.children[2].when else {
            panic!()
        };
        assert!(later[0].contains("known when the tasks it reads have run"));
    }

    #[test]
    fn timeouts_service_accounts_and_task_run_specs_propagate_as_tekton_does() {
        let run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: t}
spec:
  timeouts: {pipeline: 3h, finally: 30m}
  taskRunTemplate: {serviceAccountName: sa, podTemplate: {nodeSelector: {a: b}}}
  taskRunSpecs:
    - pipelineTaskName: two
      serviceAccountName: other
      podTemplate: {hostNetwork: true}
      metadata: {labels: {tekton.dev/pipelineTask: overridden, extra: x}}
  pipelineSpec:
    tasks:
      - {name: one, taskRef: {name: a}}
      - {name: two, taskRef: {name: a}, timeout: 90m, retries: 2, onError: continue}
    finally:
      - {name: fin, taskRef: {name: a}}
"#);
        let p = preview(&run, "default", &none).unwrap();
        let trs = task_runs(&p);
        // tasks = pipeline - finally = 2h30m (over the 1h default), finally 30m (under it: none).
        assert_eq!(trs[0]["spec"]["timeout"], "2h30m0s");
        assert_eq!(trs[1]["spec"]["timeout"], "1h30m0s");
        assert!(trs[2]["spec"].get("timeout").is_none());
        assert_eq!(trs[0]["spec"]["serviceAccountName"], "sa");
        assert_eq!(trs[1]["spec"]["serviceAccountName"], "other");
        assert_eq!(
            trs[1]["spec"]["podTemplate"],
            json!({"nodeSelector": {"a": "b"}, "hostNetwork": true})
        );
        assert_eq!(trs[1]["spec"]["retries"], 2);
        assert_eq!(
            trs[1]["metadata"]["annotations"][ON_ERROR_ANNOTATION],
            "continue"
        );
        // addMetadataByPrecedence: taskRunSpecs metadata is written first and wins.
        assert_eq!(
            trs[1]["metadata"]["labels"]["tekton.dev/pipelineTask"],
            "overridden"
        );
        assert_eq!(trs[1]["metadata"]["labels"]["extra"], "x");
    }

    /// The child TaskRun's timeout as each Tekton line's `createTaskRun` sets it (read at the
    /// tags; confirmed by the runtime suite's scenario 17 on v1.0.4 and v1.15.0).
    #[test]
    fn timeouts_follow_the_clusters_tekton() {
        let run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: t}
spec:
  timeouts: {pipeline: 3h, finally: 30m}
  taskRunSpecs:
    - {pipelineTaskName: three, timeout: 45m}
  pipelineSpec:
    tasks:
      - {name: one, taskRef: {name: a}}
      - {name: two, taskRef: {name: a}, timeout: 90m}
      - {name: three, taskRef: {name: a}, timeout: 90m}
"#);
        let timeouts = |version: Version| -> Vec<Value> {
            let p = preview_for(&run, "default", &none, version).unwrap();
            task_runs(&p)
                .iter()
                .map(|tr| tr["spec"].get("timeout").cloned().unwrap_or(Value::Null))
                .collect()
        };
        // The PipelineRun's tasks timeout (2h30m) from v1.11; taskRunSpecs' from v1.4.
        assert_eq!(
            timeouts(cluster::NEWEST),
            [json!("2h30m0s"), json!("1h30m0s"), json!("45m0s")]
        );
        assert_eq!(timeouts(Version::new(1, 11, 0)), timeouts(cluster::NEWEST));
        assert_eq!(
            timeouts(Version::new(1, 10, 3)),
            [Value::Null, json!("1h30m0s"), json!("45m0s")]
        );
        assert_eq!(
            timeouts(Version::new(1, 0, 4)),
            [Value::Null, json!("1h30m0s"), json!("1h30m0s")]
        );
    }

    /// `getTaskrunLabels` adds the PipelineRun's uid from v0.63.0 (confirmed by scenario 17 on
    /// v0.62.3).
    #[test]
    fn the_pipeline_run_uid_label_follows_the_clusters_tekton() {
        let mut run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: t}
spec:
  pipelineSpec:
    tasks: [{name: one, taskRef: {name: a}}]
"#);
        run["metadata"]["uid"] = json!("1111");
        let uid = |version: Version| -> Value {
            let p = preview_for(&run, "default", &none, version).unwrap();
            task_runs(&p)[0]["metadata"]["labels"]
                .get(PIPELINE_RUN_UID_LABEL)
                .cloned()
                .unwrap_or(Value::Null)
        };
        assert_eq!(uid(cluster::NEWEST), json!("1111"));
        assert_eq!(uid(Version::new(0, 63, 0)), json!("1111"));
        assert_eq!(uid(Version::new(0, 62, 3)), Value::Null);
    }

    #[test]
    fn workspaces_are_bound_and_custom_tasks_are_not_taskruns() {
        let run = pr(r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: ws}
spec:
  workspaces: [{name: shared, emptyDir: {}, subPath: base}]
  pipelineSpec:
    workspaces: [{name: shared}]
    tasks:
      - {name: a, taskRef: {name: a}, workspaces: [{name: src, workspace: shared, subPath: a}]}
      - {name: wait, taskRef: {apiVersion: example.dev/v1, kind: Wait, name: w}}
"#);
        let p = preview(&run, "default", &none).unwrap();
        assert_eq!(
            task_runs(&p)[0]["spec"]["workspaces"],
            json!([{"name": "src", "emptyDir": {}, "subPath": "base/a"}])
        );
        assert!(matches!(&p.children[1].run, Run::Other(w) if w.contains("CustomRun")));
    }

    #[test]
    fn bad_pipelineruns_are_refused_with_the_field() {
        let e = preview(
            &pr("apiVersion: tekton.dev/v1beta1\nkind: PipelineRun\nmetadata: {name: a}\nspec: {}\n"),
            "default",
            &none,
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("apiVersion: tekton.dev/v1beta1"),
            "{e}"
        );
        let e = preview(
            &pr("apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata: {name: a}\nspec: {}\n"),
            "default",
            &none,
        )
        .unwrap_err();
        assert!(e.to_string().contains("exactly one of pipelineRef"), "{e}");
        let e = preview(
            &pr("apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata: {name: a}\nspec:\n  pipelineSpec:\n    tasks: [{name: x}]\n"),
            "default",
            &none,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pipelineSpec.tasks[0]: PipelineTask \"x\" must specify one of taskRef, taskSpec, pipelineRef or pipelineSpec"
        );
    }

    #[test]
    fn go_durations_round_trip_as_metav1_marshals_them() {
        for (text, go) in [
            ("1h", "1h0m0s"),
            ("90m", "1h30m0s"),
            ("45s", "45s"),
            ("1.5h", "1h30m0s"),
            ("300ms", "300ms"),
            ("0", "0s"),
            ("1m30.5s", "1m30.5s"),
        ] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), go, "{text}");
        }
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration(""), None);
    }
}
