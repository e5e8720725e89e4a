//! What both cluster suites share: the throw-away control plane of tests/e2e/start-cluster.sh,
//! kubectl against it, commands, polling, stopping processes, and the timed phases and scenarios
//! of a suite's one test. The e2e suite has it as `mod kube`, the runtime suite includes it by
//! `#[path]`; each suite's main.rs provides `root()` (from tests/common) and `POLL_INTERVAL`.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpListener;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::tools::tools;

// ---------------------------------------------------------------------------------------------
// Commands

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

    /// stdout as JSON; the error (for `poll`) shows what kubectl printed instead.
    pub fn try_json(&self) -> Result<Value, String> {
        serde_json::from_str(&self.stdout)
            .map_err(|e| format!("not JSON ({e}): {}\nstderr: {}", self.stdout, self.stderr))
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        match self.try_json() {
            Ok(value) => value,
            Err(e) => panic!("{e}"),
        }
    }

    /// `Ok` when the command succeeded, else its stderr (for `poll`).
    pub fn succeeded(&self) -> Result<(), String> {
        if self.ok() {
            Ok(())
        } else {
            Err(self.stderr.clone())
        }
    }
}

#[allow(dead_code)] // read by the e2e suite
impl Out {
    /// `Warning:` lines kubectl printed (the admission warnings).
    pub fn warnings(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter_map(|l| l.strip_prefix("Warning: "))
            .collect()
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

/// Calls `attempt` every `crate::POLL_INTERVAL` until it returns `Ok`, at most `timeout`; panics
/// with the last error. The timeout only keeps a broken run from hanging: nothing asserts how
/// long anything took.
#[track_caller]
pub fn poll<T>(what: &str, timeout: Duration, mut attempt: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match attempt() {
            Ok(value) => return value,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last: {last}")
            }
            Err(_) => std::thread::sleep(crate::POLL_INTERVAL),
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

/// SIGTERM, then SIGKILL after `grace`; a no-op once `child` has exited.
pub fn terminate(child: &mut Child, name: &str, grace: Duration) {
    if let Ok(None) = child.try_wait() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{name} did not stop on SIGTERM; killing");
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The cluster

/// kubectl against the test cluster. A plain value, unlike `Cluster` (whose drop stops the
/// cluster), so that a thread or a scenario can own a copy.
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
                out.succeeded().map(|()| out.stdout.trim().to_owned())
            },
        );
        let mut config = self
            .ok(
                &["config", "view", "--raw", "-o", "json"],
                "kubectl config view",
            )
            .json();
        let user = format!("{namespace}-{name}");
        config["users"] = json!([{"name": user, "user": {"token": token}}]);
        config["contexts"][0]["context"]["user"] = json!(user);
        std::fs::write(path, config.to_string()).expect("write the ServiceAccount's kubeconfig");
        Kubectl {
            bin: self.bin.clone(),
            kubeconfig: path.to_owned(),
        }
    }
}

#[allow(dead_code)] // used by the e2e suite
impl Kubectl {
    /// `kubectl <verb...> -o json -f <file>`.
    pub fn with_file(&self, verb: &[&str], file: &Path) -> Out {
        let file = file.display().to_string();
        let mut args = verb.to_vec();
        args.extend(["-o", "json", "-f", &file]);
        self.run(&args, None)
    }
}

#[allow(dead_code)] // used by the runtime suite
impl Kubectl {
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

    /// `kubectl get <args...> -o json`.
    pub fn get(&self, args: &[&str]) -> Result<Value, String> {
        let args = [&["get"], args, &["-o", "json"]].concat();
        let out = self.run(&args, None);
        if !out.ok() {
            return Err(out.stderr);
        }
        out.try_json()
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
}

/// etcd + kube-apiserver from tests/e2e/start-cluster.sh; stop-cluster.sh on drop (a no-op when
/// nothing was started).
pub struct Cluster {
    pub dir: PathBuf,
    pub kubectl: Kubectl,
}

impl Cluster {
    #[allow(dead_code)] // the runtime suite starts its clusters with `start_with`
    pub fn start(dir: PathBuf) -> Self {
        Self::start_with(dir, &[])
    }

