//! Org steps run as their policy defines them, whatever the TaskRun's author sets that Tekton
//! merges into every step (docs/tekton-notes.md, "What reaches every step"):
//!
//! - `taskSpec.stepTemplate` is written into the author's own steps exactly as Tekton's merge
//!   would (`tekton::merge`), and removed, so the author's steps behave as before and org steps
//!   inherit nothing; refused when a user step is a StepAction (`ref`), whose content Tekton
//!   merges only when it builds the Pod;
//! - `spec.stepSpecs` naming a reserved step, TaskRun-level `spec.computeResources`,
//!   `podTemplate` `env`, `hostAliases`, `dnsConfig`, `dnsPolicy`, `hostNetwork` (unless equal to
//!   the platform's `default-pod-template`), `spec.debug` breakpoints on reserved steps (and
//!   `onFailure` under an Always or hermetic policy: it holds a failing step, or a failed jail
//!   check, for a debugger), and the
//!   `experimental.tekton.dev/execution-mode: hermetic` annotation are refused;
//! - a workspace mounted over a system directory, or one an org step runs from, is refused
//!   (Tekton mounts workspaces into every step through the stepTemplate it makes when it builds
//!   the Pod, at the path the author chose, verbatim).

use std::collections::BTreeSet;

use serde_json::Value;

use super::Denial;
use super::canonical::equivalent;
use super::lookup::Lookup;
use super::record;
use crate::patch;
use crate::policy::validate::mount_point;
use crate::policy::{Policy, Settings, WorkspaceMounts};
use crate::tekton::{self, ApiVersion, TaskRunView, merge};

/// Most entries of a keyed list (env, volumeMounts, …) bookend merges a stepTemplate's into.
pub const MAX_MERGED_LIST: usize = 256;

/// Most bytes a stepTemplate may add when bookend writes it into every user step.
pub const MAX_MATERIALISED_BYTES: usize = 1024 * 1024;

/// The annotation that makes Tekton set `TEKTON_HERMETIC=1` on every step (alpha), which drops
/// each step's network, org steps' included.
pub const EXECUTION_MODE_ANNOTATION: &str = "experimental.tekton.dev/execution-mode";

/// Top-level directories no workspace may be mounted over while org steps run beside it: a
/// mount there would replace what an org step's image runs (`/bin/sh`, its tools, its
/// libraries, its CA certificates) with the author's files.
const PROTECTED_DIRECTORIES: &[&str] = &[
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root",
    "run", "sbin", "srv", "sys", "tmp", "usr", "var", "tekton", "ko-app",
];

/// The params the applied policies' steps use (`$(params.<p>…)`, `$(params["<p>"])`,
/// `$(inputs.params.<p>)`), by name.
fn params_used_by(applied: &[&Policy]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for policy in applied {
        let Ok(text) = serde_json::to_string(&(&policy.pre_steps, &policy.post_steps)) else {
            continue;
        };
        for (i, _) in text.match_indices("params") {
            let before = &text[..i];
            if !(before.ends_with("$(") || before.ends_with("$(inputs.")) {
                continue;
            }
            let rest = &text[i + "params".len()..];
            let name: String = if let Some(r) = rest.strip_prefix('.') {
                r.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    .collect()
            } else if let Some(r) = rest
                .strip_prefix("[\\\"")
                .or_else(|| rest.strip_prefix("['"))
            {
                r.chars()
                    .take_while(|c| !matches!(c, '"' | '\'' | '\\'))
                    .collect()
            } else {
                continue;
            };
            // Tekton keys a string param `a.b` and the key `b` of an object param `a` alike
            // (`params.a.b`), the TaskRun's value over the Task's: every dotted prefix is a
            // param the step uses.
            let name = name.trim_end_matches('.');
            for (end, _) in name.match_indices('.').chain([(name.len(), "")]) {
                if end > 0 {
                    names.insert(name[..end].to_owned());
                }
            }
        }
    }
    names
}

/// A param value an org step uses must not carry `$(`: Tekton pastes it into the step, where
/// the kubelet expands `$(NAME)` against the step's other env variables and Tekton's entrypoint
/// replaces `$(steps.<s>.results.<r>)` at run time, so the value would become the org step's
/// secrets or another step's results (sent where the author says). Tekton pastes every value in
/// one pass, so a value ending in `$` before a `(`, or one starting with `(` after a `$`, makes
/// the same `$(` out of two harmless halves: refused too. Checked in the TaskRun's `spec.params`
/// and in the defaults of the Task it runs.
pub fn check_param_values(
    spec: &Value,
    task_spec: Option<&Value>,
    applied: &[&Policy],
) -> Result<(), Denial> {
    let used = params_used_by(applied);
    check_params(spec.get("params"), "spec.params", "value", &used)?;
    if let Some(task_spec) = task_spec {
        check_params(
            task_spec.get("params"),
            "spec.taskSpec.params",
            "default",
            &used,
        )?;
    }
    Ok(())
}

