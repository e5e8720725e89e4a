//! Runtime end-to-end suite: TaskRuns that bookend injected actually run, under Tekton's own
//! controller and entrypoint.
//!
//! A real kube-apiserver (tests/e2e/start-cluster.sh) calls `bookend serve --source kubernetes`
//! as its webhook (deploy/'s configurations, the chart's render, with clientConfig pointed at it).
//! Tekton's controller (v1.15.0, built from Go modules) reconciles TaskRuns and PipelineRuns and
//! builds the Pods; a kubelet stand-in (tests/runtime/standins/kubelet) runs each Pod's
//! containers under runc from local root filesystems, with Tekton's entrypoint binary ordering
//! the steps inside them. Scenarios assert Tekton's status and what the steps wrote.
//!
//! `cargo test --test runtime -- --nocapture`. Needs root, runc and a static busybox
//! (`apt-get install runc busybox-static`); `BOOKEND_SKIP_RUNTIME=1` skips it loudly.
//! `BOOKEND_RUNTIME_KEEP=1` keeps the work directory (logs, Pod volumes);
//! `BOOKEND_RUNTIME_SCENARIOS=2,12` runs only those scenarios. See docs/testing.md.

// The attack classes of tests/security; this suite runs the taskRef class's forms.
#[allow(dead_code)]
#[path = "../security/cases.rs"]
mod cases;
#[allow(dead_code)]
#[path = "../security/classes/mod.rs"]
mod classes;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/host.rs"]
mod host;
#[path = "../e2e/kube.rs"]
mod kube;
#[path = "../common/tekton_line.rs"]
mod tekton_line;
#[path = "../e2e/tools.rs"]
mod tools;

mod daemon;
mod fallback;
mod hermetic;
mod matrix;
mod node;
mod pods;
mod prereqs;
mod preview;
mod provenance;
mod remote;
mod restart;
mod runs;
mod scenarios;
mod sealed;
mod timing;
mod verification;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::kube::{Clock, Cluster, Kubectl, free_port, poll, run, tail};
use crate::matrix::{Line, NotReady};
use crate::runs::Env;
use crate::scenarios::Ctx;
use crate::tools::{Tools, tekton_tools};
use bookend::tekton::cluster::Feature;

pub use common::root;

/// Pause between the attempts of `kube::poll`; shorter than the e2e suite's, as the injection
/// cost table (timing.rs) learns through it when a run finished.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

fn bookend_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_bookend"))
}

