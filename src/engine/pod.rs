//! The Pod backstop: a TaskRun's Pod must carry every step bookend injects on the path that
//! TaskRun took. It is where the steps actually run, and the only place bookend sees TaskRuns
//! whose Task is resolved after admission (`taskRef.resolver`): their steps come from the
//! fail-open mutation of the controller's dry-run Task CREATE, which an outage skips silently.
//!
//! The expected steps are the steps of every Enforce policy that applies to the TaskRun on its
//! path (inline or inlined: the policies it matches; a remote Task: the policies the dry-run
//! injects, whose criteria are all about the namespace; a local `taskRef` left as it is: the
//! policies that would have inlined it) and that existed when the TaskRun was created. They
//! come from the policies alone: the Pod's `bookend.dev/injected` annotation is copied from the
//! TaskRun, whose author can write it, so it decides nothing here.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::lookup::Lookup;
use super::{Denial, SubjectFacts};
use crate::policy::{Mode, Policy, PolicySet, TaskRefPolicy};
use crate::tekton::{TaskRunView, TaskSource};

/// The container name Tekton gives a step.
fn container_of(step: &str) -> String {
    format!("step-{step}")
}

/// Checks `pod` (a Pod Tekton created for `taskrun`, both as the API server has them).
/// `Ok` carries warnings; a Pod that lacks steps is a denial naming each step, its policy and
/// what to do.
pub fn check_pod(
    pod: &Value,
    taskrun: &Value,
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Result<Vec<String>, Denial> {
    let Some(view) = TaskRunView::new(taskrun) else {
        return Ok(vec![
            "bookend: the Pod's owner is not a TaskRun bookend can read; not checked".to_owned(),
        ]);
    };
    let namespace = view.namespace().unwrap_or_default();
    let containers: BTreeSet<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    // Step name -> the policy that requires it.
    let mut required: BTreeMap<String, String> = BTreeMap::new();
    let created = view
        .object
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str);
    let path = view.task_source();
    for policy in applicable(&view, namespace, &path, set, lookup) {
        // A policy that did not exist when the TaskRun was created never applied to it.
        if let (Some(policy_created), Some(created)) = (policy.created.as_deref(), created)
            && policy_created > created
        {
            continue;
        }
        let id = policy.id.to_string();
        for step in policy.step_names() {
            required.insert(step.to_owned(), id.clone());
        }
    }

    let missing: Vec<String> = required
        .iter()
        .filter(|(step, _)| !containers.contains(container_of(step).as_str()))
        .map(|(step, by)| format!("{step} ({by})"))
        .collect();
    if missing.is_empty() {
        return Ok(Vec::new());
    }
    let name = view.display_name();
    let why = match &path {
        TaskSource::RemoteRef { resolver } => format!(
            "its Task came through the {resolver} resolver, and bookend injects these steps when Tekton's controller dry-run-creates the resolved Task; that mutation did not happen (bookend was unavailable, or the webhook entry tasks-dryrun.mutate.bookend.dev is missing)"
        ),
        TaskSource::LocalRef { name } => format!(
            "it references Task {name}, which bookend inlines to inject these steps, but the TaskRun was admitted without them (was bookend's webhook bypassed?)"
        ),
        _ => "the TaskRun's steps lack them or they were removed after admission".to_owned(),
    };
    Err(Denial {
        message: format!(
            "bookend: the Pod of TaskRun {namespace}/{name} lacks the step(s) {}: {why}. Create the TaskRun again once bookend is ready (`kubectl get pods -n <bookend namespace>`); `bookend render --explain` shows what the policies inject",
            missing.join(", ")
        ),
    })
}

