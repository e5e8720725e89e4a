//! The scenarios: TaskRuns and PipelineRuns that bookend injected, run by Tekton's controller
//! and entrypoint, asserted on Tekton's status (condition, each step's terminationReason and
//! exit code, results) and on what the steps wrote.
//!
//! Every step appends a line (usually its own name) to the trace file in /tekton/home, so the
//! trace is the order in which steps actually ran; skipped steps write nothing.

use std::cell::RefCell;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{cluster_policy, poll};
use crate::node::BUSYBOX;
use crate::remote;
use crate::runs::{
    Checks, Env, Finished, TRACE, assert_condition, assert_steps, assert_trace, condition,
    script_step, step, taskrun,
};

pub const PLAIN: &str = "plain";
pub const ORDER: &str = "rt-order";
pub const ALWAYS: &str = "rt-always";
const STEPACTION: &str = "rt-stepaction";
const V1BETA1: &str = "rt-v1beta1";
pub const PIPELINE: &str = "rt-pipeline";
const DENY: &str = "rt-deny";
const WORKSPACE: &str = "rt-workspace";

/// Every namespace the scenarios use; `plain` has no policy (the runs without bookend).
pub const NAMESPACES: [&str; 8] = [
    PLAIN, ORDER, ALWAYS, STEPACTION, V1BETA1, PIPELINE, DENY, WORKSPACE,
];

const PREFAIL_LABEL: &str = "bookend.test/prefail";
const SUCCEEDED: (&str, &str, &str) = ("True", "Succeeded", "All Steps have completed executing");

/// The test policies (ClusterStepPolicy objects).
pub fn policies() -> Vec<Value> {
    vec![
        // Scenario 1: two OnSuccess policies; 10 is outer, 20 inner (docs/policy.md, "Order").
        cluster_policy(
            "rt-outer",
            json!({"priority": 10, "match": {"namespaces": [ORDER]},
                   "preSteps": [step("bookend-outer-pre", "")],
                   "postSteps": [step("bookend-outer-post", &format!("cat {TRACE}"))]}),
        ),
        cluster_policy(
            "rt-inner",
            json!({"priority": 20, "match": {"namespaces": [ORDER]},
                   "preSteps": [step("bookend-inner-pre", "")],
                   "postSteps": [step("bookend-inner-post", "")]}),
        ),
        // Scenario 2: an Always policy around an OnSuccess one, and a failing pre-step for
        // TaskRuns labelled to want it.
        cluster_policy(
            "rt-always",
            json!({"priority": 10, "postStepsRun": "Always", "match": {"namespaces": [ALWAYS]},
                   "preSteps": [step("bookend-setup", "")],
                   "postSteps": [step("bookend-report", &format!("cat {TRACE}"))]}),
        ),
        cluster_policy(
            "rt-notify",
            json!({"priority": 20, "match": {"namespaces": [ALWAYS]},
                   "postSteps": [step("bookend-notify", "")]}),
        ),
        cluster_policy(
            "rt-prefail",
            json!({"priority": 5,
                   "match": {"namespaces": [ALWAYS],
                             "selector": {"matchLabels": {PREFAIL_LABEL: "true"}}},
                   "preSteps": [step("bookend-prefail", "exit 7")]}),
        ),
        // Scenario 4: a pre-step that is a StepAction from a namespace the platform controls,
        // through the cluster resolver (a ClusterStepPolicy may not name one in the TaskRun's
        // namespace: docs/policy.md, "Where an org step's StepAction comes from").
        cluster_policy(
            "rt-stepaction",
            json!({"match": {"namespaces": [STEPACTION]},
                   "preSteps": [{"name": "bookend-via-action",
                                 "ref": {"resolver": "cluster", "params": [
                                     {"name": "kind", "value": "stepaction"},
                                     {"name": "name", "value": "rt-append"},
                                     {"name": "namespace", "value": remote::CATALOG}]},
                                 "params": [{"name": "word", "value": "pre"}]}]}),
        ),
        // Scenario 6: a pre-step with computeResources (`resources` in a v1beta1 TaskRun).
        cluster_policy(
            "rt-v1beta1",
            json!({"match": {"namespaces": [V1BETA1]},
                   "preSteps": [with(step("bookend-b1-pre", ""),
                                     json!({"computeResources": {"requests": {"cpu": "10m"}}}))]}),
        ),
        // Scenario 7: only TaskRuns a PipelineRun creates; and a policy that refuses taskRef.
        cluster_policy(
            "rt-pipeline",
            json!({"match": {"namespaces": [PIPELINE], "origin": "Pipeline"},
                   "preSteps": [step("bookend-pipeline-pre", "")]}),
        ),
        cluster_policy(
            "rt-deny",
            json!({"match": {"namespaces": [DENY]}, "taskRef": "Deny",
                   "preSteps": [step("bookend-deny-pre", "")]}),
        ),
        // Scenario 8: a pre-step that seeds the TaskRun's workspace, whose path comes through
        // env (in the script it would be the author's text: docs/policy.md, "Author-controlled
        // variables in an org step's code").
        cluster_policy(
            "rt-seed",
            json!({"match": {"namespaces": [WORKSPACE]},
                   "preSteps": [with(step("bookend-seed",
                       "echo \"seeded, TEMPLATE_VAR=${TEMPLATE_VAR:-unset}\" > \"$SEED_DIR/seed\""),
                       json!({"env": [{"name": "SEED_DIR", "value": "$(workspaces.source.path)"}]}))]}),
        ),
    ]
}

