//! The policy set in use (files mode), and its reloader: the `--policies` and `--tasks` files
//! are polled by content; a change rebuilds the set, and a set with any problem is refused so
//! the last good one stays in use.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use crate::cluster::ClusterSource;
use crate::engine::{Catalog, Lookup};
use crate::metrics::Metrics;
use crate::policy::load::{load_paths, policy_files};
use crate::policy::{PolicySet, Settings};

/// One consistent view for a review: the policies and the objects refs resolve against.
pub struct Snapshot {
    pub set: Arc<PolicySet>,
    pub lookup: Arc<dyn Lookup>,
}

/// Why a policy set could not be loaded: one line per problem, each naming the file, the
/// policy and the field.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.join("\n"))]
pub struct PolicyError {
    pub problems: Vec<String>,
}

/// Where policies and Tasks come from, and with which engine settings.
#[derive(Clone, Debug)]
pub struct Sources {
    pub policies: Vec<PathBuf>,
    pub tasks: Vec<PathBuf>,
    pub settings: Settings,
}

impl Sources {
    fn load(&self) -> Result<Snapshot, PolicyError> {
        let (docs, issues) = load_paths(&self.policies);
        let mut problems: Vec<String> = issues.iter().map(ToString::to_string).collect();
        let (set, issues) = PolicySet::build(docs, self.settings.clone());
        problems.extend(issues.iter().map(ToString::to_string));
        let mut catalog = Catalog::default();
        if let Err(e) = crate::cli::load_catalog(&self.tasks, &mut catalog) {
            problems.push(format!("--tasks: {e}"));
        }
        if problems.is_empty() {
            Ok(Snapshot {
                set: Arc::new(set),
                lookup: Arc::new(catalog),
            })
        } else {
            Err(PolicyError { problems })
        }
    }

    /// A digest of every file's path and contents (and of listing errors), so any edit,
    /// addition, removal or symlink swap changes it.
    fn fingerprint(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for paths in [&self.policies, &self.tasks] {
            h.update(b"\0group");
            match policy_files(paths) {
                Ok(files) => {
                    for file in files {
                        h.update(file.as_os_str().as_encoded_bytes());
                        h.update(b"\0");
                        match std::fs::read(&file) {
                            Ok(bytes) => {
                                h.update((bytes.len() as u64).to_be_bytes());
                                h.update(&bytes);
                            }
                            Err(e) => h.update(format!("unreadable: {e}").as_bytes()),
                        }
                    }
                }
                Err(issue) => h.update(issue.to_string().as_bytes()),
            }
        }
        h.finalize().into()
    }
}

/// The active snapshot and the reloader's memory.
pub struct PolicyStore {
    backend: Backend,
    metrics: Metrics,
}

enum Backend {
    /// `--source files`: polled files, swapped in when they change and are valid.
    Files {
        sources: Sources,
        current: ArcSwap<Snapshot>,
        seen: Mutex<[u8; 32]>,
    },
    /// `--source kubernetes`: reflector caches; the set is rebuilt on policy events.
    Kubernetes(ClusterSource),
}

impl PolicyStore {
    /// Loads the policies at startup; any problem is an error.
    pub fn load(sources: Sources, metrics: Metrics) -> Result<Self, PolicyError> {
        let seen = sources.fingerprint();
        let snapshot = sources.load()?;
        metrics.set_policies_loaded(snapshot.set.len());
        Ok(Self {
            backend: Backend::Files {
                sources,
                current: ArcSwap::from_pointee(snapshot),
                seen: Mutex::new(seen),
            },
            metrics,
        })
    }

    /// Serves policies from the Kubernetes caches.
    pub fn kubernetes(source: ClusterSource, metrics: Metrics) -> Self {
        Self {
            backend: Backend::Kubernetes(source),
            metrics,
        }
    }

    /// The snapshot in use now.
    pub fn current(&self) -> Arc<Snapshot> {
        match &self.backend {
            Backend::Files { current, .. } => current.load_full(),
            Backend::Kubernetes(source) => Arc::new(Snapshot {
                set: source.policies.load_full(),
                lookup: source.lookup.clone(),
            }),
        }
    }

    /// Whether the policies are loaded (kubernetes mode: every cache has synced).
    pub fn is_ready(&self) -> bool {
        match &self.backend {
            Backend::Files { .. } => true,
            Backend::Kubernetes(source) => source
                .status
                .ready
                .load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Reloads when the files changed (files mode). Returns whether a new set was swapped in.
    pub fn poll(&self) -> bool {
        let Backend::Files {
            sources,
            current,
            seen,
        } = &self.backend
        else {
            return false;
        };
        let now = sources.fingerprint();
        {
            let Ok(mut seen) = seen.lock() else {
                return false;
            };
            if *seen == now {
                return false;
            }
            *seen = now;
        }
        match sources.load() {
            Ok(snapshot) => {
                let n = snapshot.set.len();
                current.store(Arc::new(snapshot));
                self.metrics.policy_reload(true);
                self.metrics.set_policies_loaded(n);
                tracing::info!(policies = n, "policies reloaded");
                true
            }
            Err(error) => {
                self.metrics.policy_reload(false);
                for problem in &error.problems {
                    tracing::error!(%problem, "policy reload refused");
                }
                tracing::error!(
                    problems = error.problems.len(),
                    "policy files have problems; the last good set stays in use"
                );
                false
            }
        }
    }
}
