//! Hostile create/update sequences against post-run verification (docs/security.md, I8): the
//! author writes bookend's marks at CREATE, then the author and Tekton's controller update the
//! TaskRun at random (add, change, remove labels and annotations under `bookend.dev/` and
//! others, drop whole maps), while the TaskRun finishes and bookend's watch looks at random
//! moments. CREATE goes through the engine as `/mutate` decides it, every UPDATE through
//! bookend's `/validate` as the API server sends it (all of them: the chart's matchCondition
//! only filters, bookend does not rely on it), and an UPDATE bookend refuses is not stored.
//!
//! Invariant: a TaskRun bookend injected into (or, its Task coming from a resolver, marked for
//! injection at the resolution) keeps its record and the `bookend.dev/verify` label as bookend
//! wrote them, carries no `bookend.dev/verified` until bookend writes it, and bookend produces
//! its verdict exactly once, after it finished; a TaskRun bookend did not inject into is never
//! selected by the watch.
//!
//! And for a TaskRun whose Task comes from a resolver, verified from the Task that ran
//! (`status.taskSpec`, written by Tekton's controller from what the resolver returned and
//! bookend's dry-run mutation made of it, when that ran): whatever the author puts in that Task
//! (look-alikes of org steps, exact copies, steps in any order) and however its steps end, a
//! policy passes only if each of its steps is in the Task exactly as bookend's dry-run writes it
//! (an org step that is a StepAction: exactly as Tekton's controller resolves that StepAction,
//! and the StepAction unchanged since the run) and its pre-steps and Always post-steps
//! completed, in every attempt (`spec.retries`: the earlier ones archived in
//! `status.retriesStatus`); and every policy of the record gets a verdict.
//!
//! Where the webhooks do not run, anyone writes any mark. Invariant of the policies' counts
//! (`status.verification`): a mark counts for a policy only on a TaskRun in a namespace where
//! that policy can apply, and no mark adds a cause key that is not a short lowercase word.
//!
//! `BOOKEND_SECURITY_CASES` sets the number of sequences (default 3000); failing seeds are kept
//! in `tests/security/marks.proptest-regressions`.

use bookend::admission::{Endpoint, review};
use bookend::engine::verify::{RunVerdict, verify};
use bookend::engine::{Outcome, Request, decide_resolved_task, record};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{DEFAULT_TEKTON_CONTROLLER, PolicySet, Settings};
use bookend::verification::{self, Seen};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};

use crate::{cases, catalog, decide};

const BOOKEND: &str = "system:serviceaccount:bookend-system:bookend";

/// The security policies, with bookend knowing its own user as it does in a cluster.
fn policies_knowing_bookend() -> PolicySet {
    let settings = Settings {
        own_user: Some(BOOKEND.to_owned()),
        ..Settings::default()
    };
    let loaded = policy_set_from_yaml("security.yaml", cases::POLICIES, settings);
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

fn mark_key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => Just(record::LABEL),
        3 => Just(record::VERIFIED_ANNOTATION),
        3 => Just(record::ANNOTATION),
        1 => Just(record::INLINED_ANNOTATION),
        1 => Just("bookend.dev/other"),
        1 => Just("Bookend.dev/verify"),
        2 => Just("team"),
        1 => Just("tekton.dev/task"),
    ]
}

fn mark_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just(String::new()),
        Just("{}".to_owned()),
        Just(r#"{"ClusterStepPolicy/org-sbom":"pass"}"#.to_owned()),
        Just(r#"{"policies":[]}"#.to_owned()),
    ]
}

#[derive(Clone, Debug)]
enum Edit {
    Set {
        labels: bool,
        key: &'static str,
        value: String,
    },
    Remove {
        labels: bool,
        key: &'static str,
    },
    /// `metadata.labels` or `metadata.annotations` replaced whole (null or `{}`).
    Drop {
        labels: bool,
        null: bool,
    },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<bool>(), mark_key(), mark_value())
            .prop_map(|(labels, key, value)| Edit::Set { labels, key, value }),
        3 => (any::<bool>(), mark_key()).prop_map(|(labels, key)| Edit::Remove { labels, key }),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(labels, null)| Edit::Drop { labels, null }),
    ]
}

