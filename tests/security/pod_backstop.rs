//! The Pod backstop when bookend's dry-run mutation of a resolved Task did not run (it fails
//! open): hostile Tasks that carry copies of the org steps, with workspaces, Task volumes and
//! stepTemplate mounts of every kind of name (bookend's, look-alikes of Tekton's
//! `tekton-internal-*` and `ws-*`) at every kind of path (system directories, what org steps
//! run from, prefixes and children of their mounts, `/workspace` itself, `..`), with subPaths;
//! their Pod built as Tekton's pod builder builds it (workspaces and the stepTemplate merged
//! into every step, Tekton's own mounts where no path is taken) and as the API server stores it
//! (`defaultMode: 420`). Invariant I11 (docs/security.md), two properties:
//!
//! - whatever the backstop admits, every org container sees exactly its policy's volumes at
//!   the policy's paths (each Pod volume of a policy's name as the policy defines it), Tekton's
//!   own mounts, and nothing of the author's over what it runs from (`violation`, written from
//!   the rule, apart from the engine);
//! - without a stepTemplate (which the dry-run writes into the author's steps rather than
//!   refuses), the backstop refuses exactly when the dry-run mutation refuses the same Task.
//!
//! `BOOKEND_SECURITY_CASES` sets the number of cases (default 3000); failing seeds are kept in
//! `tests/security/pod_backstop.proptest-regressions`.

use bookend::engine::pod::check_pod;
use bookend::engine::{Catalog, Decision, Outcome, Request, decide_resolved_task};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::validate::clean_path as clean;
use bookend::policy::{PolicySet, Settings};
use bookend::tekton::{ApiVersion, merge::merge_step_template};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Value, json};

use crate::{decide, invariant::cases};

#[path = "../common/tekton_pod.rs"]
#[allow(dead_code)]
mod tekton_pod;

/// A strict policy (workspaces under /workspace only) whose org steps mount the org's Secret
/// under /workspace, and one that lets workspaces be anywhere, whose step runs from /opt and
/// mounts the org's Secret at /org-tools.
const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-sign, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {namespaces: ["team-a"]}
  volumes: [{name: bookend-key, secret: {secretName: org-signing-key}}]
  preSteps:
  - name: bookend-fetch
    image: registry.example/fetch:1
    command: [/usr/local/bin/fetch]
    volumeMounts: [{name: bookend-key, mountPath: /workspace/.org/key, readOnly: true}]
  postSteps:
  - name: bookend-sign
    image: registry.example/sign:1
    command: [/usr/local/bin/sign]
    args: [/workspace/out]
    volumeMounts: [{name: bookend-key, mountPath: /workspace/.org/key, readOnly: true}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: open-scan, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {namespaces: ["open"]}
  workspaceMounts: Anywhere
  volumes: [{name: bookend-tools, secret: {secretName: org-tools}}]
  preSteps:
  - name: bookend-scan
    image: registry.example/scan:1
    command: [/opt/scan/run]
    volumeMounts: [{name: bookend-tools, mountPath: /org-tools}]
"#;

/// Each namespace's org steps and the policy's volume, as `POLICIES` writes them.
fn org(namespace: &str) -> (Vec<Value>, Value, bool) {
    if namespace == "open" {
        (
            vec![json!({"name": "bookend-scan", "command": ["/opt/scan/run"],
                        "volumeMounts": [{"name": "bookend-tools", "mountPath": "/org-tools"}]})],
            json!({"name": "bookend-tools", "secret": {"secretName": "org-tools"}}),
            false,
        )
    } else {
        let mount =
            json!([{"name": "bookend-key", "mountPath": "/workspace/.org/key", "readOnly": true}]);
        (
            vec![
                json!({"name": "bookend-fetch", "command": ["/usr/local/bin/fetch"], "volumeMounts": mount}),
                json!({"name": "bookend-sign", "command": ["/usr/local/bin/sign"], "volumeMounts": mount}),
            ],
            json!({"name": "bookend-key", "secret": {"secretName": "org-signing-key"}}),
            true,
        )
    }
}

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml("pod-backstop.yaml", POLICIES, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

fn catalog() -> Catalog {
    let mut catalog = Catalog::default();
    for ns in ["team-a", "open"] {
        catalog.add_objects(
            &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})],
            ns,
        );
    }
    catalog
}