    /// `start` with `env` for start-cluster.sh (e.g. `E2E_AUDIT_USERS`).
    pub fn start_with(dir: PathBuf, env: &[(&str, &str)]) -> Self {
        // The guard exists before anything runs, so a failure below still stops what started.
        let cluster = Self {
            kubectl: Kubectl {
                bin: tools().path("kubectl"),
                kubeconfig: dir.join("kubeconfig"),
            },
            dir,
        };
        // start-cluster.sh stops what it started when it fails. It can fail spuriously: its
        // `kubectl wait --for=condition=Established` errors out (".status.conditions accessor
        // error") when it looks at a CRD before the apiserver has written any condition. So
        // up to three attempts.
        let mut attempt = 1;
        let out = loop {
            let mut cmd = Command::new("bash");
            cmd.arg(crate::root().join("tests/e2e/start-cluster.sh"))
                .arg(&cluster.dir)
                .env("E2E_BIN_DIR", &tools().bin)
                .envs(env.iter().copied());
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
        if std::thread::panicking() {
            let log = self.dir.join("kube-apiserver.log");
            eprintln!("--- kube-apiserver log (tail)\n{}", tail(&log, 20));
        }
        let mut cmd = Command::new("bash");
        cmd.arg(crate::root().join("tests/e2e/stop-cluster.sh"))
            .arg(&self.dir);
        let out = run(cmd, None);
        if !out.ok() {
            eprintln!("stop-cluster.sh: {} {}", out.stdout, out.stderr);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Objects

/// A bookend ClusterStepPolicy.
pub fn cluster_policy(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "ClusterStepPolicy",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// The `name` of each element of an array (steps, step states, containers); none for a
/// non-array.
pub fn names(items: &Value) -> Vec<String> {
    items
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|i| i["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The suite's one test

/// The phases of a suite's test, each timed and printed as it ends, and its scenarios.
pub struct Clock {
    suite: &'static str,
    start: Instant,
    phase: Instant,
    phases: Vec<(String, Duration)>,
}

impl Clock {
    /// `suite` prefixes every line printed (`[e2e …]`, `[runtime …]`).
    pub fn new(suite: &'static str) -> Self {
        Self {
            suite,
            start: Instant::now(),
            phase: Instant::now(),
            phases: Vec::new(),
        }
    }

    /// Ends the current phase.
    pub fn done(&mut self, name: &str) {
        let took = self.phase.elapsed();
        println!(
            "[{} {:>6.1}s] phase {name}: {:.1}s",
            self.suite,
            self.start.elapsed().as_secs_f64(),
            took.as_secs_f64()
        );
        self.phases.push((name.to_owned(), took));
        self.phase = Instant::now();
    }

    /// Runs a scenario as a phase, under `catch_unwind` so that a failure does not hide the
    /// scenarios after it; prints and returns whether it passed and its PASS/FAIL line.
    pub fn scenario(&mut self, name: &str, scenario: impl FnOnce() -> String) -> (bool, String) {
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(scenario));
        let took = started.elapsed().as_secs_f64();
        let line = match &result {
            Ok(detail) => format!("PASS {name} ({took:.1}s): {detail}"),
            Err(panic) => format!(
                "FAIL {name} ({took:.1}s): {}",
                panic_message(panic.as_ref())
            ),
        };
        println!("[{}] {line}", self.suite);
        self.done(name);
        (result.is_ok(), line)
    }

    /// Every phase's time, and the total.
    pub fn print_phases(&self) {
        println!("phases:");
        for (name, took) in &self.phases {
            println!("  {:>6.1}s  {name}", took.as_secs_f64());
        }
        println!("  {:>6.1}s  total", self.start.elapsed().as_secs_f64());
    }
}
