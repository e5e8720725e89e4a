//! Running TaskRuns and PipelineRuns in the test cluster and reading what happened: Tekton's
//! status (conditions, step states, results) and what the steps wrote (the trace file each step
//! appends to in /tekton/home, and container logs), read from the kubelet stand-in's directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::kube::{Kubectl, panic_message, poll};
use crate::node::BUSYBOX;

/// How long a run may take before the suite gives up on it (a hang guard, not an assertion).
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

/// Where the steps of every TaskRun write their trace: each appends a line (usually its own
/// name) to this file in the Pod's /tekton/home volume.
pub const TRACE: &str = "/tekton/home/trace";

/// The cluster as the scenarios use it.
pub struct Env {
    pub kubectl: Kubectl,
    /// The kubelet stand-in's work directory (Pod volumes and container logs).
    pub kubelet_dir: PathBuf,
}

/// A finished TaskRun.
pub struct Finished {
    pub object: Value,
    /// Wall clock from `kubectl create` to the moment the suite saw it done.
    pub took: Duration,
}

impl Finished {
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("?")
    }

    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"].as_str().unwrap_or("?")
    }

    /// The `Succeeded` condition: (status, reason, message).
    pub fn condition(&self) -> (String, String, String) {
        condition(&self.object)
    }

    /// Every step as (name, terminationReason, exit code), in order.
    pub fn steps(&self) -> Vec<(String, String, i64)> {
        self.object["status"]["steps"]
            .as_array()
            .map(|steps| {
                steps
                    .iter()
                    .map(|s| {
                        (
                            s["name"].as_str().unwrap_or("").to_owned(),
                            s["terminationReason"].as_str().unwrap_or("").to_owned(),
                            s["terminated"]["exitCode"].as_i64().unwrap_or(-1),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn step_names(&self) -> Vec<String> {
        self.steps().into_iter().map(|(n, _, _)| n).collect()
    }

    /// A step result (`status.steps[].results`).
    pub fn step_result(&self, step: &str, result: &str) -> Option<String> {
        self.object["status"]["steps"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == step)?["results"]
            .as_array()?
            .iter()
            .find(|r| r["name"] == result)
            .and_then(|r| r["value"].as_str())
            .map(str::to_owned)
    }

    /// A Task result (`status.results`).
    pub fn task_result(&self, result: &str) -> Option<String> {
        self.object["status"]["results"]
            .as_array()?
            .iter()
            .find(|r| r["name"] == result)
            .and_then(|r| r["value"].as_str())
            .map(str::to_owned)
    }

    /// bookend's helper steps (gates, verdict) from its record annotation.
    pub fn helpers(&self) -> Vec<String> {
        self.object["metadata"]["annotations"]["bookend.dev/injected"]
            .as_str()
            .and_then(|r| serde_json::from_str::<Value>(r).ok())
            .and_then(|r| {
                r["helpers"].as_array().map(|h| {
                    h.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                })
            })
            .unwrap_or_default()
    }

    fn pod_dir(&self, env: &Env) -> PathBuf {
        let pod = self.object["status"]["podName"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no podName", self.name()));
        env.kubelet_dir
            .join("pods")
            .join(format!("{}_{pod}", self.namespace()))
    }

    /// The lines the steps appended to the trace file, in order.
    pub fn trace(&self, env: &Env) -> Vec<String> {
        let path = self
            .pod_dir(env)
            .join("volumes/tekton-internal-home")
            .join(TRACE.rsplit('/').next().expect("file name"));
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// A file the steps wrote to /tekton/home (empty when there is none).
    pub fn home_file(&self, env: &Env, name: &str) -> String {
        let path = self
            .pod_dir(env)
            .join("volumes/tekton-internal-home")
            .join(name);
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// What a step's container printed (the entrypoint's own messages included).
    pub fn log(&self, env: &Env, step: &str) -> String {
        let path = self
            .pod_dir(env)
            .join("containers")
            .join(format!("step-{step}"))
            .join("log");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The Pod Tekton built (its containers, as created).
    pub fn pod(&self, env: &Env) -> Value {
        let pod = self.object["status"]["podName"].as_str().unwrap_or("");
        env.kubectl
            .get(&["pod", "-n", self.namespace(), pod])
            .unwrap_or_else(|e| panic!("get pod {pod}: {e}"))
    }

    /// A summary for failure messages.
    pub fn describe(&self, env: &Env) -> String {
        format!(
            "{}/{}: condition {:?}, steps {:?}, trace {:?}",
            self.namespace(),
            self.name(),
            self.condition(),
            self.steps(),
            self.trace(env)
        )
    }
}

pub fn condition(object: &Value) -> (String, String, String) {
    let c = object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Succeeded"))
        .cloned()
        .unwrap_or(Value::Null);
    let text = |key: &str| c[key].as_str().unwrap_or("").to_owned();
    (text("status"), text("reason"), text("message"))
}

fn done(object: &Value) -> Result<(), String> {
    let (status, reason, message) = condition(object);
    if status == "True" || status == "False" {
        Ok(())
    } else {
        Err(format!("{status} {reason}: {message}"))
    }
}

impl Env {
    /// Creates a TaskRun (or PipelineRun); returns its name and the time of creation.
    pub fn start(&self, object: &Value) -> (String, Instant) {
        let started = Instant::now();
        let created = self.kubectl.create(object);
        let name = created["metadata"]["name"]
            .as_str()
            .expect("created object has a name")
            .to_owned();
        (name, started)
    }

    /// Waits until a TaskRun or PipelineRun is done (its Succeeded condition is True or False).
    pub fn wait(&self, resource: &str, namespace: &str, name: &str) -> Value {
        poll(
            &format!("{resource} {namespace}/{name} to finish"),
            RUN_TIMEOUT,
            || {
                let object = self.kubectl.get(&[resource, "-n", namespace, name])?;
                done(&object).map(|()| object)
            },
        )
    }

    /// Runs TaskRuns side by side and waits for all of them; results in the same order.
    pub fn run_all(&self, objects: &[Value]) -> Vec<Finished> {
        let started: Vec<(String, Instant)> = objects.iter().map(|o| self.start(o)).collect();
        objects
            .iter()
            .zip(started)
            .map(|(object, (name, at))| {
                let namespace = object["metadata"]["namespace"].as_str().expect("namespace");
                let object = self.wait("taskrun", namespace, &name);
                Finished {
                    object,
                    took: at.elapsed(),
                }
            })
            .collect()
    }

    pub fn run_one(&self, object: &Value) -> Finished {
        self.run_all(std::slice::from_ref(object))
            .pop()
            .expect("one run")
    }
}

/// A TaskRun with an inline taskSpec.
pub fn taskrun(namespace: &str, name: &str, task_spec: Value) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": format!("{name}-"), "namespace": namespace},
        "spec": {"taskSpec": task_spec},
    })
}

/// A step that appends its name to the trace, then runs `then` (shell).
pub fn step(name: &str, then: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo {name} >> {TRACE}; {then}")],
    })
}

/// The same as a `script` step (Tekton writes the script through its place-scripts init
/// container).
pub fn script_step(name: &str, then: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "script": format!("#!/bin/sh\necho {name} >> {TRACE}\n{then}\n"),
    })
}

/// Asserts a run's steps, each as (name, terminationReason, exit code), in order.
#[track_caller]
pub fn assert_steps(env: &Env, run: &Finished, expected: &[(&str, &str, i64)]) {
    let actual = run.steps();
    let expected: Vec<(String, String, i64)> = expected
        .iter()
        .map(|(n, r, c)| ((*n).to_owned(), (*r).to_owned(), *c))
        .collect();
    assert_eq!(
        actual,
        expected,
        "{}: steps (name, terminationReason, exitCode)\n{}",
        run.name(),
        run.describe(env)
    );
}

#[track_caller]
pub fn assert_trace(env: &Env, run: &Finished, expected: &[&str]) {
    assert_eq!(
        run.trace(env),
        expected,
        "{}: what the steps wrote to {TRACE}, in order\n{}",
        run.name(),
        run.describe(env)
    );
}

#[track_caller]
pub fn assert_condition(env: &Env, run: &Finished, status: &str, reason: &str, message: &str) {
    let (s, r, m) = run.condition();
    // Tekton before v1.0 words a failed step's condition as reason `Failed` and without the
    // `: Error` suffix (`"step-x" exited with code 1`); what ran is the same.
    let worded = |reason: &str, message: &str| {
        (
            if reason == "StepFailed" {
                "Failed"
            } else {
                reason
            }
            .to_owned(),
            message
                .strip_suffix(": Error")
                .unwrap_or(message)
                .to_owned(),
        )
    };
    assert_eq!(
        (s.as_str(), worded(&r, &m)),
        (status, worded(reason, message)),
        "{}: Succeeded condition (status, reason, message)\n{}",
        run.name(),
        run.describe(env)
    );
}

/// Independent checks of one scenario: each runs even when an earlier one failed, and the
/// scenario fails at the end with every failure, so one broken run does not hide another.
#[derive(Default)]
pub struct Checks {
    failures: Vec<String>,
}

impl Checks {
    pub fn check(&mut self, label: &str, check: impl FnOnce()) {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)) {
            self.failures
                .push(format!("[{label}] {}", panic_message(panic.as_ref())));
        }
    }

    #[track_caller]
    pub fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} check(s) failed:\n{}",
            self.failures.len(),
            self.failures.join("\n")
        );
    }
}
