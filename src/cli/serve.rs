//! `bookend serve`: flags → [`server::Config`], then run the server until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{EngineArgs, exit};
use crate::admission::pods::PodBackstop;
use crate::server::tls::TlsFiles;
use crate::server::{self, Config, PolicySourceConfig};
use crate::telemetry::LogFormat;

/// `--source`: where policies (and Tasks, namespaces) come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SourceArg {
    /// Policy files and directories (`--policies`), reloaded when they change.
    Files,
    /// ClusterStepPolicy/StepPolicy objects from the API server (in-cluster or KUBECONFIG).
    Kubernetes,
}

/// `--pod-backstop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PodBackstopArg {
    Enforce,
    Warn,
}

/// `--policy-report-api`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportApiArg {
    /// wgpolicyk8s.io/v1alpha2 PolicyReport.
    Wgpolicyk8s,
    /// openreports.io/v1alpha1 Report.
    Openreports,
    /// Whichever the API server serves, openreports first (looked up again every 30 s).
    Auto,
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
    #[arg(long, value_enum, default_value_t = SourceArg::Files)]
    pub source: SourceArg,
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
    /// On SIGTERM/SIGINT, how long the webhook listener still accepts and connections are
    /// served as usual before the drain: the API server's view of the Service's endpoints lags,
    /// and a connection it just dialled would otherwise be closed before its first request.
    #[arg(long, default_value = "2s", env = "BOOKEND_SHUTDOWN_LINGER", value_name = "DURATION", value_parser = parse_duration)]
    pub shutdown_linger: Duration,
    /// The Pod backstop (`POST /validate-pods`): `enforce` refuses a TaskRun's Pod that lacks
    /// the steps bookend injects on its path; `warn` admits it with a warning and a log line
    /// (to roll the backstop out).
    #[arg(long, value_enum, default_value_t = PodBackstopArg::Enforce, value_name = "MODE")]
    pub pod_backstop: PodBackstopArg,
    /// How often the certificate, key, policy and task files are checked for changes.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub reload_interval: Duration,
    /// Kubernetes mode: post an Event on each admitted TaskRun (steps injected, a policy
    /// skipped). `--taskrun-events=false` turns them off; Events on policies stay.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "BOOKEND_TASKRUN_EVENTS")]
    pub taskrun_events: bool,
    /// Kubernetes mode: write Audit policies' results to a report per namespace, when the
    /// report CRD is installed (--policy-report-api).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "BOOKEND_POLICY_REPORTS")]
    pub policy_reports: bool,
    /// Which API carries the reports: wgpolicyk8s.io/v1alpha2 PolicyReports, openreports.io/v1alpha1
    /// Reports, or auto (whichever is served, openreports first).
    #[arg(long, value_enum, default_value_t = ReportApiArg::Auto, value_name = "API")]
    pub policy_report_api: ReportApiArg,
    /// Kubernetes mode: watch the TaskRuns bookend injected into (label bookend.dev/verify) and,
    /// when each finishes, verify that its org steps ran: an Event, a PolicyReport result per
    /// policy, metrics, and the bookend.dev/verified mark. Needs list/watch/patch on taskruns.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "BOOKEND_VERIFY_RUNS")]
    pub verify_runs: bool,
    /// Kubernetes mode, with --verify-runs: how far back each policy's status.verification
    /// counts the verdicts (from the marks on the TaskRuns that still exist).
    #[arg(long, default_value = "24h", env = "BOOKEND_VERIFICATION_WINDOW", value_name = "DURATION", value_parser = parse_verification_window)]
    pub verification_window: Duration,
    /// How often the policies' status.verification is counted (one metadata-only list of the
    /// marked TaskRuns per replica and period).
    #[arg(long, default_value = "5m", env = "BOOKEND_VERIFICATION_COUNT_INTERVAL", value_name = "DURATION", value_parser = parse_count_interval)]
    pub verification_count_interval: Duration,
    /// Results kept in each namespace's PolicyReport (the newest; at most 1000).
    #[arg(long, value_name = "N", default_value_t = crate::reports::DEFAULT_LIMIT, value_parser = parse_report_limit)]
    pub policy_report_max_results: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_report_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n @ 1..=crate::reports::MAX_LIMIT) => Ok(n),
        _ => Err(format!(
            "{text:?} is not a number from 1 to {}",
            crate::reports::MAX_LIMIT
        )),
    }
}

/// A window of whole seconds, from a minute to 90 days.
fn parse_verification_window(text: &str) -> Result<Duration, String> {
    whole_seconds(
        text,
        Duration::from_secs(60),
        Duration::from_secs(90 * 86_400),
    )
}

/// A period of whole seconds, from one second to a day.
fn parse_count_interval(text: &str) -> Result<Duration, String> {
    whole_seconds(text, Duration::from_secs(1), Duration::from_secs(86_400))
}

fn whole_seconds(text: &str, min: Duration, max: Duration) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.subsec_nanos() != 0 || d < min || d > max {
        return Err(format!(
            "{text:?} must be whole seconds from {}s to {}s",
            min.as_secs(),
            max.as_secs()
        ));
    }
    Ok(d)
}

/// Durations as Kubernetes and Go write them — `500ms`, `5s`, `1m30s`, `2h` — parsed by
/// humantime (which also reads `1min 30s`); a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration such as 500ms, 5s, 1m30s or 2h: {e}"))
}

