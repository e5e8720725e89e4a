//! Hermetic user steps (`userSteps.network: None`): the author's steps carry the jail, org
//! steps and bookend's helpers never do, and whatever would undo it or run outside it is
//! refused, naming the field.

use super::*;
use crate::engine::hermetic::effectively_jailed;

const HERMETIC: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: hermetic}
spec:
  postStepsRun: Always
  userSteps: {network: None}
  preSteps: [{name: bookend-fetch, image: alpine, script: wget http://deps/}]
  postSteps: [{name: bookend-publish, image: alpine, script: wget --post-data=x http://store/}]
"#;

fn env_of(step: &Value) -> &[Value] {
    step.get("env")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// Every author step is jailed, and bookend's jail check, right before the first of them; no
/// other step of bookend's is.
fn assert_jailed(object: &Value, prefix: &str) {
    assert_steps_jailed(steps_of(object), prefix);
}

fn assert_steps_jailed(steps: &[Value], prefix: &str) {
    let check = format!("{prefix}jail-check");
    for step in steps {
        let name = tekton::step_name(step).unwrap_or("");
        assert_eq!(
            effectively_jailed(env_of(step)),
            !name.starts_with(prefix) || name == check,
            "{name}: {step}"
        );
    }
    let named: Vec<&str> = steps
        .iter()
        .map(|s| tekton::step_name(s).unwrap_or(""))
        .collect();
    let first_user = named.iter().position(|n| !n.starts_with(prefix)).unwrap();
    assert_eq!(
        named.iter().filter(|n| **n == check).count(),
        1,
        "{named:?}"
    );
    // Right before the author's first step, with no gate of its own (Always).
    let at = first_user.checked_sub(1).filter(|&i| named[i] == check);
    assert!(
        at.is_some(),
        "the jail check is not right before {}: {named:?}",
        named[first_user]
    );
    let check_step = &steps[at.unwrap()];
    assert!(check_step.get("onError").is_none(), "{check_step}");
    assert_eq!(check_step["args"], json!([":"]), "{check_step}");
    assert!(check_step.get("securityContext").is_none(), "{check_step}");
}

#[test]
fn author_steps_are_jailed_and_org_steps_and_helpers_are_not() {
    let set = policies(HERMETIC);
    let object = taskrun(json!([
        {"name": "build", "image": "go", "env": [{"name": "TEKTON_RESOURCE_NAME", "value": "x"}, {"name": "TEKTON_HERMETIC", "value": "0"}]},
        {"name": "test", "image": "go", "envFrom": [{"configMapRef": {"name": "undo"}}]},
        {"image": "go", "script": "unnamed"}
    ]));
    let admitted = assert_converges(&set, &object);
    assert_jailed(&admitted, "bookend-");
    // The author's entries stay where they were; the jail's come last.
    let build = &steps_of(&admitted)[names(&admitted).iter().position(|n| n == "build").unwrap()];
    assert_eq!(env_of(build).len(), 4);
    assert_eq!(env_of(build)[0]["value"], "x");
}

#[test]
fn the_step_template_is_written_in_before_the_jail() {
    let set = policies(HERMETIC);
    let mut object = taskrun(json!([{"name": "build", "image": "go"}]));
    object["spec"]["taskSpec"]["stepTemplate"] = json!({"env": [{"name": "TEKTON_RESOURCE_NAME", "value": "from-template"}, {"name": "TEKTON_HERMETIC", "value": "0"}]});
    let admitted = assert_converges(&set, &object);
    assert_jailed(&admitted, "bookend-");
    assert!(admitted["spec"]["taskSpec"].get("stepTemplate").is_none());
}

#[test]
fn without_the_field_nothing_is_jailed() {
    let set =
        policies(&HERMETIC.replace("userSteps: {network: None}", "userSteps: {network: Pod}"));
    let admitted = assert_converges(&set, &build_taskrun());
    for step in steps_of(&admitted) {
        assert!(!effectively_jailed(env_of(step)), "{step}");
    }
}

#[test]
fn the_strict_policy_wins() {
    let set = policies(&format!("{HERMETIC}---\n{NOTIFY}"));
    let admitted = assert_converges(&set, &build_taskrun());
    assert_jailed(&admitted, "bookend-");
    assert!(names(&admitted).contains(&"bookend-notify".to_owned()));
}

#[test]
fn what_would_undo_the_jail_or_run_outside_it_is_refused_naming_the_field() {
    let set = policies(HERMETIC);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut o = build_taskrun();
        f(&mut o);
        o
    };
    let cases: Vec<(Value, &str)> = vec![
        (
            taskrun(json!([{"name": "clone", "ref": {"name": "git-clone"}}])),
            "spec.taskSpec.steps[0].ref",
        ),
        (
            with(&|o| {
                o["spec"]["taskSpec"]["sidecars"] = json!([{"name": "proxy", "image": "squid"}])
            }),
            "spec.taskSpec.sidecars",
        ),
        (
            with(&|o| {
                o["spec"]["taskSpec"]["volumes"] =
                    json!([{"name": "sock", "hostPath": {"path": "/run/docker.sock"}}])
            }),
            "spec.taskSpec.volumes[0].hostPath",
        ),
        (
            with(&|o| {
                o["spec"]["podTemplate"] =
                    json!({"volumes": [{"name": "sock", "hostPath": {"path": "/run"}}]})
            }),
            "spec.podTemplate.volumes[0].hostPath",
        ),
        (
            with(&|o| {
                o["spec"]["taskSpec"]["steps"][0]["lifecycle"] =
                    json!({"postStart": {"exec": {"command": ["curl", "x"]}}})
            }),
            "spec.taskSpec.steps[0].lifecycle",
        ),
        (
            with(&|o| {
                o["spec"]["taskSpec"]["stepTemplate"] =
                    json!({"readinessProbe": {"exec": {"command": ["curl", "x"]}}})
            }),
            "spec.taskSpec.stepTemplate.readinessProbe",
        ),
    ];
    for (object, field) in cases {
        let m = denied(&set, &object, field);
        assert!(m.contains("userSteps.network: None"), "{m}");
    }
}

#[test]
fn pod_template_env_for_the_jails_variables_is_refused_the_platforms_too() {
    let set = policies(HERMETIC);
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-defaults", "namespace": "tekton-pipelines"},
            "data": {"default-pod-template": "env:\n- {name: TEKTON_RESOURCE_NAME, value: x}\n"}})],
        "tekton-pipelines",
    );
    // Even a TaskRun without a podTemplate: Tekton merges the platform's into every Pod.
    denied_with(&set, &build_taskrun(), &catalog, "default-pod-template");
    // The TaskRun restating the platform's entry: refused by name.
    let mut object = build_taskrun();
    object["spec"]["podTemplate"] =
        json!({"env": [{"name": "TEKTON_RESOURCE_NAME", "value": "x"}]});
    denied_with(&set, &object, &catalog, "spec.podTemplate.env[0]");
}

