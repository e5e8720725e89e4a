//! A real kube-apiserver calls bookend: etcd + kube-apiserver (tests/e2e/start-cluster.sh),
//! Tekton's CRDs, `helm install` of charts/bookend with the webhooks pointed at this machine
//! (`webhook.url`), `bookend serve --source kubernetes` on loopback as the chart's
//! ServiceAccount, then `kubectl` and `helm` scenarios in order on that one cluster, ending with
//! `helm uninstall` and the chart's own certificate. Every object the apiserver returns goes to
//! `tekton-validate`.
//!
//! A failing scenario does not stop the others (each runs under `catch_unwind`); the summary
//! lists every scenario, and the test fails at the end if any failed. Processes are stopped by
//! Drop guards, also on failure. See docs/testing.md, "End-to-end against a real
//! kube-apiserver".
//!
//! Knobs (development only): `BOOKEND_E2E_BIN` tests another bookend binary;
//! `BOOKEND_E2E_KEEP=1` keeps the work directory (logs, certificates, kubeconfig);
//! `BOOKEND_E2E_ONLY=<text>` runs only the scenarios whose name contains it (after the set-up).
//!
//! This file has the test, the scenario list and the context the scenarios share; the scenarios
//! are in the modules below by concern, on the harness of `kubectl`, `bookend`, `helm`, `objects`.

mod admission;
mod bookend;
mod certificates;
mod failure;
mod getting_started;
mod helm;
mod kubectl;
mod objects;
mod pod_backstop;
mod policies;
mod rbac;
mod status;
mod tasks;
mod upgrade;
mod verification;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Clock, Cluster, free_port, poll, run, tail};
use crate::tools::tools;

use admission::{
    scenario_attack_classes, scenario_create_and_rerun, scenario_dry_run, scenario_reserved_prefix,
    scenario_v1beta1,
};
use bookend::Bookend;
use certificates::{Certs, scenario_generated_certificate, scenario_rotation};
use failure::{scenario_fail_closed, scenario_helm_upgrade_restores, scenario_uninstall};
use helm::{check_installed_webhooks, helm_install, service_account_kubeconfig};
use objects::{example, includes, taskrun};
use pod_backstop::{
    scenario_pod_backstop, scenario_pod_taken_by_name, scenario_service_account_token,
};
use policies::{
    scenario_origin_pipeline, scenario_policy_lifecycle, scenario_step_policy,
    scenario_team_cannot_evict_or_wrap_org,
};
use status::{
    scenario_openreports, scenario_policy_reports, scenario_policy_status, scenario_taskrun_events,
    scenario_tekton_version,
};
use tasks::{scenario_remote_task_dry_run, scenario_task_ref};
use verification::{
    scenario_post_run_verification, scenario_remote_marks_and_unmarkable_taskruns,
    scenario_verification_cannot_be_escaped, scenario_verification_counts_by_namespace,
};

const TEAM_A: &str = "team-a";
const TEAM_B: &str = "team-b";

struct Ctx {
    // Dropped in this order: bookend before the cluster it watches.
    bookend: Bookend,
    cluster: Cluster,
    certs: Certs,
    work: PathBuf,
    /// Every object the apiserver returned (label, object), for tekton-validate.
    returned: Vec<(String, Value)>,
}

impl Ctx {
    fn keep(&mut self, label: &str, object: &Value) {
        self.returned.push((label.to_owned(), object.clone()));
    }

    /// Dry-runs `object` until its steps include `step`; returns the TaskRun, kept under `label`.
    fn poll_injected(&mut self, what: &str, object: &Value, step: &str, label: &str) -> Value {
        let out = self
            .cluster
            .poll_steps(what, object, |steps| includes(steps, step));
        let object = out.json();
        self.keep(label, &object);
        object
    }
}

fn scenario_tekton_validate(ctx: &mut Ctx) -> String {
    let path = ctx.work.join("returned.json");
    let objects: Vec<&Value> = ctx.returned.iter().map(|(_, o)| o).collect();
    std::fs::write(&path, serde_json::to_vec_pretty(&objects).unwrap()).expect("write");
    let mut cmd = Command::new(tools().path("tekton-validate"));
    cmd.arg("--json").arg(&path);
    let out = run(cmd, None);
    let results: Vec<Value> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("tekton-validate --json: {e}: {} {}", out.stdout, out.stderr));
    let bad: Vec<String> = results
        .iter()
        .filter(|r| r["ok"] != json!(true))
        .map(|r| {
            let label = r["doc"]
                .as_u64()
                .and_then(|i| ctx.returned.get(i as usize))
                .map(|(l, _)| l.as_str())
                .unwrap_or("?");
            format!("{label}: {}", r["error"])
        })
        .collect();
    assert!(
        bad.is_empty(),
        "Tekton rejects objects the apiserver returned: {bad:#?}"
    );
    assert_eq!(results.len(), ctx.returned.len());
    assert!(
        out.ok(),
        "tekton-validate exit {}: {}",
        out.status,
        out.stderr
    );
    format!("{} objects, all OK", results.len())
}

