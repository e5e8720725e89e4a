//! Breaker round 34: inputs that defeat the post-run verification's claim "a policy's verdict
//! is `pass` only when each of its steps ran as bookend injected it and its pre-steps and
//! Always post-steps completed". Failing ones are ignored with `BREAK:`.

use serde_json::{Value, json};

use super::tests::{admitted_with, names};
use super::*;
use crate::engine::tests::{policies, run};
use crate::engine::{Catalog, Outcome};

const ALWAYS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: sbom, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  postStepsRun: Always
  preSteps: [{name: bookend-setup, image: alpine}]
  postSteps: [{name: bookend-sbom-upload, image: alpine}]
"#;

/// A step state as Tekton's `pkg/pod/status.go` writes it: `name` is the container's name
/// without `step-` (`TrimStepPrefix(s.Name)`), so a name Tekton shortened to 63 characters
/// stays shortened.
fn state(step: &str, exit: i64, termination: &str) -> Value {
    let container = crate::tekton::restrict_length(&format!("step-{step}"));
    json!({
        "name": container.strip_prefix("step-").unwrap(),
        "container": container,
        "terminated": {"exitCode": exit, "reason": if exit == 0 { "Completed" } else { "Error" },
                       "startedAt": "2026-02-01T10:00:00Z", "finishedAt": "2026-02-01T10:00:02Z"},
        "terminationReason": termination,
    })
}

fn condition(succeeded: bool, reason: &str) -> Value {
    json!([{"type": "Succeeded", "status": if succeeded { "True" } else { "False" },
            "reason": reason, "message": "ended"}])
}

fn verdict_of(set: &PolicySet, object: &Value, id: &str) -> RunVerdict {
    verify(object, set, &Catalog::default())
        .expect("a finished TaskRun is verified")
        .policies
        .into_iter()
        .find(|p| p.policy == id)
        .unwrap_or_else(|| panic!("no verdict for {id}"))
        .verdict
}

#[test]
fn an_earlier_attempt_without_the_always_post_step_is_not_a_pass() {
    let set = policies(ALWAYS);
    // The author asks for one retry; their step times out on the first attempt only
    // (`$(context.task.retry-count)` tells it which attempt it is), after doing its work.
    let mut object = admitted_with(&set, json!({"retries": 1}));
    let names = names(&object);
    assert_eq!(
        names,
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-sbom-upload",
            "bookend-verdict"
        ]
    );
    let first_attempt: Vec<Value> = vec![
        state("bookend-setup", 0, "Completed"),
        state("bookend-gate-1", 0, "Completed"),
        state("build", 1, "TimeoutExceeded"),
        state("bookend-sbom-upload", 0, "Skipped"),
        state("bookend-verdict", 0, "Skipped"),
    ];
    let last_attempt: Vec<Value> = names.iter().map(|n| state(n, 0, "Completed")).collect();
    // As `retryTaskRun` archives the first attempt's status, then the second attempt finishes.
    object["status"] = json!({
        "conditions": condition(true, "Succeeded"),
        "steps": last_attempt,
        "retriesStatus": [{"conditions": condition(false, "Failed"), "steps": first_attempt}],
    });
    let verdict = verdict_of(&set, &object, "ClusterStepPolicy/sbom");
    assert!(
        matches!(verdict, RunVerdict::Fail(_)),
        "the first attempt ran build without bookend-sbom-upload"
    );
}

