//! The server over time: certificate rotation under load, policy reload with a broken file,
//! graceful shutdown with requests in flight, and slow clients.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::*;
use rustls_pki_types::pem::PemObject;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads one HTTP/1.1 response; returns status and body, or panics with what arrived.
async fn read_response(stream: &mut tokio_rustls::client::TlsStream<TcpStream>) -> (u16, Vec<u8>) {
    match read_http1(stream).await {
        Ok((status, _, body)) => (status, body),
        Err(partial) => {
            panic!("connection closed (or quiet 10 s) before a full response: {partial:?}")
        }
    }
}

/// Waits until the server's webhook listener refuses connections.
async fn listener_closed(server: &TestServer, within: Duration) {
    eventually("the listener to close", within, || async {
        TcpStream::connect(server.addr).await.is_err()
    })
    .await;
}

/// TLS over a TCP connection made earlier, then one request (`head` and `body`): its answer.
async fn request_over(
    server: &TestServer,
    tcp: TcpStream,
    head: &str,
    body: &[u8],
) -> (u16, Vec<u8>) {
    let mut stream = raw_tls_over(server, tcp).await;
    stream
        .write_all(&[head.as_bytes(), body].concat())
        .await
        .unwrap();
    read_response(&mut stream).await
}

/// Swaps in a certificate pair the server must refuse, and waits until it counts the refusal.
async fn rotate_to_refused(server: &TestServer, what: &str, files: &[(&str, &str)]) {
    const ERRORS: &str = r#"bookend_certificate_reloads_total{result="error"}"#;
    let errors_before = server.metric(ERRORS).await;
    server.secret.update(files);
    eventually(what, Duration::from_secs(10), || async {
        server.metric(ERRORS).await > errors_before
    })
    .await;
}

