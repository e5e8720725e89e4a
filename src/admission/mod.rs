//! The AdmissionReview envelope: bytes in, status and bytes out, no HTTP types. Three webhook
//! endpoints ([`Endpoint`]) share it, and the TaskRun routes call the same engine as `bookend
//! render`.
//!
//! Every review is read once (`wire`) and given one `Route`, decided from the endpoint and
//! the request (group, kind, operation, subresource, dry run, user); what runs, and whether the
//! admitted TaskRun is handed over afterwards, follows from the route alone:
//!
//! ```text
//!  /mutate, /validate ── review ──┐
//!  /validate-pods ─── pods::read ─┴─ Route::of ─┬─ TaskRun(Inject)    engine::decide_patch
//!                                               ├─ TaskRun(Backstop)  engine::decide_backstop
//!                                               ├─ ResolvedTask       engine::decide_resolved_task
//!                                               ├─ TaskRunUpdate      marks::taskrun_update
//!                                               ├─ PolicyObject       as `bookend validate`
//!                                               ├─ Pod                pods::answer + TaskRun
//!                                               └─ Subresource, Other admitted untouched
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

use crate::engine::{Lookup, Outcome};
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

/// What a review is, decided once from the endpoint and the request; everything after it
/// (which decision runs, whether the admitted TaskRun is handed over) follows from the route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// A TaskRun CREATE.
    TaskRun(TaskRunCheck),
    /// `/mutate`: the dry-run Task CREATE by which Tekton's controller checks a remotely
    /// resolved Task; it gets the policies' steps too.
    ResolvedTask,
    /// `/validate-pods`: a Pod CREATE, checked against the TaskRun that owns it, or an UPDATE
    /// (of the Pod or its ephemeral containers), checked against the Pod before it ([`pods`]).
    Pod,
    /// `/validate`: a ClusterStepPolicy or StepPolicy CREATE or UPDATE, checked as `bookend
    /// validate` checks files.
    PolicyObject,
    /// `/validate`: a TaskRun UPDATE; it may change bookend's marks only if bookend makes it
    /// ([`marks`]).
    TaskRunUpdate,
    /// A subresource (`status`, ...): admitted untouched; bookend judges objects, not their
    /// subresources (the API server keeps a custom resource's metadata as it was on a
    /// `status` write, so no mark changes there).
    Subresource,
    /// Anything else: admitted untouched.
    Other,
}

/// What a TaskRun CREATE is checked for, by endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskRunCheck {
    /// `/mutate`: inject the policies' steps (a patch).
    Inject,
    /// A validating endpoint: refuse what `/mutate` would still change.
    Backstop {
        /// `/validate`, not a dry run: the TaskRun, if admitted, is handed over for Events and
        /// PolicyReport results. The API server has named it by now, and a dry run is never
        /// stored.
        hand_over: bool,
    },
}

impl Route {
    /// The route of `request` on `endpoint`; `controller` is the user Tekton's controller acts
    /// as (whose dry-run Task CREATEs on `/mutate` are [`Route::ResolvedTask`]).
    fn of(endpoint: Endpoint, request: &RequestIn, controller: &str) -> Self {
        let kind = (request.kind.group.as_str(), request.kind.kind.as_str());
        let dry_run = request.dry_run.unwrap_or(false);
        let subresource = request
            .sub_resource
            .as_deref()
            .is_some_and(|s| !s.is_empty());
        match (endpoint, kind, request.operation.as_str()) {
            // Ahead of the subresource test: the Pod backstop judges `pods` CREATEs and UPDATEs
            // and the `ephemeralcontainers` subresource.
            (Endpoint::ValidatePods, ("", "Pod"), "CREATE" | "UPDATE") => Self::Pod,
            _ if subresource => Self::Subresource,
            (_, (tekton::GROUP, "TaskRun"), "CREATE") => Self::TaskRun(match endpoint {
                Endpoint::Mutate => TaskRunCheck::Inject,
                Endpoint::Validate => TaskRunCheck::Backstop {
                    hand_over: !dry_run,
                },
                Endpoint::ValidatePods => TaskRunCheck::Backstop { hand_over: false },
            }),
            (Endpoint::Validate, (tekton::GROUP, "TaskRun"), "UPDATE") => Self::TaskRunUpdate,
            (Endpoint::Mutate, (tekton::GROUP, "Task"), "CREATE")
                if dry_run && request.user_info.username == controller =>
            {
                Self::ResolvedTask
            }
            (
                Endpoint::Validate,
                (crate::policy::api::GROUP, "ClusterStepPolicy" | "StepPolicy"),
                "CREATE" | "UPDATE",
            ) => Self::PolicyObject,
            _ => Self::Other,
        }
    }
}

