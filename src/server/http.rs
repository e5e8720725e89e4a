//! The routers: the webhook (`POST /mutate`, `POST /validate`, `POST /validate-pods`) and the
//! admin port (`/livez`, `/readyz`, `/metrics`). Handlers only unwrap the HTTP request, call
//! [`crate::admission::review`] (for a Pod, [`crate::admission::pods`], with the owning
//! TaskRun fetched in between), and wrap the reply; they add metrics and the request span.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, Limited};
use tracing::Instrument;
use tracing::field::Empty;

use super::Review;
use crate::admission::pods::{self, OwnerLookup, PodBackstop};
use crate::admission::{Endpoint, Reply, Summary};
use crate::engine::Outcome;
use crate::events::Followups;
use crate::metrics::{self, Metrics};
use crate::source::{PolicySource, Snapshot};

/// The largest AdmissionReview accepted (the API server's own limit is lower).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What the handlers share.
pub struct AppState {
    pub policies: Arc<dyn PolicySource>,
    pub metrics: Metrics,
    pub ready: AtomicBool,
    pub request_timeout: Duration,
    pub review: Review,
    pub pod_backstop: PodBackstop,
    /// Events and PolicyReport results after admission (kubernetes mode).
    pub followups: Option<Followups>,
}

/// `POST /mutate`, `POST /validate` and `POST /validate-pods`; JSON 404 and 405 for anything
/// else.
pub fn webhook_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
        .route("/validate-pods", post(validate_pods))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// `GET /livez`, `/readyz`, `/metrics`.
pub fn admin_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

// === webhook ===

async fn mutate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    handle(state, Endpoint::Mutate, request).await
}

async fn validate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    handle(state, Endpoint::Validate, request).await
}

async fn validate_pods(State(state): State<Arc<AppState>>, request: Request) -> Response {
    handle(state, Endpoint::ValidatePods, request).await
}

async fn handle(state: Arc<AppState>, endpoint: Endpoint, request: Request) -> Response {
    let started = Instant::now();
    let _in_flight = state.metrics.in_flight();
    let span = tracing::info_span!(
        "admission",
        endpoint = endpoint.as_str(),
        uid = Empty,
        kind = Empty,
        namespace = Empty,
        object_name = Empty,
        operation = Empty,
        dry_run = Empty,
        outcome = Empty,
        latency_us = Empty,
    );
    async move {
        let (status, body, summary) = answer(&state, endpoint, request).await;
        let latency = started.elapsed();
        record(&summary, latency);
        log(status, &summary);
        state
            .metrics
            .observe_review(endpoint.as_str(), &summary, latency.as_secs_f64());
        json_response(status, body)
    }
    .instrument(span)
    .await
}

/// Reads the body (bounded in size and time) and runs the review.
async fn answer(
    state: &AppState,
    endpoint: Endpoint,
    request: Request,
) -> (StatusCode, Vec<u8>, Summary) {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > DRAIN_LIMIT_BYTES as u64) {
        return too_large();
    }
    let body = match read_body(request.into_body(), state.request_timeout).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => return too_large(),
        Err(BodyError::Timeout) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received within the request timeout",
            );
        }
        Err(BodyError::Read(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            );
        }
    };
    let snapshot = state.policies.current();
    let reviewed = match endpoint {
        Endpoint::ValidatePods => review_pod(state, &body, &snapshot).await,
        _ => guarded(|| (state.review)(endpoint, &body, &snapshot.set, snapshot.lookup.as_ref())),
    };
    match reviewed {
        Ok(mut reply) => {
            // Hand the admitted TaskRun over and answer: never waits for the API server.
            if let (Some(admitted), Some(f)) = (reply.summary.admitted.take(), &state.followups) {
                f.offer(admitted, &snapshot);
            }
            (
                if reply.answered() {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                },
                reply.body,
                reply.summary,
            )
        }
        Err(message) => {
            state.metrics.handler_panic();
            tracing::error!(panic = %message, "BUG: the review panicked; answered 400");
            error(
                StatusCode::BAD_REQUEST,
                "internal error handling this review",
            )
        }
    }
}

/// A Pod review: read it, fetch the TaskRun that owns the Pod, answer.
async fn review_pod(state: &AppState, body: &[u8], snapshot: &Snapshot) -> Result<Reply, String> {
    let review = match guarded(|| pods::read(body))? {
        pods::Read::Review(review) => review,
        pods::Read::Malformed(reply) => return Ok(*reply),
    };
    let owner = match (review.owner(), state.policies.task_runs()) {
        (None, _) => OwnerLookup::NotFound,
        (Some(_), None) => OwnerLookup::Unavailable,
        (Some(owner), Some(reader)) => {
            let get = reader.get(&owner.namespace, &owner.name);
            match tokio::time::timeout(state.request_timeout, get).await {
                Ok(Ok(Some(taskrun))) => OwnerLookup::Found(taskrun),
                Ok(Ok(None)) => OwnerLookup::NotFound,
                Ok(Err(error)) => OwnerLookup::Failed(error),
                Err(_) => OwnerLookup::Failed("the API server did not answer in time".to_owned()),
            }
        }
    };
    guarded(|| {
        pods::answer(
            review,
            owner,
            state.pod_backstop,
            &snapshot.set,
            snapshot.lookup.as_ref(),
        )
    })
}

