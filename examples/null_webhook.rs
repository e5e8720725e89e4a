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
//! ```sh
//! cargo run --release --example null_webhook -- \
//!     --tls-cert certs/tls.crt --tls-key certs/tls.key --listen 127.0.0.1:9443
//! ```
//!
//! `GET /readyz` on `--admin-listen` (plain HTTP) answers 200 once the listeners are serving.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
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
    /// Admin (HTTP: /readyz) listen address.
    #[arg(long, default_value = "127.0.0.1:9080")]
    admin_listen: SocketAddr,
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
        };
        let router = Router::new()
            .route("/mutate", post(allow))
            .route("/validate", post(allow));
        let server = tokio::spawn(serve_tls(
            webhook,
            tls,
            router,
            limits,
            Metrics::new(),
            stop.clone(),
        ));
        let admin_router = Router::new().route("/readyz", get(|| async { "ok\n" }));
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

/// Parses the review and allows it, echoing the uid.
async fn allow(request: Request) -> Response {
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
    let answer = json!({
        "apiVersion": review.get("apiVersion").cloned().unwrap_or(Value::Null),
        "kind": review.get("kind").cloned().unwrap_or(Value::Null),
        "response": { "uid": uid, "allowed": true },
    });
    reply(StatusCode::OK, &answer)
}

fn reply(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(serde_json::to_vec(body).unwrap_or_default()),
    )
        .into_response()
}
