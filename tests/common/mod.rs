//! Helpers shared by the integration tests: the repository root, the vendored Tekton examples
//! and the example policies. Every test binary includes this file (`mod common;`, or
//! `#[path = "../common/mod.rs"] mod common;` from a binary in a directory) and each uses a
//! part of it, hence the `allow`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use bookend::policy::{PolicySet, Settings};
use bookend::source::walk::policy_set;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Upstream Tekton examples vendored for the tests (`tests/fixtures/tekton/SOURCE.md`).
pub fn tekton_fixtures() -> PathBuf {
    root().join("tests/fixtures/tekton")
}

/// The directories of `tekton_fixtures()` holding TaskRuns: upstream's v1 examples and the
/// legacy v1beta1 set.
pub const TEKTON_TASKRUN_DIRS: [&str; 2] = [
    "examples/v1/taskruns",
    "legacy-v0.49.0/examples/v1beta1/taskruns",
];

/// Every YAML file under `TEKTON_TASKRUN_DIRS`, sorted (the corpus of `tests/corpus.rs`, the
/// webhook suite and the e2e suite).
pub fn tekton_taskrun_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml") {
                out.push(path);
            }
        }
    }
    let root = tekton_fixtures();
    let mut files = Vec::new();
    for dir in TEKTON_TASKRUN_DIRS {
        walk(&root.join(dir), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 100,
        "the Tekton corpus under {} has only {} files",
        root.display(),
        files.len()
    );
    files
}

/// The policies in `examples/policies`, which must be valid.
pub fn example_policies() -> PolicySet {
    let loaded = policy_set(&[root().join("examples/policies")], Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// A tool built from Go modules by `tests/e2e/build-tools.sh` (helm, promtool, promql-selectors,
/// actionlint, kubectl, ...): built on first use, cached by version afterwards (a no-op then).
pub fn e2e_tool(name: &str) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let out = std::process::Command::new("bash")
        .arg(root().join("tests/e2e/build-tools.sh"))
        .env("ONLY", name)
        .output()
        .expect("bash runs tests/e2e/build-tools.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tests/e2e/build-tools.sh (ONLY={name}) failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = stdout
        .lines()
        .find_map(|l| l.strip_prefix("E2E_BIN_DIR="))
        .expect("build-tools.sh prints E2E_BIN_DIR");
    let path = PathBuf::from(bin).join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    built.insert(name.to_owned(), path.clone());
    path
}

/// `helm template <release> charts/bookend --namespace <namespace> <args>` with the helm the
/// e2e tools build: its stdout, or its stderr when helm refuses (the chart, image and
/// monitoring suites all render the chart this way).
pub fn helm_template(release: &str, namespace: &str, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(e2e_tool("helm"))
        .args([
            "template",
            release,
            "charts/bookend",
            "--namespace",
            namespace,
        ])
        .args(args)
        .current_dir(root())
        .output()
        .expect("helm runs");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("helm prints UTF-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A plain HTTP/1.1 GET of `http://<ip>:<port><path>` with `Connection: close` and extra
/// `headers` (each `Name: value`), reading at most `timeout` per read: (status, body).
pub fn http_get(
    ip: &str,
    port: u16,
    path: &str,
    headers: &[&str],
    timeout: std::time::Duration,
) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect((ip, port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\n");
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
