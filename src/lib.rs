//! bookend: org-wide pre-steps and post-steps for Tekton TaskRuns, enforced at admission.
//!
//! ```text
//!   AdmissionReview (HTTPS)          TaskRun YAML (bookend render)
//!            │                                  │
//!      server ─▶ admission ──┐        cli ──────┤
//!                            ▼                  ▼
//!                 engine::decide(request, snapshot)  ← pure: no I/O
//!                   ├─ policy::select   which policies match
//!                   ├─ engine::inject   strip, inject, Always gates, re-index
//!                   ├─ engine::check    Tekton rules injection can break
//!                   └─ patch::diff      minimal RFC 6902 patch
//! ```
//!
//! Layout: [`tekton`] is the TaskRun model, [`policy`] the `bookend.dev/v1alpha1` API, loading,
//! validation and matching, [`engine`] the decision, [`patch`] the JSON patch (written out by
//! [`compact_json`]), [`admission`] the AdmissionReview envelope, [`cli`] the command line,
//! [`server`] the HTTPS webhook and admin port (with [`metrics`] and [`telemetry`]), [`cluster`]
//! the Kubernetes-mode caches, [`certs`] the development certificates.

#![forbid(unsafe_code)]

pub mod admission;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod compact_json;
pub mod engine;
pub mod metrics;
pub mod patch;
pub mod policy;
pub mod server;
pub mod tekton;
pub mod telemetry;
