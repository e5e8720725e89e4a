//! A rolling upgrade as the API server sees it: the previous release (0.1.0, built from this
//! repository's history) and this one side by side behind the chart's webhooks, each
//! arrangement (old replicas mutating and new ones validating, and the reverse), with TaskRun
//! CREATEs counted. See docs/testing.md, "Rolling upgrade".

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::bookend::{Bookend, bookend_bin};
use super::certificates::Certs;
use super::helm::{helm_install, service_account_kubeconfig};
use super::objects::{busybox_step, example, yaml_docs};
use crate::kube::{Clock, Cluster, cluster_policy, free_port, poll, run};
use crate::tools::tools;

/// The last commit whose Always helpers are 0.1.0's (per-step loops, `type: string`): the next
/// one, 9052b9e, shortened them while the version still said 0.1.0.
const PREVIOUS: &str = "97d7e8c1c1640e0281813c2faf63e84d20559f93";

/// TaskRuns of each shape per arrangement.
const EACH: usize = 10;

/// The previous release's binary: `BOOKEND_E2E_PREVIOUS_BIN`, or built from `git archive
/// PREVIOUS` into `target/previous/<commit>/` (its own target directory; reused afterwards).
/// `None` when neither is possible: a shallow clone lacks the commit.
fn previous_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("BOOKEND_E2E_PREVIOUS_BIN") {
        return Some(PathBuf::from(bin));
    }
    let root = crate::root();
    let mut present = Command::new("git");
    present
        .arg("-C")
        .arg(&root)
        .args(["cat-file", "-e", &format!("{PREVIOUS}^{{commit}}")]);
    if !run(present, None).ok() {
        return None;
    }
    let dir = root.join("target/previous").join(PREVIOUS);
    let bin = dir.join("target/debug/bookend");
    if bin.exists() {
        return Some(bin);
    }
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("mkdir target/previous");
    let mut archive = Command::new("bash");
    archive.arg("-c").arg(format!(
        "git -C '{}' archive {PREVIOUS} | tar -x -C '{}'",
        root.display(),
        src.display()
    ));
    run(archive, None).expect_ok(&format!(
        "git archive {PREVIOUS} (the previous release; a shallow clone lacks it: git fetch --unshallow, or set BOOKEND_E2E_PREVIOUS_BIN)"
    ));
    // Niced: it builds while the other e2e tests run their clusters, whose timeouts matter more.
    // Without debug info: the test only runs it, and the link then needs a fraction of the
    // memory and disk (the build runs beside the suite's other clusters and targets).
    // A failed build is tried once more, one job at a time (it resumes where it stopped): the
    // first can lose its linker to the memory the suite's clusters hold at that moment.
    let build = |jobs: Option<&str>| {
        let mut build = Command::new("nice");
        build
            .args(["-n", "19"])
            .arg(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--locked", "--bin", "bookend", "--target-dir"])
            .arg(dir.join("target"))
            .args(jobs.map(|n| ["--jobs", n]).into_iter().flatten())
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .current_dir(&src);
        run(build, None)
    };
    let first = build(None);
    if first.ok() {
        return Some(bin);
    }
    eprintln!(
        "[upgrade] building the previous release failed, trying again with one job: {}",
        cargo_errors(&first.stderr)
    );
    let out = build(Some("1"));
    assert!(
        out.ok(),
        "cargo build of the previous release ({PREVIOUS}) failed twice ({}); what cargo said, \
         without its `Compiling` lines:\n{}\n(free disk: {})",
        out.status,
        cargo_errors(&out.stderr),
        free_disk(&dir)
    );
    Some(bin)
}

/// Cargo's stderr without its progress lines, at most the last 60 of what remains (the error
/// is at the end; a linker's note can be a page of library names).
fn cargo_errors(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("Compiling ") || l.starts_with("Building ") || l.is_empty())
        })
        .map(|l| {
            let from = (l.len().saturating_sub(400)..l.len())
                .find(|&i| l.is_char_boundary(i))
                .unwrap_or(0);
            &l[from..]
        })
        .collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

fn free_disk(dir: &Path) -> String {
    let mut df = Command::new("df");
    df.args(["-h", "--output=avail"]).arg(dir);
    run(df, None)
        .stdout
        .split_whitespace()
        .last()
        .unwrap_or("?")
        .to_owned()
}

fn version(bin: &Path) -> String {
    let mut cmd = Command::new(bin);
    cmd.arg("--version");
    run(cmd, None).stdout.trim().to_owned()
}

