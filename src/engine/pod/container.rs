//! One org container of a TaskRun's Pod against the step its policy defines, modulo what
//! Tekton itself does to every step when it builds the Pod (docs/tekton-notes.md, "From step to
//! container"): `pkg/pod/pod.go` `Builder.Build`, `entrypoint.go` `orderContainers`,
//! `entrypoint_lookup.go` `resolveEntrypoints`, `script.go` `convertScripts`, and the variable
//! substitution of `pkg/reconciler/taskrun/resources/apply.go`.
//!
//! Tekton's own additions are accepted by their shape (the entrypoint's flags, its internal
//! mounts, `TEKTON_PLATFORM_COMMANDS`); everything the policy defines must be there as defined;
//! anything else (an env var, a mount, a flag, a field) is refused. Keys of `securityContext`
//! and `resources` the policy leaves unset may be set by the platform (a LimitRange, an SCC).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::name_of;
use crate::engine::canonical::{
    canonical, equivalent, equivalent_except, member_dropped, members_equivalent,
};
use crate::engine::isolate::OrgPaths;
use crate::policy::validate::mount_point;

/// Tekton's entrypoint binary, every step container's command.
const ENTRYPOINT: &str = "/tekton/bin/entrypoint";
/// Where Tekton's entrypoint writes a step's termination message.
const TERMINATION_PATH: &str = "/tekton/termination";
/// The init container that writes the steps' scripts (`ContainerNamePlaceScripts`).
pub const PLACE_SCRIPTS: &str = "place-scripts";
/// Prepended to a script without a shebang (`defaultScriptPreamble`).
const SCRIPT_PREAMBLE: &str = "#!/bin/sh\nset -e\n";

/// Entrypoint flags followed by a value (`orderContainers`, `credsInit`).
const VALUE_FLAGS: &[&str] = &[
    "-wait_file",
    "-post_file",
    "-termination_path",
    "-step_metadata_dir",
    "-on_error",
    "-timeout",
    "-stdout_path",
    "-stderr_path",
    "-step_results",
    "--when_expressions",
    "-results",
    "-entrypoint",
    "-result_from",
];
/// Entrypoint flags without a value that Tekton sets on steps whatever they are.
const TEKTON_FLAGS: &[&str] = &[
    "-wait_file_content",
    "-enable_spire",
    "-breakpoint_on_failure",
    "-compress_termination_message=true",
];
/// Credential flags `credsInit` adds to every step (`-basic-docker=…`, …).
const CREDENTIAL_FLAGS: &[&str] = &[
    "-basic-docker=",
    "-docker-config=",
    "-docker-cfg=",
    "-basic-git=",
    "-ssh-git=",
];
/// Container members the API server defaults, Tekton sets, or the step defines.
const KNOWN_MEMBERS: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "workingDir",
    "env",
    "envFrom",
    "volumeMounts",
    "volumeDevices",
    "resources",
    "securityContext",
    "imagePullPolicy",
    "terminationMessagePath",
    "terminationMessagePolicy",
];

/// What is wrong with an org container: the field, and what it is against what it should be.
#[derive(Debug, PartialEq, Eq)]
pub struct Difference {
    pub field: String,
    pub what: String,
}

fn differ(field: impl Into<String>, what: impl Into<String>) -> Result<(), Difference> {
    Err(Difference {
        field: field.into(),
        what: what.into(),
    })
}

/// What the rest of the Pod tells about a container.
pub struct PodFacts<'a> {
    /// The place-scripts init container's script (its `args[1]`), if any.
    pub place_scripts: Option<&'a str>,
    /// Env entries of the platform's default pod template (Tekton appends them to every step).
    pub platform_env: &'a [Value],
    /// The Pod's volumes (`spec.volumes`).
    pub volumes: &'a [Value],
    /// Which of them are the service account token's ([`token_volumes`]).
    pub token_volumes: Vec<&'a str>,
    /// Where nothing of the author's may be mounted in an org container (the dry-run's rule).
    pub org_paths: &'a OrgPaths<'a>,
    /// bookend's reserved prefix, which its volumes' names carry.
    pub prefix: &'a str,
}

/// The value of the entrypoint flag `name` in `container`'s args (before `--`), as Tekton
/// passes a step's fields to its entrypoint (`-on_error`, `--when_expressions`).
pub fn entrypoint_flag<'c>(container: &'c Value, name: &str) -> Option<&'c str> {
    let args = strings(container.get("args"));
    let flags = &args[..args.iter().position(|a| *a == "--").unwrap_or(args.len())];
    flags
        .iter()
        .position(|a| *a == name)
        .and_then(|i| flags.get(i + 1))
        .copied()
}