/// [`check_param_values`] for the defaults of a Task resolved after the TaskRun's admission (the
/// dry-run mutation of a remote Task): `at` names the Task's params (`spec.params`).
pub fn check_param_defaults(
    task_spec: &Value,
    at: &str,
    applied: &[&Policy],
) -> Result<(), Denial> {
    check_params(
        task_spec.get("params"),
        at,
        "default",
        &params_used_by(applied),
    )
}

fn check_params(
    params: Option<&Value>,
    at: &str,
    key: &str,
    used: &BTreeSet<String>,
) -> Result<(), Denial> {
    if used.is_empty() {
        return Ok(());
    }
    let carries = |value: &Value| {
        let mut found = false;
        walk_strings(value, &mut |s| {
            found |= s.contains("$(") || s.ends_with('$') || s.starts_with('(');
        });
        found
    };
    for (i, param) in list(params).iter().enumerate() {
        let name = param.get("name").and_then(Value::as_str).unwrap_or("");
        if used.contains(name)
            && let Some(value) = param.get(key)
            && carries(value)
        {
            return Err(Denial::field(
                format!("{at}[{i}].{key}"),
                format!(
                    "param {name:?} holds \"$(\" (or a \"$\" at its end or a \"(\" at its start, which Tekton's pasting joins into one), and an org step uses $(params.{name}): Kubernetes and Tekton's entrypoint expand \"$(…)\" again inside the step at run time, into its other variables (its credentials) or other steps' results, so the value would carry them where it goes; pass the value without \"$(\""
                ),
            ));
        }
    }
    Ok(())
}

fn walk_strings(value: &Value, f: &mut dyn FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| walk_strings(v, f)),
        Value::Object(fields) => fields.values().for_each(|v| walk_strings(v, f)),
        _ => {}
    }
}