/// `base` with the members of `extra` added.
fn with(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().expect("an object") {
        base[k] = v.clone();
    }
    base
}

/// What the scenarios share: the cluster, and the notes for the report.
pub struct Ctx {
    pub env: Env,
    /// bookend's webhook configurations as registered (deploy/'s, pointed at the test's bookend).
    pub webhooks: Vec<Value>,
    /// bookend's log: one line per admission review.
    pub bookend_log: std::path::PathBuf,
    /// `bookend serve`: its metrics, and stopped and started again by scenario 22.
    pub bookend: crate::BookendServer,
    /// (TaskRun, steps, helper steps) of every injected run, for docs/testing.md.
    pub helper_notes: RefCell<Vec<(String, usize, usize)>>,
    /// The cluster's Tekton refuses step `when`/`results`: `Always` falls back where allowed.
    pub always_degraded: bool,
    /// The line's Tekton as bookend's offline commands are told it (`--tekton-version` and a
    /// `--tekton-feature-flag` per flag), as `serve` reads it from the cluster.
    pub tekton_args: Vec<String>,
    /// The cluster's Tekton still has ClusterTask (before v1.0): `taskRef.kind: ClusterTask`
    /// runs one.
    pub cluster_tasks: bool,
    /// The line's Tekton release, for what differs by release in what Tekton writes.
    pub tekton_version: bookend::tekton::cluster::Version,
}

impl Ctx {
    fn note(&self, label: &str, run: &Finished) {
        self.helper_notes.borrow_mut().push((
            label.to_owned(),
            run.step_names().len(),
            run.helpers().len(),
        ));
    }
}

fn completed<'a>(names: &[&'a str]) -> Vec<(&'a str, &'static str, i64)> {
    names.iter().map(|n| (*n, "Completed", 0)).collect()
}

// ---------------------------------------------------------------------------------------------

pub fn scenario_order(ctx: &mut Ctx) -> String {
    let steps = |fail: bool| json!({"steps": [step("build", ""), script_step("test", if fail { "exit 2" } else { "" })]});
    let runs = ctx.env.run_all(&[
        taskrun(ORDER, "order", steps(false)),
        taskrun(ORDER, "order-fail", steps(true)),
        taskrun(PLAIN, "order-fail-plain", steps(true)),
    ]);
    let [ok, fail, plain] = &runs[..] else {
        unreachable!()
    };
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    let mut checks = Checks::default();
    let order = [
        "bookend-outer-pre",
        "bookend-inner-pre",
        "build",
        "test",
        "bookend-inner-post",
        "bookend-outer-post",
    ];
    checks.check("all pass", || {
        assert_condition(env, ok, s, r, m);
        assert_steps(env, ok, &completed(&order));
        assert_trace(env, ok, &order);
        // The last step printed the trace it found (after appending its own name): every step had
        // run, in order, before it.
        let printed: Vec<String> = ok
            .log(env, "bookend-outer-post")
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(printed, order, "what bookend-outer-post printed");
        assert!(ok.helpers().is_empty(), "OnSuccess needs no helper steps");
    });

    // OnSuccess keeps Tekton's rule: after a failed step nothing runs, post-steps included, and
    // the TaskRun fails exactly as it does without bookend.
    checks.check("a user step fails", || {
        assert_steps(
            env,
            fail,
            &[
                ("bookend-outer-pre", "Completed", 0),
                ("bookend-inner-pre", "Completed", 0),
                ("build", "Completed", 0),
                ("test", "Error", 2),
                ("bookend-inner-post", "Skipped", 1),
                ("bookend-outer-post", "Skipped", 1),
            ],
        );
        assert_trace(env, fail, &order[..4]);
        assert_eq!(
            fail.condition(),
            plain.condition(),
            "a failing OnSuccess TaskRun ends as it does without bookend"
        );
        assert!(
            fail.condition()
                .2
                .starts_with("\"step-test\" exited with code 2"),
            "{:?}",
            fail.condition()
        );
    });
    checks.finish();
    ctx.note("OnSuccess, 2 policies, 2 user steps", ok);
    format!(
        "ran {order:?}; failing run: {:?}, as without bookend",
        fail.condition()
    )
}

