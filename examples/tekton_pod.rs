//! The Pod Tekton's controller would create for a TaskRun, built with the tests' model of
//! Tekton's pod builder (`tests/common/tekton_pod.rs`: containers `step-<name>` with the
//! entrypoint's arguments, scripts placed by the `place-scripts` init container): for the Pod
//! CREATEs of `scripts/bench-apiserver.sh` (docs/apiserver-benchmark.md).
//!
//! ```sh
//! cargo run --release --example tekton_pod -- TASKRUN.json > pod.json
//! ```
//!
//! TASKRUN.json is the TaskRun as the API server stored it (name, uid, namespace and the
//! inline `spec.taskSpec` are read). The Pod carries what Tekton puts on it: the TaskRun's
//! labels and annotations, `tekton.dev/taskRun`, `tekton.dev/taskRunUID`,
//! `app.kubernetes.io/managed-by`, a controller ownerReference to the TaskRun, and the volumes
//! its containers mount (Tekton's internal ones as emptyDirs, the Task's own), so that the API
//! server accepts it. Left out, as the model leaves them out: the `prepare` init container and
//! Tekton's other internal mounts (`/tekton/home`, `/tekton/results`, the credentials homes,
//! the downward API volume), and variables stay as written (bookend accepts both).

#[path = "../tests/common/tekton_pod.rs"]
mod tekton_pod;

use std::process::ExitCode;

use serde_json::{Map, Value, json};

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: tekton_pod TASKRUN.json");
        return ExitCode::from(2);
    };
    let taskrun: Value = match std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|data| serde_json::from_slice(&data).map_err(|e| e.to_string()))
    {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tekton_pod: {path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    match pod_of(&taskrun) {
        Ok(pod) => {
            println!("{pod}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tekton_pod: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn pod_of(taskrun: &Value) -> Result<Value, String> {
    let text = |pointer: &str| {
        taskrun
            .pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("no {pointer}"))
    };
    let (name, uid, namespace) = (
        text("/metadata/name")?,
        text("/metadata/uid")?,
        text("/metadata/namespace")?,
    );
    let api_version = text("/apiVersion")?;
    let task_spec = taskrun
        .pointer("/spec/taskSpec")
        .ok_or("no spec.taskSpec: only inline TaskRuns")?;
    let steps = task_spec
        .get("steps")
        .and_then(Value::as_array)
        .ok_or("no spec.taskSpec.steps")?;
    // Every volume a container mounts: Tekton's internal ones are emptyDirs, the Task's own
    // come from the Task (all of them: Tekton copies the Task's volumes).
    let own: Vec<Value> = task_spec
        .get("volumes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut spec = tekton_pod::pod_spec(steps, &own);
    spec["automountServiceAccountToken"] = json!(false);
    spec["restartPolicy"] = json!("Never");
    let volumes = spec["volumes"]
        .as_array_mut()
        .expect("pod_spec lists volumes");
    for volume in own {
        if !volumes.iter().any(|v| v["name"] == volume["name"]) {
            volumes.push(volume);
        }
    }

    let mut labels = taskrun
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_else(Map::new);
    labels.insert(
        "app.kubernetes.io/managed-by".to_owned(),
        json!("tekton-pipelines"),
    );
    labels.insert("tekton.dev/taskRun".to_owned(), json!(name));
    labels.insert("tekton.dev/taskRunUID".to_owned(), json!(uid));
    let annotations = taskrun
        .pointer("/metadata/annotations")
        .cloned()
        .unwrap_or_else(|| json!({}));
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-pod-"),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": api_version, "kind": "TaskRun", "name": name,
                                 "uid": uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": spec,
    }))
}
