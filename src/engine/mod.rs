//! The decision: a TaskRun and the policy set in, what the admitted TaskRun looks like out.
//! Pure: no I/O, no clock; everything it needs arrives as arguments.

mod admitted;
mod audit;
use admitted::Shape;
mod canonical;
pub mod check;
pub mod hermetic;
pub mod inject;
pub mod isolate;
mod lookup;
mod plan;
pub mod pod;
mod recognise;
pub mod record;
pub mod reindex;
mod resolved;
pub mod verdict_counts;
pub mod verify;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::patch::Operation;
use crate::policy::select::{Labels, Subject};
use crate::policy::{Mode, Policy, PolicySet, Verdict};
use crate::tekton::{self, TaskRunView};
pub use audit::{AuditFinding, AuditOutcome, audit};
pub use canonical::canonical;
pub use lookup::{
    CONFIG_DEFAULTS_CONFIG_MAP, Catalog, FEATURE_FLAGS_CONFIG_MAP, Lookup, default_pod_template,
    disable_inline_spec, parse_pod_template, refuses_inline_task_spec,
};
pub use plan::Context;
use plan::{plan, would_deny};
pub use resolved::decide_resolved_task;

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
    /// Admitted unchanged. (`admitted` is the word for it everywhere bookend speaks — CLI,
    /// metrics, logs, reports; `allowed` only as the AdmissionReview field.)
    Admitted,
    /// Admitted with a patch.
    Mutated,
    /// Refused.
    Denied,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Admitted => "admitted",
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
    /// The verdict in words: which criteria held, or which one decided.
    pub why: String,
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
            outcome: Outcome::Admitted,
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
pub(super) struct SubjectFacts {
    labels: Labels,
    namespace_labels: Labels,
    origin: tekton::Origin,
}

impl SubjectFacts {
    pub(super) fn of(view: &TaskRunView<'_>, namespace: &str, lookup: &dyn Lookup) -> Self {
        Self {
            labels: labels_of(view.labels()),
            namespace_labels: lookup.namespace_labels(namespace).unwrap_or_default(),
            origin: view.origin(),
        }
    }

    pub(super) fn subject<'a>(&'a self, namespace: &'a str) -> Subject<'a> {
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
        .map(|p| {
            let verdict = p.verdict(&subject);
            Explanation {
                policy: p.id.to_string(),
                mode: p.spec.mode,
                verdict,
                why: p.explain(verdict, &subject),
            }
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

/// [`decide_patch`] for the validating backstop, which only asks whether anything is left to
/// change: Audit policies are not evaluated (their warnings go with the mutating answer).
pub fn decide_backstop(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup) -> Decision {
    decide_with(request, set, lookup, Keep::Backstop)
}

/// Whether a mutated decision carries the admitted object or only the patch, and whether Audit
/// policies are evaluated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Object,
    PatchOnly,
    Backstop,
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

    if !audit.is_empty() && keep != Keep::Backstop {
        let all: Vec<&Policy> = {
            let mut v: Vec<&Policy> = enforce.iter().chain(&audit).copied().collect();
            v.sort_by_key(|p| set.policies().iter().position(|q| q.id == p.id));
            v
        };
        let would = would_deny(&view, request.namespace, &enforce, &all, set, lookup);
        for policy in &audit {
            let msg = match &would {
                Some(denial) => format!("bookend audit: {} would deny: {denial}", policy.id),
                None => format!(
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

    // What the policies change, or else only the marks of bookend's the author wrote: the
    // record, the verification label and the verified mark are bookend's alone.
    let (admitted, marks_only) = match enforced {
        // A remote Task's steps are injected at the controller's dry-run, not here.
        Some(admitted @ admitted::Admitted::Marked(_)) => (admitted, true),
        Some(admitted) => (admitted.without_foreign_marks(), false),
        None => match admitted::Injection::foreign_marks_dropped(request.object) {
            Some(injection) => (admitted::Admitted::Injected(injection), true),
            None => return decision,
        },
    };
    let (ops, new_object) = match keep {
        Keep::Object => admitted.into_patch_and_object(request.object),
        Keep::PatchOnly => (
            admitted.into_patch(request.object, Shape::Fewest),
            Value::Null,
        ),
        Keep::Backstop => (
            admitted.into_patch(request.object, Shape::Minimal),
            Value::Null,
        ),
    };
    if ops.is_empty() {
        return decision;
    }
    if marks_only {
        decision.outcome = Outcome::Mutated;
        decision.patch = ops;
        decision.object = new_object;
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

#[cfg(test)]
mod tests;

#[cfg(test)]
mod breaker36;