fn gate_results(run: &Finished, gates: usize) -> Vec<String> {
    (1..=gates)
        .map(|i| {
            run.step_result(&format!("bookend-gate-{i}"), "ok")
                .unwrap_or_else(|| "<none>".to_owned())
        })
        .collect()
}

/// The verdict's `bookend: … failed …` lines.
fn verdict_lines(env: &Env, run: &Finished) -> Vec<String> {
    run.log(env, "bookend-verdict")
        .lines()
        .filter(|l| l.starts_with("bookend:"))
        .map(str::to_owned)
        .collect()
}

pub fn scenario_always(ctx: &mut Ctx) -> String {
    let two = |build: &str| json!({"steps": [step("build", build), step("test", "")]});
    let mut prefail = taskrun(ALWAYS, "pre-fails", two(""));
    prefail["metadata"]["labels"] = json!({PREFAIL_LABEL: "true"});
    let mut lint = step("lint", "exit 5");
    lint["onError"] = json!("continue");
    let mut flaky = step("flaky", "exit 6");
    flaky["onError"] = json!("$(params.mode)");
    let param_spec = json!({
        "params": [{"name": "mode", "type": "string", "default": "stopAndFail"}],
        "steps": [flaky, step("build", "")],
    });
    let mut param_continue = taskrun(ALWAYS, "param-continue", param_spec.clone());
    param_continue["spec"]["params"] = json!([{"name": "mode", "value": "continue"}]);
    // The same failing TaskRun with every step running as an unprivileged user (the Pod's
    // securityContext, as a restricted namespace's podTemplate sets it): the gates read and
    // write Tekton's files as that user too. (A stepTemplate would reach the author's steps
    // only: bookend writes it into them and removes it.)
    let mut nonroot = taskrun(ALWAYS, "fail-build-nonroot", two("exit 3"));
    nonroot["spec"]["podTemplate"] =
        json!({"securityContext": {"runAsUser": 1000, "runAsGroup": 1000}});
    let runs = ctx.env.run_all(&[
        taskrun(ALWAYS, "fail-build", two("exit 3")),
        nonroot,
        taskrun(ALWAYS, "all-pass", two("")),
        prefail,
        taskrun(
            ALWAYS,
            "best-effort",
            json!({"steps": [lint, step("build", "")]}),
        ),
        param_continue,
        taskrun(ALWAYS, "param-stop", param_spec.clone()),
        taskrun(PLAIN, "fail-build-plain", two("exit 3")),
    ]);
    let [fail, nonroot, pass, prefail, best, pcontinue, pstop, plain] = &runs[..] else {
        unreachable!()
    };
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    let verdict_failed = "\"step-bookend-verdict\" exited with code 1: Error";
    let (_, plain_reason, _) = plain.condition();
    let mut checks = Checks::default();

    // The first of two user steps, `failed`, fails with `code`: the second user step and the
    // OnSuccess post-step are skipped, the Always post-step runs, and the verdict fails the
    // TaskRun with the reason Tekton gives without bookend, naming the failed step in its log.
    let user_step_fails = |run: &Finished, failed: &'static str, code: i64, next: &'static str| {
        assert_steps(
            env,
            run,
            &[
                ("bookend-setup", "Completed", 0),
                ("bookend-gate-1", "Completed", 0),
                (failed, "Continued", code),
                ("bookend-gate-2", "Completed", 0),
                (next, "Skipped", 0),
                ("bookend-gate-3", "Completed", 0),
                ("bookend-notify", "Skipped", 0),
                ("bookend-report", "Completed", 0),
                ("bookend-verdict", "Error", 1),
            ],
        );
        assert_trace(env, run, &["bookend-setup", failed, "bookend-report"]);
        assert_condition(env, run, "False", &plain_reason, verdict_failed);
        assert_eq!(
            verdict_lines(env, run),
            [format!("bookend: step-{failed} failed (exit code {code})")]
        );
    };
    let build_fails = |fail: &Finished| {
        user_step_fails(fail, "build", 3, "test");
        assert_eq!(gate_results(fail, 3), ["true", "false", "false"]);
        // The Always post-step saw what ran before it.
        assert_eq!(
            fail.log(env, "bookend-report").lines().collect::<Vec<_>>(),
            ["bookend-setup", "build", "bookend-report"]
        );
    };
    checks.check("a user step fails", || build_fails(fail));
    checks.check("a user step fails, steps not root", || build_fails(nonroot));

    // All pass: every step runs, gates say true, the verdict passes.
    checks.check("all pass", || {
        let all = [
            "bookend-setup",
            "bookend-gate-1",
            "build",
            "bookend-gate-2",
            "test",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-report",
            "bookend-verdict",
        ];
        assert_steps(env, pass, &completed(&all));
        assert_condition(env, pass, s, r, m);
        assert_trace(
            env,
            pass,
            &[
                "bookend-setup",
                "build",
                "test",
                "bookend-notify",
                "bookend-report",
            ],
        );
        assert_eq!(gate_results(pass, 3), ["true", "true", "true"]);
    });

    // A pre-step fails: every gate after it says false (each reads the previous gate's result:
    // a skipped step exits 0, so exit codes alone would let the user steps run), the user steps
    // are skipped, the Always post-step runs.
    checks.check("a pre-step fails", || {
        assert_steps(
            env,
            prefail,
            &[
                ("bookend-prefail", "Continued", 7),
                ("bookend-gate-1", "Completed", 0),
                ("bookend-setup", "Skipped", 0),
                ("bookend-gate-2", "Completed", 0),
                ("build", "Skipped", 0),
                ("bookend-gate-3", "Completed", 0),
                ("test", "Skipped", 0),
                ("bookend-gate-4", "Completed", 0),
                ("bookend-notify", "Skipped", 0),
                ("bookend-report", "Completed", 0),
                ("bookend-verdict", "Error", 1),
            ],
        );
        assert_trace(env, prefail, &["bookend-prefail", "bookend-report"]);
        assert_condition(env, prefail, "False", &plain_reason, verdict_failed);
        assert_eq!(
            gate_results(prefail, 4),
            ["false", "false", "false", "false"]
        );
        assert_eq!(
            verdict_lines(env, prefail),
            ["bookend: step-bookend-prefail failed (exit code 7)"]
        );
    });

    // A step the user marked onError: continue stays best-effort: its failure fails nothing.
    let best_effort = |run: &Finished, name: &'static str, code: i64| {
        assert_steps(
            env,
            run,
            &[
                ("bookend-setup", "Completed", 0),
                ("bookend-gate-1", "Completed", 0),
                (name, "Continued", code),
                ("build", "Completed", 0),
                ("bookend-gate-2", "Completed", 0),
                ("bookend-notify", "Completed", 0),
                ("bookend-report", "Completed", 0),
                ("bookend-verdict", "Completed", 0),
            ],
        );
        assert_condition(env, run, s, r, m);
        assert_trace(
            env,
            run,
            &[
                "bookend-setup",
                name,
                "build",
                "bookend-notify",
                "bookend-report",
            ],
        );
    };
    checks.check("onError: continue stays best-effort", || {
        best_effort(best, "lint", 5)
    });
    checks.check("onError: $(params.mode) passed as continue", || {
        best_effort(pcontinue, "flaky", 6)
    });
    // ... and defaulting to stopAndFail: must succeed, so its failure fails the TaskRun.
    checks.check("onError: $(params.mode) defaulting to stopAndFail", || {
        user_step_fails(pstop, "flaky", 6, "build")
    });
    checks.finish();

    ctx.note("Always + OnSuccess, 2 user steps (all pass)", pass);
    ctx.note("Always, failing pre-step policy, 2 user steps", prefail);
    ctx.note("Always, 1 best-effort + 1 user step", best);
    ctx.note("Always, onError param resolving to stopAndFail", pstop);
    format!(
        "failing build: {:?}; pre-step fails: trace {:?}; best-effort and param runs as expected; \
         failure reason {plain_reason} as without bookend",
        fail.trace(env),
        prefail.trace(env)
    )
}