/// The cluster every test here runs on: start-cluster.sh (with `cluster_env`), the chart
/// installed with its webhooks pointed at this machine, bookend serving as the chart's
/// ServiceAccount, namespaces team-a, team-b, team-c and examples/policies live.
fn set_up(clock: &mut Clock, work: &Path, cluster_env: &[(&str, &str)]) -> Ctx {
    let cluster = Cluster::start_with(work.join("cluster"), cluster_env);
    clock.done("etcd + kube-apiserver + Tekton CRDs (start-cluster.sh)");

    // The chart, as a user installs it, but with the webhooks pointed at this machine. Its
    // webhook configurations are live from here on, before bookend runs: nothing creates
    // TaskRuns or policies until it is ready.
    let certs = Certs::create(work.join("certs"));
    let port = free_port();
    helm_install(&cluster, port, &certs.ca_bundle_b64(), &[]).expect_ok("helm install");
    check_installed_webhooks(&cluster, port, &certs.ca_bundle_b64());
    // `kubectl wait` fails ("accessor error") while a CRD has no status yet: poll it.
    poll(
        "the chart's CRDs Established",
        Duration::from_secs(60),
        || {
            cluster
                .kubectl(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=10s",
                    "crd/clustersteppolicies.bookend.dev",
                    "crd/steppolicies.bookend.dev",
                ])
                .succeeded()
        },
    );
    poll("policies in discovery", Duration::from_secs(30), || {
        cluster
            .kubectl(&["get", "clustersteppolicies.v1alpha1.bookend.dev"])
            .succeeded()
    });
    let crds = cluster.get_json(&["crd", "clustersteppolicies.bookend.dev"], "the CRD");
    assert_eq!(
        crds["metadata"]["annotations"]["helm.sh/resource-policy"],
        json!("keep")
    );
    clock.done("helm install (CRDs, RBAC, Deployment, webhooks, ...)");

    // bookend authenticates as the chart's ServiceAccount: the chart's RBAC must suffice.
    let sa_kubeconfig = service_account_kubeconfig(&cluster, &work.join("bookend.kubeconfig"));
    let mut bookend = Bookend::start(
        work,
        port,
        &certs.live("tls.crt"),
        &certs.live("tls.key"),
        &sa_kubeconfig,
    );
    bookend.wait_ready(Duration::from_secs(60));
    clock.done("bookend serve --source kubernetes as the chart's ServiceAccount until /readyz");

    for ns in [TEAM_A, TEAM_B, "team-c"] {
        cluster
            .kubectl(&["create", "namespace", ns])
            .expect_ok("create namespace");
        // With the ServiceAccount admission plugin on, a Pod needs its ServiceAccount, and
        // no kube-controller-manager creates `default` here.
        cluster
            .kubectl(&["create", "serviceaccount", "default", "--namespace", ns])
            .expect_ok("create ServiceAccount default");
    }
    // Through policies.validate.bookend.dev, i.e. bookend.
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &example("examples/policies").display().to_string(),
        ])
        .expect_ok("apply examples/policies");
    let probe = taskrun(TEAM_A, "probe-", "work");
    cluster.poll_steps("the apiserver to call bookend", &probe, |steps| {
        includes(steps, "bookend-credentials")
    });
    clock.done("namespaces, example policies, webhooks live");

    Ctx {
        bookend,
        cluster,
        certs,
        work: work.to_owned(),
        returned: Vec::new(),
    }
}

