//! `bookend certs`: a development CA and a serving certificate.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// `bookend certs` options.
#[derive(Args, Debug, Clone)]
pub struct CertsArgs {
    /// Directory for ca.crt, tls.crt and tls.key.
    #[arg(long, default_value = "certs")]
    pub out_dir: PathBuf,
    /// DNS name or IP address for the serving certificate (repeatable).
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
}

/// Runs `bookend certs`.
pub fn main(_args: &CertsArgs) -> ExitCode {
    eprintln!("bookend certs: not built yet");
    ExitCode::from(2)
}
