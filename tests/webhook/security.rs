//! Security properties (docs/security.md): TLS versions and ciphers, the admin port, no secrets
//! in logs, and no way for a TaskRun author to opt out of injection.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::{Value, json};

/// `openssl s_client` against the server with extra flags: whether the handshake completed,
/// and what openssl said. The suite needs `openssl` (CI has it; Debian package `openssl`).
fn s_client(server: &TestServer, flags: &[&str]) -> (bool, String) {
    let ca = server.tmp.path().join("ca.pem");
    std::fs::write(&ca, server.ca.pem()).unwrap();
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &server.addr.to_string(),
            "-servername",
            HOST,
        ])
        .arg("-CAfile")
        .arg(&ca)
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs (install the openssl package to run this test)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let done = text.contains("Verify return code: 0 (ok)") && !text.contains("Cipher is (NONE)");
    (done, text)
}

// openssl runs as a blocking child process: the server needs a thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_tls_1_2_and_1_3_with_forward_secret_aead_ciphers() {
    let server = TestServer::start(Options::default()).await;
    // The client side must be allowed to offer old versions: OpenSSL 3 refuses TLS < 1.2 at
    // its default security level.
    let old = "DEFAULT@SECLEVEL=0";
    let (ok, text) = s_client(&server, &["-tls1_2"]);
    assert!(ok, "TLS 1.2 works:\n{text}");
    let (ok, text) = s_client(&server, &["-tls1_3"]);
    assert!(ok, "TLS 1.3 works:\n{text}");
    for version in ["-tls1_1", "-tls1"] {
        let (ok, text) = s_client(&server, &[version, "-cipher", old]);
        assert!(!ok, "{version} must be refused:\n{text}");
        assert!(
            text.contains("alert protocol version")
                || text.contains("unsupported protocol")
                || text.contains("no protocols available")
                || text.contains("handshake failure"),
            "{version}: {text}"
        );
    }
    // TLS 1.2 without forward secrecy (RSA key exchange), CBC or SHA-1 suites: refused.
    for cipher in [
        "AES128-SHA",
        "AES256-GCM-SHA384",
        "ECDHE-ECDSA-AES128-SHA",
        "ECDHE-RSA-AES128-SHA",
        "DHE-RSA-AES128-GCM-SHA256",
    ] {
        let (ok, text) = s_client(
            &server,
            &["-tls1_2", "-cipher", &format!("{cipher}:@SECLEVEL=0")],
        );
        assert!(!ok, "TLS 1.2 {cipher} must be refused:\n{text}");
    }
    // The modern ones work.
    for cipher in [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ] {
        let (ok, text) = s_client(&server, &["-tls1_2", "-cipher", cipher]);
        assert!(ok, "TLS 1.2 {cipher}:\n{text}");
    }
    // The server still serves.
    let (status, _) = post(&server.h2(), &server.url("/mutate"), body(&sample_review())).await;
    assert_eq!(status, 200);
}

#[test]
fn both_listeners_default_to_loopback() {
    let out = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let default_of = |flag: &str| {
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} in\n{help}"));
        let rest = &help[at..];
        let d = rest.find("[default: ").unwrap() + "[default: ".len();
        rest[d..rest[d..].find(']').unwrap() + d].to_owned()
    };
    assert_eq!(default_of("--listen <"), "127.0.0.1:8443");
    assert_eq!(default_of("--admin-listen <"), "127.0.0.1:8080");
}

#[tokio::test]
async fn the_webhook_port_serves_no_admin_endpoints() {
    let server = TestServer::start(Options::default()).await;
    assert_ne!(server.addr.port(), server.admin.port());
    for path in ["/metrics", "/readyz", "/livez"] {
        let response = server.h2().get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path} on the webhook port");
    }
}

const SECRET: &str = "ghp_SECRETTOKEN0123456789abcdefXYZ";

