//! The cluster's Tekton ([`crate::tekton::cluster`]): a policy it cannot run refuses the
//! TaskRuns it matches (naming the flag), `postStepsRunFallback: OnSuccess` injects what it can
//! run with a warning, and policies it runs are unchanged.

use super::*;
use crate::policy::Support;
use crate::tekton::cluster::{Cluster, FeatureFlags};

fn on(version: &str, step_actions: Option<bool>, yaml: &str) -> PolicySet {
    let settings = Settings {
        tekton: Cluster {
            version: version.parse().unwrap(),
            flags: FeatureFlags {
                enable_step_actions: step_actions,
                ..FeatureFlags::default()
            },
        },
        ..Settings::default()
    };
    let loaded = policy_set_from_yaml("test.yaml", yaml, settings);
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

const ALWAYS_ON_SUCCESS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: report}
spec:
  postStepsRun: Always
  postStepsRunFallback: OnSuccess
  preSteps: [{name: bookend-setup, image: alpine}]
  postSteps: [{name: bookend-report, image: alpine}]
"#;

#[test]
fn always_on_a_default_lts_cluster_is_refused_naming_the_flag() {
    let set = on("v0.62.3", None, ALWAYS);
    assert!(matches!(
        set.policies()[0].tekton,
        Support::Unsupported { .. }
    ));
    let m = denied(&set, &build_taskrun(), "enable-step-actions");
    assert_eq!(
        m,
        "bookend: ClusterStepPolicy/report: spec.postStepsRun: Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\"; set enable-step-actions: \"true\" in Tekton's feature-flags ConfigMap, or upgrade Tekton to v1.0.0 or later; bookend refuses the TaskRun rather than inject steps Tekton would refuse or run differently"
    );
    // A TaskRun the policy does not match is not concerned.
    let mut elsewhere = build_taskrun();
    elsewhere["metadata"]["namespace"] = json!("team-b");
    let set = on(
        "v0.62.3",
        None,
        &ALWAYS.replace("spec:\n", "spec:\n  match: {namespaces: [team-a]}\n"),
    );
    let d = decide(
        Request {
            object: &elsewhere,
            namespace: "team-b",
            dry_run: false,
        },
        &set,
        &Catalog::default(),
    );
    assert_eq!(d.outcome, Outcome::Admitted);
}

#[test]
fn always_with_the_flag_or_on_v1_is_injected_as_on_the_newest() {
    let newest = run(&policies(ALWAYS), &build_taskrun());
    for (version, flag) in [
        ("v0.62.3", Some(true)),
        ("v0.70.0", Some(true)),
        ("v1.0.0", None),
    ] {
        let d = run(&on(version, flag, ALWAYS), &build_taskrun());
        assert_eq!(d.outcome, Outcome::Mutated, "{version}");
        assert_eq!(d.object, newest.object, "{version}");
    }
}

#[test]
fn the_on_success_fallback_injects_without_gates_and_warns() {
    let set = on("v0.65.0", Some(false), ALWAYS_ON_SUCCESS);
    let out = assert_converges(&set, &build_taskrun());
    // No gate, no verdict, no onError: nothing Tekton v0.65 refuses without the flag.
    assert_eq!(names(&out), ["bookend-setup", "build", "bookend-report"]);
    for step in steps_of(&out) {
        assert!(
            step.get("when").is_none() && step.get("results").is_none(),
            "{step}"
        );
        assert!(step.get("onError").is_none(), "{step}");
    }
    let d = run(&set, &build_taskrun());
    assert!(
        d.warnings.iter().any(|w| w.contains(
            "ClusterStepPolicy/report: postStepsRun: Always runs as OnSuccess (postStepsRunFallback: OnSuccess): Tekton v0.65.0 refuses step when"
        )),
        "{:?}",
        d.warnings
    );
    // Where the cluster can run Always, the fallback changes nothing.
    let full = run(&on("v1.15.0", None, ALWAYS_ON_SUCCESS), &build_taskrun());
    assert!(names(&full.object).contains(&"bookend-verdict".to_owned()));
    assert!(full.warnings.is_empty(), "{:?}", full.warnings);
}

#[test]
fn a_steps_own_feature_has_no_fallback() {
    let yaml = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: gated}
spec:
  postStepsRunFallback: OnSuccess
  postSteps:
    - name: bookend-report
      image: alpine
      when: [{input: "$(context.taskRun.namespace)", operator: notin, values: [kube-system]}]
"#;
    let set = on("v0.68.1", None, yaml);
    denied(
        &set,
        &build_taskrun(),
        "ClusterStepPolicy/gated: spec.postSteps[0].when: Tekton v0.68.1 refuses step when",
    );
    assert_eq!(
        run(&on("v0.68.1", Some(true), yaml), &build_taskrun()).outcome,
        Outcome::Mutated
    );
}

#[test]
fn an_audit_policy_the_cluster_cannot_run_reports_that_it_would_deny() {
    let set = on(
        "v0.62.0",
        None,
        &ALWAYS.replace("spec:\n", "spec:\n  mode: Audit\n"),
    );
    let d = run(&set, &build_taskrun());
    assert_eq!(d.outcome, Outcome::Admitted);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("would deny") && w.contains("enable-step-actions")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_cluster_task_ref_is_refused_where_tekton_still_runs_cluster_tasks() {
    let task = json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
        "metadata": {"name": "build", "namespace": "team-a"},
        "spec": {"steps": [{"name": "compile", "image": "go"}]}});
    let mut catalog = Catalog::default();
    catalog.add_objects(&[task], "team-a");
    let cluster_task_run = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {"taskRef": {"name": "build", "kind": "ClusterTask"}}});
    // Before v1.0 Tekton runs the ClusterTask `build`: inlining the namespaced Task `build`
    // would run another Task.
    for version in ["v0.62.3", "v0.70.0"] {
        let m = denied_with(
            &on(version, Some(true), PRE_POST),
            &cluster_task_run,
            &catalog,
            "spec.taskRef.kind: ClusterTask",
        );
        assert!(
            m.contains(&format!("Tekton {version} runs the ClusterTask \"build\""))
                && m.contains("reference a Task in namespace team-a")
                && m.contains("taskRef: Skip"),
            "{m}"
        );
        // The namespaced forms are still inlined there.
        let mut plain = cluster_task_run.clone();
        plain["spec"]["taskRef"] = json!({"name": "build", "kind": "Task"});
        let d = run_with(&on(version, Some(true), PRE_POST), &plain, &catalog);
        assert_eq!(d.outcome, Outcome::Mutated, "{version}");
        // `taskRef: Skip` leaves it to Tekton (and the Pod backstop), as any reference.
        let skip = PRE_POST
            .replace("priority: 1\n", "priority: 1\n  taskRef: Skip\n")
            .replace("priority: 2\n", "priority: 2\n  taskRef: Skip\n");
        let d = run_with(&on(version, Some(true), &skip), &cluster_task_run, &catalog);
        assert_eq!(d.outcome, Outcome::Admitted, "{version}: {:?}", d.message);
    }
    // Since v1.0 there is no ClusterTask: Tekton runs the namespaced Task, which bookend inlines.
    let d = run_with(&on("v1.0.0", None, PRE_POST), &cluster_task_run, &catalog);
    assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    assert!(names(&d.object).contains(&"compile".to_owned()));
}