/// Refuses the TaskRun fields (outside its taskSpec) that would reach org steps. Called when
/// Enforce policies put steps into the TaskRun on any path (inline, inlined, or a remote Task
/// the dry-run mutation injects into).
pub fn check_run_fields(
    view: &TaskRunView<'_>,
    settings: &Settings,
    lookup: &dyn Lookup,
    applied: &[&Policy],
) -> Result<(), Denial> {
    let Some(spec) = view.spec() else {
        return Ok(());
    };
    let prefix = settings.prefix.as_str();
    let step_specs = match view.api_version {
        ApiVersion::V1 => "stepSpecs",
        ApiVersion::V1beta1 => "stepOverrides",
    };
    for (i, entry) in list(spec.get(step_specs)).iter().enumerate() {
        if let Some(name) = entry
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| n.starts_with(prefix))
        {
            return Err(Denial::field(
                format!("spec.{step_specs}[{i}].name"),
                format!(
                    "names bookend's step {name:?}: Tekton sets the compute resources of the step of that name from it, so the TaskRun would change an org step; remove the entry (org steps get the resources their policy gives them)"
                ),
            ));
        }
    }
    // Workspaces bound in the TaskRun but not declared by its Task are declared by Tekton
    // ("propagated"), at /workspace/<name>.
    for (i, binding) in list(spec.get("workspaces")).iter().enumerate() {
        let name = binding.get("name").and_then(Value::as_str).unwrap_or("");
        if !is_workspace_name(name) {
            return Err(Denial::field(
                format!("spec.workspaces[{i}].name"),
                format!(
                    "{name:?}: Tekton mounts a workspace at /workspace/<name> in every step, org steps included, so a name must be a plain name (letters, digits, '-', '_', '.', not '..', no '/' or variables)"
                ),
            ));
        }
    }
    if spec.get("computeResources").is_some_and(is_set) {
        return Err(Denial::field(
            "spec.computeResources",
            "Tekton gives TaskRun-level compute resources to every step, org steps included (each gets the whole limit); set computeResources on your own steps instead, or name them in spec.stepSpecs",
        ));
    }
    if let Some(debug) = spec.get("debug") {
        for (i, step) in list(debug.pointer("/breakpoints/beforeSteps"))
            .iter()
            .enumerate()
        {
            if let Some(name) = step.as_str().filter(|n| n.starts_with(prefix)) {
                return Err(Denial::field(
                    format!("spec.debug.breakpoints.beforeSteps[{i}]"),
                    format!(
                        "a breakpoint before bookend's step {name:?} would hold org steps back; set breakpoints on your own steps only"
                    ),
                ));
            }
        }
        // Tekton's entrypoint waits for a debugger after any failing step, before it looks at
        // `onError` (`CheckForBreakpointOnFailure` in cmd/entrypoint, v0.62 to v1.15) and
        // without writing the step's post file: the next step, an Always post-step included,
        // waits until someone continues, or forever.
        let on_failure = debug
            .pointer("/breakpoints/onFailure")
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty());
        if let Some(policy) = always(applied).filter(|_| on_failure) {
            return Err(Denial::field(
                "spec.debug.breakpoints.onFailure",
                format!(
                    "policy {} runs its post-steps whatever the TaskRun's steps do (postStepsRun: Always), but with a failure breakpoint Tekton's entrypoint holds a failing step for a debugger, even under onError: continue, so the post-steps would not run until someone continues; remove onFailure (debug with beforeSteps breakpoints on your own steps)",
                    policy.id
                ),
            ));
        }
        // The same hold on bookend's jail check, where the node cannot set the jail up: the
        // TaskRun would hang until its timeout instead of failing as `hermetic_jail_failed`.
        if let Some(policy) = super::hermetic::requiring(applied).filter(|_| on_failure) {
            return Err(Denial::field(
                "spec.debug.breakpoints.onFailure",
                format!(
                    "policy {} runs the TaskRun's steps without network (userSteps.network: None), and where a node cannot set up that jail bookend's jail check fails; with a failure breakpoint Tekton's entrypoint holds it for a debugger, so the TaskRun would hang until its timeout instead of saying why; remove onFailure (debug with beforeSteps breakpoints on your own steps)",
                    policy.id
                ),
            ));
        }
    }
    if let Some(template) = spec.get("podTemplate").filter(|t| t.is_object()) {
        check_pod_template(template, lookup.default_pod_template().as_ref(), prefix)?;
    }
    check_annotations(
        view.annotation(EXECUTION_MODE_ANNOTATION),
        "metadata.annotations",
    )
}

/// The first applied policy whose post-steps run whatever the TaskRun's steps do.
fn always<'p>(applied: &[&'p Policy]) -> Option<&'p Policy> {
    applied.iter().copied().find(|p| p.runs_post_steps_always())
}

