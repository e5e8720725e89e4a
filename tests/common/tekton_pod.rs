//! A Pod's step containers as Tekton's pod builder makes them from a Task's steps
//! (`orderContainers`, `resolveEntrypoints`, `convertScripts` in Tekton's `pkg/pod`; see
//! docs/tekton-notes.md, "From step to container"), for tests that create a TaskRun's Pod by
//! hand. Variables are left as written (Tekton would substitute them; bookend accepts both).

use base64::Engine as _;
use serde_json::{Value, json};

/// The `spec` members `containers`, `initContainers` (`place-scripts`, when a step has a
/// script) and `volumes` Tekton builds for `steps` and the Task's `volumes`.
pub fn pod_spec(steps: &[Value], task_volumes: &[Value]) -> Value {
    let mut place_scripts = String::new();
    let containers: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| container(s, i, &mut place_scripts))
        .collect();
    let mut spec = json!({"containers": containers});
    if !place_scripts.is_empty() {
        spec["initContainers"] = json!([{"name": "place-scripts", "image": "cgr.dev/chainguard/busybox",
            "command": ["sh"], "args": ["-c", place_scripts]}]);
    }
    // Every mounted volume exists (the Task's as the Task defines it, Tekton copies them; the
    // others an emptyDir, as Tekton's internal volumes are), so that the apiserver's own
    // validation passes and the webhooks decide.
    let mut volumes: Vec<String> = Vec::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            if let Some(n) = m["name"].as_str()
                && !volumes.iter().any(|v| v == n)
            {
                volumes.push(n.to_string());
            }
        }
    }
    spec["volumes"] = volumes
        .into_iter()
        .map(|n| {
            task_volumes
                .iter()
                .find(|v| v["name"] == n.as_str())
                .cloned()
                .unwrap_or_else(|| json!({"name": n, "emptyDir": {}}))
        })
        .collect();
    spec
}

/// One step's container (for a step without command: its image by a made-up digest).
pub fn container(step: &Value, index: usize, place_scripts: &mut String) -> Value {
    let name = match step
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        Some(n) => format!("step-{n}"),
        None => format!("step-unnamed-{index}"),
    };
    let mut name: String = name.chars().take(63).collect();
    while name.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        name.pop();
    }
    let mut args: Vec<Value> = Vec::new();
    if index > 0 {
        args.extend([
            json!("-wait_file"),
            json!(format!("/tekton/run/{}/out", index - 1)),
        ]);
    }
    args.extend([
        json!("-post_file"),
        json!(format!("/tekton/run/{index}/out")),
        json!("-termination_path"),
        json!("/tekton/termination"),
        json!("-step_metadata_dir"),
        json!(format!("/tekton/run/{index}/status")),
    ]);
    if let Some(on_error) = step.get("onError") {
        args.extend([json!("-on_error"), on_error.clone()]);
    }
    if let Some(timeout) = step.get("timeout") {
        args.extend([json!("-timeout"), timeout.clone()]);
    }
    if let Some(results) = step.get("results").and_then(Value::as_array) {
        let names: Vec<&str> = results.iter().filter_map(|r| r["name"].as_str()).collect();
        args.extend([json!("-step_results"), json!(names.join(","))]);
    }
    if let Some(when) = step.get("when") {
        args.extend([json!("--when_expressions"), json!(when.to_string())]);
    }
    let command: Vec<Value> = step
        .get("command")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut env: Vec<Value> = step
        .get("env")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut image = step["image"].clone();
    let mut mounts = vec![
        json!({"name": "tekton-internal-bin", "mountPath": "/tekton/bin", "readOnly": true}),
        json!({"name": format!("tekton-internal-run-{index}"), "mountPath": format!("/tekton/run/{index}")}),
    ];
    if let Some(script) = step.get("script").and_then(Value::as_str) {
        let file = format!("/tekton/scripts/script-{index}-abcde");
        let body = if script.trim().starts_with("#!") {
            script.to_owned()
        } else {
            format!("#!/bin/sh\nset -e\n{script}")
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(body);
        place_scripts.push_str(&format!(
            "scriptfile=\"{file}\"\ntouch ${{scriptfile}} && chmod +x ${{scriptfile}}\ncat > ${{scriptfile}} << '_EOF_'\n{encoded}\n_EOF_\n/tekton/bin/entrypoint decode-script \"${{scriptfile}}\"\n"
        ));
        args.extend([json!("-entrypoint"), json!(file)]);
        mounts.push(json!({"name": "tekton-internal-scripts", "mountPath": "/tekton/scripts", "readOnly": true}));
    } else if let Some(program) = command.first() {
        args.extend([json!("-entrypoint"), program.clone()]);
    } else {
        let reference = image.as_str().unwrap_or("");
        let without_tag = match reference.rfind(':') {
            Some(i) if !reference[i..].contains('/') => &reference[..i],
            _ => reference,
        };
        let repository = match without_tag.split_once('/') {
            Some((first, _)) if first.contains('.') && first != "docker.io" => {
                without_tag.to_owned()
            }
            Some(("docker.io", rest)) => format!("index.docker.io/{rest}"),
            Some(_) => format!("index.docker.io/{without_tag}"),
            None => format!("index.docker.io/library/{without_tag}"),
        };
        image = json!(format!("{repository}@sha256:{}", "0".repeat(64)));
        env.push(json!({"name": "TEKTON_PLATFORM_COMMANDS", "value": "{\"linux/amd64\":[\"/entrypoint\"]}"}));
    }
    args.push(json!("--"));
    args.extend(command.iter().skip(1).cloned());
    args.extend(
        step.get("args")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    );
    mounts.extend(
        step.get("volumeMounts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    );
    let mut container = json!({"name": name, "image": image, "command": ["/tekton/bin/entrypoint"],
        "args": args, "terminationMessagePath": "/tekton/termination", "volumeMounts": mounts});
    if !env.is_empty() {
        container["env"] = Value::Array(env);
    }
    for (from, to) in [
        ("securityContext", "securityContext"),
        ("workingDir", "workingDir"),
        ("computeResources", "resources"),
        ("resources", "resources"),
        ("envFrom", "envFrom"),
        ("imagePullPolicy", "imagePullPolicy"),
    ] {
        if let Some(v) = step.get(from) {
            container[to] = v.clone();
        }
    }
    container
}
