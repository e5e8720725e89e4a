//! Recognising bookend's own steps on a later pass: Tekton's defaulting, the reserved prefix,
//! tampered steps, older policy versions, steps of policies that no longer apply.

use super::*;

#[test]
fn tekton_defaulting_round_trip_is_recognised() {
    let set = policies(&format!(
        "{ALWAYS}---\n{}",
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: res}
spec:
  preSteps:
  - name: bookend-res
    image: alpine
    timeout: 5m
    computeResources: {limits: {cpu: "0.5"}}
    results: [{name: out}]
"#
    ));
    let first = run(&set, &taskrun(json!([{"image": "go"}])));
    // What Tekton's defaulting webhook does to every step when it round-trips the object.
    let mut defaulted = first.object.clone();
    for step in defaulted["spec"]["taskSpec"]["steps"]
        .as_array_mut()
        .unwrap()
    {
        let s = step.as_object_mut().unwrap();
        s.insert(
            "computeResources".into(),
            s.get("computeResources").cloned().unwrap_or(json!({})),
        );
        s.entry("name").or_insert(json!(""));
        if s.get("name") == Some(&json!("bookend-res")) {
            s.insert("timeout".into(), json!("5m0s"));
            s.insert(
                "computeResources".into(),
                json!({"limits": {"cpu": "500m"}}),
            );
            s.insert("results".into(), json!([{"name": "out", "type": "string"}]));
        }
    }
    assert_settled(&set, &defaulted);
}

#[test]
fn a_user_step_with_the_prefix_is_denied_not_dropped() {
    let set = policies(PRE_POST);
    let m = denied(
        &set,
        &taskrun(json!([{"name": "bookend-mine", "image": "go"}])),
        "spec.taskSpec.steps[0].name",
    );
    assert!(m.contains("reserved prefix \"bookend-\""), "{m}");
    // A helper's name: not one bookend writes for this TaskRun.
    denied(
        &set,
        &taskrun(json!([{"name": "bookend-gate-1", "image": "go"}])),
        "no policy that applies to this TaskRun injects a step of that name",
    );
}

#[test]
fn a_tampered_injected_step_is_denied() {
    let set = policies(PRE_POST);
    let first = run(&set, &build_taskrun());
    let mut tampered = first.object.clone();
    tampered["spec"]["taskSpec"]["steps"][0]["image"] = json!("evil");
    let m = denied(
        &set,
        &tampered,
        "step \"bookend-outer-pre\" differs from what ClusterStepPolicy/outer injects (its image differs)",
    );
    assert!(
        m.starts_with("bookend: spec.taskSpec.steps[0].name: "),
        "{m}"
    );
}

#[test]
fn a_step_from_an_older_policy_version_is_denied_with_the_version() {
    // Only what bookend would write now is its own: a copy of a TaskRun injected by an older
    // version of a policy is refused (the record, a hint, names the version in the message).
    let set = policies(PRE_POST);
    let first = run(&set, &build_taskrun());
    let newer = policies(&PRE_POST.replacen(
        "{name: bookend-outer-pre, image: alpine}",
        "{name: bookend-outer-pre, image: alpine:3.21}",
        1,
    ));
    let m = denied(
        &newer,
        &first.object,
        "differs from what ClusterStepPolicy/outer injects",
    );
    let old_hash = &set.policies()[0].hash;
    assert!(
        m.contains(&format!(
            "names version {old_hash} of ClusterStepPolicy/outer"
        )),
        "{m}"
    );
    // Without the record (or with a forged one) the answer is the same, less the version.
    let mut bare = first.object.clone();
    bare["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(record::ANNOTATION);
    denied(
        &newer,
        &bare,
        "differs from what ClusterStepPolicy/outer injects",
    );
}

#[test]
fn injected_steps_no_longer_matching_are_refused() {
    let set = policies(PRE_POST);
    let injected = run(&set, &build_taskrun()).object;
    let elsewhere = decide(
        Request {
            namespace: "ops",
            ..request(&injected)
        },
        &policies(
            &PRE_POST
                .replace(
                    "priority: 1\n",
                    "priority: 1\n  match: {namespaces: [team-*]}\n",
                )
                .replace(
                    "priority: 2\n",
                    "priority: 2\n  match: {namespaces: [team-*]}\n",
                ),
        ),
        &Catalog::default(),
    );
    // Where no policy applies, bookend's steps are not bookend's to write: refused, not dropped.
    assert_eq!(elsewhere.outcome, Outcome::Denied);
    let m = elsewhere.message.unwrap();
    assert!(
        m.contains("no policy that applies to this TaskRun injects a step of that name"),
        "{m}"
    );
}
