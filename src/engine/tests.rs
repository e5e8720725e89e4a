use super::record::{INLINED_ANNOTATION, Record};
use super::*;
use crate::policy::load::policy_set_from_yaml;
use crate::policy::{PolicySet, Settings};
use serde_json::json;

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
        Outcome::Allowed,
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

#[test]
fn on_success_wraps_outer_policy_outermost() {
    let set = policies(PRE_POST);
    let out = assert_converges(
        &set,
        &taskrun(json!([{"name": "build", "image": "go"}, {"image": "go"}])),
    );
    assert_eq!(
        names(&out),
        [
            "bookend-outer-pre",
            "bookend-inner-pre",
            "build",
            "<unnamed>",
            "bookend-inner-post",
            "bookend-outer-post"
        ]
    );
    // OnSuccess changes nothing in the user's steps.
    assert_eq!(
        out["spec"]["taskSpec"]["steps"][2],
        json!({"name": "build", "image": "go"})
    );
    let record = record_of(&out);
    assert_eq!(record.policies[0].policy, "ClusterStepPolicy/outer");
    assert_eq!(
        record.policies[0].steps,
        ["bookend-outer-pre", "bookend-outer-post"]
    );
    assert_eq!(record.policies[0].hash.len(), 12);
    assert!(record.helpers.is_empty());
}

/// Steps inserted among user steps of a realistic size are `add`s at their indexes; the user's
/// steps and their unknown fields are left as they are, and `spec` is never replaced.
#[test]
fn inserted_steps_are_adds_at_indexes() {
    let set = policies(PRE_POST);
    let script = "go build ./... && go vet ./... && go test -race -count=1 ./...\n".repeat(10);
    let object = taskrun(json!([
        {"name": "build", "image": "go", "script": script, "unknownField": {"kept": true}}
    ]));
    let d = run(&set, &object);
    assert_eq!(
        d.patch.iter().map(|op| op.path()).collect::<Vec<_>>(),
        [
            "/metadata/annotations",
            "/spec/taskSpec/steps/0",
            "/spec/taskSpec/steps/1",
            "/spec/taskSpec/steps/3",
            "/spec/taskSpec/steps/4"
        ]
    );
    assert!(
        d.patch
            .iter()
            .all(|op| matches!(op, crate::patch::Operation::Add { .. })),
        "{:?}",
        d.patch
    );
    assert_eq!(
        d.object["spec"]["taskSpec"]["steps"][2]["unknownField"],
        json!({"kept": true})
    );
}

/// Where bookend changes many places of the step list (here four small insertions; under
/// Always also `onError` and `when` on each user step), one `replace` of
/// `spec.taskSpec.steps` is cheaper for the API server to apply than an operation per place
/// (docs/apiserver-benchmark.md). The list it writes holds the user's steps as they came,
/// unknown fields included, and it never replaces anything above the steps.
#[test]
fn many_changes_to_the_steps_are_one_replace() {
    let set = policies(PRE_POST);
    let object = taskrun(json!([{"name": "build", "image": "go", "unknownField": {"kept": true}}]));
    let d = run(&set, &object);
    assert_eq!(
        d.patch.iter().map(|op| op.path()).collect::<Vec<_>>(),
        ["/metadata/annotations", "/spec/taskSpec/steps"]
    );
    assert!(matches!(
        &d.patch[1],
        crate::patch::Operation::Replace { .. }
    ));
    assert_eq!(apply(&object, &d.patch), d.object);
    assert_eq!(
        d.object["spec"]["taskSpec"]["steps"][2],
        json!({"name": "build", "image": "go", "unknownField": {"kept": true}})
    );
    // The validating backstop describes what is missing place by place.
    let backstop = decide_backstop(request(&object), &set, &Catalog::default());
    assert_eq!(backstop.patch.len(), 5, "{:?}", backstop.patch);
}

