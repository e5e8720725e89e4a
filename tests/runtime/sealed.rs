//! The "Sealed" issue by execution (docs/security.md): org steps run as their policy defines
//! them whatever the author's stepTemplate says, while the author's own steps still get it; the
//! verdict of an `Always` policy reads the right directory for step names up to Tekton's 63
//! characters; every `taskRef` form bookend inlines as a local Task is one Tekton's own
//! reconciler runs as the local Task (tests/security/classes/taskref.rs, shared by `#[path]`);
//! and what the stepTemplate no longer gives bookend's own steps under Pod Security `restricted`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::classes::taskref;
use crate::kube::{cluster_policy, poll};
use crate::node::BUSYBOX;
use crate::runs::{
    Checks, Env, Finished, TRACE, assert_condition, assert_steps, assert_trace, step, taskrun,
};
use crate::scenarios::{ALWAYS, Ctx, PLAIN};

/// A hostile stepTemplate around an `Always` policy's steps.
pub const SEALED: &str = "rt-sealed";
/// The `taskRef` forms, with a one-step policy.
pub const FORMS: &str = "rt-forms";
/// Pod Security `restricted`: policies whose org steps set a restricted securityContext, one
/// `OnSuccess` and one `Always` (for TaskRuns labelled `ALWAYS_LABEL`).
pub const RESTRICTED: &str = "rt-restricted";
/// Pod Security `restricted`, no policy.
pub const RESTRICTED_PLAIN: &str = "rt-restricted-plain";
pub const NAMESPACES: [&str; 4] = [SEALED, FORMS, RESTRICTED, RESTRICTED_PLAIN];
const ALWAYS_LABEL: &str = "bookend.test/always";

const SUCCEEDED: (&str, &str, &str) = ("True", "Succeeded", "All Steps have completed executing");
const VERDICT_FAILED: &str = "\"step-bookend-verdict\" exited with code 1: Error";

/// Shell that writes what the step `name` sees to /tekton/home/seen-<name>, one fact a line:
/// `argv0=` (with `argv0`: a `script` step's $0 is a generated file name), `args=`, `pwd=`,
/// whether /evil (the author's stepTemplate mount) and /sealed (the policy's) are mounted, and
/// `env NAME=value` for its environment (but what the shell sets itself), sorted. It appends
/// `name` to the trace first.
fn seen_script(name: &str, argv0: bool) -> String {
    format!(
        "echo {name} >> {TRACE}\n{{ {argv0}echo \"args=$*\"; echo \"pwd=$(pwd)\"; \
         [ -d /evil ] && echo evil=mounted || echo evil=absent; \
         [ -d /sealed ] && echo sealed=mounted || echo sealed=absent; \
         env | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' -e '^OLDPWD=' | sed 's/^/env /' | sort; \
         }} > /tekton/home/seen-{name}",
        argv0 = if argv0 { "echo \"argv0=$0\"; " } else { "" }
    )
}

/// The test policies.
pub fn policies() -> Vec<Value> {
    let mount = json!([{"name": "bookend-sealed-vol", "mountPath": "/sealed"}]);
    vec![
        // What the org's steps are: a `script` pre-step with an env of its own, and an `Always`
        // post-step with its own command and arguments and no env; both mount the policy's
        // volume and neither sets a working directory.
        cluster_policy(
            "rt-sealed",
            json!({"postStepsRun": "Always", "match": {"namespaces": [SEALED]},
                   "preSteps": [{"name": "bookend-sealed-pre", "image": BUSYBOX,
                                 "script": format!("#!/bin/sh\n{}",
                                                   seen_script("bookend-sealed-pre", false)),
                                 "env": [{"name": "CREDS_MODE", "value": "strict"}],
                                 "volumeMounts": mount}],
                   "postSteps": [{"name": "bookend-sealed-post", "image": BUSYBOX,
                                  "command": ["/bin/sh", "-c"],
                                  "args": [seen_script("bookend-sealed-post", true),
                                           "post-argv0", "policy-arg"],
                                  "volumeMounts": mount}],
                   "volumes": [{"name": "bookend-sealed-vol", "emptyDir": {}}]}),
        ),
        cluster_policy(
            "rt-restricted",
            json!({"match": {"namespaces": [RESTRICTED]},
                   "preSteps": [restricted_step("bookend-restricted-pre")]}),
        ),
        cluster_policy(
            "rt-restricted-always",
            json!({"postStepsRun": "Always",
                   "match": {"namespaces": [RESTRICTED],
                             "selector": {"matchLabels": {ALWAYS_LABEL: "true"}}},
                   "postSteps": [restricted_step("bookend-restricted-post")]}),
        ),
        cluster_policy(
            "rt-forms",
            json!({"match": {"namespaces": [FORMS]},
                   "preSteps": [step("bookend-forms-pre", "")]}),
        ),
    ]
}

