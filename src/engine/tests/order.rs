//! The order of injected steps: policies by priority around the TaskRun's steps, the org's
//! outside the team's.

use super::*;

#[test]
fn on_success_wraps_outer_policy_outermost() {
    let set = policies(PRE_POST);
    let out = assert_converges(
        &set,
        &taskrun(json!([{"name": "build", "image": "go"}, {"image": "go"}])),
    );
    assert_eq!(
        names(&out),
        [
            "bookend-outer-pre",
            "bookend-inner-pre",
            "build",
            "<unnamed>",
            "bookend-inner-post",
            "bookend-outer-post"
        ]
    );
    // OnSuccess changes nothing in the user's steps.
    assert_eq!(
        out["spec"]["taskSpec"]["steps"][2],
        json!({"name": "build", "image": "go"})
    );
    let record = record_of(&out);
    assert_eq!(record.policies[0].policy, "ClusterStepPolicy/outer");
    assert_eq!(
        record.policies[0].steps,
        ["bookend-outer-pre", "bookend-outer-post"]
    );
    assert_eq!(record.policies[0].hash.len(), 12);
    assert!(record.helpers.is_empty());
}

/// A team (StepPolicy, priority -1000) wraps its steps around the TaskRun's; the org
/// (ClusterStepPolicy, priority 1000) wraps its steps around the team's: org pre-steps first,
/// org post-steps last, with `Always` on either side.
#[test]
fn team_steps_always_run_inside_org_steps() {
    let yaml = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  priority: 1000
  postStepsRun: Always
  preSteps: [{name: bookend-org-pre, image: alpine}]
  postSteps: [{name: bookend-org-post, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: team, namespace: team-a}
spec:
  priority: -1000
  postStepsRun: Always
  preSteps: [{name: bookend-team-pre, image: alpine}]
  postSteps: [{name: bookend-team-post, image: alpine}]
"#;
    let set = policies(yaml);
    let d = run(&set, &build_taskrun());
    assert_eq!(d.outcome, Outcome::Mutated);
    let order: Vec<String> = names(&d.object)
        .into_iter()
        .filter(|n| !set.settings().is_helper_name(n))
        .collect();
    assert_eq!(
        order,
        [
            "bookend-org-pre",
            "bookend-team-pre",
            "build",
            "bookend-team-post",
            "bookend-org-post"
        ]
    );
    // Nothing after the org's last post-step but the verdict, nothing before its first pre-step.
    let all = names(&d.object);
    assert_eq!(all[0], "bookend-org-pre");
    assert_eq!(
        all[all.len() - 2..],
        ["bookend-org-post", "bookend-verdict"]
    );
}
