//! Unit tests of the engine's decision, end to end: the helpers every test module uses (also
//! from `crate::engine::pod` and `crate::engine::isolate`), and the tests by concern below.

use super::record::{INLINED_ANNOTATION, Record};
use super::*;
use crate::policy::load::policy_set_from_yaml;
use crate::policy::{PolicySet, Settings};
use serde_json::json;

mod after_admission;
mod always;
mod always_run;
mod breaker35;
mod hermetic;
mod order;
mod patch;
mod properties;
mod recognition;
mod record_param;
mod results;
mod selection;
mod task_ref;
mod task_spec;
mod tekton_versions;

/// A policy set from YAML; panics on any issue (tests write valid policies unless they say so).
pub(crate) fn policies(yaml: &str) -> PolicySet {
    let loaded = policy_set_from_yaml("test.yaml", yaml, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

const PRE_POST: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: outer}
spec:
  priority: 1
  preSteps: [{name: bookend-outer-pre, image: alpine}]
  postSteps: [{name: bookend-outer-post, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: inner}
spec:
  priority: 2
  preSteps: [{name: bookend-inner-pre, image: alpine}]
  postSteps: [{name: bookend-inner-post, image: alpine}]
"#;

const ALWAYS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: report}
spec:
  postStepsRun: Always
  preSteps: [{name: bookend-setup, image: alpine}]
  postSteps: [{name: bookend-report, image: alpine}]
"#;

const NOTIFY: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: z-notify}
spec:
  priority: 1
  postSteps: [{name: bookend-notify, image: alpine}]
"#;

const WITH_VOLUME: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: vol}
spec:
  preSteps:
  - name: bookend-cache
    image: alpine
    volumeMounts: [{name: bookend-cache, mountPath: /cache}]
  volumes: [{name: bookend-cache, emptyDir: {}}]
"#;

pub(crate) fn taskrun(steps: Value) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "run-", "namespace": "team-a"},
        "spec": {"taskSpec": {"steps": steps}}
    })
}

/// The TaskRun most tests start from: one user step, `build`.
fn build_taskrun() -> Value {
    taskrun(json!([{"name": "build", "image": "go"}]))
}

pub(crate) fn run(set: &PolicySet, object: &Value) -> Decision {
    run_with(set, object, &Catalog::default())
}

/// bookend's answer when Tekton's controller dry-run-creates a resolved Task `build` in
/// `team-a` with `spec` (remote resolution).
pub(crate) fn dry_run_task(set: &PolicySet, spec: Value) -> Decision {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "metadata": {"name": "build", "namespace": "team-a"}, "spec": spec});
    crate::engine::decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        set,
        &Catalog::default(),
    )
}

pub(crate) fn run_with(set: &PolicySet, object: &Value, lookup: &dyn Lookup) -> Decision {
    decide(request(object), set, lookup)
}

/// The request most tests make: a TaskRun created in team-a, not a dry run. Others change one
/// field with `Request { dry_run: true, ..request(object) }`.
fn request(object: &Value) -> Request<'_> {
    Request {
        object,
        namespace: "team-a",
        dry_run: false,
    }
}

/// Runs `object` through `set`, expects a denial whose message contains `says`, and returns the
/// message for further checks.
fn denied(set: &PolicySet, object: &Value, says: &str) -> String {
    denied_with(set, object, &Catalog::default(), says)
}

fn denied_with(set: &PolicySet, object: &Value, lookup: &dyn Lookup, says: &str) -> String {
    let d = run_with(set, object, lookup);
    assert_eq!(d.outcome, Outcome::Denied, "patch: {:?}", d.patch);
    let m = d.message.expect("a denial has a message");
    assert!(m.contains(says), "{m:?} should say {says:?}");
    m
}

/// The TaskRun's inline steps.
fn steps_of(object: &Value) -> &Vec<Value> {
    object["spec"]["taskSpec"]["steps"].as_array().unwrap()
}

/// Asserts that `step` runs only when `gate` reported that everything before it succeeded.
fn assert_gated_by(step: &Value, gate: &str) {
    assert_eq!(
        step["when"][0]["input"],
        format!("$(steps.{gate}.results.ok)"),
        "{step}"
    );
}

/// The shell script of a gate or the verdict (helpers are `/bin/sh -c <script>`).
fn helper_script(step: &Value) -> &str {
    step["args"][0].as_str().unwrap()
}

fn names(object: &Value) -> Vec<String> {
    steps_of(object)
        .iter()
        .map(|s| tekton::step_name(s).unwrap_or("<unnamed>").to_owned())
        .collect()
}

fn apply(object: &Value, ops: &[crate::patch::Operation]) -> Value {
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::to_value(ops).unwrap()).unwrap();
    let mut doc = object.clone();
    json_patch::patch(&mut doc, &patch).unwrap();
    doc
}

/// The decision's patch applied to the input gives its object, and a second pass over that
/// object changes nothing.
fn assert_converges(set: &PolicySet, object: &Value) -> Value {
    let first = run(set, object);
    assert_ne!(first.outcome, Outcome::Denied, "{:?}", first.message);
    assert_eq!(apply(object, &first.patch), first.object);
    assert_settled(set, &first.object);
    first.object
}

/// A pass over an object that was admitted already allows it as it is.
fn assert_settled(set: &PolicySet, object: &Value) {
    let again = run(set, object);
    assert_eq!(
        again.outcome,
        Outcome::Admitted,
        "second pass: {:?} {:?}",
        again.message,
        again.patch
    );
    assert!(again.patch.is_empty());
}

/// The injection record annotated on an admitted object.
fn record_of(object: &Value) -> Record {
    let annotation = object["metadata"]["annotations"][record::ANNOTATION]
        .as_str()
        .expect("the injection record annotation");
    Record::parse(annotation).unwrap()
}

/// The Always and OnSuccess policies around `build`, `lint` (best effort) and `test`.
fn always_scenario() -> (PolicySet, Value) {
    let set = policies(&format!("{ALWAYS}---\n{NOTIFY}"));
    let object = taskrun(json!([
        {"name": "build", "image": "go"},
        {"name": "lint", "image": "go", "onError": "continue"},
        {"name": "test", "image": "go"}
    ]));
    (set, object)
}