/// Another webhook that runs after bookend changes the TaskRun (a field on a user step, a step
/// of its own); the API server then calls bookend again. bookend's answer keeps both edits,
/// whichever patch shape it sends.
#[test]
fn a_later_webhooks_edits_are_not_clobbered() {
    let (set, object) = always_scenario();
    let admitted = run(&set, &object).object;
    // Only a field of a user step: nothing for bookend to change.
    let mut edited = admitted.clone();
    edited["spec"]["taskSpec"]["steps"][2]["env"] = json!([{"name": "FROM_OTHER", "value": "1"}]);
    assert_settled(&set, &edited);
    // A step put before the org's pre-steps (by the author, or by a webhook after bookend's):
    // bookend's steps are still exactly its own, so they go around it again. With Always the
    // gates check steps by index, so the inserted step makes them no longer bookend's: refused,
    // nothing dropped or moved silently.
    let mut before = edited.clone();
    before["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
        .insert(
            0,
            json!({"name": "other-webhook", "image": "alpine", "args": ["x"]}),
        );
    let m = denied(&set, &before, "spec.taskSpec.steps[");
    assert!(m.contains("bookend-gate-"), "{m}");
    let set = policies(PRE_POST);
    let mut admitted = run(&set, &build_taskrun()).object;
    admitted["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "other-webhook", "image": "alpine"}));
    let again = assert_converges(&set, &admitted);
    assert_eq!(names(&again)[0], "bookend-outer-pre");
    assert!(names(&again).contains(&"other-webhook".to_owned()));
}

#[test]
fn no_matching_policy_means_no_patch() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: elsewhere}
spec:
  match: {namespaces: ["ops-*"]}
  preSteps: [{name: bookend-x, image: alpine}]
"#,
    );
    let d = run(&set, &build_taskrun());
    assert_eq!(d.outcome, Outcome::Allowed);
    assert!(d.patch.is_empty());
}

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
        r#"cd /tekton/steps;[ "$(cat 0/exitCode)" = 0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"#
    );
    assert_eq!(
        helper_script(&steps[3]),
        r#"cd /tekton/steps;[ "$(cat 1/results/ok)$(cat 2/exitCode)" = true0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"#
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
fn tekton_defaulting_round_trip_is_recognised() {
    let set = policies(&format!(
        "{ALWAYS}---\n{}",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: res}
spec:
  preSteps:
  - name: bookend-res
    image: alpine
    timeout: 5m
    computeResources: {limits: {cpu: "0.5"}}
    results: [{name: out}]
"#
    ));
    let first = run(&set, &taskrun(json!([{"image": "go"}])));
    // What Tekton's defaulting webhook does to every step when it round-trips the object.
    let mut defaulted = first.object.clone();
    for step in defaulted["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
    {
        let s = step.as_object_mut().unwrap();
        s.insert(
            "computeResources".into(),
            s.get("computeResources").cloned().unwrap_or(json!({})),
        );
        s.entry("name").or_insert(json!(""));
        if s.get("name") == Some(&json!("bookend-res")) {
            s.insert("timeout".into(), json!("5m0s"));
            s.insert(
                "computeResources".into(),
                json!({"limits": {"cpu": "500m"}}),
            );
            s.insert("results".into(), json!([{"name": "out", "type": "string"}]));
        }
    }
    assert_settled(&set, &defaulted);
}

#[test]
fn a_user_step_with_the_prefix_is_denied_not_dropped() {
    let set = policies(PRE_POST);
    let m = denied(
        &set,
        &taskrun(json!([{"name": "bookend-mine", "image": "go"}])),
        "spec.taskSpec.steps[0].name",
    );
    assert!(m.contains("reserved prefix \"bookend-\""), "{m}");
    // A helper's name: not one bookend writes for this TaskRun.
    denied(
        &set,
        &taskrun(json!([{"name": "bookend-gate-1", "image": "go"}])),
        "no policy that applies to this TaskRun injects a step of that name",
    );
}

#[test]
fn a_tampered_injected_step_is_denied() {
    let set = policies(PRE_POST);
    let first = run(&set, &build_taskrun());
    let mut tampered = first.object.clone();
    tampered["spec"]["taskSpec"]["steps"][0]["image"] = json!("evil");
    let m = denied(
        &set,
        &tampered,
        "step \"bookend-outer-pre\" differs from what ClusterStepPolicy/outer injects (its image differs)",
    );
    assert!(
        m.starts_with("bookend: spec.taskSpec.steps[0].name: "),
        "{m}"
    );
}

#[test]
fn a_step_from_an_older_policy_version_is_denied_with_the_version() {
    // Only what bookend would write now is its own: a copy of a TaskRun injected by an older
    // version of a policy is refused (the record, a hint, names the version in the message).
    let set = policies(PRE_POST);
    let first = run(&set, &build_taskrun());
    let newer = policies(&PRE_POST.replacen(
        "{name: bookend-outer-pre, image: alpine}",
        "{name: bookend-outer-pre, image: alpine:3.21}",
        1,
    ));
    let m = denied(
        &newer,
        &first.object,
        "differs from what ClusterStepPolicy/outer injects",
    );
    let old_hash = &set.policies()[0].hash;
    assert!(
        m.contains(&format!(
            "names version {old_hash} of ClusterStepPolicy/outer"
        )),
        "{m}"
    );
    // Without the record (or with a forged one) the answer is the same, less the version.
    let mut bare = first.object.clone();
    bare["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(record::ANNOTATION);
    denied(
        &newer,
        &bare,
        "differs from what ClusterStepPolicy/outer injects",
    );
}

#[test]
fn v1beta1_uses_v1beta1_field_names() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: res}
spec:
  preSteps: [{name: bookend-res, image: alpine, computeResources: {limits: {memory: 1Gi}}}]
"#,
    );
    let mut object = taskrun(json!([{"name": "build", "image": "go", "resources": {}}]));
    object["apiVersion"] = json!("tekton.dev/v1beta1");
    let out = assert_converges(&set, &object);
    let injected = &out["spec"]["taskSpec"]["steps"][0];
    assert_eq!(injected["resources"]["limits"]["memory"], "1Gi");
    assert!(injected.get("computeResources").is_none());
}

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

#[test]
fn volumes_are_added_once_and_collisions_denied() {
    let set = policies(WITH_VOLUME);
    let mut object = build_taskrun();
    object["spec"]["taskSpec"]["volumes"] = json!([{"name": "src", "emptyDir": {}}]);
    let out = assert_converges(&set, &object);
    assert_eq!(
        out["spec"]["taskSpec"]["volumes"],
        json!([{"name": "src", "emptyDir": {}}, {"name": "bookend-cache", "emptyDir": {}}])
    );
    object["spec"]["taskSpec"]["volumes"] =
        json!([{"name": "bookend-cache", "secret": {"secretName": "x"}}]);
    denied(
        &set,
        &object,
        "volume \"bookend-cache\" differs from what ClusterStepPolicy/vol injects",
    );
    // A reserved-prefix volume no applied policy injects.
    object["spec"]["taskSpec"]["volumes"] = json!([{"name": "bookend-other", "emptyDir": {}}]);
    denied(
        &set,
        &object,
        "no policy that applies to this TaskRun injects it",
    );
}