/// Paths for workspaces and stepTemplate mounts: system directories, what the org steps run
/// from, their mounts, prefixes and children of them, look-alikes, `..`.
const PATHS: &[&str] = &[
    "/bin",
    "/usr/local/bin",
    "/usr/local/bin/fetch",
    "/workspace",
    "/workspace/",
    "/workspace/src",
    "/workspace/.org",
    "/workspace/.org/key",
    "/workspace/.org/key/token",
    "/workspace/.orgx",
    "/workspace/.org/key/../key",
    "/workspace/../bin",
    "/workspace/out",
    "/tekton/bin",
    "/tekton/bin/entrypoint",
    "/tekton/home",
    "/tekton/run/0",
    "/tekton/scripts",
    "/data",
    "/opt",
    "/opt/scan",
    "/org-tools",
    "/org-tools/x",
    "/etc",
    "/",
    "/var/run/secrets/kubernetes.io/serviceaccount",
];

/// Workspace names: plain ones, look-alikes of Tekton's and bookend's, and names that leave
/// /workspace.
const WORKSPACE_NAMES: &[&str] = &[
    "src",
    "out",
    "tools",
    ".org",
    "ws-abcde",
    "tekton-internal-bin",
    "bookend-key",
    "../bin",
    "../tekton/bin",
];

/// Sources the author chooses (bindings, Task volumes, redefinitions of the org's volume).
fn author_source() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"emptyDir": {}})),
        Just(json!({"emptyDir": {"medium": "Memory"}})),
        Just(json!({"configMap": {"name": "authors-tools", "defaultMode": 493}})),
        Just(json!({"secret": {"secretName": "authors-key"}})),
        Just(json!({"hostPath": {"path": "/"}})),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    namespace: &'static str,
    /// (name, mountPath, the binding's source, subPath)
    workspaces: Vec<(
        &'static str,
        Option<&'static str>,
        Value,
        Option<&'static str>,
    )>,
    /// The Task's definition of the policy's volume: the policy's own (`None`) or the author's.
    policy_volume: Option<Value>,
    /// More Task volumes: (name, source).
    volumes: Vec<(&'static str, Value)>,
    /// stepTemplate mounts: (volume, mountPath, subPath).
    template: Vec<(&'static str, &'static str, Option<&'static str>)>,
}

/// The Task's own volume names: plain ones and look-alikes of Tekton's and the API server's.
const TASK_VOLUMES: &[&str] = &[
    "data",
    "ws-abcde",
    "tekton-internal-scripts",
    "tekton-internal-run-7",
    "tekton-internal-home2",
    "kube-api-access-abcde",
];

fn case() -> impl Strategy<Value = Case> {
    let path = prop::sample::select(PATHS);
    let sub_path = prop_oneof![3 => Just(None), 1 => Just(Some("sub")), 1 => Just(Some("token"))];
    let workspace = (
        prop::sample::select(WORKSPACE_NAMES),
        prop_oneof![1 => Just(None), 3 => path.clone().prop_map(Some)],
        author_source(),
        sub_path.clone(),
    );
    let volume_name = prop::sample::select(TASK_VOLUMES);
    // A stepTemplate mounts the Task's volumes, Tekton's and the policies'.
    let mounted = prop::sample::select(
        TASK_VOLUMES
            .iter()
            .chain(&[
                "tekton-internal-bin",
                "tekton-internal-home",
                "bookend-key",
                "bookend-tools",
            ])
            .copied()
            .collect::<Vec<_>>(),
    );
    (
        prop::sample::select(&["team-a", "open"][..]),
        prop::collection::vec(workspace, 0..3),
        prop_oneof![2 => Just(None), 3 => author_source().prop_map(Some)],
        prop::collection::vec((volume_name, author_source()), 0..3),
        prop_oneof![
            2 => Just(Vec::new()),
            1 => prop::collection::vec((mounted, path, sub_path), 1..3),
        ],
    )
        .prop_map(
            |(namespace, workspaces, policy_volume, volumes, template)| Case {
                namespace,
                workspaces,
                policy_volume,
                volumes,
                template,
            },
        )
}

fn policy_volume_name(namespace: &str) -> &'static str {
    if namespace == "open" {
        "bookend-tools"
    } else {
        "bookend-key"
    }
}

