//! The Pod backstop: a remote Task's Pod without the policies' steps is refused, with them
//! admitted, one whose workspace is over an org step's paths or whose policy volume is the
//! author's refused, and Pods Tekton did not make are never sent to bookend.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::poll;

use super::objects::{first_line, metadata_str};
use super::tasks::impersonate_tekton_controller;
use super::{Ctx, TEAM_A};

/// What Tekton's pod builder makes of the Task it runs for TaskRun `namespace/name` (containers
/// step-<name>, the TaskRun's labels and the Task's annotations; no
/// `automountServiceAccountToken`, which Tekton sets only from a podTemplate, so the API
/// server's ServiceAccount plugin, where it is on, mounts the token).
pub(super) fn taskrun_pod(namespace: &str, name: &str, uid: &str, resolved: &Value) -> Value {
    let volumes = resolved["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let spec = crate::tekton_pod::pod_spec(resolved["spec"]["steps"].as_array().unwrap(), &volumes);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-pod-"),
            "namespace": namespace,
            "labels": {"tekton.dev/taskRun": name, "tekton.dev/taskRunUID": uid},
            "annotations": resolved["metadata"]["annotations"].clone(),
            "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                                 "name": name, "uid": uid, "controller": true}],
        },
        "spec": spec,
    })
}

/// A TaskRun of a remote Task (git resolver) in team-a, admitted with bookend's marks alone
/// (the steps go in at the resolution); returns its name and uid.
fn create_remote_taskrun(ctx: &mut Ctx) -> (String, String) {
    let remote = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "remote-", "namespace": TEAM_A},
        "spec": {"taskRef": {"resolver": "git", "params": [
            {"name": "url", "value": "https://git.example.com/tasks.git"},
            {"name": "pathInRepo", "value": "build.yaml"}]}},
    });
    let created = ctx
        .cluster
        .create(&remote)
        .expect_ok("create a remote TaskRun");
    let taskrun = created.json();
    assert_eq!(
        taskrun["metadata"]["labels"]["bookend.dev/verify"], "true",
        "{}",
        taskrun["metadata"]
    );
    assert!(taskrun["spec"]["taskSpec"].is_null(), "{}", taskrun["spec"]);
    (
        metadata_str(&taskrun, "name"),
        metadata_str(&taskrun, "uid"),
    )
}

/// The Task the resolver returns, which Tekton's controller dry-run-creates.
fn resolved_task() -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"generateName": "resolved-", "namespace": TEAM_A},
        "spec": {"steps": [{"name": "remote-build", "image": "docker.io/library/alpine:3.20",
                            "script": "echo remote"}]},
    })
}

