//! Tekton's TaskSpec rules that injecting steps can break (`TaskSpec.Validate` in Tekton's
//! `pkg/apis/pipeline/v1/task_validation.go`; docs/tekton-notes.md): unique step names,
//! workspace mount paths, and references to params and workspaces
//! the TaskRun does not have. A broken rule is a denial that names the policy, the
//! step and the field, instead of Tekton's less specific error after admission.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::Denial;
use super::inject::StepKind;
use crate::policy::Policy;
use crate::policy::validate::mount_point;
use crate::tekton;

/// Checks the composed `steps` of `task_spec` (whose own `steps` they replace; its other
/// members are read as they are). `kinds[i]` says what `steps[i]` is.
pub fn check(
    task_spec: &Value,
    steps: &[Value],
    kinds: &[StepKind],
    applied: &[&Policy],
    run_params: &[Value],
    context: &super::Context<'_>,
) -> Result<(), Denial> {
    check_steps_of(
        task_spec,
        steps,
        kinds,
        applied,
        &|_| true,
        run_params,
        context,
    )
}

/// [`check`], with the rules for policy steps applied only to the steps of the policies
/// `checked` selects (step names are checked across all steps). The Audit check uses it: the
/// enforced policies' steps passed these rules already, in the same TaskRun.
pub fn check_steps_of(
    task_spec: &Value,
    steps: &[Value],
    kinds: &[StepKind],
    applied: &[&Policy],
    checked: &dyn Fn(&Policy) -> bool,
    run_params: &[Value],
    context: &super::Context<'_>,
) -> Result<(), Denial> {
    let owner = |i: usize| match kinds.get(i) {
        Some(StepKind::Pre(p) | StepKind::Post(p)) => Some(applied[*p]),
        _ => None,
    };
    let at = |i: usize, field: &str| format!("spec.taskSpec.steps[{i}].{field}");
    let name_of = |i: usize| tekton::step_name(&steps[i]).unwrap_or("").to_owned();

    // Tekton refuses duplicate step names anyway; bookend refuses them first because its
    // record identifies the user steps it changed by name, which needs them unique.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        let Some(name) = tekton::step_name(step) else {
            continue;
        };
        let Some(&first) = seen.get(name) else {
            seen.insert(name, i);
            continue;
        };
        let message = format!(
            "expected exactly one, got both: step name {name:?} is used twice (steps {first} and {i}); step names must be unique"
        );
        return Err(match owner(i).or(owner(first)) {
            Some(policy) => Denial::step(policy, name, at(i, "name"), message),
            None => Denial::field(at(i, "name"), message),
        });
    }

    let workspaces = declared_workspaces(task_spec);
    let params = declared_params(task_spec, run_params);

    for (i, step) in steps.iter().enumerate() {
        let Some(policy) = owner(i).filter(|p| checked(p)) else {
            continue;
        };
        let name = name_of(i);
        for (j, mount) in step
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = mount.get("mountPath").and_then(Value::as_str).unwrap_or("");
            if let Some((ws, _)) = workspaces.iter().find(|(_, p)| *p == mount_point(path)) {
                return Err(Denial::step(
                    policy,
                    &name,
                    at(i, &format!("volumeMounts[{j}].mountPath")),
                    format!(
                        "workspace mount path {path:?} must be unique: the TaskRun's workspace {ws:?} is mounted there; mount the policy volume elsewhere"
                    ),
                ));
            }
        }
        for (j, usage) in step
            .get("workspaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let ws = usage.get("name").and_then(Value::as_str).unwrap_or("");
            if !workspaces.iter().any(|(w, _)| w == ws) {
                return Err(Denial::step(
                    policy,
                    &name,
                    at(i, &format!("workspaces[{j}].name")),
                    format!(
                        "undefined workspace {ws:?}: the TaskRun's Task declares [{}]; declare it in the Task or narrow the policy's match",
                        workspaces
                            .iter()
                            .map(|(w, _)| w.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        if let Some(action) = step
            .get("ref")
            .filter(|r| r.get("resolver").is_none())
            .and_then(|r| r.get("name"))
            .and_then(Value::as_str)
            && context.lookup.step_action_exists(context.namespace, action) == Some(false)
        {
            return Err(Denial::step(
                policy,
                &name,
                at(i, "ref.name"),
                format!(
                    "StepAction {action:?} does not exist in namespace {}; create it there, or reference it with the cluster resolver",
                    context.namespace
                ),
            ));
        }
        let mut refs = Vec::new();
        collect_refs(step, "", &mut refs);
        for (field, kind, name_ref) in refs {
            let missing = match kind {
                RefKind::Param => !params.contains(name_ref.as_str()),
                RefKind::Workspace => !workspaces.iter().any(|(w, _)| *w == name_ref),
            };
            if missing {
                let (what, fix) = match kind {
                    RefKind::Param => (
                        "param",
                        "the TaskRun neither passes it nor does its Task declare it; add it to spec.params or narrow the policy's match",
                    ),
                    RefKind::Workspace => (
                        "workspace",
                        "the TaskRun's Task does not declare it; declare it or narrow the policy's match",
                    ),
                };
                return Err(Denial::step(
                    policy,
                    &name,
                    at(i, &field),
                    format!(
                        "non-existent variable: the step references {what} {name_ref:?}, but {fix}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn declared_workspaces(task_spec: &Value) -> Vec<(String, String)> {
    task_spec
        .get("workspaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|w| {
            let name = w.get("name")?.as_str()?.to_owned();
            let path = w
                .get("mountPath")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .map(mount_point)
                .unwrap_or_else(|| format!("/workspace/{name}"));
            Some((name, path))
        })
        .collect()
}

fn declared_params<'a>(task_spec: &'a Value, run_params: &'a [Value]) -> BTreeSet<&'a str> {
    task_spec
        .get("params")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .chain(run_params)
        .filter_map(|p| p.get("name").and_then(Value::as_str))
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RefKind {
    Param,
    Workspace,
}

/// Collects `$(params.x…)`, `$(params["x"])` and `$(workspaces.x.…)` references with the field
/// path where they occur (`path` prefixes every field path).
fn collect_refs(value: &Value, path: &str, out: &mut Vec<(String, RefKind, String)>) {
    let mut segments = Vec::new();
    if !path.is_empty() {
        segments.push(Segment::Key(path));
    }
    collect_refs_at(value, &mut segments, out);
}

/// One step of a field path; the path is only written out for a string that holds a reference.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn render(segments: &[Segment<'_>]) -> String {
    let mut path = String::new();
    for segment in segments {
        match segment {
            Segment::Key(k) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Segment::Index(i) => {
                path.push('[');
                path.push_str(&i.to_string());
                path.push(']');
            }
        }
    }
    path
}

fn collect_refs_at<'a>(
    value: &'a Value,
    path: &mut Vec<Segment<'a>>,
    out: &mut Vec<(String, RefKind, String)>,
) {
    match value {
        Value::String(s) => {
            for (i, _) in s.match_indices("$(") {
                let inner = &s[i + 2..];
                if let Some(rest) = inner.strip_prefix("params.") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                        .collect();
                    out.push((render(path), RefKind::Param, name));
                } else if let Some(rest) = inner
                    .strip_prefix("params[\"")
                    .or_else(|| inner.strip_prefix("params['"))
                {
                    let name: String = rest
                        .chars()
                        .take_while(|c| !matches!(c, '"' | '\''))
                        .collect();
                    out.push((render(path), RefKind::Param, name));
                } else if let Some(rest) = inner.strip_prefix("workspaces.") {
                    let name: String = rest
                        .chars()
                        .take_while(|c| *c != '.' && *c != ')')
                        .collect();
                    out.push((render(path), RefKind::Workspace, name));
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                collect_refs_at(v, path, out);
                path.pop();
            }
        }
        Value::Object(obj) => {
            for (k, v) in obj {
                path.push(Segment::Key(k));
                collect_refs_at(v, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_references_with_paths() {
        let mut refs = Vec::new();
        collect_refs(
            &json!({"args": ["$(params.url)", "$(params[\"rev\"])"], "env": [{"value": "$(workspaces.src.path)"}], "script": "$(params.a-b.key)"}),
            "",
            &mut refs,
        );
        assert!(refs.contains(&("args[0]".into(), RefKind::Param, "url".into())));
        assert!(refs.contains(&("args[1]".into(), RefKind::Param, "rev".into())));
        assert!(refs.contains(&("env[0].value".into(), RefKind::Workspace, "src".into())));
        assert!(refs.contains(&("script".into(), RefKind::Param, "a-b".into())));
    }

    #[test]
    fn workspace_paths_default_to_workspace_name() {
        let ws = declared_workspaces(
            &json!({"workspaces": [{"name": "src"}, {"name": "out", "mountPath": "/out/"}]}),
        );
        assert_eq!(
            ws,
            vec![
                ("src".into(), "/workspace/src".into()),
                ("out".into(), "/out".into())
            ]
        );
    }
}