/// Points every webhook of the MutatingWebhookConfigurations at `mutating` and every one of
/// the ValidatingWebhookConfigurations at `validating` (ports on 127.0.0.1, paths kept).
fn point_webhooks(cluster: &Cluster, mutating: u16, validating: u16) {
    for (kind, port) in [
        ("mutatingwebhookconfigurations", mutating),
        ("validatingwebhookconfigurations", validating),
    ] {
        let list = cluster.get_json(&[kind], kind);
        for mut config in list["items"].as_array().cloned().unwrap_or_default() {
            for hook in config["webhooks"].as_array_mut().expect("webhooks") {
                let url = hook["clientConfig"]["url"]
                    .as_str()
                    .expect("url")
                    .to_owned();
                let path = url
                    .strip_prefix("https://127.0.0.1:")
                    .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
                    .unwrap_or_else(|| panic!("a loopback webhook url: {url}"));
                hook["clientConfig"]["url"] = json!(format!("https://127.0.0.1:{port}{path}"));
            }
            config["kind"] = json!(if kind.starts_with("mutating") {
                "MutatingWebhookConfiguration"
            } else {
                "ValidatingWebhookConfiguration"
            });
            config["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            cluster
                .with_object(&["replace"], &config)
                .expect_ok("point the webhooks");
        }
    }
}

/// How many admission reviews of `endpoint` (`mutate`, `validate`) a bookend logged so far.
fn reviews(bookend: &Bookend, endpoint: &str) -> usize {
    let forms = [
        format!("endpoint=\"{endpoint}\""),
        format!("endpoint={endpoint} "),
        format!("\"endpoint\":\"{endpoint}\""),
    ];
    std::fs::read_to_string(&bookend.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| forms.iter().any(|f| l.contains(f.as_str())))
        .count()
}

/// The shapes sent in each arrangement: (label, TaskRun).
fn shapes() -> Vec<(&'static str, Value)> {
    let build = yaml_docs(&example("examples/taskruns/build.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "TaskRun")
        .expect("build.yaml");
    let taskref = yaml_docs(&example("examples/taskruns/taskref.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "TaskRun")
        .expect("taskref.yaml");
    let mut taskref = taskref;
    taskref["metadata"] = json!({"generateName": "unit-tests-", "namespace": "team-a"});
    let in_namespace = |generate: &str, ns: &str| {
        json!({
            "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"generateName": generate, "namespace": ns},
            "spec": {"taskSpec": {"steps": [{"name": "work", "image": "docker.io/library/alpine:3.20",
                                            "script": "echo"}]}},
        })
    };
    vec![
        ("build.yaml (Always helpers)", build),
        ("taskref.yaml (inlined, Always helpers)", taskref),
        (
            "one step, an OnSuccess policy only",
            in_namespace("onsuccess-", ONSUCCESS_NS),
        ),
        ("no policy applies", in_namespace("plain-", PLAIN_NS)),
    ]
}

/// A namespace only an OnSuccess policy of the test's own applies to (no helper steps), and one
/// no policy applies to.
const ONSUCCESS_NS: &str = "onsuccess-only";
const PLAIN_NS: &str = "plain";

/// Creates EACH TaskRuns of every shape; per shape (label, created, refused, first refusal).
fn create_all(cluster: &Cluster) -> Vec<(String, usize, usize, String)> {
    shapes()
        .into_iter()
        .map(|(label, object)| {
            let (mut ok, mut refused, mut first) = (0, 0, String::new());
            for _ in 0..EACH {
                let out = cluster.with_object(&["create"], &object);
                if out.ok() {
                    ok += 1;
                } else {
                    refused += 1;
                    if first.is_empty() {
                        first = out.stderr.lines().next().unwrap_or("").to_owned();
                    }
                }
            }
            (label.to_owned(), ok, refused, first)
        })
        .collect()
}

#[test]
fn rolling_upgrade_previous_and_current_side_by_side() {
    let mut clock = Clock::new("upgrade");
    tools();
    let Some(previous) = previous_bin() else {
        println!(
            "SKIPPED: the rolling-upgrade test needs the previous release, commit {PREVIOUS}, which \
             this clone lacks (a shallow clone): `git fetch --unshallow`, or set \
             BOOKEND_E2E_PREVIOUS_BIN to its binary"
        );
        return;
    };
    println!(
        "previous: {} ({}); current: {}",
        version(&previous),
        previous.display(),
        version(&bookend_bin())
    );
    clock.done("the previous release's binary");

    let tmp = tempfile::Builder::new()
        .prefix("bookend-upgrade-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    let cluster = Cluster::start(work.join("cluster"));
    let certs = Certs::create(work.join("certs"));
    let (old_port, new_port) = (free_port(), free_port());
    assert_ne!(old_port, new_port);
    // The current chart (a rolling upgrade applies the new chart first: RBAC, CRDs, webhooks).
    helm_install(&cluster, new_port, &certs.ca_bundle_b64(), &[]).expect_ok("helm install");
    poll("the chart's CRDs served", Duration::from_secs(60), || {
        cluster
            .kubectl(&["get", "clustersteppolicies.bookend.dev"])
            .succeeded()
    });
    let kubeconfig = service_account_kubeconfig(&cluster, &work.join("bookend.kubeconfig"));
    let start = |name: &str, bin: &Path, port: u16| {
        let dir = work.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut bookend = Bookend::start_bin(
            bin,
            &dir,
            port,
            &certs.live("tls.crt"),
            &certs.live("tls.key"),
            &kubeconfig,
        );
        bookend.wait_ready(Duration::from_secs(60));
        bookend
    };
    let old = start("previous", &previous, old_port);
    let new = start("current", &bookend_bin(), new_port);
    for ns in ["team-a", "team-b", "team-c", ONSUCCESS_NS, PLAIN_NS] {
        cluster
            .kubectl(&["create", "namespace", ns])
            .expect_ok("create namespace");
    }
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &example("examples/policies").display().to_string(),
        ])
        .expect_ok("apply examples/policies");
    let mut step = busybox_step("bookend-upgrade-pre");
    step["args"] = json!(["echo pre"]);
    cluster
        .with_object(
            &["apply"],
            &cluster_policy(
                "upgrade-onsuccess",
                json!({"match": {"namespaces": [ONSUCCESS_NS]}, "preSteps": [step]}),
            ),
        )
        .expect_ok("an OnSuccess policy");
    let task = yaml_docs(&example("examples/taskruns/taskref.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "Task")
        .expect("the Task");
    cluster
        .with_object(&["create"], &task)
        .expect_ok("the Task");
    clock.done("cluster, chart, both releases ready, example policies, a Task");

    let mut results = Vec::new();
    for (arrangement, mutating, validating) in [
        ("previous mutates, current validates", &old, &new),
        ("current mutates, previous validates", &new, &old),
    ] {
        point_webhooks(&cluster, mutating.port, validating.port);
        // The apiserver picks configurations up through an informer: wait until a dry run
        // is reviewed by both (each shape, so both releases have the Task and the policies).
        for (label, object) in shapes() {
            let (m, v) = (reviews(mutating, "mutate"), reviews(validating, "validate"));
            poll(
                &format!("{arrangement}: a dry run of {label} through both"),
                Duration::from_secs(60),
                || {
                    let out = cluster.with_object(&["create", "--dry-run=server"], &object);
                    if reviews(mutating, "mutate") > m && reviews(validating, "validate") > v {
                        Ok(())
                    } else {
                        Err(format!("not yet: {}", out.stderr.trim()))
                    }
                },
            );
        }
        let counts = create_all(&cluster);
        for (label, ok, refused, first) in &counts {
            println!("[upgrade] {arrangement}: {label}: {ok} created, {refused} refused {first}");
        }
        results.push((arrangement, counts));
        clock.done(arrangement);
    }
    drop((old, new));
    clock.print_phases();

    println!("\n=== rolling upgrade: TaskRun CREATEs ({EACH} per shape) ===");
    for (arrangement, counts) in &results {
        for (label, ok, refused, first) in counts {
            println!("{arrangement:<38} {label:<40} {ok:>3} created {refused:>3} refused {first}");
        }
    }
    drop(cluster);
    if std::env::var_os("BOOKEND_E2E_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
    // Old replicas mutating, new ones validating: the new backstop takes what 0.1.0 injected
    // for bookend's own (engine::inject::earlier_helper_steps), so nothing is refused.
    let (_, forward) = &results[0];
    let refused: Vec<&(String, usize, usize, String)> =
        forward.iter().filter(|c| c.2 > 0).collect();
    assert!(
        refused.is_empty(),
        "TaskRun CREATEs refused while 0.1.0 mutated and this release validated: {refused:#?}"
    );
    // The reverse, measured (docs/install.md, "Upgrade"): a 0.1.0 backstop refuses what this
    // release injected, and only that — with its own message, never anything else.
    let (_, reverse) = &results[1];
    for (label, _, refused, first) in reverse {
        assert!(
            *refused == 0 || first.contains("or they were changed after injection"),
            "{label}: refused for another reason: {first}"
        );
    }
    for shape in ["no policy applies", "one step, an OnSuccess policy only"] {
        assert_eq!(
            reverse.iter().find(|c| c.0 == shape).map(|c| c.2),
            Some(0),
            "{shape}: no helper steps, so a 0.1.0 backstop takes this release's injection"
        );
    }
}
