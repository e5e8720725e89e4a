//! Breaker round 34: inputs that defeat the Pod backstop's claim "each org step is a container
//! in the Pod exactly as bookend would inject it, `postStepsRun: Always` semantics included".
//! Each test asserts what the claim requires; those that failed are ignored with `BREAK:` and
//! the input that breaks it until fixed (the remote-Task `Always` ones: the Pod of a remote Task
//! is now compared one for one with bookend's composition of its own steps).

use serde_json::{Value, json};

use super::check_pod;
use crate::engine::inject::{Checked, Helper, helper_step};
use crate::engine::tests::policies;
use crate::engine::{Catalog, Request, decide};
use crate::policy::{PolicySet, Settings};

/// A namespace-level `Always` policy (so it applies to remote Tasks too): a pre-step that must
/// succeed before the author's steps, a post-step that must run whatever they do.
const ALWAYS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  postStepsRun: Always
  preSteps: [{name: bookend-scan, image: scan:1, command: [/scan]}]
  postSteps: [{name: bookend-sbom, image: syft:1, command: [/syft], args: [dir:/workspace]}]
"#;

fn set() -> PolicySet {
    policies(ALWAYS)
}

/// The steps bookend composes for an inline TaskRun with the author's one step `build`.
fn composed() -> Vec<Value> {
    let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1"},
        "spec": {"taskSpec": {"steps": [{"name": "build", "image": "golang", "command": ["go", "build"]}]}}});
    let request = Request {
        object: &taskrun,
        namespace: "team-a",
        dry_run: false,
    };
    let admitted = decide(request, &set(), &Catalog::default()).object;
    admitted["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .clone()
}

/// A TaskRun whose Task a resolver fetches: the Pod check has no steps to compose against.
fn remote() -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1"},
        "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}})
}

/// The Pod Tekton's controller builds from `steps` (a resolved Task's, as the author wrote it).
fn pod(steps: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "run-1-pod", "namespace": "team-a", "labels": {"tekton.dev/taskRun": "run-1"}},
        "spec": crate::tekton_pod::pod_spec(steps, &[])})
}

fn named<'v>(steps: &'v [Value], name: &str) -> &'v Value {
    steps.iter().find(|s| s["name"] == name).unwrap()
}

fn gate_when(gate: &str) -> Value {
    json!({"input": format!("$(steps.{gate}.results.ok)"), "operator": "in", "values": ["true"]})
}

/// A gate exactly as bookend writes its helpers, but one that always writes `false`: it reads
/// the result of a "previous gate" at index 99, which no step has (a missing file reads empty).
fn gate_that_says_false(name: &str) -> Value {
    helper_step(
        &Settings::default(),
        name,
        &Helper::Gate {
            previous: Some((99, "bookend-gate-99".to_owned())),
            checks: Vec::<Checked>::new(),
        },
    )
}

#[test]
fn bookends_own_composition_passes_as_a_remote_tasks_pod() {
    // The baseline the breaks below depart from: the Pod check admits what bookend writes.
    let steps = composed();
    let names: Vec<&str> = steps.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "bookend-scan",
            "bookend-gate-1",
            "build",
            "bookend-sbom",
            "bookend-verdict"
        ]
    );
    assert_eq!(
        check_pod(&pod(&steps), &remote(), &set(), &Catalog::default()),
        Ok(Vec::new())
    );
}

#[test]
fn a_pre_step_whose_failure_nothing_reads_is_refused() {
    // The author's resolved Task (the dry-run mutation skipped): bookend's `continue` on the
    // pre-step, but neither the gate that keeps `build` from running after a failed scan nor
    // the verdict that fails the TaskRun.
    let steps = composed();
    let scan = named(&steps, "bookend-scan").clone();
    assert_eq!(scan["onError"], "continue");
    let authored = vec![
        scan,
        json!({"name": "build", "image": "golang", "command": ["go", "build"]}),
        named(&steps, "bookend-sbom").clone(),
    ];
    let verdict = check_pod(&pod(&authored), &remote(), &set(), &Catalog::default());
    assert!(
        verdict.is_err(),
        "a Pod where a failed bookend-scan neither stops build nor fails the TaskRun was admitted"
    );
}

#[test]
fn org_steps_conditional_on_a_gate_that_always_says_false_are_refused() {
    let steps = composed();
    let when = json!([gate_when("bookend-gate-1")]);
    let mut scan = named(&steps, "bookend-scan").clone();
    scan["when"] = when.clone();
    let mut sbom = named(&steps, "bookend-sbom").clone();
    sbom["when"] = when.clone();
    let authored = vec![
        gate_that_says_false("bookend-gate-1"),
        scan,
        json!({"name": "build", "image": "golang", "command": ["go", "build"], "when": when}),
        sbom,
    ];
    let verdict = check_pod(&pod(&authored), &remote(), &set(), &Catalog::default());
    assert!(
        verdict.is_err(),
        "a Pod whose org steps are all skipped by the author's gate was admitted"
    );
}

#[test]
fn an_always_post_step_carries_no_gate_condition() {
    // bookend's own composition, with one change: its gate's condition also on the Always
    // post-step, so a failed `build` skips `bookend-sbom` (and the verdict still fails the
    // run, but the post-step that should run "whatever happens" did not).
    let mut steps = composed();
    let sbom = steps
        .iter()
        .position(|s| s["name"] == "bookend-sbom")
        .unwrap();
    steps[sbom]["when"] = json!([gate_when("bookend-gate-1")]);
    let verdict = check_pod(&pod(&steps), &remote(), &set(), &Catalog::default());
    assert!(
        verdict.is_err(),
        "an Always post-step gated on the author's step's success was admitted"
    );
}

