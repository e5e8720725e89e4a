//! Inputs shared by the benchmarks: the AdmissionReview fixture (grown to any number of steps),
//! generated policy sets of any size of which a handful match, and a catalog of Tasks.
//!
//! The TaskRun is created in namespace `team-a` by a PipelineRun. Of the generated policies,
//! these match it (the "handful"; `min(n, 3)` of them, in this order):
//!
//! 1. `org-credentials`: `namespaces: [team-*]`, one pre-step with a volume (like
//!    examples/policies/10-credentials.yaml);
//! 2. `org-sbom`: `namespaces: [team-*]`, two post-steps, `postStepsRun: Always` (gates and a
//!    verdict step are added);
//! 3. `StepPolicy/team-a/team-a-lint`: a StepPolicy in the TaskRun's namespace, one pre-step.
//!
//! Every other policy is a filler that does not match, in this mix (by index modulo 10):
//! 0-4 literal namespaces of other teams (`team-x{i}`), 5 StepPolicies in other teams'
//! namespaces, 6 prefix globs (`team-x{i}-*`), 7 suffix globs (`*-stage-{i}`), 8 TaskRun label
//! selectors (`app.kubernetes.io/name: svc-{i}`), 9 namespace label selectors
//! (`cost-center: cc-{i}`).

#![allow(dead_code)]

use bookend::engine::Catalog;
use bookend::policy::load::policy_set_from_objects;
use bookend::policy::{PolicySet, Settings};
use serde_json::{Value, json};

/// The real apiserver review of a PipelineRun-created TaskRun (see tests/fixtures/README.md).
pub const FIXTURE: &str =
    include_str!("../../tests/fixtures/admission-review-taskrun-pipeline.json");

/// The fixture as a JSON value.
pub fn review_value() -> Value {
    serde_json::from_str(FIXTURE).expect("fixture is JSON")
}

/// The fixture's TaskRun with `n` steps: the three original steps repeated, renamed
/// `clone-1`, `build-1`, `scan-1`, `clone-2`, ... (`n == 3` is the fixture as it is).
pub fn review_with_steps(n: usize) -> Value {
    let mut review = review_value();
    if n == 3 {
        return review;
    }
    let steps = review["request"]["object"]["spec"]["taskSpec"]["steps"]
        .as_array()
        .expect("fixture has steps")
        .clone();
    let grown: Vec<Value> = (0..n)
        .map(|i| {
            let mut step = steps[i % steps.len()].clone();
            let name = step["name"].as_str().expect("named step").to_owned();
            step["name"] = json!(format!("{name}-{}", i / steps.len() + 1));
            step
        })
        .collect();
    review["request"]["object"]["spec"]["taskSpec"]["steps"] = Value::Array(grown);
    review
}

/// The body bytes of [`review_with_steps`].
pub fn body_with_steps(n: usize) -> Vec<u8> {
    if n == 3 {
        return FIXTURE.as_bytes().to_vec();
    }
    serde_json::to_vec(&review_with_steps(n)).expect("serialises")
}