fn apply(object: &mut Value, edit: &Edit) {
    let map = |labels: bool| if labels { "labels" } else { "annotations" };
    match edit {
        Edit::Set { labels, key, value } => {
            let m = &mut object["metadata"][map(*labels)];
            if !m.is_object() {
                *m = json!({});
            }
            m[*key] = json!(value);
        }
        Edit::Remove { labels, key } => {
            if let Some(m) = object["metadata"][map(*labels)].as_object_mut() {
                m.remove(*key);
            }
        }
        Edit::Drop { labels, null } => {
            object["metadata"][map(*labels)] = if *null { Value::Null } else { json!({}) };
        }
    }
}

#[derive(Clone, Debug)]
enum Move {
    /// An UPDATE by the author (`true`) or by Tekton's controller (copying a Task's metadata).
    Update { author: bool, edits: Vec<Edit> },
    /// Tekton's controller finishes the TaskRun (through `status`: no admission, no metadata).
    Finish,
    /// bookend's watch sees the TaskRun (an event, a relist after a restart).
    Look,
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    let one = prop_oneof![
        5 => (any::<bool>(), prop::collection::vec(edit(), 1..4))
            .prop_map(|(author, edits)| Move::Update { author, edits }),
        1 => Just(Move::Finish),
        2 => Just(Move::Look),
    ];
    prop::collection::vec(one, 0..12)
}

/// A TaskRun as its author creates it: in a namespace the org's policies cover or not, with
/// marks of bookend's written in.
fn created() -> impl Strategy<Value = (&'static str, Value)> {
    (
        prop_oneof![Just("team-a"), Just("elsewhere")],
        prop::collection::vec(edit(), 0..5),
        any::<bool>(),
    )
        .prop_map(|(namespace, edits, remote)| {
            let mut taskrun = if remote {
                remote_taskrun()
            } else {
                cases::inline(json!([cases::build_step()]))
            };
            taskrun["metadata"]["namespace"] = json!(namespace);
            for e in &edits {
                apply(&mut taskrun, e);
            }
            (namespace, taskrun)
        })
}

/// A TaskRun whose Task a resolver fetches: no steps at CREATE.
fn remote_taskrun() -> Value {
    cases::with_spec(json!({"taskRef": {"resolver": "git", "params": [
        {"name": "url", "value": "https://git.example/tasks"},
        {"name": "pathInRepo", "value": "build.yaml"}]}}))
}

/// bookend's answer to an UPDATE from `user`: admitted or not.
fn update_allowed(set: &PolicySet, user: &str, old: &Value, new: &Value) -> bool {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "UPDATE", "namespace": old["metadata"]["namespace"],
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "taskruns"},
            "userInfo": {"username": user}, "object": new, "oldObject": old}});
    let reply = review(
        Endpoint::Validate,
        &serde_json::to_vec(&body).unwrap(),
        set,
        &catalog(),
    );
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    answer["response"]["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("an AdmissionReview answer: {answer}"))
}

fn entry<'a>(object: &'a Value, map: &str, key: &str) -> Option<&'a Value> {
    object["metadata"][map].as_object().and_then(|m| m.get(key))
}

/// What the watch selects: the label selector `bookend.dev/verify=true`.
fn selected(object: &Value) -> bool {
    entry(object, "labels", record::LABEL) == Some(&json!(record::LABEL_VALUE))
}

