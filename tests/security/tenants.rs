//! Class 5: a team (rights only in its namespace: StepPolicies there) cannot hurt another team
//! or the org: its volumes carry the reserved prefix; its names are its namespace's, never the
//! org's; it cannot block or displace a ClusterStepPolicy through the webhook or the set; its
//! budget is its own; its steps run inside the org's.
//! Class 7: policies that would let a TaskRun's author write an org step are refused (I6).

use bookend::admission::{Endpoint, review};
use bookend::engine::Catalog;
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{IssueKind, Settings};
use serde_json::{Value, json};

use crate::cases::{build_step, inline};
use crate::decide;

const ORG: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-06-01T00:00:00Z"}
spec:
  preSteps: [{name: bookend-creds, image: creds, command: ["/creds"], volumeMounts: [{name: bookend-vol, mountPath: /v}]}]
  volumes: [{name: bookend-vol, emptyDir: {}}]
"#;

fn team(namespace: &str, step: &str, volume: &str, priority: i32) -> String {
    format!(
        "apiVersion: bookend.dev/v1alpha1\nkind: StepPolicy\nmetadata: {{name: team, namespace: {namespace}, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec:\n  priority: {priority}\n  preSteps: [{{name: {step}, image: lint, command: [\"/lint\"], volumeMounts: [{{name: {volume}, mountPath: /t}}]}}]\n  postSteps: [{{name: {step}-post, image: lint, command: [\"/lint\"]}}]\n  volumes: [{{name: {volume}, emptyDir: {{}}}}]\n"
    )
}

fn load(yaml: &str) -> bookend::policy::load::LoadedSet {
    policy_set_from_yaml("tenants.yaml", yaml, Settings::default())
}

/// The policy webhook's answer for a CREATE of `object` with `yaml` loaded.
fn admit(yaml: &str, object: Value) -> Value {
    let set = load(yaml).set;
    let kind = object["kind"].as_str().unwrap().to_owned();
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE",
                    "kind": {"group": "bookend.dev", "version": "v1alpha1", "kind": kind},
                    "object": object}});
    let reply = review(
        Endpoint::Validate,
        &serde_json::to_vec(&body).unwrap(),
        &set,
        &Catalog::default(),
    );
    serde_json::from_slice::<Value>(&reply.body).unwrap()["response"].clone()
}

fn object(yaml: &str) -> Value {
    serde_yaml_ng::from_str(yaml).unwrap()
}

#[test]
fn a_team_volume_must_carry_the_prefix() {
    let loaded = load(&team("team-a", "bookend-lint", "cache", 0));
    assert_eq!(loaded.set.len(), 0);
    assert!(
        loaded.issues[0]
            .message
            .contains("must start with the reserved prefix"),
        "{:?}",
        loaded.issues
    );
}

#[test]
fn a_team_cannot_take_or_block_the_orgs_names() {
    // The team's policy came first with the org's step and volume names.
    let team_first = team("team-a", "bookend-creds", "bookend-vol", -1000);
    // The webhook admits the org's policy all the same ...
    let answer = admit(&team_first, object(ORG));
    assert_eq!(answer["allowed"], true, "{answer}");
    // ... and in the set the org's stays and the team's is the one left out.
    let loaded = load(&format!("{team_first}---\n{ORG}"));
    let ids: Vec<String> = loaded
        .set
        .policies()
        .iter()
        .map(|p| p.id.to_string())
        .collect();
    assert_eq!(ids, ["ClusterStepPolicy/org"]);
    assert!(
        loaded
            .issues
            .iter()
            .all(|i| i.kind == IssueKind::Conflict && i.policy == "StepPolicy/team-a/team")
    );
    // With the org's loaded, the team's is refused by the webhook, naming the org's.
    let answer = admit(ORG, object(&team_first));
    assert_eq!(answer["allowed"], false, "{answer}");
    assert!(
        answer["status"]["message"]
            .as_str()
            .unwrap()
            .contains("ClusterStepPolicy/org"),
        "{answer}"
    );
    // The org's steps still come first in the team's namespace, whatever the team's priority.
    let loaded = load(&format!(
        "{}---\n{ORG}",
        team("team-a", "bookend-lint", "bookend-lint-vol", -1000)
    ));
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let d = decide(
        &inline(json!([build_step()])),
        "team-a",
        &loaded.set,
        &Catalog::default(),
    );
    let names: Vec<&str> = d.object["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bookend-creds",
            "bookend-lint",
            "build",
            "bookend-lint-post"
        ]
    );
}

#[test]
fn teams_do_not_affect_each_other() {
    // The same names in two namespaces: both load, each applies in its own.
    let both = format!(
        "{}---\n{}",
        team("team-a", "bookend-lint", "bookend-lint-vol", 0),
        team("team-b", "bookend-lint", "bookend-lint-vol", 0)
    );
    let loaded = load(&both);
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    assert_eq!(loaded.set.len(), 2);
    // A team's volume is bookend's only where that team's policy applies: in another
    // namespace a TaskRun's own volume is left alone (no reserved name), or refused by name
    // (a reserved one), never silently stripped.
    let mut run = inline(json!([build_step()]));
    run["spec"]["taskSpec"]["volumes"] = json!([{"name": "cache", "emptyDir": {}}]);
    let d = decide(&run, "team-c", &loaded.set, &Catalog::default());
    assert_eq!(d.outcome, bookend::engine::Outcome::Admitted);
    run["spec"]["taskSpec"]["volumes"] = json!([{"name": "bookend-lint-vol", "emptyDir": {}}]);
    let d = decide(&run, "team-c", &loaded.set, &Catalog::default());
    assert_eq!(d.outcome, bookend::engine::Outcome::Denied);
    assert!(d.message.unwrap().contains("spec.taskSpec.volumes[0].name"));
}

