use serde_json::{Value, json};

use super::*;
use crate::engine::tests::{policies, run, taskrun};
use crate::engine::{Catalog, Outcome};

/// An Always policy (pre-step and post-step) and an OnSuccess one (post-step only).
const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: sbom, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  priority: 1
  postStepsRun: Always
  preSteps: [{name: bookend-setup, image: alpine}]
  postSteps: [{name: bookend-sbom-upload, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: notify, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  priority: 2
  postSteps: [{name: bookend-notify, image: alpine}]
"#;

/// The TaskRun admission gives for one user step `build`, named and stamped as the API server
/// stores it.
fn admitted(set: &PolicySet) -> Value {
    admitted_with(set, json!({}))
}

/// [`admitted`], with `spec_extra`'s fields set in the TaskRun's spec before admission.
pub(super) fn admitted_with(set: &PolicySet, spec_extra: Value) -> Value {
    let mut object = taskrun(json!([{"name": "build", "image": "go"}]));
    for (k, v) in spec_extra.as_object().into_iter().flatten() {
        object["spec"][k] = v.clone();
    }
    let d = run(set, &object);
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    let mut object = d.object;
    object["metadata"]["name"] = json!("run-1");
    object["metadata"]["creationTimestamp"] = json!("2026-02-01T10:00:00Z");
    object
}

pub(super) fn names(object: &Value) -> Vec<String> {
    object["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

/// A step state: `ran` seconds from 10:00:00, with this exit code and reasons.
fn state(name: &str, exit: i64, container_reason: &str, termination: &str, ran: u32) -> Value {
    json!({
        "name": name,
        "container": format!("step-{name}"),
        "terminated": {
            "exitCode": exit,
            "reason": container_reason,
            "startedAt": "2026-02-01T10:00:00Z",
            "finishedAt": format!("2026-02-01T10:00:{ran:02}Z"),
        },
        "terminationReason": termination,
    })
}

fn completed(name: &str) -> Value {
    state(name, 0, "Completed", "Completed", 2)
}

fn skipped(name: &str) -> Value {
    state(name, 0, "Completed", "Skipped", 0)
}

/// The admitted TaskRun's steps: the pre-step and the first gate completed, `build` as given,
/// and every step after it as `later` makes it.
fn around_build(build: Value, later: impl Fn(&str) -> Value) -> Vec<Value> {
    let mut steps = vec![
        completed("bookend-setup"),
        completed("bookend-gate-1"),
        build,
    ];
    steps.extend(
        [
            "bookend-gate-2",
            "bookend-notify",
            "bookend-sbom-upload",
            "bookend-verdict",
        ]
        .map(later),
    );
    steps
}

/// The TaskRun finished with `steps` and the `Succeeded` condition.
fn finish(mut object: Value, succeeded: bool, reason: &str, steps: Vec<Value>) -> Value {
    object["status"] = json!({
        "conditions": [{
            "type": "Succeeded",
            "status": if succeeded { "True" } else { "False" },
            "reason": reason,
            "message": "ended",
        }],
        "steps": steps,
    });
    object
}

fn verified(set: &PolicySet, object: &Value) -> Verification {
    verify(object, set, &Catalog::default()).expect("a finished TaskRun is verified")
}

fn policy<'v>(v: &'v Verification, id: &str) -> &'v PolicyRun {
    v.policies
        .iter()
        .find(|p| p.policy == id)
        .unwrap_or_else(|| panic!("no {id} in {v:#?}"))
}

fn outcome_of(run: &PolicyRun, step: &str) -> StepOutcome {
    run.steps.iter().find(|s| s.name == step).unwrap().outcome
}

fn fail_reason(run: &PolicyRun) -> &str {
    match &run.verdict {
        RunVerdict::Fail(r) => r,
        RunVerdict::Pass | RunVerdict::Skip(_) => {
            panic!("{} did not fail: {run:#?}", run.policy)
        }
    }
}

#[test]
fn the_composition_is_what_verification_starts_from() {
    let set = policies(POLICIES);
    assert_eq!(
        names(&admitted(&set)),
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "bookend-notify",
            "bookend-sbom-upload",
            "bookend-verdict"
        ]
    );
}

#[test]
fn every_org_step_completed_passes_with_durations() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = names(&object).iter().map(|n| completed(n)).collect();
    let v = verified(&set, &finish(object, true, "Succeeded", steps));
    assert!(v.succeeded && v.by_composition);
    assert_eq!(v.policies.len(), 2);
    for p in &v.policies {
        assert_eq!(p.verdict, RunVerdict::Pass, "{p:#?}");
        assert_eq!(p.drift, None);
    }
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        sbom.steps
            .iter()
            .map(|s| (s.name.as_str(), s.place, s.outcome, s.duration_seconds))
            .collect::<Vec<_>>(),
        [
            (
                "bookend-setup",
                Place::Pre,
                StepOutcome::Completed,
                Some(2.0)
            ),
            (
                "bookend-sbom-upload",
                Place::Post,
                StepOutcome::Completed,
                Some(2.0)
            ),
        ]
    );
}