/// Issue 14: the Pod backstop. Tekton's controller is simulated (no controller runs here): it
/// resolves a remote Task, dry-run-creates it (as the controller: bookend injects; as anyone
/// else: the mutation does not happen, as in an outage) and creates the Pod from the result.
pub(super) fn scenario_pod_backstop(ctx: &mut Ctx) -> String {
    let as_controller = impersonate_tekton_controller(&ctx.cluster, &["pods", "tasks"]);
    let (name, uid) = create_remote_taskrun(ctx);
    let task = resolved_task();
    let pod_of = |resolved: &Value| taskrun_pod(TEAM_A, &name, &uid, resolved);
    // The mutation did not happen (an outage): the Pod lacks the steps and is refused.
    let bare = ctx
        .cluster
        .with_object(&["create", "--dry-run=server"], &task)
        .expect_ok("dry-run the Task without bookend")
        .json();
    let refused = poll(
        "the controller's RBAC, then bookend's refusal",
        Duration::from_secs(30),
        || {
            let out = ctx
                .cluster
                .with_object(&["create", &as_controller], &pod_of(&bare));
            if out.stderr.contains("pods.validate.bookend.dev") {
                Ok(out)
            } else if out.ok() {
                Err(format!("admitted: {}", out.stdout))
            } else {
                Err(out.stderr)
            }
        },
    );
    assert!(
        refused.stderr.contains(&format!("the Pod of TaskRun {TEAM_A}/{name} lacks the step(s) bookend-credentials (ClusterStepPolicy/org-credentials), bookend-sbom (ClusterStepPolicy/org-sbom)"))
            && refused.stderr.contains("git resolver"),
        "bookend's message names the TaskRun, the steps, the policy and the cause: {}",
        refused.stderr
    );
    // With the mutation (the controller's dry-run reaches bookend): admitted.
    let injected = ctx
        .cluster
        .with_object(&["create", "--dry-run=server", &as_controller], &task)
        .expect_ok("dry-run the Task as the controller")
        .json();
    let admitted = ctx
        .cluster
        .with_object(&["create", &as_controller], &pod_of(&injected))
        .expect_ok("the Pod with the steps");
    let pod = admitted.json();
    // The policy's Secret volume as the API server stored it (its defaults added): bookend
    // compares it with the policy's definition allowing exactly those.
    let stored_volume = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "bookend-registry")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        stored_volume["secret"]["defaultMode"], 420,
        "the API server defaults the mode: {stored_volume}"
    );
    // Issue 26: the dry-run mutation skipped, a Task carrying exact copies of the org steps
    // still cannot hand them the author's files. Tekton mounts a workspace into every step
    // container (`ws-<random>`): under /workspace/ it is admitted, over /bin refused; the
    // policy's volume redefined by the Task (a ConfigMap of the author's) is refused.
    let with_workspace = |path: &str| {
        let mut p = pod_of(&injected);
        p["spec"]["volumes"].as_array_mut().unwrap().push(
            json!({"name": "ws-k7x2p", "configMap": {"name": "author-tools", "defaultMode": 493}}),
        );
        for c in p["spec"]["containers"].as_array_mut().unwrap() {
            c["volumeMounts"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "ws-k7x2p", "mountPath": path}));
        }
        p
    };
    ctx.cluster
        .with_object(
            &["create", &as_controller],
            &with_workspace("/workspace/source"),
        )
        .expect_ok("a Pod with a workspace under /workspace");
    let over_bin = ctx
        .cluster
        .with_object(&["create", &as_controller], &with_workspace("/bin"));
    assert!(
        !over_bin.ok()
            && over_bin.stderr.contains("pods.validate.bookend.dev")
            && over_bin.stderr.contains("container step-bookend-credentials (ClusterStepPolicy/org-credentials) volumeMounts[")
            && over_bin.stderr.contains("\"ws-k7x2p\" at \"/bin\"")
            && over_bin.stderr.contains("allows workspaces only under /workspace"),
        "a workspace over /bin is refused, naming the container, the mount and the fix: {}",
        over_bin.stderr
    );
    let mut redefined = pod_of(&injected);
    for v in redefined["spec"]["volumes"].as_array_mut().unwrap() {
        if v["name"] == "bookend-registry" {
            *v = json!({"name": "bookend-registry", "configMap": {"name": "author-credentials"}});
        }
    }
    let redefined = ctx
        .cluster
        .with_object(&["create", &as_controller], &redefined);
    assert!(
        !redefined.ok()
            && redefined.stderr.contains("pods.validate.bookend.dev")
            && redefined
                .stderr
                .contains("is not the volume ClusterStepPolicy/org-credentials defines"),
        "the policy's volume redefined is refused, naming it: {}",
        redefined.stderr
    );
    // A Pod the controller did not make is never sent to bookend.
    let mut other = pod_of(&bare);
    other["metadata"]["labels"] = json!({"app": "not-tekton"});
    ctx.cluster
        .with_object(&["create", &as_controller], &other)
        .expect_ok("an unlabelled Pod");
    format!(
        "Pod without the dry-run mutation refused ({}); with it admitted ({} containers, the policy's volume stored as {stored_volume}); a workspace over /bin refused, under /workspace admitted; the policy's volume redefined refused",
        first_line(&refused.stderr),
        pod["spec"]["containers"].as_array().map_or(0, Vec::len),
    )
}

