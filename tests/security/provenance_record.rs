//! Who supplied which step, as the provenance carries it (docs/security.md, I10): Tekton
//! Chains' default SLSA v1.0 buildType records the TaskRun's spec, params included, and none
//! of its annotations, so bookend writes its record a second time as the TaskRun param
//! `bookend-injected` (docs/provenance.md). The author can write a param of that name too, at
//! any place, any number of times, with any value: a record naming the author's step as the
//! org's, look-alikes of the name, the wrong JSON type, large values; and a Task param of
//! that name.
//!
//! Invariant: an admitted TaskRun carries a `bookend-injected` param if and only if bookend
//! recorded its injection, then exactly one, holding exactly bookend's record (the
//! `bookend.dev/injected` annotation, which nothing of the author's survives); that record
//! names each policy with its hash and its own steps, and, where the steps are in the TaskRun
//! (an inline or inlined Task), exactly the reserved-prefix steps of the admitted spec — none of
//! the author's. Every other param stays as the author wrote it, in its order. A second pass
//! over the admitted TaskRun with its param tampered with keeps the same invariant, and the
//! fail-closed backstop refuses the admitted TaskRun with that param changed, duplicated or
//! added where bookend writes none, and answers as for the untouched one when it is missing (a
//! previous release's admission).

use std::collections::BTreeSet;

use bookend::admission::{Endpoint, review};
use bookend::engine::record::{self, Record};
use bookend::engine::{Catalog, Decision, Outcome};
use bookend::policy::PolicySet;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Map, Value, json};

use crate::{catalog, decide, invariant, policies};

fn param_name() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        6 => Just(record::PARAM),
        1 => Just("Bookend-injected"),
        1 => Just("bookend-injected "),
        1 => Just("bookend_injected"),
        1 => Just("bookend-injected-2"),
        1 => Just("bookend.dev/injected"),
        2 => Just("package"),
        1 => Just("url"),
    ]
}

