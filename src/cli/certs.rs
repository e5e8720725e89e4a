//! `bookend certs`: write a development CA and serving certificate.

use std::path::PathBuf;

use clap::Args;

use super::exit;

/// `bookend certs` options.
#[derive(Args, Debug, Clone)]
pub struct CertsArgs {
    /// Directory for ca.crt, ca.key, tls.crt, tls.key and ca.crt.b64 (created if missing).
    #[arg(long, default_value = "certs")]
    pub out_dir: PathBuf,
    /// DNS name or IP address for the serving certificate (repeatable), e.g.
    /// `bookend.bookend.svc` or `127.0.0.1`.
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
    /// Validity of the serving certificate, in days (the CA gets ten times as long).
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Replace a CA already in the output directory (every certificate it signed, and every
    /// webhook configuration whose caBundle holds it, stops being trusted).
    #[arg(long)]
    pub force: bool,
}

pub(super) fn run(args: &CertsArgs) -> u8 {
    let existing = ["ca.crt", "ca.key"]
        .map(|f| args.out_dir.join(f))
        .into_iter()
        .find(|p| p.exists());
    if let (Some(path), false) = (existing, args.force) {
        eprintln!(
            "error: {} exists; a new CA would leave the certificates it signed and the caBundle of every webhook configuration that trusts it behind. Pass --force to replace it, or --out-dir for another directory",
            path.display()
        );
        return exit::USAGE;
    }
    match crate::certs::generate(&args.out_dir, &args.hosts, args.days) {
        Ok(written) => {
            for path in written.paths() {
                println!("wrote {}", path.display());
            }
            println!(
                "serving certificate for {} (valid {} days), signed by {}",
                args.hosts.join(", "),
                args.days,
                written.ca_cert.display()
            );
            println!(
                "caBundle for a webhook configuration: the contents of {}",
                written.ca_bundle_b64.display()
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::USAGE
        }
    }
}