fn remote_taskrun(set: &PolicySet, catalog: &Catalog, namespace: &str) -> Value {
    let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "run-1", "namespace": namespace, "uid": "u-1",
                     "creationTimestamp": "2026-06-01T00:00:00Z"},
        "spec": {"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "https://git.example/t"}]}}});
    let d = decide(&taskrun, namespace, set, catalog);
    assert_ne!(d.outcome, Outcome::Denied, "{:?}", d.message);
    let mut admitted = d.object;
    admitted["metadata"]["creationTimestamp"] = json!("2026-06-01T00:00:00Z");
    admitted
}

fn dry_run(set: &PolicySet, catalog: &Catalog, namespace: &str, spec: &Value) -> Outcome {
    dry_run_decision(set, catalog, namespace, spec).outcome
}

/// bookend's dry-run mutation of the Task with `spec`.
fn dry_run_decision(set: &PolicySet, catalog: &Catalog, namespace: &str, spec: &Value) -> Decision {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                      "metadata": {"name": "build", "namespace": namespace}, "spec": spec});
    decide_resolved_task(
        Request {
            object: &task,
            namespace,
            dry_run: true,
        },
        set,
        catalog,
    )
}

/// The author's Task: the org steps as bookend's dry-run writes them around the author's step,
/// the policy's volume (or the author's in its place), and the case's workspaces, volumes and
/// stepTemplate.
fn task_spec(set: &PolicySet, catalog: &Catalog, case: &Case) -> Value {
    let clean = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": case.namespace},
        "spec": {"steps": [{"name": "build", "image": "golang", "command": ["go", "build"]}]}});
    let d = decide_resolved_task(
        Request {
            object: &clean,
            namespace: case.namespace,
            dry_run: true,
        },
        set,
        catalog,
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    let mut spec = d.object["spec"].clone();
    if let Some(source) = &case.policy_volume {
        let mut volume = source.clone();
        volume["name"] = json!(policy_volume_name(case.namespace));
        spec["volumes"] = json!([volume]);
    }
    for (name, source) in &case.volumes {
        let mut volume = source.clone();
        volume["name"] = json!(name);
        spec["volumes"].as_array_mut().unwrap().push(volume);
    }
    if !case.workspaces.is_empty() {
        spec["workspaces"] = case
            .workspaces
            .iter()
            .map(|(name, path, _, _)| match path {
                Some(p) => json!({"name": name, "mountPath": p}),
                None => json!({"name": name}),
            })
            .collect();
    }
    if !case.template.is_empty() {
        spec["stepTemplate"] = json!({"volumeMounts": case.template.iter().map(|(v, p, s)| {
            let mut m = json!({"name": v, "mountPath": p});
            if let Some(s) = s { m["subPath"] = json!(s); }
            m
        }).collect::<Vec<_>>()});
    }
    spec
}

/// Tekton's internal mounts of every step (`implicitVolumeMounts`, `binROMount`,
/// `downwardMount`), in Tekton's order.
const IMPLICIT: &[(&str, &str)] = &[
    ("tekton-internal-bin", "/tekton/bin"),
    ("tekton-internal-workspace", "/workspace"),
    ("tekton-internal-home", "/tekton/home"),
    ("tekton-internal-results", "/tekton/results"),
    ("tekton-internal-steps", "/tekton/steps"),
    ("tekton-internal-artifacts", "/tekton/artifacts"),
    ("tekton-internal-downward", "/tekton/downward"),
];

