//! The HTTPS admission webhook and the plain-HTTP admin endpoints.
//!
//! ```text
//!  Config ──bind()──▶ Bound ──run(shutdown)──▶ ()
//!    │                  │
//!    ├─ TlsStore::load  ├─ conn::serve_tls   TLS :8443, /mutate /validate /validate-pods
//!    └─ PolicySource    ├─ axum::serve       HTTP :8080, /livez /readyz /metrics
//!                       └─ reload task       polls the certificate and the policy source
//! ```
//!
//! [`run`] is `bookend serve`: bind, then serve until SIGTERM/SIGINT. Tests call [`bind`] with
//! port 0, read [`Bound::webhook_addr`], and pass their own shutdown future to [`Bound::run`].

pub mod conn;
pub mod http;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::admission::pods::PodBackstop;
use crate::admission::{Endpoint, Reply};
use crate::engine::Lookup;
use crate::events::Followups;
use crate::metrics::Metrics;
use crate::policy::{PolicySet, Settings};
use crate::reports::Reports;
use crate::source::files::{FileSource, LoadError, Paths};
use crate::source::{PolicySource, kubernetes};
use crate::verification;
use conn::ConnLimits;
use http::AppState;
use tls::{TlsError, TlsFiles, TlsStore};

/// Where policies (and Tasks, namespaces) come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicySourceConfig {
    /// Policy files and directories, and Task/StepAction/Namespace files for refs; reloaded
    /// when they change.
    Files {
        policies: Vec<PathBuf>,
        tasks: Vec<PathBuf>,
    },
    /// ClusterStepPolicy/StepPolicy objects from the API server (in-cluster or KUBECONFIG), and
    /// what bookend writes back after admission (Events, PolicyReports).
    Kubernetes(crate::events::Options),
}

/// How one AdmissionReview body on `/mutate` or `/validate` is answered (`/validate-pods`
/// goes through [`crate::admission::pods`]):
/// [`crate::admission::review`] in production; [`test_support`] lets a test wrap it.
pub type Review = fn(Endpoint, &[u8], &PolicySet, &dyn Lookup) -> Reply;

/// The typed configuration of the server (`bookend serve` builds it from its flags).
#[derive(Clone, Debug)]
pub struct Config {
    pub source: PolicySourceConfig,
    pub settings: Settings,
    pub tls: TlsFiles,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub drain_timeout: Duration,
    /// On shutdown, how long the listener still accepts and connections are served as usual.
    pub shutdown_linger: Duration,
    pub reload_interval: Duration,
    /// What `/validate-pods` does with a TaskRun Pod that lacks steps.
    pub pod_backstop: PodBackstop,
}