#[test]
fn no_hostile_create_or_update_escapes_verification() {
    let set = policies_knowing_bookend();
    let catalog = catalog();
    let config = Config {
        cases: super::invariant::cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/marks.proptest-regressions",
        ))),
        ..Config::default()
    };
    let counts = std::cell::RefCell::new([0usize; 3]);
    proptest!(config, |((namespace, taskrun) in created(), moves in moves())| {
        let decision = decide(&taskrun, namespace, &set, &catalog);
        prop_assert!(decision.outcome != Outcome::Denied, "{:?}", decision.message);
        let mut stored = decision.object.clone();
        let injected = entry(&stored, "annotations", record::ANNOTATION).cloned();
        // At CREATE: no verified mark, the label exactly with bookend's record.
        prop_assert!(entry(&stored, "annotations", record::VERIFIED_ANNOTATION).is_none(), "{stored}");
        prop_assert_eq!(selected(&stored), injected.is_some(), "{}", stored);
        prop_assert_eq!(entry(&stored, "labels", record::LABEL).is_some(), injected.is_some());
        if injected.is_some() {
            counts.borrow_mut()[0] += 1;
        }
        let marks = |o: &Value| -> Vec<(String, Value)> {
            ["labels", "annotations"].iter().flat_map(|map| {
                o["metadata"][*map].as_object().into_iter().flatten()
                    .filter(|(k, _)| k.starts_with(record::MARK_PREFIX))
                    .map(move |(k, v)| (format!("{map}/{k}"), v.clone()))
            }).collect()
        };
        let mut verdicts = 0;
        let mut finished = false;
        let look = |stored: &mut Value, verdicts: &mut usize| {
            if !selected(stored) || verification::seen(stored) != Seen::Finished {
                return;
            }
            let mut marked = stored.clone();
            marked["metadata"]["annotations"][record::VERIFIED_ANNOTATION] = json!("{}");
            if update_allowed(&set, BOOKEND, stored, &marked) {
                *stored = marked;
                *verdicts += 1;
            }
        };
        for m in moves.iter().chain([Move::Finish, Move::Look, Move::Look].iter()) {
            match m {
                Move::Update { author, edits } => {
                    let mut new = stored.clone();
                    for e in edits {
                        apply(&mut new, e);
                    }
                    let user = if *author { "alice" } else { DEFAULT_TEKTON_CONTROLLER };
                    let allowed = update_allowed(&set, user, &stored, &new);
                    let changes_marks = marks(&stored) != marks(&new);
                    prop_assert_eq!(allowed, !changes_marks, "{} {:?}", user, edits);
                    if allowed {
                        counts.borrow_mut()[1] += 1;
                        stored = new;
                    } else {
                        counts.borrow_mut()[2] += 1;
                    }
                }
                Move::Finish => {
                    finished = true;
                    stored["status"] = json!({"conditions": [
                        {"type": "Succeeded", "status": "False", "reason": "Failed"}]});
                }
                Move::Look => look(&mut stored, &mut verdicts),
            }
            // Whatever happened so far: bookend's marks are as bookend left them.
            prop_assert_eq!(entry(&stored, "annotations", record::ANNOTATION), injected.as_ref());
            prop_assert_eq!(selected(&stored), injected.is_some());
            prop_assert_eq!(
                entry(&stored, "annotations", record::VERIFIED_ANNOTATION).is_some(),
                verdicts == 1
            );
        }
        prop_assert!(finished);
        prop_assert_eq!(verdicts, usize::from(injected.is_some()), "{}", stored);
    });
    let [injected, admitted, refused] = counts.into_inner();
    eprintln!(
        "hostile sequences: {injected} injected TaskRuns; {admitted} UPDATEs admitted, {refused} refused"
    );
    assert!(
        injected > 0 && admitted > 0 && refused > 0,
        "the generator reaches every answer"
    );
}

/// The policies whose reach the counting invariant checks, and the namespaces each can apply
/// in (read from `cases::POLICIES`, apart from the engine).
/// Whether a namespace is one a policy can apply in.
type Reaches = fn(&str) -> bool;

const REACH: [(&str, Reaches); 5] = [
    ("ClusterStepPolicy/org-creds", |ns| ns.starts_with("team-")),
    ("ClusterStepPolicy/org-sbom", |ns| ns.starts_with("team-")),
    ("StepPolicy/team-a/team-lint", |ns| ns == "team-a"),
    ("ClusterStepPolicy/strict-refs", |ns| ns == "strict"),
    ("ClusterStepPolicy/skip-refs", |ns| ns == "skip"),
];

/// One mark entry: (policy, verdict, cause).
type Entry = (&'static str, &'static str, String);

