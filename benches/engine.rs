//! Engine benchmarks (issue 6): one full admission decision, `admission::review` (parse the
//! AdmissionReview, match, inject, build the patch, serialise the response), and its parts.
//! See docs/benchmarks.md for the figures and `scripts/bench-scaling.sh` for the curves.
//!
//! Groups:
//! - `review/{typical,large200}/{1,10,1000,10000}`: the full decision, the fixture TaskRun
//!   (3 steps, ~5.8 KB review) or the same TaskRun grown to 200 steps, against N policies of
//!   which `min(N, 3)` match (benches/support/mod.rs);
//! - `decide/{typical,large200}/{N}`: `engine::decide` alone (the object already parsed);
//! - `diff/{typical,large200}`: `patch::diff` alone (received TaskRun vs admitted TaskRun);
//! - `parts/...`: parsing the review, `PolicySet::candidates`, serialising the response;
//! - `scale_policies/typical/{N}` and `scale_steps/{steps}`: the scaling curves (full decision);
//! - `scale_tasks/{inline,taskref}/{0,10000}`: the full decision with 0 or 10,000 cached Tasks,
//!   for an inline TaskRun and for the same TaskRun referencing its Task (inlined from the cache).
//!
//! Short runs: `cargo bench --bench engine -- --warm-up-time 1 --measurement-time 3`.

mod support;

// The allocator the bookend binary uses (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Duration;

use bookend::admission::{self, Endpoint};
use bookend::engine::{self, Catalog, Request};
use bookend::patch;
use bookend::policy::PolicySet;
use bookend::policy::select::{Labels, Subject};
use bookend::tekton::Origin;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::Value;

const POLICY_COUNTS: [usize; 4] = [1, 10, 1_000, 10_000];

struct Input {
    name: &'static str,
    body: Vec<u8>,
    object: Value,
}

fn inputs() -> Vec<Input> {
    [("typical", 3), ("large200", 200)]
        .into_iter()
        .map(|(name, steps)| {
            let review = support::review_with_steps(steps);
            Input {
                name,
                body: support::body_with_steps(steps),
                object: review["request"]["object"].clone(),
            }
        })
        .collect()
}

fn sets() -> Vec<(usize, PolicySet)> {
    POLICY_COUNTS
        .iter()
        .map(|&n| (n, support::policy_set(n)))
        .collect()
}

fn mutate(body: &[u8], set: &PolicySet, catalog: &Catalog) -> admission::Reply {
    let reply = admission::review(Endpoint::Mutate, body, set, catalog);
    debug_assert_eq!(
        reply.summary.outcome,
        Some(bookend::engine::Outcome::Mutated)
    );
    reply
}

fn review(c: &mut Criterion) {
    let catalog = support::catalog(0);
    let sets = sets();
    let mut group = c.benchmark_group("review");
    for input in inputs() {
        for (n, set) in &sets {
            let reply = mutate(&input.body, set, &catalog);
            assert_eq!(
                reply.summary.outcome,
                Some(bookend::engine::Outcome::Mutated),
                "{:?}",
                reply.summary
            );
            assert_eq!(reply.summary.injected.len(), (*n).min(3));
            group.bench_with_input(BenchmarkId::new(input.name, n), n, |b, _| {
                b.iter(|| mutate(black_box(&input.body), set, &catalog))
            });
        }
    }
    group.finish();
}

fn decide(c: &mut Criterion) {
    let catalog = support::catalog(0);
    let sets = sets();
    let mut group = c.benchmark_group("decide");
    for input in inputs() {
        for (n, set) in &sets {
            let request = Request {
                object: &input.object,
                namespace: "team-a",
                dry_run: false,
            };
            group.bench_with_input(BenchmarkId::new(input.name, n), n, |b, _| {
                b.iter(|| engine::decide(black_box(request), set, &catalog))
            });
        }
    }
    group.finish();
}