/// The Enforce policies whose steps a Pod of this TaskRun must carry, by the TaskRun's path.
fn applicable<'s>(
    view: &TaskRunView<'_>,
    namespace: &str,
    path: &TaskSource,
    set: &'s PolicySet,
    lookup: &dyn Lookup,
) -> Vec<&'s Policy> {
    let facts = SubjectFacts::of(view, namespace, lookup);
    let subject = facts.subject(namespace);
    let matching = set
        .candidates(&subject)
        .into_iter()
        .filter(|p| p.spec.mode == Mode::Enforce && p.matches(&subject));
    match path {
        TaskSource::Inline => matching.collect(),
        // The dry-run Task carries nothing of the TaskRun: only namespace-level policies apply.
        TaskSource::RemoteRef { .. } => matching.filter(|p| p.namespace_level_only()).collect(),
        // Left as a reference: policies that skip such TaskRuns add nothing (a signed Task is
        // never inlined, but refused: its TaskRun never gets here).
        TaskSource::LocalRef { .. } => matching
            .filter(|p| p.spec.task_ref != TaskRefPolicy::Skip)
            .collect(),
        // Tekton refuses both.
        TaskSource::Both | TaskSource::Bundle | TaskSource::Missing => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::engine::tests::policies;
    use serde_json::json;

    const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps: [{name: bookend-creds, image: alpine}]
  postSteps: [{name: bookend-sbom, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: labelled, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {selector: {matchLabels: {scan: "yes"}}}
  preSteps: [{name: bookend-scan, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: audit, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  mode: Audit
  preSteps: [{name: bookend-audit, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: later, creationTimestamp: "2026-09-01T00:00:00Z"}
spec:
  preSteps: [{name: bookend-later, image: alpine}]
"#;

    fn taskrun(spec: Value, labels: Value) -> Value {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
               "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1",
                            "labels": labels, "creationTimestamp": "2026-06-01T00:00:00Z"},
               "spec": spec})
    }

    fn remote() -> Value {
        taskrun(
            json!({"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}),
            json!({"scan": "yes"}),
        )
    }

    fn pod(steps: &[&str], record: Option<&str>) -> Value {
        let containers: Vec<Value> = steps
            .iter()
            .map(|s| json!({"name": format!("step-{s}"), "image": "x"}))
            .collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a",
                         "labels": {"tekton.dev/taskRun": "run-1"}},
            "spec": {"containers": containers}});
        if let Some(r) = record {
            pod["metadata"]["annotations"] = json!({ crate::engine::record::ANNOTATION: r });
        }
        pod
    }

    fn check(pod: &Value, taskrun: &Value) -> Result<Vec<String>, Denial> {
        check_pod(pod, taskrun, &policies(POLICIES), &Catalog::default())
    }

    #[test]
    fn a_remote_taskruns_pod_needs_the_namespace_level_steps() {
        // The dry-run mutation was skipped: the Task's own step only.
        let err = check(&pod(&["clone"], None), &remote()).unwrap_err();
        assert!(
            err.message
                .contains("lacks the step(s) bookend-creds (ClusterStepPolicy/org), bookend-sbom (ClusterStepPolicy/org)"),
            "{err}"
        );
        assert!(err.message.contains("git resolver"), "{err}");
        // Not required: the label-selected policy (the dry-run cannot see TaskRun labels), the
        // Audit policy, and the policy created after the TaskRun.
        assert!(!err.message.contains("bookend-scan"), "{err}");
        assert!(!err.message.contains("bookend-audit"), "{err}");
        assert!(!err.message.contains("bookend-later"), "{err}");
        // With the dry-run mutation: admitted.
        assert_eq!(
            check(
                &pod(&["bookend-creds", "clone", "bookend-sbom"], None),
                &remote()
            ),
            Ok(Vec::new())
        );
    }

    #[test]
    fn an_inline_taskruns_pod_needs_what_its_policies_inject() {
        let inline = taskrun(
            json!({"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}),
            json!({"scan": "yes"}),
        );
        let all = ["bookend-creds", "bookend-scan", "build", "bookend-sbom"];
        assert_eq!(check(&pod(&all, None), &inline), Ok(Vec::new()));
        let err = check(
            &pod(&["bookend-creds", "build", "bookend-sbom"], None),
            &inline,
        )
        .unwrap_err();
        assert!(
            err.message
                .contains("lacks the step(s) bookend-scan (ClusterStepPolicy/labelled)"),
            "{err}"
        );
    }

    #[test]
    fn a_record_on_the_pod_decides_nothing() {
        // The record is copied from the TaskRun, whose author writes it: claiming other steps
        // (or none) does not change what the policies require.
        for record in [
            r#"{"policies":[{"policy":"ClusterStepPolicy/org","hash":"0","steps":["bookend-old"]}],"helpers":["bookend-gate-1"]}"#,
            r#"{"policies":[]}"#,
            "garbage",
        ] {
            let err = check(&pod(&["bookend-old", "clone"], Some(record)), &remote()).unwrap_err();
            assert!(
                err.message.contains(
                    "bookend-creds (ClusterStepPolicy/org), bookend-sbom (ClusterStepPolicy/org)"
                ),
                "{record}: {err}"
            );
            assert_eq!(
                check(
                    &pod(&["bookend-creds", "clone", "bookend-sbom"], Some(record)),
                    &remote()
                ),
                Ok(Vec::new()),
                "{record}"
            );
        }
    }

    #[test]
    fn local_references_left_as_they_are() {
        let local = taskrun(json!({"taskRef": {"name": "build"}}), json!({}));
        // `org` inlines referenced Tasks: a Pod without its steps means it was bypassed.
        let err = check(&pod(&["compile"], None), &local).unwrap_err();
        assert!(err.message.contains("references Task build"), "{err}");
        // A policy that skips such TaskRuns requires nothing.
        let skip = policies(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: s}\nspec:\n  taskRef: Skip\n  preSteps: [{name: bookend-s, image: alpine}]\n",
        );
        assert_eq!(
            check_pod(&pod(&["compile"], None), &local, &skip, &Catalog::default()),
            Ok(Vec::new())
        );
    }
}
