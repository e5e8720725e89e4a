//! The Pod backstop: a TaskRun's Pod must carry every step bookend injects on the path that
//! TaskRun took. It is where the steps actually run, and the only place bookend sees TaskRuns
//! whose Task is resolved after admission (`taskRef.resolver`): their steps come from the
//! fail-open mutation of the controller's dry-run Task CREATE, which an outage skips silently.
//!
//! The expected steps are the steps of every Enforce policy that applies to the TaskRun on its
//! path (inline or inlined: the policies it matches; a remote Task: the policies the dry-run
//! injects, whose criteria are all about the namespace; a local `taskRef` left as it is: the
//! policies that would have inlined it) and that existed when the TaskRun was created. They
//! come from the policies alone: the Pod's `bookend.dev/injected` annotation is copied from the
//! TaskRun, whose author can write it, so it decides nothing here.
//!
//! Then each org container is checked as Tekton built it ([`container`]): where the TaskRun
//! carries its steps (an inline spec), the Pod's step containers must be, one for one, what
//! bookend composes for them (recognised as for admission: the org's pre-steps first, its
//! post-steps last, its gates and verdict, each org container exactly as its policy defines it
//! modulo Tekton's transformations); where it does not (a remote Task, whose resolved spec
//! Tekton stores only after the Pod exists), the Pod's other containers are the Task's own
//! steps and the Pod must be, one for one, what the dry-run mutation's composition writes for
//! them: the org containers in place, exactly bookend's gates and verdict, and the author's
//! containers' `onError` and gate conditions as bookend sets them under `postStepsRun: Always`.

pub mod container;

#[cfg(test)]
mod breaker34;
#[cfg(test)]
mod breaker35;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::canonical::equivalent;
use super::inject::{self, ParamValues, StepKind};
use super::isolate::OrgPaths;
use super::lookup::Lookup;
use super::recognise::recognise;
use super::{Denial, SubjectFacts, hermetic};
use crate::policy::{Mode, Policy, PolicySet, Settings, TaskRefPolicy};
use crate::tekton::{self, ApiVersion, TaskRunView, TaskSource};
use container::{Difference, PodFacts};

/// Checks `pod` (a Pod Tekton created for `taskrun`, both as the API server has them).
/// `Ok` carries warnings; a Pod that lacks steps is a denial naming each step, its policy and
/// what to do.
pub fn check_pod(
    pod: &Value,
    taskrun: &Value,
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Result<Vec<String>, Denial> {
    let Some(view) = TaskRunView::new(taskrun) else {
        return Ok(vec![
            "bookend: the Pod's owner is not a TaskRun bookend can read; not checked".to_owned(),
        ]);
    };
    let namespace = view.namespace().unwrap_or_default();
    // Whatever the policies select now: the TaskRun's labels and ownerReferences can change
    // after admission (Tekton freezes only the spec), so a TaskRun admitted with org steps and
    // their volumes may match no policy by the time its Pod is built. The author's containers
    // never mount what bookend or Tekton keep for org steps, selected or not.
    check_author_mounts(pod, set).map_err(|e| Denial {
        message: format!(
            "bookend: the Pod of TaskRun {namespace}/{}: {e}. Org steps run exactly as their policies define them; mount your own volumes in your steps",
            view.display_name()
        ),
    })?;
    let containers: BTreeSet<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    let created = view
        .object
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str);
    let path = view.task_source();
    // A policy that did not exist when the TaskRun was created never applied to it.
    let policies: Vec<&Policy> = applicable(&view, namespace, &path, set, lookup)
        .into_iter()
        .filter(|p| !matches!((p.created.as_deref(), created), (Some(p), Some(c)) if p > c))
        .collect();
    // Step name -> the policy that requires it.
    let mut required: BTreeMap<String, String> = BTreeMap::new();
    for policy in &policies {
        let id = policy.id.to_string();
        for step in policy.step_names() {
            required.insert(step.to_owned(), id.clone());
        }
    }

    let missing: Vec<String> = required
        .iter()
        .filter(|(step, _)| !containers.contains(tekton::step_container(step).as_str()))
        .map(|(step, by)| format!("{step} ({by})"))
        .collect();
    let name = view.display_name();
    if missing.is_empty() {
        if policies.is_empty() {
            return Ok(Vec::new());
        }
        check_policy_volumes(pod, &policies).map_err(|e| Denial {
            message: format!(
                "bookend: the Pod of TaskRun {namespace}/{name}: {e}. The org steps mount their policy's volumes as the policy defines them; remove the volume from the Task (bookend's dry-run mutation, which was skipped, adds the policy's), and create the TaskRun again once bookend is ready"
            ),
        })?;
        let warnings =
            check_containers(pod, &view, &policies, set.settings(), lookup).map_err(|e| {
                Denial {
                    message: format!(
                        "bookend: the Pod of TaskRun {namespace}/{name}: {e}. Org steps run exactly as their policies define them; create the TaskRun again (its Pod was changed after Tekton built it, or the TaskRun or the Task it resolved carried what reaches org steps: the mount or field named above)"
                    ),
                }
            })?;
        if let Some(policy) = hermetic::requiring(&policies) {
            hermetic::check_pod(pod, set.settings()).map_err(|e| Denial {
                message: format!(
                    "bookend: the Pod of TaskRun {namespace}/{name}: {e}; {} requires the TaskRun's own steps to run without network and org steps to keep it. Create the TaskRun again with inline steps bookend can jail, on a Linux node (no StepActions, sidecars, init containers, network or hostPath volumes, or podTemplate env for TEKTON_HERMETIC or TEKTON_RESOURCE_NAME)",
                    policy.id
                ),
            })?;
        }
        return Ok(warnings);
    }
    let why = match &path {
        TaskSource::RemoteRef { resolver } => format!(
            "its Task came through the {resolver} resolver, and bookend injects these steps when Tekton's controller dry-run-creates the resolved Task; that mutation did not happen (bookend was unavailable, or the webhook entry tasks-dryrun.mutate.bookend.dev is missing)"
        ),
        TaskSource::LocalRef { name } => format!(
            "it references Task {name}, which bookend inlines to inject these steps, but the TaskRun was admitted without them (was bookend's webhook bypassed?)"
        ),
        _ => "the TaskRun's steps lack them or they were removed after admission".to_owned(),
    };
    Err(Denial {
        message: format!(
            "bookend: the Pod of TaskRun {namespace}/{name} lacks the step(s) {}: {why}. Create the TaskRun again once bookend is ready (`kubectl get pods -n <bookend namespace>`); `bookend render --explain` shows what the policies inject",
            missing.join(", ")
        ),
    })
}

