//! The load benchmark's baseline (docs/load-benchmark.md): an admission webhook on bookend's own
//! TLS and HTTP stack that does no policy work.
//!
//! It reuses the library's pieces as they are: [`TlsStore`] (rustls with ring, TLS 1.2/1.3,
//! ALPN h2 and http/1.1), [`serve_tls`] (the accept loop: per-connection handshake task,
//! hyper-util's auto builder with the same HTTP/1 and HTTP/2 settings) and an axum router. The
//! handler reads the body with the same 3 MiB limit, parses it into a `serde_json::Value`,
//! echoes `apiVersion`, `kind` and `request.uid`, and answers `allowed: true`. No policy
//! matching, no injection, no patch, no per-request logging or metrics.
//!
//! `--patch-bytes N` adds a fixed JSON patch of about N bytes (built once at startup) to every
//! answer: the cost of sending a mutating webhook's larger answer, without computing it.
//! `--patch-file FILE` answers `/mutate` with the JSON patch in FILE instead (`/validate` stays
//! a plain allow): registered in front of a real kube-apiserver, it makes the apiserver store
//! exactly what bookend would, without bookend's work (`scripts/bench-apiserver.sh`, the
//! `nullpatch` set-up).
//!
//! ```sh
//! cargo run --release --example null_webhook -- \
//!     --tls-cert certs/tls.crt --tls-key certs/tls.key --listen 127.0.0.1:9443
//! ```
//!
//! `GET /readyz` on `--admin-listen` (plain HTTP) answers 200 once the listeners are serving;
//! `GET /metrics` there counts the reviews answered (`null_webhook_requests_total`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bookend::metrics::Metrics;
use bookend::server::conn::{ConnLimits, serve_tls};
use bookend::server::http::MAX_BODY_BYTES;
use bookend::server::tls::{TlsFiles, TlsStore};
use clap::Parser;
use http_body_util::{BodyExt, Limited};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

// The same allocator as the bookend binary (src/main.rs): the baseline differs only in the work.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A webhook that allows everything: the baseline for `scripts/bench-load.sh`.
#[derive(Parser, Debug)]
struct Args {
    /// Serving certificate (PEM).
    #[arg(long, default_value = "certs/tls.crt")]
    tls_cert: PathBuf,
    /// Serving key (PEM).
    #[arg(long, default_value = "certs/tls.key")]
    tls_key: PathBuf,
    /// Webhook (HTTPS) listen address.
    #[arg(long, default_value = "127.0.0.1:9443")]
    listen: SocketAddr,
    /// Admin (HTTP: /readyz, /metrics) listen address.
    #[arg(long, default_value = "127.0.0.1:9080")]
    admin_listen: SocketAddr,
    /// Answer with a fixed JSON patch of about this many bytes (0: no patch).
    #[arg(long, default_value_t = 0)]
    patch_bytes: usize,
    /// Answer `/mutate` with the JSON patch (an RFC 6902 array) in this file.
    #[arg(long, conflicts_with = "patch_bytes")]
    patch_file: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The same runtime as `bookend serve`: multi-threaded, one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let files = TlsFiles {
            cert: args.tls_cert.clone(),
            key: args.tls_key.clone(),
            client_ca: None,
        };
        let tls = match TlsStore::load(files, Metrics::new()) {
            Ok(tls) => Arc::new(tls),
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        let (webhook, admin) = match (
            TcpListener::bind(args.listen).await,
            TcpListener::bind(args.admin_listen).await,
        ) {
            (Ok(w), Ok(a)) => (w, a),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("error: cannot listen: {e}");
                return std::process::ExitCode::from(2);
            }
        };
        let stop = CancellationToken::new();
        // The defaults of `bookend serve`.
        let limits = ConnLimits {
            header_read_timeout: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(20),
            shutdown_linger: Duration::from_secs(2),
        };
        let answered = Arc::new(AtomicU64::new(0));
        let (mutate_patch, validate_patch) = match &args.patch_file {
            Some(path) => match file_patch(path) {
                Ok(patch) => (Some(patch), None),
                Err(e) => {
                    eprintln!("error: {}: {e}", path.display());
                    return std::process::ExitCode::from(2);
                }
            },
            None => {
                let patch = fixed_patch(args.patch_bytes);
                (patch.clone(), patch)
            }
        };
        let count = answered.clone();
        let mutate = move |request: Request| {
            count.fetch_add(1, Ordering::Relaxed);
            allow(request, mutate_patch.clone())
        };
        let count = answered.clone();
        let validate = move |request: Request| {
            count.fetch_add(1, Ordering::Relaxed);
            allow(request, validate_patch.clone())
        };
        let router = Router::new()
            .route("/mutate", post(mutate))
            .route("/validate", post(validate));
        let server = tokio::spawn(serve_tls(
            webhook,
            tls,
            router,
            limits,
            Metrics::new(),
            stop.clone(),
        ));
        let admin_router = Router::new()
            .route("/readyz", get(|| async { "ok\n" }))
            .route(
                "/metrics",
                get(move || async move {
                    format!(
                        "null_webhook_requests_total {}\n",
                        answered.load(Ordering::Relaxed)
                    )
                }),
            );
        let admin_stop = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(admin, admin_router)
                .with_graceful_shutdown(admin_stop.cancelled_owned())
                .await;
        });
        eprintln!(
            "null webhook serving https://{} (admin http://{})",
            args.listen, args.admin_listen
        );
        bookend::server::shutdown_signal().await;
        stop.cancel();
        let _ = server.await;
        std::process::ExitCode::SUCCESS
    })
}

