//! The HTTPS admission webhook and the plain-HTTP admin endpoints.
//!
//! ```text
//!  ServeArgs ──Config::from_args──▶ Config ──bind()──▶ Bound ──run(shutdown)──▶ Ok(())
//!                                     │                  │
//!              TlsStore::load ◀───────┤                  ├─ conn::serve_tls   TLS :8443, /mutate /validate
//!              PolicyStore::load ◀────┘                  ├─ axum::serve       HTTP :8080, /livez /readyz /metrics
//!                                                        └─ reload task       polls cert, key, policies, tasks
//! ```
//!
//! Tests call [`bind`] with port 0, read [`Bound::webhook_addr`], and pass their own shutdown
//! future to [`Bound::run`].

pub mod conn;
pub mod http;
pub mod policies;
pub mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cli::EngineArgs;
use crate::metrics::Metrics;
use crate::policy::Settings;
use crate::telemetry::LogFormat;
use conn::ConnLimits;
use http::AppState;
use policies::{PolicyError, PolicyStore, Sources};
use tls::{TlsError, TlsFiles, TlsStore};

/// Where policies (and Tasks, namespaces) come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// Policy files and directories (`--policies`), reloaded when they change.
    Files,
    /// ClusterStepPolicy/StepPolicy objects from the API server (in-cluster or KUBECONFIG).
    Kubernetes,
}

const DEFAULT_TLS_CERT: &str = "certs/tls.crt";
const DEFAULT_TLS_KEY: &str = "certs/tls.key";

/// `bookend serve` options.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Policy file or directory (repeatable; files mode).
    #[arg(long, value_name = "PATH", default_value = "examples/policies")]
    pub policies: Vec<PathBuf>,
    /// Serving certificate (PEM). With the default paths missing, a dev pair is generated.
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TLS_CERT)]
    pub tls_cert: PathBuf,
    /// Serving key (PEM).
    #[arg(long, value_name = "FILE", default_value = DEFAULT_TLS_KEY)]
    pub tls_key: PathBuf,
    /// CA bundle (PEM): when set, clients must present a certificate signed by it.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,
    /// Webhook (HTTPS) listen address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Admin (HTTP: /livez, /readyz, /metrics) listen address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub admin_listen: SocketAddr,
    /// Where policies come from.
    #[arg(long, value_enum, default_value_t = Source::Files)]
    pub source: Source,
    /// Task, StepAction and Namespace objects for resolving refs (files mode; repeatable).
    #[arg(long, value_name = "PATH")]
    pub tasks: Vec<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = LogFormat::Text, env = "BOOKEND_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter: a level (`info`, `debug`) or directives (`bookend=debug,hyper=info`).
    /// `RUST_LOG` wins when set.
    #[arg(
        long,
        value_name = "FILTER",
        default_value = "info",
        env = "BOOKEND_LOG_LEVEL"
    )]
    pub log_level: String,
    /// Time allowed for the TLS handshake and for each request's headers (`500ms`, `5s`, `1m`).
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Time allowed to receive a request body; slower clients get 408. Keep it below the
    /// webhook configuration's `timeoutSeconds`.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish before exit.
    #[arg(long, default_value = "20s", value_name = "DURATION", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// How often the certificate, key, policy and task files are checked for changes.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub reload_interval: Duration,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Parses `250ms`, `5s`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 500ms, 5s or 1m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("{text:?}: unit must be ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// Hooks for tests only: behaviour no production configuration sets.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct TestHooks {
    /// Panic inside the review of any request whose body contains these bytes.
    pub panic_on: Option<Vec<u8>>,
}

/// The validated, typed configuration of the server.
#[derive(Clone, Debug)]
pub struct Config {
    pub source: Source,
    pub policies: Vec<PathBuf>,
    pub tasks: Vec<PathBuf>,
    pub settings: Settings,
    pub tls: TlsFiles,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub drain_timeout: Duration,
    pub reload_interval: Duration,
    #[doc(hidden)]
    pub test_hooks: TestHooks,
}

