//! The routers: the webhook (`POST /mutate`, `POST /validate`) and the admin port (`/livez`,
//! `/readyz`, `/metrics`). Handlers only unwrap the HTTP request, call
//! [`admission::review`], and wrap the reply; they add metrics and the request span.

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
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tracing::Instrument;
use tracing::field::Empty;

use super::Review;
use crate::admission::{Endpoint, ReviewOutcome, Summary};
use crate::events::Followups;
use crate::metrics::{self, Metrics};
use crate::source::PolicySource;

/// The largest AdmissionReview accepted (the API server's own limit is lower).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// What the handlers share.
pub struct AppState {
    pub policies: Arc<dyn PolicySource>,
    pub metrics: Metrics,
    pub ready: AtomicBool,
    pub request_timeout: Duration,
    pub review: Review,
    /// Events and PolicyReport results after admission (kubernetes mode).
    pub followups: Option<Followups>,
}

/// `POST /mutate` and `POST /validate`; JSON 404 and 405 for anything else.
pub fn webhook_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/validate", post(validate))
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
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let read = Limited::new(request.into_body(), MAX_BODY_BYTES).collect();
    let body: Bytes = match tokio::time::timeout(state.request_timeout, read).await {
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "request body not received within the request timeout",
            );
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            );
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    let snapshot = state.policies.current();
    let reviewed = std::panic::catch_unwind(AssertUnwindSafe(|| {
        (state.review)(endpoint, &body, &snapshot.set, snapshot.lookup.as_ref())
    }));
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
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            state.metrics.handler_panic();
            tracing::error!(panic = %message, "BUG: the review panicked; answered 400");
            error(
                StatusCode::BAD_REQUEST,
                "internal error handling this review",
            )
        }
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
        outcome: ReviewOutcome::Malformed,
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
    span.record("outcome", summary.outcome.as_str());
    span.record("latency_us", latency.as_micros() as u64);
}

fn log(status: StatusCode, summary: &Summary) {
    let reason = summary.reason.as_deref().unwrap_or("");
    match summary.outcome {
        ReviewOutcome::Denied => tracing::info!(reason, "denied"),
        ReviewOutcome::Mutated => {
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
        ReviewOutcome::Allowed => tracing::info!(warnings = summary.warnings, "allowed"),
        ReviewOutcome::Malformed => {
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
        "no such endpoint {}: use POST /mutate or POST /validate",
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
        (StatusCode::OK, "ok\n").into_response()
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
