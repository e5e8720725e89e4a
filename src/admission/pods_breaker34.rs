//! Breaker round 34: the Pod backstop's owner check read from labels Tekton copies from the
//! TaskRun, and a Pod Tekton adopts by its name never reached it (both fixed).

use serde_json::{Value, json};

use super::*;
use crate::engine::{Catalog, Outcome, Request, decide};
use crate::policy::Settings;
use crate::policy::load::policy_set_from_yaml;

/// An org policy whose pre-step holds the org's credentials in a volume of its own.
const ORG: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  preSteps:
  - name: bookend-push-creds
    image: creds:1
    command: [/creds]
    volumeMounts: [{name: bookend-registry, mountPath: /registry, readOnly: true}]
  volumes: [{name: bookend-registry, secret: {secretName: org-registry}}]
"#;

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml("t.yaml", ORG, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// The TaskRun as the API server stores it once bookend admitted it, with `labels` of the
/// author's.
fn admitted(labels: Value) -> Value {
    let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "labels": labels},
        "spec": {"taskSpec": {"steps": [{"name": "build", "image": "golang", "command": ["go", "build"]}]}}});
    let request = Request {
        object: &taskrun,
        namespace: "team-a",
        dry_run: false,
    };
    let decision = decide(request, &set(), &Catalog::default());
    assert_eq!(decision.outcome, Outcome::Mutated, "{:?}", decision.message);
    let mut stored = decision.object;
    stored["metadata"]["uid"] = json!("uid-1");
    stored
}

/// Tekton's controller creates the TaskRun's Pod: `labels` as Tekton writes them, its controller
/// ownerReference (every Tekton version writes it from the TaskRun), and the
/// author's step `build` mounting the org's Secret volume (what a StepAction resolved after
/// admission, or a variable in a mount name, comes to).
fn review(taskrun: &Value, labels: Value) -> Vec<u8> {
    let steps = taskrun["spec"]["taskSpec"]["steps"].as_array().unwrap();
    let mut spec = crate::tekton_pod::pod_spec(steps, &[]);
    let build = spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["name"] == "step-build")
        .unwrap();
    spec["containers"][build]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "bookend-registry", "mountPath": "/steal", "readOnly": true}));
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": "team-a",
                    "userInfo": {"username": crate::policy::DEFAULT_TEKTON_CONTROLLER},
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "object": {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "run-1-pod", "namespace": "team-a", "labels": labels,
                                            "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                                                                 "name": "run-1", "uid": taskrun["metadata"]["uid"],
                                                                 "controller": true, "blockOwnerDeletion": true}]},
                               "spec": spec}}}))
    .unwrap()
}

fn allowed(body: &[u8], taskrun: &Value) -> (bool, Value) {
    let Read::Review(review) = read(body) else {
        panic!("a readable review")
    };
    let reply = answer(
        review,
        OwnerLookup::Found(taskrun.clone()),
        PodBackstop::Enforce,
        &set(),
        &Catalog::default(),
    );
    let response = serde_json::from_slice::<Value>(&reply.body).unwrap()["response"].clone();
    (response["allowed"] == true, response)
}

#[test]
fn the_authors_step_mounting_the_orgs_secret_is_refused_as_tekton_v1_labels_the_pod() {
    // Tekton v0.63 and later: `makeLabels` writes the TaskRun's uid over any the author set.
    let taskrun = admitted(json!({}));
    let labels = json!({"tekton.dev/taskRun": "run-1", "tekton.dev/taskRunUID": "uid-1"});
    let (allowed, response) = allowed(&review(&taskrun, labels), &taskrun);
    assert!(!allowed, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("mounts \"bookend-registry\""),
        "{response}"
    );
}

#[test]
fn a_uid_label_the_author_wrote_does_not_switch_the_pod_check_off() {
    // bookend admits the label on the TaskRun (it is not bookend's).
    let taskrun = admitted(json!({"tekton.dev/taskRunUID": "forged"}));
    assert_eq!(
        taskrun["metadata"]["labels"]["tekton.dev/taskRunUID"],
        "forged"
    );
    // Tekton v0.62's `makeLabels`: the TaskRun's labels, then only `tekton.dev/taskRun`.
    let mut labels = taskrun["metadata"]["labels"].clone();
    labels["tekton.dev/taskRun"] = json!("run-1");
    let (allowed, response) = allowed(&review(&taskrun, labels), &taskrun);
    assert!(
        !allowed,
        "the author's step mounting the org's Secret was admitted: {response}"
    );
}

#[test]
fn a_pod_tekton_would_adopt_by_name_is_tektons_to_create() {
    // The TaskRun the author will create, with a name they choose (Tekton names its Pod
    // `kmeta.ChildName(<taskrun>, "-pod")`).
    let taskrun = admitted(json!({}));
    // The author's Pod: a container per step of the admitted TaskRun, each named as Tekton
    // would name it and each just exiting 0; Tekton's pod informer watches Pods that carry the
    // managed-by label.
    let containers: Vec<Value> = taskrun["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!({"name": format!("step-{}", s["name"].as_str().unwrap()),
                        "image": "busybox", "command": ["true"]})
        })
        .collect();
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-9", "operation": "CREATE", "namespace": "team-a",
                    "userInfo": {"username": "developer@example.com"},
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "object": {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "run-1-pod", "namespace": "team-a",
                                            "labels": {"app.kubernetes.io/managed-by": "tekton-pipelines"}},
                               "spec": {"containers": containers}}}}))
    .unwrap();
    let (allowed, response) = allowed(&body, &taskrun);
    assert!(
        !allowed,
        "a Pod Tekton's controller will adopt as TaskRun run-1's, created by a developer, was admitted: {response}"
    );
}