pub fn scenario_results(ctx: &mut Ctx) -> String {
    let unnamed = json!({
        "image": BUSYBOX,
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo unnamed >> {TRACE}; exit 4")],
        "onError": "continue",
    });
    let mut produce = script_step(
        "produce",
        "printf hello > $(step.results.greeting.path)\nprintf 42 > $(results.answer.path)",
    );
    produce["results"] = json!([{"name": "greeting", "type": "string"}]);
    let consume = json!({
        "name": "consume",
        "image": BUSYBOX,
        "env": [{"name": "GREETING", "value": "$(steps.produce.results.greeting)"}],
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo \"consume $GREETING\" >> {TRACE}")],
    });
    // Both read the unnamed step (user index 0) by index; bookend's pre-step and gate shift it.
    let check = json!({
        "name": "check-exit",
        "image": BUSYBOX,
        "command": ["/bin/sh", "-c"],
        "args": [format!(
            "echo \"by-index $(cat /tekton/steps/0/exitCode)\" >> {TRACE}; \
             echo \"by-path $(cat $(steps.step-unnamed-0.exitCode.path))\" >> {TRACE}"
        )],
    });
    let run = ctx.env.run_one(&taskrun(
        ALWAYS,
        "results",
        json!({"results": [{"name": "answer", "type": "string"}],
               "steps": [unnamed, produce, consume, check]}),
    ));
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    assert_condition(env, &run, s, r, m);
    assert_trace(
        env,
        &run,
        &[
            "bookend-setup",
            "unnamed",
            "produce",
            "consume hello",
            "by-index 4",
            "by-path 4",
            "bookend-notify",
            "bookend-report",
        ],
    );
    assert_steps(
        env,
        &run,
        &[
            ("bookend-setup", "Completed", 0),
            ("bookend-gate-1", "Completed", 0),
            ("unnamed-2", "Continued", 4),
            ("produce", "Completed", 0),
            ("bookend-gate-2", "Completed", 0),
            ("consume", "Completed", 0),
            ("bookend-gate-3", "Completed", 0),
            ("check-exit", "Completed", 0),
            ("bookend-gate-4", "Completed", 0),
            ("bookend-notify", "Completed", 0),
            ("bookend-report", "Completed", 0),
            ("bookend-verdict", "Completed", 0),
        ],
    );
    assert_eq!(
        run.step_result("produce", "greeting").as_deref(),
        Some("hello")
    );
    assert_eq!(run.task_result("answer").as_deref(), Some("42"));
    ctx.note("Always, 4 user steps with results", &run);
    "step result, Task result, $(steps.produce.results.greeting) across a gate; \
     /tekton/steps/0 and step-unnamed-0 read the shifted step (exit 4)"
        .to_owned()
}

