//! Tekton's own code over everything bookend emits: every corpus TaskRun that Tekton's
//! `SetDefaults` + `Validate` accept before injection must still be accepted after it, and the
//! object Tekton's defaulting produces from bookend's output must give no patch on a second
//! pass (the re-invocation that `reinvocationPolicy: IfNeeded` causes).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use bookend::engine::{self, Catalog, Outcome, Request};
use bookend::policy::Settings;
use bookend::policy::load::yaml_documents;
use bookend::source::walk::policy_set;
use bookend::tekton::TaskRunView;
use serde_json::Value;

use crate::tools::tools;

const NAMESPACE: &str = "team-a";

/// Feature flags of the cluster the alpha examples are written for (upstream runs them with
/// these), as `tekton-validate` arguments.
const ALPHA_FLAGS: &[&str] = &[
    "--feature-flag",
    "enable-api-fields=alpha",
    "--feature-flag",
    "enable-param-enum=true",
    "--feature-flag",
    "enable-artifacts=true",
    "--feature-flag",
    "enable-cel-in-whenexpression=true",
];

/// Runs tekton-validate over a directory; results by file name. Files whose name ends in
/// `-alpha.json` are validated with the alpha feature flags, the rest with Tekton's defaults.
fn validate(dir: &Path) -> BTreeMap<String, Value> {
    let mut results = BTreeMap::new();
    for (sub, flags) in [("default", &[][..]), ("alpha", ALPHA_FLAGS)] {
        let d = dir.join(sub);
        if d.exists() {
            results.extend(validate_with(&d, flags));
        }
    }
    results
}

fn validate_with(dir: &Path, flags: &[&str]) -> BTreeMap<String, Value> {
    let out = Command::new(tools().path("tekton-validate"))
        .args(["--json", "--print-defaulted"])
        .args(flags)
        .arg(dir)
        .output()
        .expect("tekton-validate runs");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "tekton-validate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).expect("tekton-validate --json");
    results
        .into_iter()
        .filter_map(|r| {
            let file = Path::new(r["file"].as_str()?)
                .file_name()?
                .to_str()?
                .to_owned();
            Some((file, r))
        })
        .collect()
}

#[test]
fn tekton_accepts_what_bookend_emits_and_defaulting_converges() {
    let loaded = policy_set(
        &[crate::root().join("examples/policies")],
        Settings::default(),
    );
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    let set = loaded.set;

    let work = tempfile::tempdir().unwrap();
    let (before_dir, after_dir) = (work.path().join("before"), work.path().join("after"));
    for dir in [&before_dir, &after_dir] {
        std::fs::create_dir_all(dir.join("default")).unwrap();
        std::fs::create_dir_all(dir.join("alpha")).unwrap();
    }

    let mut labels = BTreeMap::new();
    let mut catalogs = BTreeMap::new();
    let mut denied = Vec::new();
    let mut n = 0;
    for file in crate::common::tekton_taskrun_files() {
        let docs = yaml_documents(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let mut catalog = Catalog::default();
        catalog.add_objects(&docs, NAMESPACE);
        for (i, doc) in docs.iter().enumerate() {
            if TaskRunView::new(doc).is_none() {
                continue;
            }
            n += 1;
            let name = format!("{n:04}.json");
            let group = if file.components().any(|c| c.as_os_str() == "alpha") {
                "alpha"
            } else {
                "default"
            };
            let label = format!(
                "{}#{i}",
                file.strip_prefix(crate::tekton_fixtures())
                    .unwrap_or(&file)
                    .display()
            );
            let d = engine::decide(
                Request {
                    object: doc,
                    namespace: NAMESPACE,
                    dry_run: false,
                },
                &set,
                &catalog,
            );
            std::fs::write(
                before_dir.join(group).join(&name),
                serde_json::to_vec(doc).unwrap(),
            )
            .unwrap();
            if d.outcome == Outcome::Denied {
                denied.push(format!("{label}: {}", d.message.unwrap_or_default()));
            } else {
                std::fs::write(
                    after_dir.join(group).join(&name),
                    serde_json::to_vec(&d.object).unwrap(),
                )
                .unwrap();
            }
            labels.insert(name.clone(), label);
            catalogs.insert(name, catalog.clone());
        }
    }

    let before = validate(&before_dir);
    let after = validate(&after_dir);
    let ok = |r: Option<&Value>| r.is_some_and(|r| r["ok"] == true);
    let accepted_before: Vec<&String> = labels.keys().filter(|k| ok(before.get(*k))).collect();
    let mut regressions = Vec::new();
    let mut accepted_after = 0;
    let mut converged = 0;
    for key in &accepted_before {
        let label = &labels[*key];
        let Some(result) = after.get(*key) else {
            continue; // denied by bookend, listed below
        };
        if !ok(Some(result)) {
            regressions.push(format!("{label}: {}", result["error"]));
            continue;
        }
        accepted_after += 1;
        // Tekton's defaulting webhook round-trips the object and re-invokes bookend.
        let defaulted = &result["defaulted"];
        let again = engine::decide(
            Request {
                object: defaulted,
                namespace: NAMESPACE,
                dry_run: false,
            },
            &set,
            &catalogs[*key],
        );
        assert_eq!(
            again.outcome,
            Outcome::Admitted,
            "{label}: second pass after Tekton's defaulting: {:?} {:?}",
            again.message,
            again.patch
        );
        converged += 1;
    }
    let rejected_before: Vec<String> = labels
        .iter()
        .filter(|(k, _)| !ok(before.get(*k)))
        .map(|(k, l)| {
            format!(
                "{l}: {}",
                before
                    .get(k)
                    .map(|r| r["error"].to_string())
                    .unwrap_or_default()
            )
        })
        .collect();

    println!(
        "tekton-validate over the corpus rendered with examples/policies (alpha examples with alpha flags):"
    );
    println!("  TaskRuns: {n}");
    println!(
        "  accepted by Tekton before injection: {}",
        accepted_before.len()
    );
    println!("  ...and still accepted after injection: {accepted_after}");
    println!("  denied by bookend: {}", denied.len());
    println!("  second pass after Tekton's defaulting gave no patch: {converged}");
    println!(
        "  rejected by Tekton before injection (not bookend's doing): {}",
        rejected_before.len()
    );
    for r in &rejected_before {
        println!("    {r}");
    }
    for d in &denied {
        println!("  denied: {d}");
    }
    for r in &regressions {
        println!("  REGRESSION: {r}");
    }
    assert!(
        regressions.is_empty(),
        "{} TaskRuns Tekton accepted before injection are rejected after",
        regressions.len()
    );
    assert!(accepted_before.len() >= 100, "{}", accepted_before.len());
}
