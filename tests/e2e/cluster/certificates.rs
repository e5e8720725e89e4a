//! Certificates: the test's own (`bookend certs`) rotated under load, then the chart's
//! generated certificate trusted, kept, renewed and re-issued.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

use crate::kube::{Cluster, free_port, poll, run};

use super::bookend::{Bookend, bookend_bin};
use super::helm::{RELEASE, RELEASE_NAMESPACE, helm, helm_upgrade, service_account_kubeconfig};
use super::objects::{example, has_step, taskrun};
use super::{Ctx, TEAM_A};

/// `bookend certs` output in `<dir>/v1`, served through the symlink `<dir>/live` so that a
/// rotation is one atomic rename (as Kubernetes updates a Secret volume).
pub(super) struct Certs {
    dir: PathBuf,
}

impl Certs {
    pub(super) fn create(dir: PathBuf) -> Self {
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

    pub(super) fn ca_bundle_b64(&self) -> String {
        std::fs::read_to_string(self.dir.join("v1/ca.crt.b64"))
            .expect("ca.crt.b64")
            .trim()
            .to_owned()
    }

    pub(super) fn live(&self, file: &str) -> PathBuf {
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

pub(super) fn scenario_rotation(ctx: &mut Ctx) -> String {
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

pub(super) fn scenario_generated_certificate(ctx: &mut Ctx) -> String {
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
        6,
        "two mutating and four validating webhooks"
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