/// The API server's defaulting of a volume source's file mode.
fn defaulted(mut volume: Value) -> Value {
    for source in ["secret", "configMap"] {
        if let Some(s) = volume.get_mut(source).and_then(Value::as_object_mut) {
            s.entry("defaultMode").or_insert(json!(420));
        }
    }
    volume
}

/// The Pod Tekton builds for `spec` (no dry-run mutation), as the API server stores it; `None`
/// where Tekton or the API server would refuse it (duplicate names or mount paths, a mount of
/// a volume the Pod lacks).
fn tekton_pod(spec: &Value, case: &Case) -> Option<Value> {
    // `workspace.Apply`: each workspace a volume `ws-<random>`, mounted through the
    // stepTemplate at its mountPath or /workspace/<name> (`filepath.Join`).
    let mut template = spec.get("stepTemplate").cloned().unwrap_or(json!({}));
    let mut volumes: Vec<Value> = Vec::new();
    for (i, (name, path, source, sub_path)) in case.workspaces.iter().enumerate() {
        let volume = format!("ws-q8x2{i}");
        let at = path.map_or_else(|| clean(&format!("/workspace/{name}")), str::to_owned);
        let mut mount = json!({"name": volume, "mountPath": at});
        if let Some(s) = sub_path {
            mount["subPath"] = json!(s);
        }
        if template["volumeMounts"].is_null() {
            template["volumeMounts"] = json!([]);
        }
        template["volumeMounts"].as_array_mut().unwrap().push(mount);
        let mut v = source.clone();
        v["name"] = json!(volume);
        volumes.push(v);
    }
    let steps = spec["steps"].as_array().unwrap();
    let mut containers = Vec::new();
    let mut scripts = String::new();
    for (i, step) in steps.iter().enumerate() {
        let merged = merge_step_template(&template, step, ApiVersion::V1).ok()?;
        let mut container = tekton_pod::container(&merged, i, &mut scripts);
        // Tekton's order: the step's (and template's) mounts, the run directories, then its
        // implicit mounts where the step did not take the path.
        let mut mounts: Vec<Value> = merged["volumeMounts"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for j in 0..steps.len() {
            let mut run = json!({"name": format!("tekton-internal-run-{j}"), "mountPath": format!("/tekton/run/{j}")});
            if j != i {
                run["readOnly"] = json!(true);
            }
            mounts.push(run);
        }
        let taken: Vec<String> = mounts
            .iter()
            .map(|m| clean(m["mountPath"].as_str().unwrap_or("")))
            .collect();
        for (name, path) in IMPLICIT {
            if !taken.iter().any(|t| t == path) {
                let mut m = json!({"name": name, "mountPath": path});
                if matches!(
                    *name,
                    "tekton-internal-bin" | "tekton-internal-steps" | "tekton-internal-downward"
                ) {
                    m["readOnly"] = json!(true);
                }
                mounts.push(m);
            }
        }
        container["volumeMounts"] = Value::Array(mounts);
        containers.push(container);
    }
    for (name, _) in IMPLICIT {
        volumes.push(if *name == "tekton-internal-downward" {
            json!({"name": name, "downwardAPI": {"defaultMode": 420, "items": [{"path": "ready", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.annotations['tekton.dev/ready']"}}]}})
        } else {
            json!({"name": name, "emptyDir": {}})
        });
    }
    for j in 0..steps.len() {
        volumes.push(json!({"name": format!("tekton-internal-run-{j}"), "emptyDir": {}}));
    }
    volumes.extend(
        spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .cloned()
            .map(defaulted),
    );
    let volumes: Vec<Value> = volumes.into_iter().map(defaulted).collect();
    let names: Vec<&str> = volumes.iter().filter_map(|v| v["name"].as_str()).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    if unique.len() != names.len() {
        return None;
    }
    for c in &containers {
        let mounts = c["volumeMounts"].as_array().unwrap();
        let mut paths: Vec<&str> = mounts
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .collect();
        paths.sort_unstable();
        let n = paths.len();
        paths.dedup();
        if paths.len() != n
            || mounts
                .iter()
                .any(|m| !names.contains(&m["name"].as_str().unwrap_or("")))
        {
            return None;
        }
    }
    Some(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "run-1-pod", "namespace": case.namespace,
                     "labels": {"tekton.dev/taskRun": "run-1", "tekton.dev/taskRunUID": "u-1"}},
        "spec": {"containers": containers, "volumes": volumes}}))
}

/// What an org container of `pod` sees that invariant I11 forbids, if anything: stated from
/// the rule (the policy's volumes at the policy's paths, as the policy defines them; Tekton's
/// own mounts; the author's only where a workspace may be), apart from the engine.
fn violation(pod: &Value, namespace: &str) -> Option<String> {
    let (org_steps, definition, strict) = org(namespace);
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name);
    let org_mounts: Vec<String> = org_steps
        .iter()
        .flat_map(|s| s["volumeMounts"].as_array().cloned().unwrap_or_default())
        .map(|m| clean(m["mountPath"].as_str().unwrap()))
        .collect();
    let mut protected: Vec<String> = [
        "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc",
        "root", "run", "sbin", "srv", "sys", "tmp", "usr", "var", "tekton", "ko-app",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for s in &org_steps {
        for p in [s["command"][0].as_str(), s["workingDir"].as_str()]
            .into_iter()
            .flatten()
            .map(str::to_owned)
            .chain(org_mounts.iter().cloned())
        {
            let top = clean(&p)
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or("")
                .to_owned();
            if top != "workspace" {
                protected.push(top);
            }
        }
    }
    let same_definition = |v: &Value| {
        let mut want = defaulted(definition.clone());
        let mut have = v.clone();
        for x in [&mut want, &mut have] {
            if let Some(o) = x.get_mut("emptyDir").and_then(Value::as_object_mut) {
                o.retain(|_, v| v != "");
            }
        }
        want == have
    };
    for v in volumes.iter().filter(|v| v["name"] == definition["name"]) {
        if !same_definition(v) {
            return Some(format!("the Pod's {v} is not the policy's {definition}"));
        }
    }
    for c in pod["spec"]["containers"].as_array().unwrap() {
        let Some(step) = org_steps
            .iter()
            .find(|s| c["name"] == format!("step-{}", s["name"].as_str().unwrap()))
        else {
            continue;
        };
        let own: Vec<Value> = step["volumeMounts"].as_array().cloned().unwrap_or_default();
        for m in c["volumeMounts"].as_array().unwrap() {
            let name = m["name"].as_str().unwrap_or("");
            let path = clean(m["mountPath"].as_str().unwrap_or(""));
            if own.contains(m) {
                continue;
            }
            let tektons = IMPLICIT.iter().any(|(n, p)| *n == name && *p == path)
                || name
                    .strip_prefix("tekton-internal-run-")
                    .is_some_and(|j| path == format!("/tekton/run/{j}"));
            let tektons_volume = volume(name).is_some_and(|v| {
                v.get("emptyDir") == Some(&json!({}))
                    || name == "tekton-internal-downward" && v.get("downwardAPI").is_some()
            });
            if tektons && tektons_volume {
                continue;
            }
            if name.starts_with("bookend-") || name.starts_with("tekton-") {
                return Some(format!("{} mounts {name} at {path}", c["name"]));
            }
            let top = path.trim_start_matches('/').split('/').next().unwrap_or("");
            let near = |o: &String| {
                path == *o
                    || path.starts_with(&format!("{o}/"))
                    || o.starts_with(&format!("{path}/"))
                    || path == "/"
            };
            if (strict && !path.starts_with("/workspace/"))
                || path == "/"
                || path == "/workspace"
                || protected.iter().any(|p| p == top)
                || org_mounts.iter().any(near)
            {
                return Some(format!("{} sees {name} at {path}", c["name"]));
            }
        }
    }
    None
}

/// `cases()` cases, failing seeds kept in this file's regressions.
fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/pod_backstop.proptest-regressions",
        ))),
        ..Config::default()
    }
}

