//! End-to-end tests: Tekton's own validation over everything bookend emits, and a real
//! kube-apiserver calling bookend. `cargo test --test e2e`; the first run builds the tools from
//! Go modules (see docs/testing.md).

mod cluster;
mod tekton;
mod tools;

use std::path::PathBuf;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn shared() -> PathBuf {
    std::env::var_os("BOOKEND_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared"))
}
