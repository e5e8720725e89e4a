//! A real kube-apiserver calls bookend: etcd + kube-apiserver (tests/e2e/start-cluster.sh),
//! Tekton's CRDs, `helm install` of charts/bookend with the webhooks pointed at this machine
//! (`webhook.url`), `bookend serve --source kubernetes` on loopback as the chart's
//! ServiceAccount, then `kubectl` and `helm` scenarios in order on that one cluster, ending with
//! `helm uninstall` and the chart's own certificate. Every object the apiserver returns goes to
//! `tekton-validate`.
//!
//! A failing scenario does not stop the others (each runs under `catch_unwind`); the summary
//! lists every scenario, and the test fails at the end if any failed. Processes are stopped by
//! Drop guards, also on failure. See docs/testing.md, "End-to-end against a real
//! kube-apiserver".
//!
//! Knobs (development only): `BOOKEND_E2E_BIN` tests another bookend binary;
//! `BOOKEND_E2E_KEEP=1` keeps the work directory (logs, certificates, kubeconfig).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::kube::{
    Clock, Cluster, Out, cluster_policy, free_port, names, poll, run, tail, terminate,
};
use crate::tools::tools;

const TEAM_A: &str = "team-a";
const TEAM_B: &str = "team-b";

fn bookend_bin() -> PathBuf {
    std::env::var_os("BOOKEND_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bookend")))
}

// ---------------------------------------------------------------------------------------------
// The cluster, as the scenarios drive it

/// The e2e suite's kubectl calls: most return kubectl's result, for the scenarios to assert on.
impl Cluster {
    fn kubectl(&self, args: &[&str]) -> Out {
        self.kubectl.run(args, None)
    }

    /// `kubectl get <args...> -o json`, which must succeed.
    #[track_caller]
    fn get_json(&self, args: &[&str], what: &str) -> Value {
        let args = [&["get"], args, &["-o", "json"]].concat();
        self.kubectl(&args).expect_ok(what).json()
    }

    fn with_object(&self, verb: &[&str], object: &Value) -> Out {
        self.kubectl.with_object(verb, object)
    }

    fn dry_run(&self, object: &Value) -> Out {
        self.with_object(&["create", "--dry-run=server"], object)
    }

    fn create(&self, object: &Value) -> Out {
        self.with_object(&["create"], object)
    }

    fn apply(&self, object: &Value) -> Out {
        self.with_object(&["apply"], object)
    }

    /// Dry-run creates `object` until `check` accepts the result (policies, Tasks and webhook
    /// configurations reach bookend or the apiserver asynchronously).
    fn poll_dry_run(
        &self,
        what: &str,
        object: &Value,
        check: impl Fn(&Out) -> Result<(), String>,
    ) -> Out {
        poll(what, Duration::from_secs(30), || {
            let out = self.dry_run(object);
            check(&out).map(|()| out)
        })
    }

    /// `poll_dry_run` until the returned TaskRun's step names satisfy `done`.
    fn poll_steps(&self, what: &str, object: &Value, done: impl Fn(&[String]) -> bool) -> Out {
        self.poll_dry_run(what, object, |out| {
            let steps = step_names(&out.try_json()?);
            if done(&steps) {
                Ok(())
            } else {
                Err(format!("steps {steps:?}"))
            }
        })
    }
}

/// `bookend serve --source kubernetes`; SIGTERM (then SIGKILL) on drop.
struct Bookend {
    child: Child,
    log: PathBuf,
    port: u16,
    admin: u16,
}

impl Bookend {
    /// `port`: the webhook port, chosen before the chart is installed (webhook.url names it).
    fn start(work: &Path, port: u16, cert: &Path, key: &Path, kubeconfig: &Path) -> Self {
        let mut admin = free_port();
        while admin == port {
            admin = free_port();
        }
        let log = work.join("bookend.log");
        let file = std::fs::File::create(&log).expect("create bookend.log");
        let mut cmd = Command::new(bookend_bin());
        cmd.args(["serve", "--source", "kubernetes"]);
        let child = cmd
            .arg("--tls-cert")
            .arg(cert)
            .arg("--tls-key")
            .arg(key)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-listen")
            .arg(format!("127.0.0.1:{admin}"))
            .env("KUBECONFIG", kubeconfig)
            .current_dir(work)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("dup log"))
            .stderr(file)
            .spawn()
            .expect("spawn bookend serve");
        Self {
            child,
            log,
            port,
            admin,
        }
    }

    /// GET on the admin port: (status, body).
    fn admin_get(&self, path: &str) -> Result<(u16, String), String> {
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.admin)).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
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

    fn wait_ready(&mut self, timeout: Duration) {
        poll("bookend /readyz", timeout, || {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                panic!(
                    "bookend serve exited ({status}) before /readyz:\n{}",
                    tail(&self.log, 40)
                );
            }
            match self.admin_get("/readyz") {
                Ok((200, _)) => Ok(()),
                Ok((code, body)) => Err(format!("{code} {body}")),
                Err(e) => Err(e),
            }
        })
    }

    /// Serial (upper-case hex, as `openssl x509 -serial` prints it) of the certificate a new
    /// TLS handshake gets, verified against `ca`.
    fn served_serial(&self, ca: &Path) -> Result<String, String> {
        let mut cmd = Command::new("openssl");
        cmd.args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("-CAfile")
            .arg(ca)
            .args(["-verify_return_error", "-verify_ip", "127.0.0.1"]);
        let out = run(cmd, Some(b""));
        if !out.ok() || !out.stdout.contains("Verify return code: 0 (ok)") {
            return Err(format!("handshake: {} {}", out.status, out.stderr.trim()));
        }
        let pem = out
            .stdout
            .find("-----BEGIN CERTIFICATE-----")
            .and_then(|b| {
                let end = out.stdout[b..].find("-----END CERTIFICATE-----")?;
                Some(&out.stdout[b..b + end + "-----END CERTIFICATE-----".len()])
            })
            .ok_or("no certificate in s_client output")?;
        let mut cmd = Command::new("openssl");
        cmd.args(["x509", "-noout", "-serial"]);
        let out = run(cmd, Some(pem.as_bytes()));
        out.stdout
            .trim()
            .strip_prefix("serial=")
            .map(str::to_owned)
            .ok_or_else(|| format!("openssl x509 -serial: {}", out.stderr))
    }
}

impl Drop for Bookend {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- bookend log (tail)\n{}", tail(&self.log, 40));
        }
        self.stop();
    }
}

impl Bookend {
    /// SIGTERM, then SIGKILL after 10 s; a no-op once it has exited.
    fn stop(&mut self) {
        terminate(&mut self.child, "bookend serve", Duration::from_secs(10));
    }
}

// ---------------------------------------------------------------------------------------------
// Certificates

/// `bookend certs` output in `<dir>/v1`, served through the symlink `<dir>/live` so that a
/// rotation is one atomic rename (as Kubernetes updates a Secret volume).
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn create(dir: PathBuf) -> Self {
        let v1 = dir.join("v1");
        let mut cmd = Command::new(bookend_bin());
        cmd.args(["certs", "--host", "127.0.0.1", "--out-dir"])
            .arg(&v1);
        run(cmd, None).expect_ok("bookend certs");
        std::os::unix::fs::symlink("v1", dir.join("live")).expect("symlink live -> v1");
        Self { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("v1/ca.crt")
    }

    fn ca_bundle_b64(&self) -> String {
        std::fs::read_to_string(self.dir.join("v1/ca.crt.b64"))
            .expect("ca.crt.b64")
            .trim()
            .to_owned()
    }

    fn live(&self, file: &str) -> PathBuf {
        self.dir.join("live").join(file)
    }

    /// A new serving pair signed by the same CA in `<dir>/<name>`, then `live` → `<name>`.
    /// Returns the new serial (upper-case hex).
    fn rotate(&self, name: &str) -> String {
        let new = self.dir.join(name);
        std::fs::create_dir_all(&new).expect("mkdir");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        let serial = format!("7{:015X}", nanos & 0xFFF_FFFF_FFFF_FFFF);
        std::fs::write(
            new.join("ext.cnf"),
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
        )
        .expect("ext.cnf");
        let mut cmd = Command::new("openssl");
        cmd.current_dir(&new).args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "tls.key",
            "-subj",
            "/CN=bookend-e2e-rotated",
            "-out",
            "tls.csr",
        ]);
        run(cmd, None).expect_ok("openssl req");
        let mut cmd = Command::new("openssl");
        cmd.current_dir(&new)
            .args(["x509", "-req", "-in", "tls.csr", "-CA"])
            .arg(self.dir.join("v1/ca.crt"))
            .arg("-CAkey")
            .arg(self.dir.join("v1/ca.key"))
            .args(["-set_serial", &format!("0x{serial}"), "-days", "2"])
            .args(["-extfile", "ext.cnf", "-out", "tls.crt"]);
        run(cmd, None).expect_ok("openssl x509 -req");
        let tmp = self.dir.join("live.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(name, &tmp).expect("symlink");
        std::fs::rename(&tmp, self.dir.join("live")).expect("rename live.tmp -> live");
        serial
    }
}

// ---------------------------------------------------------------------------------------------
// Objects

/// The non-empty documents of a multi-document YAML text.
fn yaml_values(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("YAML document"))
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_values(&text)
}

fn example(path: &str) -> PathBuf {
    crate::root().join(path)
}

/// Step names of a TaskRun's inline taskSpec.
fn step_names(object: &Value) -> Vec<String> {
    step_names_of(&object["spec"]["taskSpec"])
}

/// Step names of a Task spec (or a TaskRun's taskSpec).
fn step_names_of(spec: &Value) -> Vec<String> {
    names(&spec["steps"])
}

fn includes(steps: &[String], name: &str) -> bool {
    steps.iter().any(|n| n == name)
}

fn has_step(object: &Value, name: &str) -> bool {
    includes(&step_names(object), name)
}

/// `metadata.<field>` of an object the apiserver returned, which must be a string.
#[track_caller]
fn metadata_str(object: &Value, field: &str) -> String {
    match object["metadata"][field].as_str() {
        Some(value) => value.to_owned(),
        None => panic!("metadata.{field}: {}", object["metadata"]),
    }
}

/// A minimal inline TaskRun.
fn taskrun(namespace: &str, generate_name: &str, step: &str) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": generate_name, "namespace": namespace},
        "spec": {"taskSpec": {"steps": [{
            "name": step,
            "image": "docker.io/library/alpine:3.20",
            "script": "echo hello",
        }]}},
    })
}