/// Runs `f`; a panic becomes its message (a bug: the answer is a 400, the server goes on).
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default()
    })
}

/// How much of a body over [`MAX_BODY_BYTES`] is read (and dropped) before the 413: a client
/// must finish sending to read an answer. Over HTTP/2 a stream whose request body is left unread
/// is reset, and clients then report the reset ("Stream error in the HTTP/2 framing layer")
/// instead of the 413.
const DRAIN_LIMIT_BYTES: usize = 4 * MAX_BODY_BYTES;

enum BodyError {
    TooLarge,
    Timeout,
    Read(String),
}

/// Reads a request body of at most [`MAX_BODY_BYTES`] within `timeout`. A larger body is read to
/// its end and dropped (up to [`DRAIN_LIMIT_BYTES`]), so the answer reaches the client.
async fn read_body(mut body: Body, timeout: Duration) -> Result<Bytes, BodyError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut kept: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if seen > MAX_BODY_BYTES => return Err(BodyError::TooLarge),
            Err(_) => return Err(BodyError::Timeout),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Read(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        seen += data.len();
        if seen > DRAIN_LIMIT_BYTES {
            return Err(BodyError::TooLarge);
        }
        if seen > MAX_BODY_BYTES {
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if seen > MAX_BODY_BYTES {
        Err(BodyError::TooLarge)
    } else {
        Ok(Bytes::from(kept))
    }
}

fn too_large() -> (StatusCode, Vec<u8>, Summary) {
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("request body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn error(status: StatusCode, reason: &str) -> (StatusCode, Vec<u8>, Summary) {
    let summary = Summary {
        outcome: None,
        reason: Some(reason.to_owned()),
        ..Summary::default()
    };
    (status, error_body(reason), summary)
}

fn error_body(reason: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "error": reason })).unwrap_or_default()
}

fn record(summary: &Summary, latency: Duration) {
    let span = tracing::Span::current();
    if !summary.uid.is_empty() {
        span.record("uid", summary.uid.as_str());
    }
    if let Some(kind) = &summary.kind {
        span.record("kind", kind.as_str());
    }
    if !summary.namespace.is_empty() {
        span.record("namespace", summary.namespace.as_str());
    }
    if !summary.name.is_empty() {
        span.record("object_name", summary.name.as_str());
    }
    if !summary.operation.is_empty() {
        span.record("operation", summary.operation.as_str());
    }
    span.record("dry_run", summary.dry_run);
    span.record("outcome", summary.outcome_label());
    span.record("latency_us", latency.as_micros() as u64);
}

fn log(status: StatusCode, summary: &Summary) {
    let reason = summary.reason.as_deref().unwrap_or("");
    match summary.outcome {
        Some(Outcome::Denied) => tracing::info!(reason, "denied"),
        Some(Outcome::Mutated) => {
            let injected: Vec<String> = summary
                .injected
                .iter()
                .map(|(policy, steps)| format!("{policy}={steps}"))
                .collect();
            tracing::info!(
                injected = %injected.join(","),
                warnings = summary.warnings,
                "mutated"
            );
        }
        Some(Outcome::Admitted) => tracing::info!(warnings = summary.warnings, "admitted"),
        None => {
            tracing::warn!(status = status.as_u16(), reason, "malformed request")
        }
    }
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(body),
    )
        .into_response()
}

/// Reads and drops a body the answer does not need (bounded in size and time), so an HTTP/1.1
/// keep-alive connection stays usable: hyper closes a connection whose request body was left
/// unread, after a response that did not say `Connection: close`, and the client's next request
/// on it then fails.
async fn discard_body(request: Request) {
    let read = Limited::new(request.into_body(), MAX_BODY_BYTES).collect();
    let _ = tokio::time::timeout(Duration::from_secs(1), read).await;
}

async fn not_found(request: Request) -> Response {
    let message = format!(
        "no such endpoint {}: use POST /mutate, POST /validate or POST /validate-pods",
        request.uri().path()
    );
    discard_body(request).await;
    json_response(StatusCode::NOT_FOUND, error_body(&message))
}

async fn method_not_allowed(request: Request) -> Response {
    let message = format!(
        "method {} not allowed: use POST {}",
        request.method(),
        request.uri().path()
    );
    discard_body(request).await;
    let mut response = json_response(StatusCode::METHOD_NOT_ALLOWED, error_body(&message));
    response
        .headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    response
}

// === admin ===

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.ready.load(Ordering::Acquire) && state.policies.is_ready() {
        // The Tekton the policies are compiled for, so `curl /readyz` answers "which Tekton
        // does bookend think this is" (kubelet probes read only the status).
        let set = state.policies.current().set.clone();
        let tekton = &set.settings().tekton;
        let support = if tekton.is_supported() {
            ""
        } else {
            " (older than bookend supports)"
        };
        (StatusCode::OK, format!("ok\n{tekton}{support}\n")).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: starting or shutting down\n",
        )
            .into_response()
    }
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.metrics.encode(),
    )
        .into_response()
}
