//! The decision: a TaskRun and the policy set in, what the admitted TaskRun looks like out.
//! Pure: no I/O, no clock; everything it needs arrives as arguments.

mod admitted;
mod canonical;
pub mod check;
pub mod inject;
mod lookup;
pub mod record;
pub mod reindex;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::{Map, Value};

use crate::patch::{self, Operation};
use crate::policy::select::{Labels, Subject};
use crate::policy::{Mode, Policy, PolicySet, RemoteTaskRefPolicy, TaskRefPolicy, Verdict};
use crate::tekton::{self, ApiVersion, TaskRunView, TaskSource};
use admitted::{Admitted, Injection, set_metadata_entry};
pub use canonical::canonical;
use inject::{ParamValues, StepKind};
pub use lookup::{Catalog, Lookup};
use record::{INLINED_ANNOTATION, Record, RecordEntry};

/// A policy "no", with the message the user sees (it names the field and the fix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    pub message: String,
}

impl Denial {
    /// A problem with a field of the TaskRun.
    pub fn field(path: impl fmt::Display, message: impl fmt::Display) -> Self {
        Self {
            message: format!("bookend: {path}: {message}"),
        }
    }

    /// A problem with a step a policy injects.
    pub fn step(
        policy: &Policy,
        step: &str,
        path: impl fmt::Display,
        message: impl fmt::Display,
    ) -> Self {
        Self {
            message: format!("bookend: {} step {step}: {path}: {message}", policy.id),
        }
    }

    /// A policy refuses the TaskRun.
    pub fn policy(policy: &Policy, message: impl fmt::Display) -> Self {
        Self {
            message: format!("bookend: {}: {message}", policy.id),
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One admission question.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The TaskRun as it arrived.
    pub object: &'a Value,
    /// The namespace it is created in (the request's, which wins over `metadata.namespace`).
    pub namespace: &'a str,
    /// `kubectl --dry-run=server`: same decision, and warnings list what was injected.
    pub dry_run: bool,
}

/// The answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted unchanged.
    Allowed,
    /// Admitted with a patch.
    Mutated,
    /// Refused.
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Mutated => "mutated",
            Self::Denied => "denied",
        }
    }
}

/// Why one policy did or did not apply (for `render --explain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    pub policy: String,
    pub mode: Mode,
    pub verdict: Verdict,
}

/// Everything the engine decided.
#[derive(Clone, Debug)]
pub struct Decision {
    pub outcome: Outcome,
    /// The RFC 6902 patch (empty unless mutated).
    pub patch: Vec<Operation>,
    /// The TaskRun as admitted (the input when nothing changed or on denial).
    pub object: Value,
    /// The denial message.
    pub message: Option<String>,
    pub warnings: Vec<String>,
    pub audit_annotations: BTreeMap<String, String>,
    /// Steps injected per policy (`Kind/name`, count), for metrics.
    pub injected: Vec<(String, usize)>,
}

impl Decision {
    fn new(object: &Value) -> Self {
        Self {
            object: object.clone(),
            ..Self::empty()
        }
    }

    /// A decision to allow, with `object` `Null`.
    fn empty() -> Self {
        Self {
            outcome: Outcome::Allowed,
            patch: Vec::new(),
            object: Value::Null,
            message: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
            injected: Vec::new(),
        }
    }

    fn deny(mut self, denial: Denial) -> Self {
        self.outcome = Outcome::Denied;
        self.message = Some(denial.message);
        self.patch.clear();
        self
    }
}

fn labels_of(map: Option<&Map<String, Value>>) -> Labels {
    map.map(|m| {
        m.iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect()
    })
    .unwrap_or_default()
}

/// The labels matching looks at, owned, so a [`Subject`] can borrow them.
struct SubjectFacts {
    labels: Labels,
    namespace_labels: Labels,
    origin: tekton::Origin,
}

impl SubjectFacts {
    fn of(view: &TaskRunView<'_>, namespace: &str, lookup: &dyn Lookup) -> Self {
        Self {
            labels: labels_of(view.labels()),
            namespace_labels: lookup.namespace_labels(namespace).unwrap_or_default(),
            origin: view.origin(),
        }
    }

    fn subject<'a>(&'a self, namespace: &'a str) -> Subject<'a> {
        Subject {
            namespace,
            namespace_labels: &self.namespace_labels,
            labels: &self.labels,
            origin: self.origin,
        }
    }
}

/// Why each loaded policy does or does not apply to the TaskRun (every policy, not only the
/// index's candidates). Empty for objects that are not TaskRuns.
pub fn explain(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup) -> Vec<Explanation> {
    let Some(view) = TaskRunView::new(request.object) else {
        return Vec::new();
    };
    let facts = SubjectFacts::of(&view, request.namespace, lookup);
    let subject = facts.subject(request.namespace);
    set.policies()
        .iter()
        .map(|p| Explanation {
            policy: p.id.to_string(),
            mode: p.spec.mode,
            verdict: p.verdict(&subject),
        })
        .collect()
}

/// Decides what happens to a TaskRun CREATE. Objects that are not TaskRuns are allowed
/// unchanged.
pub fn decide(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup) -> Decision {
    let mut decision = decide_with(request, set, lookup, Keep::Object);
    if decision.outcome != Outcome::Mutated {
        decision.object = request.object.clone();
    }
    decision
}

/// [`decide`] for the webhook, which answers with the patch alone: `object` is left `Null`
/// unless the TaskRun is mutated, so an unchanged TaskRun is not copied.
pub fn decide_patch(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup) -> Decision {
    decide_with(request, set, lookup, Keep::PatchOnly)
}

/// Whether a mutated decision carries the admitted object or only the patch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Object,
    PatchOnly,
}

