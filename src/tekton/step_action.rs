//! A StepAction step as Tekton's controller resolves it: what `status.taskSpec` holds for a
//! step with a `ref` once the TaskRun runs.
//!
//! Upstream (tektoncd/pipeline v1.15.0, `pkg/reconciler/taskrun/resources/taskspec.go`
//! `resolveStepRef`, `apply.go` `applyStepActionParameters`, `pkg/container/step_replacements.go`),
//! the rules as implemented here:
//!
//! 1. The StepAction's params are its `params[].default`, overridden by the step's `params`;
//!    a step param the StepAction does not declare, or a declared param without a default that
//!    the step does not give, fails the TaskRun (`validateStepHasStepActionParameters`).
//! 2. Each param is substituted as `$(params.p)`, `$(params["p"])`, `$(params['p'])` and
//!    `$(inputs.params.p)`, in one pass (Go's `strings.Replacer`: a value is never substituted
//!    again), into the step's `script`, `onError`, `stdoutConfig.path`, `stderrConfig.path`,
//!    `when` (input and values), `name`, `image`, `imagePullPolicy`, `command`, `args`,
//!    `env[].value`, the names and keys of `env[].valueFrom` references, `envFrom` prefixes and
//!    names, `workingDir` and `volumeMounts` name, mountPath and subPath; nowhere else.
//! 3. The substituted StepAction then overwrites the step: `image`, `securityContext` and
//!    `workingDir` always (absent when the StepAction has none); `command`, `args`, `script`,
//!    `env`, `volumeMounts` and `results` when the StepAction sets them. `ref` and `params` are
//!    removed; every other member of the step (`name`, `onError`, `when`, `timeout`,
//!    `computeResources`, ...) is kept.
//!
//! Array and object params, param defaults that refer to other params or to step results, and
//! step params that Tekton substitutes from the Task (`$(…)` in a value) are not reproduced:
//! [`resolve`] answers [`ResolveError::Unsupported`] for them, so a caller comparing with what
//! ran never takes a guess for a match.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Where a step's `ref` takes its StepAction from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `ref.name`: a StepAction in the TaskRun's namespace.
    Local { name: String },
    /// `ref.resolver: cluster` with literal `kind: stepaction`, `name` and `namespace` params.
    Cluster { namespace: String, name: String },
    /// Any other resolver (`bundles`, `git`, `http`, ...), or a cluster reference without a
    /// literal name or namespace: content bookend cannot read from its cache.
    Elsewhere { resolver: String },
}

impl Source {
    /// The StepAction `step_ref` (a step's `ref`) names.
    pub fn of(step_ref: &Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let resolver = text(step_ref.get("resolver"));
        if resolver.is_empty() {
            let name = text(step_ref.get("name"));
            if name.is_empty() {
                return Self::Elsewhere { resolver };
            }
            return Self::Local { name };
        }
        let param = |key: &str| {
            step_ref
                .get("params")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(key))
                .map(|p| text(p.get("value")))
                .filter(|v| !v.is_empty() && !v.contains("$("))
        };
        // Without `kind` the resolver takes its configured default (`task`).
        let kind_ok = param("kind").as_deref() == Some("stepaction");
        match (resolver.as_str(), param("namespace"), param("name")) {
            ("cluster", Some(namespace), Some(name)) if kind_ok => {
                Self::Cluster { namespace, name }
            }
            _ => Self::Elsewhere { resolver },
        }
    }

    /// `(namespace, name)` of a StepAction bookend can read; `None` for [`Source::Elsewhere`].
    pub fn object(&self, taskrun_namespace: &str) -> Option<(String, String)> {
        match self {
            Self::Local { name } => Some((taskrun_namespace.to_owned(), name.clone())),
            Self::Cluster { namespace, name } => Some((namespace.clone(), name.clone())),
            Self::Elsewhere { .. } => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Local { name } => write!(f, "StepAction {name} (the TaskRun's namespace)"),
            Self::Cluster { namespace, name } => write!(f, "StepAction {namespace}/{name}"),
            Self::Elsewhere { resolver } if resolver.is_empty() => {
                f.write_str("a StepAction without a name")
            }
            Self::Elsewhere { resolver } => {
                write!(f, "a StepAction of the {resolver} resolver")
            }
        }
    }
}