/// Checks `container` (a Pod container) against `step`, the step bookend composed for it (its
/// policy's definition, v1 field names, with bookend's `Always` changes).
pub fn check(container: &Value, step: &Value, pod: &PodFacts<'_>) -> Result<(), Difference> {
    let Some(members) = container.as_object() else {
        return differ("", "not an object");
    };
    if let Some(unknown) = members
        .keys()
        .find(|k| !KNOWN_MEMBERS.contains(&k.as_str()))
    {
        return differ(unknown.as_str(), "the policy's step has no such field");
    }
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let step_command: Vec<&str> = strings(step.get("command"));
    let script = text(step, "script").filter(|s| !s.is_empty());

    // The image: as defined, or by digest when Tekton looked up its entrypoint.
    let want_image = text(step, "image").unwrap_or_default();
    let image = text(container, "image").unwrap_or_default();
    let looked_up = step_command.is_empty() && script.is_none();
    if image != want_image && !(looked_up && same_image_by_digest(&want_image, &image)) {
        return differ("image", format!("{image:?}, not {want_image:?}"));
    }
    if strings(container.get("command")) != [ENTRYPOINT] {
        return differ(
            "command",
            format!(
                "{:?}, not Tekton's entrypoint",
                strings(container.get("command"))
            ),
        );
    }

    // The entrypoint's arguments: its flags, `--`, then the step's own argv.
    let args = strings(container.get("args"));
    let Some(split) = args.iter().position(|a| *a == "--") else {
        return differ(
            "args",
            "no `--` between the entrypoint's flags and the step's arguments",
        );
    };
    let (flags, argv) = (&args[..split], &args[split + 1..]);
    let mut values: Map<String, Value> = Map::new();
    let mut i = 0;
    while i < flags.len() {
        let flag = flags[i];
        if VALUE_FLAGS.contains(&flag) {
            let Some(value) = flags.get(i + 1) else {
                return differ("args", format!("{flag} without a value"));
            };
            if values
                .insert(flag.to_owned(), Value::String((*value).to_owned()))
                .is_some()
                && flag != "-wait_file"
            {
                return differ("args", format!("{flag} twice"));
            }
            i += 2;
        } else if TEKTON_FLAGS.contains(&flag)
            || CREDENTIAL_FLAGS.iter().any(|p| flag.starts_with(p))
        {
            i += 1;
        } else if flag == "-debug_before_step" {
            return differ(
                "args",
                "a debug breakpoint before the org step holds it back",
            );
        } else {
            return differ(
                "args",
                format!("the entrypoint flag {flag:?} is not Tekton's"),
            );
        }
    }
    let flag = |name: &str| values.get(name).and_then(Value::as_str);

    // What runs: the program, a script, or the image's entrypoint.
    let mut want_argv: Vec<&str> = Vec::new();
    match (&script, step_command.first()) {
        (Some(script), _) => {
            let Some(file) = flag("-entrypoint") else {
                return differ("args", "a script step without its script file");
            };
            check_script(file, script, pod)?;
        }
        (None, Some(program)) => {
            if !flag("-entrypoint").is_some_and(|e| matches(program, e, false)) {
                return differ(
                    "args",
                    format!("-entrypoint {:?}, not {program:?}", flag("-entrypoint")),
                );
            }
            want_argv.extend(&step_command[1..]);
        }
        (None, None) => {
            if flag("-entrypoint").is_some() {
                return differ(
                    "args",
                    "-entrypoint for a step that runs its image's entrypoint",
                );
            }
        }
    }
    want_argv.extend(strings(step.get("args")));
    if argv.len() != want_argv.len()
        || !argv
            .iter()
            .zip(&want_argv)
            .all(|(actual, want)| matches(want, actual, false))
    {
        return differ("args", format!("{argv:?} after `--`, not {want_argv:?}"));
    }

    // The entrypoint's flags that come from the step.
    let on_error = text(step, "onError");
    if flag("-on_error") != on_error.as_deref() {
        return differ(
            "args",
            format!("-on_error {:?}, not {on_error:?}", flag("-on_error")),
        );
    }
    let timeout = text(step, "timeout");
    let same_timeout = match (flag("-timeout"), timeout.as_deref()) {
        (None, None) => true,
        (Some(a), Some(b)) => equivalent(
            &serde_json::json!({"timeout": a}),
            &serde_json::json!({"timeout": b}),
        ),
        _ => false,
    };
    if !same_timeout {
        return differ(
            "args",
            format!("-timeout {:?}, not {timeout:?}", flag("-timeout")),
        );
    }
    for (name, key) in [
        ("-stdout_path", "stdoutConfig"),
        ("-stderr_path", "stderrConfig"),
    ] {
        let want = step
            .get(key)
            .and_then(|c| c.get("path"))
            .and_then(Value::as_str);
        if flag(name) != want {
            return differ("args", format!("{name} {:?}, not {want:?}", flag(name)));
        }
    }
    let results: Vec<&str> = step
        .get("results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("name").and_then(Value::as_str))
        .collect();
    let want_results = (!results.is_empty()).then(|| results.join(","));
    if flag("-step_results") != want_results.as_deref() {
        return differ(
            "args",
            format!(
                "-step_results {:?}, not {want_results:?}",
                flag("-step_results")
            ),
        );
    }
    let whens = step
        .get("when")
        .filter(|w| w.as_array().is_some_and(|a| !a.is_empty()));
    match (flag("--when_expressions"), whens) {
        (None, None) => {}
        (Some(actual), Some(want)) => {
            let actual: Value = serde_json::from_str(actual).unwrap_or(Value::Null);
            if !json_matches(want, &actual) {
                return differ(
                    "args",
                    format!("--when_expressions {actual}, not the policy's {want}"),
                );
            }
        }
        (actual, want) => {
            return differ(
                "args",
                format!("--when_expressions {actual:?}, not the policy's {want:?}"),
            );
        }
    }

    if let Some(path) = text(container, "terminationMessagePath")
        && path != TERMINATION_PATH
    {
        return differ("terminationMessagePath", path);
    }
    let want_dir = text(step, "workingDir").filter(|d| !d.is_empty());
    let dir = text(container, "workingDir").filter(|d| !d.is_empty());
    if dir != want_dir {
        return differ("workingDir", format!("{dir:?}, not {want_dir:?}"));
    }
    if let Some(policy) = text(step, "imagePullPolicy")
        && text(container, "imagePullPolicy").as_deref() != Some(policy.as_str())
    {
        return differ("imagePullPolicy", format!("not {policy:?}"));
    }
    check_env(container, step, looked_up, pod)?;
    for key in ["envFrom", "volumeDevices"] {
        if canonical(member(container, key)) != canonical(member(step, key)) {
            return differ(key, "not the policy's");
        }
    }
    check_mounts(container, step, pod)?;
    // The policy's keys as defined; keys it leaves unset are the platform's to fill (a
    // LimitRange's requests, an SCC's runAsUser).
    if !covers(
        member(container, "securityContext"),
        member(step, "securityContext"),
    ) {
        return differ("securityContext", "not the policy's");
    }
    if !covers(
        member(container, "resources"),
        member(step, "computeResources"),
    ) {
        return differ("resources", "not the policy's");
    }
    Ok(())
}

/// The policy's env first, as defined (values with variables match what Tekton substitutes),
/// then only what Tekton adds: `TEKTON_PLATFORM_COMMANDS` for a looked-up entrypoint, and the
/// platform's default-pod-template env.
fn check_env(
    container: &Value,
    step: &Value,
    looked_up: bool,
    pod: &PodFacts<'_>,
) -> Result<(), Difference> {
    let actual = member(container, "env");
    let want = member(step, "env");
    let actual = actual.as_array().map_or(&[][..], Vec::as_slice);
    let want = want.as_array().map_or(&[][..], Vec::as_slice);
    if actual.len() < want.len() {
        return differ("env", "lacks the policy's variables");
    }
    for (i, (a, w)) in actual.iter().zip(want).enumerate() {
        let value = |e: &Value| {
            e.get("value")
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let same = a.get("name") == w.get("name")
            && equivalent(&strip_value(a), &strip_value(w))
            && match (value(w), value(a)) {
                (Some(w), Some(a)) => matches(&w, &a, true),
                (None, None) => true,
                _ => false,
            };
        if !same {
            return differ(format!("env[{i}]"), format!("{a}, not the policy's {w}"));
        }
    }
    for (i, extra) in actual.iter().enumerate().skip(want.len()) {
        let name = extra.get("name").and_then(Value::as_str).unwrap_or("");
        let tekton = looked_up && name == "TEKTON_PLATFORM_COMMANDS";
        let platform = pod.platform_env.iter().any(|e| equivalent(e, extra));
        if !tekton && !platform {
            return differ(
                format!("env[{i}]"),
                format!("{name:?} is not the policy's, nor Tekton's, nor the platform's default"),
            );
        }
    }
    Ok(())
}

/// An env entry without its empty `value` (a Go round trip drops it).
fn strip_value(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("value");
    }
    v
}

/// The policy's mounts as defined; every other mount Tekton's own (its volume at its path) or
/// the author's (a workspace, a volume a stepTemplate mounts: Tekton mounts both into every
/// step) where the dry-run would let a workspace be, never over what org steps run from. The
/// dry-run mutation refuses or removes all of these; an outage skips it, so the Pod is where
/// they show.
fn check_mounts(container: &Value, step: &Value, pod: &PodFacts<'_>) -> Result<(), Difference> {
    let actual = member(container, "volumeMounts");
    let actual = actual.as_array().map_or(&[][..], Vec::as_slice);
    let want = member(step, "volumeMounts");
    let want = want.as_array().map_or(&[][..], Vec::as_slice);
    for w in want {
        if !actual.iter().any(|a| equivalent(a, w)) {
            return differ("volumeMounts", format!("lacks the policy's {w}"));
        }
    }
    for (i, a) in actual.iter().enumerate() {
        if want.iter().any(|w| equivalent(a, w)) {
            continue;
        }
        let name = a.get("name").and_then(Value::as_str).unwrap_or("");
        let path = a.get("mountPath").and_then(Value::as_str).unwrap_or("");
        let volume = pod
            .volumes
            .iter()
            .find(|v| v.get("name").and_then(Value::as_str) == Some(name));
        if is_tektons_mount(name, &mount_point(path), volume)
            || is_service_account_token(a, volume, pod)
        {
            continue;
        }
        let field = format!("volumeMounts[{i}]");
        if name.starts_with(pod.prefix) {
            return differ(
                field,
                format!(
                    "{name:?} at {path:?}: bookend's volume where the policy does not mount it (a mount of the TaskRun's Task); remove it from the Task's steps, stepTemplate and workspaces"
                ),
            );
        }
        if name.starts_with("tekton-") {
            return differ(
                field,
                format!(
                    "{name:?} at {path:?} is not one of Tekton's own mounts (Tekton's volume at Tekton's path); remove it from the Task's stepTemplate"
                ),
            );
        }
        if is_plugins_token_mount(a) {
            return differ(
                field,
                format!(
                    "{name:?} at {path:?}: the Task's volume {name:?} is not the service account token; the API server's ServiceAccount admission plugin takes a Pod volume named kube-api-access-… for the token's and mounts it at {SERVICE_ACCOUNT_TOKEN_PATH} in every container, org steps included; rename the Task's volume"
                ),
            );
        }
        if let Some(refusal) = pod.org_paths.refusal(path) {
            return differ(
                field,
                format!(
                    "{name:?} at {path:?}, a workspace or a volume of the Task's: Tekton mounts workspaces (and the stepTemplate's mounts) into every step, org steps included, {refusal}"
                ),
            );
        }
    }
    Ok(())
}

/// Where the API server's ServiceAccount admission plugin mounts the service account token.
const SERVICE_ACCOUNT_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The API server's ServiceAccount admission plugin mounts the service account's token into
/// every container (`mountServiceAccountToken`): `kube-api-access-<random>` at
/// `SERVICE_ACCOUNT_TOKEN_PATH`, read-only. It takes a Pod volume named `kube-api-access-…`
/// that is already there for it, so the mount alone says nothing about the volume's contents.
fn is_plugins_token_mount(mount: &Value) -> bool {
    static TOKEN_MOUNT: LazyLock<Value> = LazyLock::new(
        || serde_json::json!({"mountPath": SERVICE_ACCOUNT_TOKEN_PATH, "readOnly": true}),
    );
    let name = mount.get("name").and_then(Value::as_str).unwrap_or("");
    // The name is the mount's own: the rest is the plugin's.
    name.starts_with("kube-api-access-") && equivalent_except(mount, &TOKEN_MOUNT, "name")
}

/// The plugin's mount on the projected volume of `TokenVolumeSource`: a Task volume of that
/// name counts only if it is exactly that volume ([`PodFacts::token_volumes`]).
fn is_service_account_token(mount: &Value, volume: Option<&Value>, pod: &PodFacts<'_>) -> bool {
    is_plugins_token_mount(mount)
        && volume.is_none_or(|_| pod.token_volumes.contains(&name_of(mount)))
}

/// The names of `volumes` (a Pod's) that are the ServiceAccount plugin's token volume, exactly:
/// compared once per Pod, not once per container that mounts it. A name counts by its first
/// volume, the one a mount of it is checked against.
pub fn token_volumes(volumes: &[Value]) -> Vec<&str> {
    static TOKEN_VOLUME: LazyLock<Value> = LazyLock::new(|| {
        serde_json::json!({"projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
    });
    let named = |name: &str| volumes.iter().find(|v| name_of(v) == name);
    volumes
        .iter()
        .map(name_of)
        .filter(|name| name.starts_with("kube-api-access-"))
        // The name is the volume's own: the rest is the plugin's.
        .filter(|name| named(name).is_some_and(|v| equivalent_except(v, &TOKEN_VOLUME, "name")))
        .collect()
}

/// Tekton's own mounts in a step container (`pkg/pod`: `implicitVolumeMounts`, `binROMount`,
/// `runMount`, `downwardMount`, the scripts and debug mounts, `credsInit`'s): the volume Tekton
/// names, at the path Tekton mounts it, of the kind Tekton makes. A look-alike name elsewhere,
/// or on a volume of the Task's own making, is not Tekton's.
fn is_tektons_mount(name: &str, path: &str, volume: Option<&Value>) -> bool {
    // A mount of a volume the Pod lacks never reaches the webhook: the API server validates
    // the object before its validating webhooks see it.
    let is = |kind: &str| volume.is_none_or(|v| v.get(kind).is_some_and(Value::is_object));
    let indexed = |prefix: &str, rest: &str| {
        !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit())
            && path.strip_prefix(prefix) == Some(rest)
    };
    match name {
        "tekton-internal-workspace" => path == "/workspace" && is("emptyDir"),
        "tekton-internal-downward" => path == "/tekton/downward" && is("downwardAPI"),
        _ => {
            if let Some(rest) = name.strip_prefix("tekton-internal-run-") {
                indexed("/tekton/run/", rest) && is("emptyDir")
            } else if let Some(rest) = name.strip_prefix("tekton-creds-init-home-") {
                !rest.is_empty()
                    && rest.bytes().all(|b| b.is_ascii_digit())
                    && path == "/tekton/creds"
                    && is("emptyDir")
            } else if name == "tekton-internal-debug-info" {
                path.strip_prefix("/tekton/debug/info/")
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
                    && is("emptyDir")
            } else if name.starts_with("tekton-creds-")
                || name.starts_with("tekton-internal-secret-volume-")
            {
                // The service account's credential Secrets (`credsInit`: `tekton-creds-<hash>` in
                // v1.15, `tekton-internal-secret-volume-<secret>-<random>` in v1.9 and earlier).
                path.strip_prefix("/tekton/creds-secrets/")
                    .is_some_and(|s| !s.is_empty() && !s.contains('/'))
                    && is("secret")
            } else if let Some(internal) = name.strip_prefix("tekton-internal-") {
                let at = match internal {
                    "home" | "results" | "steps" | "bin" | "artifacts" | "scripts" => {
                        format!("/tekton/{internal}")
                    }
                    "debug-scripts" => "/tekton/debug/scripts".to_owned(),
                    _ => return false,
                };
                path == at && is("emptyDir")
            } else {
                false
            }
        }
    }
}

/// The script Tekton placed for the step, decoded from the place-scripts init container, is
/// the policy's (with Tekton's preamble when it has no shebang).
fn check_script(file: &str, script: &str, pod: &PodFacts<'_>) -> Result<(), Difference> {
    if !file.starts_with("/tekton/scripts/") {
        return differ(
            "args",
            format!("the script file {file:?} is not under /tekton/scripts"),
        );
    }
    let Some(placed) = pod.place_scripts.and_then(|s| placed_script(s, file)) else {
        return differ("args", format!("no script was placed at {file:?}"));
    };
    let want = if script.trim().starts_with("#!") {
        script.to_owned()
    } else {
        format!("{SCRIPT_PREAMBLE}{script}")
    };
    if !matches(&want, &placed, false) {
        return differ("script", "not the policy's");
    }
    Ok(())
}

/// The script the place-scripts init container writes to `file` (`placeScriptInContainer`:
/// `scriptfile="<file>"`, then the base64 text between `<< '_EOF_'` and `_EOF_`).
pub fn placed_script(place_scripts: &str, file: &str) -> Option<String> {
    let start = place_scripts.find(&format!("scriptfile=\"{file}\"\n"))?;
    let rest = &place_scripts[start..];
    let body = rest.split_once("<< '_EOF_'\n")?.1;
    let (encoded, _) = body.split_once("\n_EOF_")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Whether `image` is `want` by digest, as `resolveEntrypoints` rewrites it:
/// `ref.Context().Digest(…)` (go-containerregistry, weak validation).
fn same_image_by_digest(want: &str, image: &str) -> bool {
    let Some((repository, digest)) = image.split_once("@sha256:") else {
        return false;
    };
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    if let Some((_, pinned)) = want.split_once("@sha256:") {
        return pinned == digest && normalised_repository(want) == repository;
    }
    normalised_repository(want) == repository
}

/// A reference's repository as go-containerregistry writes it: `index.docker.io` for Docker Hub,
/// `library/` for its single-name images, without tag or digest.
fn normalised_repository(reference: &str) -> String {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    let without_tag = match without_digest[last_slash..].find(':') {
        Some(colon) => &without_digest[..last_slash + colon],
        None => without_digest,
    };
    let (registry, path) = match without_tag.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first, rest.to_owned())
        }
        _ => ("index.docker.io", without_tag.to_owned()),
    };
    let registry = if registry == "docker.io" {
        "index.docker.io"
    } else {
        registry
    };
    let path = if registry == "index.docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    format!("{registry}/{path}")
}