/// The lines of what a step saw (`seen_script`).
fn seen(env: &Env, run: &Finished, step: &str) -> Vec<String> {
    run.home_file(env, &format!("seen-{step}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `env NAME=value` lines as a map.
fn environment(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("env "))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The line starting `key=`, without it.
fn fact<'a>(lines: &'a [String], key: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {lines:?}"))
}

/// Scenario 12: a Task whose stepTemplate sets env (the org's own variable, and one more), a
/// working directory, a command and a volume mount, run by `taskRef` (bookend inlines it, writes
/// the template into the Task's step and removes it) under an `Always` policy, once succeeding
/// and once failing; and the same policy around a TaskRun without a stepTemplate. The org's
/// steps write what they see: it must be what their policy defines, and the same in all three.
pub fn scenario_hostile_step_template(ctx: &mut Ctx) -> String {
    ctx.env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": "rt-hostile", "namespace": SEALED},
        "spec": {
            "params": [{"name": "fail", "type": "string", "default": "0"}],
            "volumes": [{"name": "evil", "emptyDir": {}}],
            "stepTemplate": {
                "env": [{"name": "CREDS_MODE", "value": "off"},
                        {"name": "EVIL", "value": "injected"}],
                "workingDir": "/evil",
                "command": ["/bin/sh", "-c"],
                "volumeMounts": [{"name": "evil", "mountPath": "/evil"}],
            },
            // No command of its own: the stepTemplate's runs its args.
            "steps": [{"name": "build", "image": BUSYBOX,
                       "args": [format!("{}\nexit $(params.fail)", seen_script("build", false))]}],
        },
    }));
    let by_ref = |fail: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
               "metadata": {"generateName": "hostile-", "namespace": SEALED},
               "spec": {"taskRef": {"name": "rt-hostile"},
                        "params": [{"name": "fail", "value": fail}]}})
    };
    poll("bookend to see the Task", Duration::from_secs(30), || {
        let out = ctx
            .env
            .kubectl
            .with_object(&["create", "--dry-run=server"], &by_ref("0"));
        let object = out.try_json()?;
        if object["spec"]["taskSpec"].is_object() {
            Ok(())
        } else {
            Err(format!("not inlined: {}{}", out.stdout, out.stderr))
        }
    });
    let plain_build = json!({"name": "build", "image": BUSYBOX, "command": ["/bin/sh", "-c"],
                             "args": [seen_script("build", false)]});
    let runs = ctx.env.run_all(&[
        by_ref("0"),
        by_ref("3"),
        taskrun(SEALED, "no-template", json!({"steps": [plain_build]})),
    ]);
    let [pass, fail, plain] = &runs[..] else {
        unreachable!()
    };
    let env = &ctx.env;
    let mut checks = Checks::default();
    let layout = |build: (&'static str, &'static str, i64), verdict: (&'static str, i64)| {
        vec![
            ("bookend-sealed-pre", "Completed", 0),
            ("bookend-gate-1", "Completed", 0),
            build,
            ("bookend-sealed-post", "Completed", 0),
            ("bookend-verdict", verdict.0, verdict.1),
        ]
    };
    let order = ["bookend-sealed-pre", "build", "bookend-sealed-post"];
    checks.check("the hostile Task passes", || {
        let (s, r, m) = SUCCEEDED;
        assert_condition(env, pass, s, r, m);
        assert_steps(
            env,
            pass,
            &layout(("build", "Completed", 0), ("Completed", 0)),
        );
        assert_trace(env, pass, &order);
        let spec = &pass.object["spec"]["taskSpec"];
        assert!(
            spec.get("stepTemplate").is_none(),
            "bookend removed the stepTemplate: {spec}"
        );
    });
    checks.check("the hostile Task fails: the Always post-step runs", || {
        assert_condition(env, fail, "False", "StepFailed", VERDICT_FAILED);
        assert_steps(env, fail, &layout(("build", "Continued", 3), ("Error", 1)));
        assert_trace(env, fail, &order);
        assert!(
            fail.log(env, "bookend-verdict")
                .contains("bookend: step-build failed (exit code 3)"),
            "{}",
            fail.log(env, "bookend-verdict")
        );
    });
    checks.check("without a stepTemplate", || {
        let (s, r, m) = SUCCEEDED;
        assert_condition(env, plain, s, r, m);
        assert_trace(env, plain, &order);
    });

    // The org's steps saw what their policy defines, in all three runs alike.
    let pre = seen(env, plain, "bookend-sealed-pre");
    let post = seen(env, plain, "bookend-sealed-post");
    checks.check("the pre-step runs as its policy defines it", || {
        let vars = environment(&pre);
        assert_eq!(vars.get("CREDS_MODE").map(String::as_str), Some("strict"));
        assert!(!vars.contains_key("EVIL"), "{pre:?}");
        assert_eq!(fact(&pre, "args"), "");
        assert_ne!(fact(&pre, "pwd"), "/evil");
        assert_eq!(fact(&pre, "evil"), "absent");
        assert_eq!(fact(&pre, "sealed"), "mounted");
    });
    checks.check("the Always post-step runs as its policy defines it", || {
        let vars = environment(&post);
        assert!(
            !vars.contains_key("CREDS_MODE") && !vars.contains_key("EVIL"),
            "{post:?}"
        );
        assert_eq!(fact(&post, "argv0"), "post-argv0");
        assert_eq!(fact(&post, "args"), "policy-arg");
        assert_ne!(fact(&post, "pwd"), "/evil");
        assert_eq!(fact(&post, "evil"), "absent");
        assert_eq!(fact(&post, "sealed"), "mounted");
    });
    for (label, run) in [("passing", pass), ("failing", fail)] {
        checks.check(
            &format!("the org's steps see the same under the hostile stepTemplate ({label})"),
            || {
                assert_eq!(seen(env, run, "bookend-sealed-pre"), pre, "pre-step");
                assert_eq!(seen(env, run, "bookend-sealed-post"), post, "post-step");
            },
        );
    }
    let build = seen(env, pass, "build");
    checks.check("the author's step still gets the stepTemplate", || {
        let vars = environment(&build);
        assert_eq!(vars.get("CREDS_MODE").map(String::as_str), Some("off"));
        assert_eq!(vars.get("EVIL").map(String::as_str), Some("injected"));
        assert_eq!(fact(&build, "pwd"), "/evil");
        assert_eq!(fact(&build, "evil"), "mounted");
        assert_eq!(fact(&build, "sealed"), "absent");
    });
    checks.finish();
    format!(
        "org pre-step saw CREDS_MODE={}, pwd {}, /evil {}; post-step argv {} {}, pwd {}; the same \
         under the hostile stepTemplate (passing and failing); the author's step saw \
         CREDS_MODE={}, EVIL={}, pwd {}, /evil {}",
        environment(&pre)["CREDS_MODE"],
        fact(&pre, "pwd"),
        fact(&pre, "evil"),
        fact(&post, "argv0"),
        fact(&post, "args"),
        fact(&post, "pwd"),
        environment(&build)["CREDS_MODE"],
        environment(&build)["EVIL"],
        fact(&build, "pwd"),
        fact(&build, "evil"),
    )
}

