//! The wall-clock cost of injection: the same TaskRuns with and without bookend, one at a time.
//! Reported, not asserted (timings on a shared machine are not a test). Tekton's entrypoint
//! polls once per second for the previous step's file, so every added step costs about a second.

use std::fmt::Write;
use std::time::Duration;

use serde_json::json;

use crate::runs::{Env, Finished, step, taskrun};
use crate::scenarios::{ALWAYS, ORDER, PLAIN};

/// Runs of each TaskRun with and without bookend (alternating); the median is reported.
const REPEAT: usize = 3;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

pub fn measure(env: &Env) -> String {
    let user_steps = |n: usize| json!({"steps": (1..=n).map(|i| step(&format!("step-{i}"), "")).collect::<Vec<_>>()});
    let cases = [
        (
            "2 user steps; 2 OnSuccess policies (2 pre + 2 post)",
            ORDER,
            2,
        ),
        (
            "2 user steps; Always + OnSuccess policies (1 pre + 2 post)",
            ALWAYS,
            2,
        ),
        (
            "6 user steps; Always + OnSuccess policies (1 pre + 2 post)",
            ALWAYS,
            6,
        ),
    ];
    let mut table = String::from(
        "injection cost (wall clock from kubectl create to done; median of 3, [min-max]):\n\
         | TaskRun | steps without / with | helpers | without bookend | with bookend | added | per added step |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (label, namespace, n) in cases {
        let mut with = Vec::new();
        let mut without = Vec::new();
        let mut injected: Option<Finished> = None;
        for _ in 0..REPEAT {
            let plain = env.run_one(&taskrun(PLAIN, "timing", user_steps(n)));
            assert_eq!(plain.condition().0, "True", "{}", plain.describe(env));
            without.push(plain.took);
            let run = env.run_one(&taskrun(namespace, "timing", user_steps(n)));
            assert_eq!(run.condition().0, "True", "{}", run.describe(env));
            with.push(run.took);
            injected = Some(run);
        }
        let run = injected.expect("at least one run");
        let steps = run.step_names().len();
        let range = |v: &[Duration]| {
            let (min, max) = (v.iter().min().expect("runs"), v.iter().max().expect("runs"));
            format!("[{:.1}-{:.1}]", min.as_secs_f64(), max.as_secs_f64())
        };
        let (with_range, without_range) = (range(&with), range(&without));
        let (with, without) = (median(with), median(without));
        let added = with.saturating_sub(without);
        let per_step = added.as_secs_f64() / (steps - n) as f64;
        let _ = writeln!(
            table,
            "| {label} | {n} / {steps} | {} | {:.1} s {without_range} | {:.1} s {with_range} | {:.1} s | {per_step:.2} s |",
            run.helpers().len(),
            without.as_secs_f64(),
            with.as_secs_f64(),
            added.as_secs_f64(),
        );
    }
    table
}