#[test]
fn real_apiserver_calls_bookend() {
    let mut clock = Clock::new("e2e");
    tools();
    clock.done("tools (build-tools.sh)");

    let tmp = tempfile::Builder::new()
        .prefix("bookend-e2e-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    println!("work directory: {}", work.display());
    // The API server audits bookend's requests: the RBAC scenario reads what it used. The
    // ServiceAccount admission plugin is on, as on a real cluster: every Pod a scenario creates
    // gets the token mount.
    let mut ctx = set_up(
        &mut clock,
        &work,
        &[
            ("E2E_AUDIT_USERS", &rbac::bookend_user()),
            ("E2E_SERVICE_ACCOUNT_ADMISSION", "1"),
        ],
    );
    type Scenario = fn(&mut Ctx) -> String;
    let scenarios: [(&str, Scenario); 29] = [
        (
            "attack classes of tests/security: every case's answer and invariant",
            scenario_attack_classes,
        ),
        (
            "dry-run shows steps and warnings, stores nothing",
            scenario_dry_run,
        ),
        (
            "create persists steps in order; rerun injects nothing twice",
            scenario_create_and_rerun,
        ),
        (
            "v1beta1 TaskRun patched with v1beta1 names",
            scenario_v1beta1,
        ),
        (
            "reserved-prefix user step refused",
            scenario_reserved_prefix,
        ),
        (
            "policy objects: invalid refused, new live, deleted stops",
            scenario_policy_lifecycle,
        ),
        (
            "policy status: READY, reasons, observedGeneration, Events",
            scenario_policy_status,
        ),
        (
            "StepPolicy applies only in its namespace",
            scenario_step_policy,
        ),
        (
            "a team policy cannot evict or wrap an org policy",
            scenario_team_cannot_evict_or_wrap_org,
        ),
        (
            "the cluster's Tekton: pipelines-info and feature-flags flip a policy's status",
            scenario_tekton_version,
        ),
        ("taskRef to a cluster Task is inlined", scenario_task_ref),
        (
            "Tekton controller's dry-run of a remote Task gets the steps",
            scenario_remote_task_dry_run,
        ),
        (
            "the Pod backstop: a remote Task's Pod without its steps is refused",
            scenario_pod_backstop,
        ),
        (
            "a Pod taken by the TaskRun Pod's name is refused (breaker34)",
            scenario_pod_taken_by_name,
        ),
        (
            "PipelineRun ownerReference matches origin: Pipeline",
            scenario_origin_pipeline,
        ),
        (
            "Events on TaskRuns: injected, skipped, none for dry runs",
            scenario_taskrun_events,
        ),
        (
            "PolicyReports for Audit policies: CRD missing, then installed",
            scenario_policy_reports,
        ),
        // Before openreports: it reads the run results from the PolicyReport, which `auto`
        // leaves for the Report once that CRD is installed.
        (
            "post-run verification: verdicts, Event, report, metrics, the policy's counts; once across a restart and two replicas",
            scenario_post_run_verification,
        ),
        (
            "post-run verification: a policy's status counts the verdicts of its namespaces only; forged marks count for none",
            scenario_verification_counts_by_namespace,
        ),
        (
            "post-run verification cannot be escaped: marks bookend's alone at CREATE and UPDATE",
            scenario_verification_cannot_be_escaped,
        ),
        (
            "post-run verification: a remote-resolver TaskRun is marked at CREATE, a resolved Task's marks are not copied into it; unmarkable TaskRuns get their verdict",
            scenario_remote_marks_and_unmarkable_taskruns,
        ),
        (
            "openreports: auto finds the Report CRD and writes there",
            scenario_openreports,
        ),
        ("certificate rotation under load", scenario_rotation),
        (
            "fail-closed backstop without the mutating webhook",
            scenario_fail_closed,
        ),
        (
            "helm upgrade restores a deleted webhook configuration",
            scenario_helm_upgrade_restores,
        ),
        (
            "the chart's RBAC: every grant used, no request refused",
            rbac::scenario_rbac_audit,
        ),
        (
            "helm uninstall: webhooks first, TaskRuns admitted again",
            scenario_uninstall,
        ),
        (
            "the chart's own certificate: trusted, kept, renewed",
            scenario_generated_certificate,
        ),
        (
            "tekton-validate accepts every returned object",
            scenario_tekton_validate,
        ),
    ];
    let mut summary = Vec::new();
    let only = std::env::var("BOOKEND_E2E_ONLY").unwrap_or_default();
    for (name, scenario) in scenarios.into_iter().filter(|(n, _)| n.contains(&only)) {
        summary.push(clock.scenario(name, || scenario(&mut ctx)));
    }

    println!("\n=== e2e against kube-apiserver: summary ===");
    for (_, line) in &summary {
        println!("{line}");
    }
    clock.print_phases();
    let failed = summary.iter().filter(|(ok, _)| !ok).count();
    if failed > 0 {
        println!("--- bookend log (tail)\n{}", tail(&ctx.bookend.log, 40));
        println!(
            "--- kube-apiserver log (tail)\n{}",
            tail(&ctx.cluster.dir.join("kube-apiserver.log"), 20)
        );
    }
    drop(ctx);
    if std::env::var_os("BOOKEND_E2E_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
    assert_eq!(
        failed, 0,
        "{failed} e2e scenario(s) failed (see the summary above)"
    );
}

/// The ServiceAccount admission plugin on (start-cluster.sh `E2E_SERVICE_ACCOUNT_ADMISSION=1`),
/// as on every real cluster: the token mount it adds to a TaskRun's Pod against the Pod
/// backstop. Its own cluster, since the plugin refuses every Pod whose ServiceAccount is
/// missing.
#[test]
fn service_account_token_mount() {
    let mut clock = Clock::new("e2e service account token");
    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-e2e-sa-")
        .tempdir()
        .expect("tempdir");
    let mut ctx = set_up(
        &mut clock,
        tmp.path(),
        &[("E2E_SERVICE_ACCOUNT_ADMISSION", "1")],
    );
    let (ok, line) = clock.scenario(
        "the service account token mount: admitted on org containers, a Task volume of its name refused",
        || scenario_service_account_token(&mut ctx),
    );
    println!("{line}");
    if !ok {
        println!("--- bookend log (tail)\n{}", tail(&ctx.bookend.log, 40));
    }
    assert!(ok, "{line}");
}
