//! Scenario 22: bookend restarts while TaskRuns run under Tekton's controller. Verification
//! counts each finished TaskRun once across processes: the mark (`bookend.dev/verified`) is
//! written before the outputs (Event, metrics), and a new process skips what is marked. Here
//! TaskRuns are created (the admission webhook is fail-closed: a CREATE while bookend is down is
//! refused), one finishes and is verified by the running process, the others wait on a gate
//! file the test writes only after bookend was killed; they finish while it is down, and the
//! next process must verify them, and only them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{cluster_policy, poll};
use crate::runs::{Env, Finished, step, taskrun};
use crate::scenarios::Ctx;
use crate::verification::{counter, mark};

pub const RESTART: &str = "rt-restart";
const POLICY: &str = "ClusterStepPolicy/rt-restart";
const GATE: &str = "go";

pub fn policies() -> Vec<Value> {
    vec![cluster_policy(
        "rt-restart",
        json!({"match": {"namespaces": [RESTART]},
               "preSteps": [step("bookend-rs-pre", "")],
               "postSteps": [step("bookend-rs-post", "")]}),
    )]
}

/// A TaskRun whose step waits until the test writes the gate file into its /tekton/home.
fn gated(name: &str) -> Value {
    taskrun(
        RESTART,
        name,
        json!({"steps": [step("build", &format!("until [ -e /tekton/home/{GATE} ]; do sleep 0.2; done"))]}),
    )
}

/// How many verdict Events (`OrgStepsRan`, `OrgStepsDidNotRun`) bookend posted on the run,
/// each counted with its `count`.
fn event_count(env: &Env, run: &Finished) -> u64 {
    let uid = run.object["metadata"]["uid"].as_str().unwrap_or_default();
    let list = env
        .kubectl
        .get(&[
            "events",
            "-n",
            run.namespace(),
            "--field-selector",
            &format!("involvedObject.uid={uid}"),
        ])
        .expect("list the TaskRun's Events");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "OrgStepsRan" || e["reason"] == "OrgStepsDidNotRun")
        .map(|e| e["count"].as_u64().unwrap_or(1).max(1))
        .sum()
}

/// The verdicts the running bookend counted for the scenario's policy.
fn verdicts(ctx: &Ctx) -> f64 {
    let metrics = ctx.bookend.metrics().expect("bookend's metrics");
    counter(
        &metrics,
        "bookend_run_verdicts_total",
        &[&format!("policy=\"{POLICY}\"")],
    )
}

/// Waits until the gated TaskRun's step `build` runs; returns its Pod's home directory on the
/// node.
fn running_build(env: &Env, name: &str) -> std::path::PathBuf {
    poll(
        &format!("{name}'s step build running"),
        Duration::from_secs(120),
        || {
            let object = env.kubectl.get(&["taskrun", "-n", RESTART, name])?;
            let running = object["status"]["steps"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == "build" && s.get("running").is_some());
            let pod = object["status"]["podName"].as_str().unwrap_or_default();
            if running && !pod.is_empty() {
                Ok(env
                    .kubelet_dir
                    .join("pods")
                    .join(format!("{RESTART}_{pod}"))
                    .join("volumes/tekton-internal-home"))
            } else {
                Err("not yet".to_owned())
            }
        },
    )
}

