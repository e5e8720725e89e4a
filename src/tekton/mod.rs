//! The Tekton side: TaskRuns as they arrive, kept as JSON so that every field bookend does not
//! know survives untouched, with typed accessors for the parts bookend reads.

use serde_json::{Map, Value};

/// What a Tekton cluster can run: version and feature flags.
pub mod cluster;
/// Tekton's `stepTemplate` merge (`MergeStepsWithStepTemplate`), ported to JSON.
pub mod merge;
/// The TaskRuns a PipelineRun's controller creates (`bookend render` of a PipelineRun).
pub mod pipeline;
/// A StepAction step as Tekton's controller resolves it (`status.taskSpec`).
pub mod step_action;

/// API group of Tekton's pipeline resources.
pub const GROUP: &str = "tekton.dev";

/// `text` with each `$(key)` that `value_of` knows replaced, as Tekton's
/// `substitution.ApplyReplacements` (Go's `strings.Replacer`): one pass, left to right, so a
/// substituted value is never looked at again; an unknown `$(…)` is left as written.
pub(crate) fn replace_variables<'v>(
    text: &str,
    value_of: impl Fn(&str) -> Option<&'v str>,
) -> String {
    if !text.contains("$(") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("$(") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after
            .find(')')
            .and_then(|end| Some((end, value_of(&after[..end])?)))
        {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str("$(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
/// Label Tekton's controller puts on TaskRuns that run a referenced Task.
pub const TASK_LABEL: &str = "tekton.dev/task";
/// Annotation that carries a trusted-resources signature on a Task.
pub const SIGNATURE_ANNOTATION: &str = "tekton.dev/signature";

/// The two served TaskRun versions. They differ in a few field names (`resources` in v1beta1
/// where v1 says `computeResources`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiVersion {
    V1,
    V1beta1,
}

impl ApiVersion {
    /// Parses `tekton.dev/v1` or `tekton.dev/v1beta1`.
    pub fn parse(api_version: &str) -> Option<Self> {
        match api_version {
            "tekton.dev/v1" => Some(Self::V1),
            "tekton.dev/v1beta1" => Some(Self::V1beta1),
            _ => None,
        }
    }

    /// The `apiVersion` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "tekton.dev/v1",
            Self::V1beta1 => "tekton.dev/v1beta1",
        }
    }

    /// The version part alone (`v1`, `v1beta1`).
    pub fn version(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V1beta1 => "v1beta1",
        }
    }

    /// The key under which a step (or stepTemplate, or sidecar) holds its resource requirements.
    pub fn resources_key(self) -> &'static str {
        match self {
            Self::V1 => "computeResources",
            Self::V1beta1 => "resources",
        }
    }
}

/// Where a TaskRun's steps come from, decided as Tekton's TaskRun reconciler decides it
/// (`GetTaskData` and `GetTaskFunc` in `pkg/reconciler/taskrun/resources/taskref.go`): a
/// `taskRef` with a `name` is a Task fetched by that name — through its `resolver` when it has
/// one, else from the TaskRun's namespace, whatever its `kind` and `apiVersion` say (the
/// reconciler reads neither); then an inline `taskSpec`; then a `taskRef` without a name, which
/// goes to a resolver (its own, or the cluster's `default-resolver-type`, which Tekton's
/// defaulting fills in).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskSource {
    /// `spec.taskSpec` is inline: the steps are in the object.
    Inline,
    /// `spec.taskRef.name` names a Task in the TaskRun's namespace.
    LocalRef { name: String },
    /// `spec.taskRef` goes through a resolver (git, bundles, hub, cluster, http, ...; `default`
    /// when the cluster's default resolver will be filled in): the steps are only known after
    /// remote resolution.
    RemoteRef { resolver: String },
    /// Both `spec.taskRef` and `spec.taskSpec` (Tekton refuses the TaskRun: "expected exactly
    /// one, got both").
    Both,
    /// A v1beta1 `taskRef.bundle`: Tekton's webhook refuses it on create ("must not set the
    /// field(s): spec.taskRef.bundle"); its conversion to v1 would drop it.
    Bundle,
    /// Neither `taskSpec` nor `taskRef` (Tekton refuses this itself).
    Missing,
}

/// How a TaskRun came to be: created by a PipelineRun, or on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Standalone,
    Pipeline,
}

/// Borrowed, typed view of a TaskRun object.
#[derive(Clone, Copy, Debug)]
pub struct TaskRunView<'a> {
    pub object: &'a Value,
    pub api_version: ApiVersion,
}

