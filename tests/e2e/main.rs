//! End-to-end tests: Tekton's own validation over everything bookend emits, Tekton's own
//! stepTemplate merge against bookend's port (`merge`, no cluster), and a real kube-apiserver
//! calling bookend, which also gets every attack class of tests/security (`attacks`). `cargo test
//! --test e2e`; the first run builds the tools from Go modules (see docs/testing.md).

mod attacks;
// The attack classes, their cases and the invariant, shared with tests/security.
#[path = "../security/cases.rs"]
mod cases;
#[path = "../security/classes/mod.rs"]
mod classes;
mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod kube;
mod merge;
#[path = "../security/oracle.rs"]
mod oracle;
mod tekton;
#[path = "../common/tekton_line.rs"]
mod tekton_line;
#[path = "../common/tekton_pod.rs"]
mod tekton_pod;
mod tools;

use std::time::Duration;

pub use common::{root, tekton_fixtures};

/// Pause between the attempts of `kube::poll`.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);