#[test]
fn workspace_mount_path_collision_is_denied() {
    let set = policies(WITH_VOLUME);
    let mut object = build_taskrun();
    object["spec"]["taskSpec"]["workspaces"] = json!([{"name": "cache", "mountPath": "/cache"}]);
    let m = denied(&set, &object, "ClusterStepPolicy/vol step bookend-cache");
    assert!(m.contains("volumeMounts[0].mountPath"), "{m}");
    assert!(m.contains("workspace \"cache\""), "{m}");
}

#[test]
fn a_step_template_is_written_into_the_users_steps_only() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: scripted}
spec:
  postSteps: [{name: bookend-report, image: alpine, script: "echo done"}]
"#,
    );
    let mut object = build_taskrun();
    object["spec"]["taskSpec"]["stepTemplate"] =
        json!({"command": ["/bin/bash"], "env": [{"name": "LD_PRELOAD", "value": "/w/x.so"}]});
    // The org's script step would have inherited the command (and Tekton refused it) and the
    // env: now the user's step carries them and the stepTemplate is gone.
    let out = assert_converges(&set, &object);
    assert!(
        out["spec"]["taskSpec"].get("stepTemplate").is_none(),
        "{out}"
    );
    let report = &steps_of(&out)[1];
    assert_eq!(report["name"], "bookend-report");
    assert!(
        report.get("command").is_none() && report.get("env").is_none(),
        "{report}"
    );
    let build = &steps_of(&out)[0];
    assert_eq!(build["command"], json!(["/bin/bash"]));
    assert_eq!(
        build["env"],
        json!([{"name": "LD_PRELOAD", "value": "/w/x.so"}])
    );
    let set = policies(ALWAYS);
    assert_converges(&set, &object);
    // The template's command over the author's own script step: refused at that step, as Tekton
    // refuses it as sent.
    object["spec"]["taskSpec"]["steps"] =
        json!([{"name": "build", "image": "go", "script": "go build"}]);
    denied(
        &set,
        &object,
        "spec.taskSpec.steps[0].script: script cannot be used with command",
    );
}

#[test]
fn missing_params_and_workspaces_are_denied_with_the_field() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: clone, namespace: team-a}
spec:
  preSteps:
  - name: bookend-clone
    ref: {name: git-clone}
    params: [{name: url, value: "$(params.git-url)"}]
    workspaces: [{name: source}]
"#,
    );
    let object = build_taskrun();
    denied(
        &set,
        &object,
        "workspaces[0].name: undefined workspace \"source\"",
    );
    let mut object = object;
    object["spec"]["taskSpec"]["workspaces"] = json!([{"name": "source"}]);
    let m = denied(&set, &object, "params[0].value: non-existent variable");
    assert!(m.contains("param \"git-url\""), "{m}");
    object["spec"]["params"] = json!([{"name": "git-url", "value": "https://x"}]);
    assert_converges(&set, &object);
}

#[test]
fn audit_mode_reports_without_mutating() {
    let set = policies(&PRE_POST.replace("priority: 1\n", "priority: 1\n  mode: Audit\n"));
    let d = run(&set, &build_taskrun());
    // inner still enforces; outer only reports.
    assert_eq!(
        names(&d.object),
        ["bookend-inner-pre", "build", "bookend-inner-post"]
    );
    assert!(
        d.warnings
            .iter()
            .any(|w| w == "bookend audit: ClusterStepPolicy/outer would inject bookend-outer-pre, bookend-outer-post"),
        "{:?}",
        d.warnings
    );
    assert_eq!(
        d.audit_annotations.get("audit").map(String::as_str),
        Some("ClusterStepPolicy/outer")
    );
}

#[test]
fn dry_run_warns_what_was_injected() {
    let set = policies(PRE_POST);
    let object = build_taskrun();
    let d = decide(
        Request {
            dry_run: true,
            ..request(&object)
        },
        &set,
        &Catalog::default(),
    );
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with("bookend: injected bookend-outer-pre")),
        "{:?}",
        d.warnings
    );
    let d = run(&set, &object);
    assert!(d.warnings.is_empty());
}

fn taskref_run() -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"name": "r", "namespace": "team-a"},
           "spec": {"taskRef": {"name": "build"}}})
}

fn catalog_with(task: Value) -> Catalog {
    let mut c = Catalog::default();
    c.add_objects(&[task], "team-a");
    c
}

#[test]
fn task_ref_inline_inlines_and_labels() {
    let set = policies(PRE_POST);
    let catalog = catalog_with(json!({"apiVersion": "tekton.dev/v1beta1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a", "resourceVersion": "42"},
        "spec": {"steps": [{"name": "compile", "image": "go", "resources": {"limits": {"cpu": "1"}}}]}}));
    let object = taskref_run();
    let d = run_with(&set, &object, &catalog);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert!(d.object["spec"].get("taskRef").is_none());
    assert_eq!(
        names(&d.object),
        [
            "bookend-outer-pre",
            "bookend-inner-pre",
            "compile",
            "bookend-inner-post",
            "bookend-outer-post"
        ]
    );
    // A v1beta1 Task inlined into a v1 TaskRun is converted.
    assert_eq!(
        d.object["spec"]["taskSpec"]["steps"][2]["computeResources"]["limits"]["cpu"],
        "1"
    );
    assert_eq!(d.object["metadata"]["labels"]["tekton.dev/task"], "build");
    assert_eq!(
        d.object["metadata"]["annotations"][INLINED_ANNOTATION],
        "build@42"
    );
    assert_eq!(apply(&object, &d.patch), d.object);
    assert_eq!(
        run_with(&set, &d.object, &catalog).outcome,
        Outcome::Allowed
    );
}