#[test]
fn org_steps_cannot_be_written_by_the_taskruns_author() {
    for (what, step, says) in [
        (
            "a param in a shell string",
            r#"{name: bookend-x, image: alpine, command: [sh, -c], args: ["curl $(params.url)"]}"#,
            "the TaskRun's author controls",
        ),
        (
            "a param in a script",
            r#"{name: bookend-x, image: alpine, script: "echo $(params.msg)"}"#,
            "the TaskRun's author controls",
        ),
        (
            "a param as the image",
            r#"{name: bookend-x, image: "$(params.image)"}"#,
            "image uses",
        ),
        (
            "a workspace path in a script",
            r#"{name: bookend-x, image: alpine, script: "ls $(workspaces.src.path)"}"#,
            "the TaskRun's author controls",
        ),
        (
            "a StepAction from the TaskRun's namespace",
            r#"{name: bookend-x, ref: {name: clone}}"#,
            "in the TaskRun's namespace",
        ),
        (
            "a StepAction from a moving tag",
            r#"{name: bookend-x, ref: {resolver: bundles, params: [{name: bundle, value: "reg/x:latest"}, {name: name, value: x}, {name: kind, value: stepaction}]}}"#,
            "by digest",
        ),
    ] {
        let yaml = format!(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {{name: org}}\nspec:\n  preSteps: [{step}]\n"
        );
        let loaded = load(&yaml);
        assert_eq!(loaded.set.len(), 0, "{what}");
        assert!(
            loaded.issues.iter().any(|i| i.message.contains(says)),
            "{what}: {:?}",
            loaded.issues
        );
        let answer = admit("", object(&yaml));
        assert_eq!(answer["allowed"], false, "{what}: {answer}");
    }
    // Passed through env, the value is data: accepted.
    let safe = "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  preSteps: [{name: bookend-x, image: alpine, env: [{name: URL, value: \"$(params.url)\"}], command: [sh, -c], args: [\"curl \\\"$URL\\\"\"]}]\n";
    assert!(load(safe).issues.is_empty(), "{:?}", load(safe).issues);
}

/// I9 against a namespace admin: under a ClusterStepPolicy's `userSteps.network: None`, no step
/// of a namespace's own StepPolicy runs in the TaskRun's Pod (org steps keep the network, and a
/// StepPolicy is not the platform's): the TaskRun is refused naming it, whatever the two
/// policies' steps, priorities and the StepPolicy's own `userSteps` say, for every Task form.
/// Where only the namespace asks for the jail, its policy's steps keep the network.
#[test]
fn no_namespace_policys_step_keeps_the_network_under_the_platforms_jail() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let strategy = (
        any::<bool>(),
        0usize..3,
        (any::<bool>(), any::<bool>(), any::<bool>()),
        -100i32..100,
        0usize..4,
    );
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    let (denied, admitted) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
    runner
        .run(
            &strategy,
            |(platform_jails, platform_steps, (team_pre, team_post, team_jails), priority, form)| {
                let platform = format!(
                    "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {{name: org, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec:\n  userSteps: {{network: {}}}\n  preSteps: [{}]\n",
                    if platform_jails { "None" } else { "Pod" },
                    (0..platform_steps)
                        .map(|i| format!("{{name: bookend-org-{i}, image: org, command: [\"/org\"]}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let mut team = format!(
                    "apiVersion: bookend.dev/v1alpha1\nkind: StepPolicy\nmetadata: {{name: team, namespace: team-a, creationTimestamp: \"2026-01-01T00:00:00Z\"}}\nspec:\n  priority: {priority}\n  userSteps: {{network: {}}}\n",
                    if team_jails { "None" } else { "Pod" }
                );
                if team_pre {
                    team.push_str("  preSteps: [{name: bookend-team-pre, image: curl, command: [\"/fetch\"]}]\n");
                }
                if team_post {
                    team.push_str("  postSteps: [{name: bookend-team-post, image: curl, command: [\"/push\"]}]\n");
                }
                let loaded = load(&format!("{platform}---\n{team}"));
                prop_assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
                let mut taskrun = inline(json!([build_step()]));
                match form {
                    1 => taskrun["spec"] = json!({"taskRef": {"name": "build"}}),
                    2 => taskrun["spec"] = json!({"taskRef": {"resolver": "git", "params": []}}),
                    3 => taskrun["apiVersion"] = json!("tekton.dev/v1beta1"),
                    _ => {}
                }
                let d = decide(&taskrun, "team-a", &loaded.set, &crate::catalog());
                let message = d.message.clone().unwrap_or_default();
                let team_steps = team_pre || team_post;
                if platform_jails && team_steps {
                    prop_assert_eq!(d.outcome, bookend::engine::Outcome::Denied, "admitted: {}", d.object);
                    prop_assert!(
                        message.contains("StepPolicy/team-a/team") && message.contains("ClusterStepPolicy/org"),
                        "{}",
                        message
                    );
                    denied.set(denied.get() + 1);
                } else {
                    prop_assert!(
                        !message.contains("may not keep the network here"),
                        "refused without the platform's jail and the namespace's steps: {}",
                        message
                    );
                    if d.outcome != bookend::engine::Outcome::Denied {
                        admitted.set(admitted.get() + 1);
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    assert!(
        denied.get() > 0 && admitted.get() > 0,
        "{} {}",
        denied.get(),
        admitted.get()
    );
}