impl<'a> TaskRunView<'a> {
    /// Views `object` as a TaskRun; `None` when it is not a `tekton.dev` v1/v1beta1 TaskRun.
    pub fn new(object: &'a Value) -> Option<Self> {
        if object.get("kind")?.as_str()? != "TaskRun" {
            return None;
        }
        let api_version = ApiVersion::parse(object.get("apiVersion")?.as_str()?)?;
        Some(Self {
            object,
            api_version,
        })
    }

    pub fn metadata(&self) -> Option<&'a Map<String, Value>> {
        self.object.get("metadata")?.as_object()
    }

    /// `metadata.name`, falling back to `generateName` (empty during mutating admission).
    pub fn display_name(&self) -> String {
        let Some(meta) = self.metadata() else {
            return String::new();
        };
        match meta.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => meta
                .get("generateName")
                .and_then(Value::as_str)
                .map(|g| format!("{g}<generated>"))
                .unwrap_or_default(),
        }
    }

    pub fn namespace(&self) -> Option<&'a str> {
        self.metadata()?
            .get("namespace")?
            .as_str()
            .filter(|s| !s.is_empty())
    }

    pub fn labels(&self) -> Option<&'a Map<String, Value>> {
        self.metadata()?.get("labels")?.as_object()
    }

    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.metadata()?.get("annotations")?.get(key)?.as_str()
    }

    pub fn spec(&self) -> Option<&'a Value> {
        self.object.get("spec")
    }

    pub fn task_spec(&self) -> Option<&'a Value> {
        self.spec()?.get("taskSpec").filter(|v| !v.is_null())
    }

    /// The inline steps, or an empty slice.
    pub fn steps(&self) -> &'a [Value] {
        self.task_spec()
            .and_then(|ts| ts.get("steps"))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Pipeline when a PipelineRun owns this TaskRun (its controller ownerReference).
    pub fn origin(&self) -> Origin {
        let owned_by_pipeline_run = self
            .metadata()
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter().any(|r| {
                    r.get("kind").and_then(Value::as_str) == Some("PipelineRun")
                        && r.get("apiVersion")
                            .and_then(Value::as_str)
                            .is_some_and(|v| v.starts_with("tekton.dev/"))
                })
            });
        if owned_by_pipeline_run {
            Origin::Pipeline
        } else {
            Origin::Standalone
        }
    }

    pub fn task_source(&self) -> TaskSource {
        let task_ref = self
            .spec()
            .and_then(|s| s.get("taskRef"))
            .filter(|r| !r.is_null());
        let has_spec = self.task_spec().is_some();
        let Some(task_ref) = task_ref else {
            return if has_spec {
                TaskSource::Inline
            } else {
                TaskSource::Missing
            };
        };
        if has_spec {
            return TaskSource::Both;
        }
        if !task_ref.is_object() {
            return TaskSource::Missing;
        }
        let field = |k: &str| {
            task_ref
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if field("bundle").is_some() {
            return TaskSource::Bundle;
        }
        // `kind` and `apiVersion` never decide where the Task comes from.
        match (field("name"), field("resolver")) {
            (_, Some(resolver)) => TaskSource::RemoteRef {
                resolver: resolver.to_owned(),
            },
            (Some(name), None) => TaskSource::LocalRef {
                name: name.to_owned(),
            },
            (None, None) => TaskSource::RemoteRef {
                resolver: "default".to_owned(),
            },
        }
    }
}

/// A Task (or what bookend needs of one) to inline for `taskRef: Inline`.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskObject {
    pub namespace: String,
    pub name: String,
    pub api_version: ApiVersion,
    /// The Task's spec, in its own version's field names.
    pub spec: Value,
    pub resource_version: Option<String>,
    /// Carries a trusted-resources signature (`tekton.dev/signature`).
    pub signed: bool,
}

impl TaskObject {
    /// Reads a `tekton.dev` Task object; `None` for anything else.
    pub fn from_object(object: &Value) -> Option<Self> {
        if object.get("kind")?.as_str()? != "Task" {
            return None;
        }
        let api_version = ApiVersion::parse(object.get("apiVersion")?.as_str()?)?;
        let meta = object.get("metadata")?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            namespace: text(meta.get("namespace")).unwrap_or_default(),
            name: text(meta.get("name"))?,
            api_version,
            spec: object
                .get("spec")
                .cloned()
                .unwrap_or(Value::Object(Map::new())),
            resource_version: text(meta.get("resourceVersion")),
            signed: meta
                .get("annotations")
                .and_then(|a| a.get(SIGNATURE_ANNOTATION))
                .is_some(),
        })
    }
}

