//! What the runtime suite needs from the machine, checked before anything is built or started,
//! so that a missing piece fails at once with what to install (or, with the explicit opt-out,
//! skips loudly).

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use crate::host::{is_static_elf, on_path};

/// The opt-out: set to 1 to skip the suite (a SKIP line is printed).
pub const SKIP_VAR: &str = "BOOKEND_SKIP_RUNTIME";

/// Port of the health-probe server that knative's sharedmain starts inside Tekton's controller;
/// it is not configurable, so two controllers cannot run on one machine at once.
pub const CONTROLLER_PROBES_PORT: u16 = 8080;

/// Host tools the suite runs.
pub struct Host {
    pub runc: PathBuf,
    pub busybox: PathBuf,
}

/// `None` when the suite is skipped on purpose; panics (the test fails) when a prerequisite is
/// missing, saying what to install.
pub fn check() -> Option<Host> {
    if std::env::var(SKIP_VAR).is_ok_and(|v| v == "1") {
        println!(
            "\n\
             ************************************************************************\n\
             SKIP runtime suite: {SKIP_VAR}=1. Injected TaskRuns were NOT run under\n\
             Tekton's controller and entrypoint; nothing here proves they work.\n\
             ************************************************************************\n"
        );
        return None;
    }
    let mut missing = Vec::new();
    if !cfg!(target_os = "linux") {
        missing.push("Linux (runc, overlayfs)".to_owned());
    }
    if effective_uid() != Some(0) {
        missing.push(
            "root: the kubelet stand-in mounts overlay root filesystems and runs runc".to_owned(),
        );
    }
    let runc = on_path("runc");
    match &runc {
        Some(path)
            if Command::new(path)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()) => {}
        _ => missing.push("runc on the PATH (Debian/Ubuntu: apt-get install runc)".to_owned()),
    }
    let busybox = on_path("busybox");
    match &busybox {
        Some(path) if is_static_elf(path) => {}
        Some(path) => missing.push(format!(
            "a statically linked busybox ({} is dynamically linked; Debian/Ubuntu: apt-get install busybox-static)",
            path.display()
        )),
        None => missing.push("busybox on the PATH, statically linked (Debian/Ubuntu: apt-get install busybox-static)".to_owned()),
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"))
    {
        missing.push("the overlay filesystem (modprobe overlay)".to_owned());
    }
    assert!(
        missing.is_empty(),
        "the runtime suite (tests/runtime) cannot run on this machine; it needs:\n  - {}\n\
         Install them (as .ci/run does: apt-get install -y runc busybox-static) and run as root, \
         or skip the suite explicitly with {SKIP_VAR}=1 (see docs/testing.md).",
        missing.join("\n  - ")
    );
    Some(Host {
        runc: runc.expect("checked"),
        busybox: busybox.expect("checked"),
    })
}

/// Holds the machine-wide lock of the runtime suite: Tekton's controller needs port 8080, so
/// runs from several clones on one machine take turns.
pub fn machine_lock() -> File {
    let path = std::env::temp_dir().join("bookend-runtime-suite.lock");
    let file = File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if file.try_lock().is_err() {
        println!(
            "waiting for another run of the runtime suite on this machine ({} is locked)",
            path.display()
        );
        file.lock().expect("lock");
    }
    if let Err(e) = TcpListener::bind(("0.0.0.0", CONTROLLER_PROBES_PORT)) {
        panic!(
            "port {CONTROLLER_PROBES_PORT} is in use ({e}): Tekton's controller serves its health \
             probes there (hard-coded in knative's sharedmain), so the runtime suite needs it free"
        );
    }
    file
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}
