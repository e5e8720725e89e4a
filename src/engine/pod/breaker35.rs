//! Breaker round 35: inputs that defeat the claims I11 (an org container sees nothing of the
//! author's over its paths) and I12 (the Pod backstop judges a Pod by its controller
//! ownerReference, and only Tekton's controller makes a Pod Tekton would take for a TaskRun's).
//! Each test asserts what the claim requires; all four broke the code they were written
//! against and pass since the fixes (docs/security.md, "Breaker round 35").

use serde::Deserialize;
use serde_json::{Value, json};

use super::check_pod_update;
use crate::engine::isolate::OrgPaths;
use crate::policy::{Policy, Settings, WorkspaceMounts};

/// A TaskRun's Pod as Tekton's controller made it: its label, Tekton's managed-by label and
/// the controller ownerReference to the TaskRun of `uid`.
fn taskrun_pod(uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "run-1-pod", "namespace": "team-a",
            "labels": {"tekton.dev/taskRun": "run-1", "app.kubernetes.io/managed-by": "tekton-pipelines"},
            "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": "run-1",
                "uid": uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"containers": [{"name": "step-build", "image": "golang"}]}})
}

/// I12. Kubernetes lets anyone who may update a Pod rewrite its ownerReferences (only
/// `pods/status` keeps them). A TaskRun's Pod left behind (`kubectl delete taskrun run-1
/// --cascade=orphan`, or a Pod from before a policy existed) is re-pointed by the namespace's
/// editor at a new TaskRun of the same name, created pending: Tekton's controller lists Pods
/// labelled `tekton.dev/taskRun=run-1`, finds one `IsControlledBy` the new TaskRun and runs it
/// as the new TaskRun's, though bookend judged it against the old one (or never against any
/// policy of the new one). The CREATE path refuses exactly this (an owner uid that is not the
/// TaskRun's); the UPDATE path checks labels and images only.
/// The same Pod given an owner where it had none (the garbage collector removed the old
/// TaskRun's reference when orphaning it) is the second case. Removing the reference (the
/// garbage collector orphaning the Pod) stays admitted: the break is giving or changing one.
#[test]
fn only_tektons_controller_changes_which_taskrun_controls_a_pod() {
    let update = |old: &Value, new: &Value| {
        check_pod_update(old, new, "", false, &Settings::default()).is_ok()
    };
    let mut orphaned = taskrun_pod("uid-old");
    orphaned["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert!(
        update(&taskrun_pod("uid-old"), &orphaned),
        "sanity: orphaning is admitted"
    );
    let admitted: Vec<&str> = [
        ("re-pointed from uid-old", taskrun_pod("uid-old")),
        ("given an owner when orphaned", orphaned),
    ]
    .iter()
    .filter(|(_, old)| update(old, &taskrun_pod("uid-new")))
    .map(|(case, _)| *case)
    .collect();
    assert!(
        admitted.is_empty(),
        "a namespace editor made TaskRun uid-new the Pod's owner and bookend admitted it: {admitted:?}"
    );
}

/// A policy whose org step mounts its Secret at /workspace/creds and lets workspaces go
/// anywhere (`workspaceMounts: Anywhere`).
fn anywhere() -> Policy {
    let set = crate::engine::tests::policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  volumes: [{name: bookend-creds, secret: {secretName: org-creds}}]\n  preSteps: [{name: bookend-x, image: alpine, command: [/usr/local/bin/x], volumeMounts: [{name: bookend-creds, mountPath: /workspace/creds, readOnly: true}]}]\n",
    );
    let mut policy = set.policies()[0].clone();
    policy.spec.workspace_mounts = WorkspaceMounts::Anywhere;
    policy
}

/// I11, path normalisation. The API server does not require a volumeMount's mountPath to be
/// absolute (`ValidateVolumeMounts` checks only empty and unique), Tekton's step validation
/// checks only `/tekton/` after `filepath.Clean`, and the OCI runtime takes a relative
/// destination relative to the container's root: `workspace/creds` is `/workspace/creds`.
/// `OrgPaths::refusal` cleaned without rooting, so the relative form escaped the `mounts` check
/// (it compares with `/workspace/creds`) and the exact-`/workspace` check: a stepTemplate mount
/// `{name: <author volume>, mountPath: workspace/creds/token}` (or `workspace`) reached the org
/// container over (or hiding) its own Secret mount. Paths are now rooted as the kubelet roots
/// them (`mount_point`).
#[test]
fn a_relative_mount_path_is_refused_where_its_absolute_form_is() {
    let policy = anywhere();
    let paths = OrgPaths::of(&[&policy]);
    let cases = [
        ("/workspace/creds/token", "workspace/creds/token"),
        ("/workspace/creds", "workspace/creds"),
        ("/workspace", "workspace"),
        ("/workspace", "./workspace"),
        ("/", "."),
    ];
    for (absolute, _) in cases {
        assert!(
            paths.refusal(absolute).is_some(),
            "sanity: {absolute} is refused"
        );
    }
    let admitted: Vec<&str> = cases
        .iter()
        .filter(|(_, relative)| paths.refusal(relative).is_none())
        .map(|(_, relative)| *relative)
        .collect();
    assert!(
        admitted.is_empty(),
        "relative forms admitted where their absolute forms are refused: {admitted:?}"
    );
}

