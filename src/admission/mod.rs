//! The AdmissionReview envelope: bytes in, status and bytes out, no HTTP types. Both webhook
//! endpoints call the same engine as `bookend render`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::{self, Decision, Lookup, Outcome, Request};
use crate::policy::load::policy_from_value;
use crate::policy::{PolicyDoc, PolicySet, validate};
use crate::tekton;
use wire::{ObjectIn, RequestIn, error_body, review_response};

/// Which webhook endpoint a review came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /mutate`: inject steps into TaskRuns.
    Mutate,
    /// `POST /validate`: the fail-closed backstop for TaskRuns, and policy objects.
    Validate,
    /// `POST /validate-pods`: the fail-closed backstop where the steps run, TaskRun Pods.
    ValidatePods,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutate => "mutate",
            Self::Validate => "validate",
            Self::ValidatePods => "validate-pods",
        }
    }
}

/// What the handler sends back, plus what logs and metrics need to know.
#[derive(Clone, Debug)]
pub struct Reply {
    /// An AdmissionReview when the request was one, else `{"error": reason}`.
    pub body: Vec<u8>,
    pub summary: Summary,
}

impl Reply {
    /// Whether the API server gets an AdmissionReview to read (HTTP 200) rather than an error
    /// for a malformed request (HTTP 400).
    pub fn answered(&self) -> bool {
        self.summary.outcome != ReviewOutcome::Malformed
    }
}

/// How a review ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReviewOutcome {
    /// Admitted unchanged.
    Allowed,
    /// Admitted with a patch.
    Mutated,
    /// Refused (`allowed: false`).
    Denied,
    /// Not an AdmissionReview bookend can read (answered with HTTP 400).
    #[default]
    Malformed,
}

impl ReviewOutcome {
    /// The name in logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Mutated => "mutated",
            Self::Denied => "denied",
            Self::Malformed => "error",
        }
    }
}

impl From<Outcome> for ReviewOutcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Allowed => Self::Allowed,
            Outcome::Mutated => Self::Mutated,
            Outcome::Denied => Self::Denied,
        }
    }
}

/// Facts about one review for the request span and metrics.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub uid: String,
    /// `group/Kind` of the request's object, when the request names one.
    pub kind: Option<String>,
    pub namespace: String,
    pub name: String,
    pub operation: String,
    pub dry_run: bool,
    pub outcome: ReviewOutcome,
    /// The denial message or the reason a request was malformed.
    pub reason: Option<String>,
    /// Steps injected per policy.
    pub injected: Vec<(String, usize)>,
    pub warnings: usize,
    /// A TaskRun CREATE the backstop (`/validate`) admitted, not a dry run: the final object,
    /// with its name and uid (the API server assigns both before validating admission), for the
    /// Events and PolicyReport results written after the answer.
    pub admitted: Option<Admitted>,
}

/// A TaskRun as admitted, moved out of the request (not copied).
#[derive(Clone, Debug)]
pub struct Admitted {
    pub object: Value,
    /// The namespace it is created in.
    pub namespace: String,
}

/// Handles one AdmissionReview body.
pub fn review(endpoint: Endpoint, body: &[u8], set: &PolicySet, lookup: &dyn Lookup) -> Reply {
    let (api_version, mut request, mut summary) = match parse(body) {
        Ok(parsed) => parsed,
        Err(reply) => return *reply,
    };
    let answer = match (
        endpoint,
        request.kind.group.as_str(),
        request.kind.kind.as_str(),
    ) {
        _ if request
            .sub_resource
            .as_deref()
            .is_some_and(|s| !s.is_empty()) =>
        {
            Answer::allow()
        }
        (_, tekton::GROUP, "TaskRun") if request.operation == "CREATE" => {
            match taskrun(endpoint, &request, set, lookup, &mut summary) {
                Ok(answer) => answer,
                Err(reason) => return bad_request(summary, reason),
            }
        }
        (Endpoint::Mutate, tekton::GROUP, "Task")
            if request.operation == "CREATE"
                && summary.dry_run
                && request.user_info.username == set.settings().tekton_controller =>
        {
            match resolved_task(&request, set, lookup, &mut summary) {
                Ok(answer) => answer,
                Err(reason) => return bad_request(summary, reason),
            }
        }
        (Endpoint::Validate, crate::policy::api::GROUP, "ClusterStepPolicy" | "StepPolicy")
            if matches!(request.operation.as_str(), "CREATE" | "UPDATE") =>
        {
            match &request.object {
                Some(ObjectIn(object)) => policy_object(object, set),
                None => return bad_request(summary, "request.object is missing".to_owned()),
            }
        }
        _ => Answer::allow(),
    };
    if endpoint == Endpoint::Validate
        && !summary.dry_run
        && answer.outcome == ReviewOutcome::Allowed
        && request.operation == "CREATE"
        && request.sub_resource.as_deref().is_none_or(str::is_empty)
        && (request.kind.group.as_str(), request.kind.kind.as_str()) == (tekton::GROUP, "TaskRun")
    {
        summary.admitted = request.object.take().map(|ObjectIn(object)| Admitted {
            object,
            namespace: summary.namespace.clone(),
        });
    }
    answered(&api_version, &request.uid, answer, summary)
}

