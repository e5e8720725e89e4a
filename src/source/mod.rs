//! Where policies come from: files (`--source files`, polled) or the Kubernetes API
//! (`--source kubernetes`, reflector caches). Both hand the server the same thing: a
//! [`Snapshot`] of the policy set and the objects refs resolve against, swapped atomically when
//! the source changes.

pub mod files;
pub mod kubernetes;
pub mod status;
pub mod walk;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::engine::Lookup;
use crate::policy::api::VerificationStatus;
use crate::policy::{PolicyId, PolicySet};

/// One consistent view for a review: the policies and the objects refs resolve against.
pub struct Snapshot {
    pub set: Arc<PolicySet>,
    pub lookup: Arc<dyn Lookup>,
}

/// A source of policies, as the server sees it.
pub trait PolicySource: Send + Sync {
    /// The snapshot in use now.
    fn current(&self) -> Arc<Snapshot>;

    /// Whether the policies are loaded (kubernetes: every cache has synced once).
    fn is_ready(&self) -> bool;

    /// Checks for changes the source cannot be told about (files: their contents); called by
    /// the server's reload timer, off the async workers. Returns whether a new set is in use.
    fn poll(&self) -> bool {
        false
    }

    /// Reads TaskRuns from the API server, for the Pod backstop; `None` when this source cannot
    /// (files).
    fn task_runs(&self) -> Option<&dyn TaskRunReader> {
        None
    }

    /// The policy's `status.verification` as this source last saw it (kubernetes: its watch),
    /// so a replica does not overwrite a count that supersedes its own; `None` when unknown.
    fn stored_verification(&self, _policy: &PolicyId) -> Option<VerificationStatus> {
        None
    }
}

/// One GET of a TaskRun as the API server has it now. The Pod backstop reads the TaskRun that
/// owns a Pod this way rather than from a cache: Tekton creates the Pod moments after the
/// TaskRun, and a cache that lagged would refuse a Pod bookend must admit.
pub trait TaskRunReader: Send + Sync {
    /// `Ok(None)` when there is no such TaskRun.
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, String>>;
}