/// A step name of exactly `len` characters.
fn long_name(len: usize) -> String {
    let head = format!("long-{len}-");
    format!("{head}{}", "x".repeat(len - head.len()))
}

/// The name Tekton's status gives a step: its container's, `step-<name>` cut to 63 characters
/// (`names.SimpleNameGenerator.RestrictLength`), without `step-`.
fn status_name(name: &str) -> String {
    let container: String = format!("step-{name}").chars().take(63).collect();
    let container = container.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    container
        .strip_prefix("step-")
        .unwrap_or(container)
        .to_owned()
}

/// Scenario 13: user steps named with 59, 62 and 63 characters (`step-<name>` is longer than a
/// container name may be: Tekton cuts the container's name to 63, while its `prepare` init
/// container links /tekton/steps/step-<full name>) under an `Always` policy: all pass, or one of
/// them fails and the verdict names it.
pub fn scenario_long_step_names(ctx: &mut Ctx) -> String {
    let names: Vec<String> = [59, 62, 63].into_iter().map(long_name).collect();
    // The last step of the passing run lists /tekton/steps: the names the verdict can read.
    let spec = |failing: Option<usize>| {
        let steps: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let then = match failing {
                    Some(f) if f == i => "exit 3",
                    None if i == names.len() - 1 => "ls /tekton/steps > /tekton/home/steps-dir",
                    _ => "",
                };
                step(n, then)
            })
            .collect();
        json!({"steps": steps})
    };
    let mut objects = vec![taskrun(ALWAYS, "long-names", spec(None))];
    for i in 0..names.len() {
        objects.push(taskrun(ALWAYS, "long-names-fail", spec(Some(i))));
    }
    let runs = ctx.env.run_all(&objects);
    let env = &ctx.env;
    let mut checks = Checks::default();
    let [a, b, c] = [&names[0], &names[1], &names[2]].map(|n| status_name(n));
    checks.check("all pass", || {
        let (s, r, m) = SUCCEEDED;
        let run = &runs[0];
        assert_condition(env, run, s, r, m);
        let expected: Vec<(&str, &str, i64)> = [
            "bookend-setup",
            "bookend-gate-1",
            &a,
            "bookend-gate-2",
            &b,
            "bookend-gate-3",
            &c,
            "bookend-gate-4",
            "bookend-notify",
            "bookend-report",
            "bookend-verdict",
        ]
        .into_iter()
        .map(|n| (n, "Completed", 0))
        .collect();
        assert_steps(env, run, &expected);
        let mut trace = vec!["bookend-setup"];
        trace.extend(names.iter().map(String::as_str));
        trace.extend(["bookend-notify", "bookend-report"]);
        assert_trace(env, run, &trace);
        // Tekton's `prepare` init container links each step's directory under its full name
        // (and its index); nothing under the container's cut name.
        let listed: Vec<String> = run
            .home_file(env, "steps-dir")
            .lines()
            .map(str::to_owned)
            .collect();
        for (n, cut) in names.iter().zip([&a, &b, &c]) {
            assert!(
                listed.contains(&format!("step-{n}")) && !listed.contains(&format!("step-{cut}")),
                "/tekton/steps has step-{n}, not step-{cut}: {listed:?}"
            );
        }
    });
    let mut verdicts = Vec::new();
    for (i, run) in runs[1..].iter().enumerate() {
        let failed = &names[i];
        let log = run.log(env, "bookend-verdict");
        verdicts.push(
            log.lines()
                .find(|l| l.starts_with("bookend:"))
                .unwrap_or("")
                .to_owned(),
        );
        checks.check(
            &format!("the {}-character step fails", failed.len()),
            || {
                assert_condition(env, run, "False", "StepFailed", VERDICT_FAILED);
                let state = |k: usize, n: &str| -> (String, String, i64) {
                    let name = status_name(n);
                    match k.cmp(&i) {
                        std::cmp::Ordering::Less => (name, "Completed".into(), 0),
                        std::cmp::Ordering::Equal => (name, "Continued".into(), 3),
                        std::cmp::Ordering::Greater => (name, "Skipped".into(), 0),
                    }
                };
                let steps = run.steps();
                let users: Vec<(String, String, i64)> = [2, 4, 6]
                    .into_iter()
                    .map(|at| steps.get(at).cloned().unwrap_or_default())
                    .collect();
                let expected: Vec<_> = names.iter().enumerate().map(|(k, n)| state(k, n)).collect();
                assert_eq!(users, expected, "{}", run.describe(env));
                assert_eq!(
                    steps.last().map(|s| (s.0.as_str(), s.1.as_str(), s.2)),
                    Some(("bookend-verdict", "Error", 1)),
                    "{}",
                    run.describe(env)
                );
                let mut trace = vec!["bookend-setup"];
                trace.extend(names[..=i].iter().map(String::as_str));
                trace.push("bookend-report");
                assert_trace(env, run, &trace);
                assert_eq!(
                    log.lines()
                        .filter(|l| l.starts_with("bookend:"))
                        .collect::<Vec<_>>(),
                    [format!("bookend: step-{failed} failed (exit code 3)")],
                    "the verdict names the step by its full name"
                );
            },
        );
    }
    checks.finish();
    format!(
        "all pass: Succeeded; Tekton's status names them {:?}; failing each: the Always \
         post-step ran and the verdict said {verdicts:?}",
        [a.len(), b.len(), c.len()]
    )
}

