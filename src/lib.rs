//! bookend: org-wide pre-steps and post-steps for Tekton TaskRuns, enforced at admission.
//!
//! ```text
//!   AdmissionReview (HTTPS)                 TaskRun YAML (bookend render)
//!            │                                          │
//!   server ── admission::review ──┐          cli ───────┤
//!      │                          ▼                     ▼
//!   source (files | kubernetes)   engine::decide_patch / engine::decide   ← pure: no I/O
//!      └─ Snapshot: PolicySet + Lookup       ├─ policy        which policies match
//!                                            ├─ engine::inject strip, inject, Always gates
//!                                            ├─ engine::check  Tekton rules injection can break
//!                                            └─ patch          minimal RFC 6902 patch
//! ```
//!
//! Layers, each importing only those below it: [`cli`] (the command line, exit codes) →
//! [`server`] (HTTPS webhook and admin port) → [`events`] (after admission: Events on TaskRuns,
//! Audit results) and [`verification`] (after the run: did the org steps run?) → [`reports`] (PolicyReports) → [`source`] (where policies come from) →
//! [`admission`] (the AdmissionReview envelope) → [`engine`] (the decision) → [`policy`] (the
//! `bookend.dev/v1alpha1` API, loading, validation, matching) → [`patch`] and [`tekton`]
//! (RFC 6902 patches, the TaskRun model). [`metrics`], [`telemetry`] and [`certs`] serve the
//! layers above them.

#![forbid(unsafe_code)]

pub mod admission;
pub mod certs;
pub mod cli;
pub mod engine;
pub mod events;
pub mod metrics;
pub mod patch;
pub mod policy;
pub mod reports;
pub mod server;
pub mod source;
pub mod tekton;
pub mod telemetry;
pub mod verification;

/// Tekton's pod builder as tests need it (shared with the e2e suite).
#[cfg(test)]
#[path = "../tests/common/tekton_pod.rs"]
mod tekton_pod;