/// The reply for an answered review.
fn answered(api_version: &str, uid: &str, answer: Answer, mut summary: Summary) -> Reply {
    summary.outcome = answer.outcome;
    summary.reason = answer.message.clone();
    summary.warnings = answer.warnings.len();
    Reply {
        body: review_response(api_version, uid, &answer),
        summary,
    }
}

/// Reads an AdmissionReview body: its apiVersion, the request, and the summary so far. A body
/// that is not a readable AdmissionReview is an error reply (HTTP 400).
fn parse(body: &[u8]) -> Result<(String, RequestIn, Summary), Box<Reply>> {
    let mut summary = Summary::default();
    let parsed = match wire::read(body) {
        Ok(r) => r,
        Err(e) => {
            return Err(Box::new(bad_request(
                summary,
                format!("request body is not a JSON AdmissionReview: {e}"),
            )));
        }
    };
    if parsed.kind != "AdmissionReview" {
        return Err(Box::new(bad_request(
            summary,
            format!("kind must be AdmissionReview, got {:?}", parsed.kind),
        )));
    }
    let api_version = match parsed.api_version.as_str() {
        v @ ("admission.k8s.io/v1" | "admission.k8s.io/v1beta1") => v.to_owned(),
        other => {
            return Err(Box::new(bad_request(
                summary,
                format!("apiVersion must be admission.k8s.io/v1, got {other:?}"),
            )));
        }
    };
    let Some(request) = parsed.request else {
        return Err(Box::new(bad_request(
            summary,
            "AdmissionReview has no request".to_owned(),
        )));
    };
    summary.uid = request.uid.clone();
    summary.kind = (!request.kind.kind.is_empty())
        .then(|| format!("{}/{}", request.kind.group, request.kind.kind));
    summary.operation = request.operation.clone();
    summary.dry_run = request.dry_run.unwrap_or(false);
    summary.namespace = request.namespace.clone().unwrap_or_default();
    summary.name = request.name.clone().unwrap_or_default();
    if request.uid.is_empty() {
        return Err(Box::new(bad_request(
            summary,
            "request.uid is missing".to_owned(),
        )));
    }
    Ok((api_version, request, summary))
}

struct Answer {
    outcome: ReviewOutcome,
    message: Option<String>,
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
    audit_annotations: BTreeMap<String, String>,
}

