//! Shared by the fuzz targets: a policy set exercising every injection feature, a Task
//! catalog, structured TaskRuns built from `arbitrary` input, and the checks every decision
//! must pass.

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Result, Unstructured};
use bookend::engine::{self, Catalog, Decision, Outcome, Request};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{PolicySet, Settings};
use serde_json::{Map, Value, json};

/// Enforce and Audit, pre and post, `Always`, volumes, a StepAction ref, label and origin
/// matching, an exclusion, and namespaced StepPolicies.
pub const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: creds}
spec:
  priority: 10
  match: {namespaces: ["team-*"]}
  exclude: {selector: {matchLabels: {skip: "yes"}}}
  preSteps:
    - name: bookend-creds
      image: busybox
      script: "echo creds"
      volumeMounts: [{name: bookend-vol, mountPath: /bookend}]
  volumes: [{name: bookend-vol, emptyDir: {}}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: sbom}
spec:
  priority: 20
  postStepsRun: Always
  match: {namespaces: ["team-*", "prod"]}
  postSteps:
    - {name: bookend-sbom, image: syft, args: ["scan", "dir:/workspace"]}
    - {name: bookend-upload, image: curl, command: ["curl"], onError: continue}
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: git}
spec:
  priority: 30
  match: {selector: {matchLabels: {source: git}}}
  preSteps:
    - name: bookend-git
      ref: {resolver: cluster, params: [{name: kind, value: stepaction}, {name: name, value: git-clone}, {name: namespace, value: tekton-catalog}]}
      params: [{name: url, value: $(params.url)}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: pipelines-audit}
spec:
  priority: 40
  mode: Audit
  match: {namespaces: ["*"], origin: Pipeline}
  postSteps: [{name: bookend-provenance, image: busybox, script: "echo p"}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: local, namespace: team-a}
spec:
  priority: 5
  preSteps: [{name: bookend-local, image: alpine, command: ["true"]}]
  postSteps: [{name: bookend-local-post, image: alpine, command: ["true"]}]
"#;

pub const TASKS: &str = r#"
apiVersion: tekton.dev/v1
kind: Task
metadata: {name: build, namespace: team-a}
spec:
  steps: [{name: compile, image: golang, script: "go build"}]
---
apiVersion: tekton.dev/v1beta1
kind: Task
metadata: {name: build, namespace: prod}
spec:
  params: [{name: x}]
  steps: [{name: bookend-creds, image: evil}]
---
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {tier: gold}}
"#;

pub fn policies() -> &'static PolicySet {
    static SET: OnceLock<PolicySet> = OnceLock::new();
    SET.get_or_init(|| {
        let loaded = policy_set_from_yaml("fuzz.yaml", POLICIES, Settings::default());
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        loaded.set
    })
}

pub fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let objects = bookend::policy::load::yaml_documents(TASKS).unwrap();
        let mut catalog = Catalog::default();
        catalog.add_objects(&objects, "default");
        catalog
    })
}

/// The properties every engine decision must have:
/// - a mutation's patch, applied by the independent `json-patch` crate, gives `decision.object`;
/// - deciding again on the admitted object changes nothing (no duplicate injection);
/// - allowed and denied decisions carry no patch and leave the object as it was.
pub fn check_decision(object: &Value, namespace: &str, dry_run: bool, set: &PolicySet) -> Decision {
    let lookup = catalog();
    let request = Request {
        object,
        namespace,
        dry_run,
    };
    let decision = engine::decide(request, set, lookup);
    // The webhook answers from decide_patch, which builds its patch without the whole object.
    let webhook = engine::decide_patch(request, set, lookup);
    assert_eq!(
        webhook.outcome, decision.outcome,
        "webhook and render disagree"
    );
    assert_eq!(
        webhook.patch, decision.patch,
        "the webhook's patch differs from render's"
    );
    match decision.outcome {
        Outcome::Mutated => {
            assert!(!decision.patch.is_empty(), "mutated without a patch");
            let ops = serde_json::to_value(&decision.patch).expect("patch serialises");
            let patch: json_patch::Patch =
                serde_json::from_value(ops.clone()).expect("the patch is RFC 6902");
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &patch)
                .unwrap_or_else(|e| panic!("patch does not apply: {e}\npatch: {ops}"));
            assert_eq!(patched, decision.object, "patch result != decision.object");
            if has_duplicate_step_names(object) {
                // Known finding (docs/reliability.md, Findings): with duplicate step names, which
                // Tekton refuses, a second pass is not a no-op. Checked by the ignored test
                // tests/reliability_fuzz_regressions.rs until fixed; the rest is still checked.
                return decision;
            }
            let again = engine::decide(
                Request {
                    object: &decision.object,
                    namespace,
                    dry_run,
                },
                set,
                lookup,
            );
            assert!(
                again.outcome != Outcome::Mutated && again.patch.is_empty(),
                "second pass is not a no-op: {:?} {:?}\nfirst object: {}",
                again.outcome,
                serde_json::to_string(&again.patch),
                decision.object
            );
            assert_ne!(
                again.outcome,
                Outcome::Denied,
                "the admitted object is denied on re-invocation: {:?}",
                again.message
            );
        }
        Outcome::Admitted | Outcome::Denied => {
            assert!(decision.patch.is_empty(), "a patch without a mutation");
            assert_eq!(&decision.object, object);
        }
    }
    if decision.outcome == Outcome::Denied {
        assert!(
            decision.message.as_deref().is_some_and(|m| !m.is_empty()),
            "a denial without a message"
        );
    }
    decision
}