/// Whether every member `want` sets is in `actual` as `want` sets it (recursively for objects).
fn covers(actual: &Value, want: &Value) -> bool {
    match (actual, want) {
        (_, Value::Null) => true,
        (Value::Object(a), Value::Object(w)) => w.iter().all(|(k, wv)| match a.get(k) {
            Some(av) => covers(av, wv) || members_equivalent(k, av, wv),
            None => member_dropped(k, wv),
        }),
        _ => equivalent(actual, want),
    }
}

/// Whether `actual` is `want` with Tekton's variables substituted (strings compared by
/// [`matches`], as data: `when` values are data).
fn json_matches(want: &Value, actual: &Value) -> bool {
    match (want, actual) {
        (Value::String(w), Value::String(a)) => matches(w, a, true),
        (Value::Array(w), Value::Array(a)) => {
            w.len() == a.len() && w.iter().zip(a).all(|(w, a)| json_matches(w, a))
        }
        (Value::Object(w), Value::Object(a)) => {
            let keys: std::collections::BTreeSet<&String> = w
                .keys()
                .chain(a.keys())
                .filter(|k| {
                    let zero = |v: Option<&Value>| {
                        v.is_none_or(|v| {
                            matches!(v, Value::Null) || v == "" || *v == Value::Array(vec![])
                        })
                    };
                    !(zero(w.get(*k)) && zero(a.get(*k)))
                })
                .collect();
            keys.iter().all(|k| match (w.get(*k), a.get(*k)) {
                (Some(wv), Some(av)) => json_matches(wv, av),
                _ => false,
            })
        }
        _ => canonical(want) == canonical(actual),
    }
}