#[test]
fn the_last_always_post_step_keeps_stop_and_fail() {
    let mut steps = composed();
    let sbom = steps
        .iter()
        .position(|s| s["name"] == "bookend-sbom")
        .unwrap();
    assert!(steps[sbom].get("onError").is_none());
    steps[sbom]["onError"] = json!("continue");
    let verdict = check_pod(&pod(&steps), &remote(), &set(), &Catalog::default());
    assert!(
        verdict.is_err(),
        "bookend-sbom with onError: continue (its failure ignored) was admitted"
    );
}

#[test]
#[ignore = "BREAK (availability): a policy updated (not re-created) between a TaskRun's admission and its Pod (a pending TaskRun, a retry's new Pod) makes the Pod check refuse the TaskRun bookend itself admitted"]
fn a_policy_updated_after_admission_does_not_refuse_the_pod_of_a_taskrun_it_admitted() {
    // Admitted under the policy as it was; the policy keeps its creationTimestamp when the
    // platform updates its image tag.
    let stamped = ALWAYS.replace(
        "metadata: {name: org}",
        "metadata: {name: org, creationTimestamp: \"2026-01-01T00:00:00Z\"}",
    );
    let before = policies(&stamped);
    let after = policies(&stamped.replace("scan:1", "scan:2"));
    let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1",
                     "creationTimestamp": "2026-06-01T00:00:00Z"},
        "spec": {"status": "TaskRunPending",
                 "taskSpec": {"steps": [{"name": "build", "image": "golang", "command": ["go", "build"]}]}}});
    let request = Request {
        object: &taskrun,
        namespace: "team-a",
        dry_run: false,
    };
    let mut admitted = decide(request, &before, &Catalog::default()).object;
    admitted["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    let steps = admitted["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .clone();
    let pod = pod(&steps);
    assert_eq!(
        check_pod(&pod, &admitted, &before, &Catalog::default()),
        Ok(Vec::new())
    );
    // The platform updates the policy; the TaskRun leaves pending and Tekton builds its Pod
    // from the spec bookend admitted.
    let verdict = check_pod(&pod, &admitted, &after, &Catalog::default());
    assert!(verdict.is_ok(), "{verdict:?}");
}

#[test]
fn a_remote_tasks_pod_under_always_carries_bookends_always_changes() {
    let set = set();
    let def = |name: &str| {
        set.policies()[0]
            .pre_steps
            .iter()
            .chain(&set.policies()[0].post_steps)
            .find(|s| s["name"] == name)
            .unwrap()
            .clone()
    };
    // What bookend would write under `OnSuccess`: the author's resolved Task as written.
    let authored = vec![
        def("bookend-scan"),
        json!({"name": "build", "image": "golang", "command": ["go", "build"]}),
        def("bookend-sbom"),
    ];
    let verdict = check_pod(&pod(&authored), &remote(), &set, &Catalog::default());
    assert!(
        verdict.is_err(),
        "a Pod where a failing build skips the Always post-step was admitted"
    );
}

#[test]
fn a_helper_that_stops_the_chain_before_the_always_post_step_is_refused() {
    let mut steps = composed();
    let sbom = steps
        .iter()
        .position(|s| s["name"] == "bookend-sbom")
        .unwrap();
    let failing = helper_step(
        &Settings::default(),
        "bookend-verdict",
        &Helper::Verdict {
            checks: vec![Checked {
                index: 99,
                container: "step-nothing".to_owned(),
            }],
        },
    );
    // bookend's own composition, its verdict moved before the Always post-step and made to fail.
    steps.retain(|s| s["name"] != "bookend-verdict");
    steps.insert(sbom, failing);
    let verdict = check_pod(&pod(&steps), &remote(), &set(), &Catalog::default());
    assert!(
        verdict.is_err(),
        "a failing verdict-shaped step before bookend-sbom was admitted"
    );
}

#[test]
fn a_param_the_taskrun_sets_after_the_dry_run_does_not_take_always_away() {
    let set = set();
    // The author's Task, as the resolver returns it and Tekton's controller dry-run-creates it.
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"params": [{"name": "mode", "type": "string", "default": "continue"}],
                 "steps": [{"name": "build", "image": "golang", "command": ["go", "build"],
                            "onError": "$(params.mode)"}]}});
    let request = Request {
        object: &task,
        namespace: "team-a",
        dry_run: true,
    };
    let refused = crate::engine::resolved::decide_resolved_task(request, &set, &Catalog::default());
    assert_eq!(refused.outcome, crate::engine::Outcome::Denied);
    // What the dry-run wrote before it refused such a Task: the default taken for the value.
    let mut literal = task.clone();
    literal["spec"]["steps"][0]["onError"] = json!("continue");
    let injected = crate::engine::resolved::decide_resolved_task(
        Request {
            object: &literal,
            namespace: "team-a",
            dry_run: true,
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(
        injected.outcome,
        crate::engine::Outcome::Mutated,
        "{:?}",
        injected.message
    );
    let mut steps = injected.object["spec"]["steps"].as_array().unwrap().clone();
    for step in &mut steps {
        if step["name"] == "build" {
            step["onError"] = json!("$(params.mode)");
        }
    }
    // The TaskRun's own value, which Tekton's controller substitutes before it builds the Pod.
    let mut taskrun = remote();
    taskrun["spec"]["params"] = json!([{"name": "mode", "value": "stopAndFail"}]);
    let substituted: Vec<Value> = serde_json::from_str(
        &serde_json::to_string(&steps)
            .unwrap()
            .replace("$(params.mode)", "stopAndFail"),
    )
    .unwrap();
    let verdict = check_pod(&pod(&substituted), &taskrun, &set, &Catalog::default());
    assert!(
        verdict.is_err(),
        "a Pod whose author step stops the chain before the Always post-step was admitted"
    );
}
