//! Every upstream Tekton TaskRun example (v1, and the legacy v1beta1 set) through the engine
//! with the example policies: the patch, applied by an independent RFC 6902 implementation,
//! gives the rendered object; step order, names, idempotency and unknown fields hold.

mod common;

use bookend::engine::{self, Catalog, Outcome, Request};
use bookend::policy::load::yaml_documents;
use bookend::tekton::{self, TaskRunView};
use serde_json::{Value, json};

const NAMESPACE: &str = "team-a";

fn steps(object: &Value) -> &[Value] {
    object["spec"]["taskSpec"]["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn is_injected(step: &Value) -> bool {
    tekton::step_name(step).is_some_and(|n| n.starts_with("bookend-"))
}

/// The object without what bookend may change: steps, volumes, its annotations and the
/// inlining label; everything else must be byte-for-byte the same JSON.
fn untouched_part(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("taskRef");
        spec.remove("taskSpec");
        // bookend's record param (the corpus writes none of its own).
        if let Some(params) = spec.get_mut("params").and_then(Value::as_array_mut) {
            params.retain(|p| p["name"] != "bookend-injected");
            if params.is_empty() {
                spec.remove("params");
            }
        }
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for (key, owned) in [
            (
                "annotations",
                ["bookend.dev/injected", "bookend.dev/inlined-task"],
            ),
            ("labels", ["tekton.dev/task", "bookend.dev/verify"]),
        ] {
            if let Some(map) = meta.get_mut(key).and_then(Value::as_object_mut) {
                for k in owned {
                    map.remove(k);
                }
                if map.is_empty() {
                    meta.remove(key);
                }
            }
        }
    }
    o
}

fn task_spec_rest(object: &Value) -> Value {
    let mut t = object["spec"]["taskSpec"].clone();
    if let Some(t) = t.as_object_mut() {
        t.remove("steps");
        t.remove("volumes");
        // bookend writes the stepTemplate into the user's steps (checked below).
        t.remove("stepTemplate");
    }
    t
}

/// The user's steps as Tekton runs them: with the Task's stepTemplate merged in.
fn as_run(object: &Value) -> Vec<Value> {
    let version = TaskRunView::new(object).unwrap().api_version;
    let template = &object["spec"]["taskSpec"]["stepTemplate"];
    steps(object)
        .iter()
        .map(|s| match template {
            Value::Object(_) => {
                bookend::tekton::merge::merge_step_template(template, s, version).unwrap()
            }
            _ => s.clone(),
        })
        .collect()
}

/// A user step as the user wrote it, ignoring what Always adds (gate `when`, `onError`) and
/// index references (they shift by design).
fn user_core(step: &Value) -> Value {
    let mut s = step.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("onError");
        if let Some(Value::Array(w)) = o.get_mut("when") {
            w.retain(|w| !w["input"].as_str().unwrap_or("").contains("bookend-gate-"));
            if w.is_empty() {
                o.remove("when");
            }
        }
    }
    let mut unshifted = s.clone();
    bookend::engine::reindex::rewrite(&mut unshifted, &|_| Some(0));
    unshifted
}

/// What Tekton's defaulting webhook does to steps when it round-trips the object.
fn tekton_round_trip(object: &Value) -> Value {
    let mut o = object.clone();
    let key = if o["apiVersion"] == "tekton.dev/v1" {
        "computeResources"
    } else {
        "resources"
    };
    if let Some(steps) = o["spec"]["taskSpec"]["steps"].as_array_mut() {
        for s in steps {
            let s = s.as_object_mut().unwrap();
            s.entry(key).or_insert(json!({}));
            s.entry("name").or_insert(json!(""));
        }
    }
    o
}

