//! `bookend serve` and `bookend certs` as processes: the dev certificate on first run, a real
//! request, SIGTERM → exit 0, and the startup errors that name the flag.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::support::*;

fn bookend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bookend"))
}

/// `bookend serve --source kubernetes` where no cluster can be reached: it must exit 2.
fn serve_without_a_cluster(dir: &Path) -> Output {
    bookend()
        .current_dir(dir)
        .args(["serve", "--source", "kubernetes"])
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap()
}

/// A `bookend serve` process on port 0 (webhook and admin), its log read line by line.
struct Serve {
    child: Child,
    lines: Receiver<String>,
    /// Every log line read so far, for failure messages.
    log: Vec<String>,
}

impl Serve {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let mut child = bookend()
            .current_dir(dir)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A thread reads stderr so that the process never blocks on a full pipe.
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// The next log line containing `needle`; panics after 60 s without one (a liveness bound,
    /// not a speed check: in a full run of this suite on 2 cores one wait once passed 20 s).
    fn wait_for(&mut self, needle: &str) -> String {
        loop {
            let Ok(line) = self.lines.recv_timeout(Duration::from_secs(60)) else {
                panic!("no log line with {needle:?} in {:#?}", self.log);
            };
            self.log.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    fn sigterm(&self) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
    }

    /// The exit status, which must come within `within`; `after` names what should end it.
    /// Polls with an async sleep: the test's own HTTP client must keep running meanwhile, to
    /// close its keep-alive connection when the server drains.
    async fn exit_status(&mut self, within: Duration, after: &str) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit after {after}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The address after `key` in the "serving" log line (`webhook=https://` or `admin=http://`).
fn address(serving: &str, key: &str) -> String {
    let rest = serving
        .split(key)
        .nth(1)
        .unwrap_or_else(|| panic!("no {key} in {serving:?}"));
    rest.split_whitespace().next().unwrap().to_owned()
}

#[tokio::test]
async fn serve_generates_a_dev_certificate_serves_and_exits_0_on_sigterm() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("p.yaml"), POLICY).unwrap();
    let mut serve = Serve::start(dir.path(), &["--policies", policies.to_str().unwrap()]);

    // Read the log until the "serving" line, which names the bound addresses.
    let webhook = address(&serve.wait_for("webhook=https://"), "webhook=https://");
    assert!(
        serve
            .log
            .iter()
            .any(|l| l.contains("generated a development CA and serving certificate")),
        "{:#?}",
        serve.log
    );
    for file in ["ca.crt", "ca.key", "tls.crt", "tls.key", "ca.crt.b64"] {
        assert!(dir.path().join("certs").join(file).exists(), "certs/{file}");
    }

    let ca = std::fs::read(dir.path().join("certs/ca.crt")).unwrap();
    let client = reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .build()
        .unwrap();
    let (status, answer) = post(
        &client,
        &format!("https://{webhook}/mutate"),
        SAMPLE.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch");

    serve.sigterm();
    let status = serve.exit_status(Duration::from_secs(20), "SIGTERM").await;
    assert_eq!(status.code(), Some(0));
    while let Ok(line) = serve.lines.try_recv() {
        eprintln!("{line}");
    }

    // A second start reuses the pair (no new CA).
    let before = std::fs::read(dir.path().join("certs/ca.crt")).unwrap();
    let out = serve_without_a_cluster(dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read(dir.path().join("certs/ca.crt")).unwrap(),
        before
    );
}

#[test]
fn startup_errors_name_the_flag_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    // `bookend serve` with this certificate and key (and `more`) must exit 2; returns its stderr.
    let refused = |cert: &str, key: &str, more: &[&str]| {
        let out = bookend()
            .current_dir(dir.path())
            .args(["serve", "--tls-cert", cert, "--tls-key", key])
            .args(more)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{err}");
        err
    };
    let out = serve_without_a_cluster(dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("--source kubernetes: cannot reach the Kubernetes API"),
        "{err}"
    );

    let err = refused("missing.crt", "missing.key", &[]);
    assert!(err.contains("--tls-cert missing.crt: cannot read"), "{err}");