/// The steps of `POLICIES`' TaskRun whose user step `build` failed (exit 3, continued under
/// Always): the OnSuccess post-step skipped, the Always post-step ran, the verdict failed it.
fn failed_build_always_post_ran() -> Vec<Value> {
    vec![
        completed("bookend-setup"),
        completed("bookend-gate-1"),
        state("build", 3, "Completed", "Continued", 1),
        completed("bookend-gate-2"),
        skipped("bookend-notify"),
        completed("bookend-sbom-upload"),
        state("bookend-verdict", 1, "Error", "", 0),
    ]
}

#[test]
fn a_failing_user_step_with_always_post_steps_passes_and_the_taskrun_failed() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = failed_build_always_post_ran();
    let v = verified(&set, &finish(object, false, "StepFailed", steps));
    assert!(!v.succeeded);
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(sbom.verdict, RunVerdict::Pass);
    // The OnSuccess post-step is skipped after a failure, as its policy says.
    let notify = policy(&v, "ClusterStepPolicy/notify");
    assert_eq!(notify.verdict, RunVerdict::Pass);
    assert_eq!(outcome_of(notify, "bookend-notify"), StepOutcome::Skipped);
    assert_eq!(notify.steps[0].duration_seconds, None);
}

#[test]
fn a_user_step_timeout_skips_the_always_post_step_and_fails() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = around_build(state("build", 1, "Error", "TimeoutExceeded", 5), skipped);
    let v = verified(&set, &finish(object, false, "StepFailed", steps));
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        fail_reason(sbom),
        "org post-step bookend-sbom-upload did not run: step build timed out"
    );
    assert_eq!(
        outcome_of(sbom, "bookend-sbom-upload"),
        StepOutcome::Skipped
    );
    assert_eq!(
        policy(&v, "ClusterStepPolicy/notify").verdict,
        RunVerdict::Pass
    );
}

/// `object` after a retry: as Tekton's `retryTaskRun` archives an attempt (its whole status,
/// `retriesStatus` emptied) before the next attempt's status replaces the TaskRun's own.
fn archived(mut object: Value, earlier: Vec<Value>) -> Value {
    let attempts: Vec<Value> = earlier
        .into_iter()
        .map(|mut attempt| {
            attempt["status"]
                .as_object_mut()
                .unwrap()
                .remove("retriesStatus");
            attempt["status"].clone()
        })
        .collect();
    object["status"]["retriesStatus"] = json!(attempts);
    object
}

#[test]
fn an_earlier_attempt_that_skipped_the_always_post_step_fails_naming_the_attempt() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let timed_out = vec![
        completed("bookend-setup"),
        completed("bookend-gate-1"),
        state("build", 1, "Error", "TimeoutExceeded", 5),
        skipped("bookend-gate-2"),
        skipped("bookend-notify"),
        skipped("bookend-sbom-upload"),
        skipped("bookend-verdict"),
    ];
    let first = finish(object.clone(), false, "Failed", timed_out);
    let all: Vec<Value> = names(&object).iter().map(|n| completed(n)).collect();
    let second = finish(object.clone(), true, "Succeeded", all.clone());
    let third = finish(object, true, "Succeeded", all);
    let v = verified(&set, &archived(third, vec![first, second]));
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        fail_reason(sbom),
        "attempt 1 of 3: org post-step bookend-sbom-upload did not run: step build timed out"
    );
    assert_eq!(sbom.cause, Some(Cause::DidNotRun));
    // The steps reported are the last attempt's.
    assert_eq!(
        outcome_of(sbom, "bookend-sbom-upload"),
        StepOutcome::Completed
    );
    // An OnSuccess post-step skipped after a failure is what its policy says, in any attempt.
    assert_eq!(
        policy(&v, "ClusterStepPolicy/notify").verdict,
        RunVerdict::Pass
    );
}

#[test]
fn every_attempt_that_ran_the_org_steps_passes() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    // The author's step failed on the first attempt and the Always post-step still ran.
    let failed = failed_build_always_post_ran();
    let first = finish(object.clone(), false, "Failed", failed);
    let all: Vec<Value> = names(&object).iter().map(|n| completed(n)).collect();
    let last = finish(object, true, "Succeeded", all);
    let v = verified(&set, &archived(last, vec![first]));
    for run in &v.policies {
        assert_eq!(run.verdict, RunVerdict::Pass, "{run:#?}");
    }
}

#[test]
fn the_last_of_several_attempts_is_named_too() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let all: Vec<Value> = names(&object).iter().map(|n| completed(n)).collect();
    let first = finish(object.clone(), false, "Failed", all);
    let last = finish(object, false, "TaskRunTimeout", Vec::new());
    let v = verified(&set, &archived(last, vec![first]));
    assert!(
        fail_reason(policy(&v, "ClusterStepPolicy/sbom"))
            .starts_with("attempt 2 of 2: org pre-step bookend-setup did not run: "),
        "{v:#?}"
    );
}

/// As Tekton's controller leaves the steps when it stops the Pod (terminateStepsInPod).
fn stopped(name: &str, reason: &str) -> Value {
    json!({
        "name": name,
        "container": format!("step-{name}"),
        "terminated": {
            "exitCode": 1,
            "reason": reason,
            "startedAt": "2026-02-01T10:00:00Z",
            "finishedAt": "2026-02-01T10:01:00Z",
        },
        "terminationReason": reason,
    })
}