/// Marked TaskRuns as anyone could write them where the webhooks do not run:
/// (namespace, entries) each.
fn forged_marks() -> impl Strategy<Value = Vec<(&'static str, Vec<Entry>)>> {
    let namespace = prop_oneof![
        Just("team-a"),
        Just("team-b"),
        Just("strict"),
        Just("skip"),
        Just("kube-system"),
        Just("bookend-system"),
    ];
    let policy = prop_oneof![
        Just("ClusterStepPolicy/org-creds"),
        Just("ClusterStepPolicy/org-sbom"),
        Just("StepPolicy/team-a/team-lint"),
        Just("StepPolicy/team-b/team-lint"),
        Just("ClusterStepPolicy/strict-refs"),
        Just("ClusterStepPolicy/skip-refs"),
        Just("ClusterStepPolicy/gone"),
    ];
    let verdict =
        prop_oneof![4 => Just("pass"), 4 => Just("fail"), 1 => Just("PASS"), 1 => Just("")];
    let cause = prop_oneof![
        Just(String::new()),
        Just("did_not_run".to_owned()),
        "[a-z_]{1,8}",
        "\\PC{0,80}",
    ];
    prop::collection::vec(
        (
            namespace,
            prop::collection::vec((policy, verdict, cause), 0..5),
        ),
        0..24,
    )
}

#[test]
fn no_forged_mark_counts_for_a_policy_that_cannot_apply_in_its_namespace() {
    use bookend::engine::verdict_counts::{Mark, Tally};
    use std::time::Duration;

    let set = policies_knowing_bookend();
    let catalog = catalog();
    let config = Config {
        cases: super::invariant::cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/marks.proptest-regressions",
        ))),
        ..Config::default()
    };
    let end: k8s_openapi::jiff::Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
    proptest!(config, |(runs in forged_marks())| {
        let mut tally = Tally::new(&set, &catalog, end, Duration::from_secs(3600));
        let mut expected: std::collections::BTreeMap<&str, (i64, i64)> = Default::default();
        for (i, (namespace, entries)) in runs.iter().enumerate() {
            let mut mark = Mark { at: "2026-12-02T11:30:00Z".to_owned(), ..Mark::default() };
            for (policy, verdict, cause) in entries {
                mark.verdicts.insert((*policy).to_owned(), (*verdict).to_owned());
                if !cause.is_empty() {
                    mark.causes.insert((*policy).to_owned(), cause.clone());
                }
            }
            // A later entry for the same policy replaces an earlier one, as in the JSON map.
            for (policy, verdict) in &mark.verdicts {
                if let Some((_, reaches)) = REACH.iter().find(|(p, _)| p == policy)
                    && reaches(namespace)
                {
                    let e = expected.entry(REACH.iter().find(|(p, _)| p == policy).unwrap().0).or_default();
                    match verdict.as_str() {
                        "pass" => e.0 += 1,
                        "fail" => e.1 += 1,
                        _ => {}
                    }
                }
            }
            tally.add(&json!({
                "namespace": namespace,
                "name": format!("run-{i}"),
                "labels": {record::LABEL: record::LABEL_VALUE},
                "annotations": {record::VERIFIED_ANNOTATION: mark.to_annotation()},
            }));
        }
        let statuses = tally.statuses();
        for (policy, _) in REACH {
            let s = &statuses[policy];
            prop_assert_eq!((s.passed, s.failed), expected.get(policy).copied().unwrap_or_default(), "{}", policy);
            prop_assert_eq!(s.failed_by_cause.values().sum::<i64>(), s.failed);
            prop_assert!(s.failed_by_cause.len() <= 17, "{:?}", s.failed_by_cause);
            for cause in s.failed_by_cause.keys() {
                prop_assert!(
                    !cause.is_empty() && cause.len() <= 63
                        && cause.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{:?}", cause
                );
            }
            if let Some(last) = &s.last_failure {
                prop_assert!(REACH.iter().any(|(p, reaches)| *p == policy && reaches(&last.namespace)));
            }
        }
    });
}