#[test]
fn task_refs_are_jailed_when_inlined_and_refused_when_skipped() {
    let set = policies(HERMETIC);
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"steps": [{"name": "build", "image": "go"}]}});
    let mut catalog = Catalog::default();
    catalog.add_objects(&[task], "team-a");
    let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {"taskRef": {"name": "build"}}});
    let d = run_with(&set, &object, &catalog);
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    assert_jailed(&d.object, "bookend-");
    let skip = policies(&HERMETIC.replace(
        "postStepsRun: Always",
        "postStepsRun: Always\n  taskRef: Skip",
    ));
    denied_with(&skip, &object, &catalog, "taskRef: Inline");
}

#[test]
fn remote_tasks_are_jailed_at_the_dry_run_or_refused() {
    let set = policies(HERMETIC);
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "3f1c", "namespace": "team-a"},
        "spec": {"steps": [{"name": "build", "image": "go"}, {"name": "t", "image": "go", "env": [{"name": "TEKTON_RESOURCE_NAME", "value": "x"}]}]}});
    let d = decide_resolved_task(
        Request {
            dry_run: true,
            ..request(&task)
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    assert_steps_jailed(d.object["spec"]["steps"].as_array().unwrap(), "bookend-");
    // A policy whose criteria read the TaskRun cannot reach the resolved Task: refused.
    let labelled = policies(&HERMETIC.replace(
        "postStepsRun: Always",
        "postStepsRun: Always\n  match: {selector: {matchLabels: {team: a}}}",
    ));
    let mut object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "r", "namespace": "team-a", "labels": {"team": "a"}},
        "spec": {"taskRef": {"resolver": "git", "params": []}}});
    denied(&labelled, &object, "userSteps.network: None");
    // A namespace-level one: its podTemplate is checked at the TaskRun.
    object["spec"]["podTemplate"] = json!({"env": [{"name": "TEKTON_HERMETIC", "value": "0"}]});
    denied(&set, &object, "spec.podTemplate.env[0]");
}

