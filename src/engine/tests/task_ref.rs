//! TaskRuns by reference: inlining a Task, `taskRef: Skip`/`Deny`, signed and remote Tasks,
//! Tekton's `disable-inline-spec`, and the resolved remote Tasks of Tekton's dry run.

use super::*;

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
        Outcome::Admitted
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
    assert_eq!(d.outcome, Outcome::Admitted);
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
    assert_eq!(d.outcome, Outcome::Admitted, "{:?}", d.message);
}

#[test]
fn remote_task_refs_skip_or_deny() {
    let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "r"},
        "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}});
    // Both policies' criteria are all about the namespace: they inject into the resolved Task
    // at Tekton's controller's dry-run. At CREATE bookend writes only its record (saying so;
    // in `spec` only as the param `bookend-injected`) and the verification label, and injects
    // nothing (metrics, Events).
    let set = policies(PRE_POST);
    let d = run(&set, &object);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    assert!(d.injected.is_empty(), "{:?}", d.injected);
    assert!(
        d.patch
            .iter()
            .all(|op| op.path().starts_with("/metadata") || op.path() == "/spec/params"),
        "{:?}",
        d.patch
    );
    let mut marked = object["spec"].clone();
    marked["params"] = json!([{"name": record::PARAM,
        "value": d.object["metadata"]["annotations"][record::ANNOTATION]}]);
    assert_eq!(d.object["spec"], marked);
    assert_eq!(
        d.object["metadata"]["labels"][record::LABEL],
        record::LABEL_VALUE
    );
    let recorded = record_of(&d.object);
    assert!(recorded.resolved, "{recorded:?}");
    assert!(recorded.helpers.is_empty() && recorded.continued.is_empty());
    assert_eq!(
        recorded
            .policies
            .iter()
            .map(|e| (e.policy.as_str(), e.steps.clone()))
            .collect::<Vec<_>>(),
        [
            (
                "ClusterStepPolicy/outer",
                vec![
                    "bookend-outer-pre".to_owned(),
                    "bookend-outer-post".to_owned()
                ]
            ),
            (
                "ClusterStepPolicy/inner",
                vec![
                    "bookend-inner-pre".to_owned(),
                    "bookend-inner-post".to_owned()
                ]
            ),
        ]
    );
    assert_settled(&set, &d.object);
    // The author's own marks are replaced by bookend's; a verified mark goes.
    let mut forged = object.clone();
    forged["metadata"]["annotations"] = json!({record::ANNOTATION: r#"{"policies":[]}"#,
                                              record::VERIFIED_ANNOTATION: "{}"});
    forged["metadata"]["labels"] = json!({record::LABEL: "no"});
    assert_eq!(run(&set, &forged).object["metadata"], d.object["metadata"]);
    // A policy that selects by the TaskRun's labels cannot reach the resolved Task: skipped,
    // with a warning, and not recorded.
    let labelled = policies(&PRE_POST.replace(
        "priority: 2\n",
        "priority: 2\n  match: {selector: {matchLabels: {team: a}}}\n",
    ));
    let mut selected = object.clone();
    selected["metadata"]["labels"] = json!({"team": "a"});
    let d = run(&labelled, &selected);
    assert!(d.warnings[0].contains("git resolver"), "{:?}", d.warnings);
    assert!(
        d.warnings[0].contains("not injected: ClusterStepPolicy/inner ("),
        "{:?}",
        d.warnings
    );
    let recorded = record_of(&d.object);
    assert_eq!(recorded.policies.len(), 1, "{recorded:?}");
    assert_eq!(recorded.policies[0].policy, "ClusterStepPolicy/outer");
    // Nothing reaches the resolved Task: no marks, and the author's are dropped.
    let none = policies(
        &PRE_POST
            .replace(
                "priority: 1\n",
                "priority: 1\n  match: {selector: {matchLabels: {team: a}}}\n",
            )
            .replace(
                "priority: 2\n",
                "priority: 2\n  match: {selector: {matchLabels: {team: a}}}\n",
            ),
    );
    assert_eq!(run(&none, &object).outcome, Outcome::Admitted);
    let d = run(&none, &forged);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert_eq!(d.object["metadata"]["labels"], json!({}));
    assert_eq!(d.object["metadata"]["annotations"], json!({}));
    let deny = policies(&PRE_POST.replace("priority: 1\n", "priority: 1\n  remoteTaskRef: Deny\n"));
    denied(&deny, &object, "remoteTaskRef: Deny");
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
    assert_eq!(again.outcome, Outcome::Admitted, "{:?}", again.patch);
    // Without a policy that inlines, the Skip policy leaves the reference alone.
    let only_skip = policies(
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: skipper}\nspec:\n  taskRef: Skip\n  postSteps: [{name: bookend-skipper, image: alpine}]\n",
    );
    let d = run_with(&only_skip, &by_ref, &catalog);
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(d.warnings[0].contains("taskRef: Skip"), "{:?}", d.warnings);
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
