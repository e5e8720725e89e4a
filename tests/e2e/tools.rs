//! The end-to-end tools (kube-apiserver, etcd, kubectl, tekton-validate, Tekton's CRDs), built
//! from Go modules by `tests/e2e/build-tools.sh` when missing (cached by version).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// Paths of the built tools.
#[derive(Debug)]
pub struct Tools {
    pub bin: PathBuf,
    #[allow(dead_code)] // read by the cluster tests
    pub crds: PathBuf,
}

impl Tools {
    pub fn path(&self, tool: &str) -> PathBuf {
        self.bin.join(tool)
    }
}

/// Builds the tools once per test binary (a no-op when they are up to date).
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let root = crate::root();
        let started = Instant::now();
        let out = Command::new("bash")
            .arg(root.join("tests/e2e/build-tools.sh"))
            .output()
            .expect("bash runs build-tools.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "build-tools.sh failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vars: HashMap<&str, &str> = stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| k.starts_with("E2E_"))
            .collect();
        println!(
            "e2e tools ready in {:.1}s ({} {})",
            started.elapsed().as_secs_f64(),
            vars.get("E2E_K8S_VERSION").unwrap_or(&"?"),
            vars.get("E2E_TEKTON_VERSION")
                .map(|v| format!("tekton {v}"))
                .unwrap_or_default()
        );
        Tools {
            bin: PathBuf::from(
                vars.get("E2E_BIN_DIR")
                    .expect("build-tools.sh prints E2E_BIN_DIR"),
            ),
            crds: PathBuf::from(
                vars.get("E2E_CRDS_DIR")
                    .expect("build-tools.sh prints E2E_CRDS_DIR"),
            ),
        }
    })
}