#[test]
fn v1beta1_steps_are_jailed_too() {
    let set = policies(HERMETIC);
    let mut object = build_taskrun();
    object["apiVersion"] = json!("tekton.dev/v1beta1");
    let admitted = assert_converges(&set, &object);
    assert_jailed(&admitted, "bookend-");
}

/// The remote volume sources tried in each place (the unit tests try every one).
const REMOTE: &[(&str, &str)] = &[
    ("nfs", r#"{"server": "nfs.example", "path": "/"}"#),
    ("csi", r#"{"driver": "s3.csi.example"}"#),
    (
        "iscsi",
        r#"{"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": 0}"#,
    ),
    ("cephfs", r#"{"monitors": ["10.0.0.1:6789"]}"#),
    ("glusterfs", r#"{"endpoints": "g", "path": "v"}"#),
    ("rbd", r#"{"monitors": ["10.0.0.1"], "image": "i"}"#),
    ("flexVolume", r#"{"driver": "x/y"}"#),
    ("azureFile", r#"{"secretName": "s", "shareName": "x"}"#),
];

#[test]
fn remote_volumes_are_refused_in_every_place_naming_the_field_and_the_allowed_sources() {
    let set = policies(HERMETIC);
    for (kind, source) in REMOTE {
        let source: Value = serde_json::from_str(source).unwrap();
        let mut in_task = build_taskrun();
        in_task["spec"]["taskSpec"]["volumes"] = json!([{"name": "v", *kind: source}]);
        let mut in_pod_template = build_taskrun();
        in_pod_template["spec"]["podTemplate"] = json!({"volumes": [{"name": "v", *kind: source}]});
        for (object, field) in [
            (in_task, format!("spec.taskSpec.volumes[0].{kind}")),
            (
                in_pod_template,
                format!("spec.podTemplate.volumes[0].{kind}"),
            ),
        ] {
            let m = denied(&set, &object, &field);
            assert!(m.contains("emptyDir, configMap, secret, downwardAPI, projected, persistentVolumeClaim, ephemeral"), "{m}");
        }
    }
    // A workspace binding can only be csi among them (Tekton's WorkspaceBinding).
    let mut object = build_taskrun();
    object["spec"]["workspaces"] = json!([{"name": "src", "emptyDir": {}}, {"name": "out", "csi": {"driver": "s3.csi.example"}}]);
    let m = denied(&set, &object, "spec.workspaces[1].csi");
    assert!(m.contains("volumeClaimTemplate"), "{m}");
    // And so for a remote Task, whose bindings are the TaskRun's.
    object["spec"] = json!({"taskRef": {"resolver": "git", "params": []},
        "workspaces": [{"name": "out", "csi": {"driver": "x"}}]});
    denied(&set, &object, "spec.workspaces[0].csi");
}

#[test]
fn local_volumes_and_the_platforms_claims_are_admitted() {
    let set = policies(HERMETIC);
    let mut object = build_taskrun();
    object["spec"]["taskSpec"]["volumes"] = json!([
        {"name": "a", "emptyDir": {}}, {"name": "b", "configMap": {"name": "c"}},
        {"name": "c", "secret": {"secretName": "s"}}, {"name": "d", "projected": {"sources": []}},
        {"name": "e", "downwardAPI": {"items": []}}, {"name": "f", "persistentVolumeClaim": {"claimName": "p"}},
        {"name": "g", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]);
    object["spec"]["workspaces"] = json!([
        {"name": "src", "persistentVolumeClaim": {"claimName": "p"}, "subPath": "x"},
        {"name": "out", "volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}]);
    object["spec"]["podTemplate"] =
        json!({"nodeSelector": {"kubernetes.io/os": "linux", "pool": "build"}});
    let admitted = assert_converges(&set, &object);
    assert_jailed(&admitted, "bookend-");
}

#[test]
fn a_pod_template_that_can_leave_linux_is_refused_the_platforms_too() {
    let set = policies(HERMETIC);
    let windows_terms = |operator: &str, values: Value| {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": operator, "values": values}]}]}}}})
    };
    for (template, field) in [
        (
            json!({"nodeSelector": {"kubernetes.io/os": "windows"},
                "tolerations": [{"key": "os", "value": "windows", "effect": "NoSchedule"}]}),
            "spec.podTemplate.nodeSelector[\"kubernetes.io/os\"]",
        ),
        (
            windows_terms("In", json!(["windows"])),
            "spec.podTemplate.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
        ),
        (
            windows_terms("NotIn", json!(["linux"])),
            "nodeSelectorTerms[0].matchExpressions[0]",
        ),
    ] {
        let mut object = build_taskrun();
        object["spec"]["podTemplate"] = template;
        let m = denied(&set, &object, field);
        assert!(
            m.contains("only on Linux") && m.contains("kubernetes.io/os: linux"),
            "{m}"
        );
    }
    // The platform's default-pod-template: Tekton merges it into every Pod.
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-defaults", "namespace": "tekton-pipelines"},
            "data": {"default-pod-template": "nodeSelector:\n  kubernetes.io/os: windows\n"}})],
        "tekton-pipelines",
    );
    denied_with(&set, &build_taskrun(), &catalog, "default-pod-template");
    // Without the hermetic policy, Windows is the platform's business.
    let pod =
        policies(&HERMETIC.replace("userSteps: {network: None}", "userSteps: {network: Pod}"));
    let mut object = build_taskrun();
    object["spec"]["podTemplate"] = json!({"nodeSelector": {"kubernetes.io/os": "windows"}});
    assert_ne!(run(&pod, &object).outcome, Outcome::Denied);
}

#[test]
fn a_pipeline_runs_task_run_template_and_specs_reach_the_task_runs_and_are_refused() {
    let set = policies(HERMETIC);
    let pipeline_run: Value = serde_yaml_ng::from_str(
        r#"
apiVersion: tekton.dev/v1
kind: PipelineRun
metadata: {name: p, namespace: team-a}
spec:
  taskRunTemplate: {podTemplate: {nodeSelector: {kubernetes.io/os: windows}}}
  taskRunSpecs:
    - pipelineTaskName: two
      podTemplate:
        nodeSelector: {kubernetes.io/os: linux}
        affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/os, operator: In, values: [windows]}]}]}}}
    - pipelineTaskName: three
      podTemplate: {nodeSelector: {kubernetes.io/os: linux}}
  workspaces: [{name: shared, csi: {driver: s3.csi.example}}]
  pipelineSpec:
    workspaces: [{name: shared}]
    tasks:
      - {name: one, taskSpec: {steps: [{name: build, image: go}]}}
      - {name: two, taskSpec: {steps: [{name: build, image: go}]}}
      - name: three
        workspaces: [{name: src, workspace: shared}]
        taskSpec: {workspaces: [{name: src}], steps: [{name: build, image: go}]}
"#,
    )
    .unwrap();
    let preview = crate::tekton::pipeline::preview(&pipeline_run, "team-a", &|_, _| None).unwrap();
    let fields: Vec<String> = preview
        .children
        .iter()
        .filter_map(|c| match &c.run {
            crate::tekton::pipeline::Run::TaskRun(t) => Some(t),
            crate::tekton::pipeline::Run::Other(_) => None,
        })
        .map(|taskrun| {
            let d = run(&set, taskrun);
            assert_eq!(d.outcome, Outcome::Denied, "{taskrun}");
            d.message.unwrap()
        })
        .collect();
    assert_eq!(fields.len(), 3);
    assert!(
        fields[0].contains("spec.podTemplate.nodeSelector[\"kubernetes.io/os\"]"),
        "{}",
        fields[0]
    );
    assert!(
        fields[1].contains("spec.podTemplate.affinity.nodeAffinity"),
        "{}",
        fields[1]
    );
    assert!(
        fields[2].contains("spec.workspaces[0].csi"),
        "{}",
        fields[2]
    );
}