/// A step of the author's Task.
#[derive(Clone, Debug)]
enum AuthorStep {
    Build,
    Test,
    /// A step named like an org step, doing something else.
    LookAlike(&'static str),
    /// An exact copy of an org step as bookend's dry-run writes it.
    Copy(&'static str),
    /// The org StepAction step as Tekton resolves it, written inline by the author, with
    /// `field` set to `value` (`None`: removed); an unchanged field gives the exact resolution.
    ResolvedAlike(&'static str, Option<Value>),
}

/// An org policy whose pre-step is a StepAction of the platform's namespace.
const STEP_ACTION_POLICY: &str = r#"
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-clone}
spec:
  priority: 15
  match: {namespaces: ["team-*"]}
  preSteps:
    - name: bookend-clone
      ref: {resolver: cluster, params: [{name: kind, value: stepaction}, {name: name, value: git-clone}, {name: namespace, value: platform}]}
      params: [{name: depth, value: "1"}]
"#;

/// The StepAction `org-clone` names, with `script`.
fn clone_step_action(script: &str) -> Value {
    json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction",
           "metadata": {"name": "git-clone", "namespace": "platform"},
           "spec": {"image": "registry.example/git:2", "script": script,
                    "env": [{"name": "DEPTH", "value": "$(params.depth)"}],
                    "params": [{"name": "depth", "default": "50"}]}})
}

const CLONE_SCRIPT: &str = "git clone --depth $(params.depth) https://git.example/src";

/// `bookend-clone` as Tekton's controller stores it in `status.taskSpec`, written out by hand
/// from Tekton's rules (the StepAction's fields, its `$(params.depth)` the policy's `1`).
fn resolved_clone() -> Value {
    json!({"name": "bookend-clone", "image": "registry.example/git:2",
           "script": "git clone --depth 1 https://git.example/src",
           "env": [{"name": "DEPTH", "value": "1"}]})
}

/// How a step of the Task that ran ended, in Tekton's status.
#[derive(Clone, Copy, Debug)]
enum Ending {
    Completed,
    Failed,
    Skipped,
    TimedOut,
    Continued,
    /// The container OOM-killed: its entrypoint with it, so no `terminationReason` of its own.
    OomKilled,
    /// Terminated by the controller when the TaskRun timed out (running or still waiting).
    TaskRunTimeout,
    NoState,
}

const ORG_STEPS: [&str; 5] = [
    "bookend-creds",
    "bookend-team-lint",
    "bookend-sbom",
    "bookend-upload",
    "bookend-clone",
];

fn author_step() -> impl Strategy<Value = AuthorStep> {
    let field =
        prop::sample::select(&["image", "script", "env", "workingDir", "onError", "name"][..]);
    let value = prop_oneof![
        Just(None),
        Just(Some(json!(""))),
        Just(Some(json!("continue"))),
        Just(Some(json!("registry.example/git:evil"))),
        Just(Some(json!("git clone --depth 50 https://git.example/src"))),
        Just(Some(json!(CLONE_SCRIPT))),
        Just(Some(json!([{"name": "DEPTH", "value": "50"}]))),
        Just(Some(
            json!([{"name": "DEPTH", "value": "1"}, {"name": "GIT_SSH_COMMAND", "value": "evil"}])
        )),
    ];
    prop_oneof![
        4 => Just(AuthorStep::Build),
        2 => Just(AuthorStep::Test),
        2 => prop::sample::select(&ORG_STEPS[..]).prop_map(AuthorStep::LookAlike),
        2 => prop::sample::select(&ORG_STEPS[..]).prop_map(AuthorStep::Copy),
        2 => (field, value).prop_map(|(f, v)| AuthorStep::ResolvedAlike(f, v)),
    ]
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        6 => Just(Ending::Completed),
        1 => Just(Ending::Failed),
        1 => Just(Ending::Skipped),
        1 => Just(Ending::TimedOut),
        1 => Just(Ending::Continued),
        1 => Just(Ending::OomKilled),
        1 => Just(Ending::TaskRunTimeout),
        1 => Just(Ending::NoState),
    ]
}

/// What bookend's dry-run mutation makes of a Task with `steps`: its answer (`None`: refused).
fn dry_run(set: &PolicySet, steps: &[Value]) -> Option<Value> {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "metadata": {"name": "build", "namespace": "team-a"},
                      "spec": {"steps": steps}});
    let d = decide_resolved_task(
        Request {
            object: &task,
            namespace: "team-a",
            dry_run: true,
        },
        set,
        &catalog(),
    );
    match d.outcome {
        Outcome::Denied => None,
        Outcome::Mutated => Some(as_tekton_stores(&d.object["spec"])),
        Outcome::Admitted => Some(task["spec"].clone()),
    }
}

