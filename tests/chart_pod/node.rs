//! A node for the Deployment's Pods: what kube-scheduler and the kubelet would do for the Pods
//! kube-controller-manager's ReplicaSet controller creates. Every 200 ms it lists the chart's
//! Pods: binds a new one to the pretend node and starts it (`PodRun`), reports each running
//! Pod's IP and whether its readiness probe (the chart's path and port) answers 200, and ends a
//! deleted one as the kubelet does: the preStop sleep, SIGTERM, then the final DELETE.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::Kubectl;
use crate::pod::{Api, Image, NODE, PodNetwork, PodRun};
use crate::{http_get, probe_port};

struct Running {
    run: PodRun,
    ready: Option<bool>,
}

/// What the node did, for the test to read.
#[derive(Default)]
pub struct Record {
    /// Pods started, in order.
    pub started: Vec<String>,
    /// Pods ended after their deletion, with the exit status of their process.
    pub ended: Vec<(String, ExitStatus)>,
    /// Pod name to IP.
    pub ips: BTreeMap<String, String>,
    /// Errors of the loop (it keeps going).
    pub errors: Vec<String>,
}

pub struct Node {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub record: Arc<Mutex<Record>>,
}

impl Node {
    /// `unready_first`: the first Pod started cannot reach the API server, so it never gets
    /// ready (its caches never sync) while it runs and serves.
    pub fn start(
        work: PathBuf,
        kubectl: Kubectl,
        runc: PathBuf,
        image: Arc<Image>,
        namespace: String,
        selector: String,
        unready_first: bool,
    ) -> Self {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}});
        kubectl.create(&node);
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Mutex::new(Record::default()));
        let thread = {
            let (stop, record) = (stop.clone(), record.clone());
            std::thread::spawn(move || {
                let mut pods: BTreeMap<String, Running> = BTreeMap::new();
                let mut done: BTreeSet<String> = BTreeSet::new();
                let mut endings: Vec<JoinHandle<()>> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let step = Step {
                        work: &work,
                        kubectl: &kubectl,
                        runc: &runc,
                        image: &image,
                        namespace: &namespace,
                        selector: &selector,
                        unready_first,
                        record: &record,
                    };
                    if let Err(e) = step.run(&mut pods, &mut done, &mut endings) {
                        record.lock().unwrap().errors.push(e);
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                for ending in endings {
                    let _ = ending.join();
                }
                // PodRun's Drop stops what still runs.
                drop(pods);
            })
        };
        Self {
            stop,
            thread: Some(thread),
            record,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Step<'a> {
    work: &'a PathBuf,
    kubectl: &'a Kubectl,
    runc: &'a PathBuf,
    image: &'a Image,
    namespace: &'a str,
    selector: &'a str,
    unready_first: bool,
    record: &'a Arc<Mutex<Record>>,
}

impl Step<'_> {
    fn run(
        &self,
        pods: &mut BTreeMap<String, Running>,
        done: &mut BTreeSet<String>,
        endings: &mut Vec<JoinHandle<()>>,
    ) -> Result<(), String> {
        let list = self
            .kubectl
            .get(&["pods", "-n", self.namespace, "-l", self.selector])?;
        for pod in list["items"].as_array().into_iter().flatten() {
            let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
            if done.contains(&name) {
                continue;
            }
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                done.insert(name.clone());
                let running = pods.remove(&name);
                endings.push(self.end(name, pod, running));
                continue;
            }
            match pods.get_mut(&name) {
                None => {
                    let running = self.begin(&name, pod)?;
                    pods.insert(name, running);
                }
                Some(running) => {
                    let container = &pod["spec"]["containers"][0];
                    let probe = &container["readinessProbe"];
                    let path = probe["httpGet"]["path"].as_str().unwrap_or("/");
                    let port = probe_port(container, probe);
                    let ready = running.run.running()
                        && matches!(http_get(running.run.pod_ip(), port, path), Ok((200, _)));
                    if running.ready != Some(ready) {
                        running.run.report(self.kubectl, ready)?;
                        running.ready = Some(ready);
                    }
                }
            }
        }
        Ok(())
    }

    /// Binds the Pod (kube-scheduler's part) and starts it (the kubelet's).
    fn begin(&self, name: &str, pod: &Value) -> Result<Running, String> {
        let mut pod = pod.clone();
        if pod["spec"]["nodeName"].is_null() {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": self.namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
            });
            let path = format!("/api/v1/namespaces/{}/pods/{name}/binding", self.namespace);
            self.kubectl
                .run(
                    &["create", "--raw", &path, "-f", "-"],
                    Some(binding.to_string().as_bytes()),
                )
                .succeeded()
                .map_err(|e| format!("bind {name}: {e}"))?;
            pod["spec"]["nodeName"] = json!(NODE);
        }
        let first = self.record.lock().unwrap().started.is_empty();
        let api = if first && self.unready_first {
            Api::Unreachable
        } else {
            Api::Reachable
        };
        let run = PodRun::start(
            self.work,
            self.kubectl,
            self.runc,
            self.image,
            &pod,
            PodNetwork::choose(),
            api,
        );
        run.report(self.kubectl, false)?;
        let mut record = self.record.lock().unwrap();
        record.started.push(name.to_owned());
        record.ips.insert(name.to_owned(), run.pod_ip().to_owned());
        Ok(Running {
            run,
            ready: Some(false),
        })
    }

    /// The kubelet's part of a deletion, off the loop: preStop, SIGTERM (the grace period is
    /// the chart's), then the DELETE with grace period 0 that removes the object.
    fn end(&self, name: String, pod: &Value, running: Option<Running>) -> JoinHandle<()> {
        let pre_stop = pod["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or(0);
        let kubectl = self.kubectl.clone();
        let namespace = self.namespace.to_owned();
        let record = self.record.clone();
        std::thread::spawn(move || {
            if let Some(mut running) = running {
                std::thread::sleep(Duration::from_secs(pre_stop));
                let status = running.run.terminate();
                record.lock().unwrap().ended.push((name.clone(), status));
            }
            let out = kubectl.run(
                &[
                    "delete",
                    "pod",
                    &name,
                    "-n",
                    &namespace,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                ],
                None,
            );
            if !out.ok() {
                record
                    .lock()
                    .unwrap()
                    .errors
                    .push(format!("delete {name}: {}", out.stderr));
            }
        })
    }
}
