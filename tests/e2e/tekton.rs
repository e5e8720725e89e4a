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
use bookend::tekton::cluster::NEWEST;
use serde_json::Value;

use crate::tekton_line::Line;
use crate::tools::{tekton_tools, tools};

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
    validate_by(&tools().path("tekton-validate"), dir, flags)
}

/// `validate_with` with a given `tekton-validate` (another Tekton release's).
fn validate_by(tekton_validate: &Path, dir: &Path, flags: &[&str]) -> BTreeMap<String, Value> {
    let out = Command::new(tekton_validate)
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

/// Each older Tekton line of `BOOKEND_TEKTON_VERSIONS` (`cargo xtask test` sets the oldest, with
/// Tekton's default flags and with `enable-step-actions`): bookend, told that line (as it reads
/// it from the cluster), admits no corpus TaskRun that this release's own `SetDefaults` +
/// `Validate` (its `tekton-validate`, with the line's flags) refuses after injection. Alpha
/// examples are left out (they need flags of their own).
#[test]
fn older_tekton_accepts_what_bookend_admits() {
    let lines: Vec<Line> = Line::from_env()
        .into_iter()
        .filter(|l| l.cluster.version != NEWEST)
        .collect();
    if lines.is_empty() {
        println!(
            "no older Tekton line in BOOKEND_TEKTON_VERSIONS (e.g. v0.62.3,v0.62.3+enable-step-actions=true; \
             `cargo xtask test` sets them): nothing to check here"
        );
        return;
    }
    for line in &lines {
        let loaded = policy_set(
            &[crate::root().join("examples/policies")],
            Settings {
                tekton: line.cluster.clone(),
                ..Settings::default()
            },
        );
        let set = loaded.set;
        let work = tempfile::tempdir().unwrap();
        let (before_dir, after_dir) = (work.path().join("before"), work.path().join("after"));
        std::fs::create_dir_all(&before_dir).unwrap();
        std::fs::create_dir_all(&after_dir).unwrap();
        let mut labels = BTreeMap::new();
        let mut denied = 0;
        for file in crate::common::tekton_taskrun_files() {
            if file.components().any(|c| c.as_os_str() == "alpha") {
                continue;
            }
            let docs = yaml_documents(&std::fs::read_to_string(&file).unwrap()).unwrap();
            let mut catalog = Catalog::default();
            catalog.add_objects(&docs, NAMESPACE);
            for (i, doc) in docs.iter().enumerate() {
                if TaskRunView::new(doc).is_none() {
                    continue;
                }
                let name = format!("{:04}.json", labels.len() + 1);
                let d = engine::decide(
                    Request {
                        object: doc,
                        namespace: NAMESPACE,
                        dry_run: false,
                    },
                    &set,
                    &catalog,
                );
                std::fs::write(before_dir.join(&name), serde_json::to_vec(doc).unwrap()).unwrap();
                if d.outcome == Outcome::Denied {
                    denied += 1;
                } else {
                    std::fs::write(
                        after_dir.join(&name),
                        serde_json::to_vec(&d.object).unwrap(),
                    )
                    .unwrap();
                }
                let label = file.strip_prefix(crate::tekton_fixtures()).unwrap_or(&file);
                labels.insert(name, format!("{}#{i}", label.display()));
            }
        }
        let validator = tekton_tools(&line.version).path("tekton-validate");
        let flags: Vec<String> = line
            .flags
            .iter()
            .flat_map(|(k, v)| ["--feature-flag".to_owned(), format!("{k}={v}")])
            .collect();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let before = validate_by(&validator, &before_dir, &flags);
        let after = validate_by(&validator, &after_dir, &flags);
        let ok = |r: Option<&Value>| r.is_some_and(|r| r["ok"] == true);
        let accepted_before = labels.keys().filter(|k| ok(before.get(*k))).count();
        let admitted: Vec<&String> = labels
            .keys()
            .filter(|k| ok(before.get(*k)) && after.contains_key(*k))
            .collect();
        let refused: Vec<String> = admitted
            .iter()
            .filter(|k| !ok(after.get(**k)))
            .map(|k| format!("{}: {}", labels[*k], after[*k]["error"]))
            .collect();
        println!(
            "{}: {} TaskRuns, {accepted_before} valid as written; bookend admits {} of those, \
             Tekton refuses {} of what bookend admits; bookend denies {denied} in all",
            line.label(),
            labels.len(),
            admitted.len(),
            refused.len()
        );
        for r in &refused {
            println!("  REFUSED BY TEKTON: {r}");
        }
        assert!(
            refused.is_empty(),
            "{}: Tekton's own validation refuses {} TaskRuns bookend admitted",
            line.label(),
            refused.len()
        );
        assert!(accepted_before >= 50, "{}: {accepted_before}", line.label());
        // examples/policies has an Always policy matching every TaskRun in team-a: where this
        // Tekton refuses step when/results, bookend must refuse them all (else the check above
        // proves nothing about the version model).
        let always_refused = !line
            .lacking(&[bookend::tekton::cluster::Feature::StepWhen])
            .is_empty();
        if always_refused {
            assert!(
                admitted.is_empty(),
                "{}: bookend admitted {}",
                line.label(),
                admitted.len()
            );
        } else {
            assert!(
                admitted.len() >= 50,
                "{}: bookend admitted {}",
                line.label(),
                admitted.len()
            );
        }
    }
}
