//! `postStepsRun: Always`, as written: gates, `onError: continue`, the verdict, the user's
//! `when` and `onError`, index references, and the size of the gates.

use super::*;

#[test]
fn always_adds_gates_continue_and_a_verdict() {
    let set = policies(ALWAYS);
    let out = assert_converges(
        &set,
        &taskrun(json!([
            {"name": "build", "image": "go"},
            {"name": "lint", "image": "go", "onError": "continue"},
            {"name": "test", "image": "go"}
        ])),
    );
    assert_eq!(
        names(&out),
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "lint",
            "test",
            "bookend-report",
            "bookend-verdict"
        ]
    );
    let steps = steps_of(&out);
    // Guarded steps continue on error so the report still runs.
    assert_eq!(steps[0]["onError"], "continue");
    assert_eq!(steps[2]["onError"], "continue");
    assert_eq!(steps[5]["onError"], "continue");
    // lint was best effort already: it keeps its onError, is gated, and is not checked.
    assert_eq!(steps[4]["onError"], "continue");
    // Gate 2 checks setup and build; lint and test reuse it (lint added no must-succeed step).
    assert_gated_by(&steps[4], "bookend-gate-2");
    assert_gated_by(&steps[5], "bookend-gate-2");
    // Gates chain: gate 2 reads gate 1's result (gate 1 is step 1) and checks only what ran
    // since (build, step 2).
    assert_eq!(
        helper_script(&steps[1]),
        r#"cd /tekton/steps;until [ -s 0/exitCode ];do sleep 1;done;[ "$(cat 0/exitCode)" = 0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"#
    );
    assert_eq!(
        helper_script(&steps[3]),
        r#"cd /tekton/steps;until [ -s 2/exitCode ];do sleep 1;done;[ "$(cat 1/results/ok)$(cat 2/exitCode)" = true0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"#
    );
    assert_eq!(steps[3]["results"], json!([{"name": "ok"}]));
    assert_eq!(steps[3]["command"], json!(["/bin/sh", "-c"]));
    assert!(steps[3].get("script").is_none(), "helpers never use script");
    // The report is not gated and keeps the policy's own onError (unset).
    assert!(steps[6].get("when").is_none());
    assert!(steps[6].get("onError").is_none());
    assert_eq!(
        helper_script(&steps[7]),
        r#"cd /tekton/steps;r=0;for s in step-bookend-setup step-build step-test;do c=$(cat $s/exitCode);[ "$c" = 0 ]||{ echo "bookend: $s failed (exit code ${c:-none})";r=1;};done;exit $r"#
    );
    let record = record_of(&out);
    assert_eq!(record.continued, ["build", "test"]);
    assert_eq!(
        record.helpers,
        ["bookend-gate-1", "bookend-gate-2", "bookend-verdict"]
    );
}

#[test]
fn always_keeps_user_when_and_resolves_on_error_params() {
    let set = policies(ALWAYS);
    let mut object = taskrun(json!([
        {"name": "a", "image": "go", "onError": "$(params.mode)",
         "when": [{"input": "$(params.run)", "operator": "in", "values": ["yes"]}]},
        {"name": "b", "image": "go", "onError": "$(params.other)"}
    ]));
    object["spec"]["params"] = json!([{"name": "mode", "value": "continue"}]);
    object["spec"]["taskSpec"]["params"] =
        json!([{"name": "mode"}, {"name": "run"}, {"name": "other", "default": "stopAndFail"}]);
    let out = assert_converges(&set, &object);
    let steps = steps_of(&out);
    let a = &steps[2];
    assert_eq!(a["name"], "a");
    assert_eq!(
        a["onError"], "$(params.mode)",
        "resolves to continue: left alone"
    );
    assert_eq!(
        a["when"].as_array().unwrap().len(),
        2,
        "user when kept, gate ANDed"
    );
    let b = steps.iter().find(|s| s["name"] == "b").unwrap();
    assert_eq!(
        b["onError"], "continue",
        "resolves to stopAndFail: converted"
    );
}

#[test]
fn mixed_always_and_on_success_policies() {
    let set = policies(&format!(
        "{ALWAYS}---\n{}",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: z-notify}
spec:
  priority: 1
  postSteps: [{name: bookend-notify, image: alpine}]
"#
    ));
    let out = assert_converges(&set, &build_taskrun());
    // notify (priority 1) is outer: its post-step runs last, only when everything succeeded.
    assert_eq!(
        names(&out),
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-report",
            "bookend-gate-2",
            "bookend-notify",
            "bookend-verdict"
        ]
    );
    let steps = steps_of(&out);
    assert!(
        steps[3].get("onError").is_none(),
        "the last Always step needs no continue"
    );
    assert_gated_by(&steps[5], "bookend-gate-2");
    let gate2 = helper_script(&steps[4]);
    assert!(
        gate2.contains(r#"[ "$(cat 1/results/ok)$(cat 2/exitCode)" = true0 ]"#),
        "{gate2}"
    );
}

