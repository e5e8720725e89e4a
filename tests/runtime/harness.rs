//! Processes of the runtime suite: commands, kubectl, long-running daemons stopped on drop, the
//! control plane of tests/e2e/start-cluster.sh, and polling.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::tools::tools;

/// The result of a command.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.status.success()
    }

    #[track_caller]
    pub fn expect_ok(self, what: &str) -> Self {
        assert!(
            self.ok(),
            "{what} failed ({}):\nstdout: {}\nstderr: {}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    pub fn try_json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.stdout)
            .map_err(|e| format!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        self.try_json().unwrap_or_else(|e| panic!("{e}"))
    }
}

pub fn run(mut cmd: Command, stdin: Option<&[u8]>) -> Out {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input).expect("write stdin");
    }
    let out = child.wait_with_output().expect("wait for command");
    Out {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Calls `attempt` until it returns `Ok`, at most `timeout`; panics with the last error. The
/// timeout only keeps a broken run from hanging: nothing asserts how long anything took.
#[track_caller]
pub fn poll<T>(what: &str, timeout: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// kubectl against the test cluster.
#[derive(Clone)]
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Out {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        run(cmd, stdin)
    }

    #[track_caller]
    pub fn ok(&self, args: &[&str], what: &str) -> Out {
        self.run(args, None).expect_ok(what)
    }

    /// `kubectl <verb...> -o json -f -` with `object` on stdin.
    pub fn with_object(&self, verb: &[&str], object: &Value) -> Out {
        let mut args = verb.to_vec();
        args.extend(["-o", "json", "-f", "-"]);
        self.run(&args, Some(object.to_string().as_bytes()))
    }

    /// `kubectl create` of `object`, which must succeed; the stored object.
    #[track_caller]
    pub fn create(&self, object: &Value) -> Value {
        let kind = object["kind"].as_str().unwrap_or("object").to_owned();
        self.with_object(&["create"], object)
            .expect_ok(&format!("kubectl create {kind}"))
            .json()
    }

    /// `kubectl apply` of `object`, which must succeed.
    #[track_caller]
    pub fn apply(&self, object: &Value) {
        let kind = object["kind"].as_str().unwrap_or("object").to_owned();
        self.with_object(&["apply"], object)
            .expect_ok(&format!("kubectl apply {kind}"));
    }

    /// The same cluster as a ServiceAccount: a kubeconfig with a token from the TokenRequest API
    /// (`kubectl create token`), written to `path`.
    #[track_caller]
    pub fn as_service_account(&self, namespace: &str, name: &str, path: &Path) -> Kubectl {
        let token = poll(
            &format!("a token for ServiceAccount {namespace}/{name}"),
            Duration::from_secs(30),
            || {
                let out = self.run(
                    &["create", "token", name, "-n", namespace, "--duration=2h"],
                    None,
                );
                if out.ok() {
                    Ok(out.stdout.trim().to_owned())
                } else {
                    Err(out.stderr)
                }
            },
        );
        let mut config = self
            .ok(
                &["config", "view", "--raw", "-o", "json"],
                "kubectl config view",
            )
            .json();
        let user = format!("{namespace}-{name}");
        config["users"] = serde_json::json!([{"name": user, "user": {"token": token}}]);
        config["contexts"][0]["context"]["user"] = serde_json::json!(user);
        std::fs::write(path, config.to_string()).expect("write the ServiceAccount's kubeconfig");
        Kubectl {
            bin: self.bin.clone(),
            kubeconfig: path.to_owned(),
        }
    }

    /// The API server's `host:port` (from the kubeconfig).
    pub fn server_address(&self) -> String {
        let config = self
            .ok(
                &["config", "view", "--raw", "-o", "json"],
                "kubectl config view",
            )
            .json();
        let server = config["clusters"][0]["cluster"]["server"]
            .as_str()
            .expect("a server in the kubeconfig");
        server
            .strip_prefix("https://")
            .unwrap_or(server)
            .trim_end_matches('/')
            .to_owned()
    }

    /// `kubectl get <args...> -o json`.
    pub fn get(&self, args: &[&str]) -> Result<Value, String> {
        let args = [&["get"], args, &["-o", "json"]].concat();
        let out = self.run(&args, None);
        if !out.ok() {
            return Err(out.stderr);
        }
        out.try_json()
    }
}

/// A long-running process (bookend, Tekton's controller, the stand-ins) with its output in a log
/// file; SIGTERM on drop, SIGKILL after 15 s.
pub struct Daemon {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Daemon {
    pub fn start(name: &'static str, mut cmd: Command, log: PathBuf) -> Self {
        let file = std::fs::File::create(&log).expect("create log file");
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
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("{} did not stop on SIGTERM; killing", self.name);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// etcd + kube-apiserver from tests/e2e/start-cluster.sh; stop-cluster.sh on drop.
pub struct Cluster {
    pub dir: PathBuf,
    pub kubectl: Kubectl,
}

impl Cluster {
    pub fn start(dir: PathBuf) -> Self {
        let cluster = Self {
            kubectl: Kubectl {
                bin: tools().path("kubectl"),
                kubeconfig: dir.join("kubeconfig"),
            },
            dir,
        };
        // As in the e2e suite: start-cluster.sh's `kubectl wait` can fail spuriously on a CRD
        // that has no conditions yet, so up to three attempts (it stops what it started).
        let mut attempt = 1;
        let out = loop {
            let mut cmd = Command::new("bash");
            cmd.arg(crate::root().join("tests/e2e/start-cluster.sh"))
                .arg(&cluster.dir)
                .env("E2E_BIN_DIR", &tools().bin);
            let out = run(cmd, None);
            if out.ok() || attempt == 3 {
                break out.expect_ok("tests/e2e/start-cluster.sh");
            }
            println!(
                "start-cluster.sh failed (attempt {attempt}), retrying: {}",
                out.stderr.lines().next().unwrap_or("")
            );
            attempt += 1;
        };
        let vars: HashMap<&str, &str> = out
            .stdout
            .lines()
            .filter_map(|l| l.split_once('='))
            .collect();
        assert_eq!(
            vars.get("KUBECONFIG").map(PathBuf::from),
            Some(cluster.kubectl.kubeconfig.clone()),
            "start-cluster.sh writes the kubeconfig into its work directory"
        );
        println!("{}", out.stderr.trim());
        cluster
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut cmd = Command::new("bash");
        cmd.arg(crate::root().join("tests/e2e/stop-cluster.sh"))
            .arg(&self.dir);
        let out = run(cmd, None);
        if !out.ok() {
            eprintln!("stop-cluster.sh: {} {}", out.stdout, out.stderr);
        }
    }
}