/// The label Tekton's controller filters its Pod informer on (`app.kubernetes.io/managed-by`,
/// any value): only a Pod carrying it can be adopted by name.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Whether `name` is one Tekton gives a TaskRun's Pod: `kmeta.ChildName(<taskrun>, "-pod")`,
/// `-pod-retry<N>` for a retry (a long TaskRun name is hashed, the suffix kept).
pub fn is_taskrun_pod_name(name: &str) -> bool {
    let Some((_, tail)) = name.rsplit_once("-pod") else {
        return false;
    };
    tail.is_empty()
        || tail
            .strip_prefix("-retry")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether Tekton's controller would take `pod` for a TaskRun's Pod by its name alone: when
/// its own Pod meets `AlreadyExists`, `createPod` (pkg/reconciler/taskrun, v0.62 to v1.15)
/// returns the Pod of that name from its informer, with no owner or label check. Such a Pod
/// is Tekton's controller's to create, whatever its other labels.
pub fn tekton_would_adopt(pod: &Value) -> bool {
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    is_taskrun_pod_name(name)
        && pod
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .is_some_and(|labels| labels.contains_key(MANAGED_BY_LABEL))
}

/// A Pod's controller ownerReference if it names a Tekton TaskRun (`kind: TaskRun`,
/// `apiVersion: tekton.dev/…`): what Tekton's pod builder writes from the TaskRun itself
/// (`NewControllerRef`), and what says which TaskRun a Pod is for, never a label.
pub fn taskrun_controller(pod: &Value) -> Option<&Value> {
    pod.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
        .filter(|r| {
            r.get("kind").and_then(Value::as_str) == Some("TaskRun")
                && r.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.starts_with("tekton.dev/"))
        })
}