/// Scenario 14: every local `taskRef` form of tests/security's taskRef class, without bookend
/// (namespace `plain`: Tekton's reconciler fetches the Task itself) and with a policy (bookend
/// inlined it): the same Task runs, with the org's step around it. (A v1beta1 `bundle`, which
/// Tekton's webhook refuses on create and bookend refuses likewise, is the e2e suite's.)
/// Before Tekton v1.0, `kind: ClusterTask` runs the ClusterTask of that name instead: Tekton
/// runs that one without bookend, and bookend refuses the TaskRun under an inlining policy.
pub fn scenario_task_ref_forms(ctx: &mut Ctx) -> String {
    for ns in [PLAIN, FORMS] {
        ctx.env.kubectl.apply(&json!({
            "apiVersion": "tekton.dev/v1",
            "kind": "Task",
            "metadata": {"name": "build", "namespace": ns},
            "spec": {"steps": [step("form-build", "")]},
        }));
    }
    // Before v1.0 Tekton still has ClusterTask: `kind: ClusterTask` runs the cluster-scoped
    // one (a different step here), which bookend must not replace by the namespaced Task.
    if ctx.cluster_tasks {
        ctx.env.kubectl.apply(&json!({
            "apiVersion": "tekton.dev/v1beta1",
            "kind": "ClusterTask",
            "metadata": {"name": "build"},
            "spec": {"steps": [step("form-cluster-build", "")]},
        }));
    }
    let is_cluster_task = |task_ref: &Value| ctx.cluster_tasks && task_ref["kind"] == "ClusterTask";
    let forms = taskref::local_forms();
    let object = |ns: &str, task_ref: &Value| {
        let version = if task_ref.get("bundle").is_some() {
            "tekton.dev/v1beta1"
        } else {
            "tekton.dev/v1"
        };
        json!({"apiVersion": version, "kind": "TaskRun",
               "metadata": {"generateName": "form-", "namespace": ns},
               "spec": {"taskRef": task_ref}})
    };
    poll("bookend to see the Task", Duration::from_secs(30), || {
        let out = ctx.env.kubectl.with_object(
            &["create", "--dry-run=server"],
            &object(FORMS, &json!({"name": "build"})),
        );
        let o = out.try_json()?;
        if o["spec"]["taskSpec"].is_object() {
            Ok(())
        } else {
            Err(format!("not inlined: {}{}", out.stdout, out.stderr))
        }
    });
    // The ClusterTask form under bookend is refused at admission: not run.
    let objects: Vec<Value> = forms
        .iter()
        .flat_map(|(_, r)| {
            let mut pair = vec![object(PLAIN, r)];
            if !is_cluster_task(r) {
                pair.push(object(FORMS, r));
            }
            pair
        })
        .collect();
    let mut runs = ctx.env.run_all(&objects).into_iter();
    let env = &ctx.env;
    let mut checks = Checks::default();
    let (s, r, m) = SUCCEEDED;
    for (what, task_ref) in &forms {
        let plain = runs.next().expect("a run per form");
        if is_cluster_task(task_ref) {
            checks.check(&format!("{what}: Tekton runs the ClusterTask"), || {
                assert_condition(env, &plain, s, r, m);
                assert_steps(env, &plain, &[("form-cluster-build", "Completed", 0)]);
                assert_trace(env, &plain, &["form-cluster-build"]);
            });
            checks.check(&format!("{what}: bookend refuses it, naming the field"), || {
                let out = env
                    .kubectl
                    .with_object(&["create", "--dry-run=server"], &object(FORMS, task_ref));
                assert!(
                    !out.ok()
                        && out.stderr.contains("spec.taskRef.kind: ClusterTask")
                        && out.stderr.contains("reference a Task in namespace"),
                    "bookend must refuse kind: ClusterTask where Tekton runs ClusterTasks: {}{}",
                    out.stdout,
                    out.stderr
                );
            });
            continue;
        }
        let injected = runs.next().expect("a run per form");
        let (plain, injected) = (&plain, &injected);
        checks.check(&format!("{what}: Tekton runs the local Task"), || {
            assert_condition(env, plain, s, r, m);
            assert_steps(env, plain, &[("form-build", "Completed", 0)]);
            assert_trace(env, plain, &["form-build"]);
        });
        checks.check(&format!("{what}: inlined, with the org's step"), || {
            assert_condition(env, injected, s, r, m);
            assert!(
                injected.object["spec"].get("taskRef").is_none(),
                "inlined: {}",
                injected.object["spec"]
            );
            let order = ["bookend-forms-pre", "form-build"];
            assert_steps(env, injected, &order.map(|n| (n, "Completed", 0)));
            assert_trace(env, injected, &order);
        });
    }
    checks.finish();
    let cluster_task = if ctx.cluster_tasks {
        "; kind ClusterTask: Tekton ran the ClusterTask without bookend, bookend refused it"
    } else {
        ""
    };
    format!(
        "{} forms ({}): Tekton ran the local Task without bookend, and with the org's step after \
         bookend inlined it{cluster_task}",
        forms.len(),
        forms.iter().map(|(w, _)| *w).collect::<Vec<_>>().join(", ")
    )
}