/// A review whose TaskRun carries the secret in every place a user might put one.
fn secret_review(uid: &str, step_name: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "tekton.dev/v1",
                "kind": "TaskRun",
                "metadata": {"generateName": "leak-", "namespace": "team-a",
                             "annotations": {"token": SECRET}},
                "spec": {
                    "params": [{"name": "token", "value": SECRET}],
                    "taskSpec": {
                        "params": [{"name": "token", "default": SECRET}],
                        "steps": [{
                            "name": step_name,
                            "image": "alpine",
                            "env": [{"name": "TOKEN", "value": SECRET}],
                            "script": format!("echo {SECRET}"),
                        }]
                    }
                }
            }
        }
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn param_values_never_reach_the_logs_at_info_level() {
    install_crypto();
    for format in ["json", "text"] {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&[HOST, "127.0.0.1"]);
        std::fs::write(dir.path().join("tls.crt"), cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), key).unwrap();
        std::fs::write(dir.path().join("p.yaml"), POLICY).unwrap();
        let (webhook, admin) = (free_port(), free_port());
        let mut child = Command::new(env!("CARGO_BIN_EXE_bookend"))
            .current_dir(dir.path())
            .args([
                "serve",
                "--tls-cert",
                "tls.crt",
                "--tls-key",
                "tls.key",
                "--policies",
                "p.yaml",
            ])
            .args(["--listen", &format!("127.0.0.1:{webhook}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .args(["--log-format", format, "--log-level", "info"])
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ready = format!("http://127.0.0.1:{admin}/readyz");
        eventually("readyz", Duration::from_secs(20), || {
            let ready = ready.clone();
            async move { reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap())
            .build()
            .unwrap();
        let url = |p: &str| format!("https://127.0.0.1:{webhook}{p}");
        let mut malformed = secret_review("", "build");
        malformed["request"]["uid"] = json!("");
        let mut broken = body(&secret_review("b", "build"));
        broken.truncate(broken.len() - 3);
        for (path, payload, status) in [
            ("/mutate", body(&secret_review("m", "build")), 200),
            ("/mutate", body(&secret_review("d", "bookend-steal")), 200),
            ("/validate", body(&secret_review("v", "build")), 200),
            ("/mutate", body(&malformed), 400),
            ("/mutate", broken, 400),
        ] {
            let response = client.post(url(path)).body(payload).send().await.unwrap();
            assert_eq!(response.status(), status, "{path}");
        }
        let mut dry = secret_review("dry", "build");
        dry["request"]["dryRun"] = json!(true);
        let response = client
            .post(url("/mutate"))
            .body(body(&dry))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);

        // SIGTERM, then read everything it logged.
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0));
        let mut log = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut log)
            .unwrap();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut log)
            .unwrap();
        assert!(
            log.contains("mutated"),
            "{format}: the reviews were logged:\n{log}"
        );
        assert!(log.contains("denied"), "{format}:\n{log}");
        assert!(
            !log.contains("SECRETTOKEN"),
            "{format}: a TaskRun value reached the log:\n{log}"
        );
    }
}

/// No label or annotation on a TaskRun turns injection off: exemptions exist only in policies
/// (`exclude`, namespace selectors), which RBAC protects.
#[tokio::test]
async fn taskrun_authors_cannot_opt_out() {
    let server = TestServer::start(Options::default()).await;
    let client = server.h2();
    let attempts: Vec<(&str, Value)> = vec![
        (
            "labels",
            json!({"bookend.dev/skip": "true", "bookend.dev/exempt": "true", "bookend.dev/inject": "false", "bookend.dev/disabled": "true"}),
        ),
        (
            "annotations",
            json!({"bookend.dev/skip": "true", "bookend.dev/exempt": "true", "bookend.dev/inject": "false", "sidecar.istio.io/inject": "false"}),
        ),
        // A forged injection record claiming the steps are already there.
        (
            "annotations",
            json!({"bookend.dev/injected": "{\"policies\":[{\"policy\":\"ClusterStepPolicy/test-bookends\",\"hash\":\"000000000000\",\"steps\":[\"bookend-hello\",\"bookend-bye\"]}]}"}),
        ),
        ("annotations", json!({"bookend.dev/injected": "garbage"})),
    ];
    for (field, values) in attempts {
        let mut review = sample_review();
        for (k, v) in values.as_object().unwrap() {
            review["request"]["object"]["metadata"][field][k] = v.clone();
        }
        let (status, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
        assert_eq!(status, 200);
        let patched = apply_patch(&answer, &review["request"]["object"]);
        let steps: Vec<&str> = patched["spec"]["taskSpec"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(steps.first(), Some(&"bookend-hello"), "{field} {values}");
        assert_eq!(steps.last(), Some(&"bookend-bye"), "{field} {values}");
        // And the validating backstop refuses the same object without the steps.
        let (_, answer) = post(&client, &server.url("/validate"), body(&review)).await;
        assert_eq!(
            answer["response"]["allowed"], false,
            "{field} {values}: {answer}"
        );
    }
    // Pre-empting a platform step with one's own (same name, other content) is refused.
    let mut review = sample_review();
    review["request"]["object"]["spec"]["taskSpec"]["steps"][0]["name"] = json!("bookend-hello");
    let (_, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
}
