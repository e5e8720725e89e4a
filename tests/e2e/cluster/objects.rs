//! Objects: YAML documents, the example files, minimal TaskRuns and steps, step names, and
//! `bookend render` to check that the webhook and the offline engine agree.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::kube::{Cluster, Out, names, run};

use super::bookend::bookend_bin;

/// The non-empty documents of a multi-document YAML text.
pub(super) fn yaml_values(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

pub(super) fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_values(&text)
}

pub(super) fn example(path: &str) -> PathBuf {
    crate::root().join(path)
}

/// Step names of a TaskRun's inline taskSpec.
pub(super) fn step_names(object: &Value) -> Vec<String> {
    step_names_of(&object["spec"]["taskSpec"])
}

/// Step names of a Task spec (or a TaskRun's taskSpec).
pub(super) fn step_names_of(spec: &Value) -> Vec<String> {
    names(&spec["steps"])
}

pub(super) fn includes(steps: &[String], name: &str) -> bool {
    steps.iter().any(|n| n == name)
}

pub(super) fn has_step(object: &Value, name: &str) -> bool {
    includes(&step_names(object), name)
}

/// `metadata.<field>` of an object the apiserver returned, which must be a string.
#[track_caller]
pub(super) fn metadata_str(object: &Value, field: &str) -> String {
    match object["metadata"][field].as_str() {
        Some(value) => value.to_owned(),
        None => panic!("metadata.{field}: {}", object["metadata"]),
    }
}

/// A minimal inline TaskRun.
pub(super) fn taskrun(namespace: &str, generate_name: &str, step: &str) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": generate_name, "namespace": namespace},
        "spec": {"taskSpec": {"steps": [{
            "name": step,
            "image": "docker.io/library/alpine:3.20",
            "script": "echo hello",
        }]}},
    })
}

pub(super) fn busybox_step(name: &str) -> Value {
    json!({
        "name": name,
        "image": "docker.io/library/busybox:1.37",
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo {name}")],
    })
}

/// `bookend render -o json` of a TaskRun file with the example policies (the offline engine).
fn render(file: &Path) -> Value {
    let mut cmd = Command::new(bookend_bin());
    cmd.args(["render", "--policies"])
        .arg(example("examples/policies"))
        .arg("-f")
        .arg(file)
        .args(["-o", "json"]);
    run(cmd, None).expect_ok("bookend render").json()
}

/// `kubectl <verb...> -f examples/taskruns/<name>`, which must succeed and return what
/// `bookend render` makes of the same file (the webhook and the offline engine agree).
/// Returns kubectl's result (for its warnings) and the object.
#[track_caller]
pub(super) fn create_example(cluster: &Cluster, verb: &[&str], name: &str) -> (Out, Value) {
    let file = example(&format!("examples/taskruns/{name}"));
    let what = format!("kubectl {} {name}", verb.join(" "));
    let out = cluster.kubectl.with_file(verb, &file).expect_ok(&what);
    let object = out.json();
    let offline = render(&file);
    // The step names first: a short message when only the steps differ.
    assert_eq!(
        step_names(&object),
        step_names(&offline),
        "{what}: steps (in order) from the apiserver vs bookend render"
    );
    assert_eq!(
        object["spec"], offline["spec"],
        "{what}: the spec from the apiserver equals bookend render's"
    );
    (out, object)
}

pub(super) fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.starts_with("Warning:"))
        .unwrap_or("")
        .trim()
        .to_owned()
}