/// A Task spec as Tekton's controller stores it in `status.taskSpec`: the org StepAction
/// resolved (the only `ref` here) and its variables substituted (here the step result paths
/// bookend's gates write to).
fn as_tekton_stores(spec: &Value) -> Value {
    let mut spec = spec.clone();
    for step in spec["steps"].as_array_mut().into_iter().flatten() {
        if step.get("ref").is_some() {
            assert_eq!(step["name"], "bookend-clone", "{step}");
            let mut resolved = resolved_clone();
            for key in ["onError", "when", "timeout"] {
                if let Some(v) = step.get(key) {
                    resolved[key] = v.clone();
                }
            }
            *step = resolved;
        }
        let name = step["name"].as_str().unwrap_or_default().to_owned();
        let text = step.to_string().replace(
            "$(step.results.ok.path)",
            &format!("/tekton/steps/step-{name}/results/ok"),
        );
        *step = serde_json::from_str(&text).unwrap();
    }
    spec
}

fn step_state(name: &str, ending: Ending) -> Option<Value> {
    let (exit, container, reason) = match ending {
        Ending::Completed => (0, "Completed", "Completed"),
        Ending::Failed => (1, "Completed", "Error"),
        Ending::Skipped => (0, "Completed", "Skipped"),
        Ending::TimedOut => (1, "Completed", "TimeoutExceeded"),
        Ending::Continued => (1, "Completed", "Continued"),
        Ending::OomKilled => (137, "OOMKilled", "OOMKilled"),
        Ending::TaskRunTimeout => (1, "TaskRunTimeout", "TaskRunTimeout"),
        Ending::NoState => return None,
    };
    Some(json!({"name": name, "container": format!("step-{name}"),
                "terminated": {"exitCode": exit, "reason": container},
                "terminationReason": reason}))
}

