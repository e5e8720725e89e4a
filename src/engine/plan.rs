//! Working out the admitted TaskRun for the policies that apply: classify where its Task comes
//! from (as Tekton's reconciler does), inline a referenced Task or skip/deny it, refuse the
//! TaskRun fields that would reach org steps, seal the steps (recognise, materialise the
//! stepTemplate, compose), merge volumes, check Tekton's rules.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::admitted::{Admitted, Injection, set_metadata_entry, set_record};
use super::canonical::equivalent;
use super::inject::{self, ParamValues, StepKind};
use super::lookup::Lookup;
use super::recognise::recognise;
use super::record::{self, INLINED_ANNOTATION, Record};
use super::{Denial, check, hermetic, isolate};
use crate::policy::{Policy, PolicySet, RemoteTaskRefPolicy, Support, TaskRefPolicy};
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
    let outcome = tekton_support(applied, &mut warnings)
        .and_then(|()| plan_source(view, namespace, applied, set, lookup, &mut warnings));
    Plan { outcome, warnings }
}

/// Whether the cluster's Tekton runs the applied policies ([`Policy::tekton`]): a policy it
/// cannot run refuses the TaskRun (Tekton would refuse or run it differently), naming the field
/// and the Tekton version or flag; one whose `Always` falls back to `OnSuccess` adds a warning.
pub(super) fn tekton_support(
    applied: &[&Policy],
    warnings: &mut Vec<String>,
) -> Result<(), Denial> {
    for policy in applied {
        match &policy.tekton {
            Support::Full => {}
            Support::Degraded(_) => warnings.push(format!(
                "bookend: {}: {}; its post-steps run only when every earlier step succeeded",
                policy.id, policy.tekton
            )),
            Support::Unsupported { .. } => {
                return Err(Denial::policy(
                    policy,
                    format!(
                        "{}; bookend refuses the TaskRun rather than inject steps Tekton would refuse or run differently",
                        policy.tekton
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn plan_source(
    view: &TaskRunView<'_>,
    namespace: &str,
    applied: &[&Policy],
    set: &PolicySet,
    lookup: &dyn Lookup,
    warnings: &mut Vec<String>,
) -> Result<Option<Admitted>, Denial> {
    let context = Context { namespace, lookup };
    // bookend's record goes into `spec.params` (record::PARAM): a list, or nothing.
    if let Some(p) = applied.first()
        && view
            .spec()
            .and_then(|s| s.get("params"))
            .is_some_and(|params| !params.is_array() && !params.is_null())
    {
        return Err(Denial::policy(
            p,
            "spec.params: must be a list of params ({name, value}), as Tekton requires; bookend adds its record to it (bookend-injected); write the params as a list",
        ));
    }
    match view.task_source() {
        TaskSource::Inline => {
            if !applied.is_empty() {
                isolate::check_run_fields(view, set.settings(), lookup, applied)?;
                if let Some(spec) = view.spec() {
                    isolate::check_param_values(spec, spec.get("taskSpec"), applied)?;
                }
            }
            seal(view.object, view.api_version, applied, set, &context)
                .map(|injection| injection.map(Admitted::Injected))
        }
        TaskSource::LocalRef { name } => {
            plan_local_ref(view, namespace, &name, applied, set, lookup, warnings)
                .map(|object| object.map(Admitted::Rewritten))
        }
        TaskSource::RemoteRef { resolver } => {
            if let Some(p) = applied
                .iter()
                .find(|p| p.spec.remote_task_ref == RemoteTaskRefPolicy::Deny)
            {
                return Err(Denial::policy(
                    p,
                    format!(
                        "spec.taskRef: the Task comes from the {resolver:?} resolver, so bookend cannot inject its steps, and the policy sets remoteTaskRef: Deny; use an inline taskSpec or a Task in the namespace"
                    ),
                ));
            }
            // Only the namespace-level policies reach the resolved Task (the controller's
            // dry-run): another one could not jail its steps, and must not let them run
            // networked.
            if let Some(p) = applied
                .iter()
                .find(|p| p.spec.user_steps.hermetic() && !p.namespace_level_only())
            {
                return Err(Denial::policy(
                    p,
                    format!(
                        "spec.taskRef: the Task comes from the {resolver:?} resolver, and the policy requires the TaskRun's own steps to run without network (userSteps.network: None); bookend jails a resolved Task's steps only for policies whose criteria are all about the namespace (its selector or origin reads the TaskRun, which the resolved Task does not carry); use an inline taskSpec or a Task in the namespace"
                    ),
                ));
            }
            if let Some(p) = hermetic::requiring(applied) {
                hermetic::check_policy_levels(applied)?;
                hermetic::check_run(view.spec(), lookup.default_pod_template().as_ref(), p)?;
            }
            // The namespace-level policies inject into the resolved Task at the controller's
            // dry-run: the TaskRun's own fields must leave those steps alone too.
            let injecting: Vec<&Policy> = applied
                .iter()
                .copied()
                .filter(|p| p.namespace_level_only())
                .collect();
            if !injecting.is_empty() {
                isolate::check_run_fields(view, set.settings(), lookup, &injecting)?;
                if let Some(spec) = view.spec() {
                    isolate::check_param_values(spec, None, &injecting)?;
                }
            }
            let skipped: Vec<&Policy> = applied
                .iter()
                .copied()
                .filter(|p| !p.namespace_level_only())
                .collect();
            if !skipped.is_empty() {
                warnings.push(format!(
                    "bookend: TaskRun uses a remote Task ({resolver} resolver); not injected: {} (remoteTaskRef: Skip; its criteria read the TaskRun, which the resolved Task does not carry)",
                    ids(&skipped)
                ));
            }
            // Those same policies (their criteria read only the namespace, as the dry-run's
            // do) are recorded now, with the verification label: Tekton's controller keeps the
            // resolved Task's own metadata, so a record written at the dry-run never reaches
            // the TaskRun. Verification reads what ran from `status.taskSpec`.
            Ok((!injecting.is_empty()).then(|| {
                Admitted::Marked(Injection {
                    task_spec_members: BTreeMap::new(),
                    record: Some(
                        Record {
                            policies: injecting.iter().map(|p| Record::entry_of(p)).collect(),
                            resolved: true,
                            ..Record::default()
                        }
                        .to_json(),
                    ),
                })
            }))
        }
        TaskSource::Both => match applied.first() {
            Some(p) => Err(Denial::policy(
                p,
                "spec: expected exactly one, got both: spec.taskRef, spec.taskSpec (Tekton refuses such a TaskRun too); keep one of them",
            )),
            None => Ok(None),
        },
        TaskSource::Bundle => match applied.first() {
            Some(p) => Err(Denial::policy(
                p,
                "spec.taskRef.bundle: must not set the field(s): spec.taskRef.bundle (Tekton refuses bundles on create); reference the bundle through the bundles resolver (taskRef: {resolver: bundles, params: [...]})",
            )),
            None => Ok(None),
        },
        TaskSource::Missing => match applied.first() {
            Some(p) => Err(Denial::policy(
                p,
                "spec: the TaskRun has neither an inline spec.taskSpec nor a spec.taskRef bookend can read (an object naming a Task or a resolver), so the policy's steps have nowhere to go; write one of them",
            )),
            None => Ok(None),
        },
    }
}

/// The Audit question: would the TaskRun be denied were the policies `all` (the enforced ones
/// and the Audit ones, in evaluation order) all enforced? Asked only once [`plan`] admitted
/// the TaskRun under the `enforced` ones, of the TaskRun as its author wrote it.
pub(super) fn would_deny(
    view: &TaskRunView<'_>,
    namespace: &str,
    enforced: &[&Policy],
    all: &[&Policy],
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Option<Denial> {
    let authored = as_authored(view, enforced, set);
    let view = TaskRunView {
        object: authored.as_ref(),
        api_version: view.api_version,
    };
    plan(&view, namespace, all, set, lookup).outcome.err()
}

/// The TaskRun as its author wrote it: an inline TaskRun that carries what the `enforced`
/// policies inject (a re-invocation, the backstop, Events after admission) without their steps,
/// volumes and record, so that other policies can be planned on it. Anything else as it is.
pub(super) fn as_authored<'v>(
    view: &TaskRunView<'v>,
    enforced: &[&Policy],
    set: &PolicySet,
) -> Cow<'v, Value> {
    let settings = set.settings();
    let prefix = settings.prefix.as_str();
    let Some(task_spec) = view.task_spec().filter(|t| t.is_object()) else {
        return Cow::Borrowed(view.object);
    };
    let steps = view.steps();
    if !steps
        .iter()
        .any(|s| tekton::step_name(s).is_some_and(|n| n.starts_with(prefix)))
    {
        return Cow::Borrowed(view.object);
    }
    let hint = view.annotation(record::ANNOTATION).and_then(Record::parse);
    let params = params_of(view, task_spec);
    let Ok(recognised) = recognise(
        steps,
        enforced,
        settings,
        view.api_version,
        &params,
        hint.as_ref(),
    ) else {
        return Cow::Borrowed(view.object);
    };
    let mut object = view.object.clone();
    let ours: Vec<&Value> = enforced.iter().flat_map(|p| &p.volumes).collect();
    let spec = &mut object["spec"]["taskSpec"];
    spec["steps"] = Value::Array(recognised.user);
    if let Some(Value::Array(volumes)) = spec.get_mut("volumes") {
        volumes.retain(|v| !ours.iter().any(|o| equivalent(o, v)));
    }
    let our_results: Vec<Value> = enforced.iter().flat_map(|p| p.results()).collect();
    if let Some(Value::Array(results)) = spec.get_mut("results") {
        results.retain(|r| !our_results.iter().any(|o| same_result(o, r)));
    }
    set_record(&mut object, None);
    Cow::Owned(object)
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

/// `spec.taskRef.kind` is exactly `ClusterTask` (Tekton compares it as written).
fn references_cluster_task(view: &TaskRunView<'_>) -> bool {
    view.spec()
        .and_then(|s| s.get("taskRef"))
        .and_then(|r| r.get("kind"))
        .and_then(Value::as_str)
        == Some("ClusterTask")
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
        if let Some(p) = hermetic::requiring(applied) {
            return Err(Denial::policy(
                p,
                format!(
                    "spec.taskRef.name: the policy requires the TaskRun's own steps to run without network (userSteps.network: None), and every policy that applies leaves Task {task_name:?} as it is (taskRef: Skip), so its steps would keep the network; set taskRef: Inline on the policy, or use an inline taskSpec"
                ),
            ));
        }
        if !applied.is_empty() {
            warnings.push(format!(
                "bookend: TaskRun references Task {task_name}; not injected: {} (taskRef: Skip)",
                ids(applied)
            ));
        }
        return Ok(None);
    };
    let tekton = &set.settings().tekton;
    if tekton.has_cluster_tasks() && references_cluster_task(view) {
        // That Tekton runs the cluster-scoped ClusterTask, not the namespaced Task bookend
        // would inline: injecting into the wrong Task would change what runs.
        return Err(Denial::policy(
            first,
            format!(
                "spec.taskRef.kind: ClusterTask: Tekton {} runs the ClusterTask {task_name:?}, which bookend does not inline (it inlines namespaced Tasks only), so it cannot inject the policy's steps (taskRef: Inline); reference a Task in namespace {namespace} (copy the ClusterTask into one and drop kind: ClusterTask; ClusterTask is deprecated and gone in Tekton v1.0.0), use an inline taskSpec, or set taskRef: Skip on the policy",
                tekton.version
            ),
        ));
    }
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
        // Inlining would bypass the signature's verification, and leaving the reference would
        // leave the steps out; the policy decides with taskRef: Skip, never the Task's author.
        return Err(Denial::policy(
            first,
            format!(
                "spec.taskRef.name: Task {task_name:?} carries a trusted-resources signature, and bookend injects this policy's steps by inlining the Task, which would bypass the signature's verification; run an unsigned Task, or set taskRef: Skip on the policy to admit such TaskRuns as they are"
            ),
        ));
    }
    isolate::check_run_fields(view, set.settings(), lookup, applied)?;
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
    let task_spec = tekton::convert_task_spec(task_spec, view.api_version);
    isolate::check_param_values(&Value::Object(spec.clone()), Some(&task_spec), applied)?;
    spec.insert("taskSpec".to_owned(), task_spec);
    set_metadata_entry(&mut object, "labels", tekton::TASK_LABEL, task.name.clone());
    let origin = match &task.resource_version {
        Some(rv) => format!("{}@{rv}", task.name),
        None => task.name.clone(),
    };
    set_metadata_entry(&mut object, "annotations", INLINED_ANNOTATION, origin);
    let injection = seal(
        &object,
        view.api_version,
        // Once inlined, the TaskRun is an inline one: every policy that applies injects, `Skip`
        // ones too, so that the next pass over it (a re-invocation, the backstop) changes
        // nothing.
        applied,
        set,
        &Context { namespace, lookup },
    )?;
    Ok(Some(match injection {
        Some(injection) => injection.apply(object),
        None => object,
    }))
}

/// Seals an inline-spec TaskRun: tells the author's steps from bookend's earlier ones (only
/// what bookend would write now counts as its own), writes the author's stepTemplate into the
/// author's steps, and puts the policies' steps around them. `Ok(None)`: nothing to change.
/// No input skips this when a policy applies: what cannot be sealed is denied.
pub(super) fn seal(
    object: &Value,
    version: ApiVersion,
    applied: &[&Policy],
    set: &PolicySet,
    context: &Context<'_>,
) -> Result<Option<Injection>, Denial> {
    let view = TaskRunView {
        object,
        api_version: version,
    };
    let settings = set.settings();
    let prefix = settings.prefix.as_str();
    let record_text = view.annotation(record::ANNOTATION);
    let first = applied.first();
    let refuse = |path: &str, message: &str| match first {
        Some(p) => Err(Denial::policy(p, format!("{path}: {message}"))),
        None => Ok(None),
    };
    let Some(task_spec) = view.task_spec().filter(|t| t.is_object()) else {
        return refuse(
            "spec.taskSpec",
            "must be an object (a Tekton TaskSpec) for bookend to put the policy's steps into it",
        );
    };
    let steps: &[Value] = match task_spec.get("steps") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(steps)) => steps,
        Some(_) => return refuse("spec.taskSpec.steps", "must be a list of steps"),
    };
    if let Some(i) = steps.iter().position(|s| !s.is_object()) {
        return refuse(
            &format!("spec.taskSpec.steps[{i}]"),
            "must be a step (an object)",
        );
    }
    let reserved = |v: &Value| {
        v.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with(prefix))
    };
    let volumes = task_spec.get("volumes");
    if applied.is_empty()
        && !steps.iter().any(reserved)
        && !volumes
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(reserved))
    {
        // Nothing of bookend's, and nothing to inject: at most a record bookend did not write
        // to drop (the record is bookend's to write, and only ever a hint).
        return Ok(record_text.is_some().then(|| Injection {
            task_spec_members: BTreeMap::new(),
            record: None,
        }));
    }

    let hint = record_text.and_then(Record::parse);
    let params = params_of(&view, task_spec);
    let recognised = recognise(steps, applied, settings, version, &params, hint.as_ref())?;
    if let Some(p) = first
        && recognised.user.is_empty()
    {
        return Err(Denial::policy(
            p,
            "spec.taskSpec.steps: the TaskRun has no steps of its own (Tekton needs at least one); add the steps it is meant to run",
        ));
    }
    let materialised = if first.is_some() {
        isolate::materialise_step_template(task_spec, &recognised.user, version)?
    } else {
        None
    };
    let task_spec_checks = first.map(|_| {
        // Read of the user's own steps before they are composed (and moved).
        isolate::check_task_spec(task_spec, &recognised.user, applied, settings)
    });
    let hermetic = hermetic::requiring(applied);
    if let Some(policy) = hermetic {
        hermetic::check_policy_levels(applied)?;
        hermetic::check(
            task_spec,
            &recognised.user,
            view.spec(),
            context.lookup.default_pod_template().as_ref(),
            policy,
        )?;
    }
    let materialised_any = materialised.is_some();
    let mut user = materialised.unwrap_or(recognised.user);
    // After the stepTemplate is written in, so that the jail's entries come last.
    let jailed = match hermetic {
        Some(policy) => hermetic::jail_all(&mut user, policy)?,
        None => false,
    };
    let unchanged = recognised.in_place && !materialised_any && !jailed;

    let composed = inject::compose(user, applied, settings, version, &params);
    let mut final_steps = composed.steps;
    if unchanged {
        // The steps are exactly what bookend writes (recognised by composing again): keep them
        // in the form they arrived in (Tekton's defaulting may have re-serialised them), so a
        // second pass yields no patch.
        final_steps = steps.to_vec();
    } else {
        keep_existing_forms(
            &mut final_steps,
            &composed.kinds,
            &composed.checks,
            steps,
            settings,
        );
    }

    let volumes = merge_volumes(volumes, applied, settings)?;
    let carried_ours = steps.iter().any(reserved);
    let results = merge_results(task_spec.get("results"), applied, carried_ours)?;
    check::check(
        task_spec,
        &final_steps,
        &composed.kinds,
        applied,
        params.run_params,
        context,
    )?;
    // After Tekton's own rules, whose messages are the more precise where both apply.
    task_spec_checks.transpose()?;
    // Only the taskSpec members bookend sets: the others (params, workspaces, results, ...)
    // are neither copied nor compared.
    let mut task_spec_members = BTreeMap::new();
    task_spec_members.insert("steps".to_owned(), Some(Value::Array(final_steps)));
    if let Some(volumes) = volumes {
        task_spec_members.insert("volumes".to_owned(), Some(volumes));
    }
    if let Some(results) = results {
        task_spec_members.insert("results".to_owned(), Some(results));
    }
    if task_spec.get("stepTemplate").is_some() && first.is_some() && !unchanged {
        task_spec_members.insert("stepTemplate".to_owned(), None);
    }
    let record = Record {
        policies: applied.iter().map(|p| Record::entry_of(p)).collect(),
        helpers: composed.helpers,
        continued: composed.continued,
        resolved: false,
    };
    Ok(Some(Injection {
        task_spec_members,
        record: (!record.is_empty()).then(|| record.to_json()),
    }))
}

/// Keeps the existing form of each step bookend would write identically (Tekton's defaulting
/// may have re-serialised it), looked up by name through a map (the first step of each name):
/// long TaskRuns have hundreds of steps. A helper in the form an earlier release wrote is kept
/// too: it checks the same steps, and an upgrade must not refuse what an older replica wrote.
fn keep_existing_forms(
    final_steps: &mut [Value],
    kinds: &[StepKind],
    checks: &[inject::Helper],
    existing: &[Value],
    settings: &crate::policy::Settings,
) {
    let existing_by_name: HashMap<&str, &Value> = existing
        .iter()
        .rev()
        .filter_map(|s| Some((tekton::step_name(s)?, s)))
        .collect();
    let mut helper_checks = checks.iter();
    for (step, kind) in final_steps.iter_mut().zip(kinds) {
        let helper = match kind {
            StepKind::User(_) => continue,
            StepKind::Gate | StepKind::Verdict | StepKind::JailCheck => helper_checks.next(),
            StepKind::Pre(_) | StepKind::Post(_) => None,
        };
        let Some(existing) = tekton::step_name(step).and_then(|n| existing_by_name.get(n)) else {
            continue;
        };
        let same = equivalent(existing, step)
            || helper.is_some_and(|spec| {
                let name = tekton::step_name(step).unwrap_or_default();
                inject::earlier_helper_steps(settings, name, spec)
                    .iter()
                    .any(|earlier| equivalent(existing, earlier))
            });
        if same {
            *step = (*existing).clone();
        }
    }
}

/// The taskSpec's `results` (`current`) with the applied policies' results after the Task's
/// own; `None` when no policy declares any (the member is left as it is). A Task result with a
/// policy result's name is a denial naming both: two declarations of one name would be one
/// file the Task's steps and the org's post-steps both write, and Tekton Chains would sign
/// whichever value came last as the org's. Only in a TaskRun that carries bookend's steps
/// (`carried_ours`, already recognised as exactly what bookend writes) is a result equal to a
/// policy's taken for the one bookend added on an earlier pass.
fn merge_results(
    current: Option<&Value>,
    applied: &[&Policy],
    carried_ours: bool,
) -> Result<Option<Value>, Denial> {
    let mut ours: Vec<(&Policy, Value)> = Vec::new();
    for policy in applied {
        for (j, result) in policy.results().enumerate() {
            let name = result.get("name").and_then(Value::as_str).unwrap_or("");
            if let Some((first, _)) = ours
                .iter()
                .find(|(_, r)| r.get("name").and_then(Value::as_str) == Some(name))
            {
                return Err(Denial::policy(
                    policy,
                    format!(
                        "spec.results[{j}].name: result {name:?} is also declared by {}, which applies to this TaskRun too; one result has one writer: remove it from one of the policies",
                        first.id
                    ),
                ));
            }
            ours.push((*policy, result));
        }
    }
    if ours.is_empty() {
        return Ok(None);
    }
    let existing: &[Value] = match current {
        None | Some(Value::Null) => &[],
        Some(Value::Array(results)) => results,
        Some(_) => {
            return Err(Denial::policy(
                ours[0].0,
                "spec.taskSpec.results: must be a list of results for bookend to add the policy's results to it",
            ));
        }
    };
    let mut kept: Vec<Option<Value>> = vec![None; ours.len()];
    let mut results: Vec<Value> = Vec::with_capacity(existing.len() + ours.len());
    for (i, result) in existing.iter().enumerate() {
        let name = result.get("name").and_then(Value::as_str);
        match ours
            .iter()
            .position(|(_, r)| r.get("name").and_then(Value::as_str) == name)
        {
            Some(k) if carried_ours && kept[k].is_none() && same_result(&ours[k].1, result) => {
                kept[k] = Some(result.clone());
            }
            Some(k) => {
                let (policy, _) = &ours[k];
                return Err(Denial::policy(
                    policy,
                    format!(
                        "spec.taskSpec.results[{i}].name: the Task declares result {:?}, which the policy declares for its post-steps to write (Tekton Chains reads such results into provenance); a result the Task's steps and the org's steps both write would be signed as the org's, so bookend refuses the clash: rename the Task's result (or drop it: the policy's post-step writes it), or exclude these TaskRuns from the policy",
                        name.unwrap_or_default()
                    ),
                ));
            }
            None => results.push(result.clone()),
        }
    }
    for ((_, result), kept) in ours.into_iter().zip(kept) {
        results.push(kept.unwrap_or(result));
    }
    Ok(Some(Value::Array(results)))
}

/// Whether two Task result declarations are the same, as Tekton's defaulting leaves them
/// (`type: string` where none was given).
fn same_result(a: &Value, b: &Value) -> bool {
    let defaulted = |v: &Value| {
        let mut v = v.clone();
        if let Some(obj) = v.as_object_mut() {
            obj.entry("type").or_insert_with(|| Value::from("string"));
        }
        v
    };
    equivalent(&defaulted(a), &defaulted(b))
}

/// The taskSpec's `volumes` (`current`) with the applied policies' volumes, each once, after the
/// user's; `None` when there were none and none are needed. A reserved-prefix volume is
/// bookend's only when it is exactly one an applied policy defines; any other is a denial, as
/// is a user volume with a policy volume's name.
fn merge_volumes(
    current: Option<&Value>,
    applied: &[&Policy],
    settings: &crate::policy::Settings,
) -> Result<Option<Value>, Denial> {
    let existing: &[Value] = current
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let prefix = settings.prefix.as_str();
    let name_of = |v: &Value| {
        v.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut ours: HashMap<String, (&Policy, &Value)> = HashMap::new();
    for policy in applied {
        for volume in &policy.volumes {
            ours.entry(name_of(volume)).or_insert((*policy, volume));
        }
    }
    let mut kept_forms: HashMap<String, &Value> = HashMap::new();
    let mut volumes: Vec<Value> = Vec::with_capacity(existing.len() + ours.len());
    for (i, volume) in existing.iter().enumerate() {
        let name = name_of(volume);
        match ours.get(&name) {
            Some((_, def)) if equivalent(def, volume) => {
                kept_forms.entry(name).or_insert(volume);
            }
            Some((policy, _)) if name.starts_with(prefix) => {
                return Err(Denial::field(
                    format!("spec.taskSpec.volumes[{i}]"),
                    format!(
                        "volume {name:?} differs from what {} injects; remove it from the TaskRun (bookend injects it)",
                        policy.id
                    ),
                ));
            }
            Some((policy, _)) => {
                return Err(Denial::policy(
                    policy,
                    format!(
                        "spec.taskSpec.volumes[{i}].name: multiple volumes with same name {name:?}: the TaskRun defines a volume the policy injects; rename the TaskRun's volume"
                    ),
                ));
            }
            None if name.starts_with(prefix) => {
                return Err(Denial::field(
                    format!("spec.taskSpec.volumes[{i}].name"),
                    format!(
                        "volume {name:?} uses the reserved prefix {prefix:?}, but no policy that applies to this TaskRun injects it; rename the volume"
                    ),
                ));
            }
            None => volumes.push(volume.clone()),
        }
    }
    for policy in applied {
        for volume in &policy.volumes {
            let name = name_of(volume);
            volumes.push(
                kept_forms
                    .get(&name)
                    .map_or_else(|| volume.clone(), |v| (*v).clone()),
            );
        }
    }
    if volumes.is_empty() && current.is_none() {
        return Ok(None);
    }
    Ok(Some(Value::Array(volumes)))
}
