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
//! env) is refused while such a policy applies, and so is what the jail does not cover: a node
//! that is not Linux (Tekton's Windows entrypoint ignores `TEKTON_HERMETIC`), and a volume the
//! kubelet mounts over the network (nfs, csi, …) from the host's network namespace. The Pod
//! backstop checks the result where the steps run ([`check_pod`]).

use serde_json::{Value, json};

use super::Denial;
use crate::policy::{Policy, Settings};

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

/// Tekton's own init containers (`pkg/pod`: prepare, place-scripts, working-dir-initializer):
/// they copy Tekton's binaries and the scripts before any step starts.
const TEKTON_INIT_CONTAINERS: &[&str] = &["prepare", "place-scripts", "working-dir-initializer"];

/// Volume sources the kubelet fills from the API server or the node's own disk, or that are
/// the platform's storage (a PersistentVolumeClaim's StorageClass, an ephemeral volume's
/// claim): nothing in them reaches a network from inside the jail. Every other source (nfs,
/// csi, iscsi, cephfs, glusterfs, rbd, flexVolume, azureFile, …) is mounted by the kubelet in
/// the host's network namespace, and a step could reach the network through it.
pub const LOCAL_VOLUME_SOURCES: &[&str] = &[
    "emptyDir",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
    "persistentVolumeClaim",
    "ephemeral",
];

/// The node labels that name its operating system (the beta one is deprecated but still read
/// by the scheduler where nodes carry it).
const OS_LABELS: &[&str] = &["kubernetes.io/os", "beta.kubernetes.io/os"];

/// Why only Linux: Tekton's entrypoint reads `TEKTON_HERMETIC` only in its Linux build
/// (`cmd/entrypoint/runner.go` is `//go:build !windows`).
const ONLY_LINUX: &str = "Tekton's entrypoint drops a step's network only on Linux (on Windows it ignores TEKTON_HERMETIC), so a step on another node would keep the network";

/// The first applied policy that requires hermetic user steps: one is enough (the strictest
/// wins).
pub fn requiring<'p>(applied: &[&'p Policy]) -> Option<&'p Policy> {
    applied
        .iter()
        .copied()
        .find(|p| p.spec.user_steps.hermetic())
}

/// Under a ClusterStepPolicy's `userSteps.network: None`, refuses a StepPolicy that adds steps:
/// org steps keep the network, and a namespace's own policy is not the platform's — its steps
/// would run networked right before (or after) the jailed ones, in their Pod and workspace,
/// written by whoever administers the namespace (who may also write the TaskRuns). A
/// StepPolicy's own `userSteps.network: None` leaves every policy's steps the network: the
/// namespace jails only its TaskRuns' steps there.
pub fn check_policy_levels(applied: &[&Policy]) -> Result<(), Denial> {
    let Some(platform) = applied
        .iter()
        .find(|p| p.spec.user_steps.hermetic() && p.id.namespace().is_none())
    else {
        return Ok(());
    };
    let Some(namespaced) = applied
        .iter()
        .find(|p| p.id.namespace().is_some() && p.step_names().next().is_some())
    else {
        return Ok(());
    };
    Err(Denial::policy(
        namespaced,
        format!(
            "adds steps ({}) that would run with the Pod's network beside the steps {} requires to run without it (userSteps.network: None): a namespace's own policy steps are not the platform's, so they may not keep the network here; remove the steps from the StepPolicy (or narrow its match), or ask the platform team to make them part of a ClusterStepPolicy",
            namespaced.step_names().collect::<Vec<_>>().join(", "),
            platform.id
        ),
    ))
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

/// Jails each of the author's steps (`user`, the stepTemplate already written into them) under
/// `policy`; `true` when it changed one. A step whose `env` is not a list (Tekton would refuse
/// it too) is refused, naming it: `jail` can only append to a list.
pub fn jail_all(user: &mut [Value], policy: &Policy) -> Result<bool, Denial> {
    if let Some((i, step)) = user
        .iter()
        .enumerate()
        .find(|(_, s)| s.get("env").is_some_and(|e| !e.is_array() && !e.is_null()))
    {
        return Err(Denial::field(
            format!("spec.taskSpec.steps[{i}].env"),
            why(
                policy,
                &format!(
                    "step {i}{}: env (with the stepTemplate's written in) must be a list of variables ({{name, value}}), as Tekton requires, for bookend to append the entries that make Tekton's entrypoint drop the step's network; write env as a list",
                    tekton_name(step)
                ),
            ),
        ));
    }
    Ok(user.iter_mut().fold(false, |changed, s| jail(s) | changed))
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
    for (i, step) in user.iter().enumerate() {
        check_step_identity(step, template, &format!("spec.taskSpec.steps[{i}]"), policy)?;
    }
    if !list(task_spec.get("sidecars")).is_empty() {
        return Err(Denial::field(
            "spec.taskSpec.sidecars",
            why(
                "sidecars share the Pod's network and the steps' volumes, so a sidecar could carry a step's traffic (through a socket in a shared volume); remove the sidecars, or run the service the steps need inside a step",
            ),
        ));
    }
    check_volumes(
        list(task_spec.get("volumes")),
        "spec.taskSpec.volumes",
        &[],
        policy,
    )?;
    check_run(run_spec, platform, policy)
}

fn why(policy: &Policy, what: &str) -> String {
    format!(
        "{} requires the TaskRun's own steps to run without network (userSteps.network: None), and {what}",
        policy.id
    )
}

/// Why a step that is not root, or lacks `CAP_SETUID`/`CAP_SETGID`, never runs in the jail.
const NEEDS_ROOT: &str = "Tekton's entrypoint maps every user and group id into the jail's user namespace, which only root with the CAP_SETUID and CAP_SETGID capabilities may do (measured: a step with runAsUser 1000 fails to start, as if it had exited 1), so the step could never run";

/// A securityContext field of a step as Tekton's stepTemplate merge leaves it (the step's own
/// value, else the template's): the value and where it was written.
fn step_field<'v>(
    step: &'v Value,
    template: Option<&'v Value>,
    at: &str,
    path: &str,
) -> Option<(&'v Value, String)> {
    let pointer = format!("/securityContext/{}", path.replace('.', "/"));
    let own = step.pointer(&pointer).filter(|v| !v.is_null());
    match own {
        Some(v) => Some((v, format!("{at}.securityContext.{path}"))),
        None => template?
            .pointer(&pointer)
            .filter(|v| !v.is_null())
            .map(|v| {
                (
                    v,
                    format!("spec.taskSpec.stepTemplate.securityContext.{path}"),
                )
            }),
    }
}