/// Breaker round 34: a Pod created ahead under the name Tekton gives a TaskRun's Pod
/// (`<taskrun>-pod`), with the `app.kubernetes.io/managed-by` label Tekton's pod informer
/// watches but without `tekton.dev/taskRun`, would be adopted by Tekton's `createPod` (v0.62.3
/// to v1.15.0: on `AlreadyExists` it takes the Pod of that name from its informer, checking
/// nothing else) and run in place of the TaskRun's. The webhook's matchCondition sends it to
/// bookend, which refuses it from anyone but the controller, and refuses the label added later;
/// a Pod of that name without the label (not in Tekton's informer) is not sent at all.
pub(super) fn scenario_pod_taken_by_name(ctx: &mut Ctx) -> String {
    let as_controller = impersonate_tekton_controller(&ctx.cluster, &["pods", "tasks"]);
    let name = "breaker34-adopted";
    let pod_name = format!("{name}-pod");
    // The admin's (anyone's with `create pods`) Pod first: each container named as Tekton will
    // name the TaskRun's steps, each running what its author likes.
    let forged = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": TEAM_A,
                     "labels": {"app.kubernetes.io/managed-by": "tekton-pipelines"}},
        "spec": {"automountServiceAccountToken": false, "containers": [
            {"name": "step-bookend-credentials", "image": "busybox", "command": ["true"]},
            {"name": "step-build", "image": "busybox", "command": ["true"]},
            {"name": "step-bookend-sbom", "image": "busybox", "command": ["true"]}]},
    });
    let refused = ctx.cluster.with_object(&["create"], &forged);
    assert!(
        !refused.ok()
            && refused.stderr.contains("pods.validate.bookend.dev")
            && refused.stderr.contains("would adopt this Pod")
            && refused
                .stderr
                .contains("rename the Pod or remove the label"),
        "a Pod Tekton would adopt by name, from the admin: {}{}",
        refused.stdout,
        refused.stderr
    );
    // The same Pod without the label is not Tekton's to take (its informer never lists it),
    // and never reaches bookend; giving it the label afterwards is refused.
    let mut unlabelled = forged.clone();
    unlabelled["metadata"]["labels"] = json!({"app": "squatter"});
    ctx.cluster
        .with_object(&["create"], &unlabelled)
        .expect_ok("the Pod of that name without the managed-by label");
    let relabel = ctx.cluster.kubectl(&[
        "label",
        "pod",
        &pod_name,
        "-n",
        TEAM_A,
        "app.kubernetes.io/managed-by=tekton-pipelines",
    ]);
    assert!(
        !relabel.ok() && relabel.stderr.contains("pods.validate.bookend.dev"),
        "labelling the Pod for Tekton's informer: {}{}",
        relabel.stdout,
        relabel.stderr
    );
    // The same label through `pods/status`, which may change labels too (the API server's
    // status strategy keeps only the spec and the ownerReferences): refused as well.
    let status_label = ctx.cluster.kubectl(&[
        "patch",
        "pod",
        &pod_name,
        "-n",
        TEAM_A,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"app.kubernetes.io/managed-by":"tekton-pipelines"}}}"#,
    ]);
    assert!(
        !status_label.ok() && status_label.stderr.contains("pods.validate.bookend.dev"),
        "labelling the Pod through pods/status: {}{}",
        status_label.stdout,
        status_label.stderr
    );
    // The TaskRun, admitted with its org steps.
    let taskrun = ctx
        .cluster
        .create(&json!({
            "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": name, "namespace": TEAM_A},
            "spec": {"taskSpec": {"steps": [{"name": "build", "image": "docker.io/library/alpine:3.20",
                                             "script": "echo build"}]}},
        }))
        .expect_ok("create the TaskRun")
        .json();
    let uid = metadata_str(&taskrun, "uid");
    // Tekton's controller creates the Pod it built: bookend checks and admits it, then the API
    // server finds the name taken by a Pod Tekton's informer does not list (so Tekton retries
    // and never runs it).
    let mut built = taskrun_pod(
        TEAM_A,
        name,
        &uid,
        &json!({"spec": taskrun["spec"]["taskSpec"], "metadata": {"annotations": {}}}),
    );
    let meta = built["metadata"].as_object_mut().unwrap();
    meta.remove("generateName");
    meta.insert("name".to_owned(), json!(pod_name));
    let taken = poll(
        "the controller's RBAC, then the API server's AlreadyExists",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.with_object(&["create", &as_controller], &built);
            if out.stderr.contains("AlreadyExists") || out.stderr.contains("already exists") {
                Ok(out)
            } else {
                Err(format!("{}{}", out.stdout, out.stderr))
            }
        },
    );
    let kept = ctx
        .cluster
        .with_object(&["get"], &unlabelled)
        .expect_ok("the squatting Pod")
        .json();
    assert!(
        kept["metadata"]["labels"]["app.kubernetes.io/managed-by"].is_null(),
        "{}",
        kept["metadata"]
    );
    format!(
        "the Pod Tekton would adopt by name refused ({}); its label refused later, through pods and pods/status; the unlabelled squatter only makes the controller's Pod meet {}",
        first_line(&refused.stderr),
        first_line(&taken.stderr)
    )
}