/// A step's name, or `None` for an unnamed step (Tekton treats `""` as unnamed).
pub fn step_name(step: &Value) -> Option<&str> {
    step.get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
}

/// The container name Tekton gives the step at `index`: `step-<name>` or `step-unnamed-<index>`.
pub fn container_name(step: &Value, index: usize) -> String {
    match step_name(step) {
        Some(name) => step_container(name),
        None => format!("step-unnamed-{index}"),
    }
}

/// The container name Tekton gives the step named `name` (before [`restrict_length`]).
pub fn step_container(name: &str) -> String {
    format!("step-{name}")
}

/// A container name as Tekton cuts it (`names.SimpleNameGenerator.RestrictLength` in
/// `pkg/names`): at most 63 characters, without trailing characters that are not letters or
/// digits.
pub fn restrict_length(name: &str) -> String {
    let mut name: String = name.chars().take(63).collect();
    while name.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        name.pop();
    }
    name
}

/// Rewrites a v1 step (or stepTemplate or sidecar) into `version`'s field names.
pub fn convert_container(mut value: Value, version: ApiVersion) -> Value {
    if version == ApiVersion::V1beta1
        && let Some(obj) = value.as_object_mut()
        && let Some(resources) = obj.remove("computeResources")
    {
        obj.insert("resources".to_owned(), resources);
    }
    value
}

/// Converts a v1 TaskSpec into `version`'s field names (steps, stepTemplate, sidecars).
pub fn convert_task_spec(mut spec: Value, version: ApiVersion) -> Value {
    if version == ApiVersion::V1 {
        return spec;
    }
    if let Some(obj) = spec.as_object_mut() {
        for key in ["steps", "sidecars"] {
            if let Some(Value::Array(items)) = obj.get_mut(key) {
                for item in items.iter_mut() {
                    *item = convert_container(item.take(), version);
                }
            }
        }
        if let Some(template) = obj.get_mut("stepTemplate") {
            *template = convert_container(template.take(), version);
        }
    }
    spec
}

/// Converts a v1beta1 TaskSpec into v1 field names (the reverse of [`convert_task_spec`]).
pub fn task_spec_to_v1(mut spec: Value) -> Value {
    let rename = |v: &mut Value| {
        if let Some(obj) = v.as_object_mut()
            && let Some(resources) = obj.remove("resources")
        {
            obj.insert("computeResources".to_owned(), resources);
        }
    };
    if let Some(obj) = spec.as_object_mut() {
        for key in ["steps", "sidecars"] {
            if let Some(Value::Array(items)) = obj.get_mut(key) {
                items.iter_mut().for_each(rename);
            }
        }
        if let Some(template) = obj.get_mut("stepTemplate") {
            rename(template);
        }
        obj.remove("resources");
    }
    spec
}