/// Refuses, where the TaskRun writes it, what keeps an author's step from ever starting in its
/// jail: a non-root user (`runAsUser` other than 0, `runAsNonRoot: true`: the kubelet refuses
/// a root image then, and a non-root one cannot map the ids) or dropped `SETUID`/`SETGID`
/// capabilities. Without this the step fails like one that exited 1. (A stricter seccomp
/// profile may refuse user namespaces too; whether it does is the runtime's, and bookend's jail
/// check reports it.)
fn check_step_identity(
    step: &Value,
    template: Option<&Value>,
    at: &str,
    policy: &Policy,
) -> Result<(), Denial> {
    let refuse = |field: String, what: String| {
        Err(Denial::field(
            field,
            why(
                policy,
                &format!(
                    "{what}: {NEEDS_ROOT}; run the step as root (runAsUser 0) with the default capabilities, or make it an org step"
                ),
            ),
        ))
    };
    if let Some((user, field)) = step_field(step, template, at, "runAsUser")
        && user.as_i64() != Some(0)
    {
        return refuse(field, format!("the step runs as user {user}"));
    }
    if let Some((non_root, field)) = step_field(step, template, at, "runAsNonRoot")
        && non_root.as_bool() == Some(true)
    {
        return refuse(field, "the step must run as a non-root user".to_owned());
    }
    if let Some((drop, field)) = step_field(step, template, at, "capabilities.drop") {
        for (k, capability) in list(Some(drop)).iter().enumerate() {
            let name = capability.as_str().unwrap_or("").to_ascii_uppercase();
            let name = name.strip_prefix("CAP_").unwrap_or(&name);
            if matches!(name, "ALL" | "SETUID" | "SETGID") {
                return refuse(
                    format!("{field}[{k}]"),
                    format!("the step drops {capability}"),
                );
            }
        }
    }
    Ok(())
}

