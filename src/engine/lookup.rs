//! What the engine may look up besides the TaskRun (namespace labels, Tasks, StepActions), and
//! the in-memory [`Catalog`] that answers it offline and in files mode.

use std::collections::HashMap;

use serde_json::Value;

use crate::policy::select::Labels;
use crate::tekton::TaskObject;

/// What the engine may look up besides the TaskRun: namespace labels, Tasks, StepActions and
/// Tekton's feature flags. The webhook answers from in-memory caches; `render` from files.
pub trait Lookup: Send + Sync {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels>;
    fn task(&self, namespace: &str, name: &str) -> Option<TaskObject>;
    /// Whether a StepAction exists: `None` when this lookup does not know StepActions (then
    /// bookend does not check a policy's `ref.name`).
    fn step_action_exists(&self, namespace: &str, name: &str) -> Option<bool>;
    /// The StepAction object, to resolve an org step's `ref` as Tekton's controller did when
    /// verifying a remote TaskRun (`None`: not known here).
    fn step_action(&self, namespace: &str, name: &str) -> Option<Value>;
    /// Whether Tekton refuses TaskRuns with `spec.taskSpec`: its feature flag
    /// `disable-inline-spec` lists `taskrun`. bookend then cannot inline a referenced Task.
    /// (Required, not defaulted: a lookup that forgot it would silently run without the flag.)
    fn inline_task_spec_refused(&self) -> bool;
    /// Tekton's `default-pod-template` (ConfigMap `config-defaults`), which Tekton's defaulting
    /// merges into every TaskRun's `podTemplate`: what it sets is the platform's, not the
    /// author's. (Required: a lookup that forgot it would take the platform's values for the
    /// author's, or the author's zero values for nothing.)
    fn default_pod_template(&self) -> Option<Value>;
}

/// Tekton's feature-flags ConfigMap: its name, and whether its `disable-inline-spec` (a comma
/// list of kinds) lists `taskrun`.
pub const FEATURE_FLAGS_CONFIG_MAP: &str = "feature-flags";

/// Tekton's config-defaults ConfigMap: its name, and the key of the default pod template (YAML).
pub const CONFIG_DEFAULTS_CONFIG_MAP: &str = "config-defaults";

/// The `default-pod-template` of a Tekton config-defaults ConfigMap object, parsed; `None` when
/// it is absent or not a YAML object.
pub fn default_pod_template(config_map: &Value) -> Option<Value> {
    let text = config_map
        .get("data")?
        .get("default-pod-template")?
        .as_str()?;
    parse_pod_template(text)
}

/// Parses a `default-pod-template` value (YAML).
pub fn parse_pod_template(text: &str) -> Option<Value> {
    serde_yaml_ng::from_str::<Value>(text)
        .ok()
        .filter(Value::is_object)
}

/// Whether a `disable-inline-spec` value makes Tekton refuse inline TaskRun specs.
pub fn refuses_inline_task_spec(disable_inline_spec: &str) -> bool {
    disable_inline_spec
        .split(',')
        .any(|kind| kind.trim().eq_ignore_ascii_case("taskrun"))
}

/// The `disable-inline-spec` value of a Tekton feature-flags ConfigMap object.
pub fn disable_inline_spec(config_map: &Value) -> Option<&str> {
    config_map.get("data")?.get("disable-inline-spec")?.as_str()
}

/// A [`Lookup`] held in memory (files mode, `render`, tests).
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub namespaces: HashMap<String, Labels>,
    pub tasks: HashMap<(String, String), TaskObject>,
    /// StepActions by (namespace, name), to check a policy's `ref` offline.
    pub step_actions: HashMap<(String, String), Value>,
    /// Tekton refuses inline TaskRun specs (`render --disable-inline-spec`, or a `feature-flags`
    /// ConfigMap among the objects).
    pub inline_task_spec_refused: bool,
    /// Tekton's default pod template (a `config-defaults` ConfigMap among the objects).
    pub default_pod_template: Option<Value>,
    /// Pipelines by (namespace, name), for the TaskRuns of a PipelineRun with `pipelineRef`
    /// (`render` and `test` of a PipelineRun).
    pub pipelines: HashMap<(String, String), Value>,
}

impl Catalog {
    /// Adds Namespace, Task, StepAction and Pipeline objects, and Tekton's feature-flags and config-defaults
    /// ConfigMaps; Tasks
    /// and StepActions without a namespace go into `default_namespace`. Other kinds are ignored.
    /// Returns how many were added.
    pub fn add_objects(&mut self, objects: &[Value], default_namespace: &str) -> usize {
        let mut added = 0;
        for object in objects {
            let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
            let meta = object.get("metadata");
            let name = meta
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let ns = meta
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(default_namespace);
            match kind {
                "Namespace" if !name.is_empty() => {
                    let labels = meta
                        .and_then(|m| m.get("labels"))
                        .and_then(Value::as_object)
                        .map(|l| {
                            l.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.namespaces.insert(name.to_owned(), labels);
                    added += 1;
                }
                "Task" => {
                    if let Some(mut task) = TaskObject::from_object(object) {
                        task.namespace = ns.to_owned();
                        self.tasks.insert((ns.to_owned(), task.name.clone()), task);
                        added += 1;
                    }
                }
                "Pipeline" if !name.is_empty() => {
                    self.pipelines
                        .insert((ns.to_owned(), name.to_owned()), object.clone());
                    added += 1;
                }
                "StepAction" if !name.is_empty() => {
                    self.step_actions
                        .insert((ns.to_owned(), name.to_owned()), object.clone());
                    added += 1;
                }
                "ConfigMap" if name == CONFIG_DEFAULTS_CONFIG_MAP => {
                    self.default_pod_template = default_pod_template(object);
                    added += 1;
                }
                "ConfigMap" if name == FEATURE_FLAGS_CONFIG_MAP => {
                    self.inline_task_spec_refused =
                        disable_inline_spec(object).is_some_and(refuses_inline_task_spec);
                    added += 1;
                }
                _ => {}
            }
        }
        added
    }
}

impl Lookup for Catalog {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        self.namespaces.get(namespace).cloned()
    }

    fn task(&self, namespace: &str, name: &str) -> Option<TaskObject> {
        self.tasks
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    // Offline, StepActions are only known when some were given; without any, do not guess.
    fn step_action_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        (!self.step_actions.is_empty()).then(|| {
            self.step_actions
                .contains_key(&(namespace.to_owned(), name.to_owned()))
        })
    }

    fn step_action(&self, namespace: &str, name: &str) -> Option<Value> {
        self.step_actions
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn inline_task_spec_refused(&self) -> bool {
        self.inline_task_spec_refused
    }

    fn default_pod_template(&self) -> Option<Value> {
        self.default_pod_template.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tekton_feature_flags_are_read_from_their_config_map() {
        assert!(refuses_inline_task_spec("pipelinerun, TaskRun"));
        assert!(!refuses_inline_task_spec("pipelinerun,pipeline"));
        assert!(!refuses_inline_task_spec(""));
        let mut catalog = Catalog::default();
        let flags = |value: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
                   "data": {"disable-inline-spec": value}})
        };
        catalog.add_objects(&[flags("taskrun,pipelinerun")], "default");
        assert!(catalog.inline_task_spec_refused());
        catalog.add_objects(&[flags("pipelinerun")], "default");
        assert!(!catalog.inline_task_spec_refused());
    }
}
