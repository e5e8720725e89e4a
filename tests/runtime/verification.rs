//! Scenario 18: post-run verification of TaskRuns Tekton's own controller and entrypoint ran.
//! bookend (`--verify-runs`, on by default) watches the TaskRuns it injected into and, when each
//! finishes, marks it `bookend.dev/verified` with each policy's verdict and posts an Event with
//! the reason. What Tekton really writes into `status.steps` decides the verdicts here.
//! (OOM kills are not emulated by the kubelet stand-in; the unit tests of src/engine/verify.rs
//! cover them from Tekton's status.)

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::poll;
use crate::runs::{Checks, Env, Finished, step, taskrun};
use crate::scenarios::{ALWAYS, Ctx};

pub const ALWAYS_POLICY: &str = "ClusterStepPolicy/rt-always";
pub const NOTIFY_POLICY: &str = "ClusterStepPolicy/rt-notify";

/// The mark bookend writes on a finished TaskRun: policy -> verdict.
pub fn mark(env: &Env, run: &Finished) -> Value {
    poll(
        &format!("{} marked bookend.dev/verified", run.name()),
        Duration::from_secs(60),
        || {
            let object = env
                .kubectl
                .get(&["taskrun", "-n", run.namespace(), run.name()])?;
            let text = object["metadata"]["annotations"]["bookend.dev/verified"]
                .as_str()
                .ok_or_else(|| "not yet".to_owned())?;
            serde_json::from_str(text).map_err(|e| e.to_string())
        },
    )
}

/// The message of bookend's `reason` Event on the run.
pub fn event(env: &Env, run: &Finished, reason: &str) -> String {
    let uid = run.object["metadata"]["uid"].as_str().unwrap_or_default();
    poll(
        &format!("a {reason} Event on {}", run.name()),
        Duration::from_secs(60),
        || {
            let list = env.kubectl.get(&[
                "events",
                "-n",
                run.namespace(),
                "--field-selector",
                &format!("involvedObject.uid={uid},reason={reason}"),
            ])?;
            list["items"][0]["message"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| "none yet".to_owned())
        },
    )
}