/// Refuses a Pod-level securityContext (the TaskRun's podTemplate, else the platform's
/// default-pod-template: Tekton takes the whole field from one of them) that runs the Pod's
/// containers as non-root: bookend's jail check, which sets no user of its own, could never
/// start in the jail, nor could any step that does not set root itself.
fn check_pod_identity(
    run_spec: Option<&Value>,
    platform: Option<&Value>,
    policy: &Policy,
) -> Result<(), Denial> {
    let own = run_spec
        .and_then(|s| s.pointer("/podTemplate/securityContext"))
        .filter(|c| !c.is_null());
    let (context, at) = match own {
        Some(c) => (c, "spec.podTemplate.securityContext"),
        None => match platform
            .and_then(|p| p.get("securityContext"))
            .filter(|c| !c.is_null())
        {
            Some(c) => (
                c,
                "Tekton's default-pod-template (ConfigMap config-defaults) securityContext",
            ),
            None => return Ok(()),
        },
    };
    let what = if context
        .get("runAsUser")
        .is_some_and(|u| !u.is_null() && u.as_i64() != Some(0))
    {
        (
            "runAsUser",
            format!("the Pod runs as user {}", context["runAsUser"]),
        )
    } else if context.get("runAsNonRoot").and_then(Value::as_bool) == Some(true) {
        (
            "runAsNonRoot",
            "the Pod must run as a non-root user".to_owned(),
        )
    } else {
        return Ok(());
    };
    Err(Denial::field(
        format!("{at}.{}", what.0),
        why(
            policy,
            &format!(
                "{}: {NEEDS_ROOT}, nor could bookend's jail check; leave the Pod's user to the steps' images (root), or drop userSteps.network: None",
                what.1
            ),
        ),
    ))
}

/// The first volume source of `volume` (a Volume, or a workspace binding when `extra` holds
/// `volumeClaimTemplate`) that is not a local one; `name` and `subPath` are not sources.
fn remote_source<'v>(volume: &'v Value, extra: &[&str]) -> Option<&'v str> {
    volume.as_object()?.iter().find_map(|(key, value)| {
        let local = matches!(key.as_str(), "name" | "subPath")
            || LOCAL_VOLUME_SOURCES.contains(&key.as_str())
            || extra.contains(&key.as_str());
        (!local && !value.is_null()).then_some(key.as_str())
    })
}