/// Two steps with one name (Tekton refuses the TaskRun: step names must be unique).
pub fn has_duplicate_step_names(object: &Value) -> bool {
    let mut seen = std::collections::HashSet::new();
    object
        .pointer("/spec/taskSpec/steps")
        .and_then(Value::as_array)
        .is_some_and(|steps| {
            steps
                .iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str))
                .any(|n| !seen.insert(n))
        })
}

// === structured TaskRuns ===

const NAMESPACES: &[&str] = &["team-a", "team-b", "prod", "default", "", "tëam-ü"];
const STEP_NAMES: &[&str] = &[
    "build",
    "test",
    "bookend-creds",
    "bookend-sbom",
    "bookend-upload",
    "bookend-git",
    "bookend-local",
    "bookend-mine",
    "bookend-gate-0",
    "",
    "Build",
    "ünïcödé",
    "step-with-a-very-long-name-that-exceeds-sixty-three-characters-for-sure",
];
const IMAGES: &[&str] = &["golang", "busybox", "syft", "curl", "alpine", ""];
const VOLUMES: &[&str] = &["src", "bookend-vol", "cache", "bookend-other"];
const LABEL_KEYS: &[&str] = &["source", "skip", "app", "tekton.dev/task"];
const LABEL_VALUES: &[&str] = &["git", "yes", "no", ""];