pub fn scenario_step_action(ctx: &mut Ctx) -> String {
    ctx.env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1beta1",
        "kind": "StepAction",
        "metadata": {"name": "rt-append", "namespace": remote::CATALOG},
        "spec": {
            "image": BUSYBOX,
            "params": [{"name": "word", "type": "string"}],
            "command": ["/bin/sh", "-c"],
            "args": [format!("echo stepaction-$(params.word) >> {TRACE}")],
        },
    }));
    let run = ctx.env.run_one(&taskrun(
        STEPACTION,
        "stepaction",
        json!({"steps": [step("build", "")]}),
    ));
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    assert_condition(env, &run, s, r, m);
    assert_steps(env, &run, &completed(&["bookend-via-action", "build"]));
    assert_trace(env, &run, &["stepaction-pre", "build"]);
    // The same policy on a TaskRun whose Task comes through the cluster resolver: injected at
    // the controller's dry-run, and verified from `status.taskSpec`, where Tekton's controller
    // stores the StepAction resolved (bookend resolves it the same way to recognise it).
    let remote = remote::run_catalog_task(env, STEPACTION, "stepaction-remote");
    assert_condition(env, &remote, s, r, m);
    let ran = &remote.object["status"]["taskSpec"]["steps"][0];
    assert!(
        ran["ref"].is_null()
            && ran["args"][0]
                .as_str()
                .is_some_and(|a| a.contains("stepaction-pre")),
        "Tekton stores the StepAction resolved: {ran}"
    );
    assert_eq!(
        crate::verification::mark(env, &remote),
        json!({"ClusterStepPolicy/rt-stepaction": "pass"}),
        "status.taskSpec: {}",
        remote.object["status"]["taskSpec"]
    );
    "the StepAction pre-step (cluster resolver, the catalog namespace) ran with its param \
     (stepaction-pre), then build; on a remote Task, verified from the resolved StepAction: pass"
        .to_owned()
}

