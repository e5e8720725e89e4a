//! The helper steps bookend writes beside the org's, built from the settings alone: the policy
//! compiles a policy's reset step with them, and the engine its gates and verdict.

use serde_json::{Map, Value, json};

use super::Settings;
use super::api::StepResult;

/// A step that runs `script` with `/bin/sh -c` in the helper image.
pub(crate) fn shell_step(
    settings: &Settings,
    name: &str,
    script: String,
    results: Option<Value>,
) -> Value {
    let mut step = Map::new();
    step.insert("name".into(), json!(name));
    step.insert("image".into(), json!(settings.helper_image));
    step.insert("command".into(), json!(["/bin/sh", "-c"]));
    step.insert("args".into(), json!([script]));
    if let Some(results) = results {
        step.insert("results".into(), results);
    }
    Value::Object(step)
}

/// The securityContext of the gate and verdict steps: Pod Security `restricted` (the author's
/// stepTemplate, which may have carried one, no longer reaches them).
pub(crate) fn helper_security_context(settings: &Settings) -> Value {
    let mut context = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(uid) = settings.helper_run_as_user {
        context["runAsUser"] = json!(uid);
    }
    context
}

/// The step bookend puts first among the post-steps of a policy that declares `results`: it
/// replaces each result's file in `/tekton/results` with the empty value of its type (`""`,
/// `[]`, `{}`), so that whatever the TaskRun's own steps wrote there is neither reported by a
/// later step's entrypoint nor left as the last value Tekton reads (termination messages: the
/// last container that reports a result wins; sidecar logs: the file at the end). `rm` first:
/// the author's steps may have left a file the helper's user cannot write (the directory is an
/// emptyDir every step may write); `umask 0` so the org's post-steps can write it, whatever
/// user they run as.
pub fn reset_step(settings: &Settings, name: &str, results: &[StepResult]) -> Value {
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    let mut script = format!("cd /tekton/results&&umask 0&&rm -f {}", names.join(" "));
    for result in results {
        let empty = match result.type_.as_deref() {
            Some("array") => "[]",
            Some("object") => "{}",
            _ => "''",
        };
        script.push_str(&format!("&&printf {empty}>{}", result.name));
    }
    let mut step = shell_step(settings, name, script, None);
    step["securityContext"] = helper_security_context(settings);
    step
}