#[test]
fn a_taskrun_timeout_names_the_step_it_stopped_or_the_failure_before_it() {
    let cases = [
        (
            stopped("build", "TaskRunTimeout"),
            "the TaskRun timed out during step build",
        ),
        // Tekton before v0.64 does not end the TaskRun on an OOM kill: the later steps wait for
        // the killed step's post file until the TaskRun's timeout, and the controller then
        // terminates each with `TaskRunTimeout` (terminateStepsInPod), as v0.62.3 wrote in
        // runtime scenario 18. The first of them was waiting, not running.
        (
            state("build", 137, "OOMKilled", "OOMKilled", 4),
            "step build failed (it was OOMKilled (exit code 137))",
        ),
    ];
    for (build, cause) in cases {
        let set = policies(POLICIES);
        let object = admitted(&set);
        let steps = around_build(build, |name| stopped(name, "TaskRunTimeout"));
        let v = verified(&set, &finish(object, false, "TaskRunTimeout", steps));
        let sbom = policy(&v, "ClusterStepPolicy/sbom");
        assert_eq!(
            fail_reason(sbom),
            format!("org post-step bookend-sbom-upload did not run: {cause}")
        );
        assert_eq!(
            outcome_of(sbom, "bookend-sbom-upload"),
            StepOutcome::NeverStarted
        );
        assert_eq!(outcome_of(sbom, "bookend-setup"), StepOutcome::Completed);
        // OnSuccess: nothing before it succeeded to the end, so not running is what it says.
        let notify = policy(&v, "ClusterStepPolicy/notify");
        assert_eq!(
            outcome_of(notify, "bookend-notify"),
            StepOutcome::NeverStarted,
            "{cause}"
        );
        assert_eq!(notify.verdict, RunVerdict::Pass);
    }
}

#[test]
fn a_taskrun_timeout_in_an_org_step_says_it_did_not_finish() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let mut steps: Vec<Value> = names(&object)
        .iter()
        .map(|n| stopped(n, "TaskRunTimeout"))
        .collect();
    steps[0] = stopped("bookend-setup", "TaskRunTimeout");
    let v = verified(&set, &finish(object, false, "TaskRunTimeout", steps));
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(outcome_of(sbom, "bookend-setup"), StepOutcome::TimedOut);
    assert_eq!(
        fail_reason(sbom),
        "org pre-step bookend-setup did not finish: the TaskRun timed out during step bookend-setup; \
         org post-step bookend-sbom-upload did not run: the TaskRun timed out during step bookend-setup"
    );
}

#[test]
fn a_cancellation_fails_with_its_reason() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = vec![
        completed("bookend-setup"),
        completed("bookend-gate-1"),
        completed("build"),
        completed("bookend-gate-2"),
        stopped("bookend-notify", "TaskRunCancelled"),
        stopped("bookend-sbom-upload", "TaskRunCancelled"),
        stopped("bookend-verdict", "TaskRunCancelled"),
    ];
    let v = verified(&set, &finish(object, false, "TaskRunCancelled", steps));
    let notify = policy(&v, "ClusterStepPolicy/notify");
    assert_eq!(outcome_of(notify, "bookend-notify"), StepOutcome::Cancelled);
    assert_eq!(
        fail_reason(notify),
        "org post-step bookend-notify did not finish: the TaskRun was cancelled during step bookend-notify"
    );
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        fail_reason(sbom),
        "org post-step bookend-sbom-upload did not run: the TaskRun was cancelled during step bookend-notify"
    );
}

#[test]
fn an_oom_kill_fails_the_always_post_step_naming_the_step() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    // The killed step writes no post file: the later steps were still waiting when the
    // TaskRun failed (StepOOM).
    let waiting =
        |name: &str| json!({"name": name, "container": format!("step-{name}"), "running": {}});
    let steps = around_build(state("build", 137, "OOMKilled", "OOMKilled", 4), waiting);
    let v = verified(&set, &finish(object, false, "StepOOM", steps));
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        fail_reason(sbom),
        "org post-step bookend-sbom-upload did not run: step build failed (it was OOMKilled (exit code 137))"
    );
    assert_eq!(
        outcome_of(sbom, "bookend-sbom-upload"),
        StepOutcome::NeverStarted
    );
}

#[test]
fn a_failing_org_step_fails_its_policy_with_the_exit_code() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = vec![
        state("bookend-setup", 7, "Completed", "Continued", 1),
        completed("bookend-gate-1"),
        skipped("build"),
        completed("bookend-gate-2"),
        skipped("bookend-notify"),
        state("bookend-sbom-upload", 2, "Error", "", 1),
        state("bookend-verdict", 1, "Error", "", 0),
    ];
    let v = verified(&set, &finish(object, false, "StepFailed", steps));
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(outcome_of(sbom, "bookend-setup"), StepOutcome::Continued);
    assert_eq!(sbom.steps[0].exit_code, Some(7));
    assert_eq!(
        fail_reason(sbom),
        "org pre-step bookend-setup failed: exit code 7; org post-step bookend-sbom-upload failed: exit code 2"
    );
}