fn cluster(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "ClusterStepPolicy",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn namespaced(namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
}

fn one_step(step: &str) -> Value {
    json!([{
        "name": step,
        "image": "docker.io/library/busybox:1.37",
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo {step}")],
    }])
}

/// The policies that match the fixture's TaskRun.
fn matching() -> Vec<Value> {
    vec![
        cluster(
            "org-credentials",
            json!({
                "priority": 10,
                "match": {"namespaces": ["team-*"]},
                "preSteps": [{
                    "name": "bookend-credentials",
                    "image": "docker.io/library/busybox:1.37",
                    "command": ["/bin/sh", "-c"],
                    "args": ["mkdir -p \"$HOME/.docker\" && cp /bookend/registry/.dockerconfigjson \"$HOME/.docker/config.json\""],
                    "volumeMounts": [{"name": "bookend-registry", "mountPath": "/bookend/registry", "readOnly": true}],
                    "computeResources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
                }],
                "volumes": [{"name": "bookend-registry", "secret": {"secretName": "registry-credentials", "optional": true}}],
            }),
        ),
        cluster(
            "org-sbom",
            json!({
                "priority": 20,
                "postStepsRun": "Always",
                "match": {"namespaces": ["team-*"]},
                "postSteps": [
                    {"name": "bookend-sbom", "image": "docker.io/anchore/syft:v1.18.1",
                     "args": ["scan", "dir:/workspace", "--output", "spdx-json=/tekton/home/sbom.spdx.json"]},
                    {"name": "bookend-sbom-upload", "image": "docker.io/curlimages/curl:8.11.1",
                     "command": ["/bin/sh", "-c"],
                     "args": ["curl --fail -X PUT --data-binary @/tekton/home/sbom.spdx.json https://sbom.example.com/v1/$(context.taskRun.namespace)/$(context.taskRun.name)"],
                     "onError": "continue"},
                ],
            }),
        ),
        namespaced(
            "team-a",
            "team-a-lint",
            json!({"priority": 50, "preSteps": one_step("bookend-team-a-lint")}),
        ),
    ]
}

/// Filler policy `i`: never matches the fixture's TaskRun.
fn filler(i: usize) -> Value {
    let step = format!("bookend-f{i}");
    let base = json!({"priority": 100 + (i % 7) as i64, "preSteps": one_step(&step)});
    let with_match = |criteria: Value| {
        let mut spec = base.clone();
        spec["match"] = criteria;
        spec
    };
    let name = format!("filler-{i}");
    match i % 10 {
        0..=4 => cluster(
            &name,
            with_match(json!({"namespaces": [format!("team-x{i}")]})),
        ),
        5 => namespaced(&format!("team-x{i}"), &name, base),
        6 => cluster(
            &name,
            with_match(json!({"namespaces": [format!("team-x{i}-*")]})),
        ),
        7 => cluster(
            &name,
            with_match(json!({"namespaces": [format!("*-stage-{i}")]})),
        ),
        8 => cluster(
            &name,
            with_match(
                json!({"selector": {"matchLabels": {"app.kubernetes.io/name": format!("svc-{i}")}}}),
            ),
        ),
        _ => cluster(
            &name,
            with_match(
                json!({"namespaceSelector": {"matchLabels": {"cost-center": format!("cc-{i}")}}}),
            ),
        ),
    }
}

/// The policy objects of a set of `n`: `min(n, 3)` matching, the rest fillers.
pub fn policy_objects(n: usize) -> Vec<Value> {
    let mut out: Vec<Value> = matching().into_iter().take(n).collect();
    out.extend((0..n.saturating_sub(3)).map(filler));
    out
}

/// A compiled set of `n` policies.
pub fn policy_set(n: usize) -> PolicySet {
    let loaded = policy_set_from_objects("bench", &policy_objects(n), Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    assert_eq!(loaded.set.len(), n);
    loaded.set
}

/// A Task object `i` (three steps, a param, a workspace), as the webhook caches them.
pub fn task_object(i: usize) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {
            "name": format!("task-{i}"),
            "namespace": format!("team-x{}", i % 500),
            "resourceVersion": format!("{}", 100_000 + i),
            "labels": {"app.kubernetes.io/version": "0.9"},
        },
        "spec": {
            "params": [{"name": "url", "type": "string"}, {"name": "revision", "type": "string", "default": "main"}],
            "workspaces": [{"name": "source"}],
            "steps": [
                {"name": "clone", "image": "cgr.dev/chainguard/git:latest",
                 "script": "git clone $(params.url) $(workspaces.source.path) && git -C $(workspaces.source.path) checkout $(params.revision)"},
                {"name": "build", "image": "docker.io/library/golang:1.25", "workingDir": "$(workspaces.source.path)",
                 "command": ["go"], "args": ["build", "./..."],
                 "computeResources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "test", "image": "docker.io/library/golang:1.25", "workingDir": "$(workspaces.source.path)",
                 "command": ["go"], "args": ["test", "./..."]},
            ],
        },
    })
}

/// A catalog with the labels of `team-a` and `tasks` Task objects.
pub fn catalog(tasks: usize) -> Catalog {
    let mut catalog = Catalog::default();
    let mut objects = vec![json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a", "cost-center": "payments"}},
    })];
    objects.extend((0..tasks).map(task_object));
    let added = catalog.add_objects(&objects, "default");
    assert_eq!(added, tasks + 1);
    catalog
}

/// The fixture's TaskRun with its taskSpec moved into a Task `build` in `team-a`: the body
/// references it (`taskRef`), and the returned object is the Task for the catalog.
pub fn taskref_review() -> (Vec<u8>, Value) {
    let mut review = review_value();
    let spec = review["request"]["object"]["spec"]
        .as_object_mut()
        .expect("fixture has a spec");
    let task_spec = spec.remove("taskSpec").expect("fixture has a taskSpec");
    spec.insert(
        "taskRef".to_owned(),
        json!({"name": "build", "kind": "Task"}),
    );
    let task = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a", "resourceVersion": "4711"},
        "spec": task_spec,
    });
    (serde_json::to_vec(&review).expect("serialises"), task)
}

/// [`catalog`] plus `extra` objects.
pub fn catalog_with(tasks: usize, extra: &[Value]) -> Catalog {
    let mut catalog = catalog(tasks);
    assert_eq!(catalog.add_objects(extra, "default"), extra.len());
    catalog
}

/// The example policies (`examples/policies`: two Enforce policies on `team-*`, one on a
/// label, an Audit policy on PipelineRun TaskRuns), as `bookend serve` loads them by default.
pub fn example_policy_set() -> PolicySet {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies");
    let loaded = bookend::source::walk::policy_set(&[dir], Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// The fixture review carrying `object` (in `team-a`) instead of its TaskRun.
pub fn review_of(object: Value) -> Vec<u8> {
    let mut review = review_value();
    review["request"]["object"] = object;
    serde_json::to_vec(&review).expect("serialises")
}

/// `examples/taskruns/build.yaml`: the TaskRun the apiserver benchmark creates (a standalone
/// TaskRun in `team-a`, two steps).
pub fn build_taskrun() -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/taskruns/build.yaml");
    let text = std::fs::read_to_string(path).expect("examples/taskruns/build.yaml");
    bookend::policy::load::yaml_documents(&text)
        .expect("YAML")
        .remove(0)
}
