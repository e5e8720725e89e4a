//! Long-running processes of the runtime suite (bookend, Tekton's controller and resolvers, the
//! stand-ins), each with its output in a log file.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::kube::{poll, tail, terminate};

/// A long-running process with its output in a log file; SIGTERM on drop, SIGKILL after 15 s.
pub struct Daemon {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Daemon {
    pub fn start(name: &'static str, cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("create log file");
        Self::spawn(name, cmd, log, file)
    }

    /// The same, its output appended to `log` (a process started again after a stop).
    pub fn start_appending(name: &'static str, cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .expect("open log file");
        Self::spawn(name, cmd, log, file)
    }

    fn spawn(name: &'static str, mut cmd: Command, log: PathBuf, file: std::fs::File) -> Self {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        Self { name, log, child }
    }

    /// Panics with the log's tail if the process has exited.
    #[track_caller]
    pub fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, tail(&self.log, 30));
        }
    }

    /// Sends `signal` (`KILL`, `TERM`) and waits until the process has exited.
    pub fn stop_with(&mut self, signal: &str) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -{signal} {}", self.name);
        self.child.wait().expect("wait for the process")
    }

    /// Waits until the log contains `line` (the process says it is ready).
    pub fn wait_for_log(&mut self, line: &str, timeout: Duration) {
        poll(&format!("{} to log {line:?}", self.name), timeout, || {
            self.check_alive();
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if text.contains(line) {
                Ok(())
            } else {
                Err(tail(&self.log, 3))
            }
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child, self.name, Duration::from_secs(15));
    }
}
