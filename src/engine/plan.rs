//! Working out the admitted TaskRun for the policies that apply: inline a referenced Task or
//! skip/deny it, strip and inject steps, merge volumes, check Tekton's rules.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::admitted::{Admitted, Injection, set_metadata_entry};
use super::canonical::equivalent;
use super::inject::{self, ParamValues, StepKind};
use super::lookup::Lookup;
use super::record::{self, INLINED_ANNOTATION, Record, RecordEntry};
use super::{Denial, check};
use crate::policy::{Policy, PolicySet, RemoteTaskRefPolicy, TaskRefPolicy};
use crate::tekton::{self, ApiVersion, TaskRunView, TaskSource};

/// Where the TaskRun is created, and what else bookend can look up there.
pub struct Context<'a> {
    pub namespace: &'a str,
    pub lookup: &'a dyn Lookup,
}

pub(super) struct Plan {
    /// `Ok(Some(admitted))` to admit changed, `Ok(None)` to admit unchanged.
    pub(super) outcome: Result<Option<Admitted>, Denial>,
    pub(super) warnings: Vec<String>,
}

/// Works out the admitted object for a set of applied policies (in evaluation order).
pub(super) fn plan(
    view: &TaskRunView<'_>,
    namespace: &str,
    applied: &[&Policy],
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Plan {
    let mut warnings = Vec::new();
    let outcome = match view.task_source() {
        TaskSource::Inline => inject_into(
            view.object,
            view.api_version,
            applied,
            set,
            &Context { namespace, lookup },
            &mut warnings,
        )
        .map(|injection| injection.map(Admitted::Injected)),
        TaskSource::LocalRef { name } => {
            plan_local_ref(view, namespace, &name, applied, set, lookup, &mut warnings)
                .map(|object| object.map(Admitted::Rewritten))
        }
        TaskSource::RemoteRef { resolver } => {
            match applied
                .iter()
                .find(|p| p.spec.remote_task_ref == RemoteTaskRefPolicy::Deny)
            {
                Some(p) => Err(Denial::policy(
                    p,
                    format!(
                        "spec.taskRef: the Task comes from the {resolver:?} resolver, so bookend cannot inject its steps, and the policy sets remoteTaskRef: Deny; use an inline taskSpec or a Task in the namespace"
                    ),
                )),
                None => {
                    if !applied.is_empty() {
                        warnings.push(format!(
                            "bookend: TaskRun uses a remote Task ({resolver} resolver); not injected: {} (remoteTaskRef: Skip)",
                            ids(applied)
                        ));
                    }
                    Ok(None)
                }
            }
        }
        TaskSource::CustomTask { .. } | TaskSource::Missing => Ok(None),
    };
    Plan { outcome, warnings }
}

/// The Audit question: would the TaskRun be denied were the policies `all` (the enforced ones
/// and the Audit ones, in evaluation order) all enforced? Asked only once [`plan`] admitted
/// the TaskRun under the `enforced` ones. For an inline spec this makes the checks [`plan`]
/// makes, in the same order and with the same messages, without building what would be
/// admitted: the composition gets stand-ins for the user steps (name and `onError`, all the
/// checks and the Always layout read of them) and helpers without scripts, so the user steps
/// are neither copied nor re-indexed; no record, kept forms or patch are made; and the step
/// rules are applied to the steps the enforced policies do not bring. Other task sources take
/// the full [`plan`].
pub(super) fn would_deny(
    view: &TaskRunView<'_>,
    namespace: &str,
    all: &[&Policy],
    enforced: &[&Policy],
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Option<Denial> {
    if !matches!(view.task_source(), TaskSource::Inline) {
        return plan(view, namespace, all, set, lookup).outcome.err();
    }
    let task_spec = view.task_spec().filter(|t| t.is_object())?;
    let steps = view.steps();
    let record = view.annotation(record::ANNOTATION).and_then(Record::parse);
    let settings = set.settings();
    let touches_prefix = steps
        .iter()
        .any(|s| tekton::step_name(s).is_some_and(|n| n.starts_with(settings.prefix.as_str())));
    if all.is_empty() && !touches_prefix && record.is_none() {
        return None;
    }
    let stand_in = |step: &Value| {
        let mut m = Map::new();
        for key in ["name", "onError"] {
            if let Some(v) = step.get(key) {
                m.insert(key.to_owned(), v.clone());
            }
        }
        Value::Object(m)
    };
    let user: Vec<Value> = if touches_prefix || record.is_some() {
        match inject::strip(steps, set, record.as_ref(), view.api_version) {
            Ok(stripped) => stripped.user.iter().map(stand_in).collect(),
            Err(denial) => return Some(denial),
        }
    } else {
        steps.iter().map(stand_in).collect()
    };
    if user.is_empty() {
        return None;
    }
    let params = params_of(view, task_spec);
    let composed = inject::compose_layout(user, all, settings, view.api_version, &params);
    if let Err(denial) = merge_volumes(task_spec.get("volumes"), all, set, record.as_ref()) {
        return Some(denial);
    }
    // The enforced policies' steps passed the step rules in this TaskRun already (else the
    // TaskRun was denied before this question), so only the others' are checked again.
    check::check_steps_of(
        task_spec,
        &composed.steps,
        &composed.kinds,
        all,
        &|p: &Policy| !enforced.iter().any(|e| std::ptr::eq(*e, p)),
        params.run_params,
        &Context { namespace, lookup },
    )
    .err()
}

/// The values a user step's `onError: $(params.x)` may name: the TaskRun's params, then the
/// Task's defaults.
fn params_of<'a>(view: &TaskRunView<'a>, task_spec: &'a Value) -> ParamValues<'a> {
    let params = |holder: Option<&'a Value>| {
        holder
            .and_then(|h| h.get("params"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
    };
    ParamValues {
        run_params: params(view.spec()),
        spec_params: params(Some(task_spec)),
    }
}

fn ids(policies: &[&Policy]) -> String {
    policies
        .iter()
        .map(|p| p.id.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn plan_local_ref(
    view: &TaskRunView<'_>,
    namespace: &str,
    task_name: &str,
    applied: &[&Policy],
    set: &PolicySet,
    lookup: &dyn Lookup,
    warnings: &mut Vec<String>,
) -> Result<Option<Value>, Denial> {
    if let Some(p) = applied
        .iter()
        .find(|p| p.spec.task_ref == TaskRefPolicy::Deny)
    {
        return Err(Denial::policy(
            p,
            format!(
                "spec.taskRef.name: TaskRuns that reference a Task ({task_name:?}) are refused by this policy (taskRef: Deny); use an inline taskSpec"
            ),
        ));
    }
    let inline: Vec<&Policy> = applied
        .iter()
        .copied()
        .filter(|p| p.spec.task_ref == TaskRefPolicy::Inline)
        .collect();
    let Some(first) = inline.first() else {
        if !applied.is_empty() {
            warnings.push(format!(
                "bookend: TaskRun references Task {task_name}; not injected: {} (taskRef: Skip)",
                ids(applied)
            ));
        }
        return Ok(None);
    };
    if lookup.inline_task_spec_refused() {
        // Inlining would make a TaskRun Tekton refuses ("must not set the field(s):
        // spec.taskSpec"), an error about a field the user never wrote.
        return Err(Denial::policy(
            first,
            format!(
                "spec.taskRef.name: bookend injects this policy's steps by inlining Task {task_name:?} as spec.taskSpec, but Tekton's feature flag disable-inline-spec lists taskrun, so Tekton would refuse the TaskRun; set taskRef: Skip (or Deny) on the policy, or remove taskrun from disable-inline-spec in Tekton's feature-flags ConfigMap"
            ),
        ));
    }
    let Some(task) = lookup.task(namespace, task_name) else {
        return Err(Denial::policy(
            first,
            format!(
                "spec.taskRef.name: Task {task_name:?} was not found in namespace {namespace}, and bookend must inline it to inject the policy's steps (taskRef: Inline); create the Task before the TaskRun, or set taskRef: Skip on the policy"
            ),
        ));
    };
    if task.signed {
        if let Some(p) = inline
            .iter()
            .find(|p| p.spec.remote_task_ref == RemoteTaskRefPolicy::Deny)
        {
            return Err(Denial::policy(
                p,
                format!(
                    "spec.taskRef.name: Task {task_name:?} carries a trusted-resources signature; inlining it would bypass signature verification, so bookend will not inject into it (remoteTaskRef: Deny)"
                ),
            ));
        }
        warnings.push(format!(
            "bookend: Task {task_name} is signed (trusted resources); inlining would bypass verification, so it was not inlined; not injected: {}",
            ids(applied)
        ));
        return Ok(None);
    }
    let mut object = view.object.clone();
    let spec = object
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .expect("a taskRef TaskRun has a spec");
    spec.remove("taskRef");
    let task_spec = match task.api_version {
        ApiVersion::V1 => task.spec.clone(),
        ApiVersion::V1beta1 => tekton::task_spec_to_v1(task.spec.clone()),
    };
    spec.insert(
        "taskSpec".to_owned(),
        tekton::convert_task_spec(task_spec, view.api_version),
    );
    set_metadata_entry(&mut object, "labels", tekton::TASK_LABEL, task.name.clone());
    let origin = match &task.resource_version {
        Some(rv) => format!("{}@{rv}", task.name),
        None => task.name.clone(),
    };
    set_metadata_entry(&mut object, "annotations", INLINED_ANNOTATION, origin);
    let injection = inject_into(
        &object,
        view.api_version,
        // Once inlined, the TaskRun is an inline one: every policy that applies injects, `Skip`
        // ones too, so that the next pass over it (a re-invocation, the backstop) changes
        // nothing.
        applied,
        set,
        &Context { namespace, lookup },
        warnings,
    )?;
    Ok(Some(match injection {
        Some(injection) => injection.apply(object),
        None => object,
    }))
}

/// Strips and injects into an inline-spec TaskRun. `Ok(None)`: nothing to change.
pub(super) fn inject_into(
    object: &Value,
    version: ApiVersion,
    applied: &[&Policy],
    set: &PolicySet,
    context: &Context<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<Injection>, Denial> {
    let view = TaskRunView {
        object,
        api_version: version,
    };
    let Some(task_spec) = view.task_spec().filter(|t| t.is_object()) else {
        return Ok(None);
    };
    let steps = view.steps();
    let record = view.annotation(record::ANNOTATION).and_then(Record::parse);
    let settings = set.settings();
    let touches_prefix = steps
        .iter()
        .any(|s| tekton::step_name(s).is_some_and(|n| n.starts_with(settings.prefix.as_str())));
    if applied.is_empty() && !touches_prefix && record.is_none() {
        return Ok(None);
    }
    let stripped = inject::strip(steps, set, record.as_ref(), version)?;
    warnings.extend(stripped.warnings);
    if stripped.user.is_empty() {
        // Tekton refuses a Task without steps of its own; bookend does not make it valid.
        return Ok(None);
    }

    let params = params_of(&view, task_spec);
    let composed = inject::compose(stripped.user, applied, settings, version, &params);
    let mut final_steps = composed.steps;
    // Keep the existing form of steps bookend would write identically (Tekton's defaulting may
    // have re-serialised them), so a second pass yields no patch. Looked up by name through a
    // map (the first step of each name): long TaskRuns have hundreds of steps and gates. A
    // helper in the form an earlier release wrote is kept too: it checks the same steps, and
    // an upgrade must not refuse what an older replica injected.
    let existing_by_name: HashMap<&str, &Value> = steps
        .iter()
        .rev()
        .filter_map(|s| Some((tekton::step_name(s)?, s)))
        .collect();
    let mut helper_checks = composed.checks.iter();
    for (step, kind) in final_steps.iter_mut().zip(&composed.kinds) {
        let helper = match kind {
            StepKind::User(_) => continue,
            StepKind::Gate | StepKind::Verdict => helper_checks.next(),
            StepKind::Pre(_) | StepKind::Post(_) => None,
        };
        let Some(existing) = tekton::step_name(step).and_then(|n| existing_by_name.get(n)) else {
            continue;
        };
        let same = equivalent(existing, step)
            || helper.is_some_and(|spec| {
                let name = tekton::step_name(step).unwrap_or_default();
                equivalent(existing, &inject::legacy_helper_step(settings, name, spec))
            });
        if same {
            *step = (*existing).clone();
        }
    }

    let volumes = merge_volumes(task_spec.get("volumes"), applied, set, record.as_ref())?;
    check::check(
        task_spec,
        &final_steps,
        &composed.kinds,
        applied,
        params.run_params,
        context,
    )?;
    // Only the taskSpec members bookend sets: the others (params, workspaces, results, ...)
    // are neither copied nor compared.
    let mut task_spec_members = Map::new();
    task_spec_members.insert("steps".to_owned(), Value::Array(final_steps));
    if let Some(volumes) = volumes {
        task_spec_members.insert("volumes".to_owned(), volumes);
    }
    let record = Record {
        policies: applied
            .iter()
            .map(|p| RecordEntry {
                policy: p.id.to_string(),
                hash: p.hash.clone(),
                steps: p.step_names().map(str::to_owned).collect(),
                volumes: p.spec.volumes.iter().map(|v| v.name.clone()).collect(),
            })
            .collect(),
        helpers: composed.helpers,
        continued: composed.continued,
    };
    Ok(Some(Injection {
        task_spec_members,
        record: (!record.is_empty()).then(|| record.to_json()),
    }))
}

/// The taskSpec's `volumes` (`current`) without those bookend added before and with the applied
/// policies' volumes; `None` when there were none and none are needed. A user volume with a
/// policy volume's name is a denial.
fn merge_volumes(
    current: Option<&Value>,
    applied: &[&Policy],
    set: &PolicySet,
    record: Option<&Record>,
) -> Result<Option<Value>, Denial> {
    let existing: &[Value] = current
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let is_ours = |v: &Value| {
        let Some(name) = v.get("name").and_then(Value::as_str) else {
            return false;
        };
        record.is_some_and(|r| r.has_volume(name))
            || set.volume_owner(name).is_some_and(|p| {
                p.volumes
                    .iter()
                    .any(|pv| pv.get("name") == v.get("name") && equivalent(pv, v))
            })
    };
    let mut volumes: Vec<Value> = existing.iter().filter(|v| !is_ours(v)).cloned().collect();
    for policy in applied {
        for volume in &policy.volumes {
            let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
            if let Some(i) = volumes
                .iter()
                .position(|v| v.get("name").and_then(Value::as_str) == Some(name))
            {
                return Err(Denial::policy(
                    policy,
                    format!(
                        "spec.taskSpec.volumes[{i}].name: multiple volumes with same name {name:?}: the TaskRun defines a volume the policy injects; rename the TaskRun's volume"
                    ),
                ));
            }
            let keep = existing
                .iter()
                .find(|v| v.get("name") == volume.get("name") && equivalent(v, volume));
            volumes.push(keep.cloned().unwrap_or_else(|| volume.clone()));
        }
    }
    if volumes.is_empty() && current.is_none() {
        return Ok(None);
    }
    Ok(Some(Value::Array(volumes)))
}
