//! The Tekton lines the suite runs against (`BOOKEND_TEKTON_VERSIONS`), what each line lacks,
//! and the checks for a policy bookend must refuse there: bookend denies its TaskRuns naming
//! the fix, and that Tekton's own validation refuses what an unaware bookend would inject.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use bookend::tekton::cluster::Feature;
use serde_json::{Value, json};

use crate::kube::{Kubectl, run};
pub use crate::tekton_line::Line;
use crate::tools::Tools;

/// Tekton's config as the release pipeline leaves it (pipelines-info names the version,
/// "devel" in the source) with this line's feature flags.
pub fn configure(line: &Line, kubectl: &Kubectl) {
    kubectl.ok(
        &[
            "-n",
            "tekton-pipelines",
            "patch",
            "configmap",
            "pipelines-info",
            "--type",
            "merge",
            "-p",
            &json!({"data": {"version": line.version}}).to_string(),
        ],
        "pipelines-info names the release",
    );
    if !line.flags.is_empty() {
        let data: serde_json::Map<String, Value> = line
            .flags
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        kubectl.ok(
            &[
                "-n",
                "tekton-pipelines",
                "patch",
                "configmap",
                "feature-flags",
                "--type",
                "merge",
                "-p",
                &json!({ "data": data }).to_string(),
            ],
            "the line's feature flags",
        );
    }
}

/// What Tekton must support for a policy's injected steps, read from the policy as
/// docs/compatibility.md's table says (independently of bookend's own compilation).
pub fn policy_needs(policy: &Value) -> BTreeSet<Feature> {
    let spec = &policy["spec"];
    let mut needs = BTreeSet::new();
    let fallback = spec["postStepsRunFallback"].as_str().unwrap_or("Deny");
    if spec["postStepsRun"] == "Always" && fallback == "Deny" {
        needs.extend([Feature::StepWhen, Feature::StepResults]);
    }
    for list in ["preSteps", "postSteps"] {
        for step in spec[list].as_array().into_iter().flatten() {
            if step.get("ref").is_some() {
                needs.insert(Feature::StepActionRef);
            }
            if step["ref"].get("resolver").is_some() {
                needs.insert(Feature::StepActionResolver);
            }
            if step["ref"]["resolver"] == "cluster" {
                needs.insert(Feature::StepActionClusterResolver);
            }
            if step.get("when").is_some() {
                needs.insert(Feature::StepWhen);
            }
            if step.get("results").is_some() {
                needs.insert(Feature::StepResults);
            }
            if step.get("workspaces").is_some() {
                needs.insert(Feature::StepWorkspaces);
            }
        }
    }
    needs
}

/// A policy bookend reported not Ready: (name, reason, message).
pub type NotReady = (String, String, String);

