//! Where policies come from: files (`--source files`, polled) or the Kubernetes API
//! (`--source kubernetes`, reflector caches). Both hand the server the same thing: a
//! [`Snapshot`] of the policy set and the objects refs resolve against, swapped atomically when
//! the source changes.

pub mod files;
pub mod kubernetes;
pub mod status;

use std::sync::Arc;

use crate::engine::Lookup;
use crate::policy::PolicySet;

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
}