fn busybox_step(name: &str) -> Value {
    json!({
        "name": name,
        "image": "docker.io/library/busybox:1.37",
        "command": ["/bin/sh", "-c"],
        "args": [format!("echo {name}")],
    })
}

/// `bookend render -o json` of a TaskRun file with the example policies (the offline engine).
fn render(file: &Path) -> Value {
    let mut cmd = Command::new(bookend_bin());
    cmd.args(["render", "--policies"])
        .arg(example("examples/policies"))
        .arg("-f")
        .arg(file)
        .args(["-o", "json"]);
    run(cmd, None).expect_ok("bookend render").json()
}

/// `kubectl <verb...> -f examples/taskruns/<name>`, which must succeed and return what
/// `bookend render` makes of the same file (the webhook and the offline engine agree).
/// Returns kubectl's result (for its warnings) and the object.
#[track_caller]
fn create_example(cluster: &Cluster, verb: &[&str], name: &str) -> (Out, Value) {
    let file = example(&format!("examples/taskruns/{name}"));
    let what = format!("kubectl {} {name}", verb.join(" "));
    let out = cluster.kubectl.with_file(verb, &file).expect_ok(&what);
    let object = out.json();
    let offline = render(&file);
    // The step names first: a short message when only the steps differ.
    assert_eq!(
        step_names(&object),
        step_names(&offline),
        "{what}: steps (in order) from the apiserver vs bookend render"
    );
    assert_eq!(
        object["spec"], offline["spec"],
        "{what}: the spec from the apiserver equals bookend render's"
    );
    (out, object)
}

// ---------------------------------------------------------------------------------------------
// Setup

/// `helm` against the test cluster.
fn helm(cluster: &Cluster, args: &[&str]) -> Out {
    let mut cmd = Command::new(tools().path("helm"));
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(&cluster.kubectl.kubeconfig)
        .current_dir(crate::root());
    run(cmd, None)
}

const RELEASE: &str = "bookend";
const RELEASE_NAMESPACE: &str = "bookend-system";

/// `helm install bookend charts/bookend`: the chart's defaults, except that the webhooks call
/// `bookend serve` on this machine (`webhook.url`) and the certificate is the test's own
/// (`tls.generate=false`, `tls.caBundle`). Nothing runs the Deployment (no kubelet): bookend
/// runs outside, as the chart's ServiceAccount.
fn helm_install(cluster: &Cluster, port: u16, ca_b64: &str) -> Out {
    helm(
        cluster,
        &[
            "install",
            RELEASE,
            "charts/bookend",
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "--set",
            &format!("webhook.url=https://127.0.0.1:{port}"),
            "--set",
            "tls.generate=false",
            "--set",
            &format!("tls.caBundle={ca_b64}"),
        ],
    )
}

/// `helm upgrade bookend charts/bookend --reuse-values` and `extra` (`--set`s): the release as
/// installed, with the chart's templates applied again.
fn helm_upgrade(cluster: &Cluster, extra: &[&str]) -> Out {
    let args = [
        &[
            "upgrade",
            RELEASE,
            "charts/bookend",
            "--namespace",
            RELEASE_NAMESPACE,
            "--reuse-values",
        ],
        extra,
    ]
    .concat();
    helm(cluster, &args)
}

/// Checks that the webhook configurations the chart installed are deploy/base/webhooks.yaml
/// (the chart rendered for kustomize) in everything but clientConfig, which must call
/// `https://127.0.0.1:<port><the Service path>` with `ca_b64`.
fn check_installed_webhooks(cluster: &Cluster, port: u16, ca_b64: &str) {
    let manifest = helm(
        cluster,
        &["get", "manifest", RELEASE, "--namespace", RELEASE_NAMESPACE],
    )
    .expect_ok("helm get manifest");
    let key = |v: &Value| format!("{}/{}", v["kind"], v["metadata"]["name"]);
    let mut ours: Vec<Value> = yaml_values(&manifest.stdout)
        .into_iter()
        .filter(|v| {
            v["kind"]
                .as_str()
                .is_some_and(|k| k.ends_with("WebhookConfiguration"))
        })
        .collect();
    let mut base = yaml_docs(&example("deploy/base/webhooks.yaml"));
    assert_eq!(
        ours.len(),
        2,
        "the chart installs two webhook configurations"
    );
    assert_eq!(
        base.len(),
        2,
        "deploy/base/webhooks.yaml has two configurations"
    );
    ours.sort_by_key(key);
    base.sort_by_key(key);
    for (ours, base) in ours.iter_mut().zip(base.iter_mut()) {
        assert_eq!(key(ours), key(base));
        let ours_hooks = ours["webhooks"].as_array_mut().expect("webhooks");
        let base_hooks = base["webhooks"].as_array_mut().expect("webhooks");
        assert_eq!(
            ours_hooks.len(),
            base_hooks.len(),
            "{}: webhook count",
            key(base)
        );
        for (o, b) in ours_hooks.iter_mut().zip(base_hooks.iter_mut()) {
            let path = b["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: service.path in deploy/", b["name"]))
                .to_owned();
            assert_eq!(
                o["clientConfig"],
                json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca_b64}),
                "webhook {}: clientConfig",
                b["name"]
            );
            o.as_object_mut().unwrap().remove("clientConfig");
            b.as_object_mut().unwrap().remove("clientConfig");
        }
        assert_eq!(
            ours["webhooks"], base["webhooks"],
            "the installed webhooks differ from deploy/'s in more than clientConfig"
        );
    }
}

/// A kubeconfig for `bookend serve` that authenticates as the chart's ServiceAccount (a token
/// from the TokenRequest API), so the chart's RBAC is what bookend gets.
fn service_account_kubeconfig(cluster: &Cluster, path: &Path) -> PathBuf {
    cluster
        .kubectl
        .as_service_account(RELEASE_NAMESPACE, RELEASE, path)
        .kubeconfig
}

// ---------------------------------------------------------------------------------------------
// Scenarios

struct Ctx {
    // Dropped in this order: bookend before the cluster it watches.
    bookend: Bookend,
    cluster: Cluster,
    certs: Certs,
    work: PathBuf,
    /// Every object the apiserver returned (label, object), for tekton-validate.
    returned: Vec<(String, Value)>,
}

impl Ctx {
    fn keep(&mut self, label: &str, object: &Value) {
        self.returned.push((label.to_owned(), object.clone()));
    }

    /// Dry-runs `object` until its steps include `step`; returns the TaskRun, kept under `label`.
    fn poll_injected(&mut self, what: &str, object: &Value, step: &str, label: &str) -> Value {
        let out = self
            .cluster
            .poll_steps(what, object, |steps| includes(steps, step));
        let object = out.json();
        self.keep(label, &object);
        object
    }
}

fn scenario_attack_classes(ctx: &mut Ctx) -> String {
    crate::attacks::scenario(
        &ctx.cluster.kubectl,
        &example("examples/policies"),
        &ctx.work,
    )
}

fn scenario_dry_run(ctx: &mut Ctx) -> String {
    let (out, object) = create_example(&ctx.cluster, &["create", "--dry-run=server"], "build.yaml");
    assert!(
        object["metadata"]["annotations"]["bookend.dev/injected"].is_string(),
        "record annotation: {}",
        object["metadata"]
    );
    let warnings = out.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("bookend: injected") && w.contains("bookend-credentials")),
        "dry-run warnings name the injected steps; stderr: {}",
        out.stderr
    );
    let list = ctx
        .cluster
        .get_json(&["taskruns", "-n", TEAM_A], "kubectl get taskruns");
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(0),
        "dry-run stored nothing"
    );
    ctx.keep("dry-run build.yaml", &object);
    format!(
        "steps {:?}; warnings {:?}; nothing stored",
        step_names(&object),
        warnings
    )
}

fn scenario_create_and_rerun(ctx: &mut Ctx) -> String {
    // What create returns is what it persisted: in order, and as bookend render has it.
    let (_, object) = create_example(&ctx.cluster, &["create"], "build.yaml");
    let name = metadata_str(&object, "name");
    let expected = step_names(&object);
    let stored = ctx.cluster.get_json(
        &["taskrun", "-n", TEAM_A, &name],
        "kubectl get the persisted TaskRun",
    );
    assert_eq!(
        stored["spec"], object["spec"],
        "get returns what create returned"
    );
    ctx.keep("created build.yaml", &stored);

    // A rerun: the persisted spec, labels and annotations under a new name.
    let rerun = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {
            "name": format!("{name}-rerun"),
            "namespace": TEAM_A,
            "labels": stored["metadata"]["labels"].clone(),
            "annotations": stored["metadata"]["annotations"].clone(),
        },
        "spec": stored["spec"].clone(),
    });
    let out = ctx.cluster.create(&rerun).expect_ok("create the rerun");
    let again = out.json();
    assert_eq!(
        step_names(&again),
        expected,
        "the rerun has each step once, in order"
    );
    assert_eq!(
        again["spec"], stored["spec"],
        "the rerun's spec is unchanged"
    );
    ctx.keep("rerun", &again);
    format!("{name}: {} steps in order; rerun unchanged", expected.len())
}

fn scenario_v1beta1(ctx: &mut Ctx) -> String {
    // Registered for v1 and v1beta1 with matchPolicy: Exact, bookend gets the v1beta1 object as
    // written and patches it with v1beta1 field names. (The test CRDs have conversion: None, so
    // only the dry-run response, in the requested version, is meaningful here.)
    let (_, object) = create_example(
        &ctx.cluster,
        &["create", "--dry-run=server"],
        "v1beta1.yaml",
    );
    assert_eq!(object["apiVersion"], json!("tekton.dev/v1beta1"));
    let credentials = &object["spec"]["taskSpec"]["steps"][0];
    assert_eq!(credentials["name"], json!("bookend-credentials"));
    assert!(
        credentials.get("resources").is_some() && credentials.get("computeResources").is_none(),
        "v1beta1 field names in the injected step: {credentials}"
    );
    ctx.keep("dry-run v1beta1.yaml", &object);
    format!("tekton.dev/v1beta1 steps {:?}", step_names(&object))
}

fn scenario_reserved_prefix(ctx: &mut Ctx) -> String {
    let object = taskrun(TEAM_A, "sneaky-", "bookend-whatever");
    let out = ctx.cluster.create(&object);
    assert!(
        !out.ok(),
        "a user step with the reserved prefix is refused: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("denied the request") && out.stderr.contains("reserved prefix"),
        "kubectl shows bookend's message: {}",
        out.stderr
    );
    first_line(&out.stderr)
}

fn first_line(text: &str) -> String {
    text.lines()
        .find(|l| !l.starts_with("Warning:"))
        .unwrap_or("")
        .trim()
        .to_owned()
}

