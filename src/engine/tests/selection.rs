//! Which policies apply and how: match, exclude and a StepPolicy's namespace, what is left
//! alone, Audit mode, dry-run warnings, explain.

use super::*;

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
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(d.patch.is_empty());
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
    assert_eq!(run(&set, &standalone).outcome, Outcome::Admitted);
    let mut child = standalone.clone();
    child["metadata"]["ownerReferences"] = json!([{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "pr", "uid": "u", "controller": true}]);
    assert_eq!(names(&run(&set, &child).object), ["bookend-p", "build"]);
    child["metadata"]["labels"] = json!({"skip": "yes"});
    assert_eq!(run(&set, &child).outcome, Outcome::Admitted);
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
fn empty_task_specs_and_other_kinds_are_left_alone() {
    let set = policies(PRE_POST);
    // No steps of its own: nothing for the policies' steps to go around.
    denied(&set, &taskrun(json!([])), "no steps of its own");
    assert_eq!(
        run(&policies(""), &taskrun(json!([]))).outcome,
        Outcome::Admitted
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod"});
    assert_eq!(run(&set, &pod).outcome, Outcome::Admitted);
    // A taskRef without a name goes to the cluster's default resolver (Tekton's reconciler
    // reads neither kind nor apiVersion): only bookend's marks (the record, also as the param
    // `bookend-injected`), the steps come at resolution.
    let custom = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "spec": {"taskRef": {"apiVersion": "x.dev/v1", "kind": "Wait"}}});
    let d = run(&set, &custom);
    assert_eq!(d.outcome, Outcome::Mutated);
    let mut marked = custom["spec"].clone();
    marked["params"] = json!([{"name": record::PARAM,
        "value": d.object["metadata"]["annotations"][record::ANNOTATION]}]);
    assert_eq!(d.object["spec"], marked);
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

#[test]
fn explain_covers_every_policy() {
    let set = policies(PRE_POST);
    let object = build_taskrun();
    let e = explain(request(&object), &set, &Catalog::default());
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|e| e.verdict == Verdict::Matched), "{e:?}");
    assert_eq!(e[0].why, "no match criteria: all TaskRuns");
}