#[test]
fn corpus_with_example_policies() {
    let set = common::example_policies();
    let (mut exercised, mut mutated, mut denied, mut allowed, mut remote) = (0, 0, 0, 0, 0);
    let mut denials = Vec::new();
    for file in common::tekton_taskrun_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs = yaml_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut catalog = Catalog::default();
        catalog.add_objects(&docs, NAMESPACE);
        for (i, doc) in docs.iter().enumerate() {
            let Some(view) = TaskRunView::new(doc) else {
                continue;
            };
            exercised += 1;
            let at = format!("{}#{i}", file.display());
            let request = Request {
                object: doc,
                namespace: NAMESPACE,
                dry_run: false,
            };
            let d = engine::decide(request, &set, &catalog);
            match d.outcome {
                Outcome::Denied => {
                    denied += 1;
                    denials.push(format!("{at}: {}", d.message.unwrap()));
                    continue;
                }
                Outcome::Admitted => {
                    allowed += 1;
                    assert!(d.patch.is_empty(), "{at}");
                    assert_eq!(&d.object, doc, "{at}");
                    continue;
                }
                Outcome::Mutated => mutated += 1,
            }

            // The patch, applied independently, gives the rendered object.
            let patch: json_patch::Patch =
                serde_json::from_value(serde_json::to_value(&d.patch).unwrap()).unwrap();
            let mut applied = doc.clone();
            json_patch::patch(&mut applied, &patch).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(applied, d.object, "{at}");
            assert!(
                d.patch
                    .iter()
                    .all(|op| op.path() != "/spec" && op.path() != ""),
                "{at}: no wholesale replace"
            );

            // Everything bookend does not own is untouched.
            assert_eq!(untouched_part(&d.object), untouched_part(doc), "{at}");
            // A Task from a resolver: only bookend's record (annotation and param) and label
            // now, the steps at its resolution (Tekton's controller's dry-run).
            if matches!(view.task_source(), tekton::TaskSource::RemoteRef { .. }) {
                remote += 1;
                assert!(
                    d.patch.iter().all(|op| op.path().starts_with("/metadata")
                        || op.path().starts_with("/spec/params")),
                    "{at}: {:?}",
                    d.patch
                );
                assert_eq!(d.object["spec"]["taskRef"], doc["spec"]["taskRef"], "{at}");
                let again = engine::decide(
                    Request {
                        object: &d.object,
                        namespace: NAMESPACE,
                        dry_run: false,
                    },
                    &set,
                    &catalog,
                );
                assert_eq!(again.outcome, Outcome::Admitted, "{at}: {:?}", again.patch);
                continue;
            }
            if view.task_spec().is_some() {
                assert_eq!(task_spec_rest(&d.object), task_spec_rest(doc), "{at}");
            }

            // Order: bookend-credentials first; the SBOM steps and the verdict last.
            let out = steps(&d.object);
            let names: Vec<&str> = out
                .iter()
                .map(|s| tekton::step_name(s).unwrap_or(""))
                .collect();
            assert_eq!(names[0], "bookend-credentials", "{at}: {names:?}");
            assert_eq!(
                &names[names.len() - 3..],
                ["bookend-sbom", "bookend-sbom-upload", "bookend-verdict"],
                "{at}"
            );

            // Names are unique, valid and short enough for Tekton's container names.
            let mut seen = std::collections::HashSet::new();
            for name in names.iter().filter(|n| !n.is_empty()) {
                assert!(seen.insert(*name), "{at}: duplicate step {name}");
                if name.starts_with("bookend-") {
                    assert!(
                        name.len() <= 58 && bookend::policy::select::is_dns_label(name),
                        "{at}: {name}"
                    );
                }
            }

            // User steps keep their relative order and content.
            // (The stepTemplate now in them: org steps inherit nothing of it.)
            assert!(
                d.object["spec"]["taskSpec"].get("stepTemplate").is_none(),
                "{at}: the stepTemplate stayed"
            );
            let before: Vec<Value> = as_run(&inlined_or(doc, &d.object))
                .iter()
                .map(user_core)
                .collect();
            let after: Vec<Value> = out
                .iter()
                .filter(|s| !is_injected(s))
                .map(user_core)
                .collect();
            assert_eq!(before, after, "{at}");

            // A second pass, raw or after Tekton's defaulting round trip, changes nothing.
            for (label, again) in [
                ("raw", d.object.clone()),
                ("tekton-defaulted", tekton_round_trip(&d.object)),
            ] {
                let second = engine::decide(
                    Request {
                        object: &again,
                        namespace: NAMESPACE,
                        dry_run: false,
                    },
                    &set,
                    &catalog,
                );
                assert_eq!(
                    second.outcome,
                    Outcome::Admitted,
                    "{at} ({label}): {:?} {:?}",
                    second.message,
                    second.patch
                );
            }
        }
    }
    println!(
        "corpus: {exercised} TaskRuns exercised: {mutated} mutated ({remote} of them remote: marks only), {allowed} admitted unchanged, {denied} denied"
    );
    assert!(remote > 0, "the corpus has resolver TaskRuns");
    for d in &denials {
        println!("  denied {d}");
    }
    assert!(exercised >= 140, "{exercised}");
    assert!(mutated >= 100, "{mutated}");
    // The only denials expected with the example policies are taskRefs to Tasks the corpus
    // does not define (ClusterTasks, which Tekton removed, and Tasks from other files), and a
    // stepTemplate over a StepAction step, which Tekton merges only when it builds the Pod, so
    // bookend cannot keep it from org steps (stepactions-steptemplate.yaml).
    let mut step_template_over_ref = 0;
    let mut workspaces_outside = 0;
    for d in &denials {
        // Workspaces mounted outside /workspace (the examples' /messages, /foo/bar/baz), which
        // the example policies do not allow (`workspaceMounts: UnderWorkspace`, the default).
        if d.contains("allows workspaces only under /workspace") {
            workspaces_outside += 1;
            continue;
        }
        // v0.49's bundle example, which Tekton itself refuses on create now.
        if d.contains("tekton-bundles.yaml") && d.contains("spec.taskRef.bundle") {
            continue;
        }
        if d.contains("stepactions-steptemplate.yaml") {
            assert!(
                d.contains("spec.taskSpec.stepTemplate: Tekton merges"),
                "{d}"
            );
            step_template_over_ref += 1;
            continue;
        }
        assert!(
            d.contains("was not found in namespace"),
            "unexpected denial: {d}"
        );
    }
    assert_eq!(step_template_over_ref, 1);
    assert!(
        workspaces_outside > 0 && workspaces_outside <= 6,
        "{workspaces_outside}"
    );
}

/// For a taskRef TaskRun, the original steps are those of the inlined Task.
fn inlined_or(doc: &Value, out: &Value) -> Value {
    if doc["spec"].get("taskSpec").is_some() {
        return doc.clone();
    }
    let mut d = doc.clone();
    let user: Vec<Value> = steps(out)
        .iter()
        .filter(|s| !is_injected(s))
        .cloned()
        .collect();
    d["spec"]["taskSpec"] = json!({"steps": user});
    d
}
