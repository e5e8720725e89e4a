//! Two replicas behind the chart's Service: the Deployment as `helm install` creates it with the
//! chart's defaults (webhooks on the Service, two replicas, the PDB), kube-controller-manager's
//! Deployment, ReplicaSet, EndpointSlice and disruption controllers, and the API server
//! resolving the webhook Service to a ready endpoint itself (`--enable-aggregator-routing`).
//! The node (node.rs) runs the Pods from the image's contents.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Kubectl, poll, tail, terminate};
use crate::node::Node;
use crate::pod::Image;
use crate::tools::tools;
use crate::{NAMESPACE, RELEASE, TEAM, counter, http_get, root};

const SELECTOR: &str = "app.kubernetes.io/instance=bookend,app.kubernetes.io/component=webhook";

/// kube-controller-manager with the controllers a Deployment behind a Service needs.
pub(crate) struct ControllerManager {
    child: Child,
    log: std::path::PathBuf,
}

impl ControllerManager {
    /// Runs `controllers` (kube-controller-manager's `--controllers`).
    pub(crate) fn start(work: &Path, kubectl: &Kubectl, controllers: &str) -> Self {
        let log = work.join("kube-controller-manager.log");
        let file = std::fs::File::create(&log).expect("log");
        let child = Command::new(tools().path("kube-controller-manager"))
            .arg("--kubeconfig")
            .arg(&kubectl.kubeconfig)
            .arg(format!("--controllers={controllers}"))
            .args(["--leader-elect=false", "--secure-port=0", "--v=1"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup"))
            .stderr(file)
            .spawn()
            .expect("spawn kube-controller-manager");
        Self { child, log }
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- kube-controller-manager (tail)\n{}",
                tail(&self.log, 20)
            );
        }
        terminate(
            &mut self.child,
            "kube-controller-manager",
            Duration::from_secs(5),
        );
    }
}

/// Ready and not-ready endpoint IPs of the chart's Service, from its EndpointSlices.
fn endpoints(kubectl: &Kubectl) -> (Vec<String>, Vec<String>) {
    let slices = kubectl
        .get(&[
            "endpointslices",
            "-n",
            NAMESPACE,
            "-l",
            &format!("kubernetes.io/service-name={RELEASE}"),
        ])
        .unwrap_or(Value::Null);
    let (mut ready, mut unready) = (Vec::new(), Vec::new());
    for slice in slices["items"].as_array().into_iter().flatten() {
        for endpoint in slice["endpoints"].as_array().into_iter().flatten() {
            let ip = endpoint["addresses"][0].as_str().unwrap_or("").to_owned();
            if endpoint["conditions"]["ready"] == json!(false) {
                unready.push(ip);
            } else {
                ready.push(ip);
            }
        }
    }
    ready.sort();
    unready.sort();
    (ready, unready)
}

/// A TaskRun CREATE; Ok when stored with the example policies' steps.
fn create_taskrun(kubectl: &Kubectl, prefix: &str) -> Result<(), String> {
    let taskrun = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": prefix, "namespace": TEAM},
        "spec": {"taskSpec": {"steps": [{
            "name": "work", "image": "docker.io/library/alpine:3.20", "script": "echo hello",
        }]}},
    });
    let out = kubectl.with_object(&["create"], &taskrun);
    let object = out.try_json()?;
    let injected = object["spec"]["taskSpec"]["steps"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s["name"] == json!("bookend-credentials")));
    if injected {
        Ok(())
    } else {
        Err(format!("stored without the policies' steps: {object}"))
    }
}

/// The chart's default admin port (/livez, /readyz, /metrics).
const ADMIN_PORT: u16 = 8080;

/// Mutating admissions bookend counted in the Pod at `ip` (its admin port).
fn mutated(ip: &str) -> u64 {
    let (code, metrics) = http_get(ip, ADMIN_PORT, "/metrics").expect("/metrics");
    assert_eq!(code, 200, "/metrics of {ip}");
    counter(
        &metrics,
        "bookend_admission_requests_total",
        r#"endpoint="mutate""#,
    ) as u64
}