/// Whether `actual` is `want` with each Tekton variable (`$(params.…)`, `$(context.…)`,
/// `$(results.…)`, …) replaced by some value: the literal text between them must be there as
/// written. A variable's value is any text for `data` (an env value, a `when` value); else a
/// plain token (no spaces, quotes or shell operators), so that a variable can stand for a path
/// or a name but never for code.
///
/// Whatever the values, `actual` holds no `$(…)` that `want` does not: the kubelet and Tekton's
/// entrypoint expand those again at run time (into the step's credentials, other steps'
/// results), and a value carrying one, or two pasted values making one, is the author's text
/// turned into the org step's secrets.
pub fn matches(want: &str, actual: &str, data: bool) -> bool {
    let parts = split_variables(want);
    matches_parts(&parts, actual, data) && no_new_expansions(want, actual)
}

/// Every `$(…)` in `actual` (to its first `)`) appears in `want` at least as often.
fn no_new_expansions(want: &str, actual: &str) -> bool {
    fn expansions(text: &str) -> BTreeMap<&str, usize> {
        let mut found = BTreeMap::new();
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            let from = &rest[start..];
            let end = from.find(')').map_or(from.len(), |e| e + 1);
            *found.entry(&from[..end]).or_insert(0) += 1;
            rest = &from[2..];
        }
        found
    }
    let allowed = expansions(want);
    expansions(actual)
        .into_iter()
        .all(|(e, n)| allowed.get(e).is_some_and(|&m| n <= m))
}