#[test]
fn no_pod_the_backstop_admits_gives_an_org_container_the_authors_files() {
    let (set, catalog) = (set(), catalog());
    let taskruns: Vec<(&str, Value)> = ["team-a", "open"]
        .into_iter()
        .map(|ns| (ns, remote_taskrun(&set, &catalog, ns)))
        .collect();
    let config = config();
    let seen = std::cell::RefCell::new([0usize; 4]);
    proptest!(config, |(case in case())| {
        let spec = task_spec(&set, &catalog, &case);
        let Some(pod) = tekton_pod(&spec, &case) else {
            return Ok(());
        };
        let taskrun = &taskruns.iter().find(|(ns, _)| *ns == case.namespace).unwrap().1;
        let answer = check_pod(&pod, taskrun, &set, &catalog);
        if let Some(why) = violation(&pod, case.namespace) {
            prop_assert!(answer.is_err(), "admitted, but {why}: {pod}");
        }
        if let Err(denial) = &answer {
            prop_assert!(
                ["volumeMounts", "spec.volumes[", " mounts \""].iter().any(|f| denial.message.contains(f)),
                "a refusal names the field: {}", denial.message
            );
        }
        let dry_run = dry_run(&set, &catalog, case.namespace, &spec);
        // Tekton merges the stepTemplate (workspaces included) by mount path: a workspace at
        // exactly an org step's own mount path never reaches that step, which the dry-run
        // refuses all the same.
        let shadowed = case.workspaces.iter().any(|(_, p, _, _)| {
            p.is_some_and(|p| ["/workspace/.org/key", "/org-tools"].contains(&p))
        });
        // A workspace's name reaches the Pod only as its default path: with a mountPath, a
        // name the dry-run refuses (`../bin`) leaves nothing in the Pod to refuse.
        let named_only = case
            .workspaces
            .iter()
            .any(|(name, p, _, _)| name.contains('/') && p.is_some());
        if case.template.is_empty() && !shadowed && !named_only {
            prop_assert_eq!(
                answer.is_err(),
                dry_run == Outcome::Denied,
                "the backstop {:?}, the dry-run {:?}: {}", answer, dry_run, spec
            );
        }
        seen.borrow_mut()[usize::from(answer.is_err()) * 2 + usize::from(dry_run == Outcome::Denied)] += 1;
    });
    let seen = seen.into_inner();
    eprintln!(
        "Pods: {} admitted, {} refused where the dry-run admits, {} admitted where it refuses, {} refused by both",
        seen[0], seen[2], seen[1], seen[3]
    );
    assert!(
        seen[0] > 0 && seen[3] > 0,
        "the generator reaches both answers: {seen:?}"
    );
}