fn yaml_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The rest of Tekton's CRDs, its namespace, config maps (as shipped, except metrics off:
/// nothing scrapes them and the default would claim a fixed port), ServiceAccounts and RBAC, and
/// its remote resolvers' namespace, RBAC and config maps (as shipped, except that the cluster
/// resolver may only read the catalog namespace of the remote scenarios).
fn install_tekton(kubectl: &Kubectl, tools: &Tools) {
    let runtime = tools.bin.join("runtime");
    let mut args = vec!["create".to_owned()];
    for file in yaml_files(&runtime.join("crds")) {
        args.extend(["-f".to_owned(), file.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    kubectl.ok(&args, "create Tekton's other CRDs");
    poll("Tekton's CRDs served", Duration::from_secs(60), || {
        for resource in [
            "pipelineruns.v1.tekton.dev",
            "pipelines.v1.tekton.dev",
            "customruns.v1beta1.tekton.dev",
            "resolutionrequests.v1beta1.resolution.tekton.dev",
            "verificationpolicies.v1alpha1.tekton.dev",
        ] {
            kubectl.get(&[resource, "-A"])?;
        }
        Ok(())
    });
    kubectl.ok(
        &["create", "namespace", "tekton-pipelines"],
        "create tekton-pipelines",
    );
    for file in yaml_files(&runtime.join("config")) {
        kubectl.ok(
            &["apply", "-f", &file.display().to_string()],
            "apply Tekton's config",
        );
    }
    kubectl.ok(
        &[
            "-n",
            "tekton-pipelines",
            "patch",
            "configmap",
            "config-observability",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"metrics-protocol":"none"}}"#,
        ],
        "metrics off",
    );
    // One apply per directory, its files in order (the resolvers' namespace comes first).
    for dir in ["rbac", "resolvers"] {
        let mut args = vec!["apply".to_owned()];
        for file in yaml_files(&runtime.join(dir)) {
            args.extend(["-f".to_owned(), file.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl.ok(&args, &format!("apply Tekton's {dir}"));
    }
    kubectl.ok(
        &[
            "-n",
            "tekton-pipelines-resolvers",
            "patch",
            "configmap",
            "cluster-resolver-config",
            "--type",
            "merge",
            "-p",
            &json!({"data": {"allowed-namespaces": remote::CATALOG}}).to_string(),
        ],
        "the cluster resolver reads the catalog namespace only",
    );
}

/// deploy/'s two webhook configurations (deploy/base/webhooks.yaml, the chart rendered for
/// kustomize), unchanged but for clientConfig: each Service reference becomes
/// `https://127.0.0.1:<port><its path>` with the test CA. Rules, matchPolicy, failurePolicy,
/// objectSelector, namespaceSelector, matchConditions and timeouts stay as installed.
fn webhook_configurations(port: u16, ca_b64: &str) -> Vec<Value> {
    let path = root().join("deploy/base/webhooks.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let configurations: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("a YAML document"))
        .filter(|v| !v.is_null())
        .map(|mut configuration| {
            for hook in configuration["webhooks"]
                .as_array_mut()
                .expect("webhooks")
                .iter_mut()
            {
                let path = hook["clientConfig"]["service"]["path"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: no service.path", hook["name"]))
                    .to_owned();
                hook["clientConfig"] = json!({
                    "url": format!("https://127.0.0.1:{port}{path}"),
                    "caBundle": ca_b64,
                });
            }
            configuration
        })
        .collect();
    assert_eq!(
        configurations.len(),
        2,
        "deploy/base/webhooks.yaml: a mutating and a validating configuration"
    );
    configurations
}

/// Every scenario's policies.
fn all_policies() -> Vec<Value> {
    [
        scenarios::policies(),
        remote::policies(),
        sealed::policies(),
        pods::policies(),
        provenance::policies(),
        hermetic::policies(),
        fallback::policies(),
        restart::policies(),
    ]
    .concat()
}

/// bookend: its CRDs, the test policies, `bookend serve --source kubernetes`, and deploy/'s
/// webhook configurations pointed at it (returned as registered).
fn start_bookend(
    work: &std::path::Path,
    kubectl: &Kubectl,
    certs: &std::path::Path,
) -> (BookendServer, Vec<Value>, Vec<NotReady>) {
    let mut crds = Command::new(bookend_bin());
    crds.arg("crds");
    let crds = run(crds, None).expect_ok("bookend crds");
    kubectl
        .run(&["apply", "-f", "-"], Some(crds.stdout.as_bytes()))
        .expect_ok("apply bookend's CRDs");
    poll("bookend's CRDs served", Duration::from_secs(60), || {
        kubectl
            .get(&["clustersteppolicies.v1alpha1.bookend.dev"])
            .map(|_| ())
    });
    for policy in all_policies() {
        kubectl.apply(&policy);
    }
    // The chart's PolicyReport CRD, so bookend writes its verdicts' results (scenario 18).
    kubectl
        .run(
            &["apply", "-f", "-"],
            Some(
                &std::fs::read(root().join("charts/bookend/files/policyreport-crd.yaml"))
                    .expect("the chart's PolicyReport CRD"),
            ),
        )
        .expect_ok("apply the PolicyReport CRD");
    let port = free_port();
    let mut bookend = BookendServer {
        daemon: None,
        port,
        admin_port: free_port(),
        certs: certs.to_owned(),
        kubeconfig: kubectl.kubeconfig.clone(),
        work: work.to_owned(),
    };
    bookend.start();

    let ca = std::fs::read_to_string(certs.join("ca.crt.b64")).expect("ca.crt.b64");
    let configurations = webhook_configurations(port, ca.trim());
    for configuration in &configurations {
        kubectl.apply(configuration);
    }
    // The apiserver and bookend's caches catch up asynchronously: dry-run until a TaskRun in a
    // policy namespace comes back injected.
    let probe = runs::taskrun(
        scenarios::ORDER,
        "probe",
        json!({"steps": [runs::step("work", "")]}),
    );
    poll("bookend to inject", Duration::from_secs(60), || {
        bookend.daemon().check_alive();
        let out = kubectl.with_object(&["create", "--dry-run=server"], &probe);
        let object = out.try_json()?;
        let first = &object["spec"]["taskSpec"]["steps"][0]["name"];
        if first == "bookend-outer-pre" {
            Ok(())
        } else {
            Err(format!("first step {first}"))
        }
    });
    // Every test policy is loaded: one bookend left out (a hazard, a clash) would fail its
    // scenario far from the cause, with a step missing.
    let wanted: Vec<String> = all_policies()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().expect("a name").to_owned())
        .collect();
    // On an older Tekton a policy may be refused (Ready False, TektonUnsupported): returned
    // for matrix::check_refused_policies; any other reason fails here.
    let not_ready = poll("the test policies Ready", Duration::from_secs(30), || {
        let list = kubectl.get(&["clustersteppolicies"])?;
        let mut not_ready: Vec<NotReady> = Vec::new();
        for name in &wanted {
            let ready = list["items"]
                .as_array()
                .and_then(|items| items.iter().find(|p| p["metadata"]["name"] == *name))
                .and_then(|p| p["status"]["conditions"].as_array())
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .cloned()
                .unwrap_or(Value::Null);
            match ready["status"].as_str() {
                Some("True") => {}
                Some("False") if ready["reason"] == "TektonUnsupported" => not_ready.push((
                    name.clone(),
                    ready["reason"].as_str().unwrap_or_default().to_owned(),
                    ready["message"].as_str().unwrap_or_default().to_owned(),
                )),
                Some("False") => panic!(
                    "bookend left out the test policy {name}: {} {}",
                    ready["reason"], ready["message"]
                ),
                _ => return Err(format!("{name}: no Ready condition yet")),
            }
        }
        Ok(not_ready)
    });
    (bookend, configurations, not_ready)
}

/// `bookend serve` as the suite runs it, startable again with the same flags and ports (the
/// webhook configurations point at its port).
pub struct BookendServer {
    daemon: Option<Daemon>,
    port: u16,
    pub admin_port: u16,
    certs: PathBuf,
    kubeconfig: PathBuf,
    work: PathBuf,
}

impl BookendServer {
    /// Starts it; a second start appends to the same log.
    pub fn start(&mut self) {
        assert!(self.daemon.is_none(), "bookend serve is running");
        let mut cmd = Command::new(bookend_bin());
        cmd.args(["serve", "--source", "kubernetes", "--tls-cert"])
            .arg(self.certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(self.certs.join("tls.key"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{}", self.admin_port))
            .env("KUBECONFIG", &self.kubeconfig)
            .current_dir(&self.work);
        let log = self.log();
        let mut daemon = if log.exists() {
            Daemon::start_appending("bookend serve", cmd, log)
        } else {
            Daemon::start("bookend serve", cmd, log)
        };
        daemon.check_alive();
        self.daemon = Some(daemon);
    }

    /// Stops it with `signal` (`KILL`, `TERM`) and waits for it to exit.
    pub fn stop_with(&mut self, signal: &str) -> std::process::ExitStatus {
        self.daemon
            .take()
            .expect("bookend serve is running")
            .stop_with(signal)
    }

    pub fn daemon(&mut self) -> &mut Daemon {
        self.daemon.as_mut().expect("bookend serve is running")
    }

    pub fn log(&self) -> PathBuf {
        self.work.join("bookend.log")
    }

    /// The running process's Prometheus metrics.
    pub fn metrics(&self) -> Result<String, String> {
        match common::http_get(
            "127.0.0.1",
            self.admin_port,
            "/metrics",
            &[],
            Duration::from_secs(10),
        )? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("/metrics: {status} {body}")),
        }
    }
}

type Scenario = fn(&mut Ctx) -> String;

/// The scenarios, with what each needs from Tekton beyond a plain TaskRun (its policies'
/// injected steps, or the TaskRuns it runs).
fn scenarios() -> Vec<(&'static str, &'static [Feature], Scenario)> {
    use Feature::{
        StepActionClusterResolver, StepActionRef, StepActionResolver, StepResults, StepWhen,
    };
    const ALWAYS: &[Feature] = &[StepWhen, StepResults];
    vec![
        (
            "1 OnSuccess pre/post of two policies run in the documented order",
            &[],
            scenarios::scenario_order,
        ),
        (
            "2 Always: post-steps run after failures, verdict fails the TaskRun",
            ALWAYS,
            scenarios::scenario_always,
        ),
        (
            "3 step and Task results, index references after the shift",
            &[StepResults],
            scenarios::scenario_results,
        ),
        (
            "4 StepAction ref pre-step",
            &[StepActionRef, StepActionResolver, StepActionClusterResolver],
            scenarios::scenario_step_action,
        ),
        (
            "5 taskRef to a local Task, inlined",
            &[],
            scenarios::scenario_task_ref,
        ),
        ("6 v1beta1 TaskRun", &[], scenarios::scenario_v1beta1),
        (
            "7 PipelineRun with origin: Pipeline; denial fails the PipelineRun",
            &[],
            scenarios::scenario_pipeline,
        ),
        (
            "8 workspace seeded by a pre-step; stepTemplate",
            &[],
            scenarios::scenario_workspace,
        ),
        (
            "9 documented limits: exec failure and step timeout stop the chain",
            ALWAYS,
            scenarios::scenario_limits,
        ),
        (
            "10 remote Task (cluster resolver): the controller's dry-run gets the steps",
            &[],
            remote::scenario_remote,
        ),
        (
            "11 remote Task without the dry-run mutation: the Pod backstop fails the TaskRun",
            &[],
            remote::scenario_remote_backstop,
        ),
        (
            "12 hostile stepTemplate: org steps run as defined, the author's step gets it",
            ALWAYS,
            sealed::scenario_hostile_step_template,
        ),
        (
            "13 step names of 59, 62, 63 characters under an Always policy",
            ALWAYS,
            sealed::scenario_long_step_names,
        ),
        (
            "14 every local taskRef form runs the local Task, with and without bookend",
            &[],
            sealed::scenario_task_ref_forms,
        ),
        (
            "15 Pod Security restricted: bookend's helpers run restricted",
            ALWAYS,
            sealed::scenario_restricted,
        ),
        (
            "16 the Pod is the truth: unsealed TaskRuns' Pods, image swaps, impostor Pods refused",
            &[StepActionRef],
            pods::scenario_tampered_pods,
        ),
        (
            "17 PipelineRun preview: bookend render equals the TaskRuns Tekton's controller creates",
            ALWAYS,
            preview::scenario_preview,
        ),
        (
            "18 post-run verification: pass, failing user step, step and TaskRun timeouts, OOM kill",
            ALWAYS,
            verification::scenario_verification,
        ),
        (
            "19 provenance results: the org post-step's values reach status.results over forged ones",
            ALWAYS,
            provenance::scenario_provenance,
        ),
        (
            "20 hermetic user steps: the org steps reach the server, the TaskRun's step cannot",
            &[],
            hermetic::scenario_hermetic,
        ),
        (
            "21 Always with postStepsRunFallback: OnSuccess (Always, or OnSuccess with a warning)",
            &[],
            fallback::scenario_fallback,
        ),
        (
            "22 bookend restarts (SIGKILL, SIGTERM) while TaskRuns run: each verified once",
            &[],
            restart::scenario_restart,
        ),
    ]
}

/// Every line of `BOOKEND_TEKTON_VERSIONS` (default: the newest Tekton), each on a cluster of
/// its own with that release's controller, entrypoint, resolvers, CRDs and config.
#[test]
fn injected_taskruns_run() {
    let Some(host) = prereqs::check() else {
        return;
    };
    let _lock = prereqs::machine_lock();
    let lines = Line::from_env();
    let mut failed = 0;
    let mut reports = Vec::new();
    for line in &lines {
        let (line_failed, report) = run_line(&host, line);
        failed += line_failed;
        reports.push(report);
    }
    if lines.len() > 1 {
        println!("\n=== runtime suite: every Tekton line ===");
        for report in &reports {
            println!("{report}");
        }
    }
    assert_eq!(
        failed, 0,
        "{failed} runtime scenario(s) failed (see the summaries above)"
    );
}

/// The suite on one Tekton line; returns the failures and the summary.
fn run_line(host: &prereqs::Host, line: &Line) -> (usize, String) {
    println!("\n=== runtime suite on {} ===", line.label());
    let mut clock = Clock::new("runtime");
    let tools = tekton_tools(&line.version);
    clock.done("tools (build-tools.sh)");

    let tmp = tempfile::Builder::new()
        .prefix("bookend-runtime-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    println!("work directory: {}", work.display());
    let bin_dir = tools.bin.display().to_string();
    let cluster = Cluster::start_with(work.join("cluster"), &[("E2E_BIN_DIR", &bin_dir)]);
    let kubectl = cluster.kubectl.clone();
    install_tekton(&kubectl, tools);
    matrix::configure(line, &kubectl);
    for ns in scenarios::NAMESPACES
        .into_iter()
        .chain([remote::REMOTE, remote::CATALOG])
        .chain(sealed::NAMESPACES)
        .chain(pods::NAMESPACES)
        .chain(provenance::NAMESPACES)
        .chain(hermetic::NAMESPACES)
        .chain([fallback::FALLBACK, restart::RESTART])
    {
        kubectl.ok(&["create", "namespace", ns], "create namespace");
        // No kube-controller-manager makes it: Tekton needs the TaskRun's service account.
        kubectl.ok(
            &["-n", ns, "create", "serviceaccount", "default"],
            "create the default ServiceAccount",
        );
    }
    clock.done("cluster, Tekton CRDs and config, namespaces");

    let certs = work.join("certs");
    let mut cmd = Command::new(bookend_bin());
    cmd.args(["certs", "--host", "127.0.0.1", "--out-dir"])
        .arg(&certs);
    run(cmd, None).expect_ok("bookend certs");
    let ca_b64 = std::fs::read_to_string(certs.join("ca.crt.b64")).expect("ca.crt.b64");
    let mut conversion = node::start_conversion(
        &work,
        &kubectl,
        &certs.join("tls.crt"),
        &certs.join("tls.key"),
        ca_b64.trim(),
        tools,
    );
    let (bookend, webhooks, not_ready) = start_bookend(&work, &kubectl, &certs);
    clock.done("conversion webhook, bookend serve and its webhooks");

    let images = node::build_images(&work.join("images"), host, tools);
    let mut kubelet = node::start_kubelet(&work, &kubectl, &images, host, tools);
    let mut controller = node::start_controller(&work, &kubectl, tools);
    let mut resolvers = node::start_resolvers(&work, &kubectl, tools);
    let env = Env {
        kubectl: kubectl.clone(),
        kubelet_dir: work.join("kubelet"),
    };
    // The first TaskRun, without bookend: the controller, the stand-in and the conversion
    // webhook all work. It has a step with computeResources, which the v1beta1 view must show
    // as `resources` (Tekton's conversion, not `conversion: None`).
    let mut probe_step = runs::step("probe", "");
    probe_step["computeResources"] = json!({"requests": {"cpu": "1m"}});
    let probe = env.run_one(&runs::taskrun(
        scenarios::PLAIN,
        "probe",
        json!({"steps": [probe_step]}),
    ));
    controller.check_alive();
    assert_eq!(
        runs::condition(&probe.object).0,
        "True",
        "the probe TaskRun: {}",
        probe.describe(&env)
    );
    let as_v1beta1 = kubectl
        .get(&[
            "taskruns.v1beta1.tekton.dev",
            "-n",
            scenarios::PLAIN,
            probe.name(),
        ])
        .expect("get as v1beta1");
    assert_eq!(
        as_v1beta1["spec"]["taskSpec"]["steps"][0]["resources"],
        json!({"requests": {"cpu": "1m"}}),
        "the TaskRun CRD converts through Tekton's conversion webhook"
    );
    clock.done("images, kubelet stand-in, Tekton controller and resolvers, probe TaskRun");

    let mut ctx = Ctx {
        env,
        webhooks,
        bookend_log: bookend.log(),
        bookend,
        helper_notes: Default::default(),
        always_degraded: !line
            .lacking(&[Feature::StepWhen, Feature::StepResults])
            .is_empty(),
        tekton_args: std::iter::once(format!("--tekton-version={}", line.version))
            .chain(
                line.flags
                    .iter()
                    .map(|(k, v)| format!("--tekton-feature-flag={k}={v}")),
            )
            .collect(),
        cluster_tasks: line.cluster.has_cluster_tasks(),
    };
    let mut summary = Vec::new();
    // The policies this Tekton cannot run: bookend must refuse them and their TaskRuns.
    let refused = catch_unwind(AssertUnwindSafe(|| {
        matrix::check_refused_policies(
            line,
            &all_policies(),
            &not_ready,
            &kubectl,
            tools,
            &bookend_bin(),
            &work,
        )
    }));
    match refused {
        Ok(rows) => {
            for (item, result) in rows {
                println!("{item}: {result}");
                matrix::record(line, &item, "", &result);
                summary.push((true, format!("ok    {item}: {result}")));
            }
        }
        Err(_) => {
            matrix::record(line, "refused policies", "", "FAILED");
            summary.push((
                false,
                "FAILED the policies this Tekton cannot run".to_owned(),
            ));
        }
    }
    // Development only: `BOOKEND_RUNTIME_SCENARIOS=2,12` runs those scenarios (by number) and
    // skips the injection cost measurement.
    let only: Option<Vec<String>> = std::env::var("BOOKEND_RUNTIME_SCENARIOS")
        .ok()
        .map(|v| v.split(',').map(|n| n.trim().to_owned()).collect());
    let chosen = |name: &str| {
        only.as_ref()
            .is_none_or(|o| o.iter().any(|n| name.split(' ').next() == Some(n.as_str())))
    };
    for (name, needs, scenario) in scenarios().into_iter().filter(|(n, _, _)| chosen(n)) {
        let lacking = line.lacking_briefly(needs);
        if !lacking.is_empty() {
            // Its policies are refused above (bookend denies their TaskRuns); what the scenario
            // runs itself would be refused by Tekton's webhook.
            let reason = format!(
                "skipped: needs {}; its policies are denied above",
                lacking.join(", ")
            );
            println!("scenario {name}: {reason}");
            matrix::record(line, name, &matrix::describe(needs), &reason);
            summary.push((true, format!("skip  {name}: {reason}")));
            continue;
        }
        // A dead daemon would make every later wait time out: stop at once instead.
        for daemon in [
            &mut controller,
            &mut resolvers,
            &mut kubelet,
            ctx.bookend.daemon(),
            &mut conversion,
        ] {
            daemon.check_alive();
        }
        let (ok, text) = clock.scenario(name, || scenario(&mut ctx));
        matrix::record(
            line,
            name,
            &matrix::describe(needs),
            if ok { "ran: passed" } else { "ran: FAILED" },
        );
        summary.push((ok, text));
    }

    let measured = if only.is_some() {
        println!("BOOKEND_RUNTIME_SCENARIOS is set: injection cost not measured");
        Ok(String::new())
    } else if !line.is_default() {
        println!("injection cost: measured on the newest Tekton with its defaults only");
        Ok(String::new())
    } else {
        let measured = catch_unwind(AssertUnwindSafe(|| timing::measure(&ctx.env)));
        clock.done("injection cost: the same TaskRuns with and without bookend");
        measured
    };

    println!("\n=== runtime suite: summary ({}) ===", line.label());
    let mut report = format!("{}:", line.label());
    for (_, text) in &summary {
        println!("{text}");
        report.push_str("\n  ");
        report.push_str(text.lines().next().unwrap_or_default());
    }
    println!("\nhelper steps (gates + verdict) per injected TaskRun:");
    for (label, steps, helpers) in ctx.helper_notes.borrow().iter() {
        println!("  {helpers} of {steps} steps  {label}");
    }
    match &measured {
        Ok(table) => println!("\n{table}"),
        Err(_) => println!("\ninjection cost: the measurement failed (see above)"),
    }
    println!();
    clock.print_phases();
    let failed = summary.iter().filter(|(ok, _)| !ok).count() + usize::from(measured.is_err());
    if failed > 0 {
        for daemon in [
            ctx.bookend.daemon(),
            &mut controller,
            &mut resolvers,
            &mut kubelet,
            &mut conversion,
        ] {
            println!("--- {} log (tail)", daemon.name);
            for line in tail(&daemon.log, 12).lines() {
                println!("{}", line.chars().take(400).collect::<String>());
            }
        }
    }
    drop((controller, resolvers, kubelet, ctx, conversion, cluster));
    if std::env::var_os("BOOKEND_RUNTIME_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
    (failed, report)
}