#[test]
fn a_taskrun_whose_pod_never_ran_fails_with_the_taskruns_reason() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let mut v = finish(object, false, "PodCreationFailed", Vec::new());
    v["status"]["conditions"][0]["message"] = json!("serviceaccounts \"x\" not found");
    let v = verified(&set, &v);
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert!(
        fail_reason(sbom).starts_with(
            "org pre-step bookend-setup did not run: the TaskRun ended with PodCreationFailed: serviceaccounts"
        ),
        "{sbom:#?}"
    );
    assert!(
        sbom.steps
            .iter()
            .all(|s| s.outcome == StepOutcome::NeverStarted)
    );
}

#[test]
fn an_unfinished_taskrun_is_not_verified() {
    let set = policies(POLICIES);
    let mut object = admitted(&set);
    assert!(verify(&object, &set, &Catalog::default()).is_none());
    object["status"] = json!({"conditions": [{"type": "Succeeded", "status": "Unknown"}]});
    assert!(!is_finished(&object));
    assert!(verify(&object, &set, &Catalog::default()).is_none());
}

#[test]
fn a_policy_changed_since_admission_is_drift_and_still_verified_by_the_record() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = names(&object).iter().map(|n| completed(n)).collect();
    let object = finish(object, true, "Succeeded", steps);
    let changed = policies(&POLICIES.replace("image: alpine}]\n---", "image: alpine:3}]\n---"));
    let v = verified(&changed, &object);
    assert!(!v.by_composition);
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert!(
        matches!(&sbom.drift, Some(Drift::Changed { recorded, current }) if recorded != current),
        "{sbom:#?}"
    );
    assert_eq!(sbom.verdict, RunVerdict::Pass);
    assert_eq!(
        sbom.steps.iter().map(|s| s.place).collect::<Vec<_>>(),
        [Place::Pre, Place::Post]
    );
    // A deleted policy is drift too; its recorded steps are still verified.
    let only_notify = policies(POLICIES.split("---").nth(1).unwrap());
    let v = verified(&only_notify, &object);
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(sbom.drift, Some(Drift::Gone));
    assert_eq!(sbom.steps.len(), 2);
}

#[test]
fn editing_the_record_after_admission_hides_no_policy() {
    let set = policies(POLICIES);
    let mut object = admitted(&set);
    let steps = vec![
        completed("bookend-setup"),
        completed("bookend-gate-1"),
        state("build", 1, "Error", "TimeoutExceeded", 5),
        skipped("bookend-gate-2"),
        skipped("bookend-notify"),
        skipped("bookend-sbom-upload"),
        skipped("bookend-verdict"),
    ];
    object["metadata"]["annotations"][record::ANNOTATION] = json!(
        r#"{"policies":[{"policy":"ClusterStepPolicy/notify","hash":"x","steps":["bookend-notify"]}]}"#
    );
    let v = verified(
        &set,
        &finish(object.clone(), false, "StepFailed", steps.clone()),
    );
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert!(fail_reason(sbom).contains("bookend-sbom-upload did not run"));
    // No record at all: the same.
    object["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(record::ANNOTATION);
    let v = verified(&set, &finish(object, false, "StepFailed", steps));
    assert!(v.by_composition, "{v:#?}");
    assert!(fail_reason(policy(&v, "ClusterStepPolicy/sbom")).contains("did not run"));
}

#[test]
fn a_policy_created_after_the_taskrun_is_reported_not_ignored() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    let steps = names(&object).iter().map(|n| completed(n)).collect();
    let object = finish(object, true, "Succeeded", steps);
    let later = format!(
        "{POLICIES}---\n{}",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: later, creationTimestamp: "2026-03-01T00:00:00Z"}
spec:
  postSteps: [{name: bookend-later, image: alpine}]
"#
    );
    let v = verified(&policies(&later), &object);
    let run = policy(&v, "ClusterStepPolicy/later");
    assert_eq!(
        run.drift,
        Some(Drift::NotInjected {
            created_after: true
        })
    );
    assert_eq!(
        fail_reason(run),
        "org steps bookend-later did not run: the TaskRun was created before the policy existed; its steps were not injected"
    );
    assert_eq!(
        policy(&v, "ClusterStepPolicy/sbom").verdict,
        RunVerdict::Pass
    );
}

#[test]
fn outcome_labels_are_distinct() {
    let labels: std::collections::BTreeSet<_> =
        StepOutcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(labels.len(), StepOutcome::ALL.len());
}

