//! What bookend changes in a TaskRun it admits, and the two ways of writing it down: the whole
//! admitted object (render) or only the patch (the webhook, which never builds the object).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::record;
use crate::patch::{self, Operation};

/// What bookend changes in a TaskRun it admits.
pub(super) enum Admitted {
    /// An inline-spec TaskRun with its steps injected.
    Injected(Injection),
    /// A whole new TaskRun (a referenced Task was inlined).
    Rewritten(Value),
    /// Only bookend's record and verification label, nothing in `spec`: the TaskRun's Task
    /// comes from a resolver, and its steps are injected at the controller's dry-run.
    Marked(Injection),
}

impl Admitted {
    /// The admitted object and its patch from `original`, as a diff of the two whole objects:
    /// render's reference, which the webhook's [`Admitted::into_patch`] must equal (unit test
    /// and fuzz target).
    pub(super) fn into_patch_and_object(self, original: &Value) -> (Vec<Operation>, Value) {
        match self {
            Self::Injected(injection) | Self::Marked(injection) => {
                let object = injection.clone().apply(original.clone());
                (injection.patch(original, Shape::Fewest), object)
            }
            Self::Rewritten(object) => (patch::diff(original, &object), object),
        }
    }

    /// The same change, with the marks the TaskRun may not arrive with dropped: the verified
    /// mark always, the verification label unless bookend's record goes with it (an inlined
    /// Task that nothing is injected into keeps the author's metadata otherwise).
    pub(super) fn without_foreign_marks(self) -> Self {
        match self {
            Self::Injected(_) | Self::Marked(_) => self,
            Self::Rewritten(mut object) => {
                let recorded = object
                    .pointer("/metadata/annotations")
                    .and_then(Value::as_object)
                    .is_some_and(|a| a.contains_key(record::ANNOTATION));
                if let Some(meta) = object.get_mut("metadata") {
                    if let Some(Value::Object(a)) = meta.get_mut("annotations") {
                        a.remove(record::VERIFIED_ANNOTATION);
                    }
                    if !recorded && let Some(Value::Object(l)) = meta.get_mut("labels") {
                        l.remove(record::LABEL);
                    }
                }
                if !recorded {
                    set_record_param(&mut object, None);
                }
                Self::Rewritten(object)
            }
        }
    }

    /// The patch from `original`, without building the admitted object: the operations
    /// `into_patch_and_object` gives for the same `shape`.
    pub(super) fn into_patch(self, original: &Value, shape: Shape) -> Vec<Operation> {
        match self {
            Self::Injected(injection) | Self::Marked(injection) => injection.patch(original, shape),
            Self::Rewritten(object) => patch::diff_owned(original, object),
        }
    }
}

/// How the steps of an injection are written in the patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// What the webhook sends (and render prints): the minimal operations, or one `replace`
    /// of `spec.taskSpec.steps` when that is cheaper for the API server to apply
    /// ([`patch::diff_member_fewest`]).
    Fewest,
    /// The minimal operations, one per changed place: what the validating backstop describes
    /// when it refuses a TaskRun.
    Minimal,
}

/// What bookend sets in an inline-spec TaskRun: members of `spec.taskSpec` (`steps`, `volumes`
/// when policies bring or once brought volumes, `stepTemplate: None` when bookend wrote it into
/// the user's steps; every other member stays as it is) and its `bookend.dev/injected` record
/// (`None`: the annotation is removed).
#[derive(Clone)]
pub(super) struct Injection {
    /// Members to set (`Some`) or remove (`None`), in key order.
    pub(super) task_spec_members: BTreeMap<String, Option<Value>>,
    pub(super) record: Option<String>,
}

