//! What the engine may look up besides the TaskRun (namespace labels, Tasks, StepActions), and
//! the in-memory [`Catalog`] that answers it offline and in files mode.

use std::collections::HashMap;

use serde_json::Value;

use crate::policy::select::Labels;
use crate::tekton::TaskObject;

/// What the engine may look up besides the TaskRun: namespace labels and Tasks. The webhook
/// answers from in-memory caches; `render` from files.
pub trait Lookup: Send + Sync {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels>;
    fn task(&self, namespace: &str, name: &str) -> Option<TaskObject>;
    /// Whether a StepAction exists: `None` when this lookup does not know StepActions (then
    /// bookend does not check a policy's `ref.name`).
    fn step_action_exists(&self, namespace: &str, name: &str) -> Option<bool>;
}

/// A [`Lookup`] held in memory (files mode, `render`, tests).
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    pub namespaces: HashMap<String, Labels>,
    pub tasks: HashMap<(String, String), TaskObject>,
    /// StepActions by (namespace, name), to check a policy's `ref` offline.
    pub step_actions: HashMap<(String, String), Value>,
}

impl Catalog {
    /// Adds Namespace, Task and StepAction objects; Tasks and StepActions without a namespace
    /// go into `default_namespace`. Other kinds are ignored. Returns how many were added.
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
                "StepAction" if !name.is_empty() => {
                    self.step_actions
                        .insert((ns.to_owned(), name.to_owned()), object.clone());
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
}