/// A step that is not root, or lacks `CAP_SETUID`/`CAP_SETGID`, can never start in the jail
/// (Tekton maps every id into it): refused where the TaskRun writes it, the step's own value
/// over the stepTemplate's, and the Pod's (which bookend's jail check runs with) from the
/// TaskRun's podTemplate or else the platform's.
#[test]
fn a_step_that_could_never_start_in_the_jail_is_refused_naming_the_field() {
    let set = policies(HERMETIC);
    let with = |step_context: Value, template_context: Option<Value>, pod: Option<Value>| {
        let mut object = taskrun(json!([
            {"name": "build", "image": "go", "securityContext": step_context}
        ]));
        if let Some(t) = template_context {
            object["spec"]["taskSpec"]["stepTemplate"] = json!({"securityContext": t});
        }
        if let Some(p) = pod {
            object["spec"]["podTemplate"] = json!({"securityContext": p});
        }
        object
    };
    let refused = [
        (
            with(json!({"runAsUser": 1000}), None, None),
            "spec.taskSpec.steps[0].securityContext.runAsUser",
        ),
        (
            with(json!({}), Some(json!({"runAsNonRoot": true})), None),
            "spec.taskSpec.stepTemplate.securityContext.runAsNonRoot",
        ),
        (
            with(
                json!({"capabilities": {"drop": ["NET_RAW", "ALL"]}}),
                None,
                None,
            ),
            "spec.taskSpec.steps[0].securityContext.capabilities.drop[1]",
        ),
        (
            with(
                json!({"capabilities": {"drop": ["cap_setgid"]}}),
                None,
                None,
            ),
            "spec.taskSpec.steps[0].securityContext.capabilities.drop[0]",
        ),
        // The step's own root does not help the jail check, which runs as the Pod says.
        (
            with(
                json!({"runAsUser": 0}),
                None,
                Some(json!({"runAsUser": 65532})),
            ),
            "spec.podTemplate.securityContext.runAsUser",
        ),
        (
            with(json!({}), None, Some(json!({"runAsNonRoot": true}))),
            "spec.podTemplate.securityContext.runAsNonRoot",
        ),
    ];
    for (object, field) in refused {
        let m = denied(&set, &object, field);
        assert!(
            m.contains("user namespace") && m.contains("userSteps.network: None"),
            "{m}"
        );
    }
    // The step's own value wins over the template's; root and other capabilities are fine.
    let admitted = [
        with(
            json!({"runAsNonRoot": false, "runAsUser": 0}),
            Some(json!({"runAsNonRoot": true, "runAsUser": 1000})),
            None,
        ),
        with(json!({"capabilities": {"drop": ["NET_RAW"]}}), None, None),
        with(
            json!({}),
            None,
            Some(json!({"runAsUser": 0, "fsGroup": 1000})),
        ),
    ];
    for object in admitted {
        let d = run(&set, &object);
        assert_eq!(d.outcome, Outcome::Mutated, "{:?}: {object}", d.message);
    }
    // The platform's default-pod-template (a TaskRun may not replace its securityContext).
    let mut catalog = Catalog::default();
    catalog.add_objects(
        &[json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-defaults", "namespace": "tekton-pipelines"},
            "data": {"default-pod-template": "securityContext:\n  runAsNonRoot: true\n"}})],
        "tekton-pipelines",
    );
    denied_with(
        &set,
        &build_taskrun(),
        &catalog,
        "default-pod-template (ConfigMap config-defaults) securityContext.runAsNonRoot",
    );
}