fn allowed_sources(extra: &[&str]) -> String {
    LOCAL_VOLUME_SOURCES
        .iter()
        .chain(extra)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// The author's volumes or workspace bindings (`volumes`, at `at`; `extra` the sources a
/// binding adds): local sources only.
fn check_volumes(
    volumes: &[Value],
    at: &str,
    extra: &[&str],
    policy: &Policy,
) -> Result<(), Denial> {
    for (i, volume) in volumes.iter().enumerate() {
        let Some(source) = remote_source(volume, extra) else {
            continue;
        };
        let what = if source == "hostPath" {
            format!(
                "a directory of the node can hold a socket to a networked service (a container runtime's, a proxy's); use one of {}",
                allowed_sources(extra)
            )
        } else {
            format!(
                "the kubelet mounts a {source} volume from the node's network namespace (a network filesystem's server, a storage driver), so a step could reach the network through it; use one of {} (a PersistentVolumeClaim's storage is the platform's StorageClass)",
                allowed_sources(extra)
            )
        };
        return Err(Denial::field(
            format!("{at}[{i}].{source}"),
            why(policy, &what),
        ));
    }
    Ok(())
}

/// Where `template` (a podTemplate, or a Pod's spec) lets the scheduler put the Pod on a node
/// that is not Linux: `Some((field, value))` with the field under `template`. A nodeSelector OS
/// label must say `linux`; a node affinity expression naming an OS label (required or
/// preferred) must be `In` with only `linux`.
fn non_linux(template: &Value) -> Option<(String, String)> {
    for label in OS_LABELS {
        if let Some(os) = template.pointer(&format!("/nodeSelector/{}", label.replace('/', "~1")))
            && os.as_str() != Some("linux")
        {
            return Some((format!("nodeSelector[\"{label}\"]"), os.to_string()));
        }
    }
    let node_affinity = template.pointer("/affinity/nodeAffinity");
    let required = list(node_affinity.and_then(|a| {
        a.pointer("/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
    }))
    .iter()
    .enumerate()
    .map(|(j, term)| {
        (
            format!(
                "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{j}]"
            ),
            term,
        )
    });
    let preferred = list(
        node_affinity.and_then(|a| a.get("preferredDuringSchedulingIgnoredDuringExecution")),
    )
    .iter()
    .enumerate()
    .filter_map(|(j, p)| {
        Some((
            format!(
                "affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{j}].preference"
            ),
            p.get("preference")?,
        ))
    });
    for (at, term) in required.chain(preferred) {
        for (k, expression) in list(term.get("matchExpressions")).iter().enumerate() {
            let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
            if !OS_LABELS.contains(&key) {
                continue;
            }
            let values = list(expression.get("values"));
            let only_linux = expression.get("operator").and_then(Value::as_str) == Some("In")
                && !values.is_empty()
                && values.iter().all(|v| v.as_str() == Some("linux"));
            if !only_linux {
                return Some((
                    format!("{at}.matchExpressions[{k}]"),
                    expression.to_string(),
                ));
            }
        }
    }
    None
}

fn check_linux(template: Option<&Value>, at: &str, policy: &Policy) -> Result<(), Denial> {
    match template.and_then(non_linux) {
        None => Ok(()),
        Some((field, value)) => Err(Denial::field(
            format!("{at}.{field}"),
            why(
                policy,
                &format!(
                    "{ONLY_LINUX} ({value} can select a node that is not Linux); select only kubernetes.io/os: linux, or remove it"
                ),
            ),
        )),
    }
}

/// The TaskRun's fields outside its taskSpec (its podTemplate) and Tekton's
/// default-pod-template (`platform`), under `policy`: checked for every Task source, the
/// remote ones included.
pub fn check_run(
    run_spec: Option<&Value>,
    platform: Option<&Value>,
    policy: &Policy,
) -> Result<(), Denial> {
    let pod_template = run_spec.and_then(|s| s.get("podTemplate"));
    check_volumes(
        list(pod_template.and_then(|t| t.get("volumes"))),
        "spec.podTemplate.volumes",
        &[],
        policy,
    )?;
    // Tekton makes each binding a Pod volume; it creates a volumeClaimTemplate's claim itself.
    check_volumes(
        list(run_spec.and_then(|s| s.get("workspaces"))),
        "spec.workspaces",
        &["volumeClaimTemplate"],
        policy,
    )?;
    check_pod_identity(run_spec, platform, policy)?;
    // Tekton builds a Windows Pod when the TaskRun's nodeSelector says so (`usesWindows`), and
    // the scheduler places the Pod by the merged podTemplate: neither may leave Linux.
    check_linux(pod_template, "spec.podTemplate", policy)?;
    check_linux(
        platform,
        "Tekton's default-pod-template (ConfigMap config-defaults)",
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

/// The Pod backstop for a TaskRun under a policy that requires hermetic user steps: the Pod
/// runs on Linux (where Tekton's entrypoint jails); every step container that is not
/// bookend's (`step-<prefix>…`, whose content the other checks pin to the policies) must be
/// jailed by its effective env and run nothing outside the entrypoint, and so must bookend's
/// jail check; bookend's others must not be;
/// no sidecar but Tekton's own, in `containers` or as a native sidecar (an init container with
/// `restartPolicy: Always`), and no init container but Tekton's; the author's step containers
/// mount only local volumes (bookend's and Tekton's internal ones are the other checks').
/// `Err` says what is wrong, for the denial.
pub fn check_pod(pod: &Value, settings: &Settings) -> Result<(), String> {
    let prefix = settings.prefix.as_str();
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    if let Some(os) = spec.pointer("/os/name")
        && os.as_str() != Some("linux")
    {
        return Err(format!("spec.os.name is {os}: {ONLY_LINUX}"));
    }
    if let Some((field, value)) = non_linux(spec) {
        return Err(format!(
            "spec.{field} ({value}) can select a node that is not Linux: {ONLY_LINUX}"
        ));
    }
    for container in list(spec.get("initContainers")) {
        let name = name_of(container);
        let native_sidecar =
            container.get("restartPolicy").and_then(Value::as_str) == Some("Always");
        if name == TEKTON_RESULTS_SIDECAR && native_sidecar {
            continue;
        }
        if native_sidecar {
            return Err(format!(
                "init container {name} is a sidecar (restartPolicy: Always, Tekton's enable-kubernetes-sidecar): the TaskRun's steps run without network (userSteps.network: None), and a sidecar shares the Pod's network with them"
            ));
        }
        if !TEKTON_INIT_CONTAINERS.contains(&name) {
            return Err(format!(
                "init container {name} is not one of Tekton's ({}): it would run with the Pod's network before the steps",
                TEKTON_INIT_CONTAINERS.join(", ")
            ));
        }
    }
    let ours = format!("step-{prefix}");
    // bookend's jail check runs in the jail like the author's steps (its content is the
    // composition's, checked before this).
    let jail_check = format!("step-{}", settings.jail_check_name());
    let volumes = list(spec.get("volumes"));
    // The author's containers never mount bookend's volumes (`check_author_mounts`), and
    // Tekton's internal ones are emptyDirs and downward API files.
    let remote = |volume: &str| {
        if volume.starts_with(prefix) || volume.starts_with("tekton-internal-") {
            return None;
        }
        volumes
            .iter()
            .find(|v| name_of(v) == volume)
            .and_then(|v| remote_source(v, &[]))
    };
    for container in list(spec.get("containers")) {
        let name = name_of(container);
        let env = list(container.get("env"));
        if name.starts_with(&ours) && name != jail_check {
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
        for mount in list(container.get("volumeMounts")) {
            let volume = name_of(mount);
            match remote(volume) {
                Some("hostPath") => {
                    return Err(format!(
                        "container {name}, one of the TaskRun's own steps, mounts hostPath volume {volume}, which can hold a socket to a networked service"
                    ));
                }
                Some(source) => {
                    return Err(format!(
                        "container {name}, one of the TaskRun's own steps, mounts volume {volume} ({source}), which the kubelet mounts from the node's network namespace; only {} volumes",
                        LOCAL_VOLUME_SOURCES.join(", ")
                    ));
                }
                None => {}
            }
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
            check_pod(&pod(&jailed, &json!([]), Value::Null), &Settings::default()),
            Ok(())
        );
        assert!(
            check_pod(
                &pod(&json!([]), &json!([]), Value::Null),
                &Settings::default()
            )
            .unwrap_err()
            .contains("step-build")
        );
        assert!(
            check_pod(&pod(&jailed, &jailed, Value::Null), &Settings::default())
                .unwrap_err()
                .contains("step-bookend-fetch")
        );
        let sidecar = json!({"name": "sidecar-proxy"});
        assert!(check_pod(&pod(&jailed, &json!([]), sidecar), &Settings::default()).is_err());
        let tekton = json!({"name": "sidecar-tekton-log-results"});
        assert_eq!(
            check_pod(&pod(&jailed, &json!([]), tekton), &Settings::default()),
            Ok(())
        );
        let mounting = json!({"name": "step-docker", "env": jailed.clone(),
            "volumeMounts": [{"name": "sock", "mountPath": "/var/run/docker.sock"}]});
        assert!(
            check_pod(&pod(&jailed, &json!([]), mounting), &Settings::default())
                .unwrap_err()
                .contains("hostPath")
        );
        let hooked = json!({"name": "step-hook", "env": jailed.clone(),
            "lifecycle": {"postStart": {"exec": {"command": ["curl", "x"]}}}});
        assert!(check_pod(&pod(&jailed, &json!([]), hooked), &Settings::default()).is_err());
        // bookend's jail check runs in the jail (unlike its other steps), and must.
        let check = json!({"name": "step-bookend-jail-check", "env": jailed.clone()});
        assert_eq!(
            check_pod(&pod(&jailed, &json!([]), check), &Settings::default()),
            Ok(())
        );
        let unjailed = json!({"name": "step-bookend-jail-check"});
        assert!(
            check_pod(&pod(&jailed, &json!([]), unjailed), &Settings::default())
                .unwrap_err()
                .contains("step-bookend-jail-check")
        );
    }

    /// The remote volume sources of Kubernetes' VolumeSource (all but the local ones).
    pub(crate) const REMOTE_SOURCES: &[&str] = &[
        "nfs",
        "csi",
        "iscsi",
        "cephfs",
        "glusterfs",
        "rbd",
        "flexVolume",
        "azureFile",
        "azureDisk",
        "fc",
        "flocker",
        "quobyte",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "vsphereVolume",
        "photonPersistentDisk",
        "awsElasticBlockStore",
        "gcePersistentDisk",
        "gitRepo",
        "image",
        "hostPath",
    ];

    #[test]
    fn only_local_volume_sources_pass() {
        for local in LOCAL_VOLUME_SOURCES {
            let volume = json!({"name": "v", local.to_string(): {}});
            assert_eq!(remote_source(&volume, &[]), None, "{local}");
        }
        for remote in REMOTE_SOURCES {
            let volume = json!({"name": "v", remote.to_string(): {"server": "nfs.example"}});
            assert_eq!(remote_source(&volume, &[]), Some(*remote));
        }
        // A binding: volumeClaimTemplate and subPath are its own; csi is not local there either.
        let binding = json!({"name": "src", "subPath": "x", "volumeClaimTemplate": {"spec": {}}});
        assert_eq!(remote_source(&binding, &["volumeClaimTemplate"]), None);
        let csi = json!({"name": "src", "csi": {"driver": "x"}});
        assert_eq!(remote_source(&csi, &["volumeClaimTemplate"]), Some("csi"));
        // A null source is no source.
        assert_eq!(
            remote_source(&json!({"name": "v", "nfs": null, "emptyDir": {}}), &[]),
            None
        );
    }

    #[test]
    fn a_template_that_can_leave_linux_is_named() {
        let linux = [
            json!({}),
            json!({"nodeSelector": {"kubernetes.io/os": "linux", "pool": "win"}}),
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}}),
        ];
        for template in linux {
            assert_eq!(non_linux(&template), None, "{template}");
        }
        let not_linux = [
            (
                json!({"nodeSelector": {"kubernetes.io/os": "windows"}}),
                "nodeSelector[\"kubernetes.io/os\"]",
            ),
            (
                json!({"nodeSelector": {"beta.kubernetes.io/os": "windows"}}),
                "nodeSelector[\"beta.kubernetes.io/os\"]",
            ),
            (
                json!({"nodeSelector": {"kubernetes.io/os": ""}}),
                "nodeSelector",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux", "windows"]}]}]}}}}),
                "nodeSelectorTerms[1].matchExpressions[0]",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["linux"]}]}]}}}}),
                "nodeSelectorTerms[0].matchExpressions[0]",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "Exists"}]}]}}}}),
                "matchExpressions[0]",
            ),
            (
                json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]}}]}}}),
                "preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0]",
            ),
        ];
        for (template, field) in not_linux {
            let (at, _) = non_linux(&template).unwrap_or_else(|| panic!("{template}"));
            assert!(at.contains(field), "{at} for {template}");
        }
    }

    #[test]
    fn the_pod_check_wants_linux_local_volumes_and_tektons_init_containers_only() {
        let jailed = json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME", "value": ""}]);
        let base = json!({"spec": {
            "initContainers": [{"name": "prepare"}, {"name": "place-scripts"}],
            "containers": [{"name": "step-bookend-fetch"},
                {"name": "step-build", "env": jailed, "volumeMounts": [
                    {"name": "ws-abc", "mountPath": "/workspace/src"},
                    {"name": "tekton-internal-workspace", "mountPath": "/workspace"}]}],
            "volumes": [{"name": "ws-abc", "persistentVolumeClaim": {"claimName": "c"}},
                {"name": "tekton-internal-workspace", "emptyDir": {}},
                {"name": "bookend-store", "csi": {"driver": "secrets-store.csi.k8s.io"}}]}});
        assert_eq!(check_pod(&base, &Settings::default()), Ok(()));
        let with = |f: &dyn Fn(&mut Value)| {
            let mut pod = base.clone();
            f(&mut pod);
            check_pod(&pod, &Settings::default())
        };
        // Tekton's results sidecar as a native sidecar is Tekton's.
        assert_eq!(
            with(&|p| p["spec"]["initContainers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "sidecar-tekton-log-results", "restartPolicy": "Always"}))),
            Ok(())
        );
        type Change<'c> = &'c dyn Fn(&mut Value);
        let refused: Vec<(Change, &str)> = vec![
            (
                &|p| p["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "windows"}),
                "nodeSelector",
            ),
            (
                &|p| p["spec"]["os"] = json!({"name": "windows"}),
                "spec.os.name",
            ),
            (
                &|p| {
                    p["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}]}]}}})
                },
                "nodeAffinity",
            ),
            (
                &|p| {
                    p["spec"]["initContainers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "sidecar-proxy", "restartPolicy": "Always"}))
                },
                "sidecar-proxy",
            ),
            (
                &|p| {
                    p["spec"]["initContainers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "prepare", "restartPolicy": "Always"}))
                },
                "restartPolicy: Always",
            ),
            (
                &|p| {
                    p["spec"]["initContainers"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "fetch"}))
                },
                "fetch",
            ),
            (
                &|p| p["spec"]["volumes"][0] = json!({"name": "ws-abc", "csi": {"driver": "x"}}),
                "(csi)",
            ),
            (
                &|p| {
                    p["spec"]["volumes"][0] =
                        json!({"name": "ws-abc", "nfs": {"server": "s", "path": "/"}})
                },
                "(nfs)",
            ),
        ];
        for (tamper, what) in refused {
            let e = with(tamper).unwrap_err();
            assert!(e.contains(what), "{what}: {e}");
        }
        // An org container may mount the policy's own volume, whatever its source.
        assert_eq!(
            with(&|p| p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "bookend-store", "mountPath": "/s"}])),
            Ok(())
        );
    }
}
