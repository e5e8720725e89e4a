//! The end-to-end tools (kube-apiserver, etcd, kubectl, tekton-validate, Tekton's CRDs), built
//! from Go modules by `tests/e2e/build-tools.sh` when missing (cached by version).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};
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

/// Builds the tools once per test binary (a no-op when they are up to date), for the Tekton
/// release `BOOKEND_TEKTON_VERSION` names (build-tools.sh reads it), else the default one.
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| Tools::from_vars(&build(None, None)))
}

/// The tools with Tekton's at `version` (e.g. `v0.62.3`; build-tools.sh's
/// `BOOKEND_TEKTON_VERSION`), built once per test binary and version. The version-independent
/// tools are linked into its directory, so `bin` is a complete `E2E_BIN_DIR`.
#[allow(dead_code)] // not every test binary that includes this file uses it
pub fn tekton_tools(version: &str) -> &'static Tools {
    static BUILT: Mutex<Vec<(String, &'static Tools)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, tools)) = built.iter().find(|(v, _)| v == version) {
        return tools;
    }
    let tools: &'static Tools = Box::leak(Box::new(Tools::from_vars(&build(None, Some(version)))));
    built.push((version.to_owned(), tools));
    tools
}

impl Tools {
    fn from_vars(vars: &HashMap<String, String>) -> Self {
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
    }
}

/// Builds `tool` alone (`ONLY=<tool>`, once per test binary and tool) and returns its path, for
/// tests that need one tool and no cluster (`tekton-validate --merge`).
#[allow(dead_code)] // not every test binary that includes this file uses it
pub fn only(tool: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(t, _)| t == tool) {
        return path.clone();
    }
    let vars = build(Some(tool), None);
    let path = PathBuf::from(
        vars.get("E2E_BIN_DIR")
            .expect("build-tools.sh prints E2E_BIN_DIR"),
    )
    .join(tool);
    built.push((tool.to_owned(), path.clone()));
    path
}

/// Runs build-tools.sh (all tools, or `ONLY=<only>`; Tekton's at `tekton`, else as the
/// environment says) and returns the `E2E_*` lines it prints.
fn build(only: Option<&str>, tekton: Option<&str>) -> HashMap<String, String> {
    let root = crate::root();
    let started = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("tests/e2e/build-tools.sh"));
    if let Some(tool) = only {
        cmd.env("ONLY", tool);
    }
    if let Some(version) = tekton {
        cmd.env("BOOKEND_TEKTON_VERSION", version);
    }
    let out = cmd.output().expect("bash runs build-tools.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "build-tools.sh failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vars: HashMap<String, String> = stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("E2E_"))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    println!(
        "e2e tools ready in {:.1}s ({}{} {})",
        started.elapsed().as_secs_f64(),
        only.map(|t| format!("{t} only, ")).unwrap_or_default(),
        vars.get("E2E_K8S_VERSION").map_or("?", String::as_str),
        vars.get("E2E_TEKTON_VERSION")
            .map(|v| format!("tekton {v}"))
            .unwrap_or_default()
    );
    vars
}