/// Why a StepAction step is not resolved here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// Tekton fails the TaskRun over these params.
    #[error("Tekton refuses the step's params for this StepAction: {0}")]
    Params(String),
    /// Tekton resolves it in a way this module does not reproduce.
    #[error("bookend does not reproduce Tekton's resolution of {0}")]
    Unsupported(String),
}

/// The step Tekton's controller makes of `step` (a step with a `ref`) and the StepAction
/// object `action` (`apiVersion`, `kind`, `metadata`, `spec`).
pub fn resolve(step: &Value, action: &Value) -> Result<Value, ResolveError> {
    let empty = Map::new();
    let spec = action
        .get("spec")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let replacements = params(step, spec)?;
    let mut from_action = Map::new();
    for key in [
        "image",
        "command",
        "args",
        "workingDir",
        "script",
        "env",
        "volumeMounts",
        "securityContext",
        "results",
    ] {
        if let Some(value) = spec.get(key).filter(|v| !v.is_null()) {
            from_action.insert(key.to_owned(), value.clone());
        }
    }
    let mut resolved = step.as_object().cloned().unwrap_or_default();
    resolved.remove("ref");
    resolved.remove("params");
    // `image`, `securityContext` and `workingDir` are always the StepAction's (a step with a
    // `ref` has no container fields of its own: Tekton's validation refuses them).
    for key in ["image", "securityContext", "workingDir"] {
        resolved.remove(key);
    }
    // Go's `len(x) > 0` and `!= ""`; an empty value is omitted from Go's JSON anyway.
    let set = |v: &Value| match v {
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Null => false,
        _ => true,
    };
    for (key, value) in from_action {
        if set(&value) {
            resolved.insert(key, value);
        }
    }
    let mut resolved = Value::Object(resolved);
    substitute_step(&mut resolved, &replacements);
    Ok(resolved)
}

/// Variable keys (`params.p`, ...) and their values: the step's params, else the StepAction's
/// defaults.
fn params(
    step: &Value,
    spec: &Map<String, Value>,
) -> Result<HashMap<String, String>, ResolveError> {
    let declared: &[Value] = spec
        .get("params")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let given: &[Value] = step
        .get("params")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let name_of = |p: &Value| p.get("name").and_then(Value::as_str).map(str::to_owned);
    for p in given {
        let name = name_of(p).unwrap_or_default();
        if !declared
            .iter()
            .any(|d| name_of(d).as_deref() == Some(&name))
        {
            return Err(ResolveError::Params(format!(
                "param {name:?} is not declared by the StepAction"
            )));
        }
    }
    let mut out = HashMap::new();
    for d in declared {
        let Some(name) = name_of(d) else { continue };
        if d.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "string")
        {
            return Err(ResolveError::Unsupported(format!(
                "its {} param {name:?}",
                d["type"].as_str().unwrap_or_default()
            )));
        }
        let value = match given.iter().find(|p| name_of(p).as_deref() == Some(&name)) {
            Some(p) => p.get("value"),
            None => d.get("default"),
        };
        let value = match value {
            Some(Value::String(s)) if !s.contains("$(") => s.clone(),
            Some(Value::String(_)) => {
                return Err(ResolveError::Unsupported(format!(
                    "param {name:?}, whose value refers to a variable"
                )));
            }
            Some(_) => {
                return Err(ResolveError::Unsupported(format!(
                    "param {name:?}, which is not a string"
                )));
            }
            None => {
                return Err(ResolveError::Params(format!(
                    "param {name:?} has no default and the step does not give it"
                )));
            }
        };
        for key in [
            format!("params.{name}"),
            format!("params[\"{name}\"]"),
            format!("params['{name}']"),
            format!("inputs.params.{name}"),
        ] {
            out.insert(key, value.clone());
        }
    }
    Ok(out)
}

