//! The TLS accept loop. Each accepted socket gets its own task for the handshake and the HTTP
//! connection (h2 or http/1.1 by ALPN, hyper-util's auto builder), so one slow client never
//! stalls the others. On shutdown the loop keeps accepting and serving for a short linger, then
//! stops accepting and drains the open connections (in-flight requests finish) within a bound.
//!
//! Why `Connection: close` once stopping: the API server calls webhooks over HTTP/1.1 (it sets
//! ALPN `http/1.1` for a Service or a non-loopback URL, k8s.io/apiserver `pkg/util/webhook`) and
//! reuses idle keep-alive connections. Closing an idle connection races a POST the client is
//! writing on it at that moment; Go's transport does not retry a non-idempotent request whose
//! bytes it wrote, so the API server sees `EOF` and applies the failurePolicy. From the stop on,
//! every HTTP/1 answer says `Connection: close`: the client retires each connection it uses
//! itself, after its answer, and only connections it left idle for the whole linger are closed
//! by the server at the drain.
//!
//! Why the linger: the API server picks an endpoint when it dials and keeps the connection; its
//! view of the Service's endpoints can lag the Pod's termination. A connection it dialled just
//! before the stop, still in the accept backlog or in its TLS handshake, would otherwise be
//! reset or closed before its first request (hyper closes a connection asked to shut down
//! before it served anything): the API server sees `EOF` and applies the webhook's
//! failurePolicy, a skipped mutation or a refused TaskRun.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, HeaderValue};
use hyper::{Request, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::tls::TlsStore;
use crate::metrics::Metrics;

/// Timeouts of one connection.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// TLS handshake, and each HTTP/1 request's headers.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for open connections before giving up on them.
    pub drain_timeout: Duration,
    /// How long after the stop the listener still accepts and connections are served as usual
    /// before they are asked to finish.
    pub shutdown_linger: Duration,
}

/// Accepts until `stop` is cancelled and for the linger after it, then drains.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<TlsStore>,
    router: Router,
    limits: ConnLimits,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let graceful = GracefulShutdown::new();
    let accept = |socket: TcpStream, peer: SocketAddr| {
        let service = CloseWhenStopping {
            inner: TowerToHyperService::new(router.clone()),
            stopping: stop.clone(),
        };
        spawn_connection(socket, peer, &tls, service, limits, &metrics, &graceful);
    };
    let mut last_accept = accept_until(&listener, stop.cancelled(), accept).await;
    if !limits.shutdown_linger.is_zero() {
        tracing::info!(linger = ?limits.shutdown_linger, "still accepting and serving for the linger");
        let linger = tokio::time::sleep(limits.shutdown_linger);
        last_accept = accept_until(&listener, linger, accept)
            .await
            .or(last_accept);
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(connections = open, "draining open connections");
    }
    let drained = async {
        // hyper closes a connection asked to shut down before it served anything, unanswered.
        // A connection accepted just now has had no time for its handshake and first request:
        // give it the time a client has for them (as Go's server leaves a new connection 5 s),
        // then ask every connection to finish.
        if let Some(accepted) = last_accept {
            let settled = accepted + limits.header_read_timeout;
            if settled > Instant::now() {
                tokio::time::sleep_until(settled.into()).await;
            }
        }
        graceful.shutdown().await;
    };
    if tokio::time::timeout(limits.drain_timeout, drained)
        .await
        .is_err()
    {
        tracing::warn!(
            timeout = ?limits.drain_timeout,
            "connections still open after the drain timeout; closing them"
        );
    }
}

/// Accepts connections and hands each to `accept` until `until` completes; when it last did.
async fn accept_until(
    listener: &TcpListener,
    until: impl Future<Output = ()>,
    accept: impl Fn(TcpStream, SocketAddr),
) -> Option<Instant> {
    tokio::pin!(until);
    let mut last = None;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut until => return last,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, peer)) => {
                last = Some(Instant::now());
                accept(socket, peer);
            }
            Err(error) => accept_failed(error).await,
        }
    }
}

/// EMFILE and friends: back off instead of spinning.
async fn accept_failed(error: std::io::Error) {
    tracing::warn!(%error, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// The router, whose HTTP/1 answers say `Connection: close` once the server is stopping (the
/// module's doc says why); HTTP/2 has GOAWAY for that, which hyper sends at the drain.
#[derive(Clone)]
struct CloseWhenStopping {
    inner: TowerToHyperService<Router>,
    stopping: CancellationToken,
}

impl hyper::service::Service<Request<Incoming>> for CloseWhenStopping {
    type Response =
        <TowerToHyperService<Router> as hyper::service::Service<Request<Incoming>>>::Response;
    type Error = <TowerToHyperService<Router> as hyper::service::Service<Request<Incoming>>>::Error;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let http1 = request.version() < Version::HTTP_2;
        let answer = self.inner.call(request);
        let stopping = self.stopping.clone();
        Box::pin(async move {
            let mut response = answer.await?;
            // Checked when the answer is ready: a request that arrived before the stop and is
            // answered after it closes its connection too.
            if http1 && stopping.is_cancelled() {
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        })
    }
}

/// The handshake and the HTTP connection of one accepted socket, on a task of its own.
fn spawn_connection(
    socket: TcpStream,
    peer: SocketAddr,
    tls: &TlsStore,
    service: CloseWhenStopping,
    limits: ConnLimits,
    metrics: &Metrics,
    graceful: &GracefulShutdown,
) {
    let _ = socket.set_nodelay(true);
    let acceptor = tls.acceptor();
    let watcher = graceful.watcher();
    let metrics = metrics.clone();
    let open = metrics.connection();
    tokio::spawn(async move {
        let _open = open;
        let handshake =
            tokio::time::timeout(limits.header_read_timeout, acceptor.accept(socket)).await;
        let stream = match handshake {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => {
                metrics.tls_handshake_error();
                tracing::debug!(%peer, %error, "TLS handshake failed");
                return;
            }
            Err(_) => {
                metrics.tls_handshake_error();
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        };
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout);
        builder
            .http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(Some(Duration::from_secs(30)))
            .keep_alive_timeout(Duration::from_secs(10));
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        if let Err(error) = watcher.watch(connection).await {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    });
}
