//! Placement: the chart's Deployment under the real kube-scheduler (built from the same
//! `k8s.io/kubernetes` module as kube-apiserver) and kube-controller-manager's Deployment and
//! ReplicaSet controllers, on Node objects created through the API. Nothing runs the Pods: a
//! Pod bound to a pretend node stays Pending in phase, which is enough to read where the
//! scheduler put it (`spec.nodeName`) or why it could not (`PodScheduled`). Independent of the
//! node stand-in (node.rs), so it needs neither root nor runc.
//!
//! Checked, with the chart's defaults (2 replicas, a required spread over
//! `kubernetes.io/hostname` with `nodeTaintsPolicy: Honor`):
//! 1. two schedulable nodes: one replica on each;
//! 2. one node cannot take a replica (its CPU is taken) while it still counts as a domain: the
//!    replacement of the replica deleted from it stays Pending (the spread refuses the other
//!    node), the surviving replica is untouched;
//! 3. that node cordoned as `kubectl cordon` and the node lifecycle controller leave it (the
//!    `node.kubernetes.io/unschedulable` taint): it is no domain any more, the Pending replica
//!    goes to the remaining node (a drain is not blocked by the spread);
//! 4. one node only: the defaults place both replicas on it; the evaluation values
//!    (`ci/evaluation-values.yaml`) place their one replica on it.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Kubectl, poll, tail, terminate};
use crate::service::ControllerManager;
use crate::tools::tools;
use crate::{NAMESPACE, RELEASE, root};

const SELECTOR: &str = "app.kubernetes.io/instance=bookend,app.kubernetes.io/component=webhook";

/// kube-scheduler with its default profile.
struct Scheduler {
    child: Child,
    log: std::path::PathBuf,
}

impl Scheduler {
    fn start(work: &std::path::Path, kubectl: &Kubectl) -> Self {
        let log = work.join("kube-scheduler.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = Command::new(tools().path("kube-scheduler"))
            .arg("--kubeconfig")
            .arg(&kubectl.kubeconfig)
            .args(["--leader-elect=false", "--secure-port=0", "--v=2"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("spawn kube-scheduler");
        Self { child, log }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- kube-scheduler (tail)\n{}", tail(&self.log, 30));
        }
        terminate(&mut self.child, "kube-scheduler", Duration::from_secs(5));
    }
}

/// A Node as a kubelet registers it: the hostname label the spread uses, room for the chart's
/// requests, Ready.
fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        }},
        "status": {
            "capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    })
}

/// The chart's Pods that are not being deleted: name, node (empty while unscheduled), and the
/// `PodScheduled` condition's message.
fn pods(kubectl: &Kubectl) -> Vec<(String, String, String)> {
    let list = kubectl
        .get(&["pods", "-n", NAMESPACE, "-l", SELECTOR])
        .unwrap_or(Value::Null);
    let mut pods: Vec<_> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            let scheduled = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == json!("PodScheduled"));
            (
                p["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                scheduled
                    .map(|c| format!("{} {}", c["reason"], c["message"]))
                    .unwrap_or_default(),
            )
        })
        .collect();
    pods.sort();
    pods
}

/// Waits until the chart's Pods are exactly `wanted` (node names; "" for unscheduled), sorted.
fn placed(kubectl: &Kubectl, what: &str, wanted: &[&str]) -> Vec<(String, String, String)> {
    poll(what, Duration::from_secs(60), || {
        let pods = pods(kubectl);
        let mut nodes: Vec<&str> = pods.iter().map(|(_, n, _)| n.as_str()).collect();
        nodes.sort();
        if nodes == wanted {
            Ok(pods)
        } else {
            Err(format!("pods {pods:?}"))
        }
    })
}

/// Delete a Pod at once: no kubelet runs it to finish the deletion.
fn delete_pod(kubectl: &Kubectl, pod: &str) {
    kubectl.ok(
        &[
            "delete",
            "pod",
            pod,
            "-n",
            NAMESPACE,
            "--grace-period=0",
            "--force",
        ],
        "delete a replica",
    );
}