fn diff(c: &mut Criterion) {
    let catalog = support::catalog(0);
    let set = support::policy_set(10);
    let mut group = c.benchmark_group("diff");
    for input in inputs() {
        let request = Request {
            object: &input.object,
            namespace: "team-a",
            dry_run: false,
        };
        let admitted = engine::decide(request, &set, &catalog).object;
        assert!(!patch::diff(&input.object, &admitted).is_empty());
        group.bench_function(input.name, |b| {
            b.iter(|| patch::diff(black_box(&input.object), black_box(&admitted)))
        });
    }
    group.finish();
}

fn parts(c: &mut Criterion) {
    let sets = sets();
    let mut group = c.benchmark_group("parts");
    let body = support::body_with_steps(3);
    group.bench_function("parse_review_value", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&body)).expect("JSON"))
    });
    // The fixture TaskRun's labels and namespace labels, as engine::decide sees them.
    let object = support::review_value()["request"]["object"].clone();
    let labels: Labels = object["metadata"]["labels"]
        .as_object()
        .expect("labels")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let namespace_labels = support::catalog(0)
        .namespaces
        .get("team-a")
        .cloned()
        .unwrap_or_default();
    let subject = Subject {
        namespace: "team-a",
        namespace_labels: &namespace_labels,
        labels: &labels,
        origin: Origin::Pipeline,
    };
    for (n, set) in &sets {
        group.bench_with_input(BenchmarkId::new("candidates", n), n, |b, _| {
            b.iter(|| set.candidates(black_box(&subject)).len())
        });
    }
    group.finish();
}

fn scale_policies(c: &mut Criterion) {
    let catalog = support::catalog(0);
    let body = support::body_with_steps(3);
    let mut group = c.benchmark_group("scale_policies");
    for n in [1, 3, 10, 30, 100, 300, 1_000, 3_000, 10_000] {
        let set = support::policy_set(n);
        group.bench_with_input(BenchmarkId::new("typical", n), &n, |b, _| {
            b.iter(|| mutate(black_box(&body), &set, &catalog))
        });
    }
    group.finish();
}

fn scale_steps(c: &mut Criterion) {
    let catalog = support::catalog(0);
    let set = support::policy_set(10);
    let mut group = c.benchmark_group("scale_steps");
    for steps in [3, 10, 30, 100, 200, 500] {
        let body = support::body_with_steps(steps);
        group.bench_with_input(BenchmarkId::new("policies10", steps), &steps, |b, _| {
            b.iter(|| mutate(black_box(&body), &set, &catalog))
        });
    }
    group.finish();
}

/// The review with 0 or 10,000 cached Tasks: an inline-spec TaskRun (the cache is not read)
/// and the same TaskRun referencing its Task by name (`taskRef: Inline` looks it up in the
/// cache and inlines it).
fn scale_tasks(c: &mut Criterion) {
    let set = support::policy_set(10);
    let inline = support::body_with_steps(3);
    let (taskref, task) = support::taskref_review();
    let mut group = c.benchmark_group("scale_tasks");
    for tasks in [0, 10_000] {
        let catalog = support::catalog_with(tasks, std::slice::from_ref(&task));
        for body in [&inline, &taskref] {
            let reply = admission::review(Endpoint::Mutate, body, &set, &catalog);
            assert_eq!(
                reply.summary.outcome,
                Some(bookend::engine::Outcome::Mutated),
                "{:?}",
                reply.summary.reason
            );
        }
        group.bench_with_input(BenchmarkId::new("inline", tasks), &tasks, |b, _| {
            b.iter(|| mutate(black_box(&inline), &set, &catalog))
        });
        group.bench_with_input(BenchmarkId::new("taskref", tasks), &tasks, |b, _| {
            b.iter(|| mutate(black_box(&taskref), &set, &catalog))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = review, decide, diff, parts, scale_policies, scale_steps, scale_tasks
}
criterion_main!(benches);
