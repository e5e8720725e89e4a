//! The set-up of `cargo xtask test`: what the suite needs from the machine, installed when that
//! is possible and named with the exact command when it is not; then the Go tools.
//!
//! | need | for | how it gets there |
//! |---|---|---|
//! | `openssl`, `curl` | the TLS tests (tests/webhook/security.rs, tests/chart.rs), the e2e and runtime suites | apt-get |
//! | `runc`, a static `busybox` | the runtime suite (tests/runtime/prereqs.rs checks the same) | apt-get: `runc`, `busybox-static` |
//! | root, the overlay filesystem | the runtime suite (overlay root filesystems, runc) | by hand; `modprobe overlay` as root |
//! | Go >= 1.26.7 | tests/e2e/build-tools.sh (kube-apiserver, etcd, kubectl, Tekton, helm, promtool, actionlint) | by hand (the commands are printed) |
//!
//! apt-get runs as root, or through `sudo -n` when sudo needs no password; otherwise the command
//! is printed. `BOOKEND_SKIP_RUNTIME=1`, the runtime suite's own opt-out, drops what only it needs.

use std::process::Command;

use crate::host::{is_static_elf, on_path};
use crate::{Failure, bash, phase, run};

/// Which suites the set-up is for.
#[derive(Clone, Copy, PartialEq)]
pub enum Scope {
    /// `cargo test`: everything, the runtime suite included unless it is skipped.
    Everything,
    /// The e2e suite: the host tools and the Go tools, nothing the runtime suite alone needs.
    EndToEnd,
}

/// The runtime suite's opt-out (tests/runtime/prereqs.rs).
const SKIP_RUNTIME: &str = "BOOKEND_SKIP_RUNTIME";

/// The oldest Go that builds every tool (the highest `go` line of tests/**/go.mod).
const GO_MIN: (u32, u32, u32) = (1, 26, 7);
/// The Go the printed install commands fetch (the one docs/testing.md measured with).
const GO_INSTALL: &str = "1.26.8";

/// A program the tests run, and the Debian/Ubuntu package that brings it.
struct Need {
    what: &'static str,
    package: &'static str,
    present: fn() -> bool,
    runtime_only: bool,
}

const NEEDS: &[Need] = &[
    Need {
        what: "openssl",
        package: "openssl",
        present: || on_path("openssl").is_some(),
        runtime_only: false,
    },
    Need {
        what: "curl",
        package: "curl",
        present: || on_path("curl").is_some(),
        runtime_only: false,
    },
    Need {
        what: "runc",
        package: "runc",
        present: || {
            on_path("runc").is_some_and(|p| {
                Command::new(p)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            })
        },
        runtime_only: true,
    },
    Need {
        what: "a statically linked busybox",
        package: "busybox-static",
        present: || on_path("busybox").is_some_and(|p| is_static_elf(&p)),
        runtime_only: true,
    },
];

pub fn prepare(scope: Scope) -> Result<(), Failure> {
    let runtime = scope == Scope::Everything && !skip_runtime();
    if scope == Scope::Everything && !runtime {
        eprintln!("{SKIP_RUNTIME}=1: not setting up for the runtime suite (it will be skipped)");
    }
    phase("set-up: what the tests need from this machine", || {
        let mut problems = host(runtime);
        problems.extend(go());
        if problems.is_empty() {
            return Ok(());
        }
        Err(Failure::new(format!(
            "this machine cannot run the whole suite yet:\n  - {}",
            problems.join("\n  - ")
        )))
    })?;
    phase(
        "set-up: the Go tools (tests/e2e/build-tools.sh, cached by version)",
        || run(&mut bash("tests/e2e/build-tools.sh")),
    )
}

/// The Tekton tools of each older release (tests/e2e/build-tools.sh with
/// `BOOKEND_TEKTON_VERSION`, cached by version), unless the runtime suite is skipped.
pub fn tekton_tools(versions: &[String]) -> Result<(), Failure> {
    if skip_runtime() {
        return Ok(());
    }
    for version in versions {
        phase(
            &format!(
                "set-up: the Tekton {version} tools (tests/e2e/build-tools.sh, cached by version)"
            ),
            || run(bash("tests/e2e/build-tools.sh").env("BOOKEND_TEKTON_VERSION", version)),
        )?;
    }
    Ok(())
}

fn skip_runtime() -> bool {
    std::env::var(SKIP_RUNTIME).is_ok_and(|v| v == "1")
}

/// Installs the missing packages when it can; returns what it could not fix, each with the
/// command that does.
fn host(runtime: bool) -> Vec<String> {
    let needs: Vec<&Need> = NEEDS
        .iter()
        .filter(|n| runtime || !n.runtime_only)
        .collect();
    let mut problems = Vec::new();
    let missing: Vec<&Need> = needs.iter().copied().filter(|n| !(n.present)()).collect();
    if !missing.is_empty() {
        let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
        let whats: Vec<&str> = missing.iter().map(|n| n.what).collect();
        eprintln!("missing: {}", whats.join(", "));
        match install(&packages) {
            Ok(()) => {
                for need in &missing {
                    if !(need.present)() {
                        problems.push(format!(
                            "{} is still missing after installing {}",
                            need.what, need.package
                        ));
                    }
                }
            }
            Err(problem) => problems.push(problem),
        }
    }
    if runtime {
        problems.extend(runtime_host());
    }
    for need in needs {
        if (need.present)() {
            eprintln!("{}: found", need.what);
        }
    }
    problems
}