/// The checks on a line where some test policies need what its Tekton lacks; one result line
/// per policy that needs something of Tekton. Panics (the caller records a failure) when bookend's answer is wrong.
pub fn check_refused_policies(
    line: &Line,
    policies: &[Value],
    not_ready: &[NotReady],
    kubectl: &Kubectl,
    tools: &Tools,
    bookend: &Path,
    work: &Path,
) -> Vec<(String, String)> {
    let expected: BTreeSet<String> = policies
        .iter()
        .filter(|p| {
            !line
                .lacking(&policy_needs(p).into_iter().collect::<Vec<_>>())
                .is_empty()
        })
        .map(|p| p["metadata"]["name"].as_str().expect("a name").to_owned())
        .collect();
    let observed: BTreeSet<String> = not_ready.iter().map(|(n, _, _)| n.clone()).collect();
    assert_eq!(
        observed,
        expected,
        "{}: the policies bookend reports not Ready, against those that need what this Tekton lacks",
        line.label()
    );
    let mut rows = Vec::new();
    for (name, reason, message) in not_ready {
        let policy = policies
            .iter()
            .find(|p| p["metadata"]["name"] == *name)
            .expect("a test policy");
        let needs: Vec<Feature> = policy_needs(policy).into_iter().collect();
        let lack = needs
            .iter()
            .find_map(|f| line.cluster.lacks(*f))
            .expect("a refused policy lacks something");
        let fix = lack.flag().unwrap_or("upgrade");
        assert_eq!(reason, "TektonUnsupported", "{name}: {message}");
        assert!(
            message.contains(fix) && message.contains(&line.version),
            "{name}: the Ready message names {fix} and {}: {message}",
            line.version
        );
        // A TaskRun the policy matches: bookend refuses it, naming the fix.
        let namespace = policy["spec"]["match"]["namespaces"][0]
            .as_str()
            .expect("a test policy names its namespace");
        // Two steps: with one, an Always policy without pre-steps needs no gate (no step
        // `when`), which this Tekton would run; bookend decides per policy, for every TaskRun.
        let mut taskrun = crate::runs::taskrun(
            namespace,
            "refused",
            json!({"steps": [crate::runs::step("work", ""), crate::runs::step("more", "")]}),
        );
        if let Some(labels) = policy["spec"]["match"]["selector"]["matchLabels"].as_object() {
            taskrun["metadata"]["labels"] = Value::Object(labels.clone());
        }
        let out = kubectl.with_object(&["create", "--dry-run=server"], &taskrun);
        assert!(
            !out.ok() && out.stderr.contains(fix) && out.stderr.contains(&line.version),
            "{name}: bookend must refuse a TaskRun it matches on {}, naming {fix}: {}{}",
            line.label(),
            out.stdout,
            out.stderr
        );
        let remedy = lack
            .flag()
            .map_or_else(|| "upgrade Tekton".to_owned(), |flag| format!("set {flag}"));
        let mut row = format!(
            "bookend denied as expected (needs {}; {remedy})",
            describe(&needs)
        );
        if lack.feature() == Feature::StepActionClusterResolver {
            // Tekton's validation admits it; its cluster resolver refuses it when the TaskRun
            // runs: run the policy's step, as bookend would inject it, without bookend.
            let failure = cluster_resolver_refuses(policy, kubectl, work);
            let _ = write!(
                row,
                "; Tekton {} fails the step without bookend: {failure}",
                line.version
            );
        } else {
            // What bookend without the cluster's version (the newest assumed) would inject:
            // that Tekton's own validation refuses it (the failure this spares the org).
            let refused =
                tekton_refuses_unaware(line, policies, policy, &taskrun, tools, bookend, work);
            assert!(
                !refused.is_empty(),
                "{name}: Tekton {}'s validation accepted what bookend injects for the newest \
                 Tekton; then bookend need not refuse it",
                line.label()
            );
            let _ = write!(
                row,
                "; Tekton {} refuses the unaware injection: {refused}",
                line.version
            );
        }
        rows.push((format!("policy {name}"), row));
    }
    // The others that need something of Tekton are Ready here: said, so that the table shows a
    // policy without a row as not reached, never as Ready.
    for policy in policies.iter().filter(|p| !policy_needs(p).is_empty()) {
        let name = policy["metadata"]["name"].as_str().expect("a name");
        if !observed.contains(name) {
            rows.push((format!("policy {name}"), READY.to_owned()));
        }
    }
    rows
}

/// The result of a policy bookend reports Ready on the line (`cargo xtask tekton-matrix` reads
/// its start).
pub const READY: &str = "ready: injected";

/// The policy's steps that go through the cluster resolver, in a TaskRun of a namespace no
/// policy matches, run by this Tekton: it must fail at resolution, the resolver refusing kind
/// `stepaction`. Returns the condition's reason and message.
fn cluster_resolver_refuses(policy: &Value, kubectl: &Kubectl, work: &Path) -> String {
    let spec = &policy["spec"];
    let steps: Vec<Value> = ["preSteps", "postSteps"]
        .iter()
        .flat_map(|list| spec[*list].as_array().cloned().unwrap_or_default())
        .filter(|s| s["ref"]["resolver"] == "cluster")
        .enumerate()
        // Not bookend's reserved prefix: here the step is the author's own.
        .map(|(i, mut s)| {
            s["name"] = json!(format!("via-cluster-resolver-{i}"));
            s
        })
        .collect();
    let env = crate::runs::Env {
        kubectl: kubectl.clone(),
        kubelet_dir: work.join("kubelet"),
    };
    let run = env.run_one(&crate::runs::taskrun(
        crate::scenarios::PLAIN,
        "cluster-resolver",
        json!({ "steps": steps }),
    ));
    let (status, reason, message) = run.condition();
    assert!(
        status == "False" && message.contains("unknown or unsupported resource kind 'stepaction'"),
        "the cluster resolver must refuse kind stepaction here: {status} {reason}: {message}"
    );
    format!("{reason}: {}", message.lines().next().unwrap_or_default())
}