/// Why the server could not start. Messages name the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "--source kubernetes: cannot reach the Kubernetes API (in-cluster service account or KUBECONFIG): {0}"
    )]
    Kubernetes(#[source] kube::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("--policies: the policies are invalid (see `bookend validate`):\n{0}")]
    Policies(#[from] LoadError),
    #[error("{flag} {addr}: cannot listen: {source}")]
    Bind {
        flag: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// The listeners are bound, the certificate and the policies loaded: ready to [`run`](Bound::run).
pub struct Bound {
    webhook: TcpListener,
    admin: TcpListener,
    webhook_addr: SocketAddr,
    admin_addr: SocketAddr,
    tls: Arc<TlsStore>,
    state: Arc<AppState>,
    limits: ConnLimits,
    reload_interval: Duration,
}

/// Loads the certificate and the policies, and binds both listeners.
pub async fn bind(config: Config) -> Result<Bound, Error> {
    bind_with(config, crate::admission::review).await
}

/// For the integration tests, not for production: a server whose reviews `review` answers.
/// Outside [`Config`] so that `bookend serve` has no way to set it; a module rather than
/// `#[cfg(test)]` because integration tests build the library without `cfg(test)`.
#[doc(hidden)]
pub mod test_support {
    pub use super::Review;
    use super::{Bound, Config, Error};

    /// [`bind`](super::bind), with `review` in place of [`crate::admission::review`] (a test
    /// wraps it, e.g. to make it panic and check the server survives).
    pub async fn bind_with_review(config: Config, review: Review) -> Result<Bound, Error> {
        super::bind_with(config, review).await
    }
}

async fn bind_with(config: Config, review: Review) -> Result<Bound, Error> {
    let metrics = Metrics::new();
    metrics.set_tekton_info(&config.settings.tekton);
    let tls = Arc::new(TlsStore::load(config.tls.clone(), metrics.clone())?);
    let mut followups = None;
    let policies: Arc<dyn PolicySource> = match config.source {
        PolicySourceConfig::Files { policies, tasks } => Arc::new(FileSource::load(
            Paths {
                policies,
                tasks,
                settings: config.settings.clone(),
            },
            metrics.clone(),
        )?),
        PolicySourceConfig::Kubernetes(options) => {
            let client = kube::Client::try_default()
                .await
                .map_err(Error::Kubernetes)?;
            followups = Some(Followups::start(
                client.clone(),
                kubernetes::reporter(),
                options.clone(),
                metrics.clone(),
            ));
            let source: Arc<dyn PolicySource> = Arc::new(kubernetes::start(
                client.clone(),
                config.settings.clone(),
                metrics.clone(),
            ));
            if options.verify_runs {
                let reports = options.policy_reports.then(|| {
                    Reports::start(
                        client.clone(),
                        options.report_api,
                        options.report_limit,
                        Duration::from_secs(2),
                        metrics.clone(),
                    )
                });
                verification::counts::start(
                    client.clone(),
                    source.clone(),
                    options.verification_counts,
                    metrics.clone(),
                );
                verification::start(
                    client,
                    source.clone(),
                    kubernetes::reporter(),
                    reports,
                    metrics.clone(),
                );
            }
            source
        }
    };
    let listen = |flag, addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind { flag, addr, source })
    };
    let webhook = listen("--listen", config.listen).await?;
    let admin = listen("--admin-listen", config.admin_listen).await?;
    let local = |l: &TcpListener, flag, addr| {
        l.local_addr()
            .map_err(|source| Error::Bind { flag, addr, source })
    };
    let webhook_addr = local(&webhook, "--listen", config.listen)?;
    let admin_addr = local(&admin, "--admin-listen", config.admin_listen)?;
    let state = Arc::new(AppState {
        policies,
        metrics,
        ready: AtomicBool::new(false),
        request_timeout: config.request_timeout,
        review,
        pod_backstop: config.pod_backstop,
        followups,
    });
    Ok(Bound {
        webhook,
        admin,
        webhook_addr,
        admin_addr,
        tls,
        state,
        limits: ConnLimits {
            header_read_timeout: config.header_read_timeout,
            drain_timeout: config.drain_timeout,
            shutdown_linger: config.shutdown_linger,
        },
        reload_interval: config.reload_interval,
    })
}

impl Bound {
    /// The bound webhook (HTTPS) address.
    pub fn webhook_addr(&self) -> SocketAddr {
        self.webhook_addr
    }

    /// The bound admin (HTTP) address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Serves until `shutdown` completes, then stops accepting, lets in-flight requests finish
    /// (within the drain timeout) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self {
            webhook,
            admin,
            webhook_addr,
            admin_addr,
            tls,
            state,
            limits,
            reload_interval,
        } = self;
        let stop_webhook = CancellationToken::new();
        let stop_admin = CancellationToken::new();

        let reloader = tokio::spawn(reload_loop(
            tls.clone(),
            state.policies.clone(),
            reload_interval,
            stop_webhook.clone(),
        ));
        let webhook_task = tokio::spawn(conn::serve_tls(
            webhook,
            tls.clone(),
            http::webhook_router(state.clone()),
            limits,
            state.metrics.clone(),
            stop_webhook.clone(),
        ));
        let admin_task = tokio::spawn({
            let stop = stop_admin.clone();
            let router = http::admin_router(state.clone());
            async move {
                if let Err(error) = axum::serve(admin, router)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                {
                    tracing::error!(%error, "admin server failed");
                }
            }
        });
        state.ready.store(true, Ordering::Release);
        let cert = tls.info();
        tracing::info!(
            webhook = %format!("https://{webhook_addr}"),
            admin = %format!("http://{admin_addr}"),
            policies = state.policies.current().set.len(),
            certificate_serial = %cert.serial,
            certificate_sans = ?cert.sans,
            "serving"
        );

        shutdown.await;
        tracing::info!(drain_timeout = ?limits.drain_timeout, "shutting down: not ready; serving on for the linger, then no new connections, finishing in-flight requests");
        state.ready.store(false, Ordering::Release);
        stop_webhook.cancel();
        let _ = webhook_task.await;
        let _ = reloader.await;
        stop_admin.cancel();
        if tokio::time::timeout(Duration::from_secs(2), admin_task)
            .await
            .is_err()
        {
            tracing::warn!("admin server did not stop in time");
        }
        tracing::info!("stopped");
    }
}

async fn reload_loop(
    tls: Arc<TlsStore>,
    policies: Arc<dyn PolicySource>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        // File reads and policy parsing block: keep them off the async workers.
        let (t, p) = (tls.clone(), policies.clone());
        let _ = tokio::task::spawn_blocking(move || {
            t.poll();
            p.poll();
        })
        .await;
    }
}

/// Completes on SIGTERM or SIGINT, and logs which.
pub async fn shutdown_signal() {
    let name = signal().await;
    tracing::info!("{name} received");
}

/// Waits for SIGTERM or SIGINT; returns its name.
async fn signal() -> &'static str {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => "SIGINT",
        () = term => "SIGTERM",
    }
}

/// `bookend serve`: binds, serves until SIGTERM or SIGINT, drains, returns. A second signal
/// during the drain returns at once.
pub async fn run(config: Config) -> Result<(), Error> {
    let bound = bind(config).await?;
    let second_signal = async {
        signal().await;
        signal().await;
    };
    tokio::select! {
        () = bound.run(shutdown_signal()) => {}
        () = second_signal => {
            tracing::warn!("second signal: exiting without waiting for in-flight requests");
        }
    }
    Ok(())
}