/// One round: a quick TaskRun and two gated ones; bookend stopped with `signal` while the gated
/// ones run, the gates opened, bookend started again once they finished. Returns the runs and
/// (verdicts counted by the stopped process for the policy, by the new one).
fn round(ctx: &mut Ctx, signal: &str) -> (Vec<Finished>, f64, f64) {
    let label = signal.to_ascii_lowercase();
    let env = &ctx.env;
    let gated_names: Vec<String> = (0..2)
        .map(|i| env.start(&gated(&format!("restart-{label}-{i}"))).0)
        .collect();
    let (quick_name, quick_at) = env.start(&taskrun(
        RESTART,
        &format!("restart-{label}-quick"),
        json!({"steps": [step("build", "")]}),
    ));
    let quick = Finished {
        object: env.wait("taskrun", RESTART, &quick_name),
        took: quick_at.elapsed(),
    };
    mark(env, &quick);
    let homes: Vec<_> = gated_names.iter().map(|n| running_build(env, n)).collect();
    // Verdicts are counted after the mark: wait until this process has counted the quick one.
    let before = poll(
        "the quick TaskRun's verdict counted",
        Duration::from_secs(30),
        || {
            let counted = verdicts(ctx);
            (counted >= 1.0)
                .then_some(counted)
                .ok_or("not yet".to_owned())
        },
    );
    let status = ctx.bookend.stop_with(signal);
    println!("bookend stopped with SIG{signal}: {status}");
    for home in &homes {
        std::fs::write(home.join(GATE), "").expect("open the gate");
    }
    let env = &ctx.env;
    let gated_runs: Vec<Finished> = gated_names
        .iter()
        .map(|n| Finished {
            object: env.wait("taskrun", RESTART, n),
            took: Duration::ZERO,
        })
        .collect();
    for run in &gated_runs {
        assert_eq!(run.condition().0, "True", "{}", run.describe(env));
        assert!(
            run.object["metadata"]["annotations"]["bookend.dev/verified"].is_null(),
            "{} was marked while bookend was down",
            run.name()
        );
    }
    ctx.bookend.start();
    let env = &ctx.env;
    for run in &gated_runs {
        mark(env, run);
    }
    let after = poll(
        "the new process counted the gated TaskRuns",
        Duration::from_secs(60),
        || {
            let counted = verdicts(ctx);
            (counted >= 2.0)
                .then_some(counted)
                .ok_or("not yet".to_owned())
        },
    );
    let mut runs = vec![quick];
    runs.extend(gated_runs);
    (runs, before, after)
}

pub fn scenario_restart(ctx: &mut Ctx) -> String {
    // First SIGKILL (nothing flushed, no goodbye), then SIGTERM (a graceful stop).
    let (killed, by_first, by_second) = round(ctx, "KILL");
    let (terminated, by_second_total, by_third) = round(ctx, "TERM");
    let env = &ctx.env;
    let runs: Vec<&Finished> = killed.iter().chain(&terminated).collect();
    // Marked once: each TaskRun has its mark, with the verdict, and exactly one verdict Event.
    for run in &runs {
        let fresh = env
            .kubectl
            .get(&["taskrun", "-n", RESTART, run.name()])
            .expect("get the TaskRun");
        let verified: Value = serde_json::from_str(
            fresh["metadata"]["annotations"]["bookend.dev/verified"]
                .as_str()
                .unwrap_or("null"),
        )
        .expect("the mark is JSON");
        assert_eq!(
            verified["verdicts"],
            json!({POLICY: "pass"}),
            "{}",
            run.name()
        );
        assert_eq!(event_count(env, run), 1, "{}'s verdict Events", run.name());
    }
    // Each TaskRun's mark was written once: one admitted UPDATE review of it (bookend's marks
    // webhook reviews every update by bookend itself) in the log of all three processes.
    let log = std::fs::read_to_string(&ctx.bookend_log).unwrap_or_default();
    for run in &runs {
        let name = format!("object_name=\"{}\"", run.name());
        let marks = log
            .lines()
            .filter(|l| {
                l.contains(&name)
                    && l.contains("operation=\"UPDATE\"")
                    && l.contains("outcome=\"admitted\"")
            })
            .count();
        assert_eq!(marks, 1, "{}: its mark reviews", run.name());
    }
    // Counted once across processes: the first counted the first quick run, the second the
    // first round's gated runs and the second quick run, the third the rest.
    assert_eq!(by_first, 1.0, "the first process");
    assert_eq!(by_second, 2.0, "the second process after its start");
    assert_eq!(by_second_total, 3.0, "the second process before SIGTERM");
    assert_eq!(by_third, 2.0, "the third process");
    assert_eq!(by_first + by_second_total + by_third, runs.len() as f64);
    format!(
        "{} TaskRuns, bookend killed (SIGKILL) and stopped (SIGTERM) while 2 ran each time: each marked once with one Event; verdicts counted {by_first} + {by_second_total} + {by_third} across the three processes",
        runs.len()
    )
}
