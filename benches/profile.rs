//! A fixed amount of one benchmark's work, for profilers: instruction counts from
//! `valgrind --tool=callgrind` are repeatable on a loaded machine where wall-clock times are
//! not. Not a criterion benchmark (`harness = false`).
//!
//! `cargo bench --bench profile -- <case> <steps> <policies> <iterations> [cached tasks]`, case
//! one of `review` (admission::review), `taskref` (the same TaskRun referencing its Task, which
//! is inlined from the catalog; `steps` does not apply), `decide` (engine::decide), `diff`
//! (patch::diff), `parse` (the review body into a serde_json::Value), `scan` (the body read
//! and checked as JSON, nothing built: the floor of any serde_json reader), `setup` (inputs
//! only: subtract it). With the example policies (`examples/policies`; `steps` and `policies`
//! do not apply): `example` (the fixture, a PipelineRun's TaskRun, which the Audit policy
//! matches too), `build` (`examples/taskruns/build.yaml`, the apiserver benchmark's TaskRun),
//! `backstop-build` (`/validate` of build.yaml as admitted: the validating webhook's work),
//! `pod-build` (`engine::pod::check_pod` of the Pod Tekton builds for build.yaml as admitted:
//! the Pod backstop's work per Pod; a `postStepsRun: Always` policy applies),
//! `pod-build-review` (the same through the Pod webhook's handler: the review read, the check,
//! the answer written; the TaskRun, which the server fetches, copied in). With the generated
//! policies: `pod` (the Pod of the fixture's TaskRun with `steps` steps as admitted under
//! `policies` policies: `postStepsRun: Always`), `pod-remote` (a remote Task's Pod, the Task
//! the fixture's `steps` steps as the dry-run mutation writes them: `check_remote`).
//!
//! scripts/bench-profile.sh runs it under callgrind and prints instructions per iteration.

mod support;
#[path = "../tests/common/tekton_pod.rs"]
mod tekton_pod;

// The allocator the bookend binary uses (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use bookend::admission::pods::{self, OwnerLookup, PodBackstop};
use bookend::admission::{self, Endpoint};
use bookend::engine::pod::check_pod;
use bookend::engine::{self, Outcome, Request};
use bookend::patch;
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let case = args.first().map(String::as_str).unwrap_or("review");
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (steps, policies, iterations, tasks) = (num(1, 3), num(2, 10), num(3, 1000), num(4, 0));
    let body = support::body_with_steps(steps);
    let object = support::review_with_steps(steps)["request"]["object"].clone();
    let set = support::policy_set(policies);
    let (taskref_body, task) = support::taskref_review();
    let catalog = support::catalog_with(tasks, std::slice::from_ref(&task));
    let request = Request {
        object: &object,
        namespace: "team-a",
        dry_run: false,
    };
    let admitted = engine::decide(request, &set, &catalog).object;
    let examples = support::example_policy_set();
    let build = support::build_taskrun();
    let build_body = support::review_of(build.clone());
    let mut build_admitted = engine::decide(
        Request {
            object: &build,
            namespace: "team-a",
            dry_run: false,
        },
        &examples,
        &catalog,
    )
    .object;
    // As created: the uid the Pod's ownerReference names.
    build_admitted["metadata"]["uid"] = json!("uid-1");
    let build_pod = taskrun_pod(&build_admitted);
    let build_pod_body = pod_review(&build_pod);
    let backstop_body = support::review_of(build_admitted.clone());
    let pod = taskrun_pod(&admitted);
    let (remote_taskrun, remote_pod) = remote_taskrun_pod(&object, &set, &catalog);
    // The Pod cases measure the check of Pods that pass: all of it runs. (In every case, so
    // that `setup`, which bench-profile.sh subtracts, does the same work before the loop.)
    {
        for (pod, taskrun, set) in [
            (&build_pod, &build_admitted, &examples),
            (&pod, &admitted, &set),
            (&remote_pod, &remote_taskrun, &set),
        ] {
            check_pod(pod, taskrun, set, &catalog).expect("the backstop admits the Pod");
        }
        let pods::Read::Review(review) = pods::read(&build_pod_body) else {
            panic!("a readable Pod review");
        };
        let found = OwnerLookup::Found(build_admitted.clone());
        let reply = pods::answer(review, found, PodBackstop::Enforce, &examples, &catalog);
        let reply: Value = serde_json::from_slice(&reply.body).expect("JSON");
        assert_eq!(reply["response"]["allowed"], true, "{reply}");
    }
    let began = Instant::now();
    for _ in 0..iterations {
        match case {
            "review" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&body),
                    &set,
                    &catalog,
                ));
            }
            "taskref" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&taskref_body),
                    &set,
                    &catalog,
                ));
            }
            "example" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&body),
                    &examples,
                    &catalog,
                ));
            }
            "build" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&build_body),
                    &examples,
                    &catalog,
                ));
            }
            "backstop-build" => {
                black_box(admission::review(
                    Endpoint::Validate,
                    black_box(&backstop_body),
                    &examples,
                    &catalog,
                ));
            }
            "pod-build" => {
                black_box(
                    check_pod(black_box(&build_pod), &build_admitted, &examples, &catalog).is_ok(),
                );
            }
            "pod-build-review" => {
                let pods::Read::Review(review) = pods::read(black_box(&build_pod_body)) else {
                    panic!("a readable Pod review");
                };
                black_box(pods::answer(
                    review,
                    OwnerLookup::Found(build_admitted.clone()),
                    PodBackstop::Enforce,
                    &examples,
                    &catalog,
                ));
            }
            "pod" => {
                black_box(check_pod(black_box(&pod), &admitted, &set, &catalog).is_ok());
            }
            "pod-remote" => {
                black_box(
                    check_pod(black_box(&remote_pod), &remote_taskrun, &set, &catalog).is_ok(),
                );
            }
            "decide" => {
                black_box(engine::decide(black_box(request), &set, &catalog));
            }
            "diff" => {
                black_box(patch::diff(black_box(&object), black_box(&admitted)));
            }
            "parse" => {
                black_box(serde_json::from_slice::<Value>(black_box(&body)).expect("JSON"));
            }
            "scan" => {
                black_box(
                    serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body))
                        .expect("JSON"),
                );
            }
            "setup" => {}
            other => panic!("unknown case {other}"),
        }
    }
    let elapsed = began.elapsed();
    println!(
        "{case} steps={steps} policies={policies} iterations={iterations} wall_per_iter_us={:.2}",
        elapsed.as_secs_f64() * 1e6 / iterations.max(1) as f64
    );
}

