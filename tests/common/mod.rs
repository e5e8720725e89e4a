//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use bookend::policy::load::policy_set;
use bookend::policy::{PolicySet, Settings};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Upstream Tekton examples vendored for the tests (`tests/fixtures/tekton/SOURCE.md`).
pub fn tekton_fixtures() -> PathBuf {
    root().join("tests/fixtures/tekton")
}

/// The policies in `examples/policies`, which must be valid.
pub fn example_policies() -> PolicySet {
    let loaded = policy_set(&[root().join("examples/policies")], Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}