#[test]
fn no_task_a_resolver_returns_turns_a_fail_into_a_pass() {
    let set = {
        let settings = Settings {
            own_user: Some(BOOKEND.to_owned()),
            ..Settings::default()
        };
        let yaml = format!("{}{STEP_ACTION_POLICY}", cases::POLICIES);
        let loaded = policy_set_from_yaml("security.yaml", &yaml, settings);
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        loaded.set
    };
    let catalog_with = |script: &str| {
        let mut c = catalog();
        c.add_objects(&[clone_step_action(script)], "platform");
        c
    };
    let catalog = catalog_with(CLONE_SCRIPT);
    // The StepAction as bookend reads it at verification when it changed since the run.
    let changed_catalog =
        catalog_with("git clone --depth $(params.depth) https://git.example/other");
    let config = Config {
        cases: super::invariant::cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/marks.proptest-regressions",
        ))),
        ..Config::default()
    };
    // The org steps as bookend's dry-run writes them (around the author's own steps).
    let reference = dry_run(&set, &[cases::build_step()]).expect("the dry-run injects");
    let org_step = |name: &str| -> Value {
        reference["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {reference}"))
    };
    let counts = std::cell::RefCell::new([0usize; 4]);
    let strategy = (
        prop::collection::vec(author_step(), 1..5),
        any::<bool>(),
        prop::collection::vec(ending(), 16),
        any::<bool>(),
        prop::collection::vec(edit(), 0..4),
        prop::bool::weighted(0.2),
        // Earlier attempts (`spec.retries`), each with its own endings.
        prop::collection::vec(prop::collection::vec(ending(), 16), 0..3),
    );
    proptest!(config, |((author, mutated, endings, succeeded, edits, action_changed, earlier) in strategy)| {
        let mut created = remote_taskrun();
        for e in &edits {
            apply(&mut created, e);
        }
        let decision = decide(&created, "team-a", &set, &catalog);
        prop_assert!(decision.outcome != Outcome::Denied, "{:?}", decision.message);
        let mut stored = decision.object.clone();
        stored["metadata"]["name"] = json!("attack-1");
        prop_assert!(selected(&stored), "a remote TaskRun in team-a is watched: {}", stored);
        let record = record::Record::parse(
            entry(&stored, "annotations", record::ANNOTATION)
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
        .expect("bookend's record");

        let steps: Vec<Value> = author
            .iter()
            .map(|s| match s {
                AuthorStep::Build => cases::build_step(),
                AuthorStep::Test => json!({"name": "test", "image": "golang", "script": "go test ./..."}),
                AuthorStep::LookAlike(name) => json!({"name": name, "image": "busybox", "script": "exit 0"}),
                AuthorStep::Copy(name) => org_step(name),
                AuthorStep::ResolvedAlike(field, value) => {
                    let mut step = resolved_clone();
                    match value {
                        Some(v) => step[*field] = v.clone(),
                        None => {
                            step.as_object_mut().unwrap().remove(*field);
                        }
                    }
                    step
                }
            })
            .collect();
        // The Task that ran: the dry-run's answer, or the author's own when the mutation did
        // not run (the Pod backstop in warn mode let its Pod through); none when refused.
        let ran = if mutated {
            dry_run(&set, &steps)
        } else {
            Some(as_tekton_stores(&json!({"steps": steps})))
        };
        let mut status = json!({"conditions": [{"type": "Succeeded",
            "status": if succeeded && ran.is_some() { "True" } else { "False" },
            "reason": if ran.is_some() { if succeeded { "Succeeded" } else { "Failed" } } else { "TaskRunResolutionFailed" },
            "message": "ended"}]});
        let states_of = |spec: &Value, endings: &[Ending]| -> Vec<Value> {
            spec["steps"].as_array().unwrap().iter().zip(endings)
                .filter_map(|(s, e)| step_state(s["name"].as_str().unwrap_or_default(), *e))
                .collect()
        };
        if let Some(spec) = &ran {
            status["taskSpec"] = spec.clone();
            status["steps"] = json!(states_of(spec, &endings));
            // As Tekton's `retryTaskRun` archives each failed attempt: its whole status.
            let archived: Vec<Value> = earlier.iter().map(|endings| {
                json!({"conditions": [{"type": "Succeeded", "status": "False", "reason": "Failed",
                                       "message": "ended"}],
                       "taskSpec": spec, "steps": states_of(spec, endings)})
            }).collect();
            if !archived.is_empty() {
                status["retriesStatus"] = json!(archived);
            }
        }
        stored["status"] = status;

        let lookup = if action_changed { &changed_catalog } else { &catalog };
        let v = verify(&stored, &set, lookup).expect("a finished TaskRun is verified");
        // Every policy the record names gets a verdict.
        for entry in &record.policies {
            prop_assert!(v.policies.iter().any(|p| p.policy == entry.policy), "{} {:?}", entry.policy, v);
        }
        for run in &v.policies {
            if run.verdict != RunVerdict::Pass {
                counts.borrow_mut()[1] += 1;
                continue;
            }
            counts.borrow_mut()[0] += 1;
            let policy = set.policies().iter().find(|p| p.id.to_string() == run.policy)
                .expect("a pass is for a loaded policy");
            let spec = ran.as_ref().expect("a pass needs a Task that ran");
            let always = policy.spec.post_steps_run == bookend::policy::PostStepsRun::Always;
            for (i, name) in policy.step_names().enumerate() {
                let carried: Vec<&Value> = spec["steps"].as_array().unwrap().iter()
                    .filter(|s| s["name"] == name).collect();
                prop_assert_eq!(carried.len(), 1, "{} once in {}", name, spec);
                if name == "bookend-clone" {
                    prop_assert!(!action_changed, "passed against a StepAction changed since the run");
                    counts.borrow_mut()[3] += 1;
                }
                let want = as_tekton_stores(&json!({"steps": [org_step(name)]}))["steps"][0].clone();
                prop_assert_eq!(carried[0], &want, "{} as bookend writes it (Tekton resolves it)", name);
                let must_complete = i < policy.spec.pre_steps.len() || always;
                // In every attempt: the earlier ones ran the author's steps too.
                let attempts = stored["status"]["retriesStatus"].as_array().into_iter().flatten()
                    .chain([&stored["status"]]);
                for (a, attempt) in attempts.enumerate() {
                    if !must_complete {
                        break;
                    }
                    let state = attempt["steps"].as_array().unwrap().iter()
                        .find(|s| s["name"] == name);
                    let completed = state.is_some_and(|s| {
                        s["terminated"]["exitCode"] == 0 && s["terminationReason"] == "Completed"
                    });
                    prop_assert!(completed, "{} passed but {} did not complete in attempt {}: {:?}", run.policy, name, a + 1, state);
                }
            }
        }
        if !mutated {
            counts.borrow_mut()[2] += 1;
        }
    });
    let [passes, fails, unmutated, step_action_passes] = counts.into_inner();
    eprintln!(
        "resolved Tasks: {passes} passes ({step_action_passes} of the StepAction policy), {fails} fails ({unmutated} Tasks without the dry-run mutation)"
    );
    assert!(
        passes > 0 && fails > 0 && unmutated > 0 && step_action_passes > 0,
        "the generator reaches both verdicts, the StepAction policy's pass included"
    );
}

