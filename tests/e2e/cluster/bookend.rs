//! `bookend serve --source kubernetes` as the scenarios run it: started on loopback, ready,
//! its admin port, the certificate a handshake gets, stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::kube::{free_port, poll, run, tail, terminate};

pub(super) fn bookend_bin() -> PathBuf {
    std::env::var_os("BOOKEND_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bookend")))
}

/// `bookend serve --source kubernetes`; SIGTERM (then SIGKILL) on drop.
pub(super) struct Bookend {
    child: Child,
    pub(super) log: PathBuf,
    pub(super) port: u16,
    admin: u16,
}

impl Bookend {
    /// `port`: the webhook port, chosen before the chart is installed (webhook.url names it).
    pub(super) fn start(
        work: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        kubeconfig: &Path,
    ) -> Self {
        Self::start_bin(&bookend_bin(), work, port, cert, key, kubeconfig)
    }

    /// `start`, counting the policies' verdicts (`status.verification`) every `interval`
    /// instead of once at the start (the other scenarios' status stays still).
    pub(super) fn start_counting(
        work: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        kubeconfig: &Path,
        interval: &str,
    ) -> Self {
        Self::start_with(&bookend_bin(), work, port, cert, key, kubeconfig, interval)
    }

    /// `start` with another bookend binary (the previous release, for the upgrade test).
    pub(super) fn start_bin(
        bin: &Path,
        work: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        kubeconfig: &Path,
    ) -> Self {
        Self::start_with(bin, work, port, cert, key, kubeconfig, "1d")
    }

    fn start_with(
        bin: &Path,
        work: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        kubeconfig: &Path,
        count_interval: &str,
    ) -> Self {
        let mut admin = free_port();
        while admin == port {
            admin = free_port();
        }
        let log = work.join("bookend.log");
        let file = std::fs::File::create(&log).expect("create bookend.log");
        let mut cmd = Command::new(bin);
        cmd.args(["serve", "--source", "kubernetes"]);
        let child = cmd
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{admin}"))
            .env("KUBECONFIG", kubeconfig)
            // The first count is at the start; the next at midnight UTC unless told otherwise.
            .env("BOOKEND_VERIFICATION_COUNT_INTERVAL", count_interval)
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .expect("spawn bookend serve");
        Self {
            child,
            log,
            port,
            admin,
        }
    }

    /// GET on the admin port: (status, body).
    pub(super) fn admin_get(&self, path: &str) -> Result<(u16, String), String> {
        crate::common::http_get("127.0.0.1", self.admin, path, &[], Duration::from_secs(5))
    }

    pub(super) fn wait_ready(&mut self, timeout: Duration) {
        poll("bookend /readyz", timeout, || {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                panic!(
                    "bookend serve exited ({status}) before /readyz:\n{}",
                    tail(&self.log, 40)
                );
            }
            match self.admin_get("/readyz") {
                Ok((200, _)) => Ok(()),
                Ok((code, body)) => Err(format!("{code} {body}")),
                Err(e) => Err(e),
            }
        })
    }

    /// Serial (upper-case hex, as `openssl x509 -serial` prints it) of the certificate a new
    /// TLS handshake gets, verified against `ca`.
    pub(super) fn served_serial(&self, ca: &Path) -> Result<String, String> {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("-CAfile")
            .arg(ca)
            .args(["-verify_return_error", "-verify_ip", "127.0.0.1"]);
        let out = run(cmd, Some(b""));
        if !out.ok() || !out.stdout.contains("Verify return code: 0 (ok)") {
            return Err(format!("handshake: {} {}", out.status, out.stderr.trim()));
        }
        let pem = out
            .stdout
            .find("-----BEGIN CERTIFICATE-----")
            .and_then(|b| {
                let end = out.stdout[b..].find("-----END CERTIFICATE-----")?;
                Some(&out.stdout[b..b + end + "-----END CERTIFICATE-----".len()])
            })
            .ok_or("no certificate in s_client output")?;
        let mut cmd = Command::new("openssl");
        cmd.args(["x509", "-noout", "-serial"]);
        let out = run(cmd, Some(pem.as_bytes()));
        out.stdout
            .trim()
            .strip_prefix("serial=")
            .map(str::to_owned)
            .ok_or_else(|| format!("openssl x509 -serial: {}", out.stderr))
    }
}

impl Drop for Bookend {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- bookend log (tail)\n{}", tail(&self.log, 40));
        }
        self.stop();
    }
}

impl Bookend {
    /// SIGTERM, then SIGKILL after 10 s; a no-op once it has exited.
    pub(super) fn stop(&mut self) {
        terminate(&mut self.child, "bookend serve", Duration::from_secs(10));
    }
}
