//! The webhook over real HTTPS (HTTP/2 and HTTP/1.1): mutate, validate, dry-run, policy
//! objects, the bad-input matrix, panics, mutual TLS, and the admin endpoints.

use std::time::Duration;

use crate::support::*;
use bookend::admission::{Endpoint, Reply};
use bookend::engine::Lookup;
use bookend::engine::{self, Catalog, Request};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{PolicySet, Settings};
use serde_json::{Value, json};

fn expected_object(object: &Value, namespace: &str, dry_run: bool) -> Value {
    let loaded = policy_set_from_yaml("policy.yaml", POLICY, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;
    let decision = engine::decide(
        Request {
            object,
            namespace,
            dry_run,
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(decision.outcome.as_str(), "mutated");
    decision.object
}

#[tokio::test]
async fn mutate_over_http2_patch_equals_engine_decision() {
    let server = TestServer::start(Options::default()).await;
    let review = sample_review();
    let client = server.h2();
    let response = client
        .post(server.url("/mutate?timeout=10s"))
        .header("content-type", "application/json")
        .body(body(&review))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");

    let object = &review["request"]["object"];
    let patched = apply_patch(&answer, object);
    assert_eq!(patched, expected_object(object, "team-a", false));
    let steps: Vec<&str> = patched["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(steps.first(), Some(&"bookend-hello"));
    assert_eq!(steps.last(), Some(&"bookend-bye"));

    let metrics = server.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            r#"bookend_admission_requests_total{endpoint="mutate",operation="CREATE",outcome="mutated",dry_run="false"}"#
        ),
        1.0,
        "{metrics}"
    );
    assert_eq!(
        metric_value(
            &metrics,
            r#"bookend_injected_steps_total{policy="ClusterStepPolicy/test-bookends"}"#
        ),
        2.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn mutate_over_http1_and_validate_backstop() {
    let server = TestServer::start(Options::default()).await;
    let review = sample_review();
    let client = server.h1();
    let response = client
        .post(server.url("/mutate"))
        .body(body(&review))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_11);
    let answer: Value = response.json().await.unwrap();
    let patched = apply_patch(&answer, &review["request"]["object"]);

    // The final object, as the mutating webhook left it, passes the backstop.
    let mut final_review = review.clone();
    final_review["request"]["object"] = patched;
    let (status, answer) = post(&client, &server.url("/validate"), body(&final_review)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    // The object without the mandatory steps (mutating webhook skipped) is refused.
    let (status, answer) = post(&client, &server.url("/validate"), body(&review)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("ClusterStepPolicy/test-bookends"),
        "{message}"
    );
    assert!(message.contains("bookend-hello"), "{message}");
}

#[tokio::test]
async fn dry_run_gets_same_decision_with_warnings() {
    let server = TestServer::start(Options::default()).await;
    let mut review = sample_review();
    review["request"]["dryRun"] = json!(true);
    let (status, answer) = post(&server.h2(), &server.url("/mutate"), body(&review)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true);
    let warnings = answer["response"]["warnings"].as_array().expect("warnings");
    let text = serde_json::to_string(warnings).unwrap();
    assert!(text.contains("bookend-hello"), "{text}");
    let object = &review["request"]["object"];
    assert_eq!(
        apply_patch(&answer, object),
        expected_object(object, "team-a", true)
    );
    let metrics = server.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            r#"bookend_admission_requests_total{endpoint="mutate",operation="CREATE",outcome="mutated",dry_run="true"}"#
        ),
        1.0,
        "{metrics}"
    );
}

fn policy_review(policy: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0d3c4f5a-policy",
            "kind": {"group": "bookend.dev", "version": "v1alpha1", "kind": "ClusterStepPolicy"},
            "resource": {"group": "bookend.dev", "version": "v1alpha1", "resource": "clustersteppolicies"},
            "name": policy["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": policy,
        }
    })
}

