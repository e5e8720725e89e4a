//! The Always construction, run: gate and verdict scripts under /bin/sh, the rest of Tekton's
//! step semantics emulated (docs/tekton-notes.md, "How steps run"). The runtime suite
//! (tests/runtime) runs the same construction under Tekton's real controller and entrypoint.

use super::*;

/// What happened when an admitted TaskRun ran.
#[derive(Debug, PartialEq, Eq)]
struct Ran {
    /// The steps that ran (not skipped), in order.
    ran: Vec<String>,
    /// Each gate's result as written (`None`: no result).
    gates: Vec<Option<String>>,
    /// The verdict's exit code (`None`: it did not run) and its output.
    verdict: Option<i32>,
    verdict_says: String,
    /// The TaskRun's outcome: false when a step exited non-zero without `onError: continue`.
    succeeded: bool,
}

/// Runs `object`'s steps as Tekton's entrypoint would, as far as bookend's construction relies
/// on it: in order; a step whose `when` reads a gate result other than `true` is skipped with
/// exit code 0; a user or policy step exits with the code `fail` gives it (0 otherwise); a
/// step exiting non-zero without `onError: continue` skips every later step, which write no
/// exit code. Gates and the verdict run their own scripts under /bin/sh against a temporary
/// directory standing for /tekton/steps (with Tekton's `<index>` and `step-<name>` entries).
fn run_like_tekton(object: &Value, fail: &[(&str, i32)]) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("steps");
    let steps = steps_of(object);
    for (i, step) in steps.iter().enumerate() {
        std::fs::create_dir_all(root.join(i.to_string()).join("results")).unwrap();
        std::os::unix::fs::symlink(i.to_string(), root.join(tekton::container_name(step, i)))
            .unwrap();
    }
    let mut out = Ran {
        ran: Vec::new(),
        gates: Vec::new(),
        verdict: None,
        verdict_says: String::new(),
        succeeded: true,
    };
    let root_str = root.to_str().unwrap().to_owned();
    let mut stopped = false;
    for (i, step) in steps.iter().enumerate() {
        let name = tekton::step_name(step).unwrap_or("").to_owned();
        let is_gate = name.starts_with("bookend-gate-");
        if stopped {
            if is_gate {
                out.gates.push(None);
            }
            continue;
        }
        let status = root.join(i.to_string());
        let when_holds = step["when"].as_array().into_iter().flatten().all(|w| {
            let input = w["input"].as_str().unwrap();
            let value = input
                .strip_prefix("$(steps.")
                .and_then(|s| s.strip_suffix(".results.ok)"))
                .and_then(|gate| {
                    std::fs::read_to_string(root.join(format!("step-{gate}/results/ok"))).ok()
                })
                .unwrap_or_else(|| input.to_owned());
            w["values"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == &json!(value))
        });
        if !when_holds {
            std::fs::write(status.join("exitCode"), "0").unwrap();
            if is_gate {
                out.gates.push(None);
            }
            continue;
        }
        out.ran.push(name.clone());
        let code = if is_gate || name == "bookend-verdict" {
            let script = helper_script(step)
                .replace("/tekton/steps", &root_str)
                .replace(
                    "$(step.results.ok.path)",
                    status.join("results/ok").to_str().unwrap(),
                );
            let result = std::process::Command::new("/bin/sh")
                .args(["-c", &script])
                .output()
                .expect("/bin/sh runs");
            if name == "bookend-verdict" {
                out.verdict = result.status.code();
                out.verdict_says = String::from_utf8_lossy(&result.stdout).into_owned();
            } else {
                out.gates
                    .push(std::fs::read_to_string(status.join("results/ok")).ok());
            }
            result.status.code().unwrap()
        } else {
            fail.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, c)| *c)
                .unwrap_or(0)
        };
        if code != 0 && step["onError"] != "continue" {
            out.succeeded = false;
            stopped = true;
            continue;
        }
        std::fs::write(status.join("exitCode"), code.to_string()).unwrap();
    }
    out
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn gates(v: &[Option<&str>]) -> Vec<Option<String>> {
    v.iter().map(|g| g.map(str::to_owned)).collect()
}