#[test]
fn task_ref_missing_task_is_denied_with_the_fix() {
    let set = policies(PRE_POST);
    let m = denied(
        &set,
        &taskref_run(),
        "Task \"build\" was not found in namespace team-a",
    );
    assert!(m.contains("taskRef: Skip"), "{m}");
}

#[test]
fn task_ref_skip_and_deny() {
    let skip = policies(
        &PRE_POST
            .replace("priority: 1\n", "priority: 1\n  taskRef: Skip\n")
            .replace("priority: 2\n", "priority: 2\n  taskRef: Skip\n"),
    );
    let d = run(&skip, &taskref_run());
    assert_eq!(d.outcome, Outcome::Allowed);
    assert!(d.warnings[0].contains("taskRef: Skip"));
    let deny = policies(&PRE_POST.replace("priority: 2\n", "priority: 2\n  taskRef: Deny\n"));
    let m = denied(&deny, &taskref_run(), "spec.taskRef.name");
    assert!(
        m.starts_with("bookend: ClusterStepPolicy/inner: spec.taskRef.name"),
        "{m}"
    );
}

#[test]
fn signed_tasks_are_refused_unless_the_policy_skips_references() {
    // The signature is the Task author's to write: it must not switch injection off.
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "annotations": {"tekton.dev/signature": "MEUCIQ..."}},
        "spec": {"steps": [{"name": "compile", "image": "go"}]}});
    let set = policies(PRE_POST);
    denied_with(
        &set,
        &taskref_run(),
        &catalog_with(task.clone()),
        "trusted-resources signature",
    );
    let skip = policies(
        &PRE_POST
            .replace("priority: 1\n", "priority: 1\n  taskRef: Skip\n")
            .replace("priority: 2\n", "priority: 2\n  taskRef: Skip\n"),
    );
    let d = run_with(&skip, &taskref_run(), &catalog_with(task));
    assert_eq!(d.outcome, Outcome::Allowed, "{:?}", d.message);
}

#[test]
fn remote_task_refs_skip_or_deny() {
    let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "r"},
        "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}});
    let d = run(&policies(PRE_POST), &object);
    assert_eq!(d.outcome, Outcome::Allowed);
    assert!(d.warnings[0].contains("git resolver"), "{:?}", d.warnings);
    let deny = policies(&PRE_POST.replace("priority: 1\n", "priority: 1\n  remoteTaskRef: Deny\n"));
    denied(&deny, &object, "remoteTaskRef: Deny");
}

#[test]
fn origin_exclude_and_step_policy_scope() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: pipelines-only}
spec:
  match: {origin: Pipeline}
  exclude: {selector: {matchLabels: {skip: "yes"}}}
  preSteps: [{name: bookend-p, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: local, namespace: team-b}
spec:
  preSteps: [{name: bookend-local, image: alpine}]
"#,
    );
    let standalone = build_taskrun();
    assert_eq!(run(&set, &standalone).outcome, Outcome::Allowed);
    let mut child = standalone.clone();
    child["metadata"]["ownerReferences"] = json!([{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "pr", "uid": "u", "controller": true}]);
    assert_eq!(names(&run(&set, &child).object), ["bookend-p", "build"]);
    child["metadata"]["labels"] = json!({"skip": "yes"});
    assert_eq!(run(&set, &child).outcome, Outcome::Allowed);
    let d = decide(
        Request {
            namespace: "team-b",
            ..request(&standalone)
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(names(&d.object), ["bookend-local", "build"]);
}

#[test]
fn injected_steps_no_longer_matching_are_refused() {
    let set = policies(PRE_POST);
    let injected = run(&set, &build_taskrun()).object;
    let elsewhere = decide(
        Request {
            namespace: "ops",
            ..request(&injected)
        },
        &policies(
            &PRE_POST
                .replace(
                    "priority: 1\n",
                    "priority: 1\n  match: {namespaces: [team-*]}\n",
                )
                .replace(
                    "priority: 2\n",
                    "priority: 2\n  match: {namespaces: [team-*]}\n",
                ),
        ),
        &Catalog::default(),
    );
    // Where no policy applies, bookend's steps are not bookend's to write: refused, not dropped.
    assert_eq!(elsewhere.outcome, Outcome::Denied);
    let m = elsewhere.message.unwrap();
    assert!(
        m.contains("no policy that applies to this TaskRun injects a step of that name"),
        "{m}"
    );
}

#[test]
fn empty_task_specs_and_other_kinds_are_left_alone() {
    let set = policies(PRE_POST);
    // No steps of its own: nothing for the policies' steps to go around.
    denied(&set, &taskrun(json!([])), "no steps of its own");
    assert_eq!(
        run(&policies(""), &taskrun(json!([]))).outcome,
        Outcome::Allowed
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod"});
    assert_eq!(run(&set, &pod).outcome, Outcome::Allowed);
    let custom = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "spec": {"taskRef": {"apiVersion": "x.dev/v1", "kind": "Wait"}}});
    assert_eq!(run(&set, &custom).outcome, Outcome::Allowed);
}