fn scenario_policy_lifecycle(ctx: &mut Ctx) -> String {
    // Invalid: a step name without the reserved prefix.
    let invalid = cluster_policy(
        "e2e-invalid",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("no-prefix")]}),
    );
    let out = ctx.cluster.apply(&invalid);
    assert!(!out.ok(), "an invalid policy is refused: {}", out.stdout);
    assert!(
        out.stderr.contains("policies.validate.bookend.dev")
            && out.stderr.contains("spec.preSteps[0].name"),
        "refused by the validating webhook with the field path: {}",
        out.stderr
    );
    let refusal = first_line(&out.stderr);
    let get = ctx
        .cluster
        .kubectl(&["get", "clustersteppolicy", "e2e-invalid"]);
    assert!(!get.ok(), "the invalid policy was not stored");

    // Valid: takes effect for the next TaskRun without a restart.
    let probe = taskrun(TEAM_B, "probe-", "work");
    let before = ctx
        .cluster
        .dry_run(&probe)
        .expect_ok("probe dry-run")
        .json();
    assert!(!has_step(&before, "bookend-e2e-extra"));
    let policy = cluster_policy(
        "e2e-extra",
        json!({"priority": 5, "match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("bookend-e2e-extra")]}),
    );
    ctx.cluster.apply(&policy).expect_ok("apply a valid policy");
    let applied = Instant::now();
    // Priority 5, the lowest (outermost): its pre-step comes first.
    let out = ctx
        .cluster
        .poll_steps("the new policy to take effect", &probe, |steps| {
            steps.first().is_some_and(|s| s == "bookend-e2e-extra")
        });
    let took_effect = applied.elapsed();
    ctx.keep("dry-run with e2e-extra", &out.json());

    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-extra"])
        .expect_ok("delete the policy");
    let deleted = Instant::now();
    ctx.cluster
        .poll_steps("the deleted policy to stop injecting", &probe, |steps| {
            !includes(steps, "bookend-e2e-extra")
        });
    format!(
        "invalid refused ({refusal}); new policy live after {:.1}s, deletion after {:.1}s",
        took_effect.as_secs_f64(),
        deleted.elapsed().as_secs_f64()
    )
}

fn scenario_step_policy(ctx: &mut Ctx) -> String {
    // A namespaced StepPolicy applies only to TaskRuns in its own namespace, whatever its match.
    let policy = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "e2e-team-b", "namespace": TEAM_B},
        "spec": {"priority": 60, "match": {"namespaces": ["team-*"]},
                 "postSteps": [busybox_step("bookend-e2e-team-b")]},
    });
    ctx.cluster.apply(&policy).expect_ok("apply a StepPolicy");
    let in_b = taskrun(TEAM_B, "sp-", "work");
    let object = ctx.poll_injected(
        "the StepPolicy to take effect",
        &in_b,
        "bookend-e2e-team-b",
        "dry-run with a StepPolicy",
    );
    // Its status too (a namespaced status write).
    poll("the StepPolicy's status", Duration::from_secs(30), || {
        let p = ctx.cluster.get_json(
            &["steppolicy", "-n", TEAM_B, "e2e-team-b"],
            "the StepPolicy",
        );
        let c = &p["status"]["conditions"][0];
        if c["reason"] == "Loaded" && p["status"]["postSteps"] == json!(["bookend-e2e-team-b"]) {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    });
    let in_a = ctx
        .cluster
        .dry_run(&taskrun(TEAM_A, "sp-", "work"))
        .expect_ok("dry-run in team-a")
        .json();
    assert!(
        !has_step(&in_a, "bookend-e2e-team-b"),
        "a StepPolicy in team-b does not apply in team-a: {:?}",
        step_names(&in_a)
    );
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_B, "e2e-team-b"])
        .expect_ok("delete the StepPolicy");
    ctx.cluster
        .poll_steps("the deleted StepPolicy to stop injecting", &in_b, |steps| {
            !includes(steps, "bookend-e2e-team-b")
        });
    format!(
        "team-b: steps {:?}; team-a: not applied; deletion stops it",
        step_names(&object)
    )
}

/// Issue 14: a team that may write StepPolicies in its namespace can neither switch off an org
/// policy by taking one of its names (refused by the webhook; left out by bookend when the
/// webhook was absent) nor run a step outside the org's steps.
fn scenario_team_cannot_evict_or_wrap_org(ctx: &mut Ctx) -> String {
    // org-credentials (examples/policies) injects volume bookend-registry in team-*.
    let clash = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "aaa-team", "namespace": TEAM_A},
        "spec": {"priority": 0, "preSteps": [busybox_step("bookend-e2e-team")],
                 "volumes": [{"name": "bookend-registry", "emptyDir": {}}]},
    });
    let refused = ctx.cluster.apply(&clash);
    assert!(!refused.ok(), "the webhook refuses the clash");
    assert!(
        refused.stderr.contains("policies.validate.bookend.dev")
            && refused.stderr.contains(
                "volume name \"bookend-registry\" is already used by ClusterStepPolicy/org-credentials"
            ),
        "{}",
        refused.stderr
    );

    // The same clash created while the validating webhooks are absent (deleted, as in a break
    // glass) reaches bookend's caches.
    ctx.cluster
        .kubectl(&["delete", "validatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the ValidatingWebhookConfiguration");
    poll(
        "the apiserver to drop the policy webhook",
        Duration::from_secs(30),
        || ctx.cluster.apply(&clash).succeeded(),
    );
    let log = ctx.bookend.log.clone();
    poll(
        "bookend to log the conflict",
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .any(|l| {
                    l.contains("StepPolicy/team-a/aaa-team")
                        && l.contains("already used by ClusterStepPolicy/org-credentials")
                })
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    let run = taskrun(TEAM_A, "evict-", "work");
    let object = ctx
        .cluster
        .dry_run(&run)
        .expect_ok("dry-run in team-a")
        .json();
    let steps = step_names(&object);
    assert!(
        includes(&steps, "bookend-credentials") && !includes(&steps, "bookend-e2e-team"),
        "the org policy stays, the team's is inactive: {steps:?}"
    );
    let events = poll("the PolicyConflict Event", Duration::from_secs(30), || {
        let out = ctx.cluster.kubectl(&[
            "get",
            "events",
            "-n",
            TEAM_A,
            "--field-selector",
            "involvedObject.name=aaa-team",
            "-o",
            "json",
        ]);
        let text = out.stdout.clone();
        (text.contains("PolicyConflict") && text.contains("ClusterStepPolicy/org-credentials"))
            .then_some(text)
            .ok_or(out.stderr)
    });
    assert!(!events.is_empty());
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade restores the validating webhooks");
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_A, "aaa-team"])
        .expect_ok("delete the clashing StepPolicy");

    // A team policy of the lowest priority still runs inside the org's steps.
    let wrap = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "team-wrap", "namespace": TEAM_A},
        "spec": {"priority": -1000,
                 "preSteps": [busybox_step("bookend-e2e-team-pre")],
                 "postSteps": [busybox_step("bookend-e2e-team-post")]},
    });
    ctx.cluster
        .apply(&wrap)
        .expect_ok("apply a low-priority StepPolicy");
    let object = ctx.poll_injected(
        "the StepPolicy to take effect",
        &run,
        "bookend-e2e-team-pre",
        "org steps outside team steps",
    );
    let order: Vec<String> = step_names(&object)
        .into_iter()
        .filter(|s| !s.starts_with("bookend-gate-") && s != "bookend-verdict")
        .collect();
    assert_eq!(
        order,
        [
            "bookend-credentials",
            "bookend-e2e-team-pre",
            "work",
            "bookend-e2e-team-post",
            "bookend-sbom",
            "bookend-sbom-upload"
        ],
        "org pre-steps first, org post-steps last"
    );
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_A, "team-wrap"])
        .expect_ok("delete the StepPolicy");
    format!(
        "clash refused by the webhook; created without it: org stays, team inactive (Event PolicyConflict); order {order:?}"
    )
}

/// Issue 14: the Pod backstop. Tekton's controller is simulated (no controller runs here): it
/// resolves a remote Task, dry-run-creates it (as the controller: bookend injects; as anyone
/// else: the mutation does not happen, as in an outage) and creates the Pod from the result.
fn scenario_pod_backstop(ctx: &mut Ctx) -> String {
    let as_controller = impersonate_tekton_controller(ctx, &["pods", "tasks"]);
    let remote = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "remote-", "namespace": TEAM_A},
        "spec": {"taskRef": {"resolver": "git", "params": [
            {"name": "url", "value": "https://git.example.com/tasks.git"},
            {"name": "pathInRepo", "value": "build.yaml"}]}},
    });
    let created = ctx
        .cluster
        .create(&remote)
        .expect_ok("create a remote TaskRun");
    assert!(
        created
            .warnings()
            .iter()
            .any(|w| w.contains("git resolver")),
        "admitted with a warning: {:?}",
        created.warnings()
    );
    let taskrun = created.json();
    let name = metadata_str(&taskrun, "name");
    let uid = metadata_str(&taskrun, "uid");
    let task = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"generateName": "resolved-", "namespace": TEAM_A},
        "spec": {"steps": [{"name": "remote-build", "image": "docker.io/library/alpine:3.20",
                            "script": "echo remote"}]},
    });
    // What Tekton's pod builder makes of the Task it runs (containers step-<name>, the TaskRun's
    // labels and the Task's annotations).
    let pod_of = |resolved: &Value| {
        let mut spec = crate::tekton_pod::pod_spec(resolved["spec"]["steps"].as_array().unwrap());
        spec["automountServiceAccountToken"] = json!(false);
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": format!("{name}-pod-"),
                "namespace": TEAM_A,
                "labels": {"tekton.dev/taskRun": name, "tekton.dev/taskRunUID": uid},
                "annotations": resolved["metadata"]["annotations"].clone(),
                "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                                     "name": name, "uid": uid, "controller": true}],
            },
            "spec": spec,
        })
    };
    // The mutation did not happen (an outage): the Pod lacks the steps and is refused.
    let bare = ctx
        .cluster
        .with_object(&["create", "--dry-run=server"], &task)
        .expect_ok("dry-run the Task without bookend")
        .json();
    let refused = poll(
        "the controller's RBAC, then bookend's refusal",
        Duration::from_secs(30),
        || {
            let out = ctx
                .cluster
                .with_object(&["create", &as_controller], &pod_of(&bare));
            if out.stderr.contains("pods.validate.bookend.dev") {
                Ok(out)
            } else if out.ok() {
                Err(format!("admitted: {}", out.stdout))
            } else {
                Err(out.stderr)
            }
        },
    );
    assert!(
        refused.stderr.contains(&format!("the Pod of TaskRun {TEAM_A}/{name} lacks the step(s) bookend-sbom (ClusterStepPolicy/org-sbom)"))
            && refused.stderr.contains("git resolver"),
        "bookend's message names the TaskRun, the steps, the policy and the cause: {}",
        refused.stderr
    );
    // With the mutation (the controller's dry-run reaches bookend): admitted.
    let injected = ctx
        .cluster
        .with_object(&["create", "--dry-run=server", &as_controller], &task)
        .expect_ok("dry-run the Task as the controller")
        .json();
    let admitted = ctx
        .cluster
        .with_object(&["create", &as_controller], &pod_of(&injected))
        .expect_ok("the Pod with the steps");
    let pod = admitted.json();
    // A Pod the controller did not make is never sent to bookend.
    let mut other = pod_of(&bare);
    other["metadata"]["labels"] = json!({"app": "not-tekton"});
    ctx.cluster
        .with_object(&["create", &as_controller], &other)
        .expect_ok("an unlabelled Pod");
    format!(
        "Pod without the dry-run mutation refused ({}); with it admitted ({} containers)",
        first_line(&refused.stderr),
        pod["spec"]["containers"].as_array().map_or(0, Vec::len)
    )
}