/// What Pod Security's `restricted` level asks of every container.
fn restricted_context() -> Value {
    json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
           "runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000,
           "seccompProfile": {"type": "RuntimeDefault"}})
}

fn restricted_step(name: &str) -> Value {
    let mut s = step(name, "");
    s["securityContext"] = restricted_context();
    s
}

/// Tekton's `set-security-context` feature flag (Tekton's own init containers get a restricted
/// securityContext), on while it lives.
struct SecurityContextFlag<'a>(&'a Env);

impl<'a> SecurityContextFlag<'a> {
    fn set(env: &Env, on: bool) {
        env.kubectl.ok(
            &[
                "-n",
                "tekton-pipelines",
                "patch",
                "configmap",
                "feature-flags",
                "--type",
                "merge",
                "-p",
                &json!({"data": {"set-security-context": on.to_string()}}).to_string(),
            ],
            "Tekton's set-security-context",
        );
    }

    fn on(env: &'a Env) -> Self {
        Self::set(env, true);
        Self(env)
    }
}

impl Drop for SecurityContextFlag<'_> {
    fn drop(&mut self) {
        Self::set(self.0, false);
    }
}

/// Scenario 15: Pod Security `restricted` (the API server's PodSecurity admission refuses a Pod
/// any of whose containers lacks the restricted securityContext). The usual way to meet it is
/// the Task's stepTemplate, with Tekton's `set-security-context` for Tekton's own init
/// containers. Without bookend such a TaskRun runs; with an `OnSuccess` policy whose org step
/// sets its own securityContext it runs; with an `Always` policy bookend adds its gates and
/// verdict, which run restricted themselves (they used to be refused here, when they got no
/// securityContext once the stepTemplate stopped reaching them): it runs, the gates and the
/// verdict as a non-root user reading the other steps' exit codes.
pub fn scenario_restricted(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    for ns in [RESTRICTED, RESTRICTED_PLAIN] {
        env.kubectl.ok(
            &[
                "label",
                "--overwrite",
                "namespace",
                ns,
                "pod-security.kubernetes.io/enforce=restricted",
            ],
            "label the namespace restricted",
        );
    }
    let _flag = SecurityContextFlag::on(env);
    let spec = json!({"stepTemplate": {"securityContext": restricted_context()},
                      "steps": [step("build", "")]});
    // Until the controller has the flag, Tekton's own init containers are refused.
    let control = poll(
        "Tekton's controller to set its init containers' securityContext",
        Duration::from_secs(60),
        || {
            let run = env.run_one(&taskrun(RESTRICTED_PLAIN, "restricted", spec.clone()));
            let (_, reason, message) = run.condition();
            if reason == "PodAdmissionFailed" && message.contains("\"prepare\"") {
                Err(message)
            } else {
                Ok(run)
            }
        },
    );
    let mut always = taskrun(RESTRICTED, "restricted-always", spec.clone());
    always["metadata"]["labels"] = json!({ALWAYS_LABEL: "true"});
    let runs = env.run_all(&[taskrun(RESTRICTED, "restricted", spec), always]);
    let [on_success, always] = &runs[..] else {
        unreachable!()
    };
    let mut checks = Checks::default();
    let (s, r, m) = SUCCEEDED;
    checks.check("without bookend: runs", || {
        assert_condition(env, &control, s, r, m);
        assert_trace(env, &control, &["build"]);
    });
    checks.check("OnSuccess, the org step restricted: runs", || {
        assert_condition(env, on_success, s, r, m);
        assert_trace(env, on_success, &["bookend-restricted-pre", "build"]);
    });
    checks.check(
        "Always: bookend's helpers run restricted, and the TaskRun runs",
        || {
            assert_condition(env, always, s, r, m);
            assert_trace(
                env,
                always,
                &["bookend-restricted-pre", "build", "bookend-restricted-post"],
            );
        },
    );
    let (_, reason, message) = always.condition();
    checks.finish();
    format!(
        "without bookend and with an OnSuccess policy: Succeeded; with an Always policy: \
         {reason}: {message}"
    )
}