    // Explicit paths are never generated.
    assert!(!Path::new(&dir.path().join("missing.crt")).exists());

    let written =
        bookend::certs::generate(&dir.path().join("c"), &["localhost".into()], 1).unwrap();
    let policies = dir.path().join("bad.yaml");
    std::fs::write(&policies, POLICY.replace("image:", "imagee:")).unwrap();
    let err = refused(
        written.tls_cert.to_str().unwrap(),
        written.tls_key.to_str().unwrap(),
        &["--policies", policies.to_str().unwrap()],
    );
    assert!(
        err.contains("--policies: the policies are invalid"),
        "{err}"
    );
    // The first unknown field is named (postSteps or preSteps: both have one).
    assert!(err.contains("Steps[0].imagee"), "{err}");

    // A key that does not belong to the certificate.
    let other = bookend::certs::generate(&dir.path().join("d"), &["localhost".into()], 1).unwrap();
    let err = refused(
        written.tls_cert.to_str().unwrap(),
        other.tls_key.to_str().unwrap(),
        &[],
    );
    assert!(
        err.contains("--tls-cert") && err.contains("--tls-key"),
        "{err}"
    );
}

#[test]
fn certs_writes_the_files_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = bookend()
        .args(["certs", "--out-dir"])
        .arg(&out_dir)
        .args(["--host", "bookend.bookend.svc", "--host", "10.0.0.7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for file in ["ca.crt", "ca.key", "tls.crt", "tls.key", "ca.crt.b64"] {
        assert!(out_dir.join(file).exists(), "{file}");
        assert!(stdout.contains(file), "{stdout}");
    }
    let pem = std::fs::read(out_dir.join("tls.crt")).unwrap();
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(&pem).unwrap();
    let info = bookend::server::tls::cert_info(&der).unwrap();
    assert_eq!(info.sans, ["bookend.bookend.svc", "10.0.0.7"]);

    // An existing CA is kept unless --force says otherwise.
    let ca_before = std::fs::read(out_dir.join("ca.crt")).unwrap();
    let again = |extra: &[&str]| {
        bookend()
            .args(["certs", "--out-dir"])
            .arg(&out_dir)
            .args(["--host", "localhost"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = again(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ca.crt exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(out_dir.join("ca.crt")).unwrap(), ca_before);
    let out = again(&["--force"]);
    assert_eq!(out.status.code(), Some(0));
    assert_ne!(std::fs::read(out_dir.join("ca.crt")).unwrap(), ca_before);

    let out = bookend()
        .args(["certs", "--out-dir"])
        .arg(dir.path().join("fresh"))
        .args(["--host", "bad host!"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--host \"bad host!\""));
}

#[tokio::test]
async fn a_second_sigterm_during_the_drain_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("p.yaml");
    std::fs::write(&policies, POLICY).unwrap();
    let mut serve = Serve::start(
        dir.path(),
        &[
            "--header-read-timeout",
            "2m",
            "--drain-timeout",
            "2m",
            "--policies",
            policies.to_str().unwrap(),
        ],
    );
    let serving = serve.wait_for("webhook=https://");
    let addr = address(&serving, "webhook=https://");
    let admin = address(&serving, "admin=http://");
    // A connection that never completes its handshake keeps the drain waiting.
    let _silent = std::net::TcpStream::connect(&addr).unwrap();
    eventually(
        "the connection to be accepted",
        Duration::from_secs(10),
        || {
            let url = format!("http://{admin}/metrics");
            async move {
                match reqwest::get(url).await {
                    Ok(r) => {
                        metric_value(
                            &r.text().await.unwrap_or_default(),
                            "bookend_webhook_connections",
                        ) == 1.0
                    }
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    serve.sigterm();
    let draining = serve.wait_for("shutting down");
    assert!(draining.contains("drain_timeout=120s"), "{draining}");
    let line = serve.wait_for("draining open connections");
    assert!(line.contains("connections=1"), "{line}");
    serve.sigterm();
    let status = serve
        .exit_status(Duration::from_secs(10), "the second SIGTERM")
        .await;
    assert_eq!(status.code(), Some(0));
}