fn scenario_task_ref(ctx: &mut Ctx) -> String {
    let docs = yaml_docs(&example("examples/taskruns/taskref.yaml"));
    let task = docs
        .iter()
        .find(|d| d["kind"] == "Task")
        .expect("a Task in taskref.yaml");
    let run = docs
        .iter()
        .find(|d| d["kind"] == "TaskRun")
        .expect("a TaskRun in taskref.yaml");
    let created = ctx.cluster.create(task).expect_ok("create the Task").json();
    // A Task CREATE that is not Tekton's dry-run is kept away from bookend (matchConditions).
    assert_eq!(
        created["spec"], task["spec"],
        "a user's Task is stored unchanged"
    );
    let task_name = metadata_str(&created, "name");
    let rv = metadata_str(&created, "resourceVersion");
    // bookend learns about the Task through its watch: poll until the dry-run inlines it.
    ctx.cluster
        .poll_dry_run("bookend to see the Task", run, Out::succeeded);
    let object = ctx
        .cluster
        .create(run)
        .expect_ok("create the taskRef TaskRun")
        .json();
    assert!(
        object["spec"]["taskRef"].is_null(),
        "taskRef replaced: {}",
        object["spec"]
    );
    assert_eq!(
        object["metadata"]["labels"]["tekton.dev/task"],
        json!(task_name)
    );
    let inlined = object["metadata"]["annotations"]["bookend.dev/inlined-task"].clone();
    assert_eq!(
        inlined,
        json!(format!("{task_name}@{rv}")),
        "inlined-task annotation"
    );
    assert!(has_step(&object, "test") && has_step(&object, "bookend-credentials"));
    ctx.keep("taskRef TaskRun", &object);

    // Tekton's disable-inline-spec: taskrun refuses spec.taskSpec; bookend, which watches
    // Tekton's feature-flags ConfigMap, refuses to inline instead, naming the flag.
    let flags = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
        "data": {"disable-inline-spec": "taskrun"},
    });
    let _ = ctx
        .cluster
        .kubectl(&["create", "namespace", "tekton-pipelines"]);
    ctx.cluster
        .apply(&flags)
        .expect_ok("Tekton's feature flags");
    let refused = poll(
        "bookend to see disable-inline-spec",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(run);
            if out.stderr.contains("disable-inline-spec lists taskrun") {
                Ok(out)
            } else {
                Err(format!("{}{}", out.stdout, out.stderr))
            }
        },
    );
    ctx.cluster
        .kubectl(&[
            "delete",
            "configmap",
            "-n",
            "tekton-pipelines",
            "feature-flags",
        ])
        .expect_ok("delete the feature flags");
    // (The TaskRun above exists now: ask again under a generated name.)
    let mut again = run.clone();
    again["metadata"].as_object_mut().unwrap().remove("name");
    again["metadata"]["generateName"] = json!("by-ref-");
    ctx.cluster
        .poll_dry_run("inlining again", &again, Out::succeeded);
    format!(
        "inlined {inlined}; steps {:?}; with disable-inline-spec: {}",
        step_names(&object),
        first_line(&refused.stderr)
    )
}

/// Lets the tests act as Tekton's controller (`kubectl --as=…`), whose dry-run Task CREATEs
/// and Pod CREATEs the webhooks' matchConditions select, with create rights on `resources`
/// (core `pods`, `tekton.dev` `tasks`). Returns the `--as` flag.
fn impersonate_tekton_controller(ctx: &mut Ctx, resources: &[&str]) -> String {
    let rules: Vec<Value> = resources
        .iter()
        .map(|r| {
            let group = if *r == "pods" { "" } else { "tekton.dev" };
            json!({"apiGroups": [group], "resources": [r], "verbs": ["create"]})
        })
        .collect();
    let name = format!("e2e-tekton-controller-{}", resources.join("-"));
    let rbac = json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": "tekton-pipelines-controller",
                              "namespace": "tekton-pipelines"}],
            },
        ],
    });
    ctx.cluster
        .apply(&rbac)
        .expect_ok("RBAC for the impersonated controller");
    format!("--as={}", bookend::policy::DEFAULT_TEKTON_CONTROLLER)
}

fn scenario_remote_task_dry_run(ctx: &mut Ctx) -> String {
    // Tekton's controller dry-run-creates a resolved remote Task and runs what comes back. The
    // webhook entry tasks-dryrun.mutate.bookend.dev only matches that (matchConditions, CEL,
    // evaluated by the apiserver): dryRun and the controller's user. Impersonate the user.
    let as_controller = impersonate_tekton_controller(ctx, &["tasks"]);
    let task = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"generateName": "resolved-", "namespace": TEAM_A},
        "spec": {"steps": [{"name": "remote-build", "image": "docker.io/library/alpine:3.20",
                            "script": "echo remote"}]},
    });
    let out = poll(
        "the controller's RBAC to take effect",
        Duration::from_secs(30),
        || {
            let out = ctx
                .cluster
                .with_object(&["create", "--dry-run=server", &as_controller], &task);
            out.succeeded().map(|()| out)
        },
    );
    let object = out.json();
    let names = step_names_of(&object["spec"]);
    assert!(
        includes(&names, "bookend-sbom") && includes(&names, "remote-build"),
        "the controller's dry-run Task gets the namespace-level policies' steps: {names:?}"
    );
    assert!(
        !includes(&names, "bookend-credentials"),
        "org-credentials has a TaskRun-level criterion (exclude.selector), so it cannot apply: {names:?}"
    );
    // What Tekton then runs: the Task's spec as a TaskRun's taskSpec; let Tekton validate it.
    ctx.keep(
        "remote Task dry-run (as taskSpec)",
        &json!({
            "apiVersion": "tekton.dev/v1",
            "kind": "TaskRun",
            "metadata": {"generateName": "resolved-run-", "namespace": TEAM_A},
            "spec": {"taskSpec": object["spec"].clone()},
        }),
    );
    // The same dry-run by anyone else is not sent to bookend.
    let admin = ctx
        .cluster
        .with_object(&["create", "--dry-run=server"], &task)
        .expect_ok("dry-run Task as the admin")
        .json();
    assert_eq!(admin["spec"], task["spec"], "unchanged for other users");
    format!("controller's dry-run Task: steps {names:?}; other users' Tasks untouched")
}

fn scenario_origin_pipeline(ctx: &mut Ctx) -> String {
    let policy = cluster_policy(
        "e2e-pipeline-only",
        json!({"priority": 50, "match": {"namespaces": [TEAM_B], "origin": "Pipeline"},
               "preSteps": [busybox_step("bookend-e2e-pipeline")]}),
    );
    ctx.cluster
        .apply(&policy)
        .expect_ok("apply the origin: Pipeline policy");
    let mut owned = taskrun(TEAM_B, "pr-task-", "work");
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "name": "fake-pipelinerun",
        "uid": "6f1e3c2a-0000-4000-8000-0000000000e2",
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    ctx.cluster.poll_steps(
        "the origin: Pipeline policy to take effect",
        &owned,
        |steps| includes(steps, "bookend-e2e-pipeline"),
    );
    let out = ctx
        .cluster
        .create(&owned)
        .expect_ok("create the PipelineRun-owned TaskRun");
    let object = out.json();
    assert!(
        has_step(&object, "bookend-e2e-pipeline"),
        "{:?}",
        step_names(&object)
    );
    let audit = out
        .warnings()
        .into_iter()
        .find(|w| {
            w.contains("org-provenance-audit") && w.contains("would inject bookend-provenance")
        })
        .map(str::to_owned);
    assert!(
        audit.is_some(),
        "the Audit policy (origin: Pipeline) warns: {}",
        out.stderr
    );
    assert!(
        !has_step(&object, "bookend-provenance"),
        "Audit injects nothing"
    );
    ctx.keep("PipelineRun-owned TaskRun", &object);

    let standalone = ctx
        .cluster
        .dry_run(&taskrun(TEAM_B, "alone-", "work"))
        .expect_ok("standalone dry-run");
    let alone = standalone.json();
    assert!(
        !has_step(&alone, "bookend-e2e-pipeline"),
        "standalone: {:?}",
        step_names(&alone)
    );
    assert!(
        !standalone.stderr.contains("org-provenance-audit"),
        "no audit warning for a standalone TaskRun: {}",
        standalone.stderr
    );
    ctx.keep("standalone dry-run", &alone);
    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-pipeline-only"])
        .expect_ok("delete the policy");
    format!(
        "owned: steps {:?}, warning {:?}; standalone: not matched",
        step_names(&object),
        audit.unwrap_or_default()
    )
}

/// `kubectl get clustersteppolicies` as a user reads it: name -> the other columns (READY,
/// REASON, MODE, PRIORITY, AGE).
fn policy_table(cluster: &Cluster) -> HashMap<String, Vec<String>> {
    let out = cluster
        .kubectl(&["get", "clustersteppolicies"])
        .expect_ok("kubectl get clustersteppolicies");
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "REASON", "MODE", "PRIORITY", "AGE"],
        "the printer columns"
    );
    lines
        .map(|l| {
            let mut cells = l.split_whitespace().map(str::to_owned);
            (cells.next().unwrap_or_default(), cells.collect())
        })
        .collect()
}