fn uninstall(kubectl: &Kubectl) {
    crate::helm(
        kubectl,
        &["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"],
    );
    // No garbage collector runs: the Deployment's ReplicaSets go as it would remove them.
    kubectl.ok(
        &["delete", "replicasets", "-n", NAMESPACE, "-l", SELECTOR],
        "the ReplicaSets of the uninstalled Deployment",
    );
    poll("the chart's Pods gone", Duration::from_secs(60), || {
        let left = pods(kubectl);
        // Their deletion waits for a kubelet that is not there: finish it.
        for (pod, _, _) in &left {
            let _ = kubectl.run(
                &[
                    "delete",
                    "pod",
                    pod,
                    "-n",
                    NAMESPACE,
                    "--grace-period=0",
                    "--force",
                ],
                None,
            );
        }
        let all = kubectl
            .get(&["pods", "-n", NAMESPACE, "-l", SELECTOR])
            .map(|l| l["items"].as_array().map_or(0, Vec::len))
            .unwrap_or(0);
        if all == 0 {
            Ok(())
        } else {
            Err(format!("{all} left"))
        }
    });
}

#[test]
fn the_scheduler_spreads_the_replicas_and_the_evaluation_values_fit_one_node() {
    // Needs only the tools (no root, no runc): it runs under BOOKEND_SKIP_RUNTIME=1 too.
    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-chart-placement-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    println!("work directory: {}", work.display());
    let cluster = crate::start_cluster(work.join("cluster"), &[]);
    let kubectl = &cluster.kubectl;
    let _controllers = ControllerManager::start(
        &work,
        kubectl,
        "deployment-controller,replicaset-controller",
    );
    let _scheduler = Scheduler::start(&work, kubectl);
    for name in ["node-a", "node-b"] {
        kubectl.create(&node(name));
        // The API server's TaintNodesByCondition admission gives a new Node the
        // `node.kubernetes.io/not-ready` taint; the node lifecycle controller removes it once
        // the Node is Ready, as this one says it is.
        kubectl.ok(
            &[
                "patch",
                "node",
                name,
                "--type=merge",
                "-p",
                r#"{"spec":{"taints":null}}"#,
            ],
            "the Node's not-ready taint removed",
        );
    }

    // 1. Two schedulable nodes: one replica on each. Development only:
    // `BOOKEND_CHART_POD_SET=a=b,c=d` adds `--set` values to the defaults' installs (e.g.
    // `topologySpreadConstraints=null`, which this test must then fail).
    let extra = std::env::var("BOOKEND_CHART_POD_SET").unwrap_or_default();
    crate::install_chart(kubectl, &[&extra]);
    let spread = placed(kubectl, "one replica on each node", &["node-a", "node-b"]);
    println!("two nodes: {spread:?}");

    // 2. node-b cannot take a replica but still counts: the replacement of its replica stays
    // Pending rather than join the other one on node-a.
    kubectl.ok(
        &[
            "patch",
            "node",
            "node-b",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"allocatable":{"cpu":"10m"}}}"#,
        ],
        "node-b's CPU taken",
    );
    let on_b = spread
        .iter()
        .find(|(_, n, _)| n == "node-b")
        .unwrap()
        .0
        .clone();
    delete_pod(kubectl, &on_b);
    let pending = placed(kubectl, "the replacement Pending", &["", "node-a"]);
    let (_, _, why) = pending.iter().find(|(_, n, _)| n.is_empty()).unwrap();
    println!("node-b full: {pending:?}");
    assert!(
        why.contains("Unschedulable") && why.contains("topology spread"),
        "Pending because of the spread (node-a) and the room (node-b): {why}"
    );

    // 3. node-b cordoned as `kubectl cordon` leaves it, with the taint the node lifecycle
    // controller adds for it: no domain any more, the Pending replica goes to node-a.
    kubectl.ok(
        &[
            "patch",
            "node",
            "node-b",
            "--type=merge",
            "-p",
            r#"{"spec":{"unschedulable":true,"taints":[{"key":"node.kubernetes.io/unschedulable","effect":"NoSchedule"}]}}"#,
        ],
        "cordon node-b",
    );
    let cordoned = placed(kubectl, "both replicas on node-a", &["node-a", "node-a"]);
    println!("node-b cordoned: {cordoned:?}");

    // 4. One node: the defaults put both replicas on it, the evaluation values their one.
    kubectl.ok(&["delete", "node", "node-b"], "delete node-b");
    uninstall(kubectl);
    crate::install_chart(kubectl, &[&extra]);
    let one = placed(kubectl, "the defaults on one node", &["node-a", "node-a"]);
    println!("one node, defaults: {one:?}");
    uninstall(kubectl);
    let values = root().join("charts/bookend/ci/evaluation-values.yaml");
    crate::install_chart_with(kubectl, &[], &[&values.display().to_string()]);
    let evaluation = placed(kubectl, "the evaluation values on one node", &["node-a"]);
    println!("one node, evaluation values: {evaluation:?}");

    drop(cluster);
    if std::env::var_os("BOOKEND_CHART_POD_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
}
