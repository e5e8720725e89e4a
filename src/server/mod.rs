//! The HTTPS admission webhook and the plain-HTTP admin endpoints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::cli::EngineArgs;

/// Where policies (and Tasks, namespaces) come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// Policy files and directories (`--policies`), reloaded when they change.
    Files,
    /// ClusterStepPolicy/StepPolicy objects from the API server (in-cluster or KUBECONFIG).
    Kubernetes,
}

/// `bookend serve` options.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Policy file or directory (repeatable; files mode).
    #[arg(long, default_value = "examples/policies")]
    pub policies: Vec<PathBuf>,
    /// Serving certificate (PEM). With the default paths missing, a dev pair is generated.
    #[arg(long, default_value = "certs/tls.crt")]
    pub tls_cert: PathBuf,
    /// Serving key (PEM).
    #[arg(long, default_value = "certs/tls.key")]
    pub tls_key: PathBuf,
    /// Webhook (HTTPS) listen address.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Admin (HTTP: /livez, /readyz, /metrics) listen address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub admin_listen: SocketAddr,
    /// Where policies come from.
    #[arg(long, value_enum, default_value_t = Source::Files)]
    pub source: Source,
    /// Task, StepAction and Namespace objects for resolving refs (files mode; repeatable).
    #[arg(long)]
    pub tasks: Vec<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Runs `bookend serve`.
pub fn main(_args: ServeArgs) -> ExitCode {
    eprintln!("bookend serve: not built yet");
    ExitCode::from(2)
}