fn evict(kubectl: &Kubectl, pod: &str) -> crate::kube::Out {
    let eviction = json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": NAMESPACE},
    });
    kubectl.run(
        &[
            "create",
            "--raw",
            &format!("/api/v1/namespaces/{NAMESPACE}/pods/{pod}/eviction"),
            "-f",
            "-",
        ],
        Some(eviction.to_string().as_bytes()),
    )
}

#[test]
fn two_replicas_behind_the_service_readiness_the_pdb_and_a_replacement() {
    let Some(runc) = crate::pod::prerequisites() else {
        return;
    };
    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-chart-service-")
        .tempdir()
        .expect("tempdir");
    // BOOKEND_CHART_POD_KEEP=1 keeps the logs of a failed run too.
    let keep = std::env::var_os("BOOKEND_CHART_POD_KEEP").is_some();
    let (work, _tmp) = if keep {
        (tmp.keep(), None)
    } else {
        (tmp.path().to_owned(), Some(tmp))
    };
    println!("work directory: {}", work.display());
    let cluster = crate::start_cluster(
        work.join("cluster"),
        &[("E2E_APISERVER_ARGS", "--enable-aggregator-routing=true")],
    );
    let kubectl = &cluster.kubectl;
    let _controllers = ControllerManager::start(
        &work,
        kubectl,
        "deployment-controller,replicaset-controller,endpointslice-controller,disruption-controller",
    );

    // The chart's defaults: the webhooks call the Service, with the generated certificate.
    // Development only: `BOOKEND_CHART_POD_SET=a=b,c=d` adds `--set` values (to compare
    // settings, e.g. `extraEnv[0].name=BOOKEND_SHUTDOWN_LINGER,extraEnv[0].value=0s`).
    let extra = std::env::var("BOOKEND_CHART_POD_SET").unwrap_or_default();
    crate::install_chart(kubectl, &[&extra]);
    let image = Arc::new(Image::assemble(
        &work.join("image"),
        &root().join("Dockerfile"),
    ));
    let node = Node::start(
        work.clone(),
        kubectl.clone(),
        runc,
        image,
        NAMESPACE.to_owned(),
        SELECTOR.to_owned(),
        true,
    );

    // Readiness gates traffic: the first replica never gets ready (it cannot reach the API
    // server), the second does; the Service has one ready and one not-ready endpoint.
    let (ready, unready) = poll(
        "one ready and one not-ready endpoint",
        Duration::from_secs(120),
        || {
            let (ready, unready) = endpoints(kubectl);
            if ready.len() == 1 && unready.len() == 1 {
                Ok((ready, unready))
            } else {
                Err(format!(
                    "ready {ready:?}, not ready {unready:?}; node errors {:?}",
                    node.record.lock().unwrap().errors
                ))
            }
        },
    );
    println!("endpoints: ready {ready:?}, not ready {unready:?}");
    let (unready_ip, ready_ip) = (unready[0].clone(), ready[0].clone());
    let started = node.record.lock().unwrap().started.clone();
    assert_eq!(
        node.record.lock().unwrap().ips.get(&started[0]),
        Some(&unready_ip),
        "the not-ready endpoint is the replica that cannot reach the API server"
    );

    kubectl.ok(&["create", "namespace", TEAM], "create namespace");
    let policies = root().join("examples/policies").display().to_string();
    poll(
        "the example policies admitted through the Service",
        Duration::from_secs(60),
        || kubectl.run(&["apply", "-f", &policies], None).succeeded(),
    );
    poll(
        "a TaskRun injected through the Service",
        Duration::from_secs(30),
        || create_taskrun(kubectl, "first-"),
    );
    const GATED: usize = 20;
    for _ in 0..GATED {
        create_taskrun(kubectl, "gated-").expect("a TaskRun CREATE through the Service");
    }
    let (to_ready, to_unready) = (mutated(&ready_ip), mutated(&unready_ip));
    println!("mutating calls: ready replica {to_ready}, not-ready replica {to_unready}");
    assert!(
        to_ready >= GATED as u64,
        "the ready replica served them all"
    );
    let (code, _) =
        http_get(&unready_ip, ADMIN_PORT, "/livez").expect("the unready replica's /livez");
    assert_eq!(
        code, 200,
        "the not-ready replica runs (live) but is not ready"
    );
    assert_eq!(to_unready, 0, "the not-ready replica got no traffic");

    // TaskRuns keep being created from here on; none may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let results: Arc<Mutex<(usize, Vec<String>)>> = Arc::new(Mutex::new((0, Vec::new())));
    let creator = {
        let (stop, results, kubectl) = (stop.clone(), results.clone(), kubectl.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let result = create_taskrun(&kubectl, "steady-");
                let mut results = results.lock().unwrap();
                results.0 += 1;
                if let Err(e) = result {
                    results.1.push(e);
                }
            }
        })
    };

    // The not-ready replica is deleted; the ReplicaSet replaces it, and the replacement gets
    // ready: two ready endpoints.
    kubectl.ok(
        &[
            "delete",
            "pod",
            &started[0],
            "-n",
            NAMESPACE,
            "--wait=false",
        ],
        "delete the not-ready replica",
    );
    let two = || {
        poll("two ready endpoints", Duration::from_secs(120), || {
            let (ready, unready) = endpoints(kubectl);
            if ready.len() == 2 && unready.is_empty() {
                Ok(ready)
            } else {
                Err(format!("ready {ready:?}, not ready {unready:?}"))
            }
        })
    };
    let both = two();
    println!("replaced: ready endpoints {both:?}");

    // The PDB: once the disruption controller sees two healthy replicas it allows one
    // disruption. The first eviction is granted; the second, while the first replica is
    // still terminating, is refused.
    poll(
        "the PDB allows one disruption",
        Duration::from_secs(60),
        || {
            let pdb = kubectl.get(&["pdb", RELEASE, "-n", NAMESPACE])?;
            if pdb["status"]["disruptionsAllowed"] == json!(1) {
                Ok(())
            } else {
                Err(pdb["status"].to_string())
            }
        },
    );
    let pods: Vec<String> = {
        let record = node.record.lock().unwrap();
        both.iter()
            .filter_map(|ip| {
                record
                    .ips
                    .iter()
                    .find(|(_, i)| *i == ip)
                    .map(|(n, _)| n.clone())
            })
            .collect()
    };
    assert_eq!(pods.len(), 2, "both ready endpoints are our Pods: {pods:?}");
    evict(kubectl, &pods[0]).expect_ok("evict the first replica (the PDB allows one)");
    let refused = evict(kubectl, &pods[1]);
    assert!(
        !refused.ok() && refused.stderr.contains("disruption budget"),
        "evicting the second replica while the first terminates is refused by the PDB: {} {}",
        refused.stdout,
        refused.stderr
    );
    println!("second eviction refused: {}", refused.stderr.trim());
    let after = two();
    assert!(
        !after.contains(&node.record.lock().unwrap().ips[&pods[0]]),
        "the evicted replica's endpoint is gone, its replacement is ready: {after:?}"
    );

    stop.store(true, Ordering::Relaxed);
    creator.join().expect("the TaskRun creator");
    let (created, failed) = results.lock().unwrap().clone();
    println!(
        "TaskRun CREATEs during the replacement and the eviction: {created}, failed {}",
        failed.len()
    );
    assert!(created > 0);
    // None may fail. A replica that is stopping answers HTTP/1 with `Connection: close`, so
    // the API server retires its keep-alive connections itself (docs/testing.md, "Two replicas
    // behind the Service"); a failed call shows in the API server's log, printed here.
    if !failed.is_empty() {
        let apiserver_log =
            std::fs::read_to_string(cluster.dir.join("kube-apiserver.log")).unwrap_or_default();
        let calls: Vec<&str> = apiserver_log
            .lines()
            .filter(|l| l.contains("ailed calling webhook"))
            .collect();
        panic!(
            "{} of {created} TaskRun CREATEs failed: {failed:#?}\nthe API server's failed webhook calls:\n{}",
            failed.len(),
            calls.join("\n")
        );
    }
    let record = node.record.lock().unwrap();
    for (pod, status) in &record.ended {
        println!("{pod} ended: {status}");
    }
    assert!(
        record
            .ended
            .iter()
            .any(|(pod, status)| *pod == pods[0] && status.success()),
        "the evicted replica drained and exited 0: {:?}",
        record.ended
    );
    assert!(record.errors.is_empty(), "node errors: {:?}", record.errors);
    drop(record);
    drop(node);
    drop(cluster);
    if keep {
        println!("kept {}", work.display());
    }
}