fn pick<'a>(u: &mut Unstructured<'_>, from: &[&'a str]) -> Result<&'a str> {
    Ok(*u.choose(from)?)
}

/// Any JSON value, depth-bounded.
pub fn any_json(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let choice = if depth == 0 {
        u.int_in_range(0..=3)?
    } else {
        u.int_in_range(0..=5)?
    };
    Ok(match choice {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => json!(u.arbitrary::<i64>()?),
        3 => Value::String(u.arbitrary()?),
        4 => {
            let n = u.int_in_range(0..=3)?;
            Value::Array(
                (0..n)
                    .map(|_| any_json(u, depth - 1))
                    .collect::<Result<_>>()?,
            )
        }
        _ => {
            let n = u.int_in_range(0..=3)?;
            let mut m = Map::new();
            for _ in 0..n {
                m.insert(u.arbitrary()?, any_json(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

fn maybe_junk(u: &mut Unstructured<'_>, target: &mut Value) -> Result<()> {
    if !u.ratio(1, 8)? {
        return Ok(());
    }
    if let Value::Object(m) = target {
        let key = pick(
            u,
            &[
                "onError",
                "script",
                "args",
                "env",
                "workingDir",
                "x-extra",
                "volumeMounts",
                "name",
                "image",
            ],
        )?;
        m.insert(key.to_owned(), any_json(u, 2)?);
    }
    Ok(())
}

fn step(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut s = Map::new();
    if u.ratio(15, 16)? {
        s.insert("name".into(), json!(pick(u, STEP_NAMES)?));
    }
    if u.ratio(7, 8)? {
        s.insert("image".into(), json!(pick(u, IMAGES)?));
    }
    match u.int_in_range(0..=3)? {
        0 => {
            s.insert("script".into(), json!(u.arbitrary::<String>()?));
        }
        1 => {
            s.insert("command".into(), json!(["sh", "-c"]));
            s.insert("args".into(), json!([u.arbitrary::<String>()?]));
        }
        2 => {
            s.insert("ref".into(), json!({"name": "git-clone"}));
            s.remove("image");
        }
        _ => {}
    }
    if u.ratio(1, 4)? {
        s.insert(
            "onError".into(),
            json!(pick(u, &["continue", "stopAndFail", "bogus"])?),
        );
    }
    if u.ratio(1, 4)? {
        let v = pick(u, VOLUMES)?;
        s.insert(
            "volumeMounts".into(),
            json!([{"name": v, "mountPath": format!("/{v}")}]),
        );
    }
    if u.ratio(1, 8)? {
        s.insert(
            "env".into(),
            json!([{"name": "TOKEN", "value": u.arbitrary::<String>()?}]),
        );
    }
    if u.ratio(1, 8)? {
        s.insert(
            "computeResources".into(),
            json!({"requests": {"cpu": "10m"}}),
        );
    }
    let mut v = Value::Object(s);
    maybe_junk(u, &mut v)?;
    Ok(v)
}

fn task_spec(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut ts = Map::new();
    let n = u.int_in_range(0..=6)?;
    ts.insert(
        "steps".into(),
        Value::Array((0..n).map(|_| step(u)).collect::<Result<_>>()?),
    );
    if u.ratio(1, 4)? {
        let n = u.int_in_range(0..=2)?;
        ts.insert(
            "sidecars".into(),
            Value::Array((0..n).map(|_| step(u)).collect::<Result<_>>()?),
        );
    }
    if u.ratio(1, 3)? {
        let n = u.int_in_range(0..=3)?;
        let vols: Vec<Value> = (0..n)
            .map(|_| Ok(json!({"name": pick(u, VOLUMES)?, "emptyDir": {}})))
            .collect::<Result<_>>()?;
        ts.insert("volumes".into(), Value::Array(vols));
    }
    if u.ratio(1, 4)? {
        ts.insert("params".into(), json!([{"name": "url", "type": "string"}]));
    }
    if u.ratio(1, 4)? {
        ts.insert("results".into(), json!([{"name": "digest"}]));
    }
    if u.ratio(1, 4)? {
        ts.insert("workspaces".into(), json!([{"name": "source"}]));
    }
    if u.ratio(1, 6)? {
        ts.insert(
            "stepTemplate".into(),
            json!({"env": [{"name": "A", "value": "b"}]}),
        );
    }
    let mut v = Value::Object(ts);
    maybe_junk(u, &mut v)?;
    Ok(v)
}

/// A TaskRun (and the namespace of its request) from fuzzer bytes: mostly well-formed, with
/// the names, labels, owners and refs the policies react to, and occasional junk anywhere.
pub fn taskrun(u: &mut Unstructured<'_>) -> Result<(Value, String, bool)> {
    let api = if u.ratio(3, 4)? {
        "tekton.dev/v1"
    } else {
        "tekton.dev/v1beta1"
    };
    let namespace = pick(u, NAMESPACES)?.to_owned();
    let mut meta = Map::new();
    if u.arbitrary()? {
        meta.insert("name".into(), json!("run-1"));
    } else {
        meta.insert("generateName".into(), json!("run-"));
    }
    if u.arbitrary()? {
        meta.insert("namespace".into(), json!(namespace));
    }
    if u.ratio(1, 2)? {
        let mut labels = Map::new();
        for _ in 0..u.int_in_range(0..=3)? {
            labels.insert(pick(u, LABEL_KEYS)?.into(), json!(pick(u, LABEL_VALUES)?));
        }
        meta.insert("labels".into(), Value::Object(labels));
    }
    if u.ratio(1, 3)? {
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "p", "uid": "u", "controller": true}]),
        );
    }
    if u.ratio(1, 6)? {
        meta.insert(
            "annotations".into(),
            json!({"bookend.dev/injected": u.arbitrary::<String>()?}),
        );
    }
    let mut spec = Map::new();
    match u.int_in_range(0..=7)? {
        0 => {
            spec.insert(
                "taskRef".into(),
                json!({"name": pick(u, &["build", "missing"])?}),
            );
        }
        1 => {
            spec.insert("taskRef".into(), json!({"resolver": "git", "params": []}));
        }
        2 => {
            spec.insert(
                "taskRef".into(),
                json!({"apiVersion": "example.dev/v1", "kind": "Wait"}),
            );
        }
        3 => {}
        _ => {
            spec.insert("taskSpec".into(), task_spec(u)?);
        }
    }
    if u.ratio(1, 4)? {
        spec.insert(
            "params".into(),
            json!([{"name": "url", "value": u.arbitrary::<String>()?}]),
        );
    }
    if u.ratio(1, 6)? {
        spec.insert(
            "podTemplate".into(),
            json!({"securityContext": {"runAsNonRoot": true}}),
        );
    }
    if u.ratio(1, 6)? {
        spec.insert("timeout".into(), json!("1h"));
    }
    let mut spec = Value::Object(spec);
    maybe_junk(u, &mut spec)?;
    let object = json!({"apiVersion": api, "kind": "TaskRun", "metadata": meta, "spec": spec});
    Ok((object, namespace, u.arbitrary()?))
}

/// The structured input of the engine target.
#[derive(Debug)]
pub struct TaskRunInput {
    pub object: Value,
    pub namespace: String,
    pub dry_run: bool,
}

impl<'a> Arbitrary<'a> for TaskRunInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let (object, namespace, dry_run) = taskrun(u)?;
        Ok(Self {
            object,
            namespace,
            dry_run,
        })
    }
}
