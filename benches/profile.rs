//! A fixed amount of one benchmark's work, for profilers: instruction counts from
//! `valgrind --tool=callgrind` are repeatable on a loaded machine where wall-clock times are
//! not. Not a criterion benchmark (`harness = false`).
//!
//! `cargo bench --bench profile -- <case> <steps> <policies> <iterations> [cached tasks]`, case
//! one of `review` (admission::review), `taskref` (the same TaskRun referencing its Task, which
//! is inlined from the catalog; `steps` does not apply), `decide` (engine::decide), `diff`
//! (patch::diff), `parse` (the review body into a serde_json::Value), `scan` (the body read
//! and checked as JSON, nothing built: the floor of any serde_json reader), `setup` (inputs
//! only: subtract it). With the example policies (`examples/policies`; `steps` and `policies`
//! do not apply): `example` (the fixture, a PipelineRun's TaskRun, which the Audit policy
//! matches too), `build` (`examples/taskruns/build.yaml`, the apiserver benchmark's TaskRun),
//! `backstop-build` (`/validate` of build.yaml as admitted: the validating webhook's work).
//!
//! scripts/bench-profile.sh runs it under callgrind and prints instructions per iteration.

mod support;

// The allocator the bookend binary uses (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use bookend::admission::{self, Endpoint};
use bookend::engine::{self, Request};
use bookend::patch;
use serde_json::Value;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let case = args.first().map(String::as_str).unwrap_or("review");
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (steps, policies, iterations, tasks) = (num(1, 3), num(2, 10), num(3, 1000), num(4, 0));
    let body = support::body_with_steps(steps);
    let object = support::review_with_steps(steps)["request"]["object"].clone();
    let set = support::policy_set(policies);
    let (taskref_body, task) = support::taskref_review();
    let catalog = support::catalog_with(tasks, std::slice::from_ref(&task));
    let request = Request {
        object: &object,
        namespace: "team-a",
        dry_run: false,
    };
    let admitted = engine::decide(request, &set, &catalog).object;
    let examples = support::example_policy_set();
    let build = support::build_taskrun();
    let build_body = support::review_of(build.clone());
    let build_admitted = engine::decide(
        Request {
            object: &build,
            namespace: "team-a",
            dry_run: false,
        },
        &examples,
        &catalog,
    )
    .object;
    let backstop_body = support::review_of(build_admitted);
    let began = Instant::now();
    for _ in 0..iterations {
        match case {
            "review" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&body),
                    &set,
                    &catalog,
                ));
            }
            "taskref" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&taskref_body),
                    &set,
                    &catalog,
                ));
            }
            "example" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&body),
                    &examples,
                    &catalog,
                ));
            }
            "build" => {
                black_box(admission::review(
                    Endpoint::Mutate,
                    black_box(&build_body),
                    &examples,
                    &catalog,
                ));
            }
            "backstop-build" => {
                black_box(admission::review(
                    Endpoint::Validate,
                    black_box(&backstop_body),
                    &examples,
                    &catalog,
                ));
            }
            "decide" => {
                black_box(engine::decide(black_box(request), &set, &catalog));
            }
            "diff" => {
                black_box(patch::diff(black_box(&object), black_box(&admitted)));
            }
            "parse" => {
                black_box(serde_json::from_slice::<Value>(black_box(&body)).expect("JSON"));
            }
            "scan" => {
                black_box(
                    serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body))
                        .expect("JSON"),
                );
            }
            "setup" => {}
            other => panic!("unknown case {other}"),
        }
    }
    let elapsed = began.elapsed();
    println!(
        "{case} steps={steps} policies={policies} iterations={iterations} wall_per_iter_us={:.2}",
        elapsed.as_secs_f64() * 1e6 / iterations.max(1) as f64
    );
}