#[test]
fn admission_labels_what_verification_watches_and_only_that() {
    let set = policies(POLICIES);
    let object = admitted(&set);
    assert_eq!(
        object["metadata"]["labels"][record::LABEL],
        json!(record::LABEL_VALUE)
    );
    // The author's own value is overwritten: nobody opts out of verification by labelling.
    let mut opted_out = taskrun(json!([{"name": "build", "image": "go"}]));
    opted_out["metadata"]["labels"] = json!({record::LABEL: "false"});
    assert_eq!(
        run(&set, &opted_out).object["metadata"]["labels"][record::LABEL],
        json!("true")
    );
    // A TaskRun no policy applies to keeps no record and no label, even one its author wrote.
    let none = policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: elsewhere}\nspec:\n  match: {namespaces: [other]}\n  preSteps: [{name: bookend-x, image: alpine}]\n",
    );
    let mut forged = taskrun(json!([{"name": "build", "image": "go"}]));
    forged["metadata"]["labels"] = json!({record::LABEL: "true", "team": "a"});
    forged["metadata"]["annotations"] = json!({record::ANNOTATION: "{\"policies\":[]}"});
    let d = run(&none, &forged);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert_eq!(d.object["metadata"]["labels"], json!({"team": "a"}));
    assert_eq!(d.object["metadata"]["annotations"], json!({}));
    // The verified mark, or the label alone, written at CREATE: dropped, whether a policy
    // applies or not; the patch the webhook sends says the same as the object.
    let verified =
        json!({record::VERIFIED_ANNOTATION: "{\"ClusterStepPolicy/sbom\":\"pass\"}", "note": "x"});
    for (set, injected) in [(&set, true), (&none, false)] {
        let mut marked = taskrun(json!([{"name": "build", "image": "go"}]));
        marked["metadata"]["labels"] = json!({record::LABEL: "true"});
        marked["metadata"]["annotations"] = verified.clone();
        let d = run(set, &marked);
        assert_eq!(d.outcome, Outcome::Mutated);
        assert_eq!(
            d.object["metadata"]["annotations"].get(record::VERIFIED_ANNOTATION),
            None
        );
        assert_eq!(d.object["metadata"]["annotations"]["note"], json!("x"));
        assert_eq!(
            d.object["metadata"]["labels"].get(record::LABEL).is_some(),
            injected
        );
        let metadata = |ops: &[crate::patch::Operation]| -> Vec<crate::patch::Operation> {
            ops.iter()
                .filter(|op| op.path().starts_with("/metadata"))
                .cloned()
                .collect()
        };
        assert_eq!(
            metadata(&d.patch),
            metadata(&crate::patch::diff(&marked, &d.object))
        );
        if !injected {
            assert!(d.injected.is_empty(), "nothing injected: {:?}", d.injected);
        }
    }
}

#[test]
fn a_record_naming_policies_that_cannot_apply_there_is_out_of_reach() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: teams}
spec:
  match: {namespaces: [team-*]}
  preSteps: [{name: bookend-teams, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: labelled}
spec:
  match: {selector: {matchLabels: {app: a}}}
  preSteps: [{name: bookend-labelled, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: own, namespace: team-a}
spec:
  preSteps: [{name: bookend-own, image: alpine}]
"#,
    );
    let mut object = taskrun(json!([{"name": "build", "image": "go"}]));
    object["metadata"]["labels"] = json!({"app": "a"});
    let admitted = run(&set, &object).object;
    let out = |object: &Value| policies_out_of_reach(object, &set, &Catalog::default());
    // Where bookend's admission wrote the record: every policy applies.
    assert!(out(&admitted).is_empty(), "{admitted}");
    // The same record on a TaskRun in a namespace the policies do not cover (created where
    // the webhooks do not run, the record copied in).
    let mut elsewhere = admitted.clone();
    elsewhere["metadata"]["namespace"] = json!("kube-system");
    assert_eq!(
        out(&elsewhere),
        ["ClusterStepPolicy/teams", "StepPolicy/team-a/own"]
    );
    // The author changing the TaskRun's labels after CREATE switches nothing off.
    let mut relabelled = admitted.clone();
    relabelled["metadata"]["labels"] = json!({"bookend.dev/verify": "true"});
    assert!(out(&relabelled).is_empty());
    // No record, an unreadable one: nothing to say.
    assert!(out(&object).is_empty());
}

/// A hermetic Always policy, and the TaskRun's one step `build` as admission gives it.
const JAIL: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: jail, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  postStepsRun: Always
  userSteps: {network: None}
  preSteps: [{name: bookend-fetch, image: alpine}]
  postSteps: [{name: bookend-publish, image: alpine}]
"#;

/// Every step completed up to `build`, which ends as `build_state`; the rest skipped, as
/// Tekton's entrypoint skips them after a step that wrote its `.err` post file.
fn jailed_run(set: &PolicySet, build_state: Value, reason: &str) -> Verification {
    jailed_run_at(set, "build", build_state, reason)
}

/// [`jailed_run`] where step `at` ends as `state`.
fn jailed_run_at(set: &PolicySet, at: &str, build_state: Value, reason: &str) -> Verification {
    let object = admitted(set);
    let names = names(&object);
    let build = names.iter().position(|n| n == at).unwrap();
    let steps = names
        .iter()
        .enumerate()
        .map(|(i, n)| match i.cmp(&build) {
            std::cmp::Ordering::Less => completed(n),
            std::cmp::Ordering::Equal => build_state.clone(),
            std::cmp::Ordering::Greater => skipped(n),
        })
        .collect();
    let mut object = finish(object, false, reason, steps);
    object["status"]["podName"] = json!("run-1-pod");
    verified(set, &object)
}