/// A team (StepPolicy, priority -1000) wraps its steps around the TaskRun's; the org
/// (ClusterStepPolicy, priority 1000) wraps its steps around the team's: org pre-steps first,
/// org post-steps last, with `Always` on either side.
#[test]
fn team_steps_always_run_inside_org_steps() {
    let yaml = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  priority: 1000
  postStepsRun: Always
  preSteps: [{name: bookend-org-pre, image: alpine}]
  postSteps: [{name: bookend-org-post, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: team, namespace: team-a}
spec:
  priority: -1000
  postStepsRun: Always
  preSteps: [{name: bookend-team-pre, image: alpine}]
  postSteps: [{name: bookend-team-post, image: alpine}]
"#;
    let set = policies(yaml);
    let d = run(&set, &build_taskrun());
    assert_eq!(d.outcome, Outcome::Mutated);
    let order: Vec<String> = names(&d.object)
        .into_iter()
        .filter(|n| !set.settings().is_helper_name(n))
        .collect();
    assert_eq!(
        order,
        [
            "bookend-org-pre",
            "bookend-team-pre",
            "build",
            "bookend-team-post",
            "bookend-org-post"
        ]
    );
    // Nothing after the org's last post-step but the verdict, nothing before its first pre-step.
    let all = names(&d.object);
    assert_eq!(all[0], "bookend-org-pre");
    assert_eq!(
        all[all.len() - 2..],
        ["bookend-org-post", "bookend-verdict"]
    );
}

/// Tekton's `disable-inline-spec: taskrun` refuses any TaskRun with `spec.taskSpec`: a
/// TaskRun bookend would inline is refused by bookend, naming the flag, instead of by Tekton
/// with an error about a field the user never wrote. User-written inline TaskRuns are
/// Tekton's to refuse.
#[test]
fn inlining_is_refused_when_tekton_refuses_inline_specs() {
    let set = policies(PRE_POST);
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                 "metadata": {"name": "build", "namespace": "team-a"},
                 "spec": {"steps": [{"name": "compile", "image": "go"}]}})],
        "team-a",
    );
    let by_ref = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "r-", "namespace": "team-a"},
        "spec": {"taskRef": {"name": "build"}}});
    assert_eq!(run_with(&set, &by_ref, &catalog).outcome, Outcome::Mutated);
    catalog.inline_task_spec_refused = true;
    let m = denied_with(&set, &by_ref, &catalog, "disable-inline-spec lists taskrun");
    assert!(m.contains("Task \"build\""), "{m}");
    assert!(m.contains("set taskRef: Skip"), "{m}");
    assert_eq!(
        run_with(&set, &build_taskrun(), &catalog).outcome,
        Outcome::Mutated,
        "inline TaskRuns are not bookend's to refuse"
    );
}

/// A `taskRef: Inline` policy inlines the Task; a `taskRef: Skip` policy that also matches then
/// injects too, as into any inline TaskRun. Injecting only the Inline policy's steps made the
/// next pass (Tekton's re-invocation, the backstop) add the Skip policy's: not idempotent.
#[test]
fn a_task_inlined_for_one_policy_gets_the_skip_policies_steps_too() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: inliner}
spec:
  preSteps: [{name: bookend-inliner, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: skipper}
spec:
  taskRef: Skip
  postSteps: [{name: bookend-skipper, image: alpine}]
"#,
    );
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                 "metadata": {"name": "build", "namespace": "team-a"},
                 "spec": {"steps": [{"name": "compile", "image": "go"}]}})],
        "team-a",
    );
    let by_ref = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "r-", "namespace": "team-a"},
        "spec": {"taskRef": {"name": "build"}}});
    let first = run_with(&set, &by_ref, &catalog);
    assert_eq!(first.outcome, Outcome::Mutated);
    assert_eq!(
        names(&first.object),
        ["bookend-inliner", "compile", "bookend-skipper"]
    );
    let again = run_with(&set, &first.object, &catalog);
    assert_eq!(again.outcome, Outcome::Allowed, "{:?}", again.patch);
    // Without a policy that inlines, the Skip policy leaves the reference alone.
    let only_skip = policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: skipper}\nspec:\n  taskRef: Skip\n  postSteps: [{name: bookend-skipper, image: alpine}]\n",
    );
    let d = run_with(&only_skip, &by_ref, &catalog);
    assert_eq!(d.outcome, Outcome::Allowed);
    assert!(d.warnings[0].contains("taskRef: Skip"), "{:?}", d.warnings);
}

