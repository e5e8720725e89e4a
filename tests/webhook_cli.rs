//! `bookend serve` and `bookend certs` as processes: the dev certificate on first run, a real
//! request, SIGTERM → exit 0, and the startup errors that name the flag.

mod webhook_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use webhook_support::*;

fn bookend() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bookend"))
}

#[tokio::test]
async fn serve_generates_a_dev_certificate_serves_and_exits_0_on_sigterm() {
    install_crypto();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(policies.join("p.yaml"), POLICY).unwrap();
    let mut child = bookend()
        .current_dir(dir.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--policies")
        .arg(&policies)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Read the log until the "serving" line, which names the bound addresses.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    let webhook = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no 'serving' line in {log:#?}"));
        log.push(line.clone());
        if let Some(rest) = line.split("webhook=https://").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    assert!(
        log.iter()
            .any(|l| l.contains("generated a development CA and serving certificate")),
        "{log:#?}"
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

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0));
    while let Ok(line) = rx.try_recv() {
        eprintln!("{line}");
    }

    // A second start reuses the pair (no new CA).
    let before = std::fs::read(dir.path().join("certs/ca.crt")).unwrap();
    let out = bookend()
        .current_dir(dir.path())
        .args(["serve", "--source", "kubernetes"])
        .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        std::fs::read(dir.path().join("certs/ca.crt")).unwrap(),
        before
    );
}

#[test]
fn startup_errors_name_the_flag_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = bookend()
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let out = bookend()
        .current_dir(dir.path())
        .args(["serve", "--source", "kubernetes"])
        .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("--source kubernetes: cannot reach the Kubernetes API"),
        "{err}"
    );

    let (code, err) = run(&[
        "serve",
        "--tls-cert",
        "missing.crt",
        "--tls-key",
        "missing.key",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--tls-cert missing.crt: cannot read"), "{err}");

    // Explicit paths are never generated.
    assert!(!Path::new(&dir.path().join("missing.crt")).exists());

    let written =
        bookend::certs::generate(&dir.path().join("c"), &["localhost".into()], 1).unwrap();
    let policies = dir.path().join("bad.yaml");
    std::fs::write(&policies, POLICY.replace("image:", "imagee:")).unwrap();
    let (code, err) = run(&[
        "serve",
        "--tls-cert",
        written.tls_cert.to_str().unwrap(),
        "--tls-key",
        written.tls_key.to_str().unwrap(),
        "--policies",
        policies.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--policies: the policies are invalid"),
        "{err}"
    );
    // The first unknown field is named (postSteps or preSteps: both have one).
    assert!(err.contains("Steps[0].imagee"), "{err}");

    // A key that does not belong to the certificate.
    let other = bookend::certs::generate(&dir.path().join("d"), &["localhost".into()], 1).unwrap();
    let (code, err) = run(&[
        "serve",
        "--tls-cert",
        written.tls_cert.to_str().unwrap(),
        "--tls-key",
        other.tls_key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
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

    let out = bookend()
        .args(["certs", "--out-dir"])
        .arg(&out_dir)
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
    let mut child = bookend()
        .current_dir(dir.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--header-read-timeout", "2m", "--drain-timeout", "2m"])
        .arg("--policies")
        .arg(&policies)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |needle: &str| -> String {
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("no log line with {needle:?}"));
            if line.contains(needle) {
                return line;
            }
        }
    };
    let serving = wait_for("webhook=https://");
    let addr = serving
        .split("webhook=https://")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let admin = serving
        .split("admin=http://")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
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
    let term = || {
        assert!(
            Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap()
                .success()
        )
    };
    term();
    let draining = wait_for("shutting down");
    assert!(draining.contains("drain_timeout=120s"), "{draining}");
    let line = wait_for("draining open connections");
    assert!(line.contains("connections=1"), "{line}");
    let started = std::time::Instant::now();
    term();
    let deadline = started + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit after the second SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
}
