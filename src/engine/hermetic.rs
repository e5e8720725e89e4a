//! Hermetic user steps (`spec.userSteps.network: None`): every step the TaskRun's author
//! supplied runs without network, and every org step keeps it.
//!
//! Tekton's entrypoint starts a step's command in new user, mount, PID and network namespaces
//! when the step's environment has `TEKTON_HERMETIC` equal to `1` and `TEKTON_RESOURCE_NAME`
//! empty (`cmd/entrypoint/runner.go`, since before v0.62). bookend appends both, in that order,
//! as the last entries of each of the author's steps' env: the kubelet takes the last entry of a
//! name, and `env` over `envFrom`, so nothing the author wrote earlier undoes them. What Tekton
//! appends after them (podTemplate env) and what runs outside the entrypoint's namespaces
//! (sidecars, lifecycle hooks, probes, a hostPath socket, a StepAction step that cannot carry
//! env) is refused while such a policy applies. The Pod backstop checks the result where the
//! steps run ([`check_pod`]).

use serde_json::{Value, json};

use super::Denial;
use crate::policy::Policy;

/// The variable that makes Tekton's entrypoint drop a step's network (when it is `1`).
pub const HERMETIC_ENV: &str = "TEKTON_HERMETIC";
/// The variable that, when not empty, makes Tekton's entrypoint keep the network anyway.
pub const RESOURCE_NAME_ENV: &str = "TEKTON_RESOURCE_NAME";

/// Container fields the kubelet runs outside the entrypoint (v1beta1 steps and stepTemplates
/// still carry them).
const OUTSIDE_THE_ENTRYPOINT: &[&str] = &[
    "lifecycle",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
];

/// The sidecar Tekton itself adds to read results from the sidecar logs (`results-from:
/// sidecar-logs`); it reads files, and is Tekton's.
const TEKTON_RESULTS_SIDECAR: &str = "sidecar-tekton-log-results";

/// The first applied policy that requires hermetic user steps: one is enough (the strictest
/// wins).
pub fn requiring<'p>(applied: &[&'p Policy]) -> Option<&'p Policy> {
    applied
        .iter()
        .copied()
        .find(|p| p.spec.user_steps.hermetic())
}

/// The two env entries that jail a step, in the order bookend appends them.
fn jail_entries() -> [Value; 2] {
    [
        json!({"name": HERMETIC_ENV, "value": "1"}),
        json!({"name": RESOURCE_NAME_ENV, "value": ""}),
    ]
}

fn name_of(entry: &Value) -> &str {
    entry.get("name").and_then(Value::as_str).unwrap_or("")
}

/// An env entry that sets `name` to exactly `value` (no `valueFrom`; Go's empty string may be
/// left out).
fn sets(entry: &Value, name: &str, value: &str) -> bool {
    name_of(entry) == name
        && entry.get("valueFrom").is_none_or(Value::is_null)
        && match entry.get("value") {
            None | Some(Value::Null) => value.is_empty(),
            Some(v) => v.as_str() == Some(value),
        }
}

/// Whether `env` ends with the jail's two entries, as bookend appends them.
fn ends_jailed(env: &[Value]) -> bool {
    matches!(env, [.., hermetic, resource]
        if sets(hermetic, HERMETIC_ENV, "1") && sets(resource, RESOURCE_NAME_ENV, ""))
}

/// Appends the jail to an author's step unless its env already ends with it (so a second pass
/// changes nothing); `true` when it changed the step. Only the last two entries count: Tekton
/// substitutes variables into env before the Pod exists, so an earlier entry's meaning is not
/// known here, and later entries win.
pub fn jail(step: &mut Value) -> bool {
    let Some(fields) = step.as_object_mut() else {
        return false;
    };
    let env = fields
        .entry("env")
        .or_insert_with(|| Value::Array(Vec::new()));
    if env.is_null() {
        *env = Value::Array(Vec::new());
    }
    let Some(entries) = env.as_array_mut() else {
        return false;
    };
    if ends_jailed(entries) {
        return false;
    }
    entries.extend(jail_entries());
    true
}