// Invariant I11a (docs/security.md): under a `postStepsRun: Always` policy, whatever the
// backstop admits of a remote Task's Pod (the dry-run mutation skipped) has bookend's exact
// Always machinery: its step containers are the Pod of what the dry-run mutation writes for
// the Task's own steps (the `onError: continue` on each step before the last Always
// post-step, each gate and the conditions on it, the verdict). The hostile Tasks start from
// bookend's own composition and change `onError`, gate conditions, the helpers (forged gates
// that always write false, verdicts that check a step that does not exist), their places, and
// the org steps' order.

const ALWAYS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {namespaces: ["team-a"]}
  postStepsRun: Always
  preSteps:
  - {name: bookend-scan, image: registry.example/scan:1, command: [/scan]}
  - {name: bookend-creds, image: registry.example/creds:1, command: [/creds]}
  postSteps:
  - {name: bookend-sbom, image: registry.example/syft:1, command: [/syft], args: [dir:/workspace]}
  - {name: bookend-attest, image: registry.example/attest:1, command: [/attest]}
"#;

/// One change to a step list.
#[derive(Clone, Debug)]
enum Change {
    OnError(usize, Option<&'static str>),
    GateWhen(usize, usize),
    DropWhens(usize),
    Remove(usize),
    Move(usize, usize),
    /// A gate (its previous gate's index, if any, and the indices it reads) or, with `None`,
    /// a verdict, inserted at an index under the name of an existing helper or a new one.
    Helper(usize, Option<Option<usize>>, Vec<usize>),
}

fn change() -> impl Strategy<Value = Change> {
    let at = 0usize..12;
    let on_error = prop_oneof![
        Just(None),
        Just(Some("continue")),
        Just(Some("stopAndFail"))
    ];
    prop_oneof![
        (at.clone(), on_error).prop_map(|(i, v)| Change::OnError(i, v)),
        (at.clone(), 1usize..4).prop_map(|(i, g)| Change::GateWhen(i, g)),
        at.clone().prop_map(Change::DropWhens),
        at.clone().prop_map(Change::Remove),
        (at.clone(), at.clone()).prop_map(|(a, b)| Change::Move(a, b)),
        (
            at,
            prop_oneof![Just(None), prop::option::of(0usize..12).prop_map(Some)],
            prop::collection::vec(0usize..12, 0..3),
        )
            .prop_map(|(i, kind, reads)| Change::Helper(i, kind, reads)),
    ]
}

fn apply(steps: &mut Vec<Value>, change: &Change, settings: &Settings) {
    use bookend::engine::inject::{Checked, Helper, helper_step};
    let n = steps.len();
    if n == 0 {
        return;
    }
    match change {
        Change::OnError(i, v) => {
            let step = steps[i % n].as_object_mut().unwrap();
            match v {
                Some(v) => step.insert("onError".to_owned(), json!(v)),
                None => step.remove("onError"),
            };
        }
        Change::GateWhen(i, g) => {
            let when = json!({"input": format!("$(steps.bookend-gate-{g}.results.ok)"),
                              "operator": "in", "values": ["true"]});
            let step = &mut steps[i % n];
            match step.get_mut("when").and_then(Value::as_array_mut) {
                Some(whens) => whens.push(when),
                None => step["when"] = json!([when]),
            }
        }
        Change::DropWhens(i) => {
            steps[i % n].as_object_mut().unwrap().remove("when");
        }
        Change::Remove(i) => {
            steps.remove(i % n);
        }
        Change::Move(a, b) => {
            let step = steps.remove(a % n);
            steps.insert(b % n, step);
        }
        Change::Helper(at, kind, reads) => {
            let checks: Vec<Checked> = reads
                .iter()
                .map(|&index| Checked {
                    index,
                    container: steps
                        .get(index)
                        .and_then(|s| s["name"].as_str())
                        .map_or(format!("step-unnamed-{index}"), |s| format!("step-{s}")),
                })
                .collect();
            let (name, spec) = match kind {
                None => (settings.verdict_name(), Helper::Verdict { checks }),
                Some(previous) => (
                    settings.gate_name(1 + at % 3),
                    Helper::Gate {
                        previous: previous.map(|p| (p, settings.gate_name(1 + p % 3))),
                        checks,
                    },
                ),
            };
            // Kubernetes refuses two containers of one name: the forged helper replaces it.
            steps.retain(|s| s["name"] != name.as_str());
            let at = at % (steps.len() + 1);
            steps.insert(at, helper_step(settings, &name, &spec));
        }
    }
}

/// The author's steps (with their `onError` and own conditions, bookend's gate conditions
/// taken off), plus any the generator named: `u0`, `u1`, `u2`.
fn user_steps() -> impl Strategy<Value = Vec<Value>> {
    let on_error = prop_oneof![
        3 => Just(None),
        1 => Just(Some("continue")),
        1 => Just(Some("stopAndFail")),
    ];
    prop::collection::vec(on_error, 1..4).prop_map(|errors| {
        errors
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let mut step =
                    json!({"name": format!("u{i}"), "image": "golang", "command": ["go", "build"]});
                if let Some(e) = e {
                    step["onError"] = json!(e);
                }
                step
            })
            .collect()
    })
}