pub fn scenario_task_ref(ctx: &mut Ctx) -> String {
    let task = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": "rt-unit", "namespace": ORDER},
        "spec": {"steps": [step("unit-a", ""), step("unit-b", "")]},
    });
    ctx.env.kubectl.apply(&task);
    let run = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "taskref-", "namespace": ORDER},
        "spec": {"taskRef": {"name": "rt-unit"}},
    });
    // bookend sees the Task through its watch: dry-run until it inlines it.
    poll("bookend to see the Task", Duration::from_secs(30), || {
        let out = ctx
            .env
            .kubectl
            .with_object(&["create", "--dry-run=server"], &run);
        let object = out.try_json()?;
        if object["spec"]["taskSpec"].is_object() {
            Ok(())
        } else {
            Err(format!("not inlined: {}", object["spec"]))
        }
    });
    let run = ctx.env.run_one(&run);
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    assert_condition(env, &run, s, r, m);
    let order = [
        "bookend-outer-pre",
        "bookend-inner-pre",
        "unit-a",
        "unit-b",
        "bookend-inner-post",
        "bookend-outer-post",
    ];
    assert_steps(env, &run, &completed(&order));
    assert_trace(env, &run, &order);
    let inlined = run.object["metadata"]["annotations"]["bookend.dev/inlined-task"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(inlined.starts_with("rt-unit@"), "inlined-task: {inlined:?}");
    assert_eq!(
        run.object["metadata"]["labels"]["tekton.dev/task"],
        "rt-unit"
    );
    format!("inlined {inlined}, ran {order:?}")
}