/// Handles one AdmissionReview body on `/mutate` or `/validate` (the Pod backstop of
/// `/validate-pods` is [`pods::read`] and [`pods::answer`], which wait for the owning TaskRun).
pub fn review(endpoint: Endpoint, body: &[u8], set: &PolicySet, lookup: &dyn Lookup) -> Reply {
    let controller = &set.settings().tekton_controller;
    let Parsed {
        api_version,
        mut request,
        mut summary,
        route,
    } = match parse(endpoint, body, controller) {
        Ok(parsed) => parsed,
        Err(reply) => return *reply,
    };
    let answer = match route {
        Route::TaskRun(check) => taskruns::taskrun(check, &request, set, lookup, &mut summary),
        Route::ResolvedTask => taskruns::resolved_task(&request, set, lookup, &mut summary),
        Route::TaskRunUpdate => marks::taskrun_update(&request, set.settings().own_user.as_deref()),
        Route::PolicyObject => request_object(&request).map(|object| policy_object(object, set)),
        // A Pod reaches `review` only when called with `Endpoint::ValidatePods` directly; the
        // server answers Pods through `pods`, so here one is admitted untouched.
        Route::Pod | Route::Subresource | Route::Other => Ok(Answer::allow()),
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(reason) => return bad_request(summary, reason),
    };
    if route == Route::TaskRun(TaskRunCheck::Backstop { hand_over: true })
        && answer.outcome == Outcome::Admitted
    {
        summary.admitted = request.object.take().map(|ObjectIn(object)| Admitted {
            object,
            namespace: summary.namespace.clone(),
        });
    }
    answered(&api_version, &request.uid, answer, summary)
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
        self.summary.outcome.is_some()
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
    /// How the review ended; `None` when it never got that far: the request was not an
    /// AdmissionReview bookend can read, and the answer is an HTTP 400.
    pub outcome: Option<Outcome>,
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

impl Summary {
    /// The outcome's name in logs, spans and metric labels: `error` for a malformed request.
    pub fn outcome_label(&self) -> &'static str {
        self.outcome.map_or("error", Outcome::as_str)
    }
}

/// A TaskRun as admitted, moved out of the request (not copied).
#[derive(Clone, Debug)]
pub struct Admitted {
    pub object: Value,
    /// The namespace it is created in.
    pub namespace: String,
}

/// The reply for an answered review.
fn answered(api_version: &str, uid: &str, answer: Answer, mut summary: Summary) -> Reply {
    summary.outcome = Some(answer.outcome);
    summary.reason = answer.message.clone();
    summary.warnings = answer.warnings.len();
    Reply {
        body: review_response(api_version, uid, &answer),
        summary,
    }
}

/// A readable AdmissionReview and its route.
struct Parsed {
    /// The request's `apiVersion`, which the answer repeats.
    api_version: String,
    request: RequestIn,
    /// The summary so far (what the request says about itself).
    summary: Summary,
    route: Route,
}

/// Reads an AdmissionReview body that came to `endpoint` and routes it. A body that is not a
/// readable AdmissionReview is an error reply (HTTP 400).
fn parse(endpoint: Endpoint, body: &[u8], controller: &str) -> Result<Parsed, Box<Reply>> {
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
    Ok(Parsed {
        api_version,
        route: Route::of(endpoint, &request, controller),
        request,
        summary,
    })
}

/// What the AdmissionReview's `response` says, before `wire` encodes it.
struct Answer {
    outcome: Outcome,
    message: Option<String>,
    patch: Option<Vec<u8>>,
    warnings: Vec<String>,
    audit_annotations: BTreeMap<String, String>,
}

impl Answer {
    fn allow() -> Self {
        Self {
            outcome: Outcome::Admitted,
            message: None,
            patch: None,
            warnings: Vec::new(),
            audit_annotations: BTreeMap::new(),
        }
    }

    fn deny(message: String) -> Self {
        Self {
            outcome: Outcome::Denied,
            message: Some(message),
            ..Self::allow()
        }
    }
}

/// `request.object`, which every route that reads the object needs.
fn request_object(request: &RequestIn) -> Result<&Value, String> {
    request
        .object
        .as_ref()
        .map(|o| &o.0)
        .ok_or_else(|| "request.object is missing".to_owned())
}

/// `kubectl apply` of a policy: the same checks as `bookend validate`, including the step and
/// volume names the policies already loaded use (a newcomer never displaces them).
fn policy_object(object: &Value, set: &PolicySet) -> Answer {
    let doc: PolicyDoc = match policy_from_value("request", "object", object.clone()) {
        Ok(d) => d,
        Err(issues) => {
            let lines: Vec<String> = issues
                .iter()
                .map(|i| format!("{}: {}", i.path, i.message))
                .collect();
            return Answer::deny(format!("bookend: {}", lines.join("; ")));
        }
    };
    let mut errors = validate::check_policy(&doc.id, &doc.spec, set.settings());
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

/// The reply to a request that is not an AdmissionReview bookend can answer (HTTP 400).
fn bad_request(mut summary: Summary, reason: String) -> Reply {
    summary.outcome = None;
    let body = error_body(&reason);
    summary.reason = Some(reason);
    Reply { body, summary }
}

mod marks;
pub mod pods;
mod taskruns;
mod wire;

#[cfg(test)]
mod tests;