fn decide_with(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup, keep: Keep) -> Decision {
    let mut decision = Decision::empty();
    let Some(view) = TaskRunView::new(request.object) else {
        return decision;
    };
    let facts = SubjectFacts::of(&view, request.namespace, lookup);
    let subject = facts.subject(request.namespace);

    let mut enforce = Vec::new();
    let mut audit = Vec::new();
    for policy in set.candidates(&subject) {
        if policy.matches(&subject) {
            match policy.spec.mode {
                Mode::Enforce => enforce.push(policy),
                Mode::Audit => audit.push(policy),
            }
        }
    }

    let result = plan(&view, request.namespace, &enforce, set, lookup);
    decision.warnings.extend(result.warnings.iter().cloned());
    let enforced = match result.outcome {
        Err(denial) => return decision.deny(denial),
        Ok(p) => p,
    };

    if !audit.is_empty() {
        let all: Vec<&Policy> = {
            let mut v: Vec<&Policy> = enforce.iter().chain(&audit).copied().collect();
            v.sort_by_key(|p| set.policies().iter().position(|q| q.id == p.id));
            v
        };
        let would = plan(&view, request.namespace, &all, set, lookup);
        for policy in &audit {
            let msg = match &would.outcome {
                Err(denial) => format!("bookend audit: {} would deny: {denial}", policy.id),
                Ok(_) => format!(
                    "bookend audit: {} would inject {}",
                    policy.id,
                    policy.step_names().collect::<Vec<_>>().join(", ")
                ),
            };
            decision.warnings.push(msg);
        }
        decision.audit_annotations.insert(
            "audit".to_owned(),
            audit
                .iter()
                .map(|p| p.id.to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
    }

    let Some(admitted) = enforced else {
        return decision;
    };
    let (ops, new_object) = match keep {
        Keep::Object => admitted.into_patch_and_object(request.object),
        Keep::PatchOnly => (admitted.into_patch(request.object), Value::Null),
    };
    if ops.is_empty() {
        return decision;
    }
    decision.injected = enforce
        .iter()
        .map(|p| (p.id.to_string(), p.step_names().count()))
        .collect();
    if !enforce.is_empty() {
        let summary = enforce
            .iter()
            .map(|p| {
                format!(
                    "{} ({})",
                    p.step_names().collect::<Vec<_>>().join(", "),
                    p.id
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        decision
            .audit_annotations
            .insert("injected".to_owned(), summary.clone());
        if request.dry_run {
            decision
                .warnings
                .push(format!("bookend: injected {summary}"));
        }
    }
    decision.outcome = Outcome::Mutated;
    decision.patch = ops;
    decision.object = new_object;
    decision
}

/// Where the TaskRun is created, and what else bookend can look up there.
pub struct Context<'a> {
    pub namespace: &'a str,
    pub lookup: &'a dyn Lookup,
}

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
    let result = inject_into(
        &taskrun,
        version,
        &applied,
        set,
        &Context {
            namespace: request.namespace,
            lookup,
        },
        &mut decision.warnings,
    );
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

struct Plan {
    /// `Ok(Some(admitted))` to admit changed, `Ok(None)` to admit unchanged.
    outcome: Result<Option<Admitted>, Denial>,
    warnings: Vec<String>,
}

/// Works out the admitted object for a set of applied policies (in evaluation order).
fn plan(
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
    let (inline, skip): (Vec<&Policy>, Vec<&Policy>) = applied
        .iter()
        .partition(|p| p.spec.task_ref == TaskRefPolicy::Inline);
    if !skip.is_empty() {
        warnings.push(format!(
            "bookend: TaskRun references Task {task_name}; not injected: {} (taskRef: Skip)",
            ids(&skip)
        ));
    }
    let Some(first) = inline.first() else {
        return Ok(None);
    };
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
            ids(&inline)
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
        &inline,
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
fn inject_into(
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

    let empty = Vec::new();
    let run_params = view
        .spec()
        .and_then(|s| s.get("params"))
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let spec_params = task_spec
        .get("params")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let composed = inject::compose(
        stripped.user,
        applied,
        settings,
        version,
        &ParamValues {
            run_params,
            spec_params,
        },
    );
    let mut final_steps = composed.steps;
    // Keep the existing form of steps bookend would write identically (Tekton's defaulting may
    // have re-serialised them), so a second pass yields no patch. Looked up by name through a
    // map (the first step of each name): long TaskRuns have hundreds of steps and gates.
    let existing_by_name: HashMap<&str, &Value> = steps
        .iter()
        .rev()
        .filter_map(|s| Some((tekton::step_name(s)?, s)))
        .collect();
    for (step, kind) in final_steps.iter_mut().zip(&composed.kinds) {
        if matches!(kind, StepKind::User(_)) {
            continue;
        }
        if let Some(existing) = tekton::step_name(step).and_then(|n| existing_by_name.get(n))
            && canonical(existing) == canonical(step)
        {
            *step = (*existing).clone();
        }
    }

    let volumes = merge_volumes(task_spec.get("volumes"), applied, set, record.as_ref())?;
    check::check(
        task_spec,
        &final_steps,
        &composed.kinds,
        applied,
        run_params,
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
                    .any(|pv| pv.get("name") == v.get("name") && canonical(pv) == canonical(v))
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
                .find(|v| v.get("name") == volume.get("name") && canonical(v) == canonical(volume));
            volumes.push(keep.cloned().unwrap_or_else(|| volume.clone()));
        }
    }
    if volumes.is_empty() && current.is_none() {
        return Ok(None);
    }
    Ok(Some(Value::Array(volumes)))
}

#[cfg(test)]
mod tests;
