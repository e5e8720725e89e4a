//! Inputs the fuzz targets (fuzz/) found, kept as tests. See docs/reliability.md, Findings.

use bookend::engine::{self, Catalog, Outcome, Request};
use bookend::policy::load::policy_set_from_yaml;
use bookend::policy::{PolicySet, Settings};
use serde_json::Value;

fn set() -> PolicySet {
    let loaded = policy_set_from_yaml(
        "p.yaml",
        include_str!("../fuzz/regressions/policies.yaml"),
        Settings::default(),
    );
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// Fuzz target `engine`, 2026-11-30: a TaskRun with five user steps named `build` (Tekton
/// refuses duplicate step names, so it never runs), one with `onError: continue`, under a
/// StepPolicy, two ClusterStepPolicies and `postStepsRun: Always`. The admitted object, decided
/// again (what re-invocation does), is not a no-op: the gates and the `continued` record change.
/// Open: the engine should either refuse duplicate step names or converge.
#[test]
fn admitted_object_with_duplicate_step_names_converges() {
    let admitted: Value = serde_json::from_str(include_str!(
        "../fuzz/regressions/engine-duplicate-step-names.json"
    ))
    .unwrap();
    let again = engine::decide(
        Request {
            object: &admitted,
            namespace: "team-a",
            dry_run: false,
        },
        &set(),
        &Catalog::default(),
    );
    assert!(
        again.outcome != Outcome::Mutated,
        "{}",
        serde_json::to_string(&again.patch).unwrap()
    );
}