#[test]
fn a_jailed_step_that_could_not_start_fails_with_its_own_cause() {
    let set = policies(JAIL);
    // What Tekton v1.15 reports when its entrypoint cannot start the command in the jail
    // (runtime scenario 20: exit code 1, no `Continued` although the step has `continue`).
    let v = jailed_run(&set, state("build", 1, "Error", "Error", 0), "Failed");
    let jail = policy(&v, "ClusterStepPolicy/jail");
    assert_eq!(jail.cause, Some(Cause::HermeticJailFailed));
    assert_eq!(Cause::HermeticJailFailed.as_str(), "hermetic_jail_failed");
    let reason = fail_reason(jail);
    assert!(
        reason.contains("org post-step bookend-publish did not run: step build could not start in its hermetic jail"),
        "{reason}"
    );
    assert!(
        reason.contains("user step build could not start in Pod run-1-pod: the hermetic jail (userSteps.network: None) could not be set up"),
        "{reason}"
    );
}

#[test]
fn a_jailed_step_that_ran_and_failed_is_no_jail_failure() {
    let set = policies(JAIL);
    // It ran: under `continue` the entrypoint says `Continued`, the post-step ran.
    let mut object = admitted(&set);
    let steps = names(&object)
        .iter()
        .map(|n| {
            if n == "build" {
                state("build", 1, "Completed", "Continued", 1)
            } else {
                completed(n)
            }
        })
        .collect();
    object = finish(object, false, "Failed", steps);
    let v = verified(&set, &object);
    assert_eq!(
        policy(&v, "ClusterStepPolicy/jail").verdict,
        RunVerdict::Pass
    );
}

#[test]
fn without_continue_a_step_that_exits_1_after_the_jail_check_is_not_a_jail_failure() {
    // OnSuccess: the step keeps `stopAndFail`, and Tekton's status is the same as for a
    // command that exited 1; the jail check before it passed, so the node set the jail up.
    let set = policies(&JAIL.replace("postStepsRun: Always", "postStepsRun: OnSuccess"));
    let v = jailed_run(&set, state("build", 1, "Error", "Error", 0), "Failed");
    let jail = policy(&v, "ClusterStepPolicy/jail");
    assert_eq!(jail.verdict, RunVerdict::Pass, "{jail:#?}");
}

#[test]
fn a_jail_check_that_could_not_start_is_a_jail_failure_under_every_policy_kind() {
    for run in ["OnSuccess", "Always"] {
        let set = policies(&JAIL.replace("postStepsRun: Always", &format!("postStepsRun: {run}")));
        // What Tekton reports when its entrypoint cannot start the check's `:` in the jail
        // (runtime scenario 20, a node without user namespaces).
        let v = jailed_run_at(
            &set,
            "bookend-jail-check",
            state("bookend-jail-check", 1, "Error", "Error", 0),
            "Failed",
        );
        let jail = policy(&v, "ClusterStepPolicy/jail");
        assert_eq!(
            jail.cause,
            Some(Cause::HermeticJailFailed),
            "{run}: {jail:#?}"
        );
        let reason = fail_reason(jail);
        assert!(
            reason.contains("the hermetic jail (userSteps.network: None) could not be set up in Pod run-1-pod: bookend's step bookend-jail-check"),
            "{run}: {reason}"
        );
        // Said once, and the user step it kept from running is not blamed.
        assert_eq!(
            reason.matches("could not be set up in Pod").count(),
            1,
            "{run}: {reason}"
        );
        assert!(!reason.contains("user step build"), "{run}: {reason}");
        if run == "Always" {
            assert!(
                reason.contains("org post-step bookend-publish did not run: the hermetic jail could not be set up (step bookend-jail-check could not start)"),
                "{reason}"
            );
        }
    }
    // A jail check that ran is no failure: the author's step after it ran too.
    let set = policies(&JAIL.replace("postStepsRun: Always", "postStepsRun: OnSuccess"));
    let object = admitted(&set);
    let steps = names(&object).iter().map(|n| completed(n)).collect();
    let v = verified(&set, &finish(object, true, "Succeeded", steps));
    assert_eq!(
        policy(&v, "ClusterStepPolicy/jail").verdict,
        RunVerdict::Pass
    );
}

/// A TaskRun whose Task comes from a resolver, as admission marks it (record and label, no
/// steps), and the resolved Task's spec as Tekton's controller's dry-run returns it with the
/// policies' steps around `build`.
fn remote(set: &PolicySet) -> (Value, Value) {
    remote_with(set, json!({"steps": [{"name": "build", "image": "go"}]}))
}

/// [`remote`] with `task_spec` as the resolved Task's spec.
pub(crate) fn remote_with(set: &PolicySet, task_spec: Value) -> (Value, Value) {
    let d = run(
        set,
        &json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"generateName": "run-", "namespace": "team-a"},
                "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}}),
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    let mut object = d.object;
    object["metadata"]["name"] = json!("run-1");
    object["metadata"]["creationTimestamp"] = json!("2026-02-01T10:00:00Z");
    let resolved = crate::engine::tests::dry_run_task(set, task_spec);
    assert_eq!(resolved.outcome, Outcome::Mutated, "{:?}", resolved.message);
    (object, as_tekton_stores(&resolved.object["spec"]))
}