#[test]
fn index_references_follow_the_shift_and_converge() {
    let set = policies(ALWAYS);
    let object = taskrun(json!([
        {"image": "alpine", "script": "exit 1"},
        {"image": "alpine", "script": "cat /tekton/steps/0/exitCode; cat /tekton/run/0/out; echo $(steps.step-unnamed-0.exitCode.path)"}
    ]));
    let out = assert_converges(&set, &object);
    let steps = steps_of(&out);
    // setup, gate-1, user0 (index 2), gate-2, user1 (index 4), ...
    assert_eq!(
        steps[4]["script"],
        "cat /tekton/steps/2/exitCode; cat /tekton/run/2/out; echo $(steps.step-unnamed-2.exitCode.path)"
    );
}

#[test]
fn always_gates_stay_small_for_long_task_runs() {
    let set = policies(ALWAYS);
    let steps: Vec<Value> = (0..300)
        .map(|i| json!({"name": format!("s{i}"), "image": "go"}))
        .collect();
    let out = assert_converges(&set, &taskrun(Value::Array(steps)));
    let gates: Vec<&Value> = steps_of(&out)
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("bookend-gate-"))
        .collect();
    assert_eq!(gates.len(), 300);
    // Each gate checks the previous gate and one step, not every earlier step.
    let longest = gates.iter().map(|g| helper_script(g).len()).max().unwrap();
    assert!(longest < 180, "{longest}");
    // (The record, 7.7 KB here, is in it twice: the annotation and the param.)
    assert!(serde_json::to_vec(&out).unwrap().len() < 210_000);
}

/// Tekton's entrypoint holds a failing step for a debugger before it reads `onError`: under an
/// Always policy the post-step would wait for someone to continue.
#[test]
fn a_failure_breakpoint_under_always_is_refused_naming_the_field() {
    let mut object = build_taskrun();
    object["spec"]["debug"] = json!({"breakpoints": {"onFailure": "enabled"}});
    let m = denied(
        &policies(ALWAYS),
        &object,
        "spec.debug.breakpoints.onFailure: policy ClusterStepPolicy/report runs its post-steps whatever",
    );
    assert!(m.contains("remove onFailure"), "{m}");
    // A remote Task the namespace-level Always policy reaches at the dry-run: refused too.
    let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "run-", "namespace": "team-a"},
        "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]},
                 "debug": {"breakpoints": {"onFailure": "enabled"}}}});
    denied(
        &policies(ALWAYS),
        &remote,
        "spec.debug.breakpoints.onFailure",
    );
    // Without an Always policy a failure stops the chain anyway: the breakpoint changes nothing
    // bookend promises.
    assert_eq!(run(&policies(NOTIFY), &object).outcome, Outcome::Mutated);
}

/// A resolved Task's `onError: $(params.…)` is substituted from the TaskRun after the dry-run,
/// which sees only the default: refused under Always; an inline one is resolved (above).
#[test]
fn a_variable_on_error_in_a_resolved_task_is_refused_under_always() {
    let task = |on_error: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
            "metadata": {"name": "build", "namespace": "team-a"},
            "spec": {"params": [{"name": "mode", "default": "continue"}],
                     "steps": [{"name": "build", "image": "go", "onError": on_error}]}})
    };
    let dry_run = |set: &PolicySet, task: &Value| {
        crate::engine::decide_resolved_task(
            Request {
                dry_run: true,
                ..request(task)
            },
            set,
            &Catalog::default(),
        )
    };
    let d = dry_run(&policies(ALWAYS), &task("$(params.mode)"));
    assert_eq!(d.outcome, Outcome::Denied);
    assert_eq!(
        d.message.as_deref(),
        Some(
            "bookend: spec.steps[0].onError: step \"build\" sets onError to \"$(params.mode)\": Tekton substitutes it from the TaskRun's params only after bookend injected policy ClusterStepPolicy/report's steps into this Task (it sees only the defaults), so a TaskRun could turn a failing step into one that stops the chain before the postStepsRun: Always post-steps; write onError literally (continue or stopAndFail)"
        )
    );
    assert_eq!(
        dry_run(&policies(ALWAYS), &task("continue")).outcome,
        Outcome::Mutated
    );
    assert_eq!(
        dry_run(&policies(NOTIFY), &task("$(params.mode)")).outcome,
        Outcome::Mutated
    );
}
