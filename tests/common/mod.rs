//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use bookend::policy::{PolicySet, Settings};
use bookend::source::walk::policy_set;

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

/// A tool built from Go modules by `tests/e2e/build-tools.sh` (helm, promtool, promql-selectors,
/// actionlint, kubectl, ...): built on first use, cached by version afterwards (a no-op then).
pub fn e2e_tool(name: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let out = std::process::Command::new("bash")
        .arg(root().join("tests/e2e/build-tools.sh"))
        .env("ONLY", name)
        .output()
        .expect("bash runs tests/e2e/build-tools.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tests/e2e/build-tools.sh (ONLY={name}) failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = stdout
        .lines()
        .find_map(|l| l.strip_prefix("E2E_BIN_DIR="))
        .expect("build-tools.sh prints E2E_BIN_DIR");
    let path = PathBuf::from(bin).join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    built.insert(name.to_owned(), path.clone());
    path
}