/// Checks a Pod UPDATE (`subresource` empty), a `status` UPDATE (which may change labels) or an
/// `ephemeralcontainers` UPDATE against the Pod before it. Only Tekton's controller
/// (`by_controller`) may label a Pod as a TaskRun's (or as one Tekton would adopt by name,
/// [`tekton_would_adopt`]) or give it a TaskRun controller ownerReference; no one
/// may change the image of an org container or of Tekton's init containers (Kubernetes lets a
/// container's image change, and restarts it with the new one); no ephemeral container may
/// target an org container (sharing its processes) or mount bookend's or Tekton's internal
/// volumes.
pub fn check_pod_update(
    old: &Value,
    new: &Value,
    subresource: &str,
    by_controller: bool,
    settings: &Settings,
) -> Result<(), Denial> {
    let deny = |message: String| {
        Err(Denial {
            message: format!("bookend: {message}"),
        })
    };
    let label = |pod: &Value| {
        pod.pointer("/metadata/labels/tekton.dev~1taskRun")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    if label(old) != label(new) && !by_controller {
        return deny(format!(
            "only Tekton's controller labels a Pod as a TaskRun's (tekton.dev/taskRun {:?} -> {:?})",
            label(old),
            label(new)
        ));
    }
    // Which TaskRun, by name and uid (not the reference's other members).
    let owner = |pod| taskrun_controller(pod).map(|r| (r.get("name"), r.get("uid")));
    let (owner_before, owner_after) = (owner(old), owner(new));
    if owner_after.is_some() && owner_after != owner_before && !by_controller {
        return deny(format!(
            "only Tekton's controller makes a TaskRun a Pod's controller (ownerReferences: {owner_before:?} -> {owner_after:?}): Tekton runs a Pod its TaskRun controls as that TaskRun's, so a Pod given to another TaskRun would run for it unchecked; create the TaskRun again and let Tekton make its Pod"
        ));
    }
    if tekton_would_adopt(new) && !tekton_would_adopt(old) && !by_controller {
        return deny(format!(
            "only Tekton's controller labels a Pod {MANAGED_BY_LABEL} under a name Tekton gives a TaskRun's Pod (<taskrun>-pod, -pod-retry<N>): Tekton would adopt it as that TaskRun's Pod, unchecked; rename the Pod or leave the label off"
        ));
    }
    let prefix = format!("step-{}", settings.prefix);
    let guarded = |name: &str| {
        name.starts_with(&prefix)
            || matches!(
                name,
                "prepare" | "place-scripts" | "working-dir-initializer"
            )
    };
    for list in ["containers", "initContainers"] {
        let before = |name: &str| {
            old.pointer(&format!("/spec/{list}"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| name_of(c) == name)
                .and_then(|c| c.get("image"))
                .cloned()
        };
        for container in new
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = name_of(container);
            if guarded(name)
                && let Some(image) = before(name)
                && container.get("image") != Some(&image)
            {
                return deny(format!(
                    "the image of container {name} is bookend's or Tekton's to choose (it was {image}); a Pod's org containers run as their policy defines them"
                ));
            }
        }
    }
    if subresource == "ephemeralcontainers" {
        let existing: BTreeSet<&str> = old
            .pointer("/spec/ephemeralContainers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(name_of)
            .collect();
        for (i, ephemeral) in new
            .pointer("/spec/ephemeralContainers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, e)| !existing.contains(name_of(e)))
        {
            let target = ephemeral
                .get("targetContainerName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if target.starts_with(&prefix) {
                return deny(format!(
                    "spec.ephemeralContainers[{i}].targetContainerName: {target} is an org step: a debug container sharing its processes could read or change what it runs; target the TaskRun's own steps"
                ));
            }
            for mount in ephemeral
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let volume = name_of(mount);
                // Every `tekton-*` volume: Tekton's internal ones and each step's credential
                // home (`tekton-creds-init-home-<i>`), as for the author's sidecars.
                if volume.starts_with(settings.prefix.as_str()) || volume.starts_with("tekton-") {
                    return deny(format!(
                        "spec.ephemeralContainers[{i}].volumeMounts: {volume} holds the org steps' secrets or what Tekton runs them with; mount the TaskRun's own volumes only"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The org containers of `pod`, in order and content.
fn check_containers(
    pod: &Value,
    view: &TaskRunView<'_>,
    policies: &[&Policy],
    settings: &Settings,
    lookup: &dyn Lookup,
) -> Result<Vec<String>, String> {
    let steps: Vec<&Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| name_of(c).starts_with("step-"))
        .collect();
    let place_scripts = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| name_of(c) == container::PLACE_SCRIPTS)
        .and_then(|c| c.pointer("/args/1"))
        .and_then(Value::as_str);
    let platform_env = lookup
        .default_pod_template()
        .and_then(|t| t.get("env").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let org_paths = OrgPaths::of(policies);
    let facts = PodFacts {
        place_scripts,
        platform_env: &platform_env,
        volumes,
        token_volumes: container::token_volumes(volumes),
        org_paths: &org_paths,
        prefix: &settings.prefix,
    };
    match view.task_spec().filter(|t| t.is_object()) {
        Some(task_spec) => check_composed(&steps, task_spec, view, policies, settings, &facts),
        None => check_remote(&steps, policies, settings, &facts),
    }
}

/// The author's containers (steps not bookend's, sidecars) mount neither bookend's volumes (the
/// org's credentials, its scripts) nor Tekton's internal ones but as Tekton mounts them: the
/// Pod shows what variables in mount names and StepActions' mounts, resolved after admission,
/// came to.
fn check_author_mounts(pod: &Value, set: &PolicySet) -> Result<(), String> {
    let settings = set.settings();
    let list = |key: &str| {
        pod.pointer(key)
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
    };
    // Native sidecars (Tekton's `enable-kubernetes-sidecar`) are init containers; Tekton's own
    // init containers (prepare, place-scripts, working-dir-initializer) are checked as such.
    let native_sidecars = list("/spec/initContainers")
        .iter()
        .filter(|c| name_of(c).starts_with("sidecar-"));
    let mut step_index = 0usize;
    for container in list("/spec/containers").iter().chain(native_sidecars) {
        let name = name_of(container);
        let step = name.starts_with("step-");
        let own_index = step.then(|| {
            step_index += 1;
            step_index - 1
        });
        // The container of a step some policy defines (its content is the Pod check's, against
        // that policy); a reserved-prefix name no policy defines is the author's like any other.
        if set.is_org_container(name) {
            continue;
        }
        for mount in container
            .get("volumeMounts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let volume = name_of(mount);
            let read_only = mount.get("readOnly") == Some(&Value::Bool(true));
            let path = mount.get("mountPath").and_then(Value::as_str).unwrap_or("");
            let refused = if volume.starts_with(settings.prefix.as_str()) {
                Some("bookend's volume, only the org steps of its policy mount it")
            } else if let Some(home) = volume.strip_prefix("tekton-creds-init-home-") {
                // Each step's credential home, which its entrypoint copies into $HOME (.ssh,
                // .gitconfig): the step's own only.
                (own_index.map(|i| i.to_string()).as_deref() != Some(home))
                    .then_some("another step's credential home (Tekton's /tekton/creds)")
            } else if own_index.is_none()
                && volume.starts_with("tekton-")
                && !volume.starts_with("tekton-internal-")
                && name != "sidecar-tekton-log-results"
            {
                Some("one of Tekton's own volumes, which no sidecar of the Task's mounts")
            } else if let Some(internal) = volume.strip_prefix("tekton-internal-") {
                match (own_index, internal) {
                    // A sidecar with a script reads it from Tekton's scripts volume; sidecars get
                    // none of Tekton's other internal volumes (its results sidecar aside).
                    (None, "scripts") if read_only => None,
                    (None, _) if name != "sidecar-tekton-log-results" => Some(
                        "one of Tekton's internal volumes, which no sidecar of the Task's mounts",
                    ),
                    (Some(i), run) if run.starts_with("run-") => {
                        let writable_other = !read_only && run != format!("run-{i}");
                        writable_other.then_some("another step's run directory, writable")
                    }
                    (Some(_), "scripts" | "bin" | "steps" | "debug-scripts") if !read_only => {
                        Some("one of Tekton's internal volumes, writable")
                    }
                    _ => None,
                }
            } else {
                None
            };
            if let Some(why) = refused {
                return Err(format!(
                    "container {name} mounts {volume:?} at {path:?}: {why}"
                ));
            }
        }
    }
    Ok(())
}

/// Every Pod volume named like a volume of a policy that applies is that policy's definition,
/// as the API server defaults it: otherwise an org step mounting it by name would read the
/// author's files (a ConfigMap of theirs in place of the org's Secret). The dry-run mutation
/// refuses such a Task volume; when it was skipped, the Pod still shows it.
fn check_policy_volumes(pod: &Value, policies: &[&Policy]) -> Result<(), String> {
    let volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for policy in policies {
        for want in &policy.volumes {
            for (i, volume) in volumes
                .iter()
                .enumerate()
                .filter(|(_, v)| v.get("name") == want.get("name"))
            {
                if !equivalent(volume, want) && !equivalent(volume, &as_defaulted(want)) {
                    return Err(format!(
                        "spec.volumes[{i}] ({}) is not the volume {} defines ({want}) but {volume}",
                        name_of(volume),
                        policy.id
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A volume as the API server stores it: the file mode Kubernetes defaults (0644) where the
/// source takes one, the field references' `apiVersion: v1`, a projected token's expiry
/// (`pkg/apis/core/v1/defaults.go`). Zero values (`medium: ""`) are dropped by the comparison.
fn as_defaulted(volume: &Value) -> Value {
    fn field_refs(items: Option<&mut Value>) {
        for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(field_ref) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
                field_ref.entry("apiVersion").or_insert_with(|| json!("v1"));
            }
        }
    }
    let mut volume = volume.clone();
    for source in ["secret", "configMap", "projected", "downwardAPI"] {
        if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
            source.entry("defaultMode").or_insert_with(|| json!(420));
        }
    }
    field_refs(volume.pointer_mut("/downwardAPI/items"));
    for projection in volume
        .pointer_mut("/projected/sources")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        field_refs(projection.pointer_mut("/downwardAPI/items"));
        if let Some(token) = projection
            .get_mut("serviceAccountToken")
            .and_then(Value::as_object_mut)
        {
            token
                .entry("expirationSeconds")
                .or_insert_with(|| json!(3600));
        }
    }
    volume
}

fn name_of(container: &Value) -> &str {
    container.get("name").and_then(Value::as_str).unwrap_or("")
}

fn explain(container: &str, owner: &str, d: Difference) -> String {
    let at = if d.field.is_empty() {
        String::new()
    } else {
        format!(" {}", d.field)
    };
    format!("container {container} ({owner}){at}: {}", d.what)
}

/// One for one against bookend's composition of the TaskRun's own steps.
fn check_composed(
    steps: &[&Value],
    task_spec: &Value,
    view: &TaskRunView<'_>,
    policies: &[&Policy],
    settings: &Settings,
    facts: &PodFacts<'_>,
) -> Result<Vec<String>, String> {
    // As Tekton builds the Pod: v1 field names (a v1 spec as it is, not a copy).
    let task_spec = match view.api_version {
        ApiVersion::V1 => Cow::Borrowed(task_spec),
        ApiVersion::V1beta1 => Cow::Owned(tekton::task_spec_to_v1(task_spec.clone())),
    };
    let taskrun_steps = task_spec
        .get("steps")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let params = ParamValues {
        run_params: view
            .spec()
            .and_then(|s| s.get("params"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice),
        spec_params: task_spec
            .get("params")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice),
    };
    // The record only suggests which of the author's steps bookend set to `continue`; the
    // composition decides.
    let hint = view
        .annotation(super::record::ANNOTATION)
        .and_then(super::record::Record::parse);
    let recognised = recognise(
        taskrun_steps,
        policies,
        settings,
        ApiVersion::V1,
        &params,
        hint.as_ref(),
    )
    .map_err(|d| {
        format!(
            "the TaskRun's steps are not what bookend writes ({})",
            d.message
        )
    })?;
    let composed = inject::compose(recognised.user, policies, settings, ApiVersion::V1, &params);
    // The author's containers are Tekton's build of the TaskRun's own (admitted) steps.
    check_against(steps, &composed, policies, settings, facts, false)?;
    Ok(Vec::new())
}

/// Without the TaskRun's steps (a remote Task, whose dry-run mutation may have been skipped):
/// the Pod's containers that are not the org's are the author's steps, and the Pod must be, one
/// for one, what bookend's composition of those steps writes (the dry-run's own `compose`):
/// the org containers in place, each gate and the verdict, and the author's containers'
/// `onError` and gate conditions. Which author steps bookend set to `continue` (the one thing a
/// container cannot tell) is read from the Pod's verdict; the composition decides whether that
/// reading is bookend's.
fn check_remote(
    steps: &[&Value],
    policies: &[&Policy],
    settings: &Settings,
    facts: &PodFacts<'_>,
) -> Result<Vec<String>, String> {
    let prefix = format!("step-{}", settings.prefix);
    let org: BTreeSet<&str> = policies
        .iter()
        .flat_map(|p| &p.containers)
        .map(String::as_str)
        .collect();
    let is_helper = |name: &str| {
        name.strip_prefix("step-")
            .is_some_and(|n| settings.is_helper_name(n))
    };
    let verdict = tekton::step_container(&settings.verdict_name());
    let checked_by_verdict: Vec<&str> = steps
        .iter()
        .filter(|c| name_of(c) == verdict)
        .flat_map(|c| verdict_reads(c))
        .collect();
    let mut user = Vec::new();
    for (i, container) in steps.iter().enumerate() {
        let name = name_of(container);
        if org.contains(name) || is_helper(name) {
            continue;
        }
        if name.starts_with(&prefix) {
            return Err(format!(
                "{name} uses the reserved prefix among the TaskRun's own steps"
            ));
        }
        // Tekton cuts a long step name to 63 characters in the container's; the verdict reads
        // the step's directory by its full name.
        let full = checked_by_verdict
            .iter()
            .find(|c| c.starts_with("step-") && tekton::restrict_length(c) == name)
            .copied()
            .unwrap_or(name);
        let mut step = match full.strip_prefix("step-") {
            Some(n) if !n.starts_with("unnamed-") => json!({"name": n}),
            _ => json!({}),
        };
        let bookends_continue = checked_by_verdict
            .iter()
            .any(|c| *c == full || *c == i.to_string());
        if !bookends_continue
            && let Some(on_error) = container::entrypoint_flag(container, "-on_error")
        {
            step["onError"] = json!(on_error);
        }
        user.push(step);
    }
    let no_params = ParamValues {
        run_params: &[],
        spec_params: &[],
    };
    let composed = inject::compose(user, policies, settings, ApiVersion::V1, &no_params);
    check_against(steps, &composed, policies, settings, facts, true)?;
    Ok(Vec::new())
}

/// Compares the Pod's step containers, one for one, with `composed`: names in place, each org
/// container and helper as bookend writes it (a helper in any form a release wrote, so a
/// rolling upgrade keeps working), and with `authors_on_error`, the author's containers'
/// `-on_error` and gate conditions as the composition sets them.
fn check_against(
    steps: &[&Value],
    composed: &inject::Composed,
    policies: &[&Policy],
    settings: &Settings,
    facts: &PodFacts<'_>,
    authors_on_error: bool,
) -> Result<(), String> {
    if steps.len() != composed.steps.len() {
        return Err(format!(
            "it has {} step containers where bookend's composition has {} steps",
            steps.len(),
            composed.steps.len()
        ));
    }
    let mut helpers = composed.helpers.iter().zip(&composed.checks);
    for (i, ((container, step), kind)) in steps
        .iter()
        .zip(&composed.steps)
        .zip(&composed.kinds)
        .enumerate()
    {
        let want_name = tekton::restrict_length(&tekton::container_name(step, i));
        if name_of(container) != want_name {
            return Err(format!(
                "step container {i} is {}, where Tekton puts {want_name}",
                name_of(container)
            ));
        }
        // The helper's name and spec: the forms earlier releases wrote, built only for a
        // container that is not the current form.
        let (owner, helper) = match kind {
            StepKind::User(_) if authors_on_error => {
                check_authors_container(container, step, settings)?;
                continue;
            }
            StepKind::User(_) => continue,
            StepKind::Pre(p) | StepKind::Post(p) => (policies[*p].id.to_string(), None),
            StepKind::Gate | StepKind::Verdict | StepKind::JailCheck => (
                kind.helper_owner().unwrap_or("bookend").to_owned(),
                Some(
                    helpers
                        .next()
                        .expect("the composition lists each of its helpers"),
                ),
            ),
        };
        // A StepAction's content is resolved at reconcile time from the platform's pinned
        // source (policies refuse any other): its position and name are checked.
        if step.get("ref").is_some_and(|r| !r.is_null()) {
            continue;
        }
        if let Err(d) = container::check(container, step, facts) {
            // A helper an earlier release wrote is bookend's too.
            if helper.is_some_and(|(name, spec)| {
                inject::earlier_helper_steps(settings, name, spec)
                    .iter()
                    .any(|e| container::check(container, e, facts).is_ok())
            }) {
                continue;
            }
            return Err(explain(name_of(container), &owner, d));
        }
    }
    Ok(())
}

/// The author's container carries the `onError` and the gate conditions bookend's composition
/// gives its step: under `postStepsRun: Always`, `continue` (so a failure reaches the Always
/// post-steps) and the gate that holds it back after a failed org step.
fn check_authors_container(
    container: &Value,
    step: &Value,
    settings: &Settings,
) -> Result<(), String> {
    let name = name_of(container);
    let want = step.get("onError").and_then(Value::as_str);
    let actual = container::entrypoint_flag(container, "-on_error");
    if actual != want {
        return Err(format!(
            "container {name} (the Task's own step) args: -on_error {actual:?}, where bookend's composition has {want:?} (postStepsRun: Always runs the org's post-steps whatever the Task's steps do); remove onError from the Task's steps or let bookend's dry-run mutation write it"
        ));
    }
    let gate_whens = |whens: Vec<Value>| -> Vec<Value> {
        whens
            .into_iter()
            .filter(|w| inject::is_gate_when(settings, w))
            .map(|w| json!([w.get("input"), w.get("operator"), w.get("values")]))
            .collect()
    };
    let actual = gate_whens(
        container::entrypoint_flag(container, "--when_expressions")
            .and_then(|w| serde_json::from_str(w).ok())
            .unwrap_or_default(),
    );
    let want = gate_whens(
        step.get("when")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    );
    if actual != want {
        return Err(format!(
            "container {name} (the Task's own step) args: --when_expressions conditions on bookend's gates {actual:?}, where bookend's composition has {want:?}; remove conditions on {}gate-<n> results from the Task's steps",
            settings.prefix
        ));
    }
    Ok(())
}

/// The step directories a verdict container (or step: the script is its last argument either
/// way) reads (container names or indices), in the forms bookend writes and wrote: only a
/// reading, which the composition confirms or refutes.
pub(crate) fn verdict_reads(container: &Value) -> Vec<&str> {
    let script = container
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.last())
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(list) = script
        .strip_prefix("cd /tekton/steps;r=0;for s in ")
        .and_then(|r| r.split_once(";do").map(|(l, _)| l))
    {
        return list.split(' ').collect();
    }
    // 0.1's `<index>:<container>` pairs.
    script
        .strip_prefix("rc=0; for s in ")
        .and_then(|r| r.split_once("; do").map(|(l, _)| l))
        .into_iter()
        .flat_map(|l| l.split(' '))
        .flat_map(|pair| pair.split(':'))
        .collect()
}

/// The Enforce policies whose steps a Pod of this TaskRun must carry, by the TaskRun's path.
fn applicable<'s>(
    view: &TaskRunView<'_>,
    namespace: &str,
    path: &TaskSource,
    set: &'s PolicySet,
    lookup: &dyn Lookup,
) -> Vec<&'s Policy> {
    let facts = SubjectFacts::of(view, namespace, lookup);
    let subject = facts.subject(namespace);
    let matching = set
        .candidates(&subject)
        .into_iter()
        .filter(|p| p.spec.mode == Mode::Enforce && p.matches(&subject));
    match path {
        TaskSource::Inline => matching.collect(),
        // The dry-run Task carries nothing of the TaskRun: only namespace-level policies apply.
        TaskSource::RemoteRef { .. } => matching.filter(|p| p.namespace_level_only()).collect(),
        // Left as a reference: policies that skip such TaskRuns add nothing (a signed Task is
        // never inlined, but refused: its TaskRun never gets here).
        TaskSource::LocalRef { .. } => matching
            .filter(|p| p.spec.task_ref != TaskRefPolicy::Skip)
            .collect(),
        // Tekton refuses both.
        TaskSource::Both | TaskSource::Bundle | TaskSource::Missing => Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::engine::tests::policies;
    use serde_json::json;

    const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  preSteps: [{name: bookend-creds, image: alpine}]
  postSteps: [{name: bookend-sbom, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: labelled, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {selector: {matchLabels: {scan: "yes"}}}
  preSteps: [{name: bookend-scan, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: audit, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  mode: Audit
  preSteps: [{name: bookend-audit, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: later, creationTimestamp: "2026-09-01T00:00:00Z"}
spec:
  preSteps: [{name: bookend-later, image: alpine}]
"#;

    fn taskrun(spec: Value, labels: Value) -> Value {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
               "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1",
                            "labels": labels, "creationTimestamp": "2026-06-01T00:00:00Z"},
               "spec": spec})
    }

    fn remote() -> Value {
        taskrun(
            json!({"taskRef": {"resolver": "git", "params": [{"name": "url", "value": "x"}]}}),
            json!({"scan": "yes"}),
        )
    }

    /// A step's container as Tekton's pod builder makes it (shared with the e2e suite).
    pub(crate) fn tekton_container(step: &Value, index: usize) -> Value {
        crate::tekton_pod::container(step, index, &mut String::new())
    }

    /// The policies' step of each name, else a step of the author's.
    fn step_named(name: &str) -> Value {
        let set = policies(POLICIES);
        set.policies()
            .iter()
            .flat_map(|p| p.pre_steps.iter().chain(&p.post_steps))
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| json!({"name": name, "image": "golang", "command": ["go", "build"]}))
    }

    fn pod(steps: &[&str], record: Option<&str>) -> Value {
        let containers: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| tekton_container(&step_named(s), i))
            .collect();
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a",
                         "labels": {"tekton.dev/taskRun": "run-1"}},
            "spec": {"containers": containers}});
        if let Some(r) = record {
            pod["metadata"]["annotations"] = json!({ crate::engine::record::ANNOTATION: r });
        }
        pod
    }

    fn check(pod: &Value, taskrun: &Value) -> Result<Vec<String>, Denial> {
        check_pod(pod, taskrun, &policies(POLICIES), &Catalog::default())
    }

    #[test]
    fn a_remote_taskruns_pod_needs_the_namespace_level_steps() {
        // The dry-run mutation was skipped: the Task's own step only.
        let err = check(&pod(&["clone"], None), &remote()).unwrap_err();
        assert!(
            err.message
                .contains("lacks the step(s) bookend-creds (ClusterStepPolicy/org), bookend-sbom (ClusterStepPolicy/org)"),
            "{err}"
        );
        assert!(err.message.contains("git resolver"), "{err}");
        // Not required: the label-selected policy (the dry-run cannot see TaskRun labels), the
        // Audit policy, and the policy created after the TaskRun.
        assert!(!err.message.contains("bookend-scan"), "{err}");
        assert!(!err.message.contains("bookend-audit"), "{err}");
        assert!(!err.message.contains("bookend-later"), "{err}");
        // With the dry-run mutation: admitted.
        assert_eq!(
            check(
                &pod(&["bookend-creds", "clone", "bookend-sbom"], None),
                &remote()
            ),
            Ok(Vec::new())
        );
    }

    #[test]
    fn an_inline_taskruns_pod_needs_what_its_policies_inject() {
        let inline = taskrun(
            json!({"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}),
            json!({"scan": "yes"}),
        );
        // Policy order: `labelled` sorts before `org` (same priority, by name).
        let all = ["bookend-scan", "bookend-creds", "build", "bookend-sbom"];
        assert_eq!(check(&pod(&all, None), &inline), Ok(Vec::new()));
        let err = check(
            &pod(&["bookend-creds", "build", "bookend-sbom"], None),
            &inline,
        )
        .unwrap_err();
        assert!(
            err.message
                .contains("lacks the step(s) bookend-scan (ClusterStepPolicy/labelled)"),
            "{err}"
        );
    }

    #[test]
    fn a_policys_volume_in_the_pod_is_the_policys_as_the_api_server_defaults_it() {
        let set = policies(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  volumes:\n  - {name: bookend-key, secret: {secretName: org-key}}\n  - {name: bookend-scratch, emptyDir: {}}\n  - {name: bookend-ns, downwardAPI: {items: [{path: ns, fieldRef: {fieldPath: metadata.namespace}}]}}\n  preSteps: [{name: bookend-x, image: alpine, command: [/x]}]\n",
        );
        let applied: Vec<&Policy> = set.policies().iter().collect();
        let with = |volumes: Value| json!({"spec": {"volumes": volumes}});
        let as_stored = json!([
            {"name": "bookend-key", "secret": {"secretName": "org-key", "defaultMode": 420}},
            {"name": "bookend-scratch", "emptyDir": {"medium": ""}},
            {"name": "bookend-ns", "downwardAPI": {"defaultMode": 420, "items": [{"path": "ns", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            {"name": "ws-abcde", "configMap": {"name": "authors"}}]);
        assert_eq!(
            check_policy_volumes(&with(as_stored.clone()), &applied),
            Ok(())
        );
        for (i, volume) in [
            json!({"name": "bookend-key", "configMap": {"name": "org-key"}}),
            json!({"name": "bookend-key", "secret": {"secretName": "authors-key"}}),
            json!({"name": "bookend-key", "secret": {"secretName": "org-key", "defaultMode": 511}}),
            json!({"name": "bookend-scratch", "emptyDir": {"medium": "Memory"}}),
            json!({"name": "bookend-scratch", "hostPath": {"path": "/"}}),
        ]
        .into_iter()
        .enumerate()
        {
            let mut volumes = as_stored.clone();
            let at = volumes
                .as_array()
                .unwrap()
                .iter()
                .position(|v| v["name"] == volume["name"])
                .unwrap();
            volumes[at] = volume.clone();
            let e = check_policy_volumes(&with(volumes), &applied).unwrap_err();
            assert!(
                e.contains(&format!("spec.volumes[{at}]")) && e.contains("ClusterStepPolicy/org"),
                "{i}: {e}"
            );
        }
    }

    #[test]
    fn a_record_on_the_pod_decides_nothing() {
        // The record is copied from the TaskRun, whose author writes it: claiming other steps
        // (or none) does not change what the policies require.
        for record in [
            r#"{"policies":[{"policy":"ClusterStepPolicy/org","hash":"0","steps":["bookend-old"]}],"helpers":["bookend-gate-1"]}"#,
            r#"{"policies":[]}"#,
            "garbage",
        ] {
            let err = check(&pod(&["bookend-old", "clone"], Some(record)), &remote()).unwrap_err();
            assert!(
                err.message.contains(
                    "bookend-creds (ClusterStepPolicy/org), bookend-sbom (ClusterStepPolicy/org)"
                ),
                "{record}: {err}"
            );
            assert_eq!(
                check(
                    &pod(&["bookend-creds", "clone", "bookend-sbom"], Some(record)),
                    &remote()
                ),
                Ok(Vec::new()),
                "{record}"
            );
        }
    }

    #[test]
    fn local_references_left_as_they_are() {
        let local = taskrun(json!({"taskRef": {"name": "build"}}), json!({}));
        // `org` inlines referenced Tasks: a Pod without its steps means it was bypassed.
        let err = check(&pod(&["compile"], None), &local).unwrap_err();
        assert!(err.message.contains("references Task build"), "{err}");
        // A policy that skips such TaskRuns requires nothing.
        let skip = policies(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: s}\nspec:\n  taskRef: Skip\n  preSteps: [{name: bookend-s, image: alpine}]\n",
        );
        assert_eq!(
            check_pod(&pod(&["compile"], None), &local, &skip, &Catalog::default()),
            Ok(Vec::new())
        );
    }
}

#[cfg(test)]
mod content {
    use super::*;
    use crate::engine::tests::policies;
    use crate::engine::{Catalog, Request, decide};

    const ALWAYS: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  postStepsRun: Always
  preSteps: [{name: bookend-creds, image: creds:1, command: [/creds], args: ["--for", "$(context.taskRun.name)"], env: [{name: MODE, value: strict}], securityContext: {allowPrivilegeEscalation: false}}]
  postSteps: [{name: bookend-sbom, image: syft:1, command: [/syft], args: [dir:/workspace]}]
"#;

    /// The TaskRun as admitted, and its Pod as Tekton builds it (variables substituted).
    fn admitted(spec: Value) -> (Value, Value) {
        admitted_under(ALWAYS, spec)
    }

    fn admitted_under(yaml: &str, spec: Value) -> (Value, Value) {
        let set = policies(yaml);
        let taskrun = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1"}, "spec": spec});
        let request = Request {
            object: &taskrun,
            namespace: "team-a",
            dry_run: false,
        };
        let admitted = decide(request, &set, &Catalog::default()).object;
        let steps = admitted["spec"]["taskSpec"]["steps"]
            .as_array()
            .unwrap()
            .clone();
        let volumes = admitted["spec"]["taskSpec"]["volumes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let spec = crate::tekton_pod::pod_spec(&steps, &volumes);
        let text = serde_json::to_string(&spec)
            .unwrap()
            .replace("$(context.taskRun.name)", "run-1");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "run-1-pod", "namespace": "team-a", "labels": {"tekton.dev/taskRun": "run-1"}},
            "spec": serde_json::from_str::<Value>(&text).unwrap()});
        (admitted, pod)
    }

    fn check(pod: &Value, taskrun: &Value) -> Result<Vec<String>, Denial> {
        check_pod(pod, taskrun, &policies(ALWAYS), &Catalog::default())
    }

    fn inline() -> Value {
        json!({"taskSpec": {"steps": [{"name": "build", "image": "golang", "command": ["go", "build"]}]}})
    }

    #[test]
    fn the_pod_tekton_builds_passes_and_every_tampering_is_named() {
        let (taskrun, pod) = admitted(inline());
        assert_eq!(check(&pod, &taskrun), Ok(Vec::new()));
        // As a remote Task's TaskRun (no steps in the TaskRun): the shape check.
        let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1"},
            "spec": {"taskRef": {"resolver": "git"}}});
        assert_eq!(check(&pod, &remote), Ok(Vec::new()));
        let tamper = |f: &dyn Fn(&mut Vec<Value>)| {
            let mut p = pod.clone();
            f(p["spec"]["containers"].as_array_mut().unwrap());
            p
        };
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "image",
                tamper(&|c| c[0]["image"] = json!("evil")),
                "step-bookend-creds (ClusterStepPolicy/org) image",
            ),
            (
                "env",
                tamper(&|c| {
                    c[0]["env"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "LD_PRELOAD", "value": "/x"}))
                }),
                "env[1]",
            ),
            (
                "env value",
                tamper(&|c| c[0]["env"][0]["value"] = json!("off")),
                "env[0]",
            ),
            (
                "argument",
                tamper(&|c| {
                    let a = c[0]["args"].as_array_mut().unwrap();
                    let n = a.len();
                    a[n - 1] = json!("run-1; evil");
                }),
                "args",
            ),
            (
                "mount",
                tamper(&|c| {
                    c[3]["volumeMounts"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "w", "mountPath": "/usr/bin"}))
                }),
                "volumeMounts",
            ),
            (
                "hardening",
                tamper(&|c| {
                    c[0].as_object_mut().unwrap().remove("securityContext");
                }),
                "securityContext",
            ),
            ("order", tamper(&|c| c.swap(0, 2)), ""),
            (
                "verdict",
                tamper(&|c| {
                    let n = c.len();
                    let a = c[n - 1]["args"].as_array_mut().unwrap();
                    let m = a.len();
                    a[m - 1] = json!("exit 0");
                }),
                "bookend-verdict",
            ),
        ];
        for (what, tampered, says) in cases {
            for taskrun in [&taskrun, &remote] {
                let err = check(&tampered, taskrun).unwrap_err();
                assert!(err.message.contains(says), "{what}: {err}");
            }
        }
    }

    #[test]
    fn the_authors_containers_mount_neither_bookends_volumes_nor_tektons_writable() {
        // What a StepAction's mounts or a variable in a mount name came to shows in the Pod only.
        let (taskrun, pod) = admitted(inline());
        let with = |f: &dyn Fn(&mut Value)| {
            let mut p = pod.clone();
            f(&mut p["spec"]);
            p
        };
        let build = |spec: &Value| {
            spec["containers"]
                .as_array()
                .unwrap()
                .iter()
                .position(|c| c["name"] == "step-build")
                .unwrap()
        };
        // The author's step `build` with one more mount.
        let build_mounts = |m: Value| {
            with(&|s| {
                let i = build(s);
                s["containers"][i]["volumeMounts"]
                    .as_array_mut()
                    .unwrap()
                    .push(m.clone())
            })
        };
        let sidecar = |spec: &mut Value, key: &str, m: Value| {
            let list = spec
                .as_object_mut()
                .unwrap()
                .entry(key)
                .or_insert_with(|| json!([]));
            list.as_array_mut()
                .unwrap()
                .push(json!({"name": "sidecar-db", "image": "postgres", "volumeMounts": [m]}));
        };
        let refused: Vec<(&str, Value, &str)> = vec![
            (
                "a step mounts the org's volume",
                build_mounts(
                    json!({"name": "bookend-registry", "mountPath": "/steal", "readOnly": true}),
                ),
                "container step-build mounts \"bookend-registry\"",
            ),
            (
                "a step writes another step's run directory",
                build_mounts(json!({"name": "tekton-internal-run-0", "mountPath": "/forge"})),
                "another step's run directory",
            ),
            (
                "a step writes Tekton's entrypoint",
                build_mounts(json!({"name": "tekton-internal-bin", "mountPath": "/bin2"})),
                "writable",
            ),
            (
                "a sidecar mounts Tekton's entrypoint",
                with(&|s| {
                    sidecar(
                        s,
                        "containers",
                        json!({"name": "tekton-internal-bin", "mountPath": "/tekton/bin"}),
                    )
                }),
                "which no sidecar",
            ),
            (
                "a step mounts another step's credential home",
                build_mounts(json!({"name": "tekton-creds-init-home-0", "mountPath": "/creds"})),
                "another step's credential home",
            ),
            (
                "a sidecar mounts a step's credential home",
                with(&|s| {
                    sidecar(
                        s,
                        "initContainers",
                        json!({"name": "tekton-creds-init-home-2", "mountPath": "/c"}),
                    )
                }),
                "credential home",
            ),
            (
                "a native sidecar mounts the org's volume",
                with(&|s| {
                    sidecar(
                        s,
                        "initContainers",
                        json!({"name": "bookend-creds", "mountPath": "/c"}),
                    )
                }),
                "container sidecar-db mounts \"bookend-creds\"",
            ),
        ];
        for (what, pod, says) in refused {
            let err = check(&pod, &taskrun).unwrap_err();
            assert!(err.message.contains(says), "{what}: {err}");
        }
        // A sidecar with a script reads it as Tekton mounts it.
        let scripted = with(&|s| {
            sidecar(
                s,
                "containers",
                json!({"name": "tekton-internal-scripts", "mountPath": "/tekton/scripts", "readOnly": true}),
            )
        });
        assert_eq!(check(&scripted, &taskrun), Ok(Vec::new()));
    }

    #[test]
    fn a_best_effort_step_of_the_authors_is_told_from_bookends_by_the_record() {
        // `lint` was the author's `continue`, `build` bookend's: only the record tells which,
        // and the composition checks what it says (found by the runtime suite).
        let (taskrun, pod) = admitted(json!({"taskSpec": {"steps": [
            {"name": "lint", "image": "golang", "command": ["lint"], "onError": "continue"},
            {"name": "build", "image": "golang", "command": ["go", "build"]}]}}));
        assert_eq!(check(&pod, &taskrun), Ok(Vec::new()));
    }

    #[test]
    fn a_remote_tasks_step_whose_container_name_tekton_cut_is_the_authors() {
        // A step name of 63 characters: Tekton cuts `step-<name>` to 63 in the container's
        // name, bookend's verdict reads the step's directory by its full name.
        let long = "b".repeat(63);
        let (_, mut pod) = admitted(
            json!({"taskSpec": {"steps": [{"name": long, "image": "golang", "command": ["go"]}]}}),
        );
        for c in pod["spec"]["containers"].as_array_mut().unwrap() {
            let cut = tekton::restrict_length(name_of(c));
            c["name"] = json!(cut);
        }
        let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": "run-1", "namespace": "team-a", "uid": "u-1"},
            "spec": {"taskRef": {"resolver": "git"}}});
        assert_eq!(check(&pod, &remote), Ok(Vec::new()));
    }

    #[test]
    fn a_taskrun_whose_steps_are_not_bookends_gets_no_pod() {
        // Admitted without bookend (the mutating webhook skipped, the TaskRun backstop off): its
        // own forged org step, which the Pod carries by that name.
        let (taskrun, pod) = admitted(inline());
        let mut forged = taskrun.clone();
        forged["spec"]["taskSpec"]["steps"][0]["image"] = json!("evil");
        let err = check(&pod, &forged).unwrap_err();
        assert!(err.message.contains("not what bookend writes"), "{err}");
    }

    #[test]
    fn under_hermetic_user_steps_the_pod_runs_on_linux_with_tektons_init_containers_and_local_volumes()
     {
        let hermetic = ALWAYS.replace(
            "postStepsRun: Always",
            "postStepsRun: Always\n  userSteps: {network: None}",
        );
        let set = policies(&hermetic);
        let (taskrun, pod) = admitted_under(&hermetic, inline());
        let check = |pod: &Value| check_pod(pod, &taskrun, &set, &Catalog::default());
        assert_eq!(check(&pod), Ok(Vec::new()));
        let step_build = pod["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["name"] == "step-build")
            .unwrap();
        fn push(list: &mut Value, item: Value) {
            if list.is_null() {
                *list = json!([]);
            }
            list.as_array_mut().unwrap().push(item);
        }
        let nfs_mount = |p: &mut Value| {
            let volume = json!({"name": "ws-nfs", "nfs": {"server": "s", "path": "/"}});
            push(&mut p["spec"]["volumes"], volume);
            let mount = json!({"name": "ws-nfs", "mountPath": "/workspace/src"});
            p["spec"]["containers"][step_build]["volumeMounts"] = json!([mount]);
        };
        type Change<'c> = &'c dyn Fn(&mut Value);
        let changes: Vec<(Change, &str)> = vec![
            (
                &|p| p["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "windows"}),
                "not Linux",
            ),
            (
                &|p| p["spec"]["os"] = json!({"name": "windows"}),
                "spec.os.name",
            ),
            (
                &|p| {
                    let sidecar = json!({"name": "sidecar-proxy", "image": "squid", "restartPolicy": "Always"});
                    push(&mut p["spec"]["initContainers"], sidecar);
                },
                "init container sidecar-proxy is a sidecar",
            ),
            (&nfs_mount, "mounts volume ws-nfs (nfs)"),
        ];
        for (change, says) in changes {
            let mut changed = pod.clone();
            change(&mut changed);
            let e = check(&changed).unwrap_err().message;
            assert!(
                e.contains(says) && e.contains("userSteps") || e.contains(says),
                "{says}: {e}"
            );
            assert!(e.contains("on a Linux node"), "{e}");
        }
    }

    /// The jail check is one of bookend's containers: there, in place, as composed. Run with
    /// other content or without its jail it would prove nothing (or run the author's code
    /// under bookend's name); without it a jail failure would look like the author's exit 1.
    #[test]
    fn the_jail_check_container_is_bookends_as_composed() {
        for run in ["OnSuccess", "Always"] {
            let hermetic = ALWAYS.replace(
                "postStepsRun: Always",
                &format!("postStepsRun: {run}\n  userSteps: {{network: None}}"),
            );
            let set = policies(&hermetic);
            let (taskrun, pod) = admitted_under(&hermetic, inline());
            let check = |pod: &Value| check_pod(pod, &taskrun, &set, &Catalog::default());
            assert_eq!(check(&pod), Ok(Vec::new()), "{run}");
            let containers = pod["spec"]["containers"].as_array().unwrap();
            let at = containers
                .iter()
                .position(|c| c["name"] == "step-bookend-jail-check")
                .unwrap_or_else(|| panic!("{run}: no jail check in {pod}"));
            assert_eq!(containers[at + 1]["name"], "step-build", "{run}");
            type Change<'c> = &'c dyn Fn(&mut Value);
            let changes: Vec<(Change, &str)> = vec![
                (
                    &|c| c["args"] = json!(["curl http://exfil"]),
                    "step-bookend-jail-check",
                ),
                (&|c| c["env"] = json!([]), "step-bookend-jail-check"),
                (
                    &|c| c["image"] = json!("docker.io/author/tools"),
                    "step-bookend-jail-check",
                ),
            ];
            for (change, says) in changes {
                let mut changed = pod.clone();
                change(&mut changed["spec"]["containers"][at]);
                let e = check(&changed).map_err(|d| d.message).expect_err(&format!(
                    "{run}: admitted {}",
                    changed["spec"]["containers"][at]
                ));
                assert!(e.contains(says), "{run}: {says}: {e}");
            }
            let mut removed = pod.clone();
            removed["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .remove(at);
            assert!(
                check(&removed).is_err(),
                "{run}: admitted without the jail check"
            );
        }
    }
}
