//! The taskSpec around the steps: v1beta1 field names, volumes, workspaces, the stepTemplate,
//! params and StepActions the policies' steps need.

use super::*;

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