/// `bookend render` for the newest Tekton, then `tekton-validate` of this line on the result;
/// returns Tekton's first error line (empty when Tekton accepts it).
fn tekton_refuses_unaware(
    line: &Line,
    policies: &[Value],
    policy: &Value,
    taskrun: &Value,
    tools: &Tools,
    bookend: &Path,
    work: &Path,
) -> String {
    let name = policy["metadata"]["name"].as_str().expect("a name");
    let dir = work.join("unaware").join(name);
    std::fs::create_dir_all(dir.join("policies")).expect("mkdir");
    // Every test policy, as in the cluster: whether gates are injected depends on the other
    // policies a TaskRun matches (their pre-steps), not on this one alone.
    for other in policies {
        let other_name = other["metadata"]["name"].as_str().expect("a name");
        std::fs::write(
            dir.join("policies").join(format!("{other_name}.yaml")),
            other.to_string(),
        )
        .expect("write");
    }
    let mut taskrun = taskrun.clone();
    taskrun["metadata"]["name"] = json!("refused");
    std::fs::write(dir.join("taskrun.yaml"), taskrun.to_string()).expect("write");
    let mut cmd = Command::new(bookend);
    cmd.arg("render")
        .arg("--policies")
        .arg(dir.join("policies"))
        .arg("-f")
        .arg(dir.join("taskrun.yaml"));
    let rendered = run(cmd, None).expect_ok("bookend render (newest Tekton assumed)");
    std::fs::write(dir.join("rendered.yaml"), &rendered.stdout).expect("write");
    let mut cmd = Command::new(tools.path("tekton-validate"));
    for (k, v) in &line.flags {
        cmd.arg("--feature-flag").arg(format!("{k}={v}"));
    }
    cmd.arg(dir.join("rendered.yaml"));
    let out = run(cmd, None);
    if out.ok() {
        return String::new();
    }
    // `<file>#0 <name> INVALID <message>: <fields>`: the message.
    let text = format!("{}{}", out.stdout, out.stderr);
    let line = text
        .lines()
        .find(|l| l.contains(" INVALID "))
        .unwrap_or_else(|| text.lines().next().unwrap_or("refused"));
    let message = line.split_once(" INVALID ").map_or(line, |(_, m)| m);
    message
        .split(": spec.")
        .next()
        .unwrap_or(message)
        .trim()
        .to_owned()
}

/// `BOOKEND_RUNTIME_MATRIX_OUT`: one line per result, for `cargo xtask tekton-matrix`:
/// version, flags, item, needs, result, tab-separated (tabs and newlines in a field become
/// spaces).
pub fn record(line: &Line, item: &str, needs: &str, result: &str) {
    let Some(path) = std::env::var_os("BOOKEND_RUNTIME_MATRIX_OUT") else {
        return;
    };
    let clean = |text: &str| text.replace(['\t', '\n', '\r'], " ");
    let row = [
        line.version.as_str(),
        &line.describe_flags(),
        item,
        needs,
        result,
    ]
    .map(clean)
    .join("\t");
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", std::path::PathBuf::from(&path).display()));
    writeln!(file, "{row}").expect("write the matrix row");
}

/// The features' names, for a row.
pub fn describe(needs: &[Feature]) -> String {
    if needs.is_empty() {
        return "—".to_owned();
    }
    needs
        .iter()
        .map(|f| f.describe())
        .collect::<Vec<_>>()
        .join(", ")
}