#[tokio::test]
async fn validate_refuses_bad_policy_with_field_path() {
    let server = TestServer::start(Options::default()).await;
    let client = server.h2();
    let good = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "ClusterStepPolicy",
        "metadata": {"name": "other"},
        "spec": {"preSteps": [{"name": "bookend-other", "image": "busybox", "command": ["true"]}]}
    });
    let (status, answer) = post(
        &client,
        &server.url("/validate"),
        body(&policy_review(good.clone())),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true, "{answer}");

    let mut bad = good.clone();
    bad["spec"]["preSteps"][0]["name"] = json!("no-prefix");
    let (status, answer) = post(&client, &server.url("/validate"), body(&policy_review(bad))).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(answer["response"]["uid"], "0d3c4f5a-policy");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.preSteps[0].name"), "{message}");

    // A step name already owned by a loaded policy.
    let mut clash = good;
    clash["spec"]["preSteps"][0]["name"] = json!("bookend-hello");
    let (_, answer) = post(
        &client,
        &server.url("/validate"),
        body(&policy_review(clash)),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    let message = answer["response"]["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.preSteps[0].name"), "{message}");
    assert!(message.contains("test-bookends"), "{message}");
}

#[tokio::test]
async fn bad_input_matrix_gets_documented_statuses_and_server_stays_up() {
    let server = TestServer::start(Options::default()).await;
    let client = server.h2();
    let h1 = server.h1();
    let sample = sample_review();
    let mut no_uid = sample.clone();
    no_uid["request"]["uid"] = json!("");
    let mut no_request = sample.clone();
    no_request.as_object_mut().unwrap().remove("request");
    let mut wrong_kind = sample.clone();
    wrong_kind["kind"] = json!("Pod");
    let mut not_taskrun_object = sample.clone();
    not_taskrun_object["request"]["object"] = json!("a string, not an object");
    let oversize = vec![b' '; 3 * 1024 * 1024 + 1];

    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("not JSON", b"this is not json".to_vec(), 400),
        ("empty body", Vec::new(), 400),
        (
            "JSON but not an AdmissionReview",
            b"{\"foo\": 1}".to_vec(),
            400,
        ),
        ("AdmissionReview without request", body(&no_request), 400),
        ("no uid", body(&no_uid), 400),
        ("wrong kind", body(&wrong_kind), 400),
        ("object is not a TaskRun", body(&not_taskrun_object), 400),
        ("over 3 MiB", oversize, 413),
    ];
    for (what, payload, expected) in cases {
        for (proto, c) in [("h2", &client), ("http/1.1", &h1)] {
            let (status, answer) = post(c, &server.url("/mutate"), payload.clone()).await;
            assert_eq!(status, expected, "{what} over {proto}: {answer}");
            assert!(
                answer["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{what}: a JSON reason: {answer}"
            );
            // Still serving.
            let (status, answer) = post(c, &server.url("/mutate"), body(&sample)).await;
            assert_eq!(status, 200, "after {what} over {proto}: {answer}");
        }
    }

    let response = client.get(server.url("/mutate")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let response = client.put(server.url("/validate")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    let (status, _) = post(&client, &server.url("/nope"), body(&sample)).await;
    assert_eq!(status, 404);
    let (status, _) = post(&client, &server.url("/mutate"), body(&sample)).await;
    assert_eq!(status, 200);

    let metrics = server.metrics().await;
    assert!(
        metric_value(
            &metrics,
            r#"bookend_admission_requests_total{endpoint="mutate",operation="unknown",outcome="error",dry_run="false"}"#
        ) >= 8.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_panic_in_a_review_is_a_400_and_the_server_keeps_serving() {
    const MARKER: &[u8] = b"PANIC-IN-THIS-REVIEW";
    fn panicking_review(
        endpoint: Endpoint,
        body: &[u8],
        set: &PolicySet,
        lookup: &dyn Lookup,
    ) -> Reply {
        if body.windows(MARKER.len()).any(|w| w == MARKER) {
            panic!("test: a panic requested for this review");
        }
        bookend::admission::review(endpoint, body, set, lookup)
    }
    let server = TestServer::start(Options {
        review: panicking_review,
        ..Options::default()
    })
    .await;
    let client = server.h2();
    let mut review = sample_review();
    review["request"]["uid"] = json!("PANIC-IN-THIS-REVIEW");
    for _ in 0..3 {
        let (status, answer) = post(&client, &server.url("/mutate"), body(&review)).await;
        assert_eq!(status, 400);
        assert_eq!(answer["error"], "internal error handling this review");
    }
    let (status, answer) = post(&client, &server.url("/mutate"), body(&sample_review())).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(server.metric("bookend_handler_panics_total").await, 3.0);
}

#[tokio::test]
async fn admin_endpoints_expose_health_and_every_metric_family() {
    let server = TestServer::start(Options::default()).await;
    let admin = reqwest::Client::new();
    let livez = admin
        .get(format!("http://{}/livez", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(livez.status(), 200);
    let readyz = admin
        .get(format!("http://{}/readyz", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(readyz.status(), 200);
    // The Tekton the policies are compiled for (files mode: --tekton-version, the newest).
    let ready_text = readyz.text().await.unwrap();
    assert!(
        ready_text.starts_with("ok\nTekton v1.15.0 (enable-step-actions=true"),
        "{ready_text}"
    );
    let _ = post(&server.h2(), &server.url("/mutate"), body(&sample_review())).await;
    let response = admin
        .get(format!("http://{}/metrics", server.admin))
        .send()
        .await
        .unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = response.text().await.unwrap();
    for family in [
        "# TYPE bookend_admission_requests counter",
        "# TYPE bookend_admission_duration_seconds histogram",
        "bookend_admission_duration_seconds_bucket{le=\"0.00005\",endpoint=\"mutate\"}",
        "# TYPE bookend_injected_steps counter",
        "bookend_policies_loaded 1",
        "bookend_policy_reloads_total{result=\"success\"} 0",
        "bookend_policy_reloads_total{result=\"error\"} 0",
        "bookend_certificate_reloads_total{result=\"success\"} 0",
        "# TYPE bookend_certificate_expiry_timestamp_seconds gauge",
        "bookend_handler_panics_total 0",
        "bookend_admission_in_flight 0",
        "# TYPE bookend_webhook_connections gauge",
        "bookend_tls_handshake_errors_total",
        "bookend_tekton_info{version=\"v1.15.0\",supported=\"true\",step_actions=\"true\",api_fields=\"beta\"} 1",
    ] {
        assert!(text.contains(family), "missing {family:?} in\n{text}");
    }
    assert!(
        server
            .metric("bookend_certificate_expiry_timestamp_seconds")
            .await
            > 1.7e9
    );
    // The admin port is plain HTTP and has no webhook routes.
    let response = admin
        .post(format!("http://{}/mutate", server.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn client_ca_requires_a_client_certificate() {
    let server = TestServer::start(Options {
        client_ca: true,
        ..Options::default()
    })
    .await;
    let review = body(&sample_review());
    let anonymous = server.h2();
    let refused = anonymous
        .post(server.url("/mutate"))
        .body(review.clone())
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a client without a certificate is refused"
    );

    let identity =
        reqwest::Identity::from_pem(server.ca.client_identity("kube-apiserver").as_bytes())
            .unwrap();
    let client = server.client().identity(identity).build().unwrap();
    let (status, answer) = post(&client, &server.url("/mutate"), review).await;
    assert_eq!(status, 200, "{answer}");

    // Certificates from another CA are refused too.
    let other = Ca::new();
    let identity =
        reqwest::Identity::from_pem(other.client_identity("intruder").as_bytes()).unwrap();
    let client = server.client().identity(identity).build().unwrap();
    assert!(
        client
            .post(server.url("/mutate"))
            .body(body(&sample_review()))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn the_certificate_is_verified_by_name() {
    let server = TestServer::start(Options::default()).await;
    // The certificate is for bookend.test and 127.0.0.1, not for other names.
    let client = server
        .client()
        .resolve("wrong.test", server.addr)
        .build()
        .unwrap();
    let url = format!("https://wrong.test:{}/mutate", server.addr.port());
    assert!(client.post(url).body("{}").send().await.is_err());
    let by_ip = format!("https://127.0.0.1:{}/mutate", server.addr.port());
    let response = server
        .client()
        .build()
        .unwrap()
        .post(by_ip)
        .body(body(&sample_review()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}