/// A flag whose file cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {}: cannot read: {source}", path.display())]
pub struct Unreadable {
    flag: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

impl ServeArgs {
    /// The server's configuration; certificate, key and client CA must be readable.
    pub fn config(&self) -> Result<Config, StartError> {
        let readable = |flag, path: &Path| {
            std::fs::File::open(path)
                .map(drop)
                .map_err(|source| Unreadable {
                    flag,
                    path: path.to_owned(),
                    source,
                })
        };
        readable("--tls-cert", &self.tls_cert)?;
        readable("--tls-key", &self.tls_key)?;
        if let Some(ca) = &self.client_ca {
            readable("--client-ca", ca)?;
        }
        Ok(Config {
            source: match self.source {
                SourceArg::Files => PolicySourceConfig::Files {
                    policies: self.policies.clone(),
                    tasks: self.tasks.clone(),
                },
                SourceArg::Kubernetes => PolicySourceConfig::Kubernetes(crate::events::Options {
                    taskrun_events: self.taskrun_events,
                    policy_reports: self.policy_reports,
                    report_limit: self.policy_report_max_results,
                    report_api: match self.policy_report_api {
                        ReportApiArg::Wgpolicyk8s => crate::reports::ReportApiChoice::WgPolicyK8s,
                        ReportApiArg::Openreports => crate::reports::ReportApiChoice::OpenReports,
                        ReportApiArg::Auto => crate::reports::ReportApiChoice::Auto,
                    },
                    verify_runs: self.verify_runs,
                    verification_counts: crate::engine::verdict_counts::CountOptions {
                        window: self.verification_window,
                        interval: self.verification_count_interval,
                    },
                }),
            },
            settings: self.engine.settings()?,
            tls: TlsFiles {
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
                client_ca: self.client_ca.clone(),
            },
            listen: self.listen,
            admin_listen: self.admin_listen,
            header_read_timeout: self.header_read_timeout,
            request_timeout: self.request_timeout,
            drain_timeout: self.drain_timeout,
            shutdown_linger: self.shutdown_linger,
            reload_interval: self.reload_interval.max(Duration::from_millis(50)),
            pod_backstop: match self.pod_backstop {
                PodBackstopArg::Enforce => PodBackstop::Enforce,
                PodBackstopArg::Warn => PodBackstop::Warn,
            },
        })
    }
}

/// When `--tls-cert` and `--tls-key` are the defaults and both files are missing, writes a
/// development CA and serving pair into `certs/` (for localhost, 127.0.0.1, ::1 and the
/// listen address). Returns the CA path when it did.
fn ensure_dev_certificate(args: &ServeArgs) -> Result<Option<PathBuf>, crate::certs::CertsError> {
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

/// Why `serve` could not start: each message names the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot generate the development certificate: {0}")]
    DevCertificate(#[from] crate::certs::CertsError),
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    #[error(transparent)]
    Tekton(#[from] super::BadTektonArgs),
    #[error(transparent)]
    Server(#[from] server::Error),
}

async fn start(args: &ServeArgs) -> Result<(), StartError> {
    if let Some(ca) = ensure_dev_certificate(args)? {
        tracing::info!(
            ca = %ca.display(),
            cert = %args.tls_cert.display(),
            key = %args.tls_key.display(),
            "no certificate at the default paths: generated a development CA and serving certificate (trust the CA to call the webhook)"
        );
    }
    server::run(args.config()?).await?;
    Ok(())
}

/// Exit 0 after a clean shutdown, 2 when the server cannot start.
pub(super) fn run(args: &ServeArgs) -> u8 {
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
            return exit::USAGE;
        }
    };
    let code = match runtime.block_on(start(args)) {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("error: {e}");
            exit::USAGE
        }
    };
    // Connection tasks past the drain timeout are dropped here.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_mode_writes_events_and_reports_unless_told_not_to() {
        use clap::Parser;
        let parse = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(
                [&["bookend", "serve", "--source", "kubernetes"][..], args].concat(),
            )
            .unwrap();
            let crate::cli::Command::Serve(serve) = cli.command else {
                panic!("serve")
            };
            serve
        };
        let default = parse(&[]);
        assert!(default.taskrun_events && default.policy_reports && default.verify_runs);
        assert_eq!(default.policy_report_max_results, 200);
        assert_eq!(default.policy_report_api, ReportApiArg::Auto);
        for (text, api) in [
            ("wgpolicyk8s", ReportApiArg::Wgpolicyk8s),
            ("openreports", ReportApiArg::Openreports),
            ("auto", ReportApiArg::Auto),
        ] {
            let flag = format!("--policy-report-api={text}");
            assert_eq!(parse(&[&flag]).policy_report_api, api);
        }
        let off = parse(&[
            "--taskrun-events=false",
            "--policy-reports=false",
            "--policy-report-max-results=50",
            "--verify-runs=false",
        ]);
        assert!(!off.taskrun_events && !off.policy_reports && !off.verify_runs);
        assert_eq!(
            (
                default.verification_window,
                default.verification_count_interval
            ),
            (Duration::from_secs(86_400), Duration::from_secs(300))
        );
        let counted = parse(&[
            "--verification-window=7d",
            "--verification-count-interval=30s",
        ]);
        assert_eq!(
            (
                counted.verification_window,
                counted.verification_count_interval
            ),
            (Duration::from_secs(7 * 86_400), Duration::from_secs(30))
        );
        for bad in [
            "--verification-window=10s",
            "--verification-window=90500ms",
            "--verification-count-interval=0s",
            "--verification-count-interval=500ms",
            "--verification-window=200d",
        ] {
            let err = crate::cli::Cli::try_parse_from(["bookend", "serve", bad]).unwrap_err();
            assert!(err.to_string().contains("whole seconds"), "{bad}: {err}");
        }
        assert_eq!(off.policy_report_max_results, 50);
        assert!(
            crate::cli::Cli::try_parse_from([
                "bookend",
                "serve",
                "--policy-report-max-results=5000"
            ])
            .is_err()
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
