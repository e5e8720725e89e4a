//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use bookend::policy::load::load_paths;
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
    let (docs, issues) = load_paths(&[root().join("examples/policies")]);
    assert!(issues.is_empty(), "{issues:?}");
    let (set, issues) = PolicySet::build(docs, Settings::default());
    assert!(issues.is_empty(), "{issues:?}");
    set
}