/// READY and REASON of a policy in `kubectl get clustersteppolicies`, until they are `want`.
fn poll_ready(cluster: &Cluster, name: &str, want: [&str; 2]) {
    poll(
        &format!("{name}: READY {} REASON {}", want[0], want[1]),
        Duration::from_secs(30),
        || {
            let table = policy_table(cluster);
            let row = table.get(name).cloned().unwrap_or_default();
            if row.len() >= 2 && row[0] == want[0] && row[1] == want[1] {
                Ok(())
            } else {
                Err(format!("{row:?}"))
            }
        },
    )
}

/// The core/v1 view of the Events in `namespace` matching a field selector.
fn events(cluster: &Cluster, namespace: &str, selector: &str) -> Vec<Value> {
    cluster.get_json(
        &["events", "-n", namespace, "--field-selector", selector],
        "kubectl get events",
    )["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls until an Event with `reason` matches `selector`; returns its message.
fn poll_event(cluster: &Cluster, namespace: &str, selector: &str, reason: &str) -> String {
    poll(
        &format!("a {reason} Event ({selector})"),
        Duration::from_secs(30),
        || {
            let found = events(cluster, namespace, selector);
            found
                .iter()
                .find(|e| e["reason"] == reason)
                .map(|e| e["message"].as_str().unwrap_or("").to_owned())
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        found.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
                    )
                })
        },
    )
}

fn scenario_policy_status(ctx: &mut Ctx) -> String {
    // The example policies are live.
    poll_ready(&ctx.cluster, "org-credentials", ["True", "Loaded"]);
    let table = policy_table(&ctx.cluster);
    assert_eq!(
        table["org-credentials"][2..4],
        ["Enforce", "10"],
        "MODE, PRIORITY"
    );
    assert_eq!(
        table["org-provenance-audit"][..3],
        ["True", "Loaded", "Audit"]
    );
    let org = ctx.cluster.get_json(
        &["clustersteppolicy", "org-credentials"],
        "the org-credentials policy",
    );
    assert_eq!(org["status"]["preSteps"], json!(["bookend-credentials"]));
    assert_eq!(org["status"]["volumes"], json!(["bookend-registry"]));

    // An invalid policy and the loser of a name clash reach the cluster only while the
    // validating webhook is absent (created meanwhile, or by a GitOps tool racing an install).
    ctx.cluster
        .kubectl(&["delete", "validatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the ValidatingWebhookConfiguration");
    let invalid = cluster_policy(
        "e2e-invalid",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("no-prefix")]}),
    );
    poll(
        "the apiserver to stop calling the validating webhook",
        Duration::from_secs(30),
        || ctx.cluster.apply(&invalid).succeeded(),
    );
    let mut clash = cluster_policy(
        "e2e-clash",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("bookend-credentials")]}),
    );
    ctx.cluster
        .apply(&clash)
        .expect_ok("apply a clashing policy");
    poll_ready(&ctx.cluster, "e2e-invalid", ["False", "Invalid"]);
    poll_ready(&ctx.cluster, "e2e-clash", ["False", "Conflict"]);
    let message = |name: &str| {
        let p = ctx.cluster.get_json(&["clustersteppolicy", name], name);
        p["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let why_invalid = message("e2e-invalid");
    assert!(
        why_invalid.starts_with("spec.preSteps[0].name: step name \"no-prefix\""),
        "the field and the problem: {why_invalid}"
    );
    let why_clash = message("e2e-clash");
    assert!(
        why_clash.contains("already used by ClusterStepPolicy/org-credentials"),
        "the policy that keeps the name: {why_clash}"
    );
    let wide = ctx
        .cluster
        .kubectl(&["get", "clustersteppolicy", "e2e-clash", "-o", "wide"])
        .expect_ok("kubectl get -o wide")
        .stdout;
    assert!(
        wide.contains("MESSAGE") && wide.contains("ClusterStepPolicy/org-credentials"),
        "{wide}"
    );
    // Cluster-scoped objects' Events go to the default namespace.
    poll_event(
        &ctx.cluster,
        "default",
        "involvedObject.name=e2e-invalid",
        "InvalidPolicy",
    );
    poll_event(
        &ctx.cluster,
        "default",
        "involvedObject.name=e2e-clash",
        "PolicyConflict",
    );
    // A loser is inactive: its step is not injected (the org's is, once).
    let probe = ctx
        .cluster
        .dry_run(&taskrun(TEAM_B, "status-", "work"))
        .expect_ok("dry-run in team-b")
        .json();
    assert_eq!(
        step_names(&probe)
            .iter()
            .filter(|s| *s == "bookend-credentials")
            .count(),
        1
    );

    // Back to normal, then an edit: the loser renames its step and becomes Ready; the
    // condition follows the new generation.
    helm_upgrade(&ctx.cluster, &[])
        .expect_ok("helm upgrade restores the ValidatingWebhookConfiguration");
    clash["spec"]["preSteps"] = json!([busybox_step("bookend-e2e-renamed")]);
    let applied = poll(
        "the fixed policy through the restored webhook",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.apply(&clash);
            out.succeeded().map(|()| out.json())
        },
    );
    let generation = applied["metadata"]["generation"]
        .as_i64()
        .expect("generation");
    assert!(
        generation >= 2,
        "an edit bumps the generation: {generation}"
    );
    poll_ready(&ctx.cluster, "e2e-clash", ["True", "Loaded"]);
    let fixed = ctx
        .cluster
        .get_json(&["clustersteppolicy", "e2e-clash"], "e2e-clash");
    assert_eq!(fixed["status"]["observedGeneration"], json!(generation));
    assert_eq!(
        fixed["status"]["conditions"][0]["observedGeneration"],
        json!(generation)
    );
    assert_eq!(fixed["status"]["preSteps"], json!(["bookend-e2e-renamed"]));
    let loaded = poll(
        "a PolicyLoaded Event for the new generation",
        Duration::from_secs(30),
        || {
            events(
                &ctx.cluster,
                "default",
                "involvedObject.name=e2e-clash,reason=PolicyLoaded",
            )
            .iter()
            .filter_map(|e| e["message"].as_str())
            .find(|m| m.starts_with(&format!("generation {generation}: ")))
            .map(str::to_owned)
            .ok_or_else(|| "none yet".to_owned())
        },
    );
    // Nothing flaps: with no change, the status is not written again.
    let rv = |c: &Cluster| {
        c.get_json(&["clustersteppolicy", "e2e-clash"], "e2e-clash")["metadata"]["resourceVersion"]
            .clone()
    };
    let before = rv(&ctx.cluster);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rv(&ctx.cluster), before, "no status write without a change");
    for name in ["e2e-invalid", "e2e-clash"] {
        ctx.cluster
            .kubectl(&["delete", "clustersteppolicy", name])
            .expect_ok("delete");
    }
    format!(
        "examples READY True; invalid: False/Invalid ({why_invalid:.60}...); clash: False/Conflict; \
         fixed at generation {generation}: True/Loaded, observedGeneration {generation}; \
         Event {loaded:?}"
    )
}