/// An `onError` the author writes on a step of their Task.
fn on_error() -> impl Strategy<Value = Option<&'static str>> {
    prop::option::of(prop::sample::select(
        &[
            "continue",
            "stopAndFail",
            "$(params.mode)",
            "$(params.other)",
            "x$(params.mode)",
            "$(params[\"mode\"])",
            "$(context.taskRun.name)",
        ][..],
    ))
}

/// Invariant: under a `postStepsRun: Always` policy, no Task bookend's dry-run mutation lets run
/// (mutated or admitted) keeps an `onError` that Tekton substitutes after the dry-run (a
/// `$(…)`): the TaskRun's values, which the dry-run does not see, would decide whether a failing
/// step stops the chain before the Always post-steps. Such a Task is refused naming the field.
#[test]
fn no_resolved_task_keeps_an_on_error_the_taskrun_decides() {
    let set = policies_knowing_bookend();
    let config = Config {
        cases: super::invariant::cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/marks.proptest-regressions",
        ))),
        ..Config::default()
    };
    let counts = std::cell::RefCell::new([0usize; 2]);
    let strategy = (
        prop::collection::vec((author_step(), on_error()), 1..4),
        prop::sample::select(&["continue", "stopAndFail", "$(params.other)"][..]),
    );
    proptest!(config, |((author, default) in strategy)| {
        let steps: Vec<Value> = author.iter().enumerate().map(|(i, (s, on_error))| {
            let mut step = match s {
                AuthorStep::Copy(name) | AuthorStep::LookAlike(name) =>
                    json!({"name": name, "image": "busybox", "script": "exit 0"}),
                _ => json!({"name": format!("s{i}"), "image": "golang", "script": "go build"}),
            };
            if let Some(v) = on_error {
                step["onError"] = json!(v);
            }
            step
        }).collect();
        let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
            "metadata": {"name": "build", "namespace": "team-a"},
            "spec": {"params": [{"name": "mode", "type": "string", "default": default},
                                {"name": "other", "type": "string", "default": "continue"}],
                     "steps": steps}});
        let d = decide_resolved_task(
            Request { object: &task, namespace: "team-a", dry_run: true },
            &set,
            &catalog(),
        );
        let variable = |s: &Value| s["onError"].as_str().is_some_and(|v| v.contains("$("));
        if d.outcome == Outcome::Denied {
            counts.borrow_mut()[1] += 1;
            if steps.iter().any(variable) {
                let message = d.message.clone().unwrap_or_default();
                prop_assert!(message.contains("].onError") && message.contains("write onError literally"), "{}", message);
            }
            return Ok(());
        }
        counts.borrow_mut()[0] += 1;
        let ran = &d.object["spec"]["steps"];
        prop_assert!(
            !ran.as_array().into_iter().flatten().any(variable),
            "a Task under an Always policy kept a variable onError: {}", ran
        );
    });
    let [let_run, refused] = counts.into_inner();
    eprintln!("resolved Tasks with author onError: {let_run} let run, {refused} refused");
    assert!(
        let_run > 0 && refused > 0,
        "the generator reaches both answers"
    );
}