/// `want` cut at its Tekton variables: `Ok` literal text, `Err` a variable.
fn split_variables(want: &str) -> Vec<Result<&str, &str>> {
    const PREFIXES: &[&str] = &[
        "params",
        "context.",
        "results.",
        "step.",
        "steps.",
        "workspaces.",
        "credentials.",
        "tasks.",
        "inputs.",
        "artifacts.",
    ];
    let mut parts = Vec::new();
    let mut rest = want;
    while let Some(start) = rest.find("$(") {
        let inner = &rest[start + 2..];
        let Some(end) = inner.find(')') else { break };
        let name = &inner[..end];
        if PREFIXES.iter().any(|p| name.starts_with(p)) {
            parts.push(Ok(&rest[..start]));
            parts.push(Err(name));
            rest = &inner[end + 1..];
        } else {
            parts.push(Ok(&rest[..start + 2]));
            rest = inner;
        }
    }
    parts.push(Ok(rest));
    parts
}

fn matches_parts(parts: &[Result<&str, &str>], actual: &str, data: bool) -> bool {
    match parts.split_first() {
        None => actual.is_empty(),
        Some((Ok(literal), rest)) => actual
            .strip_prefix(literal)
            .is_some_and(|after| matches_parts(rest, after, data)),
        Some((Err(name), rest)) => {
            // Left as written (the entrypoint substitutes some at run time)...
            if actual
                .strip_prefix(&format!("$({name})"))
                .is_some_and(|after| matches_parts(rest, after, data))
            {
                return true;
            }
            // ...or replaced: the shortest value first; every split point is tried (strings
            // are short).
            for (i, c) in actual.char_indices().chain([(actual.len(), ' ')]) {
                if matches_parts(rest, &actual[i..], data) {
                    return true;
                }
                if i == actual.len() || !(data || is_token_char(c)) {
                    return false;
                }
            }
            false
        }
    }
}

