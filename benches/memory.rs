//! Peak memory of the engine's state: N policies compiled into a `PolicySet` and M Task
//! objects in a `Catalog` (what the webhook keeps in memory in Kubernetes mode), then one
//! admission decision. Not a criterion benchmark: a plain program (`harness = false`).
//!
//! `cargo bench --bench memory -- <policies> <tasks>` prints one CSV line:
//! `policies,tasks,rss_start_kib,rss_end_kib,peak_rss_kib,build_ms,outcome,rss_trimmed_kib`.
//! Peak RSS is the kernel's `VmHWM` for the process (/proc/self/status); `rss_trimmed` is the
//! RSS after mimalloc's `mi_collect(true)` returned freed pages (the inputs the state was built
//! from), i.e. what the loaded state itself keeps resident.

mod support;

// The allocator the bookend binary uses (src/main.rs), so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

use bookend::admission::{self, Endpoint};

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// RSS after mimalloc has returned the pages it no longer uses (`mi_collect(true)`).
fn trim() -> u64 {
    // SAFETY: mi_collect only frees or purges memory the allocator holds unused; it takes no
    // pointers and has no preconditions.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    status_kib("VmRSS:")
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .filter_map(|a| a.parse().ok())
        .collect();
    let policies = args.first().copied().unwrap_or(10_000);
    let tasks = args.get(1).copied().unwrap_or(10_000);
    let start = status_kib("VmRSS:");
    let began = Instant::now();
    // Build from generated objects and drop the inputs, as the webhook does after a load.
    let set = support::policy_set(policies);
    let catalog = support::catalog(tasks);
    let build_ms = began.elapsed().as_millis();
    let body = support::body_with_steps(3);
    let reply = admission::review(Endpoint::Mutate, &body, &set, &catalog);
    let end = status_kib("VmRSS:");
    let peak = status_kib("VmHWM:");
    let trimmed = trim();
    println!(
        "{policies},{tasks},{start},{end},{peak},{build_ms},{},{trimmed}",
        reply.summary.outcome_label()
    );
    drop((set, catalog));
}