fn scenario_taskrun_events(ctx: &mut Ctx) -> String {
    // A dry run first: were it to get an Event, it would come before the real one's.
    let mut dry = taskrun(TEAM_A, "", "work");
    dry["metadata"] = json!({"name": "events-dry-run", "namespace": TEAM_A});
    ctx.cluster.dry_run(&dry).expect_ok("dry-run");
    // A real one, by generateName: the Event names the generated name and the uid.
    let created = ctx
        .cluster
        .create(&taskrun(TEAM_A, "events-", "work"))
        .expect_ok("create a TaskRun")
        .json();
    let (name, uid) = (
        metadata_str(&created, "name"),
        metadata_str(&created, "uid"),
    );
    let injected = poll_event(
        &ctx.cluster,
        TEAM_A,
        &format!("involvedObject.uid={uid}"),
        "StepsInjected",
    );
    assert!(
        injected.contains("ClusterStepPolicy/org-credentials: bookend-credentials")
            && injected.contains("ClusterStepPolicy/org-sbom: bookend-sbom, bookend-sbom-upload"),
        "policies and steps: {injected}"
    );
    let event = &events(&ctx.cluster, TEAM_A, &format!("involvedObject.uid={uid}"))[0];
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["involvedObject"]["name"], json!(name));
    assert_eq!(event["reportingComponent"], "bookend");
    // A remote Task: a Warning that says which policies skipped it and why.
    let remote = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "events-remote-", "namespace": TEAM_A},
        "spec": {"taskRef": {"resolver": "git", "params": [
            {"name": "url", "value": "https://example.com/org/tasks.git"},
            {"name": "pathInRepo", "value": "build.yaml"},
        ]}},
    });
    let remote = ctx
        .cluster
        .create(&remote)
        .expect_ok("create a remote-Task TaskRun")
        .json();
    let skipped = poll_event(
        &ctx.cluster,
        TEAM_A,
        &format!("involvedObject.uid={}", metadata_str(&remote, "uid")),
        "PolicySkipped",
    );
    assert!(
        skipped.contains("remote Task (git resolver)")
            && skipped.contains("ClusterStepPolicy/org-credentials")
            && skipped.contains("remoteTaskRef: Skip"),
        "{skipped}"
    );
    let dry_events = events(&ctx.cluster, TEAM_A, "involvedObject.name=events-dry-run");
    assert!(
        dry_events.is_empty(),
        "no Event for a dry run: {dry_events:?}"
    );
    let (_, metrics) = ctx.bookend.admin_get("/metrics").expect("/metrics");
    let posted = metrics
        .lines()
        .find(|l| l.starts_with(r#"bookend_events_total{regarding="taskrun",result="success"}"#))
        .unwrap_or("")
        .to_owned();
    format!("{name}: {injected:?}; remote: {skipped:?}; dry run: none; {posted}")
}

fn scenario_policy_reports(ctx: &mut Ctx) -> String {
    // Without the CRD (the chart's default) bookend said so once and carried on.
    let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
    assert!(
        log.contains("PolicyReport CRD (wgpolicyk8s.io/v1alpha2) not installed"),
        "bookend logs the missing CRD"
    );
    assert!(
        !ctx.cluster
            .kubectl(&["get", "crd", "policyreports.wgpolicyk8s.io"])
            .ok(),
        "no PolicyReport CRD yet"
    );
    // The chart installs it on request; bookend finds it without a restart.
    helm_upgrade(&ctx.cluster, &["--set", "policyReports.installCRD=true"])
        .expect_ok("helm upgrade --set policyReports.installCRD=true");
    poll(
        "the PolicyReport CRD in discovery",
        Duration::from_secs(60),
        || {
            ctx.cluster
                .kubectl(&["get", "policyreports", "-A"])
                .succeeded()
        },
    );
    poll("bookend to find the CRD", Duration::from_secs(60), || {
        let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
        if log.contains("PolicyReport CRD found") {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });

    // An Audit policy for team-c whose step needs a param: one TaskRun passes it (would
    // inject), one does not (would deny), one has a remote Task (skipped).
    let mut step = busybox_step("bookend-e2e-audit");
    step["args"] = json!(["echo $(params.release)"]);
    let policy = cluster_policy(
        "e2e-audit",
        json!({"mode": "Audit", "match": {"namespaces": ["team-c"]}, "postSteps": [step]}),
    );
    ctx.cluster
        .apply(&policy)
        .expect_ok("apply the Audit policy");
    let with_param = json!({
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "audit-pass-", "namespace": "team-c"},
        "spec": {"params": [{"name": "release", "value": "1.0"}],
                 "taskSpec": {"params": [{"name": "release"}],
                              "steps": [{"name": "work", "image": "docker.io/library/alpine:3.20", "script": "echo"}]}},
    });
    ctx.cluster
        .poll_dry_run("the Audit policy to be loaded", &with_param, |out| {
            if out
                .warnings()
                .iter()
                .any(|w| w.contains("ClusterStepPolicy/e2e-audit would inject"))
            {
                Ok(())
            } else {
                Err(out.stderr.clone())
            }
        });
    let uid_of = |object: &Value| {
        let out = ctx
            .cluster
            .create(object)
            .expect_ok("create a TaskRun in team-c");
        metadata_str(&out.json(), "uid")
    };
    let pass = uid_of(&with_param);
    let fail = uid_of(&taskrun("team-c", "audit-fail-", "work"));
    let skip = uid_of(&json!({
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "audit-skip-", "namespace": "team-c"},
        "spec": {"taskRef": {"resolver": "git"}},
    }));
    let report = poll(
        "the three results in team-c's PolicyReport",
        Duration::from_secs(60),
        || {
            let out = ctx.cluster.kubectl(&[
                "get",
                "policyreport",
                "bookend-audit",
                "-n",
                "team-c",
                "-o",
                "json",
            ]);
            let report = out.try_json()?;
            let n = report["results"].as_array().map_or(0, Vec::len);
            if n >= 3 {
                Ok(report)
            } else {
                Err(format!("{n} results"))
            }
        },
    );
    let results = report["results"].as_array().unwrap();
    let result_for = |uid: &str| {
        results
            .iter()
            .find(|r| r["resources"][0]["uid"] == uid)
            .unwrap_or_else(|| panic!("no result for {uid}: {report}"))
    };
    let (p, f, k) = (result_for(&pass), result_for(&fail), result_for(&skip));
    for r in [p, f, k] {
        assert_eq!(r["policy"], "ClusterStepPolicy/e2e-audit");
        assert_eq!(r["source"], "bookend");
        assert_eq!(r["properties"]["steps"], "bookend-e2e-audit");
        assert_eq!(r["resources"][0]["kind"], "TaskRun");
    }
    assert_eq!(
        (p["result"].as_str(), p["properties"]["outcome"].as_str()),
        (Some("pass"), Some("would-inject"))
    );
    assert_eq!(
        (f["result"].as_str(), f["properties"]["outcome"].as_str()),
        (Some("fail"), Some("would-deny"))
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap_or("")
            .contains("non-existent variable"),
        "why it would be denied: {}",
        f["message"]
    );
    assert_eq!(
        (k["result"].as_str(), k["properties"]["outcome"].as_str()),
        (Some("skip"), Some("skipped"))
    );
    assert!(
        k["message"].as_str().unwrap_or("").contains("remote Task"),
        "{}",
        k["message"]
    );
    assert_eq!(
        report["summary"],
        json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 1}),
        "the summary counts them"
    );
    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-audit"])
        .expect_ok("delete the Audit policy");
    format!(
        "no CRD: logged, serving; CRD installed by helm upgrade and found without a restart; \
         team-c: pass/fail/skip = {}/{}/{} ({:.70}...)",
        p["result"],
        f["result"],
        k["result"],
        f["message"].as_str().unwrap_or("")
    )
}

/// Remote ports of the ESTABLISHED IPv4 TCP connections to 127.0.0.1:`port` (/proc/net/tcp).
fn established_peers(port: u16) -> std::collections::HashSet<u16> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (l, r, state) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
            if *l != local || *state != "01" {
                return None;
            }
            u16::from_str_radix(r.rsplit(':').next()?, 16).ok()
        })
        .collect()
}

fn scenario_rotation(ctx: &mut Ctx) -> String {
    let old_serial = poll("a TLS handshake", Duration::from_secs(10), || {
        ctx.bookend.served_serial(&ctx.certs.ca())
    });
    let file = example("examples/taskruns/build.yaml");
    let calls = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let kubectl = ctx.cluster.kubectl.clone();
    // Stops the loop also when an assertion below panics (the scenario is caught and the
    // next one runs on the same cluster).
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let _stop_guard = StopOnDrop(stop.clone());
    let loop_thread = {
        let (calls, stop) = (calls.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            let mut n = 0;
            while n < 300 && (n < 50 || !stop.load(Ordering::SeqCst)) {
                let out = kubectl.with_file(&["create", "--dry-run=server"], &file);
                let injected = out
                    .try_json()
                    .is_ok_and(|o| has_step(&o, "bookend-credentials"));
                if !out.ok() || !injected {
                    failures.push(format!("call {n}: {} {}", out.status, out.stderr.trim()));
                }
                n += 1;
                calls.store(n, Ordering::SeqCst);
            }
            failures
        })
    };
    // Waits until the loop's call count satisfies `enough`.
    let wait_for_calls = |what: &str, enough: &dyn Fn(usize) -> bool| {
        poll(what, Duration::from_secs(60), || {
            let n = calls.load(Ordering::SeqCst);
            if enough(n) {
                Ok(())
            } else {
                Err(format!("{n} calls"))
            }
        })
    };
    wait_for_calls("10 admissions before the rotation", &|n| n >= 10);
    let new_serial = ctx.certs.rotate("v2");
    let rotated_at = calls.load(Ordering::SeqCst);
    let switched = Instant::now();
    poll(
        "new handshakes to get the new certificate",
        Duration::from_secs(30),
        || {
            let serial = ctx.bookend.served_serial(&ctx.certs.ca())?;
            if serial == new_serial {
                Ok(())
            } else {
                Err(format!("serial {serial}"))
            }
        },
    );
    let switch_took = switched.elapsed();
    let switched_at = calls.load(Ordering::SeqCst);

    // The apiserver keeps its (HTTP/2) connection to the webhook, set up with the old
    // certificate. To make it handshake again while the loop runs, give it a new client: its
    // webhook client cache is keyed by clientConfig, so re-register the configurations with a
    // different caBundle (the same CA twice, as during a CA rollover). A connection from the
    // apiserver that appears now was necessarily set up with the new certificate.
    let before = established_peers(ctx.bookend.port);
    let ca_pem = std::fs::read(ctx.certs.ca()).expect("ca.crt");
    let doubled =
        base64::engine::general_purpose::STANDARD.encode([&ca_pem[..], &ca_pem[..]].concat());
    helm_upgrade(&ctx.cluster, &["--set", &format!("tls.caBundle={doubled}")])
        .expect_ok("helm upgrade: re-register the webhooks with a new caBundle");
    let new_peer = poll(
        "the apiserver to open a new connection to bookend",
        Duration::from_secs(30),
        || {
            let now = established_peers(ctx.bookend.port);
            now.difference(&before)
                .next()
                .copied()
                .ok_or_else(|| format!("connections from ports {now:?}, before {before:?}"))
        },
    );
    let reconnected_at = calls.load(Ordering::SeqCst);
    wait_for_calls(
        "20 admissions after the switch, 10 after the reconnect",
        &|n| n >= switched_at + 20 && n >= reconnected_at + 10,
    );
    stop.store(true, Ordering::SeqCst);
    let failures = loop_thread.join().expect("the admission loop");
    let total = calls.load(Ordering::SeqCst);
    assert!(
        failures.is_empty(),
        "failed admissions during rotation: {failures:#?}"
    );
    assert_ne!(old_serial, new_serial);
    let (_, metrics) = ctx.bookend.admin_get("/metrics").expect("/metrics");
    let reloads: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("bookend_certificate_reloads"))
        .collect();
    assert!(
        reloads.iter().any(|l| l
            .starts_with(r#"bookend_certificate_reloads_total{result="success"}"#)
            && l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .is_some_and(|v| v >= 1.0)),
        "a successful reload is counted: {reloads:?}"
    );
    let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
    let logged = log.to_lowercase().contains(&new_serial.to_lowercase());
    assert!(
        established_peers(ctx.bookend.port).contains(&new_peer),
        "the apiserver's new connection (from port {new_peer}) is still in use"
    );
    format!(
        "apiserver reconnected from port {new_peer} (was {before:?}) after call {reconnected_at}; \
         {total} dry-run admissions, 0 failed (rotation after call {rotated_at}, new serial served \
         {:.1}s later, {} calls after); serial {old_serial} -> {new_serial}; {reloads:?}; \
         new serial in log: {logged}",
        switch_took.as_secs_f64(),
        total - switched_at
    )
}

fn scenario_fail_closed(ctx: &mut Ctx) -> String {
    ctx.cluster
        .kubectl(&["delete", "mutatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the MutatingWebhookConfiguration");
    let bare = taskrun(TEAM_A, "bare-", "work");
    let out = poll(
        "the apiserver to drop the mutating webhook",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            if out.ok() {
                Err(format!("admitted with steps {:?}", step_names(&out.json())))
            } else if out.stderr.contains("taskruns.validate.bookend.dev") {
                Ok(out)
            } else {
                Err(out.stderr)
            }
        },
    );
    assert!(
        out.stderr.contains("bookend: the TaskRun lacks the steps"),
        "bookend's backstop message: {}",
        out.stderr
    );
    let real = ctx.cluster.create(&bare);
    assert!(!real.ok(), "a real create is refused too");
    // A namespace no Enforce policy covers is not blocked.
    let other = ctx
        .cluster
        .dry_run(&taskrun("default", "free-", "work"))
        .expect_ok("a TaskRun in an uncovered namespace");
    let object = other.json();
    assert_eq!(step_names(&object), vec!["work"]);
    ctx.keep("uncovered namespace, no mutation", &object);
    first_line(&out.stderr)
}