fn is_token_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':' | '@' | '+' | '=' | ',')
}

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn member<'v>(value: &'v Value, key: &str) -> &'v Value {
    value.get(key).unwrap_or(&Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Round 4 of the breakers: a value (a remote Task's default, two pasted halves) that
    /// brings a `$(…)` the kubelet or the entrypoint would expand into the org step's secrets
    /// or results is not the policy's env value, whatever the value otherwise is.
    #[test]
    fn a_value_brings_no_expansion_of_its_own() {
        let want = "$(params.sbom-url)";
        assert!(matches(want, "https://sbom.example.com/up", true));
        assert!(!matches(want, "https://evil.example/?t=$(TOKEN)", true));
        assert!(!matches(
            want,
            "https://evil/?r=$(steps.bookend-creds.results.token)",
            true
        ));
        let pasted = "https://$(params.sbom-host)$(params.sbom-path)";
        assert!(matches(pasted, "https://sbom.example.com/v1", true));
        assert!(!matches(pasted, "https://evil.example/?t=$(TOKEN)", true));
        // The policy's own expansions stay allowed, as often as the policy writes them.
        let own = "Bearer $(TOKEN) for $(params.who)";
        assert!(matches(own, "Bearer $(TOKEN) for team-a", true));
        assert!(!matches(own, "Bearer $(TOKEN) for $(TOKEN)", true));
        // Variables Tekton leaves as written for the entrypoint still match as written.
        assert!(matches(
            "$(steps.bookend-gate-1.results.ok)",
            "$(steps.bookend-gate-1.results.ok)",
            true
        ));
    }

    #[test]
    fn variables_match_their_values_and_only_tokens_outside_data() {
        assert!(matches(
            "curl $(context.taskRun.name)/x",
            "curl run-1/x",
            false
        ));
        assert!(matches(
            "$(results.digest.path)",
            "/tekton/results/digest",
            false
        ));
        assert!(!matches(
            "curl $(context.taskRun.name)/x",
            "curl a;b/x",
            false
        ));
        assert!(matches("$(params.msg)", "hello; rm -rf /", true));
        assert!(!matches("echo hi", "echo hi; evil", false));
        assert!(matches("$(not.a.variable)", "$(not.a.variable)", false));
        assert!(!matches("a$(params.x)b", "ab c", false));
        assert!(matches("a$(params.x)b", "ab", false));
    }

    #[test]
    fn images_by_digest_are_the_same_repository() {
        let digest = format!("@sha256:{}", "a".repeat(64));
        assert!(same_image_by_digest(
            "alpine",
            &format!("index.docker.io/library/alpine{digest}")
        ));
        assert!(same_image_by_digest(
            "docker.io/library/busybox:1.37",
            &format!("index.docker.io/library/busybox{digest}")
        ));
        assert!(same_image_by_digest(
            "gcr.io/x/y:1",
            &format!("gcr.io/x/y{digest}")
        ));
        assert!(same_image_by_digest(
            "localhost:5000/y:1",
            &format!("localhost:5000/y{digest}")
        ));
        assert!(!same_image_by_digest(
            "gcr.io/x/y:1",
            &format!("gcr.io/x/evil{digest}")
        ));
        assert!(!same_image_by_digest("alpine", "alpine:3"));
    }

    #[test]
    fn placed_scripts_are_read_back() {
        let script = "#!/bin/sh\nset -e\necho hi\n";
        let encoded = base64::engine::general_purpose::STANDARD.encode(script);
        let place = format!(
            "scriptfile=\"/tekton/scripts/script-0-abcde\"\ntouch ${{scriptfile}} && chmod +x ${{scriptfile}}\ncat > ${{scriptfile}} << '_EOF_'\n{encoded}\n_EOF_\n/tekton/bin/entrypoint decode-script \"${{scriptfile}}\"\n"
        );
        assert_eq!(
            placed_script(&place, "/tekton/scripts/script-0-abcde").as_deref(),
            Some(script)
        );
        assert_eq!(
            placed_script(&place, "/tekton/scripts/script-1-abcde"),
            None
        );
    }

    fn container(args: &[&str]) -> Value {
        json!({"name": "step-bookend-x", "image": "alpine", "command": [ENTRYPOINT],
               "args": args, "terminationMessagePath": TERMINATION_PATH,
               "volumeMounts": [{"name": "tekton-internal-bin", "mountPath": "/tekton/bin", "readOnly": true},
                                {"name": "tekton-internal-run-0", "mountPath": "/tekton/run/0"}]})
    }

    #[test]
    fn an_org_container_as_tekton_builds_it_passes_and_each_change_is_named() {
        let step = json!({"name": "bookend-x", "image": "alpine", "command": ["/bin/upload"],
                          "args": ["--to", "$(context.taskRun.namespace)"], "onError": "continue",
                          "env": [{"name": "MODE", "value": "strict"}]});
        let volumes = [
            json!({"name": "tekton-internal-bin", "emptyDir": {}}),
            json!({"name": "tekton-internal-run-0", "emptyDir": {}}),
        ];
        let org_paths = OrgPaths::of(&[]);
        let facts = PodFacts {
            place_scripts: None,
            platform_env: &[],
            volumes: &volumes,
            token_volumes: token_volumes(&volumes),
            org_paths: &org_paths,
            prefix: "bookend-",
        };
        let args = [
            "-post_file",
            "/tekton/run/0/out",
            "-termination_path",
            "/tekton/termination",
            "-step_metadata_dir",
            "/tekton/run/0/status",
            "-on_error",
            "continue",
            "-entrypoint",
            "/bin/upload",
            "--",
            "--to",
            "team-a",
        ];
        let mut good = container(&args);
        good["env"] = json!([{"name": "MODE", "value": "strict"}]);
        assert_eq!(check(&good, &step, &facts), Ok(()));
        let field_of = |c: &Value| check(c, &step, &facts).unwrap_err().field;
        let mut c = good.clone();
        c["image"] = json!("evil");
        assert_eq!(field_of(&c), "image");
        let mut c = good.clone();
        c["env"] = json!([{"name": "MODE", "value": "off"}]);
        assert_eq!(field_of(&c), "env[0]");
        let mut c = good.clone();
        c["env"] =
            json!([{"name": "MODE", "value": "strict"}, {"name": "LD_PRELOAD", "value": "/x"}]);
        assert_eq!(field_of(&c), "env[1]");
        let mut c = good.clone();
        c["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "w", "mountPath": "/bin"}));
        assert_eq!(field_of(&c), "volumeMounts[2]");
        let mut c = good.clone();
        c["args"][11] = json!("x; evil");
        assert_eq!(field_of(&c), "args");
        let mut evil_flag = args.to_vec();
        evil_flag.insert(0, "-debug_before_step");
        let mut c = container(&evil_flag);
        c["env"] = good["env"].clone();
        assert_eq!(field_of(&c), "args");
        let mut c = good.clone();
        c["securityContext"] = json!({"privileged": true});
        assert_eq!(
            check(&c, &step, &facts),
            Ok(()),
            "keys the policy leaves unset are the platform's"
        );
        let mut hardened = step.clone();
        hardened["securityContext"] = json!({"allowPrivilegeEscalation": false});
        assert_eq!(
            check(&c, &hardened, &facts).unwrap_err().field,
            "securityContext"
        );
        let mut c = good.clone();
        c["ports"] = json!([{"containerPort": 80}]);
        assert_eq!(field_of(&c), "ports");
    }

    #[test]
    fn an_org_container_sees_the_policys_mounts_and_tektons_and_nothing_of_the_authors_over_its_paths()
     {
        let set = crate::engine::tests::policies(
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org}\nspec:\n  volumes: [{name: bookend-creds, secret: {secretName: org-creds}}]\n  preSteps: [{name: bookend-x, image: alpine, command: [/usr/local/bin/x], volumeMounts: [{name: bookend-creds, mountPath: /workspace/creds, readOnly: true}]}]\n",
        );
        let policies: Vec<&crate::policy::Policy> = set.policies().iter().collect();
        let step = policies[0].pre_steps[0].clone();
        let strict = OrgPaths::of(&policies);
        let mut anywhere_policy = policies[0].clone();
        anywhere_policy.spec.workspace_mounts = crate::policy::WorkspaceMounts::Anywhere;
        let anywhere = OrgPaths::of(&[&anywhere_policy]);
        let volumes = [
            json!({"name": "tekton-internal-bin", "emptyDir": {}}),
            json!({"name": "tekton-internal-run-0", "emptyDir": {}}),
            json!({"name": "tekton-internal-downward", "downwardAPI": {"items": []}}),
            json!({"name": "tekton-creds-1a2b3c4d", "secret": {"secretName": "git"}}),
            json!({"name": "tekton-internal-secret-volume-git-x7k2p", "secret": {"secretName": "git"}}),
            json!({"name": "tekton-internal-scripts", "configMap": {"name": "authors"}}),
            json!({"name": "ws-k7x2p", "configMap": {"name": "authors"}}),
            json!({"name": "bookend-creds", "secret": {"secretName": "org-creds"}}),
            json!({"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}),
            json!({"name": "kube-api-access-evil", "configMap": {"name": "authors-ca"}}),
        ];
        let base = json!([
            {"name": "tekton-internal-bin", "mountPath": "/tekton/bin", "readOnly": true},
            {"name": "tekton-internal-run-0", "mountPath": "/tekton/run/0"},
            {"name": "bookend-creds", "mountPath": "/workspace/creds", "readOnly": true}]);
        let with = |mount: Value| {
            let mut mounts = base.clone();
            mounts.as_array_mut().unwrap().push(mount);
            json!({"name": "step-bookend-x", "image": "alpine", "command": [ENTRYPOINT],
                   "args": ["-post_file", "/tekton/run/0/out", "-termination_path", "/tekton/termination",
                            "-step_metadata_dir", "/tekton/run/0/status", "-entrypoint", "/usr/local/bin/x", "--"],
                   "volumeMounts": mounts})
        };
        let answer = |paths: &OrgPaths, mount: Value| {
            let facts = PodFacts {
                place_scripts: None,
                platform_env: &[],
                volumes: &volumes,
                token_volumes: token_volumes(&volumes),
                org_paths: paths,
                prefix: "bookend-",
            };
            check(&with(mount), &step, &facts).map_err(|d| d.what)
        };
        let admitted = [
            (
                &strict,
                json!({"name": "ws-k7x2p", "mountPath": "/workspace/src"}),
            ),
            (
                &strict,
                json!({"name": "tekton-internal-downward", "mountPath": "/tekton/downward", "readOnly": true}),
            ),
            (
                &strict,
                json!({"name": "tekton-creds-1a2b3c4d", "mountPath": "/tekton/creds-secrets/git"}),
            ),
            (
                &strict,
                json!({"name": "tekton-internal-secret-volume-git-x7k2p", "mountPath": "/tekton/creds-secrets/git"}),
            ),
            (&anywhere, json!({"name": "ws-k7x2p", "mountPath": "/data"})),
            (
                &strict,
                json!({"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}),
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/workspace/credsx"}),
            ),
        ];
        for (paths, mount) in admitted {
            assert_eq!(answer(paths, mount.clone()), Ok(()), "{mount}");
        }
        let refused = [
            (
                &strict,
                json!({"name": "ws-k7x2p", "mountPath": "/bin"}),
                "allows workspaces only under /workspace",
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/usr/lib/"}),
                "would replace what they run from (/usr)",
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/"}),
                "would replace what they run from (/)",
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/workspace"}),
                "(/workspace)",
            ),
            (
                &strict,
                json!({"name": "ws-k7x2p", "mountPath": "/workspace/creds/token", "subPath": "t"}),
                "own mount at /workspace/creds",
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/workspace/./creds/.."}),
                "(/workspace)",
            ),
            (
                &strict,
                json!({"name": "tekton-internal-bin", "mountPath": "/tekton/bin/entrypoint"}),
                "not one of Tekton's own",
            ),
            (
                &strict,
                json!({"name": "tekton-internal-scripts", "mountPath": "/tekton/scripts"}),
                "not one of Tekton's own",
            ),
            (
                &strict,
                json!({"name": "tekton-internal-run-1", "mountPath": "/tekton/run/0x"}),
                "not one of Tekton's own",
            ),
            (
                &strict,
                json!({"name": "bookend-creds", "mountPath": "/workspace/other"}),
                "bookend's volume",
            ),
            (
                &anywhere,
                json!({"name": "ws-k7x2p", "mountPath": "/tekton/home"}),
                "(/tekton)",
            ),
            // The Task's own volume named for the ServiceAccount plugin, which takes it.
            (
                &anywhere,
                json!({"name": "kube-api-access-evil", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}),
                "the Task's volume \"kube-api-access-evil\" is not the service account token; the API server's ServiceAccount admission plugin takes a Pod volume named kube-api-access-… for the token's and mounts it at /var/run/secrets/kubernetes.io/serviceaccount in every container, org steps included; rename the Task's volume",
            ),
            (
                &anywhere,
                json!({"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}),
                "(/var)",
            ),
        ];
        for (paths, mount, says) in refused {
            let what = answer(paths, mount.clone()).unwrap_err();
            assert!(what.contains(says), "{mount}: {what}");
        }
    }
}
