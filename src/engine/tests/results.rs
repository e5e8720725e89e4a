//! Policy `results`: added to `taskSpec.results` after the Task's own, reset before the policy's
//! post-steps, refused when the Task declares one of them, named in the record.

use super::*;

const PROVENANCE: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: provenance}
spec:
  postStepsRun: Always
  postSteps:
  - name: bookend-publish
    image: alpine
    command: [/bin/sh, -c]
    args: ['printf x > $(results.IMAGE_URL.path)']
  results:
  - {name: IMAGE_URL, type: string}
  - {name: IMAGES, type: array}
  - name: ARTIFACT_OUTPUTS
    type: object
    properties: {uri: {type: string}, digest: {type: string}}
"#;

fn with_results(results: Value) -> Value {
    let mut object = taskrun(json!([{"name": "build", "image": "go"}]));
    object["spec"]["taskSpec"]["results"] = results;
    object
}

fn reset_name(set: &PolicySet) -> String {
    set.policies()
        .iter()
        .find(|p| p.id.name() == "provenance")
        .map(|p| set.settings().reset_name(&p.hash))
        .unwrap()
}

#[test]
fn results_follow_the_tasks_own_and_are_reset_before_the_post_steps() {
    let set = policies(PROVENANCE);
    let out = assert_converges(&set, &with_results(json!([{"name": "own"}])));
    let reset = reset_name(&set);
    assert_eq!(
        names(&out),
        [
            "build",
            reset.as_str(),
            "bookend-publish",
            "bookend-verdict"
        ]
    );
    assert_eq!(
        out["spec"]["taskSpec"]["results"],
        json!([
            {"name": "own"},
            {"name": "IMAGE_URL", "type": "string"},
            {"name": "IMAGES", "type": "array"},
            {"name": "ARTIFACT_OUTPUTS", "type": "object",
             "properties": {"digest": {"type": "string"}, "uri": {"type": "string"}}}
        ])
    );
    let steps = steps_of(&out);
    // The reset runs whatever happened before (Always), and is must-succeed: the verdict
    // fails the TaskRun if it could not reset (the author's values would stand).
    assert!(steps[1].get("when").is_none());
    assert_eq!(steps[1]["onError"], "continue");
    assert_eq!(
        helper_script(&steps[1]),
        "cd /tekton/results&&umask 0&&rm -f IMAGE_URL IMAGES ARTIFACT_OUTPUTS&&printf ''>IMAGE_URL&&printf []>IMAGES&&printf {}>ARTIFACT_OUTPUTS"
    );
    assert_eq!(steps[1]["securityContext"]["runAsNonRoot"], true);
    assert!(helper_script(&steps[3]).contains(&format!("step-{reset}")));
    let record = record_of(&out);
    assert_eq!(
        record.policies[0].results,
        ["IMAGE_URL", "IMAGES", "ARTIFACT_OUTPUTS"]
    );
    assert_eq!(
        record.policies[0].steps,
        [reset.as_str(), "bookend-publish"]
    );
}

#[test]
fn a_taskrun_without_results_gets_the_policys() {
    let set = policies(PROVENANCE);
    let out = assert_converges(&set, &taskrun(json!([{"name": "build", "image": "go"}])));
    let names: Vec<&str> = out["spec"]["taskSpec"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["IMAGE_URL", "IMAGES", "ARTIFACT_OUTPUTS"]);
}

#[test]
fn a_task_result_of_the_same_name_is_refused_naming_both() {
    let set = policies(PROVENANCE);
    // Even declared exactly as the policy does: the Task's steps would write it.
    for declared in [
        json!([{"name": "IMAGE_URL", "type": "string"}]),
        json!([{"name": "own"}, {"name": "IMAGE_URL"}]),
    ] {
        let message = denied(&set, &with_results(declared), "IMAGE_URL");
        assert!(
            message.contains("ClusterStepPolicy/provenance"),
            "{message}"
        );
        assert!(
            message.contains("the Task declares result \"IMAGE_URL\""),
            "{message}"
        );
        assert!(message.contains("rename the Task's result"), "{message}");
    }
}

#[test]
fn after_defaulting_the_admitted_taskrun_settles() {
    // Tekton's defaulting writes `type: string` into every result: still bookend's own.
    let set = policies(PROVENANCE);
    let mut out = assert_converges(&set, &with_results(json!([{"name": "own"}])));
    for result in out["spec"]["taskSpec"]["results"].as_array_mut().unwrap() {
        if result.get("type").is_none() {
            result["type"] = json!("string");
        }
    }
    assert_settled(&set, &out);
}

#[test]
fn two_policies_declaring_one_result_deny() {
    let other = r#"
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: sbom}
spec:
  priority: 50
  postStepsRun: Always
  postSteps: [{name: bookend-sbom, image: alpine}]
  results: [{name: IMAGE_URL}]
"#;
    let set = policies(&format!("{PROVENANCE}{other}"));
    let message = denied(
        &set,
        &taskrun(json!([{"name": "build", "image": "go"}])),
        "is also declared by",
    );
    assert!(message.contains("IMAGE_URL"), "{message}");
}

fn result_names(results: &Value) -> Vec<&str> {
    results
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect()
}

#[test]
fn v1beta1_and_inlined_tasks_get_the_results_too() {
    let set = policies(PROVENANCE);
    let mut object = with_results(json!([{"name": "own"}]));
    object["apiVersion"] = json!("tekton.dev/v1beta1");
    let out = assert_converges(&set, &object);
    assert_eq!(
        result_names(&out["spec"]["taskSpec"]["results"]),
        ["own", "IMAGE_URL", "IMAGES", "ARTIFACT_OUTPUTS"]
    );

    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                 "metadata": {"name": "build", "namespace": "team-a"},
                 "spec": {"results": [{"name": "own"}], "steps": [{"name": "build", "image": "go"}]}})],
        "team-a",
    );
    let by_ref = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                        "metadata": {"name": "r", "namespace": "team-a"},
                        "spec": {"taskRef": {"name": "build"}}});
    let d = run_with(&set, &by_ref, &catalog);
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    assert_eq!(
        result_names(&d.object["spec"]["taskSpec"]["results"]),
        ["own", "IMAGE_URL", "IMAGES", "ARTIFACT_OUTPUTS"]
    );

    // A Task whose own result clashes is refused when inlined, too.
    let mut clashing = Catalog::default();
    clashing.add_objects(
        &[json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                 "metadata": {"name": "build", "namespace": "team-a"},
                 "spec": {"results": [{"name": "IMAGES", "type": "array"}],
                          "steps": [{"name": "build", "image": "go"}]}})],
        "team-a",
    );
    let d = run_with(&set, &by_ref, &clashing);
    assert_eq!(d.outcome, Outcome::Denied);
    assert!(
        d.message
            .as_deref()
            .unwrap_or_default()
            .contains("the Task declares result \"IMAGES\""),
        "{:?}",
        d.message
    );
}

#[test]
fn the_authors_view_for_audit_policies_drops_the_policys_results() {
    // An Audit policy planned on an admitted TaskRun sees it as its author wrote it: the
    // enforced policy's results are bookend's, not a clash.
    let audit = r#"
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: audit}
spec:
  mode: Audit
  postSteps: [{name: bookend-audit, image: alpine}]
"#;
    let set = policies(&format!("{PROVENANCE}{audit}"));
    let out = assert_converges(&set, &with_results(json!([{"name": "own"}])));
    let again = run(&set, &out);
    assert!(
        again.warnings.iter().all(|w| !w.contains("would deny")),
        "{:?}",
        again.warnings
    );
}
