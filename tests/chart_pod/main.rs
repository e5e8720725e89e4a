//! The chart's Pod on a node: bookend's Deployment, as `helm install` of charts/bookend with its
//! default values stores it in a real kube-apiserver, run the way a kubelet runs it, from a root
//! filesystem assembled the way the Dockerfile assembles the image; the API server then calls it
//! as its webhook.
//!
//! - Image: the Dockerfile's final stage is read (tests/common/dockerfile.rs): the binary goes
//!   where its COPY puts it (mode 0555), ENTRYPOINT is the process, USER its default user; the
//!   rest of the root filesystem is what distroless `static-debian12:nonroot` holds that bookend
//!   could touch (passwd/group with `nonroot` 65532, /tmp). The binary is the one
//!   cargo built for this test (`BOOKEND_IMAGE_BIN` picks another, e.g. a static musl build);
//!   if it is dynamically linked its ELF interpreter and libraries are copied in beside it (the
//!   image has no libc: its binary is static), and the test says so.
//! - Pod: the Deployment's pod template, created as a Pod bound to a pretend node; the container
//!   runs under runc with the chart's args after ENTRYPOINT, its securityContext (user, group,
//!   fsGroup as supplementary group, no capabilities, no privilege escalation, read-only root,
//!   a seccomp filter), its resource limits as cgroup limits, its env (POD_NAME from the Pod),
//!   the Secret volume written as the kubelet writes it (atomic-writer layout, defaultMode,
//!   group fsGroup), and the ServiceAccount token the kubelet would project (a TokenRequest
//!   bound to the Pod) with the API server's CA and namespace. bookend uses its in-cluster
//!   configuration: no kubeconfig.
//! - Network: the Pod has a network namespace of its own (tests/runtime/standins/podnet) with
//!   the API server forwarded to loopback inside (KUBERNETES_SERVICE_HOST), and a veth pair
//!   giving it a Pod IP the host routes to. The chart's webhooks call `webhook.url` =
//!   `https://<Pod IP>:<webhook port>` (the chart's generated certificate names that IP); the
//!   probes are the chart's httpGet paths and ports, sent to the Pod IP as a kubelet sends them.
//!
//! Checked: the probes answer 200, the Pod's status says Ready, the process runs as the chart
//! says (from /proc: uids, groups, capabilities, no_new_privs, seccomp, read-only root), the API
//! server's policy and TaskRun CREATEs go through it (a TaskRun is stored with the example
//! policies' steps; bookend's own metrics count the requests), and SIGTERM ends it with exit 0.
//!
//! Not emulated (docs/testing.md): a Service between the API server and the Pod (no
//! kube-controller-manager or kube-proxy; the webhooks use `webhook.url`), the preStop sleep
//! (done by the kubelet, no process in the image), DNS (/etc/resolv.conf), the exact
//! RuntimeDefault seccomp profile (a deny-list of the syscalls it refuses stands in).
//!
//! service.rs puts two replicas behind the chart's Service; placement.rs has the real
//! kube-scheduler place the chart's replicas on Node objects (no Pod runs there).
//!
//! `cargo test --test chart_pod -- --nocapture`. Needs root and runc, like the runtime suite;
//! `BOOKEND_SKIP_RUNTIME=1` skips it loudly (not placement.rs, which needs neither).
//! `BOOKEND_CHART_POD_KEEP=1` keeps the work directory.

#[path = "../common/mod.rs"]
mod common;
// Shared harnesses; this test uses a part of each.
#[allow(dead_code)]
#[path = "../common/dockerfile.rs"]
mod dockerfile;
#[path = "../common/host.rs"]
mod host;
#[allow(dead_code)]
#[path = "../e2e/kube.rs"]
mod kube;
#[path = "../e2e/tools.rs"]
mod tools;

mod node;
mod placement;
mod pod;
mod service;

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Cluster, Kubectl, poll, tail};
use crate::pod::{Image, PodRun};
use crate::tools::tools;

pub use common::root;

/// start-cluster.sh picks its ports as it goes: two started at once (the two tests of this
/// binary) could pick the same one, so one starts at a time.
pub(crate) fn start_cluster(dir: std::path::PathBuf, env: &[(&str, &str)]) -> Cluster {
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    Cluster::start_with(dir, env)
}

/// Pause between the attempts of `kube::poll`.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

const RELEASE: &str = "bookend";
const NAMESPACE: &str = "bookend-system";
const TEAM: &str = "team-a";

/// GET `http://<ip>:<port><path>` as a kubelet's httpGet probe does: (status, body).
pub(crate) fn http_get(ip: &str, port: u16, path: &str) -> Result<(u16, String), String> {
    common::http_get(
        ip,
        port,
        path,
        &["User-Agent: kube-probe/1.36"],
        Duration::from_secs(2),
    )
}

/// A probe's port: a number, or the name of one of the container's ports.
pub(crate) fn probe_port(container: &Value, probe: &Value) -> u16 {
    let port = &probe["httpGet"]["port"];
    if let Some(number) = port.as_u64() {
        return number as u16;
    }
    let name = port.as_str().expect("httpGet.port: a number or a name");
    container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == json!(name))
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}")) as u16
}

pub(crate) fn helm(kubectl: &Kubectl, args: &[&str]) {
    let mut cmd = std::process::Command::new(tools().path("helm"));
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(&kubectl.kubeconfig)
        .current_dir(root());
    kube::run(cmd, None).expect_ok("helm");
}

/// `helm install` of the chart as release `bookend` in `bookend-system`, with `--set` values.
pub(crate) fn install_chart(kubectl: &Kubectl, sets: &[&str]) {
    install_chart_with(kubectl, sets, &[]);
}