/// I12, the webhook's scope. `pods/status` UPDATEs change a Pod's labels (the API server's
/// `podStatusStrategy` keeps only the spec and the ownerReferences; `ValidatePodStatusUpdate`
/// allows any label change), and `pods.validate.bookend.dev` is not called for that
/// subresource: whoever may patch `pods/status` (a node's kubelet for its Pods, an operator's
/// service account granted `pods/status`) labels a Pod `tekton.dev/taskRun` or
/// `app.kubernetes.io/managed-by` (a `<taskrun>-pod` Tekton then adopts by name) unchecked,
/// where the same change through `pods` is refused. Narrow: the namespace's `edit` and `admin`
/// roles do not include `pods/status`.
#[test]
fn the_pod_backstop_sees_every_update_that_can_change_a_pods_labels() {
    let webhooks = include_str!("../../../deploy/base/webhooks.yaml");
    let backstop = serde_yaml_ng::Deserializer::from_str(webhooks)
        .filter_map(|doc| serde_yaml_ng::Value::deserialize(doc).ok())
        .filter_map(|doc| doc.get("webhooks").and_then(|w| w.as_sequence()).cloned())
        .flatten()
        .find(|w| w.get("name").and_then(|n| n.as_str()) == Some("pods.validate.bookend.dev"))
        .expect("the Pod backstop's webhook");
    let resources: Vec<String> = backstop["rules"][0]["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    assert!(
        resources
            .iter()
            .any(|r| r == "pods/status" || r == "pods/*"),
        "pods/status is not sent to the backstop: {resources:?}"
    );
}

/// I11 at the Pod: the org container of the policy above, as Tekton builds it, with the Task's
/// workspace (`mountPath: workspace/creds`, which Tekton's `GetMountPath` passes on as written)
/// or a stepTemplate mount at the relative path. The absolute form is refused (sanity), and so
/// is the relative one, the same directory in the container (it was admitted).
#[test]
fn the_backstop_refuses_an_authors_mount_over_an_org_mount_written_relative() {
    use super::container::{PodFacts, check, token_volumes};
    let policy = anywhere();
    let paths = OrgPaths::of(&[&policy]);
    let step = policy.pre_steps[0].clone();
    let volumes = [
        json!({"name": "tekton-internal-bin", "emptyDir": {}}),
        json!({"name": "tekton-internal-run-0", "emptyDir": {}}),
        json!({"name": "ws-k7x2p", "configMap": {"name": "authors"}}),
        json!({"name": "bookend-creds", "secret": {"secretName": "org-creds"}}),
    ];
    let container = |author_path: &str| {
        json!({"name": "step-bookend-x", "image": "alpine", "command": ["/tekton/bin/entrypoint"],
               "args": ["-post_file", "/tekton/run/0/out", "-termination_path", "/tekton/termination",
                        "-step_metadata_dir", "/tekton/run/0/status", "-entrypoint", "/usr/local/bin/x", "--"],
               "volumeMounts": [
                   {"name": "tekton-internal-bin", "mountPath": "/tekton/bin", "readOnly": true},
                   {"name": "tekton-internal-run-0", "mountPath": "/tekton/run/0"},
                   {"name": "bookend-creds", "mountPath": "/workspace/creds", "readOnly": true},
                   {"name": "ws-k7x2p", "mountPath": author_path}]})
    };
    let facts = PodFacts {
        place_scripts: None,
        platform_env: &[],
        volumes: &volumes,
        token_volumes: token_volumes(&volumes),
        org_paths: &paths,
        prefix: "bookend-",
    };
    assert!(
        check(&container("/workspace/creds/token"), &step, &facts).is_err(),
        "sanity: the absolute form is refused"
    );
    assert!(
        check(&container("workspace/creds/token"), &step, &facts).is_err(),
        "the author's ConfigMap over the org's Secret at workspace/creds/token was admitted"
    );
}