pub fn scenario_v1beta1(ctx: &mut Ctx) -> String {
    let object = json!({
        "apiVersion": "tekton.dev/v1beta1",
        "kind": "TaskRun",
        "metadata": {"generateName": "v1beta1-", "namespace": V1BETA1},
        "spec": {"taskSpec": {"steps": [with(step("build", ""),
            json!({"resources": {"requests": {"memory": "32Mi"}}}))]}},
    });
    let created = ctx.env.kubectl.create(&object);
    // As created (v1beta1): bookend's step in v1beta1 field names.
    assert_eq!(created["apiVersion"], "tekton.dev/v1beta1");
    let injected = &created["spec"]["taskSpec"]["steps"][0];
    assert_eq!(injected["name"], "bookend-b1-pre");
    assert_eq!(
        injected["resources"],
        json!({"requests": {"cpu": "10m"}}),
        "bookend wrote v1beta1 names: {injected}"
    );
    let name = created["metadata"]["name"].as_str().expect("name");
    let object = ctx.env.wait("taskrun", V1BETA1, name);
    let run = Finished {
        object,
        took: Duration::ZERO,
    };
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    assert_condition(env, &run, s, r, m);
    assert_steps(env, &run, &completed(&["bookend-b1-pre", "build"]));
    assert_trace(env, &run, &["bookend-b1-pre", "build"]);
    // Tekton's conversion turned both steps' v1beta1 `resources` into v1 `computeResources`,
    // and the controller put them on the containers.
    let pod = run.pod(env);
    let requests = |container: &str| {
        pod["spec"]["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == container))
            .map(|c| c["resources"]["requests"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(requests("step-bookend-b1-pre"), json!({"cpu": "10m"}));
    assert_eq!(requests("step-build"), json!({"memory": "32Mi"}));
    // And read back as v1beta1, converted again.
    let back = env
        .kubectl
        .get(&["taskruns.v1beta1.tekton.dev", "-n", V1BETA1, name])
        .expect("get as v1beta1");
    assert_eq!(
        back["spec"]["taskSpec"]["steps"][0]["resources"],
        json!({"requests": {"cpu": "10m"}})
    );
    "v1beta1 TaskRun: injected with v1beta1 names, converted by Tekton's conversion, ran; \
     requests on the Pod's containers"
        .to_owned()
}

pub fn scenario_pipeline(ctx: &mut Ctx) -> String {
    let task = |name: &str| json!({"steps": [step(name, "")]});
    let pipeline_run = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"generateName": "pipeline-", "namespace": PIPELINE},
        "spec": {"pipelineSpec": {
            "tasks": [
                {"name": "first", "taskSpec": task("first")},
                {"name": "second", "runAfter": ["first"], "taskSpec": task("second")},
            ],
            "finally": [{"name": "cleanup", "taskSpec": task("cleanup")}],
        }},
    });
    // Its one task references a Task, which the namespace's policy refuses (taskRef: Deny).
    ctx.env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": "rt-local", "namespace": DENY},
        "spec": {"steps": [step("local", "")]},
    }));
    let denied_run = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"generateName": "denied-", "namespace": DENY},
        "spec": {"pipelineSpec": {"tasks": [{"name": "uses-ref", "taskRef": {"name": "rt-local"}}]}},
    });
    let (name, _) = ctx.env.start(&pipeline_run);
    let (denied_name, _) = ctx.env.start(&denied_run);
    let solo = ctx.env.run_one(&taskrun(PIPELINE, "solo", task("solo")));
    let done = ctx.env.wait("pipelinerun", PIPELINE, &name);
    let denied = ctx.env.wait("pipelinerun", DENY, &denied_name);
    let env = &ctx.env;
    let mut checks = Checks::default();

    checks.check("each TaskRun of the PipelineRun runs the steps", || {
        assert_eq!(
            condition(&done),
            (
                "True".to_owned(),
                "Succeeded".to_owned(),
                "Tasks Completed: 3 (Failed: 0, Cancelled 0), Skipped: 0".to_owned()
            ),
            "the PipelineRun"
        );
        let children = env
            .kubectl
            .get(&[
                "taskruns",
                "-n",
                PIPELINE,
                "-l",
                &format!("tekton.dev/pipelineRun={name}"),
            ])
            .expect("list TaskRuns");
        let mut seen = Vec::new();
        for object in children["items"].as_array().expect("items") {
            let task = object["metadata"]["labels"]["tekton.dev/pipelineTask"]
                .as_str()
                .expect("pipelineTask label")
                .to_owned();
            let run = Finished {
                object: object.clone(),
                took: Duration::ZERO,
            };
            let (s, r, m) = SUCCEEDED;
            assert_condition(env, &run, s, r, m);
            let expected = ["bookend-pipeline-pre", task.as_str()];
            assert_steps(env, &run, &completed(&expected));
            assert_trace(env, &run, &expected);
            seen.push(task);
        }
        seen.sort();
        assert_eq!(
            seen,
            ["cleanup", "first", "second"],
            "the PipelineRun's TaskRuns"
        );
    });
    checks.check(
        "origin: Pipeline does not match a standalone TaskRun",
        || {
            assert_steps(env, &solo, &completed(&["solo"]));
            assert_trace(env, &solo, &["solo"]);
        },
    );
    let (status, reason, message) = condition(&denied);
    checks.check(
        "a denial fails the PipelineRun with bookend's message",
        || {
            assert_eq!(
                (status.as_str(), reason.as_str()),
                ("False", "CreateRunFailed"),
                "{message}"
            );
            assert!(
                message.contains("bookend: ClusterStepPolicy/rt-deny: spec.taskRef.name:")
                    && message.contains("(taskRef: Deny)"),
                "the PipelineRun's message carries bookend's denial: {message}"
            );
            let created = env
                .kubectl
                .get(&["taskruns", "-n", DENY])
                .expect("list TaskRuns");
            assert_eq!(created["items"], json!([]), "no TaskRun was created");
        },
    );
    checks.finish();
    format!(
        "3 TaskRuns ran bookend-pipeline-pre; standalone not matched; denial: {reason}: {}",
        message.lines().next().unwrap_or("")
    )
}