/// Where the ServiceAccount admission plugin mounts the token, in every container.
const TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Per container of a stored Pod, the volume mounted at `TOKEN_PATH`, if any.
fn token_mounts(pod: &Value) -> Vec<(String, Option<String>)> {
    let containers = ["initContainers", "containers"]
        .into_iter()
        .flat_map(|kind| pod["spec"][kind].as_array().cloned().unwrap_or_default());
    containers
        .map(|c| {
            let volume = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["mountPath"] == TOKEN_PATH)
                .and_then(|m| m["name"].as_str().map(str::to_owned));
            (c["name"].as_str().unwrap_or("").to_owned(), volume)
        })
        .collect()
}

/// On a cluster with the ServiceAccount admission plugin on (as every real cluster): it adds
/// the token volume `kube-api-access-<random>` to a Pod and mounts it in every container, org
/// step containers included, before the validating webhooks run. A TaskRun's Pod as Tekton
/// builds it is admitted with that mount; a Task volume named `kube-api-access-…` (which the
/// plugin takes as its own and mounts everywhere) is refused; `automountServiceAccountToken:
/// false` (podTemplate) is admitted without the mount.
pub(super) fn scenario_service_account_token(ctx: &mut Ctx) -> String {
    let as_controller = impersonate_tekton_controller(&ctx.cluster, &["pods", "tasks"]);
    let (name, uid) = create_remote_taskrun(ctx);
    let injected = ctx
        .cluster
        .with_object(
            &["create", "--dry-run=server", &as_controller],
            &resolved_task(),
        )
        .expect_ok("dry-run the Task as the controller")
        .json();
    let tekton_pod = || taskrun_pod(TEAM_A, &name, &uid, &injected);
    let org_containers = ["step-bookend-credentials", "step-bookend-sbom"];

    let admitted = ctx
        .cluster
        .with_object(&["create", &as_controller], &tekton_pod());
    assert!(
        admitted.ok(),
        "the TaskRun's Pod with the plugin's token mount is admitted: {}",
        admitted.stderr
    );
    let pod = admitted.json();
    let mounts = token_mounts(&pod);
    // The plugin really ran: every container, the org steps' too, mounts its volume.
    for org in org_containers {
        assert!(
            mounts.iter().any(|(c, _)| c == org),
            "the Pod has org container {org}: {mounts:?}"
        );
    }
    let token_volume = mounts
        .iter()
        .find_map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(
        token_volume.starts_with("kube-api-access-")
            && mounts
                .iter()
                .all(|(_, v)| v.as_deref() == Some(token_volume.as_str())),
        "the plugin mounts kube-api-access-<random> in every container: {mounts:?}"
    );

    // The Task's own volume of the plugin's name: Tekton copies it into the Pod, the plugin
    // takes it for the token volume and mounts the author's files at the token path in
    // every container, org steps included.
    let mut impostor = tekton_pod();
    impostor["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "kube-api-access-abcde", "configMap": {"name": "author-token"}}));
    let refused = ctx
        .cluster
        .with_object(&["create", &as_controller], &impostor);
    assert!(
        !refused.ok()
            && refused.stderr.contains("pods.validate.bookend.dev")
            && refused.stderr.contains("\"kube-api-access-abcde\" at \"/var/run/secrets/kubernetes.io/serviceaccount\": the Task's volume \"kube-api-access-abcde\" is not the service account token")
            && refused.stderr.contains("rename the Task's volume"),
        "a Task volume named like the token's is refused, naming it and the fix: {} {}",
        refused.stdout,
        refused.stderr
    );

    // podTemplate automountServiceAccountToken: false: no token, admitted.
    let mut no_token = tekton_pod();
    no_token["spec"]["automountServiceAccountToken"] = json!(false);
    let without = ctx
        .cluster
        .with_object(&["create", &as_controller], &no_token)
        .expect_ok("the Pod with automountServiceAccountToken: false")
        .json();
    let without_mounts = token_mounts(&without);
    assert!(
        without_mounts.iter().all(|(_, v)| v.is_none()),
        "no token mount without automount: {without_mounts:?}"
    );
    format!(
        "the Pod as Tekton builds it admitted with {token_volume} at {TOKEN_PATH} in {} containers (org: {}); a Task volume kube-api-access-abcde refused ({}); automountServiceAccountToken: false admitted without it",
        mounts.len(),
        org_containers.join(", "),
        first_line(&refused.stderr),
    )
}