#[test]
fn a_remote_task_whose_taskrun_param_took_always_away_fails() {
    // The dry-run saw `onError: $(params.mode)` with its default `continue`; the TaskRun passed
    // `stopAndFail`, the author's step failed and stopped the chain: the Always post-step
    // never ran. Verification reads the Task that ran (substituted) and must say `fail`.
    let set = policies(ALWAYS);
    let d = run(
        &set,
        &json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"generateName": "run-", "namespace": "team-a"},
                "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]},
                         "params": [{"name": "mode", "value": "stopAndFail"}]}}),
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    let mut object = d.object;
    object["metadata"]["name"] = json!("run-1");
    object["metadata"]["creationTimestamp"] = json!("2026-02-01T10:00:00Z");
    let dry_run = |task: &Value| {
        crate::engine::decide_resolved_task(
            crate::engine::Request {
                object: task,
                namespace: "team-a",
                dry_run: true,
            },
            &set,
            &Catalog::default(),
        )
    };
    let mut task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"params": [{"name": "mode", "type": "string", "default": "continue"}],
                 "steps": [{"name": "build", "image": "go", "onError": "$(params.mode)"}]}});
    // The dry-run now refuses the Task: it cannot know the TaskRun's value.
    let refused = dry_run(&task);
    assert_eq!(refused.outcome, Outcome::Denied);
    assert!(
        refused.message.as_deref().is_some_and(
            |m| m.contains("spec.steps[0].onError") && m.contains("write onError literally")
        ),
        "{:?}",
        refused.message
    );
    // What bookend's dry-run wrote before it refused such a Task (the default, `continue`,
    // taken for the value): verification of a TaskRun admitted then must still say `fail`.
    task["spec"]["steps"][0]["onError"] = json!("continue");
    let resolved = dry_run(&task);
    assert_eq!(resolved.outcome, Outcome::Mutated, "{:?}", resolved.message);
    let mut ran = resolved.object["spec"].clone();
    for step in ran["steps"].as_array_mut().unwrap() {
        if step["name"] == "build" {
            step["onError"] = json!("$(params.mode)");
        }
    }
    // As Tekton's controller stores it: params and step result paths substituted.
    for step in ran["steps"].as_array_mut().unwrap() {
        let name = step["name"].as_str().unwrap().to_owned();
        let text = step
            .to_string()
            .replace("$(params.mode)", "stopAndFail")
            .replace(
                "$(step.results.ok.path)",
                &format!("/tekton/steps/step-{name}/results/ok"),
            );
        *step = serde_json::from_str(&text).unwrap();
    }
    let names: Vec<String> = ran["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    let steps: Vec<Value> = names
        .iter()
        .map(|n| match n.as_str() {
            "bookend-scan" | "bookend-setup" => state(n, 0, "Completed"),
            "build" => state(n, 1, "Error"),
            _ if n.starts_with("bookend-gate") => state(n, 0, "Completed"),
            _ => state(n, 0, "Skipped"),
        })
        .collect();
    object["status"] =
        json!({"conditions": condition(false, "Failed"), "steps": steps, "taskSpec": ran});
    assert!(matches!(
        verdict_of(&set, &object, "ClusterStepPolicy/sbom"),
        RunVerdict::Fail(_)
    ));
}

#[test]
#[ignore = "OPEN (defence in depth only): verification does not compare status.steps[].imageID with the org step's image; the Pod Tekton adopted by name that made this reachable is refused by the Pod backstop since breaker round 34 (admission::pods::breaker34), and a tag-only policy image (this one: alpine) cannot be compared with the digest a step ran"]
fn steps_that_ran_another_image_are_not_the_org_steps() {
    let set = policies(ALWAYS);
    let mut object = admitted_with(&set, json!({}));
    let steps: Vec<Value> = names(&object)
        .iter()
        .map(|n| {
            let mut s = state(n, 0, "Completed");
            // What the kubelet reports for the author's container, which Tekton copies.
            s["imageID"] = json!(format!(
                "docker.io/library/busybox@sha256:{}",
                "1".repeat(64)
            ));
            s
        })
        .collect();
    object["status"] = json!({"conditions": condition(true, "Succeeded"),
                              "podName": "run-1-pod", "steps": steps});
    assert!(
        matches!(
            verdict_of(&set, &object, "ClusterStepPolicy/sbom"),
            RunVerdict::Fail(_)
        ),
        "bookend-setup and bookend-sbom-upload never ran their image (alpine)"
    );
}