#[tokio::test]
async fn certificate_rotation_under_load_has_no_failed_request() {
    let server = Arc::new(TestServer::start(Options::default()).await);
    let review = body(&sample_review());

    let first = send(&server.h2(), &server.url("/mutate"), review.clone()).await;
    let old_serial = peer_serial(&first);

    // Load: one long-lived HTTP/2 connection and a stream of fresh HTTP/1.1 connections.
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for fresh in [false, true] {
        let (server, stop, ok, review) = (server.clone(), stop.clone(), ok.clone(), review.clone());
        workers.push(tokio::spawn(async move {
            let keep = server.h2();
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let client = if fresh {
                    server
                        .client()
                        .http1_only()
                        .pool_max_idle_per_host(0)
                        .build()
                        .unwrap()
                } else {
                    keep.clone()
                };
                match client
                    .post(server.url("/mutate"))
                    .body(review.clone())
                    .send()
                    .await
                {
                    Ok(r) if r.status() == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failures.push(format!("status {}", r.status())),
                    Err(e) => failures.push(format!("{e:?}")),
                }
            }
            failures
        }));
    }
    eventually("load to start", Duration::from_secs(10), || {
        let ok = ok.clone();
        async move { ok.load(Ordering::Relaxed) > 10 }
    })
    .await;

    // Rotate like the kubelet: new files in a new directory, `..data` swapped in one rename.
    let (cert, key) = server.ca.leaf(&[HOST, "rotated.bookend.test", "127.0.0.1"]);
    let ca = server.ca.pem();
    server
        .secret
        .update(&[("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &ca)]);
    let new_serial = bookend::server::tls::cert_info(
        &rustls_pki_types::CertificateDer::from_pem_slice(cert.as_bytes()).unwrap(),
    )
    .unwrap()
    .serial;
    assert_ne!(old_serial, new_serial);

    eventually(
        "a new handshake to see the new serial",
        Duration::from_secs(10),
        || {
            let server = server.clone();
            let review = review.clone();
            let new_serial = new_serial.clone();
            async move {
                let client = server.client().pool_max_idle_per_host(0).build().unwrap();
                match client.post(server.url("/mutate")).body(review).send().await {
                    Ok(r) => peer_serial(&r) == new_serial,
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    // The new name in the new certificate works.
    let rotated = server
        .client()
        .resolve("rotated.bookend.test", server.addr)
        .build()
        .unwrap();
    let response = rotated
        .post(format!(
            "https://rotated.bookend.test:{}/mutate",
            server.addr.port()
        ))
        .body(review.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // Keep the load running across the swap for a little longer, then stop.
    let before = ok.load(Ordering::Relaxed);
    eventually(
        "more requests after the swap",
        Duration::from_secs(10),
        || {
            let ok = ok.clone();
            async move { ok.load(Ordering::Relaxed) > before + 10 }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let failures = worker.await.unwrap();
        assert!(
            failures.is_empty(),
            "failed requests during rotation: {failures:?}"
        );
    }
    assert_eq!(
        server
            .metric(r#"bookend_certificate_reloads_total{result="success"}"#)
            .await,
        1.0
    );

    // A broken pair (key of another certificate) is refused; the rotated pair stays in use.
    let (_, other_key) = server.ca.leaf(&[HOST]);
    rotate_to_refused(
        &server,
        "the broken pair to be refused",
        &[("tls.crt", &cert), ("tls.key", &other_key), ("ca.crt", &ca)],
    )
    .await;
    let client = server.client().pool_max_idle_per_host(0).build().unwrap();
    let response = send(&client, &server.url("/mutate"), review.clone()).await;
    assert_eq!(response.status(), 200);
    assert_eq!(peer_serial(&response), new_serial);
    // Garbage is refused too.
    rotate_to_refused(
        &server,
        "garbage to be refused",
        &[
            ("tls.crt", "not a certificate"),
            ("tls.key", &key),
            ("ca.crt", &ca),
        ],
    )
    .await;
    let response = send(&client, &server.url("/mutate"), review).await;
    assert_eq!(peer_serial(&response), new_serial);
}

const SECOND_POLICY: &str = r#"apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata:
  name: test-second
spec:
  priority: 20
  preSteps:
    - name: bookend-second
      image: docker.io/library/busybox:1.37
      command: ["echo", "second"]
"#;

/// The reload counters, which policy and Task reloads share.
const RELOADS_OK: &str = r#"bookend_policy_reloads_total{result="success"}"#;
const RELOADS_FAILED: &str = r#"bookend_policy_reloads_total{result="error"}"#;

fn injected_steps(answer: &Value, object: &Value) -> Vec<String> {
    let mut names = step_names(&apply_patch(answer, object));
    names.retain(|n| n.starts_with("bookend-"));
    names
}

#[tokio::test]
async fn policy_reload_keeps_last_good_set_on_a_broken_file() {
    let server = TestServer::start(Options::default()).await;
    let review = sample_review();
    let object = &review["request"]["object"];
    let client = server.h2();

    // A broken file: the old set stays in use, the error is counted, /readyz stays green.
    server.write_policy(
        "20-broken.yaml",
        &SECOND_POLICY.replace("image:", "imagee:"),
    );
    server
        .wait_for_metric("the broken reload to be counted", RELOADS_FAILED, 1.0)
        .await;
    let (status, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
    assert_eq!(status, 200);
    assert_eq!(
        injected_steps(&answer, object),
        ["bookend-hello", "bookend-bye"]
    );
    assert_eq!(server.metric("bookend_policies_loaded").await, 1.0);
    let ready = reqwest::get(format!("http://{}/readyz", server.admin))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    // Fixed: the new set is swapped in.
    server.write_policy("20-broken.yaml", SECOND_POLICY);
    server
        .wait_for_metric("the fixed reload", RELOADS_OK, 1.0)
        .await;
    assert_eq!(server.metric("bookend_policies_loaded").await, 2.0);
    let (_, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
    assert_eq!(
        injected_steps(&answer, object),
        ["bookend-hello", "bookend-second", "bookend-bye"]
    );

    // Removing a file is a change too.
    std::fs::remove_file(server.policy_dir.join("20-broken.yaml")).unwrap();
    server
        .wait_for_metric("the removal reload", "bookend_policies_loaded", 1.0)
        .await;
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight() {
    let mut server = TestServer::start(Options::default()).await;
    let review = body(&sample_review());
    let split = review.len() / 2;

    // Three requests whose bodies are half sent.
    let head = json_request_head("POST", "/mutate?timeout=10s", review.len());
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(raw_tls_with(&server, &[head.as_bytes(), &review[..split]].concat()).await);
    }
    server
        .wait_for_metric(
            "three requests in flight",
            "bookend_admission_in_flight",
            3.0,
        )
        .await;

    server.trigger_shutdown();
    // Not ready any more while draining (the admin port stays up until the drain ends).
    eventually("/readyz to turn 503", Duration::from_secs(10), || async {
        reqwest::get(format!("http://{}/readyz", server.admin))
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    // No new connections.
    listener_closed(&server, Duration::from_secs(10)).await;

    for mut stream in streams {
        stream.write_all(&review[split..]).await.unwrap();
        stream.flush().await.unwrap();
        let (status, body) = read_response(&mut stream).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
    }
    let handle = server.handle.take().unwrap();
    tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("run returns after the drain")
        .unwrap();
}

#[tokio::test]
async fn connections_dialled_around_the_stop_are_served_during_the_linger() {
    let mut server = TestServer::start(Options {
        shutdown_linger: Duration::from_secs(5),
        ..Options::default()
    })
    .await;
    let review = body(&sample_review());
    let head = json_request_head("POST", "/mutate?timeout=10s", review.len());

    // The API server dialled this replica just before its stop (its view of the Service's
    // endpoints lags): the TCP connection exists, the TLS handshake and the request come after.
    let early = TcpStream::connect(server.addr).await.unwrap();
    server.trigger_shutdown();
    eventually("/readyz to turn 503", Duration::from_secs(10), || async {
        reqwest::get(format!("http://{}/readyz", server.admin))
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    let (status, body) = request_over(&server, early, &head, &review).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["response"]["patchType"], "JSONPatch");

    // A connection dialled after the stop, within the linger: served too (HTTP/2 and 1.1).
    for client in [server.h2(), server.h1()] {
        let (status, answer) = post(&client, &server.url("/mutate"), review.clone()).await;
        assert_eq!(status, 200, "{answer}");
    }

    // Then the listener closes and the drain ends the server.
    listener_closed(&server, Duration::from_secs(15)).await;
    tokio::time::timeout(Duration::from_secs(15), server.handle.take().unwrap())
        .await
        .expect("run returns after the linger and the drain")
        .unwrap();
}

#[tokio::test]
async fn a_keep_alive_connection_used_after_the_stop_is_told_to_close() {
    // The API server calls webhooks over HTTP/1.1 and reuses idle keep-alive connections; a
    // connection the server closes at the drain races a POST the client is writing on it (the
    // client sees EOF and does not retry a POST). So after the stop each answer tells the
    // client to retire the connection itself.
    let mut server = TestServer::start(Options {
        shutdown_linger: Duration::from_secs(5),
        ..Options::default()
    })
    .await;
    let review = body(&sample_review());
    let head = json_request_head("POST", "/mutate?timeout=10s", review.len());
    let mut stream = raw_tls(&server).await;
    let ask = async |stream: &mut tokio_rustls::client::TlsStream<TcpStream>| {
        stream
            .write_all(&[head.as_bytes(), &review].concat())
            .await
            .unwrap();
        let (status, head, body) = read_http1(stream).await.expect("an answer");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        head.to_ascii_lowercase()
    };
    let before = ask(&mut stream).await;
    assert!(
        !before.contains("connection: close"),
        "before the stop the connection is kept alive: {before}"
    );

    server.trigger_shutdown();
    eventually("/readyz to turn 503", Duration::from_secs(10), || async {
        reqwest::get(format!("http://{}/readyz", server.admin))
            .await
            .is_ok_and(|r| r.status() == 503)
    })
    .await;
    let after = ask(&mut stream).await;
    assert!(
        after.contains("connection: close"),
        "after the stop the answer retires the connection: {after}"
    );
    // And the server closes it after that answer, within the linger, not at the drain.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "the connection closes after its answer: {read:?}"
    );
    tokio::time::timeout(Duration::from_secs(15), server.handle.take().unwrap())
        .await
        .expect("run returns after the linger and the drain")
        .unwrap();
}

#[tokio::test]
async fn a_connection_accepted_just_before_the_listener_closes_is_answered() {
    // No linger: the listener closes at the stop. A connection the server accepted just
    // before, whose handshake and request come after, still gets its answer.
    let mut server = TestServer::start(Options::default()).await;
    let review = body(&sample_review());
    let head = json_request_head("POST", "/mutate?timeout=10s", review.len());
    let early = TcpStream::connect(server.addr).await.unwrap();
    server
        .wait_for_metric(
            "the connection accepted",
            "bookend_webhook_connections",
            1.0,
        )
        .await;
    server.trigger_shutdown();
    listener_closed(&server, Duration::from_secs(10)).await;
    let (status, body) = request_over(&server, early, &head, &review).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    tokio::time::timeout(Duration::from_secs(20), server.handle.take().unwrap())
        .await
        .expect("run returns after the drain")
        .unwrap();
}

#[tokio::test]
async fn drain_is_bounded_when_a_request_never_finishes() {
    let mut server = TestServer::start(Options {
        drain_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_secs(60),
        ..Options::default()
    })
    .await;
    let _stream = raw_tls_with(
        &server,
        format!("POST /mutate HTTP/1.1\r\nhost: {HOST}\r\ncontent-length: 1000\r\n\r\n{{")
            .as_bytes(),
    )
    .await;
    server
        .wait_for_metric("the request in flight", "bookend_admission_in_flight", 1.0)
        .await;
    let started = Instant::now();
    server.trigger_shutdown();
    tokio::time::timeout(Duration::from_secs(10), server.handle.take().unwrap())
        .await
        .expect("run returns after the drain timeout")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_do_not_stall_others() {
    let server = TestServer::start(Options {
        header_read_timeout: Duration::from_millis(1000),
        request_timeout: Duration::from_millis(1500),
        ..Options::default()
    })
    .await;
    let review = body(&sample_review());

    // A TCP connection that never starts the handshake does not block anyone.
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let (status, _) = post(&server.h2(), &server.url("/mutate"), review.clone()).await;
    assert_eq!(status, 200);
    // ... and is closed after the handshake timeout.
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");

    // Headers that never finish: the connection is closed.
    let mut stream = raw_tls_with(
        &server,
        format!("POST /mutate HTTP/1.1\r\nhost: {HOST}\r\n").as_bytes(),
    )
    .await;
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the server closes a connection whose headers never finish");
    if let Ok(n) = read {
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
    }

    // A body that stalls: 408 with a JSON reason.
    let mut stream = raw_tls_with(
        &server,
        format!("POST /mutate HTTP/1.1\r\nhost: {HOST}\r\ncontent-length: 100\r\n\r\n{{\"kind\"")
            .as_bytes(),
    )
    .await;
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), read_response(&mut stream))
        .await
        .expect("a 408 in time");
    assert_eq!(status, 408);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        answer["error"].as_str().unwrap().contains("timeout"),
        "{answer}"
    );
}

const TASK: &str = r#"apiVersion: tekton.dev/v1
kind: Task
metadata:
  name: unit-tests
  namespace: team-a
spec:
  steps:
    - name: test
      image: docker.io/library/golang:1.23
      command: ["go", "test", "./..."]
"#;

#[tokio::test]
async fn tasks_are_reloaded_too() {
    let tmp = tempfile::tempdir().unwrap();
    let tasks = tmp.path().join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    let server = TestServer::start(Options {
        tasks: vec![tasks.clone()],
        ..Options::default()
    })
    .await;
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "taskref-1",
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "taskruns"},
            "name": "unit-tests-run",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "tester"},
            "object": {
                "apiVersion": "tekton.dev/v1",
                "kind": "TaskRun",
                "metadata": {"name": "unit-tests-run", "namespace": "team-a"},
                "spec": {"taskRef": {"name": "unit-tests"}}
            }
        }
    });
    let client = server.h2();
    let (status, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.taskRef.name"), "{message}");

    let tmp_file = tmp.path().join("task.tmp");
    std::fs::write(&tmp_file, TASK).unwrap();
    std::fs::rename(&tmp_file, tasks.join("unit-tests.yaml")).unwrap();
    server
        .wait_for_metric("the tasks reload", RELOADS_OK, 1.0)
        .await;
    let (status, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patched = apply_patch(&answer, &review["request"]["object"]);
    assert_eq!(
        step_names(&patched),
        ["bookend-hello", "test", "bookend-bye"]
    );
}