fn scenario_tekton_validate(ctx: &mut Ctx) -> String {
    let path = ctx.work.join("returned.json");
    let objects: Vec<&Value> = ctx.returned.iter().map(|(_, o)| o).collect();
    std::fs::write(&path, serde_json::to_vec_pretty(&objects).unwrap()).expect("write");
    let mut cmd = Command::new(tools().path("tekton-validate"));
    cmd.arg("--json").arg(&path);
    let out = run(cmd, None);
    let results: Vec<Value> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("tekton-validate --json: {e}: {} {}", out.stdout, out.stderr));
    let bad: Vec<String> = results
        .iter()
        .filter(|r| r["ok"] != json!(true))
        .map(|r| {
            let label = r["doc"]
                .as_u64()
                .and_then(|i| ctx.returned.get(i as usize))
                .map(|(l, _)| l.as_str())
                .unwrap_or("?");
            format!("{label}: {}", r["error"])
        })
        .collect();
    assert!(
        bad.is_empty(),
        "Tekton rejects objects the apiserver returned: {bad:#?}"
    );
    assert_eq!(results.len(), ctx.returned.len());
    assert!(
        out.ok(),
        "tekton-validate exit {}: {}",
        out.status,
        out.stderr
    );
    format!("{} objects, all OK", results.len())
}

fn scenario_helm_upgrade_restores(ctx: &mut Ctx) -> String {
    // The fail-closed scenario deleted the MutatingWebhookConfiguration (a break glass).
    assert!(
        !ctx.cluster
            .kubectl(&["get", "mutatingwebhookconfiguration", "bookend.dev"])
            .ok(),
        "the previous scenario deleted it"
    );
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade --reuse-values");
    let probe = taskrun(TEAM_A, "restored-", "work");
    let object = ctx.poll_injected(
        "the re-created mutating webhook",
        &probe,
        "bookend-credentials",
        "dry-run after helm upgrade restored the webhook",
    );
    format!("re-created; steps {:?}", step_names(&object))
}

/// The resourceVersion at which `name` was deleted: the DELETED event of a watch on the
/// collection `path` replayed from `since` (the API server's watch cache keeps recent events).
fn deleted_at(cluster: &Cluster, path: &str, name: &str, since: u64) -> u64 {
    let url = format!("{path}?watch=1&resourceVersion={since}&timeoutSeconds=2");
    let out = cluster.kubectl(&["get", "--raw", &url]).expect_ok("watch");
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "DELETED" && e["object"]["metadata"]["name"] == name)
        .and_then(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no DELETED event for {name} in {path}: {}", out.stdout))
}

/// A sample of the API server's /metrics with these labels (any order), and its value.
fn apiserver_sample(metrics: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

fn scenario_uninstall(ctx: &mut Ctx) -> String {
    // kubectl's own `get -o json` list has no resourceVersion; the API's list has.
    let since: u64 = ctx
        .cluster
        .kubectl(&["get", "--raw", "/api/v1/namespaces"])
        .expect_ok("list namespaces")
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list's resourceVersion")
        .parse()
        .expect("a number");
    // bookend goes away first, as it would if its pods were gone: the mutation fails open and
    // the backstop fails closed, so TaskRun creation in team-a is refused.
    ctx.bookend.stop();
    let bare = taskrun(TEAM_A, "down-", "work");
    let out = poll(
        "the apiserver to find bookend gone",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            if !out.ok()
                && out.stderr.contains("failed calling webhook")
                && out.stderr.contains("taskruns.validate.bookend.dev")
            {
                Ok(out)
            } else {
                Err(format!("{}: {}", out.status, out.stderr))
            }
        },
    );
    let refused = first_line(&out.stderr);
    // The API server counted both, under the names and labels the chart's alerts read
    // (BookendMutationFailingOpen, BookendWebhookCallsFailing, BookendWebhookLatencyHigh).
    let metrics = ctx
        .cluster
        .kubectl(&["get", "--raw", "/metrics"])
        .expect_ok("the apiserver's /metrics")
        .stdout;
    for (family, labels) in [
        (
            "apiserver_admission_webhook_fail_open_count",
            &[("name", "taskruns.mutate.bookend.dev"), ("type", "admit")][..],
        ),
        (
            "apiserver_admission_webhook_rejection_count",
            &[
                ("name", "taskruns.validate.bookend.dev"),
                ("error_type", "calling_webhook_error"),
            ][..],
        ),
        (
            "apiserver_admission_webhook_rejection_count",
            &[
                ("name", "taskruns.mutate.bookend.dev"),
                ("error_type", "no_error"),
            ][..],
        ),
        (
            "apiserver_admission_webhook_admission_duration_seconds_bucket",
            &[("name", "taskruns.validate.bookend.dev"), ("le", "+Inf")][..],
        ),
    ] {
        let value = apiserver_sample(&metrics, family, labels);
        assert!(
            value.is_some_and(|v| v >= 1.0),
            "the apiserver exports {family} with {labels:?} >= 1: {value:?}"
        );
    }

    let out = helm(
        &ctx.cluster,
        &["uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE],
    )
    .expect_ok("helm uninstall");
    let kept = out
        .stdout
        .lines()
        .filter(|l| l.contains("CustomResourceDefinition"))
        .count();
    let left = ctx
        .cluster
        .kubectl(&[
            "get",
            "mutatingwebhookconfigurations,validatingwebhookconfigurations",
            "-o",
            "name",
        ])
        .expect_ok("list webhook configurations")
        .stdout;
    assert!(
        !left.contains("bookend.dev"),
        "webhook configurations left: {left}"
    );
    // bookend is still down, and TaskRuns are created again, unmutated.
    let out = poll(
        "TaskRun creation without bookend",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            out.succeeded().map(|()| out)
        },
    );
    assert_eq!(step_names(&out.json()), vec!["work"]);
    // The CRDs stay (helm.sh/resource-policy: keep), and so do the policies.
    let policies = ctx
        .cluster
        .get_json(&["clustersteppolicies"], "policies after uninstall");
    let count = policies["items"].as_array().map_or(0, Vec::len);
    assert!(count > 0, "the policies survive the uninstall");

    // The order: both webhook configurations were deleted before the Service and Deployment
    // that back them (Helm's uninstall order), so no fail-closed webhook outlived its pods.
    let admission = "/apis/admissionregistration.k8s.io/v1";
    let validating = deleted_at(
        &ctx.cluster,
        &format!("{admission}/validatingwebhookconfigurations"),
        "bookend.dev",
        since,
    );
    let mutating = deleted_at(
        &ctx.cluster,
        &format!("{admission}/mutatingwebhookconfigurations"),
        "bookend.dev",
        since,
    );
    let service = deleted_at(
        &ctx.cluster,
        &format!("/api/v1/namespaces/{RELEASE_NAMESPACE}/services"),
        RELEASE,
        since,
    );
    let deployment = deleted_at(
        &ctx.cluster,
        &format!("/apis/apps/v1/namespaces/{RELEASE_NAMESPACE}/deployments"),
        RELEASE,
        since,
    );
    assert!(
        validating.max(mutating) < service.min(deployment),
        "deleted at resourceVersion: validating {validating}, mutating {mutating}, \
         service {service}, deployment {deployment}"
    );
    format!(
        "with bookend down: {refused:?}; uninstall deleted validating@{validating}, \
         mutating@{mutating}, then service@{service}, deployment@{deployment}; TaskRuns \
         admitted again; CRDs kept ({kept} listed by helm), {count} policies kept"
    )
}

/// The Secret's `tls.crt`, `tls.key`, `ca.crt` (PEM).
fn tls_secret(cluster: &Cluster) -> [String; 3] {
    let secret = cluster.get_json(
        &["secret", "bookend-tls", "--namespace", RELEASE_NAMESPACE],
        "the chart's serving Secret",
    );
    ["tls.crt", "tls.key", "ca.crt"].map(|k| {
        let b64 = secret["data"][k]
            .as_str()
            .unwrap_or_else(|| panic!("no {k}"));
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .expect("PEM")
    })
}

