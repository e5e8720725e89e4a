//! bookend's promise, tried by breaking it: nothing a TaskRun author (or a team with only
//! namespaced policies) writes decides which org steps run, or how (docs/security.md).
//!
//! - `oracle`: invariant I1 stated over any input and checked on the admitted object, written
//!   apart from the engine (it reads the policies and Tekton's rules, not bookend's composition);
//! - `invariant`: a property-based generator of hostile TaskRuns (every attack class below, mixed)
//!   checked against the oracle, thousands of cases a run;
//! - one file per attack class of the "Sealed" issue, each case with its expected answer
//!   (`cases`), run here offline and by the e2e suite through a real kube-apiserver.

mod cases;
mod classes;
#[path = "../common/mod.rs"]
mod common;
mod cost;
mod invariant;
mod marks;
mod oracle;
mod pod_backstop;
mod pods;
mod provenance_record;
mod tenants;

use bookend::engine::{self, Catalog, Decision, Request};
use bookend::policy::PolicySet;
use bookend::policy::Settings;
use bookend::policy::load::policy_set_from_yaml;
use serde_json::Value;

pub use common::root;

/// The policies every security test runs with (also installed by the e2e scenario).
pub fn policies() -> PolicySet {
    let loaded = policy_set_from_yaml("security.yaml", cases::POLICIES, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// The Tasks the `taskRef` cases reference.
pub fn catalog() -> Catalog {
    let mut catalog = Catalog::default();
    let docs = bookend::policy::load::yaml_documents(cases::TASKS).unwrap();
    catalog.add_objects(&docs, "team-a");
    catalog.add_objects(&docs, "sealed-net");
    catalog
}

/// The engine's decision for a TaskRun CREATE in `namespace`.
pub fn decide(object: &Value, namespace: &str, set: &PolicySet, catalog: &Catalog) -> Decision {
    engine::decide(
        Request {
            object,
            namespace,
            dry_run: false,
        },
        set,
        catalog,
    )
}

#[test]
fn every_class_case_gets_its_expected_answer_and_keeps_the_invariant() {
    let (set, catalog) = (policies(), catalog());
    let mut checked = 0;
    for case in cases::all() {
        let decision = decide(&case.taskrun, case.namespace, &set, &catalog);
        case.expect.check(case.name, &decision);
        oracle::check(&case.taskrun, case.namespace, &set, &catalog, &decision)
            .unwrap_or_else(|e| panic!("{}: invariant broken: {e}", case.name));
        checked += 1;
    }
    assert!(checked >= 40, "{checked} cases");
}

/// bookend's own output with the org step's hardening dropped: `false` for a pointer is not its
/// absence (the comparison once took it for one).
#[test]
fn an_org_step_without_its_hardening_is_not_the_org_step() {
    let (set, catalog) = (policies(), catalog());
    let admitted = decide(
        &cases::inline(serde_json::json!([cases::build_step()])),
        "team-a",
        &set,
        &catalog,
    )
    .object;
    let mut tampered = admitted.clone();
    assert_eq!(
        tampered["spec"]["taskSpec"]["steps"][0]["name"],
        "bookend-creds"
    );
    tampered["spec"]["taskSpec"]["steps"][0]["securityContext"] =
        serde_json::json!({"runAsNonRoot": true});
    let d = decide(&tampered, "team-a", &set, &catalog);
    assert_eq!(d.outcome, bookend::engine::Outcome::Denied, "{:?}", d.patch);
    assert!(
        d.message
            .unwrap()
            .contains("step \"bookend-creds\" differs")
    );
    assert_eq!(
        decide(&admitted, "team-a", &set, &catalog).outcome,
        bookend::engine::Outcome::Admitted
    );
}