impl Injection {
    /// Sets or removes the members in `task_spec` (an object: the engine only injects into
    /// those).
    pub(super) fn set_members(members: BTreeMap<String, Option<Value>>, task_spec: &mut Value) {
        if let Some(spec) = task_spec.as_object_mut() {
            for (key, value) in members {
                match value {
                    Some(value) => {
                        spec.insert(key, value);
                    }
                    None => {
                        spec.remove(&key);
                    }
                }
            }
        }
    }

    /// Nothing to inject, only marks of bookend's that bookend did not write to drop
    /// (`None`: there are none). A TaskRun arriving at CREATE with the record, the
    /// verification label or the verified mark was not given them by bookend (a re-invocation
    /// after bookend's own pass is sealed again, so it never lands here).
    pub(super) fn foreign_marks_dropped(original: &Value) -> Option<Self> {
        has_marks(original).then(|| Self {
            task_spec_members: BTreeMap::new(),
            record: None,
        })
    }

    /// The TaskRun with the members and the record set.
    pub(super) fn apply(self, mut object: Value) -> Value {
        if !self.task_spec_members.is_empty() {
            Self::set_members(self.task_spec_members, &mut object["spec"]["taskSpec"]);
        }
        set_record(&mut object, self.record);
        object
    }

    /// The operations [`Injection::apply`] amounts to, in the order a diff of the whole
    /// objects lists them (maps keep their keys sorted: `metadata` before `spec`).
    fn patch(self, original: &Value, shape: Shape) -> Vec<Operation> {
        let mut ops = Vec::new();
        if original.get("metadata").is_some_and(Value::is_object) {
            let label = self
                .record
                .as_ref()
                .map(|_| Value::from(record::LABEL_VALUE));
            patch::set_at(
                original,
                &["metadata", "annotations", record::ANNOTATION],
                self.record.clone().map(Value::String),
                &mut ops,
            );
            patch::set_at(
                original,
                &["metadata", "annotations", record::VERIFIED_ANNOTATION],
                None,
                &mut ops,
            );
            patch::set_at(
                original,
                &["metadata", "labels", record::LABEL],
                label,
                &mut ops,
            );
        } else if self.record.is_some() {
            // No metadata object to add two members to: one operation sets it whole.
            let mut metadata = Value::Null;
            set_record(&mut metadata, self.record.clone());
            patch::set_at(
                original,
                &["metadata"],
                metadata.get("metadata").cloned(),
                &mut ops,
            );
        }
        // `spec.params` sorts before `spec.taskSpec`.
        if original.get("spec").is_some_and(Value::is_object)
            && let Some(params) =
                params_with_record(original.pointer("/spec/params"), self.record.as_deref())
        {
            let mut path = patch::pointer(&["spec"]);
            match params {
                Some(params) => patch::diff_member(
                    &mut path,
                    "params",
                    original.pointer("/spec/params"),
                    params,
                    &mut ops,
                ),
                None => ops.push(Operation::Remove {
                    path: patch::pointer(&["spec", "params"]),
                }),
            }
        }
        if self.task_spec_members.is_empty() {
            return ops;
        }
        let old_spec = original["spec"]["taskSpec"]
            .as_object()
            .expect("injected into an object taskSpec");
        let mut path = patch::pointer(&["spec", "taskSpec"]);
        // Members in key order, as a diff of the whole taskSpec visits them.
        for (key, value) in self.task_spec_members {
            let Some(value) = value else {
                if old_spec.contains_key(&key) {
                    let len = path.len();
                    patch::push_token(&mut path, &key);
                    ops.push(Operation::Remove { path: path.clone() });
                    path.truncate(len);
                }
                continue;
            };
            match (shape, key.as_str()) {
                (Shape::Fewest, "steps") => {
                    patch::diff_member_fewest(&mut path, &key, old_spec.get(&key), value, &mut ops)
                }
                _ => patch::diff_member(&mut path, &key, old_spec.get(&key), value, &mut ops),
            }
        }
        ops
    }
}

