//! `bookend version`: the release, the commit it was built from, and the versions of Tekton and
//! Kubernetes its test suites run (tests/cli.rs keeps these equal to the test tools' go.mod).

/// Tekton Pipelines release whose controller, entrypoint and validation the suites run.
pub const TESTED_TEKTON: &str = "v1.15.0";
/// Kubernetes release whose kube-apiserver the e2e and runtime suites run.
pub const TESTED_KUBERNETES: &str = "v1.36.3";

pub(super) fn run() -> u8 {
    println!("bookend {}", env!("CARGO_PKG_VERSION"));
    println!(
        "commit: {} ({})",
        env!("BOOKEND_COMMIT"),
        env!("BOOKEND_COMMIT_DATE")
    );
    println!(
        "tested with: Tekton Pipelines {TESTED_TEKTON} (its controller, entrypoint and validation), Kubernetes {TESTED_KUBERNETES} (kube-apiserver)"
    );
    super::exit::OK
}
