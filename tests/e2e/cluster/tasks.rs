//! TaskRuns by reference: a cluster Task inlined (and refused under Tekton's
//! `disable-inline-spec`), and the Tekton controller's dry run of a resolved remote Task.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Cluster, Out, poll};

use super::objects::{
    example, first_line, has_step, includes, metadata_str, step_names, step_names_of, yaml_docs,
};
use super::{Ctx, TEAM_A};

pub(super) fn scenario_task_ref(ctx: &mut Ctx) -> String {
    let docs = yaml_docs(&example("examples/taskruns/taskref.yaml"));
    let task = docs
        .iter()
        .find(|d| d["kind"] == "Task")
        .expect("a Task in taskref.yaml");
    let run = docs
        .iter()
        .find(|d| d["kind"] == "TaskRun")
        .expect("a TaskRun in taskref.yaml");
    let created = ctx.cluster.create(task).expect_ok("create the Task").json();
    // A Task CREATE that is not Tekton's dry-run is kept away from bookend (matchConditions).
    assert_eq!(
        created["spec"], task["spec"],
        "a user's Task is stored unchanged"
    );
    let task_name = metadata_str(&created, "name");
    let rv = metadata_str(&created, "resourceVersion");
    // bookend learns about the Task through its watch: poll until the dry-run inlines it.
    ctx.cluster
        .poll_dry_run("bookend to see the Task", run, Out::succeeded);
    let object = ctx
        .cluster
        .create(run)
        .expect_ok("create the taskRef TaskRun")
        .json();
    assert!(
        object["spec"]["taskRef"].is_null(),
        "taskRef replaced: {}",
        object["spec"]
    );
    assert_eq!(
        object["metadata"]["labels"]["tekton.dev/task"],
        json!(task_name)
    );
    let inlined = object["metadata"]["annotations"]["bookend.dev/inlined-task"].clone();
    assert_eq!(
        inlined,
        json!(format!("{task_name}@{rv}")),
        "inlined-task annotation"
    );
    assert!(has_step(&object, "test") && has_step(&object, "bookend-credentials"));
    ctx.keep("taskRef TaskRun", &object);

    // Tekton's disable-inline-spec: taskrun refuses spec.taskSpec; bookend, which watches
    // Tekton's feature-flags ConfigMap, refuses to inline instead, naming the flag.
    let flags = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
        "data": {"disable-inline-spec": "taskrun"},
    });
    let _ = ctx
        .cluster
        .kubectl(&["create", "namespace", "tekton-pipelines"]);
    ctx.cluster
        .apply(&flags)
        .expect_ok("Tekton's feature flags");
    let refused = poll(
        "bookend to see disable-inline-spec",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(run);
            if out.stderr.contains("disable-inline-spec lists taskrun") {
                Ok(out)
            } else {
                Err(format!("{}{}", out.stdout, out.stderr))
            }
        },
    );
    ctx.cluster
        .kubectl(&[
            "delete",
            "configmap",
            "-n",
            "tekton-pipelines",
            "feature-flags",
        ])
        .expect_ok("delete the feature flags");
    // (The TaskRun above exists now: ask again under a generated name.)
    let mut again = run.clone();
    again["metadata"].as_object_mut().unwrap().remove("name");
    again["metadata"]["generateName"] = json!("by-ref-");
    ctx.cluster
        .poll_dry_run("inlining again", &again, Out::succeeded);
    format!(
        "inlined {inlined}; steps {:?}; with disable-inline-spec: {}",
        step_names(&object),
        first_line(&refused.stderr)
    )
}

/// Lets the tests act as Tekton's controller (`kubectl --as=…`), whose dry-run Task CREATEs
/// and Pod CREATEs the webhooks' matchConditions select, with create rights on `resources`
/// (core `pods`, `tekton.dev` `tasks`). Returns the `--as` flag.
pub(super) fn impersonate_tekton_controller(cluster: &Cluster, resources: &[&str]) -> String {
    let rules: Vec<Value> = resources
        .iter()
        .map(|r| {
            let group = if *r == "pods" { "" } else { "tekton.dev" };
            json!({"apiGroups": [group], "resources": [r], "verbs": ["create"]})
        })
        .collect();
    let name = format!("e2e-tekton-controller-{}", resources.join("-"));
    let rbac = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "tekton-pipelines-controller",
                              "namespace": "tekton-pipelines"}],
            },
        ],
    });
    cluster
        .apply(&rbac)
        .expect_ok("RBAC for the impersonated controller");
    format!("--as={}", bookend::policy::DEFAULT_TEKTON_CONTROLLER)
}

pub(super) fn scenario_remote_task_dry_run(ctx: &mut Ctx) -> String {
    // Tekton's controller dry-run-creates a resolved remote Task and runs what comes back. The
    // webhook entry tasks-dryrun.mutate.bookend.dev only matches that (matchConditions, CEL,
    // evaluated by the apiserver): dryRun and the controller's user. Impersonate the user.
    let as_controller = impersonate_tekton_controller(&ctx.cluster, &["tasks"]);
    let task = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"generateName": "resolved-", "namespace": TEAM_A},
        "spec": {"steps": [{"name": "remote-build", "image": "docker.io/library/alpine:3.20",
                            "script": "echo remote"}]},
    });
    let out = poll(
        "the controller's RBAC to take effect",
        Duration::from_secs(30),
        || {
            let out = ctx
                .cluster
                .with_object(&["create", "--dry-run=server", &as_controller], &task);
            out.succeeded().map(|()| out)
        },
    );
    let object = out.json();
    let names = step_names_of(&object["spec"]);
    assert!(
        includes(&names, "bookend-sbom") && includes(&names, "remote-build"),
        "the controller's dry-run Task gets the namespace-level policies' steps: {names:?}"
    );
    assert!(
        includes(&names, "bookend-credentials"),
        "org-credentials' criteria are all about the namespace (its exemption is a Namespace label), so it applies to remote Tasks too: {names:?}"
    );
    // What Tekton then runs: the Task's spec as a TaskRun's taskSpec; let Tekton validate it.
    ctx.keep(
        "remote Task dry-run (as taskSpec)",
        &json!({
            "apiVersion": "tekton.dev/v1",
            "kind": "TaskRun",
            "metadata": {"generateName": "resolved-run-", "namespace": TEAM_A},
            "spec": {"taskSpec": object["spec"].clone()},
        }),
    );
    // The same dry-run by anyone else is not sent to bookend.
    let admin = ctx
        .cluster
        .with_object(&["create", "--dry-run=server"], &task)
        .expect_ok("dry-run Task as the admin")
        .json();
    assert_eq!(admin["spec"], task["spec"], "unchanged for other users");
    format!("controller's dry-run Task: steps {names:?}; other users' Tasks untouched")
}
