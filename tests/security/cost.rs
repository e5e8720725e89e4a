//! Class 6: cost. A forged record once made stripping quadratic (a 1.6 MB TaskRun cost seconds
//! of CPU), and ten large StepPolicies took bookend past its chart's memory limit. Now the
//! record decides nothing (so it drives no loop), policies have budgets (one policy, one
//! namespace, the org), and the largest set those budgets allow is loaded by the real binary
//! here, its peak memory read from the kernel and held against the chart's limit. Time is not
//! asserted (timed assertions are flaky on a shared machine); `cargo bench --bench engine`
//! measures the work per request against its size (docs/benchmarks.md).

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use bookend::policy::validate::limits::{
    MAX_CLUSTER_SPEC_BYTES, MAX_NAMESPACE_SPEC_BYTES, MAX_SPEC_BYTES, MAX_STEPS,
};

use crate::cases::{build_step, inline};
use crate::{catalog, decide, policies};

/// How many namespaces fill their own budget in the measured set (each adds its share, which
/// docs/operations.md states so that a platform can size the limit for more).
pub const FULL_NAMESPACES: usize = 8;

/// A policy of `kind` as large as one may be (64 steps, just under 256 KiB).
fn largest_policy(kind: &str, name: &str, namespace: Option<&str>, prefix: &str) -> Value {
    let per_step = MAX_SPEC_BYTES / MAX_STEPS - 160;
    let steps: Vec<Value> = (0..MAX_STEPS)
        .map(|i| {
            json!({"name": format!("{prefix}-{i}"), "image": "registry.example/tool:1",
                   "command": ["/tool"], "args": ["a".repeat(per_step)]})
        })
        .collect();
    let mut meta = json!({"name": name});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    json!({"apiVersion": "bookend.dev/v1alpha1", "kind": kind, "metadata": meta,
           "spec": {"match": {"namespaces": ["team-*"]},
                    "preSteps": steps[..MAX_STEPS / 2], "postSteps": steps[MAX_STEPS / 2..]}})
}

/// The largest set the budgets allow: the org's budget full, and `FULL_NAMESPACES` namespaces
/// with theirs full. Returns the bytes of specs written.
fn write_largest_set(dir: &Path) -> usize {
    let mut docs = Vec::new();
    let one =
        serde_json::to_vec(&largest_policy("ClusterStepPolicy", "x", None, "bookend-x")["spec"])
            .unwrap()
            .len();
    for c in 0..MAX_CLUSTER_SPEC_BYTES / one {
        docs.push(largest_policy(
            "ClusterStepPolicy",
            &format!("org-{c}"),
            None,
            &format!("bookend-o{c}"),
        ));
    }
    for n in 0..FULL_NAMESPACES {
        for p in 0..MAX_NAMESPACE_SPEC_BYTES / one {
            let mut doc = largest_policy(
                "StepPolicy",
                &format!("team-{p}"),
                Some(&format!("team-{n}")),
                &format!("bookend-t{p}"),
            );
            doc["spec"].as_object_mut().unwrap().remove("match");
            docs.push(doc);
        }
    }
    let mut bytes = 0;
    for (i, doc) in docs.iter().enumerate() {
        bytes += serde_json::to_vec(&doc["spec"]).unwrap().len();
        std::fs::write(
            dir.join(format!("{i:03}.yaml")),
            serde_json::to_vec(doc).unwrap(),
        )
        .unwrap();
    }
    bytes
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The chart's memory limit, in KiB (`resources.limits.memory` in charts/bookend/values.yaml).
fn chart_limit_kib() -> u64 {
    let values = std::fs::read_to_string(crate::root().join("charts/bookend/values.yaml")).unwrap();
    let values: Value = serde_yaml_ng::from_str(&values).unwrap();
    let limit = values["resources"]["limits"]["memory"]
        .as_str()
        .expect("a memory limit");
    let (number, unit) = limit.split_at(limit.find(|c: char| !c.is_ascii_digit()).unwrap());
    let number: u64 = number.parse().unwrap();
    match unit {
        "Mi" => number * 1024,
        "Gi" => number * 1024 * 1024,
        other => panic!("unit {other}"),
    }
}

fn get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_largest_allowed_policy_set_fits_the_charts_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    let bytes = write_largest_set(&policies);
    let certs = dir.path().join("certs");
    let bin = env!("CARGO_BIN_EXE_bookend");
    assert!(
        Command::new(bin)
            .args([
                "certs",
                "--out-dir",
                certs.to_str().unwrap(),
                "--host",
                "localhost"
            ])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    );
    let valid = Command::new(bin)
        .args(["validate", "--policies", policies.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        valid.status.success(),
        "the set is within the budgets: {}",
        String::from_utf8_lossy(&valid.stdout)
    );
    let admin = free_port();
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--policies",
            policies.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--tls-cert",
            certs.join("tls.crt").to_str().unwrap(),
            "--tls-key",
            certs.join("tls.key").to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while get(&format!("http://127.0.0.1:{admin}/readyz")).is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "bookend never got ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let loaded = status_kib(child.id(), "VmHWM:");
    // A change reloads the whole set beside the old one: the peak of a reload counts too.
    let reload_policies = std::fs::read_dir(&policies)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&reload_policies)
        .unwrap();
    file.write_all(b"\n").unwrap();
    std::thread::sleep(Duration::from_secs(6));
    let peak = status_kib(child.id(), "VmHWM:");
    child.kill().ok();
    child.wait().ok();
    let limit = chart_limit_kib();
    eprintln!(
        "largest allowed set: {:.1} MiB of specs ({} full namespaces): peak RSS {} MiB after loading, {} MiB after a reload; the chart's limit {} MiB",
        bytes as f64 / 1048576.0,
        FULL_NAMESPACES,
        loaded / 1024,
        peak / 1024,
        limit / 1024
    );
    assert!(
        peak < limit,
        "peak RSS {peak} KiB is over the chart's limit {limit} KiB"
    );
}

#[test]
fn a_forged_record_drives_no_work_and_large_taskruns_are_answered() {
    // The shape that used to be quadratic: thousands of reserved-prefix steps vouched for by a
    // record listing thousands of entries. Now refused at the first step that is not bookend's.
    let (set, catalog) = (policies(), catalog());
    let entries: Vec<Value> = (0..4000)
        .map(|i| json!({"policy": "ClusterStepPolicy/org-creds", "hash": "0", "steps": [format!("bookend-s{i}")]}))
        .collect();
    let steps: Vec<Value> = (0..4000)
        .map(|i| json!({"name": format!("bookend-s{i}"), "image": "x"}))
        .chain([build_step()])
        .collect();
    let mut taskrun = inline(Value::Array(steps));
    taskrun["metadata"]["annotations"] =
        json!({"bookend.dev/injected": json!({"policies": entries}).to_string()});
    let decision = decide(&taskrun, "team-a", &set, &catalog);
    assert_eq!(decision.outcome, bookend::engine::Outcome::Denied);
    // Ten thousand steps of the author's: injected around them.
    let many: Vec<Value> = (0..10_000)
        .map(|i| json!({"name": format!("s{i}"), "image": "busybox", "script": "true"}))
        .collect();
    let decision = decide(&inline(Value::Array(many)), "team-a", &set, &catalog);
    assert_eq!(decision.outcome, bookend::engine::Outcome::Mutated);
}