/// Post-steps run after a failure, the TaskRun still fails, the verdict names the failed step,
/// and a step skipped by its gate (exit code 0) never counts as a success.
fn assert_always_semantics(admitted: &Value) {
    assert_eq!(
        names(admitted),
        [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "lint",
            "test",
            "bookend-report",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-verdict"
        ]
    );
    let all = run_like_tekton(admitted, &[]);
    assert_eq!(
        all.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "lint",
            "test",
            "bookend-report",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        all.gates,
        gates(&[Some("true"), Some("true"), Some("true")])
    );
    assert_eq!((all.verdict, all.succeeded), (Some(0), true));
    assert_eq!(all.verdict_says, "");

    // The pre-step fails: nothing guarded runs, the report does, the verdict names the setup.
    let pre = run_like_tekton(admitted, &[("bookend-setup", 7)]);
    assert_eq!(
        pre.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "bookend-gate-2",
            "bookend-report",
            "bookend-gate-3",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        pre.gates,
        gates(&[Some("false"), Some("false"), Some("false")])
    );
    assert_eq!((pre.verdict, pre.succeeded), (Some(1), false));
    assert_eq!(
        pre.verdict_says,
        "bookend: step-bookend-setup failed (exit code 7)\n"
    );

    // build fails: lint and test are skipped (exit code 0, not counted as success), the
    // report runs, notify does not.
    let build = run_like_tekton(admitted, &[("build", 3)]);
    assert_eq!(
        build.ran,
        strings(&[
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "bookend-report",
            "bookend-gate-3",
            "bookend-verdict"
        ])
    );
    assert_eq!(
        build.gates,
        gates(&[Some("true"), Some("false"), Some("false")])
    );
    assert_eq!((build.verdict, build.succeeded), (Some(1), false));
    assert_eq!(
        build.verdict_says,
        "bookend: step-build failed (exit code 3)\n"
    );

    // lint is best effort: its failure changes nothing.
    let lint = run_like_tekton(admitted, &[("lint", 5)]);
    assert_eq!(lint.ran, all.ran);
    assert_eq!((lint.verdict, lint.succeeded), (Some(0), true));

    // test fails: notify (OnSuccess, after the Always report) is skipped.
    let test = run_like_tekton(admitted, &[("test", 2)]);
    assert!(test.ran.contains(&"bookend-report".to_owned()));
    assert!(!test.ran.contains(&"bookend-notify".to_owned()));
    assert_eq!(
        test.gates,
        gates(&[Some("true"), Some("true"), Some("false")])
    );
    assert_eq!((test.verdict, test.succeeded), (Some(1), false));
    assert_eq!(
        test.verdict_says,
        "bookend: step-test failed (exit code 2)\n"
    );
}

#[test]
fn always_helpers_run_as_documented() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    assert_always_semantics(&admitted);
}

/// The admitted TaskRun with its helpers in the form releases up to 0.1.0 wrote.
fn with_legacy_helpers(set: &PolicySet, object: &Value, admitted: &Value) -> Value {
    with_earlier_helpers(set, object, admitted, 2)
}

/// The admitted TaskRun with its helpers in one of [`inject::earlier_helper_steps`]' forms.
fn with_earlier_helpers(set: &PolicySet, object: &Value, admitted: &Value, form: usize) -> Value {
    let applied: Vec<&Policy> = set.policies().iter().collect();
    let composed = inject::compose(
        steps_of(object).clone(),
        &applied,
        set.settings(),
        tekton::ApiVersion::V1,
        &inject::ParamValues {
            run_params: &[],
            spec_params: &[],
        },
    );
    let mut legacy = admitted.clone();
    let steps = legacy["spec"]["taskSpec"]["steps"].as_array_mut().unwrap();
    let mut specs = composed.checks.iter();
    for (step, kind) in steps.iter_mut().zip(&composed.kinds) {
        if matches!(kind, inject::StepKind::Gate | inject::StepKind::Verdict) {
            let name = tekton::step_name(step).unwrap().to_owned();
            *step = inject::earlier_helper_steps(set.settings(), &name, specs.next().unwrap())
                [form]
                .clone();
        }
    }
    legacy
}