/// Drops null, empty-string, empty-array and empty-object members, recursively, so that two
/// steps compare equal after Tekton's defaulting webhook round-tripped one of them through Go
/// structs (which adds `computeResources: {}` and `name: ""`).
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty_value(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn views_only_tekton_taskruns() {
        assert!(
            TaskRunView::new(&json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun"})).is_some()
        );
        assert!(
            TaskRunView::new(&json!({"apiVersion": "tekton.dev/v1beta1", "kind": "TaskRun"}))
                .is_some()
        );
        assert!(
            TaskRunView::new(&json!({"apiVersion": "tekton.dev/v1", "kind": "Task"})).is_none()
        );
        assert!(TaskRunView::new(&json!({"apiVersion": "v1", "kind": "TaskRun"})).is_none());
        assert!(TaskRunView::new(&json!("TaskRun")).is_none());
    }

    #[test]
    fn task_source_follows_tektons_reconciler() {
        let src = |spec: Value| {
            let obj = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "spec": spec});
            TaskRunView::new(&obj).unwrap().task_source()
        };
        let local = |name: &str| TaskSource::LocalRef { name: name.into() };
        let remote = |resolver: &str| TaskSource::RemoteRef {
            resolver: resolver.into(),
        };
        assert_eq!(src(json!({"taskSpec": {"steps": []}})), TaskSource::Inline);
        assert_eq!(src(json!({"taskRef": {"name": "build"}})), local("build"));
        // The reconciler reads neither kind nor apiVersion: still the local Task `build`.
        for task_ref in [
            json!({"name": "build", "kind": "Task", "apiVersion": "tekton.dev/v1"}),
            json!({"name": "build", "kind": "Wait", "apiVersion": "example.dev/v1"}),
            json!({"name": "build", "kind": "ClusterTask"}),
            json!({"name": "build", "resolver": ""}),
        ] {
            assert_eq!(
                src(json!({"taskRef": task_ref})),
                local("build"),
                "{task_ref}"
            );
        }
        assert_eq!(
            src(json!({"taskRef": {"resolver": "git", "params": []}})),
            remote("git")
        );
        assert_eq!(
            src(json!({"taskRef": {"name": "https://x/t.yaml", "resolver": "http"}})),
            remote("http")
        );
        // No name and no resolver: Tekton's defaulting fills in default-resolver-type.
        assert_eq!(
            src(json!({"taskRef": {"apiVersion": "example.dev/v1", "kind": "Wait"}})),
            remote("default")
        );
        assert_eq!(
            src(json!({"taskRef": {"params": [{"name": "url", "value": "x"}]}})),
            remote("default")
        );
        assert_eq!(
            src(json!({"taskRef": {"name": "b"}, "taskSpec": {"steps": []}})),
            TaskSource::Both
        );
        // v1beta1 bundles: refused on CREATE by Tekton's webhook.
        assert_eq!(
            src(json!({"taskRef": {"name": "build", "bundle": "reg/x:1"}})),
            TaskSource::Bundle
        );
        assert_eq!(src(json!({"taskRef": "build"})), TaskSource::Missing);
        assert_eq!(src(json!({"taskRef": null})), TaskSource::Missing);
        assert_eq!(src(json!({})), TaskSource::Missing);
    }

    #[test]
    fn origin_is_pipeline_only_for_a_pipelinerun_owner() {
        let with_owner = |kind: &str, api: &str| {
            let obj = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"ownerReferences": [{"apiVersion": api, "kind": kind, "name": "p", "uid": "u"}]}});
            TaskRunView::new(&obj).unwrap().origin()
        };
        assert_eq!(with_owner("PipelineRun", "tekton.dev/v1"), Origin::Pipeline);
        assert_eq!(
            with_owner("PipelineRun", "example.dev/v1"),
            Origin::Standalone
        );
        assert_eq!(with_owner("Job", "batch/v1"), Origin::Standalone);
    }

    #[test]
    fn v1beta1_conversion_renames_resources_both_ways() {
        let spec = json!({"steps": [{"name": "a", "computeResources": {"limits": {"cpu": "1"}}}],
            "stepTemplate": {"computeResources": {}}, "sidecars": [{"computeResources": {}}]});
        let beta = convert_task_spec(spec.clone(), ApiVersion::V1beta1);
        assert_eq!(beta["steps"][0]["resources"]["limits"]["cpu"], "1");
        assert!(beta["steps"][0].get("computeResources").is_none());
        assert!(beta["stepTemplate"].get("resources").is_some());
        assert!(beta["sidecars"][0].get("resources").is_some());
        assert_eq!(task_spec_to_v1(beta), spec);
    }

    #[test]
    fn normalization_ignores_go_zero_values() {
        let a = json!({"name": "x", "image": "i", "computeResources": {}, "args": [], "env": null});
        let b = json!({"image": "i", "name": "x"});
        assert_eq!(normalized(&a), normalized(&b));
        assert_ne!(
            normalized(&a),
            normalized(&json!({"name": "x", "image": "j"}))
        );
    }

    #[test]
    fn container_names_are_cut_as_tekton_cuts_them() {
        let long = format!("step-{}", "a".repeat(62));
        assert_eq!(restrict_length(&long).len(), 63);
        assert_eq!(restrict_length("step-build"), "step-build");
        let dash_at_63 = format!("step-{}-b", "a".repeat(57));
        assert_eq!(
            restrict_length(&dash_at_63),
            format!("step-{}", "a".repeat(57))
        );
    }

    #[test]
    fn container_names_follow_tekton() {
        assert_eq!(container_name(&json!({"name": "build"}), 3), "step-build");
        assert_eq!(container_name(&json!({"name": ""}), 3), "step-unnamed-3");
        assert_eq!(container_name(&json!({}), 0), "step-unnamed-0");
    }
}