#[test]
fn explain_covers_every_policy() {
    let set = policies(PRE_POST);
    let object = build_taskrun();
    let e = explain(request(&object), &set, &Catalog::default());
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|e| e.verdict == Verdict::Matched), "{e:?}");
    assert_eq!(e[0].why, "no match criteria: all TaskRuns");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn arb_step(i: usize) -> impl Strategy<Value = Value> {
        (
            prop::option::of("[a-c]{1,2}"),
            prop::option::of(prop_oneof![Just("continue"), Just("stopAndFail")]),
            prop::bool::ANY,
        )
            .prop_map(move |(name, on_error, refs)| {
                let mut step = json!({"image": format!("img{i}")});
                if let Some(n) = name {
                    step["name"] = json!(format!("{n}{i}"));
                }
                if let Some(e) = on_error {
                    step["onError"] = json!(e);
                }
                if refs && i > 0 {
                    step["script"] = json!(format!("cat /tekton/steps/{}/exitCode", i - 1));
                }
                step
            })
    }

    fn arb_steps() -> impl Strategy<Value = Vec<Value>> {
        (1usize..6).prop_flat_map(|n| (0..n).map(arb_step).collect::<Vec<_>>())
    }

    fn strip_bookend(step: &Value) -> Value {
        let mut s = step.clone();
        let o = s.as_object_mut().unwrap();
        if let Some(Value::Array(w)) = o.get_mut("when") {
            w.retain(|w| !w["input"].as_str().unwrap_or("").contains("bookend-gate-"));
            if w.is_empty() {
                o.remove("when");
            }
        }
        s
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn injection_is_idempotent(steps in arb_steps(), always in prop::bool::ANY) {
            let set = policies(if always { ALWAYS } else { PRE_POST });
            let object = taskrun(Value::Array(steps));
            let first = run(&set, &object);
            prop_assert_eq!(first.outcome, Outcome::Mutated);
            prop_assert_eq!(apply(&object, &first.patch), first.object.clone());
            let second = run(&set, &first.object);
            prop_assert!(second.patch.is_empty(), "second pass patched: {:?}", second.patch);
        }

        #[test]
        fn user_steps_keep_order_and_content(steps in arb_steps(), always in prop::bool::ANY) {
            let set = policies(if always { ALWAYS } else { PRE_POST });
            let out = run(&set, &taskrun(Value::Array(steps.clone()))).object;
            let users: Vec<Value> = steps_of(&out).iter()
                .filter(|s| !tekton::step_name(s).unwrap_or("").starts_with("bookend-"))
                .cloned().collect();
            prop_assert_eq!(users.len(), steps.len());
            for (before, after) in steps.iter().zip(&users) {
                let mut after = strip_bookend(after);
                let mut before = before.clone();
                // Always may turn stopAndFail into continue; index references shift.
                for s in [&mut after, &mut before] {
                    let o = s.as_object_mut().unwrap();
                    o.remove("onError");
                    o.remove("script");
                }
                prop_assert_eq!(before, after);
            }
        }
    }
}

#[test]
fn a_missing_step_action_is_denied_when_step_actions_are_known() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: clone, namespace: team-a}
spec:
  preSteps: [{name: bookend-clone, ref: {name: git-clone}}]
"#,
    );
    let object = build_taskrun();
    // Unknown StepActions (no cache, nothing given offline): not checked.
    assert_eq!(run(&set, &object).outcome, Outcome::Mutated);
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction", "metadata": {"name": "other"}})],
        "team-a",
    );
    denied_with(
        &set,
        &object,
        &catalog,
        "ref.name: StepAction \"git-clone\" does not exist in namespace team-a",
    );
    catalog.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction", "metadata": {"name": "git-clone"}})],
        "team-a",
    );
    assert_eq!(run_with(&set, &object, &catalog).outcome, Outcome::Mutated);
}

#[test]
fn resolved_tasks_get_namespace_level_policies_only() {
    let set = policies(&format!(
        "{PRE_POST}---\n{}",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: labelled}
spec:
  match: {selector: {matchLabels: {team: a}}}
  preSteps: [{name: bookend-labelled, image: alpine}]
"#
    ));
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "3f1c", "namespace": "team-a"},
        "spec": {"params": [{"name": "x"}], "steps": [{"name": "build", "image": "go"}]}});
    let dry_run = Request {
        dry_run: true,
        ..request(&task)
    };
    let d = decide_resolved_task(dry_run, &set, &Catalog::default());
    assert_eq!(d.outcome, Outcome::Mutated);
    let names: Vec<&str> = d.object["spec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bookend-outer-pre",
            "bookend-inner-pre",
            "build",
            "bookend-inner-post",
            "bookend-outer-post"
        ]
    );
    assert_eq!(d.object["spec"]["params"], json!([{"name": "x"}]));
    assert!(
        d.object["metadata"]["annotations"]
            .get(record::ANNOTATION)
            .is_some()
    );
    assert_eq!(apply(&task, &d.patch), d.object);
    let again = decide_resolved_task(
        Request {
            object: &d.object,
            ..dry_run
        },
        &set,
        &Catalog::default(),
    );
    assert!(again.patch.is_empty(), "{:?}", again.patch);
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
    assert!(longest < 130, "{longest}");
    assert!(serde_json::to_vec(&out).unwrap().len() < 200_000);
}

