//! The Pod backstop against hostile Pods (breaker round 34), as invariants over generated Pod
//! CREATEs: forged values of every `tekton.dev/` label, `app.kubernetes.io/managed-by`, names
//! Tekton gives a TaskRun's Pod and names close to them, ownerReferences, and the user creating
//! the Pod.
//!
//! - P1: a Pod whose controller ownerReference is TaskRun `run-1`'s and that lacks the org's
//!   pre-step is never admitted, whatever its labels say (Tekton v0.62 copies the TaskRun's
//!   labels, its author's, onto the Pod; a forged `tekton.dev/taskRunUID` turned the check off).
//! - P2: a Pod Tekton's controller would take for a TaskRun's (labelled `tekton.dev/taskRun`,
//!   owned by a TaskRun, or adoptable by name: `<taskrun>-pod`, `-pod-retry<N>` with the
//!   informer's `app.kubernetes.io/managed-by` label) is refused from anyone but the controller.
//! - and the backstop stays narrow: any other Pod from anyone else is admitted.
//!
//! The expectations are written from Tekton's rules (pkg/pod/pod.go, `createPod` in
//! pkg/reconciler/taskrun), not from bookend's helpers.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Map, Value, json};

use bookend::admission::pods::{OwnerLookup, PodBackstop, Read, answer, read};
use bookend::engine::Catalog;
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{DEFAULT_TEKTON_CONTROLLER, PolicySet, Settings};

use crate::invariant::cases;

const ORG: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  preSteps: [{name: bookend-push-creds, image: creds:1, command: [/creds]}]
"#;

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml("pods.yaml", ORG, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// The TaskRun `run-1` as the API server has it (uid `uid-1`).
fn taskrun() -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"name": "run-1", "namespace": "team-a", "uid": "uid-1"},
           "spec": {"taskSpec": {"steps": [{"name": "build", "image": "golang"}]}}})
}

const TENANT: &str = "system:serviceaccount:team-a:default";

#[derive(Clone, Debug)]
struct Hostile {
    name: String,
    labels: Map<String, Value>,
    /// Tekton's controller ownerReference to `run-1` (`uid-1`), another reference, or none.
    owner: Option<Value>,
    user: &'static str,
}

fn label_key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("tekton.dev/taskRun"),
        Just("tekton.dev/taskRunUID"),
        Just("tekton.dev/task"),
        Just("tekton.dev/clusterTask"),
        Just("tekton.dev/pipelineRun"),
        Just("tekton.dev/pipelineRunUID"),
        Just("tekton.dev/pipelineTask"),
        Just("tekton.dev/pipeline"),
        Just("tekton.dev/memberOf"),
        Just("app.kubernetes.io/managed-by"),
        Just("bookend.dev/verify"),
        Just("app"),
    ]
}

fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("run-1".to_owned()),
        Just("run-2".to_owned()),
        Just("uid-1".to_owned()),
        Just("forged".to_owned()),
        Just(String::new()),
        Just("tekton-pipelines".to_owned()),
        "[a-z0-9-]{1,8}",
    ]
}

fn pod_name() -> impl Strategy<Value = String> {
    let suffix = prop_oneof![
        Just("-pod"),
        Just("-pod-retry1"),
        Just("-pod-retry12"),
        Just("-pod-retry"),
        Just("-pod-retryx"),
        Just("-podx"),
        Just("-pod-"),
        Just("-p0d"),
        Just(""),
    ];
    prop_oneof![
        Just("run-1-pod".to_owned()),
        ("[a-z][a-z0-9-]{0,10}", suffix).prop_map(|(head, tail)| format!("{head}{tail}")),
    ]
}

fn owner() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        2 => Just(None),
        2 => Just(Some(json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": "run-1",
                              "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}))),
        1 => Just(Some(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                              "uid": "rs-1", "controller": true}))),
    ]
}

fn hostile() -> impl Strategy<Value = Hostile> {
    (
        pod_name(),
        prop::collection::vec((label_key(), label_value()), 0..5),
        owner(),
        prop_oneof![Just(DEFAULT_TEKTON_CONTROLLER), Just(TENANT)],
    )
        .prop_map(|(name, labels, owner, user)| Hostile {
            name,
            labels: labels
                .into_iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v)))
                .collect(),
            owner,
            user,
        })
}

/// bookend's answer to `pod` (a Pod lacking the org's pre-step), the TaskRun looked up as the
/// server does: by the name `read` asks for.
fn allowed(pod: &Hostile) -> (bool, Value) {
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": "team-a",
                    "userInfo": {"username": pod.user},
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "object": {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": pod.name, "namespace": "team-a",
                                            "labels": pod.labels,
                                            "ownerReferences": pod.owner.iter().collect::<Vec<_>>()},
                               "spec": {"containers": [{"name": "step-build", "image": "golang"}]}}}}))
    .unwrap();
    let Read::Review(review) = read(&body) else {
        panic!("a readable review")
    };
    let lookup = match review.owner() {
        Some(o) if o.name == "run-1" => OwnerLookup::Found(taskrun()),
        _ => OwnerLookup::NotFound,
    };
    let reply = answer(
        review,
        lookup,
        PodBackstop::Enforce,
        &set(),
        &Catalog::default(),
    );
    assert!(reply.answered());
    let response = serde_json::from_slice::<Value>(&reply.body).unwrap()["response"].clone();
    (response["allowed"] == true, response)
}

/// A name Tekton gives a TaskRun's Pod: `kmeta.ChildName(<taskrun>, "-pod")`, with
/// `-retry<N>` for a retry (pkg/pod/pod.go); ChildName keeps the suffix when it hashes.
fn tekton_pod_name(name: &str) -> bool {
    name.ends_with("-pod")
        || name
            .rsplit_once("-pod-retry")
            .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/pods.proptest-regressions",
        ))),
        ..Config::default()
    }
}

#[test]
fn no_label_the_author_writes_takes_a_pod_out_of_the_check() {
    proptest!(config(cases() / 3), |(mut pod in hostile())| {
        pod.owner = Some(json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": "run-1",
                                "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}));
        let (allowed, response) = allowed(&pod);
        prop_assert!(!allowed, "TaskRun run-1's Pod without its org step was admitted: {pod:?}\n{response}");
    });
}

#[test]
fn no_pod_tekton_would_adopt_by_name_is_admitted_from_anyone_else() {
    let counts = std::cell::RefCell::new([0usize; 2]);
    proptest!(config(cases()), |(pod in hostile())| {
        let (allowed, response) = allowed(&pod);
        let has = |key: &str| pod.labels.contains_key(key);
        let owned_by_taskrun = pod.owner.as_ref().is_some_and(|o| o["kind"] == "TaskRun");
        let adoptable = tekton_pod_name(&pod.name) && has("app.kubernetes.io/managed-by");
        let tektons = has("tekton.dev/taskRun") || owned_by_taskrun || adoptable;
        if pod.user != DEFAULT_TEKTON_CONTROLLER {
            counts.borrow_mut()[usize::from(tektons)] += 1;
            if tektons {
                prop_assert!(!allowed, "a Pod Tekton would take for a TaskRun's, from {}, was admitted: {pod:?}\n{response}", pod.user);
                let message = response["status"]["message"].as_str().unwrap_or("");
                prop_assert!(message.contains("only Tekton's controller"), "{response}");
            } else {
                prop_assert!(allowed, "a Pod Tekton never takes was refused: {pod:?}\n{response}");
            }
        }
    });
    let counts = counts.into_inner();
    assert!(
        counts[0] > 0 && counts[1] > 0,
        "the generator reaches both kinds: {counts:?}"
    );
}