/// The Task's steps as bookend's dry-run mutation writes them around `user`.
fn dry_run_steps(set: &PolicySet, user: &[Value]) -> Option<Vec<Value>> {
    let d = dry_run_decision(set, &Catalog::default(), "team-a", &json!({"steps": user}));
    (d.outcome != Outcome::Denied).then(|| d.object["spec"]["steps"].as_array().unwrap().clone())
}

fn pod_of(steps: &[Value]) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "run-1-pod", "namespace": "team-a", "labels": {"tekton.dev/taskRun": "run-1"}},
           "spec": tekton_pod::pod_spec(steps, &[])})
}

#[test]
fn under_always_the_backstop_admits_only_bookends_always_machinery() {
    let loaded = policy_set_from_yaml("always.yaml", ALWAYS, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;
    let settings = Settings::default();
    let catalog = Catalog::default();
    let taskrun = remote_taskrun(&set, &catalog, "team-a");
    let config = config();
    let seen = std::cell::RefCell::new([0usize; 2]);
    proptest!(config, |(user in user_steps(), changes in prop::collection::vec(change(), 0..4))| {
        let Some(composed) = dry_run_steps(&set, &user) else {
            return Ok(());
        };
        // bookend's own composition is admitted.
        prop_assert_eq!(check_pod(&pod_of(&composed), &taskrun, &set, &catalog), Ok(Vec::new()));
        let mut steps = composed;
        for c in &changes {
            apply(&mut steps, c, &settings);
        }
        let pod = pod_of(&steps);
        let answer = check_pod(&pod, &taskrun, &set, &catalog);
        seen.borrow_mut()[usize::from(answer.is_err())] += 1;
        match &answer {
            Ok(_) => {
                // Some Task of the author's, the Pod's own steps with or without each one's
                // `onError` (bookend's `continue` cannot be told from the author's), for which
                // the dry-run writes exactly this Pod.
                let own: Vec<Value> = steps
                    .iter()
                    .filter(|s| !s["name"].as_str().unwrap_or("").starts_with("bookend-"))
                    .map(|s| {
                        let mut s = s.clone();
                        s.as_object_mut().unwrap().remove("when");
                        s
                    })
                    .collect();
                // Tekton refuses a Task without steps (and the dry-run one it never sends):
                // its Pod, org machinery alone, is bookend's composition of nothing.
                if own.is_empty() {
                    return Ok(());
                }
                let bookends = (0..1usize << own.len()).any(|without| {
                    let task: Vec<Value> = own
                        .iter()
                        .enumerate()
                        .map(|(i, s)| {
                            let mut s = s.clone();
                            if without & (1 << i) != 0 {
                                s.as_object_mut().unwrap().remove("onError");
                            }
                            s
                        })
                        .collect();
                    dry_run_steps(&set, &task)
                        .is_some_and(|s| pod_of(&s)["spec"]["containers"] == pod["spec"]["containers"])
                });
                prop_assert!(bookends, "admitted a Pod that is not bookend's composition of any Task: {:?}\n{}", changes, pod);
            }
            Err(denial) => prop_assert!(
                denial.message.contains("container") || denial.message.contains("lacks the step"),
                "a refusal names the container: {}", denial.message
            ),
        }
    });
    let seen = seen.into_inner();
    eprintln!("Always Pods: {} admitted, {} refused", seen[0], seen[1]);
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "the generator reaches both answers: {seen:?}"
    );
}