fn replace_once(text: &str, values: &HashMap<String, String>) -> String {
    super::replace_variables(text, |key| values.get(key).map(String::as_str))
}

/// `ApplyStepReplacements`: the members Tekton substitutes params into, and no other.
fn substitute_step(step: &mut Value, values: &HashMap<String, String>) {
    let at = |pointer: &str, step: &mut Value| {
        if let Some(Value::String(s)) = step.pointer_mut(pointer) {
            *s = replace_once(s, values);
        }
    };
    for pointer in [
        "/script",
        "/onError",
        "/stdoutConfig/path",
        "/stderrConfig/path",
        "/name",
        "/image",
        "/imagePullPolicy",
        "/workingDir",
    ] {
        at(pointer, step);
    }
    let each = |step: &mut Value, list: &str, members: &[&str]| {
        let Some(items) = step.get_mut(list).and_then(Value::as_array_mut) else {
            return;
        };
        for item in items {
            for member in members {
                if let Some(Value::String(s)) = item.pointer_mut(member) {
                    *s = replace_once(s, values);
                }
            }
        }
    };
    for list in ["command", "args"] {
        if let Some(items) = step.get_mut(list).and_then(Value::as_array_mut) {
            for item in items {
                if let Value::String(s) = item {
                    *s = replace_once(s, values);
                }
            }
        }
    }
    each(
        step,
        "env",
        &[
            "/value",
            "/valueFrom/secretKeyRef/name",
            "/valueFrom/secretKeyRef/key",
            "/valueFrom/configMapKeyRef/name",
            "/valueFrom/configMapKeyRef/key",
        ],
    );
    each(
        step,
        "envFrom",
        &["/prefix", "/configMapRef/name", "/secretRef/name"],
    );
    each(step, "volumeMounts", &["/name", "/mountPath", "/subPath"]);
    if let Some(whens) = step.get_mut("when").and_then(Value::as_array_mut) {
        for when in whens {
            if let Some(Value::String(s)) = when.get_mut("input") {
                *s = replace_once(s, values);
            }
            if let Some(items) = when.get_mut("values").and_then(Value::as_array_mut) {
                for v in items {
                    if let Value::String(s) = v {
                        *s = replace_once(s, values);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(spec: Value) -> Value {
        json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction",
               "metadata": {"name": "git-clone", "namespace": "tekton-catalog"}, "spec": spec})
    }

    #[test]
    fn the_source_is_read_from_the_ref() {
        let cluster = json!({"resolver": "cluster", "params": [
            {"name": "kind", "value": "stepaction"}, {"name": "name", "value": "git-clone"},
            {"name": "namespace", "value": "tekton-catalog"}]});
        assert_eq!(
            Source::of(&cluster).object("team-a"),
            Some(("tekton-catalog".to_owned(), "git-clone".to_owned()))
        );
        assert_eq!(
            Source::of(&json!({"name": "x"})).object("team-a"),
            Some(("team-a".to_owned(), "x".to_owned()))
        );
        let mut task = cluster.clone();
        task["params"][0]["value"] = json!("task");
        for other in [
            task,
            json!({"resolver": "cluster", "params": [{"name": "name", "value": "x"}]}),
            json!({"resolver": "cluster", "params": [{"name": "name", "value": "x"},
                   {"name": "namespace", "value": "tekton-catalog"}]}),
            json!({"resolver": "cluster", "params": [{"name": "name", "value": "x"},
                   {"name": "namespace", "value": "$(params.ns)"}]}),
            json!({"resolver": "bundles", "params": [{"name": "bundle", "value": "b"}]}),
            json!({}),
        ] {
            assert_eq!(Source::of(&other).object("team-a"), None, "{other}");
        }
    }

    #[test]
    fn the_step_action_overwrites_its_fields_and_the_step_keeps_its_own() {
        let step = json!({"name": "bookend-clone", "onError": "continue", "timeout": "5m",
            "computeResources": {"limits": {"memory": "1Gi"}},
            "ref": {"name": "git-clone"}, "params": [{"name": "url", "value": "https://x"}]});
        let sa = action(json!({
            "image": "git:1", "script": "git clone $(params.url) $(params[\"dir\"]) $(params.other)",
            "params": [{"name": "url"}, {"name": "dir", "default": "/w"}],
            "env": [{"name": "U", "value": "$(params['url'])"}],
            "securityContext": {"runAsNonRoot": true},
            "results": [{"name": "commit"}]}));
        assert_eq!(
            resolve(&step, &sa).unwrap(),
            json!({"name": "bookend-clone", "onError": "continue", "timeout": "5m",
                "computeResources": {"limits": {"memory": "1Gi"}},
                "image": "git:1", "script": "git clone https://x /w $(params.other)",
                "env": [{"name": "U", "value": "https://x"}],
                "securityContext": {"runAsNonRoot": true},
                "results": [{"name": "commit"}]})
        );
        // Set only when the StepAction sets them: an empty list leaves nothing.
        let bare = action(json!({"image": "a", "command": [], "args": ["$(params.x)"],
            "params": [{"name": "x", "default": "$(params.x)y"}]}));
        assert!(matches!(
            resolve(&json!({"name": "s", "ref": {"name": "a"}}), &bare),
            Err(ResolveError::Unsupported(_))
        ));
        let bare = action(json!({"image": "a", "command": [], "args": ["$(params.x)"],
            "params": [{"name": "x", "default": "v $(params.x)"}]}));
        let mut given = json!({"name": "s", "ref": {"name": "a"},
                               "params": [{"name": "x", "value": "one $(params.x)"}]});
        assert!(resolve(&given, &bare).is_err(), "a variable in a value");
        given["params"][0]["value"] = json!("one");
        assert_eq!(
            resolve(&given, &bare).unwrap(),
            json!({"name": "s", "image": "a", "args": ["one"]})
        );
    }

    #[test]
    fn params_tekton_refuses_are_errors() {
        let sa = action(json!({"image": "a", "params": [{"name": "url"}]}));
        let step = json!({"name": "s", "ref": {"name": "a"}});
        assert!(matches!(resolve(&step, &sa), Err(ResolveError::Params(_))));
        let mut undeclared = step.clone();
        undeclared["params"] = json!([{"name": "url", "value": "u"}, {"name": "x", "value": "y"}]);
        assert!(matches!(
            resolve(&undeclared, &sa),
            Err(ResolveError::Params(_))
        ));
        let arrays = action(json!({"image": "a", "params": [{"name": "l", "type": "array"}]}));
        assert!(matches!(
            resolve(&step, &arrays),
            Err(ResolveError::Unsupported(_))
        ));
    }

    #[test]
    fn substitution_is_one_pass_and_only_where_tekton_substitutes() {
        let pairs = HashMap::from([
            ("params.a".to_owned(), "$(params.b)".to_owned()),
            ("params.b".to_owned(), "B".to_owned()),
        ]);
        assert_eq!(
            replace_once("x$(params.a)$(params.b)$(", &pairs),
            "x$(params.b)B$("
        );
        let sa = action(
            json!({"image": "$(params.i)", "params": [{"name": "i", "default": "img"}],
            "securityContext": {"seLinuxOptions": {"user": "$(params.i)"}},
            "results": [{"name": "r", "description": "$(params.i)"}]}),
        );
        let step = json!({"name": "s-$(params.i)", "ref": {"name": "a"},
            "timeout": "$(params.i)", "when": [{"input": "$(params.i)", "operator": "in", "values": ["$(params.i)"]}]});
        assert_eq!(
            resolve(&step, &sa).unwrap(),
            json!({"name": "s-img", "image": "img", "timeout": "$(params.i)",
                   "when": [{"input": "img", "operator": "in", "values": ["img"]}],
                   "securityContext": {"seLinuxOptions": {"user": "$(params.i)"}},
                   "results": [{"name": "r", "description": "$(params.i)"}]})
        );
    }
}