/// `helm install` as [`install_chart`], with values files (`-f`) too.
pub(crate) fn install_chart_with(kubectl: &Kubectl, sets: &[&str], files: &[&str]) {
    let mut args = vec![
        "install",
        RELEASE,
        "charts/bookend",
        "--namespace",
        NAMESPACE,
        "--create-namespace",
    ];
    for set in sets.iter().filter(|s| !s.is_empty()) {
        args.extend(["--set", set]);
    }
    for file in files {
        args.extend(["--values", file]);
    }
    helm(kubectl, &args);
}

/// The sum of a counter's samples whose labels contain `labels`, in Prometheus text.
pub(crate) fn counter(metrics: &str, name: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn the_charts_pod_runs_from_the_image_contents_and_serves_the_api_server() {
    let Some(runc) = pod::prerequisites() else {
        return;
    };
    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-chart-pod-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    println!("work directory: {}", work.display());
    let cluster = start_cluster(work.join("cluster"), &[]);
    let kubectl = &cluster.kubectl;

    // The Pod IP is chosen first: the chart's webhooks name it and its certificate covers it.
    let net = pod::PodNetwork::choose();
    let pod_ip = net.pod_ip.clone();
    let webhook_url = format!("webhook.url=https://{pod_ip}:8443");
    install_chart(kubectl, &[&webhook_url]);
    let deployment = kubectl
        .get(&["deployment", RELEASE, "-n", NAMESPACE])
        .expect("the chart's Deployment");
    let template = &deployment["spec"]["template"];
    let container = template["spec"]["containers"][0].clone();
    assert_eq!(
        container["ports"]
            .as_array()
            .and_then(|ports| ports.iter().find(|p| p["name"] == json!("webhook")))
            .map(|p| p["containerPort"].clone()),
        Some(json!(8443)),
        "webhook.url above names the chart's webhook port"
    );

    let image = Image::assemble(&work.join("image"), &root().join("Dockerfile"));
    println!("image: {}", image.describe());
    let mut run = PodRun::create_and_start(&work, kubectl, &runc, &image, template, net, NAMESPACE);
    println!("Pod {} at {pod_ip}", run.pod_name);

    // The kubelet's probes: the chart's paths and ports, on the Pod IP.
    let readiness = &container["readinessProbe"];
    let liveness = &container["livenessProbe"];
    let ready_port = probe_port(&container, readiness);
    let ready_path = readiness["httpGet"]["path"]
        .as_str()
        .expect("readiness path");
    poll("readinessProbe 200", Duration::from_secs(90), || {
        run.check_running();
        match http_get(&pod_ip, ready_port, ready_path) {
            Ok((200, _)) => Ok(()),
            Ok((code, body)) => Err(format!("{code} {body}")),
            Err(e) => Err(e),
        }
    });
    let live_port = probe_port(&container, liveness);
    let live_path = liveness["httpGet"]["path"].as_str().expect("liveness path");
    let (code, body) = http_get(&pod_ip, live_port, live_path).expect("livenessProbe");
    assert_eq!(code, 200, "livenessProbe {live_path}: {body}");
    run.report(kubectl, true).expect("report the Pod Ready");
    let stored = kubectl
        .get(&["pod", &run.pod_name, "-n", NAMESPACE])
        .expect("the Pod");
    assert_eq!(stored["status"]["podIP"], json!(pod_ip));

    // What the process is, as the kernel sees it.
    run.check_process(&container, &template["spec"]["securityContext"]);

    // The API server calls the Pod: policies through the validating webhook, a TaskRun through
    // the mutating and the validating one.
    kubectl.ok(&["create", "namespace", TEAM], "create namespace");
    let policies = root().join("examples/policies").display().to_string();
    poll(
        "the example policies admitted through the Pod",
        Duration::from_secs(30),
        || kubectl.run(&["apply", "-f", &policies], None).succeeded(),
    );
    let taskrun = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "through-the-pod-", "namespace": TEAM},
        "spec": {"taskSpec": {"steps": [{
            "name": "work", "image": "docker.io/library/alpine:3.20", "script": "echo hello",
        }]}},
    });
    // The policies' cache may lag their CREATE by a watch event: poll until injected.
    let stored = poll(
        "a TaskRun CREATE injected through the Pod",
        Duration::from_secs(30),
        || {
            let out = kubectl.with_object(&["create"], &taskrun);
            let object = out.try_json()?;
            let steps: Vec<String> = object["spec"]["taskSpec"]["steps"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|s| s["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if steps.iter().any(|s| s == "bookend-credentials") {
                Ok((object, steps))
            } else {
                Err(format!("steps {steps:?}"))
            }
        },
    );
    println!("TaskRun stored with steps {:?}", stored.1);
    assert_eq!(
        stored.1.iter().filter(|s| *s == "work").count(),
        1,
        "the user's step is kept once: {:?}",
        stored.1
    );
    let (code, metrics) = http_get(&pod_ip, live_port, "/metrics").expect("/metrics");
    assert_eq!(code, 200);
    let mutated = counter(
        &metrics,
        "bookend_admission_requests_total",
        r#"endpoint="mutate",operation="CREATE",outcome="mutated""#,
    );
    assert!(
        mutated >= 1.0,
        "bookend in the Pod counts the API server's mutating call: {}",
        metrics
            .lines()
            .filter(|l| l.starts_with("bookend_admission_requests_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // SIGTERM, as the kubelet sends it after preStop: bookend drains and exits 0.
    let status = run.terminate();
    assert!(
        status.success(),
        "bookend in the Pod exits 0 on SIGTERM, got {status}:\n{}",
        tail(&run.log, 30)
    );
    drop(run);
    drop(cluster);
    if std::env::var_os("BOOKEND_CHART_POD_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
}
