//! `--source files`: the `--policies` and `--tasks` files, polled by content; a change rebuilds
//! the snapshot, and a set with any problem is refused so the last good one stays in use.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::walk::{policy_files, policy_set};
use super::{PolicySource, Snapshot};
use crate::engine::Catalog;
use crate::metrics::Metrics;
use crate::policy::Settings;
use crate::policy::load::yaml_documents;

/// Why a policy set could not be loaded: one line per problem, each naming the file, the
/// policy and the field.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.join("\n"))]
pub struct LoadError {
    pub problems: Vec<String>,
}

/// Reads Task, StepAction and Namespace objects from files or directories (Tasks and
/// StepActions without a namespace go into `default`).
pub fn load_catalog(paths: &[PathBuf]) -> Result<Catalog, String> {
    let mut catalog = Catalog::default();
    let files = policy_files(paths).map_err(|i| i.to_string())?;
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: cannot read: {e}", file.display()))?;
        let docs = yaml_documents(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        catalog.add_objects(&docs, "default");
    }
    Ok(catalog)
}

/// The files and the engine settings to load them with.
#[derive(Clone, Debug)]
pub struct Paths {
    pub policies: Vec<PathBuf>,
    pub tasks: Vec<PathBuf>,
    pub settings: Settings,
}

impl Paths {
    fn load(&self) -> Result<Snapshot, LoadError> {
        let loaded = policy_set(&self.policies, self.settings.clone());
        let mut problems: Vec<String> = loaded.issues.iter().map(ToString::to_string).collect();
        for note in &loaded.skipped {
            tracing::debug!(%note, "not a policy; skipped");
        }
        let catalog = load_catalog(&self.tasks).unwrap_or_else(|e| {
            problems.push(format!("--tasks: {e}"));
            Catalog::default()
        });
        if problems.is_empty() {
            Ok(Snapshot {
                set: Arc::new(loaded.set),
                lookup: Arc::new(catalog),
            })
        } else {
            Err(LoadError { problems })
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

/// The snapshot in use and the reloader's memory of what it was built from.
pub struct FileSource {
    paths: Paths,
    current: ArcSwap<Snapshot>,
    seen: Mutex<[u8; 32]>,
    metrics: Metrics,
}

impl FileSource {
    /// Loads the policies at startup; any problem is an error.
    pub fn load(paths: Paths, metrics: Metrics) -> Result<Self, LoadError> {
        let seen = paths.fingerprint();
        let snapshot = paths.load()?;
        metrics.set_policies_loaded(snapshot.set.len());
        Ok(Self {
            paths,
            current: ArcSwap::from_pointee(snapshot),
            seen: Mutex::new(seen),
            metrics,
        })
    }
}

impl PolicySource for FileSource {
    fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn poll(&self) -> bool {
        let now = self.paths.fingerprint();
        {
            let Ok(mut seen) = self.seen.lock() else {
                return false;
            };
            if *seen == now {
                return false;
            }
            *seen = now;
        }
        match self.paths.load() {
            Ok(snapshot) => {
                let n = snapshot.set.len();
                self.current.store(Arc::new(snapshot));
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
