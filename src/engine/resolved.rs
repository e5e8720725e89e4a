//! The dry-run Task CREATE of Tekton's controller for a remotely resolved Task: bookend injects
//! into the Task itself.

use serde_json::{Map, Value};

use super::admitted::{Injection, set_metadata_entry};
use super::isolate;
use super::plan::{Context, seal, tekton_support};
use super::{Decision, Lookup, Outcome, Request, record};
use crate::patch;
use crate::policy::select::{Labels, Subject};
use crate::policy::{Mode, Policy, PolicySet};
use crate::tekton::{self, ApiVersion};

/// Tekton's controller dry-run-creates every remotely resolved Task and runs the object the
/// API server returns (`DryRunValidate` in Tekton's `pkg/reconciler/apiserver/apiserver.go`): bookend injects into that Task. Only policies
/// whose criteria are all namespace-level apply, since the Task carries nothing of the TaskRun
/// (its labels, its origin) that it will run for.
pub fn decide_resolved_task(
    request: Request<'_>,
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Decision {
    let mut decision = Decision::new(request.object);
    let task = request.object;
    let Some(version) = task
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(ApiVersion::parse)
        .filter(|_| task.get("kind").and_then(Value::as_str) == Some("Task"))
    else {
        return decision;
    };
    let namespace_labels = lookup
        .namespace_labels(request.namespace)
        .unwrap_or_default();
    let no_labels = Labels::new();
    let subject = Subject {
        namespace: request.namespace,
        namespace_labels: &namespace_labels,
        labels: &no_labels,
        origin: tekton::Origin::Standalone,
    };
    let applied: Vec<&Policy> = set
        .candidates(&subject)
        .into_iter()
        .filter(|p| p.spec.mode == Mode::Enforce && p.namespace_level_only() && p.matches(&subject))
        .collect();
    let mut taskrun = serde_json::json!({
        "apiVersion": version.as_str(),
        "kind": "TaskRun",
        "metadata": task.get("metadata").cloned().unwrap_or(Value::Object(Map::new())),
        "spec": {"taskSpec": task.get("spec").cloned().unwrap_or(Value::Null)},
    });
    if let Some(meta) = taskrun["metadata"].as_object_mut() {
        meta.retain(|k, _| k == "annotations");
    }
    // Tekton merges the Task's annotations into the TaskRun it runs for.
    let execution_mode = task
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(isolate::EXECUTION_MODE_ANNOTATION))
        .and_then(Value::as_str);
    // The Task's param defaults reach the org steps as the TaskRun's own values do (checked
    // at the TaskRun's admission); a remote Task is first seen here.
    let defaults = task.get("spec").map_or(Ok(()), |spec| {
        isolate::check_param_defaults(spec, "spec.params", &applied)?;
        isolate::check_on_error_literal(spec.get("steps"), "spec.steps", &applied)
    });
    let supported = tekton_support(&applied, &mut decision.warnings);
    let result = match (
        applied.is_empty(),
        supported
            .and(isolate::check_annotations(
                execution_mode,
                "metadata.annotations",
            ))
            .and(defaults),
    ) {
        (false, Err(denial)) => Err(denial),
        _ => seal(
            &taskrun,
            version,
            &applied,
            set,
            &Context {
                namespace: request.namespace,
                lookup,
            },
        ),
    };
    let injection = match result {
        Err(denial) => return decision.deny(denial),
        Ok(None) => return decision,
        Ok(Some(injection)) => injection,
    };
    let mut new_task = task.clone();
    Injection::set_members(injection.task_spec_members, &mut new_task["spec"]);
    if let Some(record) = injection.record {
        set_metadata_entry(&mut new_task, "annotations", record::ANNOTATION, record);
    }
    let ops = patch::diff(task, &new_task);
    if ops.is_empty() {
        return decision;
    }
    decision.injected = applied
        .iter()
        .map(|p| (p.id.to_string(), p.step_names().count()))
        .collect();
    decision.outcome = Outcome::Mutated;
    decision.patch = ops;
    decision.object = new_task;
    decision
}