#[test]
fn helpers_in_the_older_form_are_bookends_own() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    let legacy = with_legacy_helpers(&set, &object, &admitted);
    assert_ne!(legacy, admitted);
    // Exactly what 0.1.0 wrote (tests/golden/08-rerun-is-idempotent.yaml has a whole one).
    assert_eq!(
        helper_script(&steps_of(&legacy)[3]),
        r#"ok=true; [ "$(cat /tekton/steps/step-bookend-gate-1/results/ok 2>/dev/null)" = true ] || ok=false; for s in 2:step-build; do c=$(cat /tekton/steps/${s%%:*}/exitCode 2>/dev/null); [ "$c" = 0 ] || ok=false; done; printf %s "$ok" > $(step.results.ok.path)"#
    );
    assert_eq!(
        steps_of(&legacy)[3]["results"],
        json!([{"name": "ok", "type": "string"}])
    );
    // An upgrade: what an older replica injected is admitted as it is, by re-invocation and by
    // the validating backstop.
    assert_settled(&set, &legacy);
    let backstop = decide_backstop(request(&legacy), &set, &Catalog::default());
    assert_eq!(backstop.outcome, Outcome::Admitted, "{:?}", backstop.patch);
    // And it ran the same way.
    assert_always_semantics(&legacy);
}

#[test]
fn gates_without_the_wait_are_bookends_own() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    for form in [0, 1] {
        let earlier = with_earlier_helpers(&set, &object, &admitted, form);
        assert_ne!(earlier, admitted, "form {form}");
        assert!(
            !helper_script(&steps_of(&earlier)[1]).contains("until"),
            "form {form}"
        );
        assert_settled(&set, &earlier);
        let backstop = decide_backstop(request(&earlier), &set, &Catalog::default());
        assert_eq!(backstop.outcome, Outcome::Admitted, "form {form}");
        assert_always_semantics(&earlier);
    }
}

/// Tekton's entrypoint writes a step's post file (which starts the gate) before its `exitCode`
/// (docs/tekton-notes.md): a gate that finds the file missing must wait for it, not write
/// `false` (which would skip the guarded steps while the verdict, reading later, passes).
#[test]
fn a_gate_waits_for_the_exit_code_tekton_writes_after_the_post_file() {
    let (set, object) = always_scenario();
    let admitted = assert_converges(&set, &object);
    let gate_result = |gate: &Value| -> String {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("steps");
        for i in 0..3 {
            std::fs::create_dir_all(root.join(i.to_string()).join("results")).unwrap();
        }
        // Gate 1 (step 1) passed; `build` (step 2) finished, its exit code not written yet.
        std::fs::write(root.join("1/results/ok"), "true").unwrap();
        let script = helper_script(gate).replace("/tekton/steps", root.to_str().unwrap());
        let script = script.replace("$(step.results.ok.path)", "ok");
        let mut gate = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .spawn()
            .expect("/bin/sh runs");
        // A gate that waits cannot finish before the file is there (whenever it is checked);
        // one that does not finishes on its own, having read nothing.
        let waits = script.contains("until [ -s 2/exitCode ]");
        if waits {
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(gate.try_wait().unwrap().is_none(), "the gate waits");
        } else {
            assert!(gate.wait().unwrap().success());
        }
        // The entrypoint's late write.
        std::fs::write(root.join("2/exitCode"), "0").unwrap();
        assert!(gate.wait().unwrap().success());
        std::fs::read_to_string(root.join("ok")).unwrap()
    };
    let gate_2 = &steps_of(&admitted)[3];
    assert_eq!(tekton::step_name(gate_2), Some("bookend-gate-2"));
    assert_eq!(gate_result(gate_2), "true");
    // The form releases up to 0.2 wrote read at once: `false`, the race this closes.
    let earlier = with_earlier_helpers(&set, &object, &admitted, 0);
    assert_eq!(gate_result(&steps_of(&earlier)[3]), "false");
}