/// What the author puts in a param: records that name the author's steps (or the org's, with
/// the wrong hash), look-alike text, other JSON types, sizes.
fn param_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => Just(json!(r#"{"policies":[{"policy":"ClusterStepPolicy/org-creds","hash":"000000000000","steps":["build"]}]}"#)),
        1 => Just(json!(r#"{"policies":[{"policy":"ClusterStepPolicy/org-sbom","hash":"ffffffffffff","steps":["bookend-sbom","bookend-upload","test"]}],"helpers":["build"]}"#)),
        1 => Just(json!(r#"{"policies":[]}"#)),
        1 => Just(json!("")),
        1 => "[ -~]{0,40}".prop_map(Value::from),
        1 => (1usize..40_000).prop_map(|n| Value::from("x".repeat(n))),
        1 => Just(json!(["a", "b"])),
        1 => Just(json!({"policies": []})),
        1 => Just(json!(7)),
        1 => Just(Value::Null),
    ]
}

fn params() -> impl Strategy<Value = Option<Value>> {
    let param = (param_name(), param_value(), any::<bool>()).prop_map(|(name, value, bare)| {
        if bare {
            json!({"name": name})
        } else {
            json!({"name": name, "value": value})
        }
    });
    prop_oneof![
        1 => Just(None),
        6 => prop::collection::vec(param, 0..5).prop_map(|p| Some(Value::Array(p))),
        1 => Just(Some(json!("bookend-injected"))),
        1 => Just(Some(json!({"name": "bookend-injected", "value": "{}"}))),
    ]
}

fn step() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => Just(json!({"name": "build", "image": "golang", "script": "go build ./..."})),
        2 => Just(json!({"name": "test", "image": "golang", "script": "go test ./..."})),
        1 => Just(json!({"name": "bookend-creds", "image": "golang", "script": "true"})),
        1 => Just(json!({"name": "bookend-injected", "image": "golang", "script": "true"})),
    ]
}

#[derive(Clone, Debug)]
struct Authored {
    namespace: &'static str,
    taskrun: Value,
    tamper: Tamper,
}

/// What is done to the record param of the admitted TaskRun before a second pass.
#[derive(Clone, Debug)]
enum Tamper {
    Keep,
    Drop,
    Forge(Value),
    Duplicate,
}

fn authored() -> impl Strategy<Value = Authored> {
    (
        prop_oneof![4 => Just("team-a"), 1 => Just("team-b"), 1 => Just("strict"), 1 => Just("skip"), 1 => Just("elsewhere"), 1 => Just("sealed-net")],
        any::<bool>(),
        prop::collection::vec(step(), 1..4),
        params(),
        prop_oneof![4 => Just(None), 1 => param_name().prop_map(Some)],
        prop_oneof![3 => Just(0u8), 1 => Just(1), 1 => Just(2)],
        any::<bool>(),
        prop_oneof![Just(Tamper::Keep), Just(Tamper::Drop), param_value().prop_map(Tamper::Forge), Just(Tamper::Duplicate)],
    )
        .prop_map(|(namespace, v1beta1, steps, params, declared, source, forged_annotation, tamper)| {
            let mut task_spec = json!({"steps": steps});
            if let Some(name) = declared {
                task_spec["params"] = json!([{"name": name, "type": "string"}]);
            }
            let mut spec = Map::new();
            match source {
                0 => spec.insert("taskSpec".into(), task_spec),
                1 => spec.insert("taskRef".into(), json!({"name": "build"})),
                _ => spec.insert("taskRef".into(), json!({"resolver": "git", "params": [{"name": "url", "value": "x"}]})),
            };
            if let Some(p) = params {
                spec.insert("params".into(), p);
            }
            let mut taskrun = json!({"apiVersion": if v1beta1 { "tekton.dev/v1beta1" } else { "tekton.dev/v1" },
                "kind": "TaskRun", "metadata": {"generateName": "attack-", "namespace": namespace}, "spec": spec});
            if forged_annotation {
                taskrun["metadata"]["annotations"] = json!({record::ANNOTATION: r#"{"policies":[{"policy":"ClusterStepPolicy/org-creds","hash":"000000000000","steps":["build"]}]}"#});
            }
            Authored { namespace, taskrun, tamper }
        })
}

/// The params that are not bookend's record param, as they are.
fn others(object: &Value) -> Option<Vec<Value>> {
    match object.pointer("/spec/params") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(params)) => Some(
            params
                .iter()
                .filter(|p| !record::is_record_param(p))
                .cloned()
                .collect(),
        ),
        Some(_) => None,
    }
}

/// The invariant on one decision about `input`.
fn check(set: &PolicySet, input: &Value, decision: &Decision) -> Result<(), String> {
    if decision.outcome == Outcome::Denied {
        let message = decision.message.as_deref().unwrap_or("");
        return if message.starts_with("bookend: ") && message.contains("spec") {
            Ok(())
        } else {
            Err(format!("a denial must name the field: {message:?}"))
        };
    }
    let admitted = if decision.outcome == Outcome::Admitted {
        input
    } else {
        &decision.object
    };
    let annotation = admitted
        .pointer(&format!(
            "/metadata/annotations/{}",
            record::ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let ours: Vec<&Value> = admitted
        .pointer("/spec/params")
        .and_then(Value::as_array)
        .map(|p| p.iter().filter(|p| record::is_record_param(p)).collect())
        .unwrap_or_default();
    match annotation {
        None if ours.is_empty() => return Ok(()),
        None => return Err(format!("a record param without bookend's record: {ours:?}")),
        Some(text) => {
            if ours != [&json!({"name": record::PARAM, "value": text})] {
                return Err(format!(
                    "the record param is not exactly bookend's record {text}: {ours:?}"
                ));
            }
        }
    }
    if others(admitted) != others(input) {
        return Err(format!(
            "the author's other params changed: {:?} -> {:?}",
            others(input),
            others(admitted)
        ));
    }
    let record =
        Record::parse(annotation.unwrap_or_default()).ok_or("bookend's record does not parse")?;
    for entry in &record.policies {
        let policy = set
            .policies()
            .iter()
            .find(|p| p.id.to_string() == entry.policy)
            .ok_or_else(|| {
                format!(
                    "the record names a policy that does not exist: {}",
                    entry.policy
                )
            })?;
        if entry.hash != policy.hash
            || !entry
                .steps
                .iter()
                .map(String::as_str)
                .eq(policy.step_names())
        {
            return Err(format!(
                "the record's {entry:?} is not the policy's steps and version"
            ));
        }
    }
    if let Some(steps) = admitted
        .pointer("/spec/taskSpec/steps")
        .and_then(Value::as_array)
    {
        let reserved: BTreeSet<&str> = steps
            .iter()
            .filter_map(|s| s.get("name").and_then(Value::as_str))
            .filter(|n| n.starts_with(set.settings().prefix.as_str()))
            .collect();
        let named: BTreeSet<&str> = record
            .policies
            .iter()
            .flat_map(|e| &e.steps)
            .chain(&record.helpers)
            .map(String::as_str)
            .collect();
        if named != reserved {
            return Err(format!(
                "the record names {named:?}, the spec's org steps are {reserved:?}"
            ));
        }
    }
    Ok(())
}

fn tampered(admitted: &Value, tamper: &Tamper) -> Option<Value> {
    let mut object = admitted.clone();
    let params = object.pointer_mut("/spec/params")?.as_array_mut()?;
    let at = params.iter().position(record::is_record_param)?;
    match tamper {
        Tamper::Keep => return None,
        Tamper::Drop => {
            params.remove(at);
        }
        Tamper::Forge(value) => {
            if params[at]["value"] == *value {
                return None;
            }
            params[at]["value"] = value.clone();
        }
        Tamper::Duplicate => params.push(params[at].clone()),
    }
    Some(object)
}

/// The validating backstop's answer to a CREATE of `object`: admitted or not.
fn backstop_admits(set: &PolicySet, catalog: &Catalog, namespace: &str, object: &Value) -> bool {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "namespace": namespace,
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "resource": {"group": "tekton.dev", "version": "v1", "resource": "taskruns"},
            "userInfo": {"username": "author"}, "object": object}});
    let reply = review(
        Endpoint::Validate,
        &serde_json::to_vec(&body).unwrap(),
        set,
        catalog,
    );
    let answer: Value = serde_json::from_slice(&reply.body).unwrap();
    answer["response"]["allowed"]
        .as_bool()
        .unwrap_or_else(|| panic!("an AdmissionReview answer: {answer}"))
}

#[test]
fn the_record_param_names_exactly_the_steps_bookend_injected() {
    let (set, catalog) = (policies(), catalog());
    let config = Config {
        cases: invariant::cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/provenance_record.proptest-regressions",
        ))),
        ..Config::default()
    };
    let counts = std::cell::RefCell::new([0usize; 4]);
    proptest!(config, |(authored in authored())| {
        let Authored { namespace, taskrun, tamper } = authored;
        let first = decide(&taskrun, namespace, &set, &catalog);
        counts.borrow_mut()[first.outcome as usize] += 1;
        if let Err(e) = check(&set, &taskrun, &first) {
            prop_assert!(false, "{e}\ninput: {taskrun}\ndecision: {:?} {:?}", first.outcome, first.message);
        }
        if first.outcome != Outcome::Mutated {
            return Ok(());
        }
        let Some(again) = tampered(&first.object, &tamper) else {
            return Ok(());
        };
        counts.borrow_mut()[3] += 1;
        let second = decide(&again, namespace, &set, &catalog);
        if let Err(e) = check(&set, &again, &second) {
            prop_assert!(false, "after {tamper:?}: {e}\ninput: {again}\ndecision: {:?} {:?}", second.outcome, second.message);
        }
        let untouched = backstop_admits(&set, &catalog, namespace, &first.object);
        let answer = backstop_admits(&set, &catalog, namespace, &again);
        match tamper {
            Tamper::Drop => prop_assert_eq!(answer, untouched, "a previous release's TaskRun (no record param): {}", again),
            _ => prop_assert!(!answer, "the backstop admits a record param bookend did not write: {}", again),
        }
    });
    let counts = counts.into_inner();
    eprintln!(
        "record params: {} admitted unchanged, {} mutated, {} refused, {} tampered after admission",
        counts[0], counts[1], counts[2], counts[3]
    );
    assert!(
        counts[1] > 0 && counts[2] > 0 && counts[3] > 0,
        "the generator reaches every answer: {counts:?}"
    );
}