pub fn scenario_verification(ctx: &mut Ctx) -> String {
    let two = |build: Value| json!({"steps": [build, step("test", "")]});
    let mut slow_step = step("build", "sleep 60");
    slow_step["timeout"] = json!("1s");
    let mut taskrun_timeout = taskrun(
        ALWAYS,
        "verify-taskrun-timeout",
        two(step("build", "sleep 120")),
    );
    taskrun_timeout["spec"]["timeout"] = json!("10s");
    // Cancelled while its user step runs: `spec.status: TaskRunCancelled`, an UPDATE of the
    // TaskRun (not of a bookend mark) that must go through while bookend's marks webhook is
    // installed.
    let env = &ctx.env;
    let (cancelled_name, cancelled_at) = env.start(&taskrun(
        ALWAYS,
        "verify-cancelled",
        two(step("build", "sleep 120")),
    ));
    // Every step's container runs from the start (Tekton's entrypoint waits for the step
    // before): `build` executes once every step before it is terminated in Tekton's status.
    // Cancelled before that, Tekton marks the steps still running (the org pre-step too)
    // cancelled, and the verdict rightly names the pre-step.
    poll(
        "verify-cancelled's step build running, the steps before it done",
        Duration::from_secs(120),
        || {
            let object = env
                .kubectl
                .get(&["taskrun", "-n", ALWAYS, &cancelled_name])?;
            let steps: Vec<&Value> = object["status"]["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            let build = steps.iter().position(|s| s["name"] == "build");
            let ready = build.is_some_and(|b| {
                steps[b].get("running").is_some()
                    && steps[..b]
                        .iter()
                        .all(|s| s["terminated"]["exitCode"] == json!(0))
            });
            ready.then_some(()).ok_or_else(|| "not yet".to_owned())
        },
    );
    env.kubectl.ok(
        &[
            "patch",
            "taskrun",
            "-n",
            ALWAYS,
            &cancelled_name,
            "--type=merge",
            "-p",
            r#"{"spec":{"status":"TaskRunCancelled"}}"#,
        ],
        "cancel verify-cancelled",
    );
    let cancelled = Finished {
        object: env.wait("taskrun", ALWAYS, &cancelled_name),
        took: cancelled_at.elapsed(),
    };
    let runs = ctx.env.run_all(&[
        taskrun(ALWAYS, "verify-all-pass", two(step("build", ""))),
        taskrun(ALWAYS, "verify-build-fails", two(step("build", "exit 3"))),
        taskrun(ALWAYS, "verify-step-timeout", two(slow_step)),
        taskrun_timeout,
    ]);
    let [pass, fails, step_timeout, run_timeout] = &runs[..] else {
        unreachable!()
    };
    let mut checks = Checks::default();
    checks.check("all org steps ran: pass", || {
        assert_eq!(
            mark(env, pass),
            json!({ALWAYS_POLICY: "pass", NOTIFY_POLICY: "pass"})
        );
        let ran = event(env, pass, "OrgStepsRan");
        assert!(ran.contains("bookend-report"), "{ran}");
    });
    checks.check(
        "a failing user step with Always post-steps: pass, the TaskRun failed",
        || {
            assert_eq!(fails.condition().0, "False");
            // The OnSuccess post-step is skipped after the failure, as its policy says.
            assert_eq!(
                mark(env, fails),
                json!({ALWAYS_POLICY: "pass", NOTIFY_POLICY: "pass"})
            );
        },
    );
    checks.check("a user step timeout: the Always post-step did not run", || {
        assert_eq!(mark(env, step_timeout)[ALWAYS_POLICY], json!("fail"));
        let why = event(env, step_timeout, "OrgStepsDidNotRun");
        assert!(
            why.contains(
                "ClusterStepPolicy/rt-always: org post-step bookend-report did not run: step build timed out"
            ),
            "{why}"
        );
    });
    checks.check("a TaskRun timeout: the Always post-step did not run", || {
        assert_eq!(run_timeout.condition().1, "TaskRunTimeout");
        assert_eq!(mark(env, run_timeout)[ALWAYS_POLICY], json!("fail"));
        let why = event(env, run_timeout, "OrgStepsDidNotRun");
        assert!(
            why.contains(
                "ClusterStepPolicy/rt-always: org post-step bookend-report did not run: the TaskRun timed out during step build"
            ),
            "{why}\n{}",
            serde_json::to_string_pretty(&run_timeout.object["status"]["steps"]).unwrap()
        );
    });
    checks.check("a cancellation: the Always post-step did not run", || {
        assert_eq!(cancelled.condition().1, "TaskRunCancelled");
        assert_eq!(mark(env, &cancelled)[ALWAYS_POLICY], json!("fail"));
        let why = event(env, &cancelled, "OrgStepsDidNotRun");
        assert!(
            why.contains(
                "ClusterStepPolicy/rt-always: org post-step bookend-report did not run: the TaskRun was cancelled during step build"
            ),
            "{why}\n{}",
            serde_json::to_string_pretty(&cancelled.object["status"]["steps"]).unwrap()
        );
    });
    // Every TaskRun UPDATE bookend reviewed (its own marks: the chart's matchCondition sends
    // nothing else) was admitted, and none of Tekton's controller's was refused: its updates
    // of labels, annotations and the cancellation above went through with the marks webhook
    // installed, fail-closed.
    checks.check(
        "the marks webhook: bookend's marks admitted, nothing of Tekton's refused",
        || {
            let log = std::fs::read_to_string(&ctx.bookend_log).unwrap_or_default();
            let updates: Vec<&str> = log
                .lines()
                .filter(|l| {
                    l.contains("endpoint=\"validate\"")
                        && l.contains("operation=\"UPDATE\"")
                        && l.contains("tekton.dev/TaskRun")
                })
                .collect();
            assert!(
                updates.len() >= 5,
                "bookend reviewed its own marks: {updates:?}"
            );
            assert!(
                updates.iter().all(|l| l.contains("outcome=\"admitted\"")),
                "{updates:?}"
            );
        },
    );
    checks.finish();
    format!(
        "pass; failing user step: pass; step timeout, TaskRun timeout and cancellation: fail ({:?}, {:?}); marks webhook refused nothing",
        run_timeout.condition().1,
        cancelled.condition().1
    )
}