/// Sets (`Some`) or removes (`None`) the `bookend.dev/injected` record of an object, and with
/// it the label that selects the TaskRun for post-run verification. The verified mark goes
/// either way: a TaskRun being admitted has not run yet.
pub(super) fn set_record(object: &mut Value, record: Option<String>) {
    if let Some(Value::Object(annotations)) = object
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
    {
        annotations.remove(record::VERIFIED_ANNOTATION);
    }
    set_record_param(object, record.as_deref());
    match record {
        Some(record) => {
            if !object.is_object() {
                *object = Value::Object(Map::new());
            }
            set_metadata_entry(object, "annotations", record::ANNOTATION, record);
            set_metadata_entry(
                object,
                "labels",
                record::LABEL,
                record::LABEL_VALUE.to_owned(),
            );
        }
        None => {
            for (map, key) in [
                ("annotations", record::ANNOTATION),
                ("labels", record::LABEL),
            ] {
                if let Some(Value::Object(entries)) =
                    object.get_mut("metadata").and_then(|m| m.get_mut(map))
                {
                    entries.remove(key);
                }
            }
        }
    }
}

/// Whether the object carries any of the marks bookend writes on a TaskRun it admits (the
/// record, the verification label) or after it verified it.
pub(super) fn has_marks(object: &Value) -> bool {
    let has = |map: &str, key: &str| {
        object
            .pointer(&format!("/metadata/{map}"))
            .and_then(Value::as_object)
            .is_some_and(|m| m.contains_key(key))
    };
    has("annotations", record::ANNOTATION)
        || has("annotations", record::VERIFIED_ANNOTATION)
        || has("labels", record::LABEL)
        || record::carries_record_param(object)
}

/// Sets (`Some`) or removes (`None`) the record param ([`record::PARAM`]) in the object's
/// `spec.params`, as [`params_with_record`] says.
fn set_record_param(object: &mut Value, record: Option<&str>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match params_with_record(spec.get("params"), record) {
        Some(Some(params)) => {
            spec.insert("params".to_owned(), params);
        }
        Some(None) => {
            spec.remove("params");
        }
        None => {}
    }
}

/// The TaskRun's `spec.params` (`current`) with exactly one record param holding `record`
/// (in the place of the first one there was, else last), or none (`record` `None`); every
/// other param stays as it is. Whatever the author wrote under the name is replaced or
/// dropped: only bookend's mutation writes it. `None`: nothing changes (also when `params` is
/// not a list, which Tekton refuses); `Some(None)`: the member goes (it held only that param).
pub(super) fn params_with_record(
    current: Option<&Value>,
    record: Option<&str>,
) -> Option<Option<Value>> {
    let existing: &[Value] = match current {
        None | Some(Value::Null) => &[],
        Some(Value::Array(params)) => params,
        Some(_) => return None,
    };
    let ours = record.map(|text| serde_json::json!({"name": record::PARAM, "value": text}));
    let mut carried = existing.iter().filter(|p| record::is_record_param(p));
    let settled = match (&ours, carried.next(), carried.next()) {
        (None, None, _) => true,
        (Some(ours), Some(only), None) => only == ours,
        _ => false,
    };
    if settled {
        return None;
    }
    let mut params: Vec<Value> = Vec::with_capacity(existing.len() + 1);
    let mut ours = ours;
    for param in existing {
        if !record::is_record_param(param) {
            params.push(param.clone());
        } else if let Some(ours) = ours.take() {
            params.push(ours);
        }
    }
    params.extend(ours);
    Some((!params.is_empty()).then_some(Value::Array(params)))
}

/// Sets `metadata.<map>.<key>` (`map`: `labels` or `annotations`), making `metadata` and the
/// map objects where they are missing or not objects.
pub(super) fn set_metadata_entry(object: &mut Value, map: &str, key: &str, value: String) {
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    let meta = object_entry(obj, "metadata");
    object_entry(meta, map).insert(key.to_owned(), Value::String(value));
}

fn object_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .expect("entry was just made an object")
}
