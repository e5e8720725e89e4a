//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use bookend::policy::load::load_paths;
use bookend::policy::{PolicySet, Settings};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shared folder beside the repository (corpus, samples); `BOOKEND_SHARED` overrides.
pub fn shared() -> PathBuf {
    std::env::var_os("BOOKEND_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared"))
}

/// The policies in `examples/policies`, which must be valid.
pub fn example_policies() -> PolicySet {
    let (docs, issues) = load_paths(&[root().join("examples/policies")]);
    assert!(issues.is_empty(), "{issues:?}");
    let (set, issues) = PolicySet::build(docs, Settings::default());
    assert!(issues.is_empty(), "{issues:?}");
    set
}