/// Under a `postStepsRun: Always` policy every step's `onError` must be literal in a Task
/// resolved after the TaskRun's admission (`at` names its steps): the controller's dry-run,
/// where bookend injects, knows only the Task's param defaults, and Tekton substitutes the
/// TaskRun's values afterwards, so `onError: $(params.mode)` left as `continue` could become
/// `stopAndFail` and stop the chain before the Always post-steps. (An inline TaskRun carries its
/// values: there bookend resolves the step's `onError` as Tekton will.)
pub fn check_on_error_literal(
    steps: Option<&Value>,
    at: &str,
    applied: &[&Policy],
) -> Result<(), Denial> {
    let Some(policy) = always(applied) else {
        return Ok(());
    };
    for (i, step) in list(steps).iter().enumerate() {
        if let Some(on_error) = step
            .get("onError")
            .and_then(Value::as_str)
            .filter(|v| v.contains("$("))
        {
            return Err(Denial::field(
                format!("{at}[{i}].onError"),
                format!(
                    "step {} sets onError to {on_error:?}: Tekton substitutes it from the TaskRun's params only after bookend injected policy {}'s steps into this Task (it sees only the defaults), so a TaskRun could turn a failing step into one that stops the chain before the postStepsRun: Always post-steps; write onError literally (continue or stopAndFail)",
                    tekton::step_name(step).map_or_else(|| format!("#{i}"), |n| format!("{n:?}")),
                    policy.id
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses an execution-mode annotation that would drop org steps' network.
pub fn check_annotations(execution_mode: Option<&str>, path: &str) -> Result<(), Denial> {
    if execution_mode.is_some_and(|m| m.trim() == "hermetic") {
        return Err(Denial::field(
            format!("{path}[{EXECUTION_MODE_ANNOTATION:?}]"),
            "hermetic execution mode makes Tekton take the network from every step, org steps included (they fetch and publish for the platform); remove the annotation",
        ));
    }
    Ok(())
}

/// `podTemplate` fields Tekton applies to every step container (env) or to the whole Pod (name
/// resolution, network), allowed only as the platform's `default-pod-template` sets them.
fn check_pod_template(
    template: &Value,
    default: Option<&Value>,
    prefix: &str,
) -> Result<(), Denial> {
    let default_field = |key: &str| default.and_then(|d| d.get(key)).filter(|v| is_set(v));
    let default_env = list(default_field("env"));
    for (i, entry) in list(template.get("env")).iter().enumerate() {
        let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
        if default_env.iter().any(|d| equivalent(d, entry)) {
            continue;
        }
        return Err(Denial::field(
            format!("spec.podTemplate.env[{i}]"),
            format!(
                "Tekton appends podTemplate env to every step, org steps included, after the step's own env (so it overrides what the policy sets); set {name:?} in your steps' env (or the Task's stepTemplate) instead"
            ),
        ));
    }
    for (key, why) in [
        (
            "hostAliases",
            "decides what names resolve to for every container, org steps included (the hosts they fetch from and publish to)",
        ),
        (
            "dnsConfig",
            "decides how every container resolves names, org steps included (the hosts they fetch from and publish to)",
        ),
        (
            "dnsPolicy",
            "decides how every container resolves names, org steps included (the hosts they fetch from and publish to)",
        ),
        (
            "hostNetwork",
            "puts every container, org steps included, on the node's network",
        ),
        (
            "runtimeClassName",
            "chooses the container runtime every container, org steps included, runs under",
        ),
        (
            "automountServiceAccountToken",
            "decides whether every container, org steps included, gets the service account's token",
        ),
    ] {
        // Present, even as a zero value: Tekton's defaulting keeps the TaskRun's field over the
        // platform's whenever it is there (`MergePodTemplateWithDefault`: pointers), so
        // `dnsPolicy: ""` or `automountServiceAccountToken: false` drop the platform's.
        let Some(value) = template.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let platform = default.and_then(|d| d.get(key)).filter(|v| !v.is_null());
        match platform {
            Some(d) if equivalent(d, value) => continue,
            None if !is_set(value) => continue,
            _ => {}
        }
        return Err(Denial::field(
            format!("spec.podTemplate.{key}"),
            format!(
                "{why}; remove it (a platform that needs it sets it in Tekton's default-pod-template)"
            ),
        ));
    }
    // The Pod's securityContext: Tekton's defaulting takes the TaskRun's whole when it is there,
    // so where the platform sets one, the TaskRun may only restate it.
    if let (Some(platform), Some(own)) = (
        default
            .and_then(|d| d.get("securityContext"))
            .filter(|v| !v.is_null()),
        template.get("securityContext").filter(|v| !v.is_null()),
    ) && !equivalent(platform, own)
    {
        return Err(Denial::field(
            "spec.podTemplate.securityContext",
            "replaces the platform's Pod securityContext (Tekton's default-pod-template) for every container, org steps included; remove it",
        ));
    }
    // Kernel parameters apply to the whole Pod and no step can set its own.
    if let Some(sysctls) = template
        .pointer("/securityContext/sysctls")
        .filter(|v| is_set(v))
        && !default
            .and_then(|d| d.pointer("/securityContext/sysctls"))
            .is_some_and(|d| equivalent(d, sysctls))
    {
        return Err(Denial::field(
            "spec.podTemplate.securityContext.sysctls",
            "kernel parameters apply to every container, org steps included, and no step can set its own; remove them (a platform that needs them sets them in Tekton's default-pod-template)",
        ));
    }
    // bookend's volume names are the policies'.
    for (i, volume) in list(template.get("volumes")).iter().enumerate() {
        if let Some(name) = volume.get("name").and_then(Value::as_str)
            && name.starts_with(prefix)
        {
            return Err(Denial::field(
                format!("spec.podTemplate.volumes[{i}].name"),
                format!("volume {name:?} uses bookend's reserved prefix; rename it"),
            ));
        }
    }
    Ok(())
}

/// The taskSpec members that reach org steps: refuses a workspace mounted where org steps would
/// run the author's files, the author's mounts of bookend's volumes and of Tekton's internal
/// ones, and a stepTemplate bookend cannot write into the author's steps.
pub fn check_task_spec(
    task_spec: &Value,
    user: &[Value],
    applied: &[&Policy],
    settings: &Settings,
) -> Result<(), Denial> {
    check_workspaces(task_spec, applied)?;
    check_mounts(task_spec, user, settings)?;
    check_record_param(task_spec)?;
    if let Some(template) = task_spec.get("stepTemplate").filter(|t| is_set(t))
        && template.is_object()
        && let Some((i, step)) = user
            .iter()
            .enumerate()
            .find(|(_, s)| s.get("ref").is_some_and(|r| !r.is_null()))
    {
        return Err(Denial::field(
            "spec.taskSpec.stepTemplate",
            format!(
                "Tekton merges the stepTemplate into every step, org steps included; bookend writes it into your own steps instead, but cannot into step {i}{}, whose content comes from a StepAction (ref): Tekton merges the stepTemplate into it only when it builds the Pod; give the StepAction what it needs (its params) and move the rest into the inline steps",
                tekton::step_name(step)
                    .map(|n| format!(" ({n:?})"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

/// A Task param with the name of bookend's record param: its steps would read bookend's record
/// as their input (and a param of another type would fail the run), and the record in the
/// provenance would be the Task's input rather than bookend's alone.
fn check_record_param(task_spec: &Value) -> Result<(), Denial> {
    match list(task_spec.get("params"))
        .iter()
        .position(record::is_record_param)
    {
        Some(i) => Err(Denial::field(
            format!("spec.taskSpec.params[{i}].name"),
            format!(
                "param {:?} is bookend's: it carries bookend's record of which policy injected which steps into the TaskRun's params, where Tekton Chains' provenance reads it (docs/provenance.md); rename the Task's param",
                record::PARAM
            ),
        )),
        None => Ok(()),
    }
}

/// Workspaces: Tekton mounts each into every step at the path the Task chose, verbatim.
fn check_workspaces(task_spec: &Value, applied: &[&Policy]) -> Result<(), Denial> {
    let org_paths = OrgPaths::of(applied);
    for (i, workspace) in list(task_spec.get("workspaces")).iter().enumerate() {
        let name = workspace.get("name").and_then(Value::as_str).unwrap_or("");
        // Tekton mounts a workspace without mountPath at `filepath.Join("/workspace", name)`
        // and never checks the name: `../tekton/bin` would be a path outside /workspace.
        if !is_workspace_name(name) {
            return Err(Denial::field(
                format!("spec.taskSpec.workspaces[{i}].name"),
                format!(
                    "{name:?}: Tekton mounts a workspace at /workspace/<name> in every step, org steps included, so a name must be a plain name (letters, digits, '-', '_', '.', not '..', no '/' or variables)"
                ),
            ));
        }
        let Some(path) = workspace
            .get("mountPath")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            // At /workspace/<name>, which can still be above an org step's own mount.
            let path = format!("/workspace/{name}");
            if let Some(refusal) = org_paths.refusal(&path) {
                return Err(Denial::field(
                    format!("spec.taskSpec.workspaces[{i}].name"),
                    format!(
                        "{name:?}: Tekton mounts the workspace at {path} in every step, org steps included, {refusal}; or name the workspace otherwise"
                    ),
                ));
            }
            continue;
        };
        let field = format!("spec.taskSpec.workspaces[{i}].mountPath");
        if path.contains("$(") {
            return Err(Denial::field(
                field,
                format!(
                    "{path:?}: Tekton mounts workspaces into every step, org steps included, so their mount path must be written out (no variables); leave mountPath out (/workspace/<name>) or write the path"
                ),
            ));
        }
        if let Some(refusal) = org_paths.refusal(path) {
            return Err(Denial::field(
                field,
                format!(
                    "{path:?}: Tekton mounts workspaces into every step, org steps included, {refusal}"
                ),
            ));
        }
    }
    Ok(())
}

/// Where the author's files may not be mounted in a container that runs an org step: the
/// dry-run's rule for the Task's workspaces (which Tekton mounts into every step), and the Pod
/// backstop's for every mount of an org container that is neither the policy's nor Tekton's.
pub struct OrgPaths<'p> {
    /// The policy that allows workspaces only under /workspace, if one applies.
    strict: Option<String>,
    /// The applied policies: the top-level directories their steps run from are protected
    /// (with the system directories), and nothing of the author's goes at, above or below
    /// their steps' own mount paths ([`Policy::paths`], computed at policy load).
    applied: Vec<&'p Policy>,
}

impl<'p> OrgPaths<'p> {
    pub fn of(applied: &[&'p Policy]) -> Self {
        let strict = applied
            .iter()
            .find(|p| p.spec.workspace_mounts == WorkspaceMounts::UnderWorkspace)
            .map(|p| p.id.to_string());
        Self {
            strict,
            applied: applied.to_vec(),
        }
    }

    /// Why the author's files at `path` (written out, no variables) would reach what an org
    /// step runs from or reads, with the fix; `None` where they may be.
    pub fn refusal(&self, path: &str) -> Option<String> {
        let clean = mount_point(path);
        if let Some(strict) = &self.strict
            && !clean.starts_with("/workspace/")
        {
            return Some(format!(
                "where a workspace could replace what they run from, so {strict} allows workspaces only under /workspace; leave mountPath out (/workspace/<name>) or mount it under /workspace/"
            ));
        }
        let top = clean
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        let protected = PROTECTED_DIRECTORIES.contains(&top)
            || self.applied.iter().any(|p| p.paths.tops.contains(top));
        if clean == "/" || clean == "/workspace" || protected {
            return Some(format!(
                "and a workspace there would replace what they run from ({}); leave mountPath out (/workspace/<name>) or mount it in a directory of its own",
                if clean == "/" {
                    "/".to_owned()
                } else {
                    format!("/{top}")
                }
            ));
        }
        let within = |inner: &str, outer: &str| {
            inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        // The first in path order, whichever policy's.
        self.applied
            .iter()
            .flat_map(|p| &p.paths.mounts)
            .filter(|m| within(&clean, m) || within(m, &clean))
            .min()
            .map(|m| {
                format!(
                    "and a workspace there would cover or hide the org steps' own mount at {m}; mount it in a directory of its own"
                )
            })
    }
}

/// A workspace name Tekton can join under /workspace without leaving it.
fn is_workspace_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.contains("..")
}

/// The author's steps, stepTemplate and sidecars may not mount bookend's volumes (the org's
/// secrets, its scripts) nor Tekton's internal ones (a sidecar could rewrite an org step's
/// script or forge the exit codes bookend's gates read: Tekton checks those only for steps).
fn check_mounts(task_spec: &Value, user: &[Value], settings: &Settings) -> Result<(), Denial> {
    let prefix = settings.prefix.as_str();
    let mut holders: Vec<(String, &Value)> = user
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("spec.taskSpec.steps[{i}]"), s))
        .collect();
    if let Some(t) = task_spec.get("stepTemplate") {
        holders.push(("spec.taskSpec.stepTemplate".to_owned(), t));
    }
    for (i, sidecar) in list(task_spec.get("sidecars")).iter().enumerate() {
        holders.push((format!("spec.taskSpec.sidecars[{i}]"), sidecar));
    }
    for (i, volume) in list(task_spec.get("volumes")).iter().enumerate() {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        if name.contains("$(") {
            return Err(Denial::field(
                format!("spec.taskSpec.volumes[{i}].name"),
                format!(
                    "{name:?}: Tekton substitutes variables into volume names, so a variable could name bookend's volumes; write the volume's name"
                ),
            ));
        }
    }
    for (path, holder) in holders {
        for key in ["volumeMounts", "volumeDevices"] {
            for (j, mount) in list(holder.get(key)).iter().enumerate() {
                let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
                // Tekton substitutes params into mount names before it builds the Pod. A
                // workspace's volume is Tekton's (a generated `ws-…` name), and workspace names
                // are plain, so `$(workspaces.<name>.volume)` names no other volume.
                let workspace_volume = name
                    .strip_prefix("$(workspaces.")
                    .and_then(|rest| rest.strip_suffix(".volume)"))
                    .is_some_and(is_workspace_name);
                if name.contains("$(") && !workspace_volume {
                    return Err(Denial::field(
                        format!("{path}.{key}[{j}].name"),
                        format!(
                            "{name:?}: Tekton substitutes variables into mount names, so a variable could name bookend's volumes or Tekton's internal ones; write the volume's name"
                        ),
                    ));
                }
                let mount_path = mount
                    .get("mountPath")
                    .or_else(|| mount.get("devicePath"))
                    .and_then(Value::as_str)
                    .map(mount_point)
                    .unwrap_or_default();
                // Tekton's own volumes: its internal ones and each step's credential home
                // (`tekton-creds-init-home-<i>`, which the step's entrypoint copies into $HOME).
                let internal = name.starts_with("tekton-")
                    || (mount_path == "/tekton" || mount_path.starts_with("/tekton/"))
                        && mount_path != "/tekton/home"
                        && !mount_path.starts_with("/tekton/home/");
                if name.starts_with(prefix) {
                    return Err(Denial::field(
                        format!("{path}.{key}[{j}].name"),
                        format!(
                            "volume {name:?} is bookend's (the reserved prefix {prefix:?}): only the steps of the policy that brings it mount it; remove the mount"
                        ),
                    ));
                }
                if internal {
                    return Err(Denial::field(
                        format!("{path}.{key}[{j}]"),
                        format!(
                            "{name:?} at {mount_path:?} is one of Tekton's own volumes, where the scripts, exit codes and credentials of every step are, org steps included; remove the mount"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The author's steps with the taskSpec's stepTemplate written into each, as Tekton's merge
/// would; `Ok(None)` when there is no stepTemplate to write. Where Tekton's own merge fails
/// (its validation would refuse the TaskRun) or cannot be reproduced, a denial.
pub fn materialise_step_template(
    task_spec: &Value,
    user: &[Value],
    version: ApiVersion,
) -> Result<Option<Vec<Value>>, Denial> {
    let Some(template) = task_spec.get("stepTemplate").filter(|t| t.is_object()) else {
        return Ok(None);
    };
    // Tekton's merge pairs list entries by key; bound the lists so that the work stays small
    // (Tasks have tens of env entries, not thousands).
    for (holder, what) in std::iter::once((template, "the stepTemplate".to_owned())).chain(
        user.iter()
            .enumerate()
            .map(|(i, s)| (s, format!("spec.taskSpec.steps[{i}]"))),
    ) {
        for key in ["env", "volumeMounts", "volumeDevices", "ports"] {
            let n = list(holder.get(key)).len();
            if n > MAX_MERGED_LIST {
                return Err(Denial::field(
                    "spec.taskSpec.stepTemplate",
                    format!(
                        "{what} has {n} {key} entries; bookend writes the stepTemplate into the TaskRun's own steps (so that org steps inherit nothing of it) only for lists of at most {MAX_MERGED_LIST}; move the template's fields into the steps that need them"
                    ),
                ));
            }
        }
    }
    // Written into each step, the template is repeated once per step: bound the result, which
    // must fit what the API server stores anyway, before doing any of the work.
    let written = patch::json_len(template).saturating_mul(user.len());
    if written > MAX_MATERIALISED_BYTES {
        return Err(Denial::field(
            "spec.taskSpec.stepTemplate",
            format!(
                "written into each of the TaskRun's {} steps (so that org steps inherit nothing of it), the stepTemplate would add about {written} bytes, more than the {MAX_MATERIALISED_BYTES} bookend allows (etcd stores at most 1.5 MiB per object); move the template's fields into the steps that need them",
                user.len()
            ),
        ));
    }
    user.iter()
        .enumerate()
        .map(|(i, step)| {
            merge::merge_step_template(template, step, version).map_err(|e| {
                Denial::field(
                    format!("spec.taskSpec.steps[{i}]"),
                    format!(
                        "{e}; bookend writes the stepTemplate into the TaskRun's own steps (so that org steps inherit nothing of it) as Tekton merges it, and cannot for this step: list each key once"
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|steps| {
            // Tekton validates the steps after this merge and refuses a script under a command
            // (`script cannot be used with command`): refuse it here, at the author's step,
            // rather than let Tekton refuse it at an index the author never wrote.
            match steps.iter().position(|s| {
                s.get("script").is_some_and(is_set) && s.get("command").is_some_and(is_set)
            }) {
                Some(i) => Err(Denial::field(
                    format!("spec.taskSpec.steps[{i}].script"),
                    "script cannot be used with command: the stepTemplate's command, which Tekton merges into every step, reaches this step; give the step a command and args instead of a script, or take command out of the stepTemplate",
                )),
                None => Ok(Some(steps)),
            }
        })
}

fn list(value: Option<&Value>) -> &[Value] {
    value
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// Whether a member holds something (Go's zero values do not count).
fn is_set(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(_) | Value::Bool(true) => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::engine::tests::{policies, run_with as run_with_lookup};
    use crate::engine::{Catalog, Outcome};

    const ORG: &str = "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  preSteps: [{name: bookend-creds, image: alpine, command: [/creds]}]\n";

    #[test]
    fn pod_template_fields_the_platforms_default_sets_are_not_the_authors() {
        let set = policies(ORG);
        let mut catalog = Catalog::default();
        catalog.add_objects(
            &[json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "config-defaults", "namespace": "tekton-pipelines"},
                "data": {"default-pod-template": "env:\n- {name: HTTPS_PROXY, value: http://proxy:3128}\ndnsPolicy: ClusterFirst\n"}})],
            "tekton-pipelines",
        );
        let run = |pod_template: serde_json::Value, catalog: &Catalog| {
            let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"name": "r"},
                "spec": {"podTemplate": pod_template,
                         "taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
            run_with_lookup(&set, &object, catalog)
        };
        // As Tekton's defaulting writes the platform's default in: allowed.
        let defaulted = json!({"env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}], "dnsPolicy": "ClusterFirst"});
        assert_eq!(run(defaulted.clone(), &catalog).outcome, Outcome::Mutated);
        // The same without knowing the default: the author's, refused.
        let d = run(defaulted, &Catalog::default());
        assert_eq!(d.outcome, Outcome::Denied);
        assert!(d.message.unwrap().contains("spec.podTemplate.env[0]"));
        // The author's value for the platform's variable: refused.
        let d = run(
            json!({"env": [{"name": "HTTPS_PROXY", "value": "http://evil:3128"}]}),
            &catalog,
        );
        assert_eq!(d.outcome, Outcome::Denied);
        let d = run(json!({"dnsPolicy": "None"}), &catalog);
        assert!(d.message.unwrap().contains("spec.podTemplate.dnsPolicy"));
    }

    #[test]
    fn param_values_an_org_step_uses_carry_no_expansion() {
        // Found by a reviewer trying to break the claim (round 3): the value, data in the org
        // step's env, is expanded again by the kubelet and Tekton's entrypoint.
        let set = policies(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  postSteps: [{name: bookend-upload, image: curl, command: [/upload], env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: t, key: t}}}, {name: SBOM_URL, value: \"$(params.sbom-url)\"}]}]\n",
        );
        let run = |params: serde_json::Value, defaults: serde_json::Value| {
            let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"name": "r"},
                "spec": {"params": params,
                         "taskSpec": {"params": defaults, "steps": [{"name": "build", "image": "go"}]}}});
            crate::engine::tests::run_with(&set, &object, &Catalog::default())
        };
        for (params, defaults, at) in [
            (
                json!([{"name": "sbom-url", "value": "https://evil.example/?t=$(TOKEN)"}]),
                json!([]),
                "spec.params[0].value",
            ),
            (
                json!([]),
                json!([{"name": "sbom-url", "default": "https://x/$(steps.bookend-creds.results.token)"}]),
                "spec.taskSpec.params[0].default",
            ),
        ] {
            let d = run(params, defaults);
            assert_eq!(d.outcome, Outcome::Denied);
            assert!(d.message.unwrap().contains(at), "{at}");
        }
        // Other params, and values without "$(", are the author's to set.
        let d = run(
            json!([{"name": "sbom-url", "value": "https://sbom.example/up"}, {"name": "other", "value": "$(x)"}]),
            json!([]),
        );
        assert_eq!(d.outcome, Outcome::Mutated, "{:?}", d.message);
    }

    #[test]
    fn zero_values_in_the_pod_template_are_there_and_replace_the_platforms() {
        let set = policies(ORG);
        let mut catalog = Catalog::default();
        catalog.add_objects(
            &[json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "config-defaults", "namespace": "tekton-pipelines"},
                "data": {"default-pod-template": "automountServiceAccountToken: true\ndnsPolicy: None\ndnsConfig: {nameservers: [10.96.0.53]}\nsecurityContext: {runAsNonRoot: true}\n"}})],
            "tekton-pipelines",
        );
        for (template, field) in [
            (
                json!({"automountServiceAccountToken": false}),
                "automountServiceAccountToken",
            ),
            (json!({"dnsPolicy": ""}), "dnsPolicy"),
            (json!({"dnsConfig": {}}), "dnsConfig"),
            (json!({"securityContext": {}}), "securityContext"),
        ] {
            let object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"name": "r"},
                "spec": {"podTemplate": template,
                         "taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
            let d = run_with_lookup(&set, &object, &catalog);
            assert_eq!(d.outcome, Outcome::Denied, "{field}");
            assert!(
                d.message
                    .unwrap()
                    .contains(&format!("spec.podTemplate.{field}")),
                "{field}"
            );
            // Without a platform default, a zero value changes nothing.
            let d = run_with_lookup(&set, &object, &Catalog::default());
            assert_eq!(d.outcome, Outcome::Mutated, "{field} without a default");
        }
    }
}
