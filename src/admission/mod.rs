//! The AdmissionReview envelope: bytes in, status and bytes out, no HTTP types. Both webhook
//! endpoints call the same engine as `bookend render`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{self, Decision, Lookup, Outcome, Request};
use crate::policy::load::policy_from_value;
use crate::policy::{PolicyDoc, PolicySet, validate};
use crate::tekton;

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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    kind: GroupVersionKind,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    object: Option<ObjectIn>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    user_info: UserInfo,
}

/// `request.object` as a JSON value, without `metadata.managedFields`: bookend never reads or
/// patches them, and they are a large share of a TaskRun (many small objects), so not building
/// them saves a good part of the parse and of every later copy and comparison.
struct ObjectIn(Value);

impl<'de> Deserialize<'de> for ObjectIn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(SkipVisitor {
                skip: &["metadata", "managedFields"],
            })
            .map(ObjectIn)
    }
}

/// Builds a `Value` like serde_json's own visitor, leaving out the member at `skip` (a path of
/// object keys).
struct SkipVisitor {
    skip: &'static [&'static str],
}

impl<'de> serde::de::Visitor<'de> for SkipVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.skip.split_first() {
                Some((head, [])) if key == *head => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Some((head, rest)) if key == *head => {
                    let value = map.next_value_seed(SkipSeed(rest))?;
                    out.insert(key, value);
                }
                _ => {
                    out.insert(key, map.next_value()?);
                }
            }
        }
        Ok(Value::Object(out))
    }

    // Anything that is not an object is kept as it is (and refused later where it matters).
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
}

struct SkipSeed(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for SkipSeed {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(SkipVisitor { skip: self.0 })
    }
}

#[derive(Deserialize, Default)]
struct UserInfo {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    kind: String,
}

/// The JSON body of a 4xx answer.
#[derive(Serialize)]
struct ErrorOut<'a> {
    error: &'a str,
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
    // Validating UTF-8 once up front lets serde_json skip it for every string.
    let parsed: Result<ReviewIn, String> = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    let parsed: ReviewIn = match parsed {
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

/// The answering AdmissionReview: `response.uid`, `allowed`, `status` on denial, `patchType`
/// and `patch` (base64 of the JSON patch), `auditAnnotations`, `warnings`; optional fields
/// left out when empty.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<serde_json::value::RawValue>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct StatusOut<'a> {
    message: &'a str,
    code: u16,
    reason: &'static str,
}

fn review_response(api_version: &str, uid: &str, answer: &Answer) -> Vec<u8> {
    let response = ResponseOut {
        uid,
        allowed: answer.message.is_none(),
        // 400 (not the default 403): Tekton's PipelineRun controller treats a BadRequest from
        // TaskRun creation as permanent and fails the PipelineRun with this message.
        status: answer.message.as_deref().map(|message| StatusOut {
            message,
            code: 400,
            reason: "BadRequest",
        }),
        patch_type: answer.patch.as_ref().map(|_| "JSONPatch"),
        patch: answer.patch.as_ref().map(|p| {
            let mut quoted = String::with_capacity(p.len().div_ceil(3) * 4 + 2);
            quoted.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(p, &mut quoted);
            quoted.push('"');
            serde_json::value::RawValue::from_string(quoted).expect("base64 is a JSON string")
        }),
        audit_annotations: &answer.audit_annotations,
        warnings: &answer.warnings,
    };
    serde_json::to_vec(&ReviewOut {
        api_version,
        kind: "AdmissionReview",
        response,
    })
    .expect("an AdmissionReview serialises")
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
    let body = serde_json::to_vec(&ErrorOut { error: &reason }).expect("error serialises");
    summary.reason = Some(reason);
    Reply { body, summary }
}

pub mod pods;

#[cfg(test)]
mod tests;