/// The Pod Tekton's controller creates for the admitted `taskrun` (inline steps), as the API
/// server stores it: `tests/common/tekton_pod.rs`'s containers, the Task's volumes with the
/// server's default file mode, the service account token, the controller ownerReference.
fn taskrun_pod(taskrun: &Value) -> Value {
    let task_spec = &taskrun["spec"]["taskSpec"];
    pod_for(
        "build-1",
        task_spec["steps"].as_array().expect("admitted steps"),
        task_spec["volumes"]
            .as_array()
            .map_or(&[][..], Vec::as_slice),
    )
}

fn pod_for(taskrun: &str, steps: &[Value], volumes: &[Value]) -> Value {
    let mut spec = tekton_pod::pod_spec(steps, volumes);
    for volume in spec["volumes"].as_array_mut().into_iter().flatten() {
        if let Some(secret) = volume.get_mut("secret").and_then(Value::as_object_mut) {
            secret.entry("defaultMode").or_insert(json!(420));
        }
    }
    // The ServiceAccount admission plugin's token, mounted into every container.
    let token = "kube-api-access-x7k2p";
    for container in spec["containers"].as_array_mut().into_iter().flatten() {
        container["volumeMounts"]
            .as_array_mut()
            .expect("mounts")
            .push(json!({"name": token,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}));
    }
    spec["volumes"].as_array_mut().expect("volumes").push(json!({"name": token,
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}));
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("{taskrun}-pod"), "namespace": "team-a",
                        "labels": {"tekton.dev/taskRun": taskrun, "tekton.dev/taskRunUID": "uid-1"},
                        "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                            "name": taskrun, "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}]},
           "spec": spec})
}

/// The Pod webhook's AdmissionReview of `pod`, created by Tekton's controller.
fn pod_review(pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": "team-a",
                    "userInfo": {"username": bookend::policy::DEFAULT_TEKTON_CONTROLLER},
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "object": pod}}))
    .expect("serialises")
}

/// A TaskRun of a remote Task (git resolver) in team-a, and its Pod: the Task is `object`'s
/// steps as bookend's dry-run mutation of the resolved Task writes them.
fn remote_taskrun_pod(
    object: &Value,
    set: &bookend::policy::PolicySet,
    catalog: &engine::Catalog,
) -> (Value, Value) {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "metadata": {"name": "build", "namespace": "team-a"},
                      "spec": {"steps": object["spec"]["taskSpec"]["steps"]}});
    let decision = engine::decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        set,
        catalog,
    );
    assert_ne!(decision.outcome, Outcome::Denied, "{:?}", decision.message);
    let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                         "metadata": {"name": "remote-1", "namespace": "team-a", "uid": "uid-1"},
                         "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}});
    let spec = &decision.object["spec"];
    let volumes = spec["volumes"].as_array().map_or(&[][..], Vec::as_slice);
    let steps = spec["steps"].as_array().expect("steps");
    (taskrun, pod_for("remote-1", steps, volumes))
}
