//! The decision: a TaskRun and the policy set in, what the admitted TaskRun looks like out.
//! Pure: no I/O, no clock; everything it needs arrives as arguments.

mod canonical;
pub mod check;
pub mod inject;
pub mod record;
pub mod reindex;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::{Map, Value};

use crate::patch::{self, Operation};
use crate::policy::select::{Labels, Subject};
use crate::policy::{Mode, Policy, PolicySet, RemoteTaskRefPolicy, TaskRefPolicy, Verdict};
use crate::tekton::{self, ApiVersion, TaskRunView, TaskSource};
pub use canonical::canonical;
use inject::{ParamValues, StepKind};
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
                .and_then(|a| a.get(tekton::SIGNATURE_ANNOTATION))
                .is_some(),
        })
    }
}

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
        map_entry(metadata_mut(&mut new_task), "annotations")
            .insert(record::ANNOTATION.to_owned(), Value::String(record));
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
    let meta = metadata_mut(&mut object);
    map_entry(meta, "labels").insert(
        tekton::TASK_LABEL.to_owned(),
        Value::String(task.name.clone()),
    );
    let origin = match &task.resource_version {
        Some(rv) => format!("{}@{rv}", task.name),
        None => task.name.clone(),
    };
    map_entry(meta, "annotations").insert(INLINED_ANNOTATION.to_owned(), Value::String(origin));
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

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    let obj = object.as_object_mut().expect("a TaskRun is an object");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
        .expect("metadata was just made an object")
}

fn map_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .expect("entry was just made an object")
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

/// What bookend changes in a TaskRun it admits.
enum Admitted {
    /// An inline-spec TaskRun with its steps injected.
    Injected(Injection),
    /// A whole new TaskRun (a referenced Task was inlined).
    Rewritten(Value),
}

impl Admitted {
    /// The admitted object and its patch from `original`, as a diff of the two whole objects:
    /// render's reference, which the webhook's [`Admitted::into_patch`] must equal (unit test
    /// and fuzz target).
    fn into_patch_and_object(self, original: &Value) -> (Vec<Operation>, Value) {
        let object = match self {
            Self::Injected(injection) => injection.apply(original.clone()),
            Self::Rewritten(object) => object,
        };
        (patch::diff(original, &object), object)
    }

    /// The patch from `original`, the same operations as diffing the whole admitted object,
    /// without building it.
    fn into_patch(self, original: &Value) -> Vec<Operation> {
        match self {
            Self::Injected(injection) => injection.patch(original),
            Self::Rewritten(object) => patch::diff_owned(original, object),
        }
    }
}

/// What bookend sets in an inline-spec TaskRun: members of `spec.taskSpec` (always `steps`,
/// `volumes` when policies bring or once brought volumes; every other member stays as it is)
/// and its `bookend.dev/injected` record (`None`: the annotation is removed).
struct Injection {
    task_spec_members: Map<String, Value>,
    record: Option<String>,
}

impl Injection {
    /// Sets the members in `task_spec` (an object: [`inject_into`] only injects into those).
    fn set_members(members: Map<String, Value>, task_spec: &mut Value) {
        if let Some(spec) = task_spec.as_object_mut() {
            spec.extend(members);
        }
    }

    fn apply(self, mut object: Value) -> Value {
        Self::set_members(self.task_spec_members, &mut object["spec"]["taskSpec"]);
        let meta = metadata_mut(&mut object);
        match self.record {
            Some(record) => {
                map_entry(meta, "annotations")
                    .insert(record::ANNOTATION.to_owned(), Value::String(record));
            }
            None => {
                if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
                    annotations.remove(record::ANNOTATION);
                }
            }
        }
        object
    }

    /// The operations [`Injection::apply`] amounts to, in the order a diff of the whole
    /// objects lists them: JSON maps keep their keys sorted, so `metadata` before `spec`.
    fn patch(self, original: &Value) -> Vec<Operation> {
        let mut ops = Vec::new();
        record_ops(original, self.record, &mut ops);
        let mut path = String::from("/spec/taskSpec");
        let old_spec = original["spec"]["taskSpec"]
            .as_object()
            .expect("injected into an object taskSpec");
        // Members in key order, as a diff of the whole taskSpec visits them.
        for (key, value) in self.task_spec_members {
            patch::diff_member(&mut path, &key, old_spec.get(&key), value, &mut ops);
        }
        ops
    }
}

/// The operations that set (`Some`) or remove (`None`) the record annotation, as
/// [`Injection::apply`] does: a missing or non-object `metadata` becomes an object.
fn record_ops(object: &Value, record: Option<String>, ops: &mut Vec<Operation>) {
    let record_map = |record: String| {
        Value::Object(Map::from_iter([(
            record::ANNOTATION.to_owned(),
            Value::String(record),
        )]))
    };
    let mut path = String::from("/metadata");
    let Some(Value::Object(meta)) = object.get("metadata") else {
        let mut meta = Map::new();
        if let Some(record) = record {
            meta.insert("annotations".to_owned(), record_map(record));
        }
        let value = Value::Object(meta);
        ops.push(match object.get("metadata") {
            Some(_) => Operation::Replace { path, value },
            None => Operation::Add { path, value },
        });
        return;
    };
    patch::push_token(&mut path, "annotations");
    let Some(Value::Object(annotations)) = meta.get("annotations") else {
        if let Some(record) = record {
            let value = record_map(record);
            ops.push(match meta.get("annotations") {
                Some(_) => Operation::Replace { path, value },
                None => Operation::Add { path, value },
            });
        }
        return;
    };
    patch::push_token(&mut path, record::ANNOTATION);
    match (annotations.get(record::ANNOTATION), record) {
        (None, None) => {}
        (Some(_), None) => ops.push(Operation::Remove { path }),
        (None, Some(record)) => ops.push(Operation::Add {
            path,
            value: Value::String(record),
        }),
        (Some(old), Some(record)) => {
            if old.as_str() != Some(record.as_str()) {
                ops.push(Operation::Replace {
                    path,
                    value: Value::String(record),
                });
            }
        }
    }
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
