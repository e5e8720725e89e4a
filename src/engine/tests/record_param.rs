//! The record param (`bookend-injected`): the record again in `spec.params`, where Tekton
//! Chains' default SLSA v1.0 buildType reads it; whatever the author wrote under its name is
//! replaced or dropped, and a Task that declares it is refused.

use super::*;

/// The `bookend-injected` entries of the object's `spec.params`.
fn record_params(object: &Value) -> Vec<&Value> {
    object["spec"]["params"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter(|p| p["name"] == record::PARAM)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
}

#[test]
fn the_record_is_a_param_and_an_authors_param_of_its_name_is_replaced() {
    let set = policies(PRE_POST);
    let mut object = build_taskrun();
    object["spec"]["params"] = json!([
        {"name": "x", "value": "1"},
        {"name": "bookend-injected", "value": r#"{"policies":[]}"#},
        {"name": "y", "value": ["a"]},
        {"name": "bookend-injected", "value": {"policies": "forged"}}
    ]);
    let admitted = assert_converges(&set, &object);
    let annotation = &admitted["metadata"]["annotations"][record::ANNOTATION];
    assert_eq!(
        admitted["spec"]["params"],
        json!([
            {"name": "x", "value": "1"},
            {"name": "bookend-injected", "value": annotation},
            {"name": "y", "value": ["a"]}
        ])
    );
    assert_eq!(
        record_of(&admitted)
            .policies
            .iter()
            .map(|e| e.policy.as_str())
            .collect::<Vec<_>>(),
        ["ClusterStepPolicy/outer", "ClusterStepPolicy/inner"]
    );
    // Without params of the author's, the member holds only the record.
    let admitted = assert_converges(&set, &build_taskrun());
    assert_eq!(
        admitted["spec"]["params"],
        json!([{"name": "bookend-injected", "value": admitted["metadata"]["annotations"][record::ANNOTATION]}])
    );
}

#[test]
fn without_a_policy_the_authors_record_param_is_dropped() {
    let none = policies("");
    let mut object = build_taskrun();
    object["spec"]["params"] = json!([{"name": "bookend-injected", "value": "{}"}]);
    let d = run(&none, &object);
    assert_eq!(d.outcome, Outcome::Mutated);
    assert_eq!(d.object["spec"], build_taskrun()["spec"]);
    assert_eq!(apply(&object, &d.patch), d.object);
    object["spec"]["params"] =
        json!([{"name": "x", "value": "1"}, {"name": "bookend-injected", "value": "{}"}]);
    let d = run(&none, &object);
    assert_eq!(
        d.object["spec"]["params"],
        json!([{"name": "x", "value": "1"}])
    );
    // A taskRef TaskRun no policy inlines: the same.
    let mut remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "r"},
        "spec": {"taskRef": {"resolver": "git"}, "params": [{"name": "bookend-injected", "value": "{}"}]}});
    let d = run(&none, &remote);
    assert!(record_params(&d.object).is_empty(), "{}", d.object);
    // Params that are not a list are Tekton's to refuse, not bookend's to rewrite; where a
    // policy applies, bookend refuses them itself, naming the field.
    remote["spec"]["params"] = json!("bookend-injected");
    assert_eq!(run(&none, &remote).outcome, Outcome::Admitted);
    denied(
        &policies(PRE_POST),
        &remote,
        "spec.params: must be a list of params",
    );
}

#[test]
fn a_task_declaring_the_record_param_is_refused() {
    let set = policies(PRE_POST);
    let mut object = build_taskrun();
    object["spec"]["taskSpec"]["params"] =
        json!([{"name": "a"}, {"name": "bookend-injected", "type": "string"}]);
    let m = denied(&set, &object, "spec.taskSpec.params[1].name");
    assert!(m.contains("rename the Task's param"), "{m}");
    // No policy applies: nothing of bookend's to carry, the Task's business.
    assert_eq!(run(&policies(""), &object).outcome, Outcome::Admitted);
}

/// The Task a resolver returns, at Tekton's controller's dry-run: the same refusal.
#[test]
fn a_resolved_task_declaring_the_record_param_is_refused() {
    let set = policies(PRE_POST);
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "3f1c", "namespace": "team-a"},
        "spec": {"params": [{"name": "bookend-injected"}], "steps": [{"name": "build", "image": "go"}]}});
    let d = decide_resolved_task(
        Request {
            dry_run: true,
            ..request(&task)
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(d.outcome, Outcome::Denied, "{:?}", d.patch);
    assert!(
        d.message
            .as_deref()
            .unwrap_or_default()
            .contains("param \"bookend-injected\" is bookend's"),
        "{:?}",
        d.message
    );
}
