//! Scenario 18: post-run verification of TaskRuns Tekton's own controller and entrypoint ran.
//! bookend (`--verify-runs`, on by default) watches the TaskRuns it injected into and, when each
//! finishes, marks it `bookend.dev/verified` with each policy's verdict and posts an Event with
//! the reason. What Tekton really writes into `status.steps` decides the verdicts here.
//! The last case, an OOM kill, ends differently per Tekton release ([`OomEnd`]); bookend's
//! verdict on it is the same on every line.

use std::time::Duration;

use serde_json::{Value, json};

use bookend::tekton::cluster::Version;

use crate::kube::poll;
use crate::runs::{Checks, Env, Finished, step, taskrun};
use crate::scenarios::{ALWAYS, Ctx};

pub const ALWAYS_POLICY: &str = "ClusterStepPolicy/rt-always";
pub const NOTIFY_POLICY: &str = "ClusterStepPolicy/rt-notify";

/// The verdicts of the mark bookend writes on a finished TaskRun: policy -> verdict.
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
            serde_json::from_str::<Value>(text)
                .map(|mark| mark["verdicts"].clone())
                .map_err(|e| e.to_string())
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

/// The sum of a Prometheus counter's samples whose labels include every one of `labels`
/// (each `name="value"`).
pub fn counter(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            (rest.is_empty() || rest.starts_with('{')).then_some(())?;
            labels
                .iter()
                .all(|label| rest.contains(label))
                .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// bookend's PolicyReport result for `policy` on the run (bookend writes them in batches).
fn report_result(env: &Env, run: &Finished, policy: &str) -> Value {
    let uid = run.object["metadata"]["uid"].as_str().unwrap_or_default();
    poll(
        &format!("a PolicyReport result for {} and {policy}", run.name()),
        Duration::from_secs(60),
        || {
            let report =
                env.kubectl
                    .get(&["policyreport", "-n", run.namespace(), "bookend-audit"])?;
            report["results"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["resources"][0]["uid"] == uid && r["policy"] == policy)
                .cloned()
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
    // One retry; the author's step times out on the first attempt only (Tekton substitutes
    // the attempt's number), so the last attempt passes and only `status.retriesStatus` shows
    // the attempt whose Always post-step never ran.
    let mut first_attempt_slow = step(
        "build",
        "[ $(context.task.retry-count) = 0 ] && sleep 60; true",
    );
    first_attempt_slow["timeout"] = json!("1s");
    let mut retried = taskrun(ALWAYS, "verify-retried", two(first_attempt_slow));
    retried["spec"]["retries"] = json!(1);
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
        retried,
    ]);
    let [pass, fails, step_timeout, run_timeout, retried] = &runs[..] else {
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
    checks.check(
        "spec.retries: an earlier attempt without the Always post-step fails",
        || {
            assert_eq!(retried.condition().0, "True", "the last attempt succeeded");
            assert_eq!(
                retried.object["status"]["retriesStatus"]
                    .as_array()
                    .map(Vec::len),
                Some(1),
                "{}",
                serde_json::to_string_pretty(&retried.object["status"]).unwrap()
            );
            assert_eq!(mark(env, retried)[ALWAYS_POLICY], json!("fail"));
            let why = event(env, retried, "OrgStepsDidNotRun");
            assert!(
                why.contains(
                    "ClusterStepPolicy/rt-always: attempt 1 of 2: org post-step bookend-report did not run: step build timed out"
                ),
                "{why}"
            );
        },
    );
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
    let oom = oom_killed(ctx);
    format!(
        "pass; failing user step: pass; step timeout, TaskRun timeout, cancellation and a retried TaskRun's first attempt: fail ({:?}, {:?}); marks webhook refused nothing; {oom}",
        run_timeout.condition().1,
        cancelled.condition().1
    )
}

/// How Tekton's controller ends a TaskRun whose step `build` was OOM-killed (the container
/// `terminated`, reason `OOMKilled`, exit code 137, its entrypoint killed with it), read in
/// `pkg/pod/status.go` at each release tag and seen on each line of the matrix.
#[derive(Debug, PartialEq, Eq)]
enum OomEnd {
    /// Before v0.64.0 it does not: a TaskRun is complete when every step container has
    /// terminated or the Pod is `Succeeded`/`Failed`, and the steps after the killed one wait
    /// for the post file its entrypoint never wrote, so the Pod stays `Running` until the
    /// TaskRun's timeout (`TaskRunTimeout`; the controller then terminates the waiting steps).
    Timeout,
    /// v0.64.0 to v1.0.x: `isPodCompleted` ends the TaskRun on a step's `OOMKilled`
    /// (commit cf4ccee74), as any failure: `Failed`, `"step-build" exited with code 137`.
    Failed,
    /// v1.1.0 to v1.11.x: the container's reason is appended to the message (commit
    /// 32872165d): `Failed`, `"step-build" exited with code 137: OOMKilled`.
    FailedOomKilled,
    /// v1.12.0 on: `getFailureInfo` names it (commit 721cc83d1): `StepOOM`.
    StepOom,
}

impl OomEnd {
    fn of(version: Version) -> Self {
        match version {
            v if v < Version::new(0, 64, 0) => Self::Timeout,
            v if v < Version::new(1, 1, 0) => Self::Failed,
            v if v < Version::new(1, 12, 0) => Self::FailedOomKilled,
            _ => Self::StepOom,
        }
    }

    /// The `Succeeded` condition's reason and message for the TaskRun `name` (given
    /// `timeout: 60s` where it ends on the timeout).
    fn condition(&self, name: &str) -> (&'static str, String) {
        const EXITED: &str = "\"step-build\" exited with code 137";
        match self {
            Self::Timeout => (
                "TaskRunTimeout",
                format!("TaskRun {name:?} failed to finish within \"1m0s\""),
            ),
            Self::Failed => ("Failed", EXITED.to_owned()),
            Self::FailedOomKilled => ("Failed", format!("{EXITED}: OOMKilled")),
            Self::StepOom => ("StepOOM", format!("{EXITED}: OOMKilled")),
        }
    }
}

/// A user step over its memory limit under the Always policy: the kubelet stand-in applies the
/// limit (runc, the container's cgroup) and reports the kill as a kubelet on cgroup v2 does
/// (the whole container killed, `OOMKilled`, 137). Alone, so the metrics before and after are
/// this TaskRun's.
fn oom_killed(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    let end = OomEnd::of(ctx.tekton_version);
    // A shell string doubling until the limit: page faults only. (`head -c 400m /dev/zero |
    // tail` once exited 1 instead: the pipe's kernel buffers are charged to the cgroup too,
    // and a write can fail with ENOMEM rather than wait at the limit.)
    let mut greedy = step("build", "x=0123456789abcdef; while :; do x=\"$x$x\"; done");
    greedy["computeResources"] = json!({"limits": {"memory": "64Mi"}});
    let series = |metrics: &str| {
        (
            counter(
                metrics,
                "bookend_step_runs_total",
                &[
                    "policy=\"ClusterStepPolicy/rt-always\"",
                    "step=\"bookend-report\"",
                    "outcome=\"never_started\"",
                ],
            ),
            counter(
                metrics,
                "bookend_run_verdicts_total",
                &[
                    "policy=\"ClusterStepPolicy/rt-always\"",
                    "verdict=\"fail\"",
                    "cause=\"did_not_run\"",
                ],
            ),
        )
    };
    let before = series(&ctx.bookend.metrics().expect("bookend's metrics"));
    let mut object = taskrun(
        ALWAYS,
        "verify-oom",
        json!({"steps": [greedy, step("test", "")]}),
    );
    if end == OomEnd::Timeout {
        // Ample for the kill, which comes within seconds of the Pod's start.
        object["spec"]["timeout"] = json!("60s");
    }
    let run = env.run_one(&object);
    let status = serde_json::to_string_pretty(&run.object["status"]).unwrap_or_default();
    let mut checks = Checks::default();
    checks.check("OOM kill: what Tekton's controller writes", || {
        let (reason, message) = end.condition(run.name());
        assert_eq!(
            run.condition(),
            ("False".to_owned(), reason.to_owned(), message),
            "{status}"
        );
        let build = &run.object["status"]["steps"][2];
        assert_eq!(build["name"], "build");
        assert_eq!(build["terminated"]["reason"], "OOMKilled", "{build}");
        assert_eq!(build["terminated"]["exitCode"], 137, "{build}");
    });
    checks.check("OOM kill: the Always post-step did not run", || {
        // The killed step's entrypoint wrote no post file: every later step was still
        // waiting for it when the controller failed the TaskRun and stopped the Pod (on a
        // timeout, marking each waiting step terminated with the TaskRun's reason).
        let report = run.object["status"]["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["name"] == "bookend-report")
            .cloned()
            .unwrap_or_default();
        if end == OomEnd::Timeout {
            assert_eq!(report["terminated"]["reason"], "TaskRunTimeout", "{report}");
        } else {
            assert!(report.get("terminated").is_none(), "{report}");
        }
        assert!(!run.trace(env).contains(&"bookend-report".to_owned()));
    });
    checks.check("OOM kill: verdict, Event, report, metrics", || {
        assert_eq!(
            mark(env, &run),
            json!({ALWAYS_POLICY: "fail", NOTIFY_POLICY: "pass"})
        );
        let reason = "org post-step bookend-report did not run: step build failed (it was OOMKilled (exit code 137))";
        let why = event(env, &run, "OrgStepsDidNotRun");
        assert_eq!(why, format!("{ALWAYS_POLICY}: {reason}"), "{status}");
        let result = report_result(env, &run, ALWAYS_POLICY);
        assert_eq!(result["result"], "fail", "{result}");
        assert_eq!(result["message"], reason, "{result}");
        assert_eq!(result["properties"]["cause"], "did_not_run", "{result}");
        assert_eq!(
            result["properties"]["step.bookend-report"],
            "never_started",
            "{result}"
        );
        // Counted after the mark and the Event.
        let after = poll("the OOM verdict counted", Duration::from_secs(30), || {
            let after = series(&ctx.bookend.metrics()?);
            (after != before)
                .then_some(after)
                .ok_or_else(|| "not yet".to_owned())
        });
        assert_eq!(after, (before.0 + 1.0, before.1 + 1.0));
    });
    checks.finish();
    format!(
        "OOM kill: {:?}, bookend-report never started, fail",
        run.condition().1
    )
}
