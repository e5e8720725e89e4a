//! End-to-end tests: Tekton's own validation over everything bookend emits, Tekton's own
//! stepTemplate merge against bookend's port (`merge`, no cluster), and a real kube-apiserver
//! calling bookend. `cargo test --test e2e`; the first run builds the tools from
//! Go modules (see docs/testing.md).

mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod kube;
mod merge;
mod tekton;
mod tools;

use std::time::Duration;

pub use common::{root, tekton_fixtures};

/// Pause between the attempts of `kube::poll`.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