/// `apt-get install` as root or through passwordless sudo; otherwise the command to run.
fn install(packages: &[&str]) -> Result<(), String> {
    let list = packages.join(" ");
    let by_hand = format!(
        "install {list}: run `sudo apt-get update && sudo apt-get install -y --no-install-recommends {list}`"
    );
    if on_path("apt-get").is_none() {
        return Err(format!(
            "install {list} (the Debian/Ubuntu package names) with this system's package manager: no apt-get here"
        ));
    }
    let prefix: &[&str] = if is_root() {
        &[]
    } else if Command::new("sudo")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        &["sudo", "-n"]
    } else {
        return Err(format!(
            "{by_hand} (not root, and no sudo without a password)"
        ));
    };
    let apt = |args: &[&str]| {
        let mut words: Vec<&str> = prefix.to_vec();
        words.extend(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        words.extend(args);
        let mut cmd = Command::new(words[0]);
        cmd.args(&words[1..]);
        run(&mut cmd)
    };
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend(packages);
    install.push("ca-certificates");
    apt(&["update", "-qq"])
        .and_then(|()| apt(&install))
        .map_err(|f| format!("{} ({by_hand})", f.message))
}

/// What only the runtime suite needs and no package brings: Linux, root, overlayfs.
fn runtime_host() -> Vec<String> {
    let skip = format!("or skip the runtime suite with `{SKIP_RUNTIME}=1 cargo xtask test`");
    let mut problems = Vec::new();
    if !cfg!(target_os = "linux") {
        problems.push(format!(
            "the runtime suite needs Linux (runc, overlayfs): {skip}"
        ));
        return problems;
    }
    if !is_root() {
        problems.push(format!(
            "the runtime suite runs as root (it mounts overlay root filesystems and runs runc): \
             run `sudo -E env \"PATH=$PATH\" cargo xtask test`, {skip}"
        ));
    }
    if !has_overlayfs() && is_root() {
        let _ = run(Command::new("modprobe").arg("overlay"));
    }
    if !has_overlayfs() {
        problems.push(format!(
            "the runtime suite needs the overlay filesystem: run `sudo modprobe overlay`, {skip}"
        ));
    }
    problems
}

/// Go, new enough for every tool; otherwise the commands that install it.
fn go() -> Option<String> {
    let found = Command::new("go")
        .arg("version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let version = found.as_deref().and_then(go_version);
    if version.is_some_and(|v| v >= GO_MIN) {
        eprintln!("{}", found.unwrap_or_default().trim());
        return None;
    }
    let (major, minor, patch) = GO_MIN;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let sudo = if is_root() { "" } else { "sudo " };
    Some(format!(
        "the test tools are built from Go modules and need Go >= {major}.{minor}.{patch} (found: {}); \
         install it and put it on the PATH:\
         \n      curl -fsSL https://go.dev/dl/go{GO_INSTALL}.linux-{arch}.tar.gz | {sudo}tar -C /usr/local -xz\
         \n      export PATH=\"$PATH:/usr/local/go/bin\"",
        found.as_deref().map_or("none", str::trim)
    ))
}

/// `go version go1.26.8 linux/amd64` → (1, 26, 8).
fn go_version(text: &str) -> Option<(u32, u32, u32)> {
    let word = text.split_whitespace().find(|w| w.starts_with("go1"))?;
    let mut parts = word.strip_prefix("go")?.split('.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().ok()
    });
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

fn is_root() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .is_some_and(|uid| uid == "0")
}

fn has_overlayfs() -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_versions_compare_by_number() {
        assert_eq!(
            go_version("go version go1.26.8 linux/amd64"),
            Some((1, 26, 8))
        );
        assert_eq!(
            go_version("go version go1.27 linux/arm64"),
            Some((1, 27, 0))
        );
        assert_eq!(
            go_version("go version go1.27rc1 linux/amd64"),
            Some((1, 27, 0))
        );
        assert!(go_version("go version go1.26.10 x").unwrap() > GO_MIN);
        assert!(go_version("go version go1.26.4 x").unwrap() < GO_MIN);
        assert_eq!(go_version("bash: go: not found"), None);
    }

    /// GO_MIN is the highest `go` line of the tools' modules.
    #[test]
    fn go_min_is_what_the_modules_ask_for() {
        let mut highest = (0, 0, 0);
        for dir in [
            "tests/e2e/k8sbins",
            "tests/e2e/tektonvalidate",
            "tests/e2e/helm",
            "tests/e2e/promtool",
            "tests/e2e/actionlint",
            "tests/runtime/standins",
            "tests/runtime/chains",
        ] {
            let text = std::fs::read_to_string(crate::root().join(dir).join("go.mod")).unwrap();
            let line = text.lines().find_map(|l| l.strip_prefix("go ")).unwrap();
            highest = highest.max(go_version(&format!("go{line}")).unwrap());
        }
        assert_eq!(highest, GO_MIN);
    }

    #[test]
    fn a_dynamic_executable_is_not_static() {
        // The test binary itself links against libc.
        let me = std::env::current_exe().unwrap();
        assert!(!is_static_elf(&me) || cfg!(target_env = "musl"));
        assert!(!is_static_elf(std::path::Path::new("Cargo.toml")));
    }
}