/// A Task spec as Tekton's controller stores it in `status.taskSpec`: with the step result
/// paths substituted (the only variables bookend's helpers carry).
fn as_tekton_stores(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for (i, step) in spec["steps"].as_array_mut().unwrap().iter_mut().enumerate() {
        let container = crate::tekton::container_name(step, i);
        let text = step.to_string().replace(
            "$(step.results.ok.path)",
            &format!("/tekton/steps/{container}/results/ok"),
        );
        *step = serde_json::from_str(&text).unwrap();
    }
    spec
}

/// `object` finished, with `task_spec` as the Task that ran (`status.taskSpec`).
fn finish_remote(
    object: Value,
    task_spec: &Value,
    succeeded: bool,
    reason: &str,
    steps: Vec<Value>,
) -> Value {
    let mut object = finish(object, succeeded, reason, steps);
    object["status"]["taskSpec"] = task_spec.clone();
    object
}

/// Every step of `task_spec` completed.
fn all_completed(task_spec: &Value) -> Vec<Value> {
    step_names(task_spec).iter().map(|n| completed(n)).collect()
}

fn step_names(task_spec: &Value) -> Vec<String> {
    task_spec["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_remote_taskrun_is_verified_from_the_task_that_ran() {
    let set = policies(POLICIES);
    let (object, task_spec) = remote(&set);
    assert!(
        object["spec"]["taskSpec"].is_null(),
        "no steps at CREATE: {object}"
    );
    assert_eq!(
        object["metadata"]["labels"][record::LABEL],
        record::LABEL_VALUE
    );
    let names = step_names(&task_spec);
    assert_eq!(
        names,
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "bookend-notify",
            "bookend-sbom-upload",
            "bookend-verdict"
        ]
    );
    // Everything completed: a pass for both, by composing again.
    let steps = names.iter().map(|n| completed(n)).collect();
    let v = verified(
        &set,
        &finish_remote(object.clone(), &task_spec, true, "Succeeded", steps),
    );
    assert!(v.by_composition, "{v:#?}");
    for p in &v.policies {
        assert_eq!(p.verdict, RunVerdict::Pass, "{p:#?}");
    }
    assert_eq!(v.policies.len(), 2);

    // The user step timed out: the Always post-step did not run, a fail naming the step; the
    // OnSuccess one was rightly not run.
    let steps = names
        .iter()
        .map(|n| match n.as_str() {
            "bookend-setup" | "bookend-gate-1" => completed(n),
            "build" => state(n, 1, "Error", "TimeoutExceeded", 5),
            _ => skipped(n),
        })
        .collect();
    let v = verified(
        &set,
        &finish_remote(object, &task_spec, false, "Failed", steps),
    );
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert_eq!(
        fail_reason(sbom),
        "org post-step bookend-sbom-upload did not run: step build timed out"
    );
    assert_eq!(
        outcome_of(sbom, "bookend-sbom-upload"),
        StepOutcome::Skipped
    );
    assert_eq!(
        policy(&v, "ClusterStepPolicy/notify").verdict,
        RunVerdict::Pass
    );
}

/// The dry-run mutation did not happen (bookend unreachable then, its failurePolicy is
/// Ignore) and the Pod backstop did not stop the Pod (warn mode): the Task that ran is the
/// author's. Steps named like the org's in it are not the org's, and a record the author
/// cannot write says what should have been there.
#[test]
fn a_remote_task_without_the_org_steps_fails_whatever_its_steps_are_named() {
    let set = policies(POLICIES);
    let (object, _) = remote(&set);
    // The author's Task, unmutated.
    let bare = json!({"steps": [{"name": "build", "image": "go"}]});
    let v = verified(
        &set,
        &finish_remote(
            object.clone(),
            &bare,
            true,
            "Succeeded",
            vec![completed("build")],
        ),
    );
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert!(
        fail_reason(sbom).contains(
            "org step bookend-setup did not run: the Task that ran (status.taskSpec) does not carry it"
        ),
        "{sbom:#?}"
    );
    assert!(matches!(
        policy(&v, "ClusterStepPolicy/notify").verdict,
        RunVerdict::Fail(_)
    ));
    // The author's Task with look-alikes of every org step, all "completed".
    let fake = |name: &str| json!({"name": name, "image": "busybox", "script": "exit 0"});
    let forged = json!({"steps": [fake("bookend-setup"), {"name": "build", "image": "go"},
                                  fake("bookend-notify"), fake("bookend-sbom-upload")]});
    let steps = all_completed(&forged);
    let v = verified(
        &set,
        &finish_remote(object, &forged, true, "Succeeded", steps),
    );
    assert!(!v.by_composition);
    for p in &v.policies {
        let reason = fail_reason(p);
        assert!(
            reason.contains("carries a step of that name that is not the policy's"),
            "{reason}"
        );
        assert!(p.steps.is_empty(), "no step is the org's: {p:#?}");
    }
}

