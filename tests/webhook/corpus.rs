//! Every upstream Tekton TaskRun example through the real webhook with the example policies,
//! concurrently over one HTTP/2 connection: the patch the server sends, decoded and applied
//! independently, equals what the engine (`bookend render`) makes of the same object; denials
//! carry the engine's message; the final objects pass `/validate`.

use std::sync::Arc;

use crate::common::{example_policies, root, tekton_taskrun_files};
use crate::support::*;
use bookend::engine::{self, Catalog, Outcome, Request};
use bookend::policy::load::yaml_documents;
use bookend::tekton::TaskRunView;
use serde_json::{Value, json};
use tokio::task::JoinSet;

const NAMESPACE: &str = "team-a";

fn corpus_taskruns() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for file in tekton_taskrun_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let Ok(docs) = yaml_documents(&text) else {
            continue;
        };
        for (i, doc) in docs.into_iter().enumerate() {
            if TaskRunView::new(&doc).is_some() {
                out.push((format!("{}#{i}", file.display()), doc));
            }
        }
    }
    assert!(out.len() > 100, "only {} corpus TaskRuns", out.len());
    out
}

fn review(uid: &str, object: &Value) -> Value {
    let version = object["apiVersion"]
        .as_str()
        .and_then(|v| v.strip_prefix("tekton.dev/"))
        .unwrap_or("v1");
    let mut object = object.clone();
    object["metadata"]["namespace"] = json!(NAMESPACE);
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "tekton.dev", "version": version, "kind": "TaskRun"},
            "resource": {"group": "tekton.dev", "version": version, "resource": "taskruns"},
            "name": object["metadata"]["name"],
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "userInfo": {"username": "tester"},
            "object": object,
            "dryRun": false,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_the_webhook_equals_render() {
    let policies = root().join("examples/policies");
    let server = TestServer::start(Options {
        policies: Some(vec![policies.clone()]),
        ..Options::default()
    })
    .await;
    let set = Arc::new(example_policies());

    let client = server.h2();
    let mutate = server.url("/mutate");
    let validate = server.url("/validate");
    let mut tasks = JoinSet::new();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    for (n, (at, object)) in corpus_taskruns().into_iter().enumerate() {
        let (client, mutate, validate, set) = (
            client.clone(),
            mutate.clone(),
            validate.clone(),
            set.clone(),
        );
        let permit = semaphore.clone().acquire_owned().await.unwrap();
        tasks.spawn(async move {
            let _permit = permit;
            let uid = format!("corpus-{n}");
            let review = review(&uid, &object);
            let object = &review["request"]["object"];
            let decision = engine::decide(
                Request {
                    object,
                    namespace: NAMESPACE,
                    dry_run: false,
                },
                &set,
                &Catalog::default(),
            );
            let (status, answer) =
                post(&client, &mutate, serde_json::to_vec(&review).unwrap()).await;
            assert_eq!(status, 200, "{at}: {answer}");
            let response = &answer["response"];
            assert_eq!(response["uid"], uid.as_str(), "{at}");
            let admitted = match decision.outcome {
                Outcome::Denied => {
                    assert_eq!(response["allowed"], false, "{at}");
                    assert_eq!(
                        response["status"]["message"].as_str(),
                        decision.message.as_deref(),
                        "{at}"
                    );
                    return decision.outcome;
                }
                Outcome::Admitted => {
                    assert_eq!(response["allowed"], true, "{at}");
                    assert!(response.get("patch").is_none(), "{at}: {answer}");
                    object.clone()
                }
                Outcome::Mutated => {
                    assert_eq!(response["allowed"], true, "{at}");
                    assert_eq!(response["patchType"], "JSONPatch", "{at}");
                    let patched = apply_patch(&answer, object);
                    assert_eq!(patched, decision.object, "{at}");
                    patched
                }
            };
            // The admitted object passes the validating backstop.
            let mut final_review = review.clone();
            final_review["request"]["object"] = admitted;
            let (status, answer) = post(
                &client,
                &validate,
                serde_json::to_vec(&final_review).unwrap(),
            )
            .await;
            assert_eq!(status, 200, "{at}: {answer}");
            assert_eq!(answer["response"]["allowed"], true, "{at}: {answer}");
            decision.outcome
        });
    }
    let (mut mutated, mut total) = (0, 0);
    while let Some(outcome) = tasks.join_next().await {
        total += 1;
        if outcome.unwrap() == Outcome::Mutated {
            mutated += 1;
        }
    }
    assert!(mutated > 50, "{mutated} of {total} mutated");
    let metrics = server.metrics().await;
    assert_eq!(
        metric_value(
            &metrics,
            r#"bookend_admission_requests_total{endpoint="mutate",operation="CREATE",outcome="mutated",dry_run="false"}"#
        ),
        mutated as f64,
        "{metrics}"
    );
}