/// What the kubelet gives a container for `name` from its `env` (the last entry of the name
/// wins, and `env` beats `envFrom`): `Some(Some(v))` a literal value, `Some(None)` a value from
/// elsewhere (`valueFrom`), `None` no entry (then `envFrom` or the image decide).
fn effective<'e>(env: &'e [Value], name: &str) -> Option<Option<&'e str>> {
    let entry = env.iter().rev().find(|e| name_of(e) == name)?;
    if entry.get("valueFrom").is_some_and(|v| !v.is_null()) {
        return Some(None);
    }
    Some(Some(
        entry.get("value").and_then(Value::as_str).unwrap_or(""),
    ))
}

/// Whether a container's env makes Tekton's entrypoint drop its network, for certain.
pub fn effectively_jailed(env: &[Value]) -> bool {
    effective(env, HERMETIC_ENV) == Some(Some("1"))
        && effective(env, RESOURCE_NAME_ENV) == Some(Some(""))
}

/// Whether a container's env may make Tekton's entrypoint drop its network.
fn maybe_jailed(env: &[Value]) -> bool {
    matches!(effective(env, HERMETIC_ENV), Some(Some("1") | None))
}

fn list(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// Refuses what would run an author's code outside the jail, or undo it, under `policy`:
/// `task_spec` as the TaskRun carries it (its steps are the author's: `user` names which by
/// index), `run_spec` the TaskRun's spec (its podTemplate), `platform` Tekton's
/// default-pod-template.
pub fn check(
    task_spec: &Value,
    user: &[Value],
    run_spec: Option<&Value>,
    platform: Option<&Value>,
    policy: &Policy,
) -> Result<(), Denial> {
    let why = |what: &str| why(policy, what);
    for (i, step) in user.iter().enumerate() {
        if step.get("ref").is_some_and(|r| !r.is_null()) {
            return Err(Denial::field(
                format!("spec.taskSpec.steps[{i}].ref"),
                why(&format!(
                    "step {i}{} is a StepAction, which cannot carry the env that makes Tekton's entrypoint drop its network; write the step inline (image, script), or run it as an org step",
                    tekton_name(step)
                )),
            ));
        }
    }
    let template = task_spec.get("stepTemplate").filter(|t| t.is_object());
    for (holder, at) in user
        .iter()
        .enumerate()
        .map(|(i, s)| (Some(s), format!("spec.taskSpec.steps[{i}]")))
        .chain([(template, "spec.taskSpec.stepTemplate".to_owned())])
    {
        let Some(holder) = holder else { continue };
        for key in OUTSIDE_THE_ENTRYPOINT {
            if holder.get(*key).is_some_and(|v| !v.is_null()) {
                return Err(Denial::field(
                    format!("{at}.{key}"),
                    why(&format!(
                        "the kubelet runs a {key} in the step's container outside Tekton's entrypoint, with the Pod's network; remove it"
                    )),
                ));
            }
        }
    }
    if !list(task_spec.get("sidecars")).is_empty() {
        return Err(Denial::field(
            "spec.taskSpec.sidecars",
            why(
                "sidecars share the Pod's network and the steps' volumes, so a sidecar could carry a step's traffic (through a socket in a shared volume); remove the sidecars, or run the service the steps need inside a step",
            ),
        ));
    }
    check_host_paths(Some(task_spec), "spec.taskSpec.volumes", policy)?;
    check_run(run_spec, platform, policy)
}

fn why(policy: &Policy, what: &str) -> String {
    format!(
        "{} requires the TaskRun's own steps to run without network (userSteps.network: None), and {what}",
        policy.id
    )
}

fn check_host_paths(holder: Option<&Value>, at: &str, policy: &Policy) -> Result<(), Denial> {
    {
        for (i, volume) in list(holder.and_then(|h| h.get("volumes")))
            .iter()
            .enumerate()
        {
            if volume.get("hostPath").is_some_and(|v| !v.is_null()) {
                return Err(Denial::field(
                    format!("{at}[{i}].hostPath"),
                    why(
                        policy,
                        "a directory of the node can hold a socket to a networked service (a container runtime's, a proxy's); use an emptyDir, configMap, secret or a workspace",
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The TaskRun's fields outside its taskSpec (its podTemplate) and Tekton's
/// default-pod-template (`platform`), under `policy`: checked for every Task source, the
/// remote ones included.
pub fn check_run(
    run_spec: Option<&Value>,
    platform: Option<&Value>,
    policy: &Policy,
) -> Result<(), Denial> {
    check_host_paths(
        run_spec.and_then(|s| s.get("podTemplate")),
        "spec.podTemplate.volumes",
        policy,
    )?;
    // Tekton appends podTemplate env to every step after the step's own: it would come after
    // the jail's entries and win.
    for (holder, at) in [
        (
            run_spec.and_then(|s| s.get("podTemplate")),
            "spec.podTemplate.env",
        ),
        (
            platform,
            "Tekton's default-pod-template (ConfigMap config-defaults) env",
        ),
    ] {
        for (i, entry) in list(holder.and_then(|h| h.get("env"))).iter().enumerate() {
            let name = name_of(entry);
            if name == HERMETIC_ENV || name == RESOURCE_NAME_ENV {
                return Err(Denial::field(
                    format!("{at}[{i}]"),
                    why(
                        policy,
                        &format!(
                            "Tekton appends podTemplate env to every step after the step's own env, so {name} there would decide whether steps lose the network (the TaskRun's steps keep it, or org steps lose it); remove the entry"
                        ),
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn tekton_name(step: &Value) -> String {
    step.get("name")
        .and_then(Value::as_str)
        .map(|n| format!(" ({n:?})"))
        .unwrap_or_default()
}

/// The Pod backstop for a TaskRun under a policy that requires hermetic user steps: every step
/// container that is not bookend's (`step-<prefix>…`, whose content the other checks pin to
/// the policies) must be jailed by its effective env and run nothing outside the entrypoint;
/// bookend's must not be; no sidecar but Tekton's own; no hostPath volume mounted by the
/// author's containers. `Err` says what is wrong, for the denial.
pub fn check_pod(pod: &Value, prefix: &str) -> Result<(), String> {
    let ours = format!("step-{prefix}");
    let containers = list(pod.pointer("/spec/containers"));
    let host_paths: Vec<&str> = list(pod.pointer("/spec/volumes"))
        .iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name_of)
        .collect();
    for container in containers {
        let name = name_of(container);
        let env = list(container.get("env"));
        if name.starts_with(&ours) {
            if maybe_jailed(env) {
                return Err(format!(
                    "org container {name} carries {HERMETIC_ENV}, which would take its network (org steps keep it)"
                ));
            }
            continue;
        }
        if name == TEKTON_RESULTS_SIDECAR {
            continue;
        }
        if !name.starts_with("step-") {
            return Err(format!(
                "container {name} is not a step: the TaskRun's steps run without network (userSteps.network: None), and a sidecar shares the Pod's network with them"
            ));
        }
        if !effectively_jailed(env) {
            return Err(format!(
                "container {name}, one of the TaskRun's own steps, would keep the network: its env must end with {HERMETIC_ENV}=1 and an empty {RESOURCE_NAME_ENV} (userSteps.network: None)"
            ));
        }
        for key in OUTSIDE_THE_ENTRYPOINT {
            if container.get(*key).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "container {name}, one of the TaskRun's own steps, has a {key}, which runs outside Tekton's entrypoint with the Pod's network"
                ));
            }
        }
        if let Some(mount) = list(container.get("volumeMounts"))
            .iter()
            .find(|m| host_paths.contains(&name_of(m)))
        {
            return Err(format!(
                "container {name}, one of the TaskRun's own steps, mounts hostPath volume {}, which can hold a socket to a networked service",
                name_of(mount)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_jail_is_appended_once_and_beats_earlier_entries() {
        let mut step = json!({"name": "build", "image": "go",
            "env": [{"name": "TEKTON_RESOURCE_NAME", "value": "x"},
                    {"name": "TEKTON_HERMETIC", "value": "0"}]});
        assert!(!effectively_jailed(list(step.get("env"))));
        assert!(jail(&mut step));
        assert!(effectively_jailed(list(step.get("env"))));
        let once = step.clone();
        assert!(!jail(&mut step), "a second pass changes nothing");
        assert_eq!(step, once);
        // As the API server stores it (Go drops the empty value): still recognised.
        let mut stored = json!({"env": [{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME"}]});
        assert!(!jail(&mut stored));
        // No env, or a null one.
        for mut step in [json!({"name": "a"}), json!({"name": "a", "env": null})] {
            assert!(jail(&mut step));
            assert_eq!(step["env"].as_array().unwrap().len(), 2);
        }
    }

    #[test]
    fn only_the_last_two_entries_count_as_the_jail() {
        // A later entry (its name possibly a variable Tekton substitutes) follows them.
        let mut step = json!({"env": [{"name": "TEKTON_HERMETIC", "value": "1"},
            {"name": "TEKTON_RESOURCE_NAME", "value": ""},
            {"name": "$(params.n)", "value": "x"}]});
        assert!(jail(&mut step));
        let env = step["env"].as_array().unwrap();
        assert!(ends_jailed(env));
        // valueFrom in the last entries is not the jail.
        let mut step = json!({"env": [{"name": "TEKTON_HERMETIC", "value": "1"},
            {"name": "TEKTON_RESOURCE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]});
        assert!(jail(&mut step));
    }

    #[test]
    fn effective_env_is_the_last_entry_of_a_name() {
        let jailed =
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME"}]);
        assert!(effectively_jailed(jailed.as_array().unwrap()));
        for env in [
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}]),
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}, {"name": "TEKTON_RESOURCE_NAME", "value": "x"}]),
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}, {"name": "TEKTON_HERMETIC", "value": "true"}]),
            json!([{"name": "TEKTON_HERMETIC", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}]),
            json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]),
        ] {
            assert!(!effectively_jailed(env.as_array().unwrap()), "{env}");
        }
    }

    #[test]
    fn the_pod_check_wants_author_steps_jailed_and_org_steps_not() {
        let jailed = json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}]);
        let pod = |build_env: &Value, org_env: &Value, extra: Value| {
            let mut pod = json!({"spec": {"containers": [
                {"name": "step-bookend-fetch", "env": org_env},
                {"name": "step-build", "env": build_env},
            ], "volumes": [{"name": "sock", "hostPath": {"path": "/run/docker.sock"}}]}});
            if !extra.is_null() {
                pod["spec"]["containers"]
                    .as_array_mut()
                    .unwrap()
                    .push(extra);
            }
            pod
        };
        assert_eq!(
            check_pod(&pod(&jailed, &json!([]), Value::Null), "bookend-"),
            Ok(())
        );
        assert!(
            check_pod(&pod(&json!([]), &json!([]), Value::Null), "bookend-")
                .unwrap_err()
                .contains("step-build")
        );
        assert!(
            check_pod(&pod(&jailed, &jailed, Value::Null), "bookend-")
                .unwrap_err()
                .contains("step-bookend-fetch")
        );
        let sidecar = json!({"name": "sidecar-proxy"});
        assert!(check_pod(&pod(&jailed, &json!([]), sidecar), "bookend-").is_err());
        let tekton = json!({"name": "sidecar-tekton-log-results"});
        assert_eq!(
            check_pod(&pod(&jailed, &json!([]), tekton), "bookend-"),
            Ok(())
        );
        let mounting = json!({"name": "step-docker", "env": jailed.clone(),
            "volumeMounts": [{"name": "sock", "mountPath": "/var/run/docker.sock"}]});
        assert!(
            check_pod(&pod(&jailed, &json!([]), mounting), "bookend-")
                .unwrap_err()
                .contains("hostPath")
        );
        let hooked = json!({"name": "step-hook", "env": jailed.clone(),
            "lifecycle": {"postStart": {"exec": {"command": ["curl", "x"]}}}});
        assert!(check_pod(&pod(&jailed, &json!([]), hooked), "bookend-").is_err());
    }
}