/// Every webhook's caBundle, decoded.
fn ca_bundles(cluster: &Cluster) -> Vec<String> {
    [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ]
    .iter()
    .flat_map(|k| {
        cluster.get_json(&[k, "bookend.dev"], "a webhook configuration")["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    })
    .map(|w| {
        let b64 = w["clientConfig"]["caBundle"].as_str().unwrap_or("");
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .unwrap()
    })
    .collect()
}

fn serial_of(pem: &str) -> String {
    let mut cmd = Command::new("openssl");
    cmd.args(["x509", "-noout", "-serial"]);
    let out = run(cmd, Some(pem.as_bytes())).expect_ok("openssl x509 -serial");
    out.stdout.trim().trim_start_matches("serial=").to_owned()
}

fn scenario_generated_certificate(ctx: &mut Ctx) -> String {
    // The chart's default certificate, end to end: a fresh install (the kept CRDs are adopted)
    // generates a CA and a serving certificate for the Service's names and, as webhook.url is
    // set, 127.0.0.1. bookend serves the Secret's files; the API server must trust them.
    let port = free_port();
    helm(
        &ctx.cluster,
        &[
            "install",
            RELEASE,
            "charts/bookend",
            "--namespace",
            RELEASE_NAMESPACE,
            "--set",
            &format!("webhook.url=https://127.0.0.1:{port}"),
        ],
    )
    .expect_ok("helm install with the chart's certificate");
    let [crt, key, ca] = tls_secret(&ctx.cluster);
    let bundles = ca_bundles(&ctx.cluster);
    assert_eq!(
        bundles.len(),
        5,
        "two mutating and three validating webhooks"
    );
    assert!(
        bundles.iter().all(|b| *b == ca),
        "every caBundle is the Secret's CA"
    );

    // What the kubelet does with a Secret volume: files behind a symlink swapped atomically.
    let dir = ctx.work.join("generated");
    let write = |name: &str, files: [&str; 3]| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).expect("mkdir");
        for (file, text) in ["tls.crt", "tls.key", "ca.crt"].iter().zip(files) {
            std::fs::write(d.join(file), text).expect("write");
        }
        let tmp = dir.join("live.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(name, &tmp).expect("symlink");
        std::fs::rename(&tmp, dir.join("live")).expect("swap live");
    };
    write("v1", [&crt, &key, &ca]);
    let kubeconfig = service_account_kubeconfig(&ctx.cluster, &dir.join("bookend.kubeconfig"));
    ctx.bookend = Bookend::start(
        &dir,
        port,
        &dir.join("live/tls.crt"),
        &dir.join("live/tls.key"),
        &kubeconfig,
    );
    ctx.bookend.wait_ready(Duration::from_secs(60));
    let probe = taskrun(TEAM_A, "generated-", "work");
    ctx.poll_injected(
        "the API server to trust the chart's certificate",
        &probe,
        "bookend-credentials",
        "dry-run with the chart's certificate",
    );

    // An upgrade keeps everything: the same certificate, the same bundle.
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade");
    assert_eq!(tls_secret(&ctx.cluster), [crt.clone(), key, ca.clone()]);
    assert_eq!(ca_bundles(&ctx.cluster), bundles, "caBundle unchanged");

    // Renewal on demand: without its Secret, the next upgrade issues a new serving certificate
    // from the kept CA, and the bundle stays.
    ctx.cluster
        .kubectl(&[
            "delete",
            "secret",
            "bookend-tls",
            "--namespace",
            RELEASE_NAMESPACE,
        ])
        .expect_ok("delete the serving Secret");
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade renews");
    let [crt2, key2, ca2] = tls_secret(&ctx.cluster);
    assert_ne!(crt2, crt, "a new serving certificate");
    assert_eq!(ca2, ca, "the same CA");
    assert_eq!(
        ca_bundles(&ctx.cluster),
        bundles,
        "caBundle unchanged by the renewal"
    );
    let (old_serial, new_serial) = (serial_of(&crt), serial_of(&crt2));
    write("v2", [&crt2, &key2, &ca2]);
    let ca_file = dir.join("v1/ca.crt");
    poll(
        "bookend to serve the renewed certificate",
        Duration::from_secs(30),
        || {
            let serial = ctx.bookend.served_serial(&ca_file)?;
            if serial == new_serial {
                Ok(())
            } else {
                Err(format!("serial {serial}"))
            }
        },
    );
    ctx.poll_injected(
        "admission with the renewed certificate",
        &taskrun(TEAM_A, "renewed-", "work"),
        "bookend-credentials",
        "dry-run with the renewed certificate",
    );

    // Renewal by date: an upgrade within renewBeforeDays of the expiry (here: a window longer
    // than the validity) issues a new serving certificate, same CA.
    let window = |v: &str| {
        helm_upgrade(&ctx.cluster, &["--set", v]).expect_ok(&format!("helm upgrade --set {v}"))
    };
    window("tls.renewBeforeDays=400");
    let [crt3, _, ca3] = tls_secret(&ctx.cluster);
    assert_ne!(crt3, crt2, "renewed inside the window");
    assert_eq!(ca3, ca);
    // The CA by date: re-issued with the same key and subject, so the certificate the pods
    // still serve verifies against the new bundle at once.
    window("tls.renewBeforeDays=90");
    window("tls.caRenewBeforeDays=4000");
    let [crt4, _, ca4] = tls_secret(&ctx.cluster);
    assert_eq!(
        crt4, crt3,
        "the serving certificate is outside its window now"
    );
    assert_ne!(ca4, ca, "a new CA certificate");
    assert!(
        ca_bundles(&ctx.cluster).iter().all(|b| *b == ca4),
        "the bundle is the new CA"
    );
    let pubkey = |pem: &str| {
        let mut cmd = Command::new("openssl");
        cmd.args(["x509", "-noout", "-pubkey"]);
        run(cmd, Some(pem.as_bytes()))
            .expect_ok("openssl x509 -pubkey")
            .stdout
    };
    assert_eq!(pubkey(&ca4), pubkey(&ca), "the CA keeps its key");
    std::fs::write(dir.join("ca4.crt"), &ca4).expect("write");
    poll(
        "the served certificate to verify against the re-issued CA",
        Duration::from_secs(30),
        || ctx.bookend.served_serial(&dir.join("ca4.crt")).map(|_| ()),
    );
    ctx.poll_injected(
        "admission with the re-issued CA in caBundle",
        &taskrun(TEAM_A, "new-ca-", "work"),
        "bookend-credentials",
        "dry-run with the re-issued CA",
    );
    helm(
        &ctx.cluster,
        &["uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE],
    )
    .expect_ok("helm uninstall");
    format!(
        "generated CA trusted by all 4 webhooks; upgrade kept it; renewal {old_serial} -> \
         {new_serial} under the same CA and caBundle, served without a restart; renewed by \
         date; CA re-issued with its key, served certificate still trusted"
    )
}

// ---------------------------------------------------------------------------------------------

#[test]
fn real_apiserver_calls_bookend() {
    let mut clock = Clock::new("e2e");
    tools();
    clock.done("tools (build-tools.sh)");

    let tmp = tempfile::Builder::new()
        .prefix("bookend-e2e-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    println!("work directory: {}", work.display());
    let cluster = Cluster::start(work.join("cluster"));
    clock.done("etcd + kube-apiserver + Tekton CRDs (start-cluster.sh)");

    // The chart, as a user installs it, but with the webhooks pointed at this machine. Its
    // webhook configurations are live from here on, before bookend runs: nothing creates
    // TaskRuns or policies until it is ready.
    let certs = Certs::create(work.join("certs"));
    let port = free_port();
    helm_install(&cluster, port, &certs.ca_bundle_b64()).expect_ok("helm install");
    check_installed_webhooks(&cluster, port, &certs.ca_bundle_b64());
    // `kubectl wait` fails ("accessor error") while a CRD has no status yet: poll it.
    poll(
        "the chart's CRDs Established",
        Duration::from_secs(60),
        || {
            cluster
                .kubectl(&[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=10s",
                    "crd/clustersteppolicies.bookend.dev",
                    "crd/steppolicies.bookend.dev",
                ])
                .succeeded()
        },
    );
    poll("policies in discovery", Duration::from_secs(30), || {
        cluster
            .kubectl(&["get", "clustersteppolicies.v1alpha1.bookend.dev"])
            .succeeded()
    });
    let crds = cluster.get_json(&["crd", "clustersteppolicies.bookend.dev"], "the CRD");
    assert_eq!(
        crds["metadata"]["annotations"]["helm.sh/resource-policy"],
        json!("keep")
    );
    clock.done("helm install (CRDs, RBAC, Deployment, webhooks, ...)");

    // bookend authenticates as the chart's ServiceAccount: the chart's RBAC must suffice.
    let sa_kubeconfig = service_account_kubeconfig(&cluster, &work.join("bookend.kubeconfig"));
    let mut bookend = Bookend::start(
        &work,
        port,
        &certs.live("tls.crt"),
        &certs.live("tls.key"),
        &sa_kubeconfig,
    );
    bookend.wait_ready(Duration::from_secs(60));
    clock.done("bookend serve --source kubernetes as the chart's ServiceAccount until /readyz");

    for ns in [TEAM_A, TEAM_B, "team-c"] {
        cluster
            .kubectl(&["create", "namespace", ns])
            .expect_ok("create namespace");
    }
    // Through policies.validate.bookend.dev, i.e. bookend.
    cluster
        .kubectl(&[
            "apply",
            "-f",
            &example("examples/policies").display().to_string(),
        ])
        .expect_ok("apply examples/policies");
    let probe = taskrun(TEAM_A, "probe-", "work");
    cluster.poll_steps("the apiserver to call bookend", &probe, |steps| {
        includes(steps, "bookend-credentials")
    });
    clock.done("namespaces, example policies, webhooks live");

    let mut ctx = Ctx {
        bookend,
        cluster,
        certs,
        work: work.clone(),
        returned: Vec::new(),
    };
    type Scenario = fn(&mut Ctx) -> String;
    let scenarios: [(&str, Scenario); 21] = [
        (
            "attack classes of tests/security: every case's answer and invariant",
            scenario_attack_classes,
        ),
        (
            "dry-run shows steps and warnings, stores nothing",
            scenario_dry_run,
        ),
        (
            "create persists steps in order; rerun injects nothing twice",
            scenario_create_and_rerun,
        ),
        (
            "v1beta1 TaskRun patched with v1beta1 names",
            scenario_v1beta1,
        ),
        (
            "reserved-prefix user step refused",
            scenario_reserved_prefix,
        ),
        (
            "policy objects: invalid refused, new live, deleted stops",
            scenario_policy_lifecycle,
        ),
        (
            "policy status: READY, reasons, observedGeneration, Events",
            scenario_policy_status,
        ),
        (
            "StepPolicy applies only in its namespace",
            scenario_step_policy,
        ),
        (
            "a team policy cannot evict or wrap an org policy",
            scenario_team_cannot_evict_or_wrap_org,
        ),
        ("taskRef to a cluster Task is inlined", scenario_task_ref),
        (
            "Tekton controller's dry-run of a remote Task gets the steps",
            scenario_remote_task_dry_run,
        ),
        (
            "the Pod backstop: a remote Task's Pod without its steps is refused",
            scenario_pod_backstop,
        ),
        (
            "PipelineRun ownerReference matches origin: Pipeline",
            scenario_origin_pipeline,
        ),
        (
            "Events on TaskRuns: injected, skipped, none for dry runs",
            scenario_taskrun_events,
        ),
        (
            "PolicyReports for Audit policies: CRD missing, then installed",
            scenario_policy_reports,
        ),
        ("certificate rotation under load", scenario_rotation),
        (
            "fail-closed backstop without the mutating webhook",
            scenario_fail_closed,
        ),
        (
            "helm upgrade restores a deleted webhook configuration",
            scenario_helm_upgrade_restores,
        ),
        (
            "helm uninstall: webhooks first, TaskRuns admitted again",
            scenario_uninstall,
        ),
        (
            "the chart's own certificate: trusted, kept, renewed",
            scenario_generated_certificate,
        ),
        (
            "tekton-validate accepts every returned object",
            scenario_tekton_validate,
        ),
    ];
    let mut summary = Vec::new();
    for (name, scenario) in scenarios {
        summary.push(clock.scenario(name, || scenario(&mut ctx)));
    }

    println!("\n=== e2e against kube-apiserver: summary ===");
    for (_, line) in &summary {
        println!("{line}");
    }
    clock.print_phases();
    let failed = summary.iter().filter(|(ok, _)| !ok).count();
    if failed > 0 {
        println!("--- bookend log (tail)\n{}", tail(&ctx.bookend.log, 40));
        println!(
            "--- kube-apiserver log (tail)\n{}",
            tail(&ctx.cluster.dir.join("kube-apiserver.log"), 20)
        );
    }
    drop(ctx);
    if std::env::var_os("BOOKEND_E2E_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
    assert_eq!(
        failed, 0,
        "{failed} e2e scenario(s) failed (see the summary above)"
    );
}