/// Why the server could not start. Messages name the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "--source kubernetes: cannot reach the Kubernetes API (in-cluster service account or KUBECONFIG): {0}"
    )]
    Kubernetes(#[source] kube::Error),
    #[error("{flag} {}: cannot read: {source}", path.display())]
    Unreadable {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("--policies: the policies are invalid (see `bookend validate`):\n{0}")]
    Policies(#[from] PolicyError),
    #[error("cannot generate the development certificate: {0}")]
    DevCertificate(#[from] crate::certs::CertsError),
    #[error("{flag} {addr}: cannot listen: {source}")]
    Bind {
        flag: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

impl Config {
    /// Checks the flags: source supported, certificate, key and client CA readable.
    pub fn from_args(args: &ServeArgs) -> Result<Self, Error> {
        let ServeArgs {
            policies,
            tls_cert,
            tls_key,
            client_ca,
            listen,
            admin_listen,
            source,
            tasks,
            log_format: _,
            log_level: _,
            header_read_timeout,
            request_timeout,
            drain_timeout,
            reload_interval,
            engine,
        } = args;
        readable("--tls-cert", tls_cert)?;
        readable("--tls-key", tls_key)?;
        if let Some(ca) = client_ca {
            readable("--client-ca", ca)?;
        }
        Ok(Self {
            source: *source,
            policies: policies.clone(),
            tasks: tasks.clone(),
            settings: engine.settings(),
            tls: TlsFiles {
                cert: tls_cert.clone(),
                key: tls_key.clone(),
                client_ca: client_ca.clone(),
            },
            listen: *listen,
            admin_listen: *admin_listen,
            header_read_timeout: *header_read_timeout,
            request_timeout: *request_timeout,
            drain_timeout: *drain_timeout,
            reload_interval: (*reload_interval).max(Duration::from_millis(50)),
            test_hooks: TestHooks::default(),
        })
    }
}

fn readable(flag: &'static str, path: &Path) -> Result<(), Error> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| Error::Unreadable {
            flag,
            path: path.to_owned(),
            source,
        })
}

/// When `--tls-cert` and `--tls-key` are the defaults and both files are missing, writes a
/// development CA and serving pair into `certs/` (for localhost, 127.0.0.1, ::1 and the
/// listen address). Returns the CA path when it did.
pub fn ensure_dev_certificate(args: &ServeArgs) -> Result<Option<PathBuf>, Error> {
    let defaults =
        args.tls_cert == Path::new(DEFAULT_TLS_CERT) && args.tls_key == Path::new(DEFAULT_TLS_KEY);
    if !defaults || args.tls_cert.exists() || args.tls_key.exists() {
        return Ok(None);
    }
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let ip = args.listen.ip();
    if !ip.is_unspecified() && !hosts.contains(&ip.to_string()) {
        hosts.push(ip.to_string());
    }
    let dir = args.tls_cert.parent().unwrap_or(Path::new("."));
    let written = crate::certs::generate(dir, &hosts, 365)?;
    Ok(Some(written.ca_cert))
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
    let metrics = Metrics::new();
    let tls = Arc::new(TlsStore::load(config.tls.clone(), metrics.clone())?);
    let policies = Arc::new(match config.source {
        Source::Files => PolicyStore::load(
            Sources {
                policies: config.policies.clone(),
                tasks: config.tasks.clone(),
                settings: config.settings.clone(),
            },
            metrics.clone(),
        )?,
        Source::Kubernetes => {
            let client = kube::Client::try_default()
                .await
                .map_err(Error::Kubernetes)?;
            let source = crate::cluster::start(client, config.settings.clone(), metrics.clone());
            PolicyStore::kubernetes(source, metrics.clone())
        }
    });
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
        hooks: config.test_hooks.clone(),
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
        tracing::info!(drain_timeout = ?limits.drain_timeout, "shutting down: no new connections, finishing in-flight requests");
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
    policies: Arc<PolicyStore>,
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

/// Dev certificate if needed, config, bind, serve until SIGTERM/SIGINT.
async fn start_and_run(args: &ServeArgs) -> Result<(), Error> {
    if let Some(ca) = ensure_dev_certificate(args)? {
        tracing::info!(
            ca = %ca.display(),
            cert = %args.tls_cert.display(),
            key = %args.tls_key.display(),
            "no certificate at the default paths: generated a development CA and serving certificate (trust the CA to call the webhook)"
        );
    }
    let bound = bind(Config::from_args(args)?).await?;
    // A second signal during the drain exits at once.
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

/// Runs `bookend serve`: exit 0 after a clean shutdown, 2 when it cannot start.
pub fn main(args: ServeArgs) -> ExitCode {
    crate::telemetry::init(args.log_format, &args.log_level);
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "panic");
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(crate::cli::exit::USAGE);
        }
    };
    let code = match runtime.block_on(start_and_run(&args)) {
        Ok(()) => crate::cli::exit::OK,
        Err(e) => {
            eprintln!("error: {e}");
            crate::cli::exit::USAGE
        }
    };
    // Connection tasks past the drain timeout are dropped here.
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