impl Answer {
    fn allow() -> Self {
        Self {
            outcome: ReviewOutcome::Allowed,
            message: None,
            patch: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    fn deny(message: String) -> Self {
        Self {
            outcome: ReviewOutcome::Denied,
            message: Some(message),
            ..Self::allow()
        }
    }
}

fn request_object(request: &RequestIn) -> Result<&Value, String> {
    request
        .object
        .as_ref()
        .map(|o| &o.0)
        .ok_or_else(|| "request.object is missing".to_owned())
}

fn taskrun(
    endpoint: Endpoint,
    request: &RequestIn,
    set: &PolicySet,
    lookup: &dyn Lookup,
    summary: &mut Summary,
) -> Result<Answer, String> {
    let object = request_object(request)?;
    let view = tekton::TaskRunView::new(object).ok_or_else(|| {
        format!(
            "request.object is not a tekton.dev/{} TaskRun",
            request.kind.version
        )
    })?;
    let namespace = request
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .or(view.namespace())
        .unwrap_or("default");
    if summary.name.is_empty() {
        summary.name = view.display_name();
    }
    let request = Request {
        object,
        namespace,
        dry_run: summary.dry_run,
    };
    let decision = match endpoint {
        Endpoint::Mutate => engine::decide_patch(request, set, lookup),
        Endpoint::Validate | Endpoint::ValidatePods => {
            engine::decide_backstop(request, set, lookup)
        }
    };
    Ok(match endpoint {
        Endpoint::Mutate => mutate_answer(decision, summary),
        Endpoint::Validate | Endpoint::ValidatePods => backstop_answer(object, decision),
    })
}

/// The dry-run Task CREATE of Tekton's controller for a remotely resolved Task.
fn resolved_task(
    request: &RequestIn,
    set: &PolicySet,
    lookup: &dyn Lookup,
    summary: &mut Summary,
) -> Result<Answer, String> {
    let object = request_object(request)?;
    let namespace = request
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "request.namespace is missing".to_owned())?;
    let decision = engine::decide_resolved_task(
        Request {
            object,
            namespace,
            dry_run: true,
        },
        set,
        lookup,
    );
    Ok(mutate_answer(decision, summary))
}

fn mutate_answer(decision: Decision, summary: &mut Summary) -> Answer {
    let Decision {
        outcome,
        patch,
        message,
        warnings,
        audit_annotations,
        injected,
        ..
    } = decision;
    match outcome {
        Outcome::Denied => Answer {
            warnings,
            ..Answer::deny(message.unwrap_or_default())
        },
        Outcome::Allowed => Answer {
            warnings,
            audit_annotations,
            ..Answer::allow()
        },
        Outcome::Mutated => {
            summary.injected = injected;
            Answer {
                outcome: outcome.into(),
                message: None,
                patch: Some(serde_json::to_vec(&patch).expect("a patch serialises")),
                warnings,
                audit_annotations,
            }
        }
    }
}

/// The validating backstop: the final object must already be what the mutating webhook makes
/// of it. Anything the engine would still change in `spec` means mandatory steps are missing or
/// were modified after injection.
fn backstop_answer(object: &Value, decision: Decision) -> Answer {
    match decision.outcome {
        Outcome::Denied => Answer::deny(decision.message.unwrap_or_default()),
        Outcome::Allowed => Answer::allow(),
        Outcome::Mutated => {
            let spec_changes: Vec<String> = decision
                .patch
                .iter()
                .filter(|op| op.path().starts_with("/spec"))
                .map(|op| describe(op, object))
                .collect();
            if spec_changes.is_empty() {
                return Answer::allow();
            }
            let policies = decision
                .injected
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            Answer::deny(format!(
                "bookend: the TaskRun lacks the steps that {policies} require, or they were changed after injection (was bookend's mutating webhook skipped?): {}. Create the TaskRun again so bookend can inject them, or check `bookend render --explain`",
                spec_changes.join("; ")
            ))
        }
    }
}

fn describe(op: &crate::patch::Operation, object: &Value) -> String {
    use crate::patch::Operation;
    let name_of = |v: &Value| {
        tekton::step_name(v)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    };
    match op {
        Operation::Add { path, value } => format!("missing {path}{}", name_of(value)),
        Operation::Replace { path, .. } => format!("changed {path}"),
        Operation::Remove { path } => {
            let current = object.pointer(path).map(name_of).unwrap_or_default();
            format!("unexpected {path}{current}")
        }
    }
}

/// `kubectl apply` of a policy: the same checks as `bookend validate`, including the step and
/// volume names the policies already loaded use (a newcomer never displaces them).
fn policy_object(object: &Value, set: &PolicySet) -> Answer {
    let doc: PolicyDoc = match policy_from_value("request", "object", object.clone()) {
        Ok(d) => d,
        Err(issue) => return Answer::deny(format!("bookend: {}: {}", issue.path, issue.message)),
    };
    let mut errors = validate::check_spec(&doc.spec, set.settings());
    errors.extend(set.conflicts(&doc.id, &doc.spec));
    if errors.is_empty() {
        return Answer::allow();
    }
    let lines: Vec<String> = errors
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect();
    Answer::deny(format!(
        "bookend: {} is invalid: {}",
        doc.id,
        lines.join("; ")
    ))
}

fn bad_request(mut summary: Summary, reason: String) -> Reply {
    summary.outcome = ReviewOutcome::Malformed;
    let body = error_body(&reason);
    summary.reason = Some(reason);
    Reply { body, summary }
}

pub mod pods;
mod wire;

#[cfg(test)]
mod tests;