/// The webhook's patch (built from the injected parts alone) is the diff of the whole admitted
/// object, operation for operation, whatever shape the TaskRun's metadata has.
#[test]
fn the_webhook_patch_equals_the_whole_object_diff() {
    let set = policies(ALWAYS);
    let steps = json!([{"name": "build", "image": "golang"}]);
    let mut shapes = vec![taskrun(steps.clone())];
    for metadata in [
        None,
        Some(Value::Null),
        Some(json!({"name": "x"})),
        Some(json!({"name": "x", "annotations": "not a map"})),
        Some(json!({"name": "x", "annotations": {"a": "b"}})),
        Some(json!({"name": "x", "annotations": {"bookend.dev/injected": "stale"}})),
    ] {
        let mut object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun"});
        if let Some(metadata) = metadata {
            object["metadata"] = metadata;
        }
        object["spec"] = json!({"taskSpec": {"steps": steps.clone()}});
        shapes.push(object);
    }
    // Admitted once already: the second pass only has the record to compare.
    let admitted = run(&set, &taskrun(steps.clone())).object;
    let mut stale = admitted.clone();
    stale["metadata"]["annotations"]["bookend.dev/injected"] = json!("{}");
    shapes.extend([admitted, stale]);
    // Volumes: added to a taskSpec without them, appended to existing ones, and (once the
    // policy no longer applies) removed again, next to members bookend must leave alone.
    let volume_set = policies(WITH_VOLUME);
    let mut with_members = taskrun(steps.clone());
    with_members["spec"]["taskSpec"]["params"] = json!([{"name": "p", "default": "x"}]);
    with_members["spec"]["taskSpec"]["workspaces"] = json!([{"name": "src"}]);
    let mut with_volumes = with_members.clone();
    with_volumes["spec"]["taskSpec"]["volumes"] = json!([{"name": "src", "emptyDir": {}}]);
    let volume_admitted = run(&volume_set, &with_volumes).object;
    let volume_admitted_bare = run(&volume_set, &with_members).object;
    shapes.extend([
        with_members,
        with_volumes,
        volume_admitted,
        volume_admitted_bare,
    ]);
    // No policy applies, but injected steps must be stripped and the record removed.
    let none = policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: other}\nspec:\n  match: {namespaces: [elsewhere]}\n  preSteps: [{name: bookend-x, image: alpine}]\n",
    );
    for object in &shapes {
        for set in [&set, &none, &volume_set] {
            let whole = decide(request(object), set, &Catalog::default());
            let webhook = decide_patch(request(object), set, &Catalog::default());
            assert_eq!(webhook.outcome, whole.outcome);
            assert_eq!(webhook.patch, whole.patch, "{object}");
            if whole.outcome == Outcome::Mutated {
                // Applied by an independent RFC 6902 implementation, the webhook's patch gives
                // the object render admits.
                assert_eq!(apply(object, &webhook.patch), whole.object, "{object}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Always construction, run: gate and verdict scripts under /bin/sh, the rest of Tekton's
// step semantics emulated (docs/tekton-notes.md, "How steps run"). The runtime suite
// (tests/runtime) runs the same construction under Tekton's real controller and entrypoint.

/// What happened when an admitted TaskRun ran.
#[derive(Debug, PartialEq, Eq)]
struct Ran {
    /// The steps that ran (not skipped), in order.
    ran: Vec<String>,
    /// Each gate's result as written (`None`: no result).
    gates: Vec<Option<String>>,
    /// The verdict's exit code (`None`: it did not run) and its output.
    verdict: Option<i32>,
    verdict_says: String,
    /// The TaskRun's outcome: false when a step exited non-zero without `onError: continue`.
    succeeded: bool,
}

/// Runs `object`'s steps as Tekton's entrypoint would, as far as bookend's construction relies
/// on it: in order; a step whose `when` reads a gate result other than `true` is skipped with
/// exit code 0; a user or policy step exits with the code `fail` gives it (0 otherwise); a
/// step exiting non-zero without `onError: continue` skips every later step, which write no
/// exit code. Gates and the verdict run their own scripts under /bin/sh against a temporary
/// directory standing for /tekton/steps (with Tekton's `<index>` and `step-<name>` entries).
fn run_like_tekton(object: &Value, fail: &[(&str, i32)]) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let steps = steps_of(object);
    for (i, step) in steps.iter().enumerate() {
        std::fs::create_dir_all(root.join(i.to_string()).join("results")).unwrap();
        std::os::unix::fs::symlink(i.to_string(), root.join(tekton::container_name(step, i)))
            .unwrap();
    }
    let mut out = Ran {
        ran: Vec::new(),
        gates: Vec::new(),
        verdict: None,
        verdict_says: String::new(),
        succeeded: true,
    };
    let root_str = root.to_str().unwrap().to_owned();
    let mut stopped = false;
    for (i, step) in steps.iter().enumerate() {
        let name = tekton::step_name(step).unwrap_or("").to_owned();
        let is_gate = name.starts_with("bookend-gate-");
        if stopped {
            if is_gate {
                out.gates.push(None);
            }
            continue;
        }
        let status = root.join(i.to_string());
        let when_holds = step["when"].as_array().into_iter().flatten().all(|w| {
            let input = w["input"].as_str().unwrap();
            let value = input
                .strip_prefix("$(steps.")
                .and_then(|s| s.strip_suffix(".results.ok)"))
                .and_then(|gate| {
                    std::fs::read_to_string(root.join(format!("step-{gate}/results/ok"))).ok()
                })
                .unwrap_or_else(|| input.to_owned());
            w["values"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == &json!(value))
        });
        if !when_holds {
            std::fs::write(status.join("exitCode"), "0").unwrap();
            if is_gate {
                out.gates.push(None);
            }
            continue;
        }
        out.ran.push(name.clone());
        let code = if is_gate || name == "bookend-verdict" {
            let script = helper_script(step)
                .replace("/tekton/steps", &root_str)
                .replace(
                    "$(step.results.ok.path)",
                    status.join("results/ok").to_str().unwrap(),
                );
            let result = std::process::Command::new("/bin/sh")
                .args(["-c", &script])
                .output()
                .expect("/bin/sh runs");
            if name == "bookend-verdict" {
                out.verdict = result.status.code();
                out.verdict_says = String::from_utf8_lossy(&result.stdout).into_owned();
            } else {
                out.gates
                    .push(std::fs::read_to_string(status.join("results/ok")).ok());
            }
            result.status.code().unwrap()
        } else {
            fail.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .unwrap_or(0)
        };
        if code != 0 && step["onError"] != "continue" {
            out.succeeded = false;
            stopped = true;
            continue;
        }
        std::fs::write(status.join("exitCode"), code.to_string()).unwrap();
    }
    out
}

const NOTIFY: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: z-notify}
spec:
  priority: 1
  postSteps: [{name: bookend-notify, image: alpine}]
"#;

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

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn gates(v: &[Option<&str>]) -> Vec<Option<String>> {
    v.iter().map(|g| g.map(str::to_owned)).collect()
}

/// Post-steps run after a failure, the TaskRun still fails, the verdict names the failed step,
/// and a step skipped by its gate (exit code 0) never counts as a success.
fn assert_always_semantics(admitted: &Value) {
    assert_eq!(
        names(admitted),
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "lint",
            "test",
            "bookend-report",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-verdict"
        ]
    );
    let all = run_like_tekton(admitted, &[]);
    assert_eq!(
        all.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "lint",
            "test",
            "bookend-report",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        all.gates,
        gates(&[Some("true"), Some("true"), Some("true")])
    );
    assert_eq!((all.verdict, all.succeeded), (Some(0), true));
    assert_eq!(all.verdict_says, "");

    // The pre-step fails: nothing guarded runs, the report does, the verdict names the setup.
    let pre = run_like_tekton(admitted, &[("bookend-setup", 7)]);
    assert_eq!(
        pre.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "bookend-gate-2",
            "bookend-report",
            "bookend-gate-3",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        pre.gates,
        gates(&[Some("false"), Some("false"), Some("false")])
    );
    assert_eq!((pre.verdict, pre.succeeded), (Some(1), false));
    assert_eq!(
        pre.verdict_says,
        "bookend: step-bookend-setup failed (exit code 7)\n"
    );

    // build fails: lint and test are skipped (exit code 0, not counted as success), the
    // report runs, notify does not.
    let build = run_like_tekton(admitted, &[("build", 3)]);
    assert_eq!(
        build.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "bookend-report",
            "bookend-gate-3",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        build.gates,
        gates(&[Some("true"), Some("false"), Some("false")])
    );
    assert_eq!((build.verdict, build.succeeded), (Some(1), false));
    assert_eq!(
        build.verdict_says,
        "bookend: step-build failed (exit code 3)\n"
    );

    // lint is best effort: its failure changes nothing.
    let lint = run_like_tekton(admitted, &[("lint", 5)]);
    assert_eq!(lint.ran, all.ran);
    assert_eq!((lint.verdict, lint.succeeded), (Some(0), true));

    // test fails: notify (OnSuccess, after the Always report) is skipped.
    let test = run_like_tekton(admitted, &[("test", 2)]);
    assert!(test.ran.contains(&"bookend-report".to_owned()));
    assert!(!test.ran.contains(&"bookend-notify".to_owned()));
    assert_eq!(
        test.gates,
        gates(&[Some("true"), Some("true"), Some("false")])
    );
    assert_eq!((test.verdict, test.succeeded), (Some(1), false));
    assert_eq!(
        test.verdict_says,
        "bookend: step-test failed (exit code 2)\n"
    );
}

#[test]
fn always_helpers_run_as_documented() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    assert_always_semantics(&admitted);
}