#[test]
fn a_remote_task_never_resolved_fails_with_the_taskruns_reason() {
    let set = policies(POLICIES);
    let (object, _) = remote(&set);
    let mut object = finish(object, false, "TaskRunResolutionFailed", vec![]);
    object["status"]["conditions"][0]["message"] = json!("error requesting remote resource");
    let v = verified(&set, &object);
    let sbom = policy(&v, "ClusterStepPolicy/sbom");
    assert!(
        fail_reason(sbom).starts_with(
            "org step bookend-setup did not run: its Task was never resolved into steps: the TaskRun ended with TaskRunResolutionFailed: error requesting remote resource"
        ),
        "{sbom:#?}"
    );
    assert_eq!(sbom.cause, Some(Cause::DidNotRun));
}

/// Policies that select by the TaskRun's labels never reach a resolved Task (the TaskRun's
/// admission skipped or refused them by their remoteTaskRef): a `skip` that says so, no cause,
/// and only where the policy applies to the TaskRun.
/// A policy changed between the TaskRun's CREATE and its resolution injected its new steps:
/// composing again with it finds them (drift reported, verdict from what ran).
#[test]
fn a_remote_taskrun_answers_only_for_the_policies_its_resolution_applies() {
    let labelled = format!(
        "{POLICIES}---\napiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {{name: labelled}}\nspec:\n  match: {{selector: {{matchLabels: {{team: a}}}}}}\n  preSteps: [{{name: bookend-labelled, image: alpine}}]\n"
    );
    let set = policies(&labelled);
    let (mut object, task_spec) = remote(&set);
    object["metadata"]["labels"]["team"] = json!("a");
    let steps = all_completed(&task_spec);
    let v = verified(
        &set,
        &finish_remote(object.clone(), &task_spec, true, "Succeeded", steps),
    );
    assert_eq!(
        v.policies
            .iter()
            .map(|p| p.policy.as_str())
            .collect::<Vec<_>>(),
        [
            "ClusterStepPolicy/sbom",
            "ClusterStepPolicy/notify",
            "ClusterStepPolicy/labelled"
        ],
        "{v:#?}"
    );
    let labelled_run = policy(&v, "ClusterStepPolicy/labelled");
    let RunVerdict::Skip(why) = &labelled_run.verdict else {
        panic!("{labelled_run:#?}");
    };
    assert!(
        why.starts_with("org steps bookend-labelled were not injected")
            && why.contains("labels or origin")
            && why.contains("remoteTaskRef: Skip"),
        "{why}"
    );
    assert_eq!((labelled_run.cause, &labelled_run.drift), (None, &None));
    assert!(labelled_run.steps.is_empty());
    assert_eq!(
        policy(&v, "ClusterStepPolicy/sbom").verdict,
        RunVerdict::Pass
    );
    // Without the label the policy does not apply: no verdict at all.
    let mut unlabelled = object.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("team");
    let steps = all_completed(&task_spec);
    let v = verified(
        &set,
        &finish_remote(unlabelled, &task_spec, true, "Succeeded", steps),
    );
    assert!(
        !v.policies.iter().any(|p| p.policy.ends_with("labelled")),
        "{v:#?}"
    );
    // notify's spec changes after the TaskRun's CREATE, before its resolution.
    let changed = policies(&labelled.replace(
        "postSteps: [{name: bookend-notify, image: alpine}]",
        "postSteps: [{name: bookend-notify, image: alpine:3}]",
    ));
    let (_, new_spec) = remote(&changed);
    let steps = all_completed(&new_spec);
    let v = verified(
        &changed,
        &finish_remote(object, &new_spec, true, "Succeeded", steps),
    );
    let notify = policy(&v, "ClusterStepPolicy/notify");
    assert_eq!(notify.verdict, RunVerdict::Pass, "{notify:#?}");
    assert_eq!(notify.drift.as_ref().map(Drift::as_str), Some("changed"));
    assert!(v.by_composition);
}

/// Tekton's controller stores `status.taskSpec` after substituting its variables: bookend's
/// gates carry their result paths there. Composing again finds them, and only them.
#[test]
fn a_resolved_task_is_recognised_after_tektons_substitution() {
    let set = policies(POLICIES);
    let (object, ran) = remote(&set);
    assert!(
        ran.to_string()
            .contains("/tekton/steps/step-bookend-gate-1/results/ok"),
        "{ran}"
    );
    let steps = all_completed(&ran);
    let v = verified(
        &set,
        &finish_remote(object.clone(), &ran, true, "Succeeded", steps),
    );
    assert!(v.by_composition, "{v:#?}");
    assert!(
        v.policies.iter().all(|p| p.verdict == RunVerdict::Pass),
        "{v:#?}"
    );
    // A gate whose result goes elsewhere is not bookend's: nothing is the org's.
    let mut tampered = ran.clone();
    let gate = &mut tampered["steps"][1];
    assert_eq!(gate["name"], "bookend-gate-1");
    let text = gate
        .to_string()
        .replace("/tekton/steps/step-bookend-gate-1/results/ok", "/dev/null");
    *gate = serde_json::from_str(&text).unwrap();
    let steps = all_completed(&tampered);
    let v = verified(
        &set,
        &finish_remote(object, &tampered, true, "Succeeded", steps),
    );
    assert!(!v.by_composition);
    assert!(
        v.policies.iter().all(|p| p.verdict != RunVerdict::Pass),
        "{v:#?}"
    );
}