/// A base64 JSON patch adding one annotation, `bytes` long before encoding (`None` for 0), as
/// a JSON string written as it is (as bookend writes its patches).
fn fixed_patch(bytes: usize) -> Option<Arc<RawValue>> {
    use base64::Engine as _;
    if bytes == 0 {
        return None;
    }
    let fill = bytes.saturating_sub(80);
    let patch = json!([{
        "op": "add",
        "path": "/metadata/annotations/bench.bookend.dev~1padding",
        "value": "x".repeat(fill),
    }]);
    let text = serde_json::to_vec(&patch).expect("patch serialises");
    let encoded = base64::engine::general_purpose::STANDARD.encode(text);
    let raw = RawValue::from_string(format!("\"{encoded}\"")).expect("a JSON string");
    Some(Arc::from(raw))
}

/// The JSON patch in `path`, base64-encoded once, as a JSON string.
fn file_patch(path: &std::path::Path) -> Result<Arc<RawValue>, String> {
    use base64::Engine as _;
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let patch: Value = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
    if !patch.is_array() {
        return Err("not a JSON patch (an array of operations)".to_owned());
    }
    let compact = serde_json::to_vec(&patch).expect("patch serialises");
    let encoded = base64::engine::general_purpose::STANDARD.encode(compact);
    let raw = RawValue::from_string(format!("\"{encoded}\"")).map_err(|e| e.to_string())?;
    Ok(Arc::from(raw))
}

/// Parses the review and allows it, echoing the uid (and the fixed patch, if any).
async fn allow(request: Request, patch: Option<Arc<RawValue>>) -> Response {
    let body: Bytes = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, &json!({ "error": e.to_string() })),
    };
    let review: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return reply(StatusCode::BAD_REQUEST, &json!({ "error": e.to_string() })),
    };
    let Some(uid) = review.pointer("/request/uid").and_then(Value::as_str) else {
        return reply(
            StatusCode::BAD_REQUEST,
            &json!({ "error": "no request.uid" }),
        );
    };
    let api_version = review.get("apiVersion").unwrap_or(&Value::Null);
    let kind = review.get("kind").unwrap_or(&Value::Null);
    let Some(patch) = patch else {
        let answer = json!({
            "apiVersion": api_version,
            "kind": kind,
            "response": { "uid": uid, "allowed": true },
        });
        return reply(StatusCode::OK, &answer);
    };
    // Typed, so the patch (a RawValue) is copied as it is rather than escaped.
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Patched<'a> {
        api_version: &'a Value,
        kind: &'a Value,
        response: PatchedResponse<'a>,
    }
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct PatchedResponse<'a> {
        uid: &'a str,
        allowed: bool,
        patch_type: &'static str,
        patch: &'a RawValue,
    }
    let answer = Patched {
        api_version,
        kind,
        response: PatchedResponse {
            uid,
            allowed: true,
            patch_type: "JSONPatch",
            patch: &patch,
        },
    };
    let body = serde_json::to_vec(&answer).unwrap_or_default();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(body),
    )
        .into_response()
}

fn reply(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(serde_json::to_vec(body).unwrap_or_default()),
    )
        .into_response()
}