/// The admitted TaskRun with its helpers in the form releases up to 0.1.0 wrote.
fn with_legacy_helpers(set: &PolicySet, object: &Value, admitted: &Value) -> Value {
    let applied: Vec<&Policy> = set.policies().iter().collect();
    let composed = inject::compose(
        steps_of(object).clone(),
        &applied,
        set.settings(),
        tekton::ApiVersion::V1,
        &inject::ParamValues {
            run_params: &[],
            spec_params: &[],
        },
    );
    let mut legacy = admitted.clone();
    let steps = legacy["spec"]["taskSpec"]["steps"].as_array_mut().unwrap();
    let mut specs = composed.checks.iter();
    for (step, kind) in steps.iter_mut().zip(&composed.kinds) {
        if matches!(kind, inject::StepKind::Gate | inject::StepKind::Verdict) {
            let name = tekton::step_name(step).unwrap().to_owned();
            *step = inject::legacy_helper_step(set.settings(), &name, specs.next().unwrap());
        }
    }
    legacy
}

#[test]
fn helpers_in_the_older_form_are_bookends_own() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    let legacy = with_legacy_helpers(&set, &object, &admitted);
    assert_ne!(legacy, admitted);
    // Exactly what 0.1.0 wrote (tests/golden/08-rerun-is-idempotent.yaml has a whole one).
    assert_eq!(
        helper_script(&steps_of(&legacy)[3]),
        r#"ok=true; [ "$(cat /tekton/steps/step-bookend-gate-1/results/ok 2>/dev/null)" = true ] || ok=false; for s in 2:step-build; do c=$(cat /tekton/steps/${s%%:*}/exitCode 2>/dev/null); [ "$c" = 0 ] || ok=false; done; printf %s "$ok" > $(step.results.ok.path)"#
    );
    assert_eq!(
        steps_of(&legacy)[3]["results"],
        json!([{"name": "ok", "type": "string"}])
    );
    // An upgrade: what an older replica injected is admitted as it is, by re-invocation and by
    // the validating backstop.
    assert_settled(&set, &legacy);
    let backstop = decide_backstop(request(&legacy), &set, &Catalog::default());
    assert_eq!(backstop.outcome, Outcome::Allowed, "{:?}", backstop.patch);
    // And it ran the same way.
    assert_always_semantics(&legacy);
}