pub fn scenario_workspace(ctx: &mut Ctx) -> String {
    let mut object = taskrun(
        WORKSPACE,
        "workspace",
        json!({
            "workspaces": [{"name": "source"}],
            "stepTemplate": {
                "env": [{"name": "TEMPLATE_VAR", "value": "from-template"}],
                "computeResources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
            },
            "steps": [{
                "name": "read",
                "image": BUSYBOX,
                "command": ["/bin/sh", "-c"],
                "args": [format!(
                    "echo \"read $(cat $(workspaces.source.path)/seed), $TEMPLATE_VAR\" >> {TRACE}"
                )],
            }],
        }),
    );
    object["spec"]["workspaces"] = json!([{"name": "source", "emptyDir": {}}]);
    let run = ctx.env.run_one(&object);
    let env = &ctx.env;
    let (s, r, m) = SUCCEEDED;
    assert_condition(env, &run, s, r, m);
    assert_steps(env, &run, &completed(&["bookend-seed", "read"]));
    // The pre-step wrote the workspace; the user step read it. The stepTemplate reached the
    // user's step only: bookend wrote it into the author's steps and removed it, so the org
    // step ran without its env (and without its requests).
    assert_trace(
        env,
        &run,
        &[
            "bookend-seed",
            "read seeded, TEMPLATE_VAR=unset, from-template",
        ],
    );
    let pod = run.pod(env);
    let requests = |container: &str| {
        pod["spec"]["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == container))
            .unwrap_or_else(|| panic!("no container {container}"))["resources"]["requests"]
            .clone()
    };
    assert_eq!(
        requests("step-read"),
        json!({"cpu": "5m", "memory": "8Mi"}),
        "step-read: the stepTemplate's computeResources"
    );
    assert_eq!(
        requests("step-bookend-seed"),
        Value::Null,
        "step-bookend-seed: nothing of the stepTemplate"
    );
    "pre-step seeded the emptyDir workspace (its path through env); stepTemplate env and \
     requests reach the user's step only"
        .to_owned()
}

pub fn scenario_limits(ctx: &mut Ctx) -> String {
    let missing = json!({"steps": [
        {"name": "build", "image": BUSYBOX, "command": ["/bin/no-such-binary"]},
        step("test", ""),
    ]});
    let mut slow = step("build", "sleep 30");
    slow["timeout"] = json!("1s");
    let timeout = json!({"steps": [slow, step("test", "")]});
    let runs = ctx.env.run_all(&[
        taskrun(ALWAYS, "missing-binary", missing),
        taskrun(ALWAYS, "step-timeout", timeout),
    ]);
    let [missing, timeout] = &runs[..] else {
        unreachable!()
    };
    let env = &ctx.env;
    let skipped_after = |first: (&'static str, &'static str, i64)| {
        let mut steps = vec![
            ("bookend-setup", "Completed", 0),
            ("bookend-gate-1", "Completed", 0),
            first,
        ];
        for name in [
            "bookend-gate-2",
            "test",
            "bookend-gate-3",
            "bookend-notify",
            "bookend-report",
            "bookend-verdict",
        ] {
            steps.push((name, "Skipped", 1));
        }
        steps
    };
    let mut checks = Checks::default();
    // Documented limit: an exec failure ignores onError, so nothing after it runs, the Always
    // post-step included.
    checks.check("binary not found", || {
        assert_steps(env, missing, &skipped_after(("build", "Error", 1)));
        assert_trace(env, missing, &["bookend-setup"]);
        let (status, _, message) = missing.condition();
        assert_eq!(status, "False");
        assert!(
            message.starts_with("\"step-build\" exited with code 1"),
            "{message}"
        );
    });
    // Documented limit: a step timeout stops the chain too.
    checks.check("step timeout", || {
        assert_steps(
            env,
            timeout,
            &skipped_after(("build", "TimeoutExceeded", 1)),
        );
        assert_trace(env, timeout, &["bookend-setup", "build"]);
        assert_eq!(timeout.condition().0, "False");
    });
    checks.finish();
    format!(
        "missing binary: {:?}; step timeout: {:?}; Always post-step skipped in both",
        missing.condition().2,
        timeout.condition().2
    )
}
