//! What every module of the webhook suite shares: a CA, a real server on port 0 with its files
//! in a temporary directory laid out like a Kubernetes Secret mount, HTTPS clients that verify
//! the CA and the SAN, and raw TLS connections for writing requests by hand.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bookend::policy::Settings;
use bookend::server::test_support::{self, Review};
use bookend::server::tls::TlsFiles;
use bookend::server::{Config, PolicySourceConfig};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The name the serving certificate is for; clients resolve it to the bound address.
pub const HOST: &str = "bookend.test";

/// A TaskRun CREATE as the API server sends it for a PipelineRun-owned TaskRun in team-a
/// (`tests/fixtures/README.md`).
pub const SAMPLE: &str = include_str!("../fixtures/admission-review-taskrun-pipeline.json");

/// The sample AdmissionReview, parsed.
pub fn sample_review() -> Value {
    serde_json::from_str(SAMPLE).expect("sample is JSON")
}

/// One pre-step and one post-step for every TaskRun in team-* namespaces.
pub const POLICY: &str = r#"apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata:
  name: test-bookends
spec:
  priority: 10
  match:
    namespaces: ["team-*"]
  preSteps:
    - name: bookend-hello
      image: docker.io/library/busybox:1.37
      command: ["/bin/sh", "-c"]
      args: ["echo hello"]
  postSteps:
    - name: bookend-bye
      image: docker.io/library/busybox:1.37
      command: ["echo", "bye"]
"#;

pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A test CA that signs serving and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn new() -> Self {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "bookend test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate and key (PEM) for `hosts`.
    pub fn leaf(&self, hosts: &[&str]) -> (String, String) {
        let mut params =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate and key, concatenated as one PEM (what reqwest's Identity reads).
    pub fn client_identity(&self, name: &str) -> String {
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        format!("{}{}", cert.pem(), key.serialize_pem())
    }
}

/// A directory like a Secret volume: `..data` → a timestamped directory holding the files,
/// and `tls.crt`/`tls.key` symlinks through `..data`. Updates swap `..data` atomically.
pub struct SecretDir {
    pub dir: PathBuf,
    generation: AtomicUsize,
}

impl SecretDir {
    pub fn new(dir: PathBuf, files: &[(&str, &str)]) -> Self {
        std::fs::create_dir_all(&dir).unwrap();
        let s = Self {
            dir,
            generation: AtomicUsize::new(0),
        };
        s.update(files);
        for (name, _) in files {
            std::os::unix::fs::symlink(format!("..data/{name}"), s.dir.join(name)).unwrap();
        }
        s
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes a new generation and swaps `..data` to it in one rename.
    pub fn update(&self, files: &[(&str, &str)]) {
        let n = self.generation.fetch_add(1, Ordering::SeqCst);
        let gen_name = format!("..gen_{n}");
        let gen_dir = self.dir.join(&gen_name);
        std::fs::create_dir_all(&gen_dir).unwrap();
        for (name, contents) in files {
            std::fs::write(gen_dir.join(name), contents).unwrap();
        }
        let tmp = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&gen_name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
    }
}

/// How to start a test server.
pub struct Options {
    /// Policy paths; default: one directory holding [`POLICY`].
    pub policies: Option<Vec<PathBuf>>,
    pub tasks: Vec<PathBuf>,
    pub client_ca: bool,
    /// How reviews are answered (a test may wrap [`bookend::admission::review`]).
    pub review: Review,
    pub header_read_timeout: Duration,
    pub request_timeout: Duration,
    pub drain_timeout: Duration,
    pub shutdown_linger: Duration,
    pub reload_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policies: None,
            tasks: Vec::new(),
            client_ca: false,
            review: bookend::admission::review,
            header_read_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
            shutdown_linger: Duration::ZERO,
            reload_interval: Duration::from_millis(100),
        }
    }
}

/// A running server and everything around it.
pub struct TestServer {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub ca: Ca,
    pub secret: SecretDir,
    pub policy_dir: PathBuf,
    pub tmp: tempfile::TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    pub handle: Option<JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(options: Options) -> Self {
        install_crypto();
        let tmp = tempfile::tempdir().unwrap();
        let ca = Ca::new();
        let (cert, key) = ca.leaf(&[HOST, "127.0.0.1"]);
        let ca_pem = ca.pem();
        let secret = SecretDir::new(
            tmp.path().join("tls"),
            &[("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &ca_pem)],
        );
        let policy_dir = tmp.path().join("policies");
        std::fs::create_dir_all(&policy_dir).unwrap();
        std::fs::write(policy_dir.join("10-test.yaml"), POLICY).unwrap();
        let config = Config {
            source: PolicySourceConfig::Files {
                policies: options.policies.unwrap_or_else(|| vec![policy_dir.clone()]),
                tasks: options.tasks,
            },
            settings: Settings::default(),
            tls: TlsFiles {
                cert: secret.path("tls.crt"),
                key: secret.path("tls.key"),
                client_ca: options.client_ca.then(|| secret.path("ca.crt")),
            },
            listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: "127.0.0.1:0".parse().unwrap(),
            header_read_timeout: options.header_read_timeout,
            request_timeout: options.request_timeout,
            drain_timeout: options.drain_timeout,
            shutdown_linger: options.shutdown_linger,
            reload_interval: options.reload_interval,
            pod_backstop: Default::default(),
        };
        // bookend::server::bind is this with bookend::admission::review, the default here.
        let bound = test_support::bind_with_review(config, options.review)
            .await
            .expect("server binds");
        let (addr, admin) = (bound.webhook_addr(), bound.admin_addr());
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(bound.run(async move {
            let _ = rx.await;
        }));
        let s = Self {
            addr,
            admin,
            ca,
            secret,
            policy_dir,
            tmp,
            shutdown: Some(tx),
            handle: Some(handle),
        };
        s.wait_ready().await;
        s
    }

    async fn wait_ready(&self) {
        let url = format!("http://{}/readyz", self.admin);
        let client = reqwest::Client::new();
        eventually("/readyz to answer 200", Duration::from_secs(10), || {
            let client = client.clone();
            let url = url.clone();
            async move {
                client
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
    }

    /// Triggers the shutdown future passed to `run`.
    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://{HOST}:{}{path}", self.addr.port())
    }

    /// A client that trusts only the test CA and reaches HOST at the bound address.
    pub fn client(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.ca.pem().as_bytes()).unwrap())
            .resolve(HOST, self.addr)
            .tls_info(true)
            .timeout(Duration::from_secs(20))
    }

    pub fn h2(&self) -> reqwest::Client {
        self.client().http2_prior_knowledge().build().unwrap()
    }

    pub fn h1(&self) -> reqwest::Client {
        self.client().http1_only().build().unwrap()
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("http://{}/metrics", self.admin))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of one sample line of /metrics (`name{labels}` exactly as exposed).
    pub async fn metric(&self, series: &str) -> f64 {
        metric_value(&self.metrics().await, series)
    }

    /// Waits (10 s at most) until the sample `series` of /metrics reads `value`; `what` says
    /// what that means, for the failure message.
    pub async fn wait_for_metric(&self, what: &str, series: &str, value: f64) {
        eventually(what, Duration::from_secs(10), || async {
            self.metric(series).await == value
        })
        .await;
    }

    pub fn write_policy(&self, name: &str, text: &str) {
        // Write then rename so the poller never reads half a file.
        let tmp = self.tmp.path().join(format!("{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.policy_dir.join(name)).unwrap();
    }
}

pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(series)?;
            rest.strip_prefix(' ')?.trim().parse().ok()
        })
        .unwrap_or(0.0)
}

/// Polls `check` until it holds, or panics after `within`.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A JSON value as a request body.
pub fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

/// POSTs a JSON body; returns the response as it came (for its TLS details).
pub async fn send(client: &reqwest::Client, url: &str, body: Vec<u8>) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request succeeds")
}

/// POSTs a JSON body; returns status and parsed JSON body.
pub async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>) -> (u16, Value) {
    let response = send(client, url, body).await;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// Serial number (hex) of the certificate the server presented.
pub fn peer_serial(response: &reqwest::Response) -> String {
    let info = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("tls info");
    let der = info.peer_certificate().expect("peer certificate");
    bookend::server::tls::cert_info(der).unwrap().serial
}

/// The names of a TaskRun's inline steps, `""` for an unnamed one; none when there is no list.
pub fn step_names(taskrun: &Value) -> Vec<String> {
    taskrun["spec"]["taskSpec"]["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Decodes the base64 JSON patch of an AdmissionReview response and applies it to `object`.
pub fn apply_patch(response: &Value, object: &Value) -> Value {
    use base64::Engine as _;
    let b64 = response["response"]["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("patch is base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("patch is RFC 6902");
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).expect("patch applies");
    patched
}

/// A raw TLS connection (HTTP/1.1 by ALPN) for writing requests byte by byte.
pub async fn raw_tls(
    server: &TestServer,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    raw_tls_over(server, tcp).await
}

/// TLS (HTTP/1.1 by ALPN) over a TCP connection to `server` made earlier.
pub async fn raw_tls_over(
    server: &TestServer,
    tcp: tokio::net::TcpStream,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(server.ca.pem().as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(rustls_pki_types::ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap()
}

/// A raw TLS connection (as [`raw_tls`]) on which `bytes`, a request or the start of one, were
/// written.
pub async fn raw_tls_with(
    server: &TestServer,
    bytes: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut stream = raw_tls(server).await;
    stream.write_all(bytes).await.unwrap();
    stream.flush().await.unwrap();
    stream
}

/// The head of an HTTP/1.1 JSON request with a body of `length` bytes, to write by hand.
pub fn json_request_head(method: &str, path: &str, length: usize) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    )
}

/// One HTTP/1.1 response read from a raw connection: status, head and body.
pub type RawResponse = (u16, String, Vec<u8>);

/// Reads one HTTP/1.1 response (head and `Content-Length` body), waiting at most 10 s for each
/// read. `Err` holds what arrived when the connection closed, went quiet or sent no status.
pub async fn read_http1(
    stream: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
) -> Result<RawResponse, String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let status = head.split(' ').nth(1).and_then(|s| s.parse::<u16>().ok());
            let Some(status) = status else {
                return Err(head);
            };
            let length = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buf.len() >= end + 4 + length {
                return Ok((status, head, buf[end + 4..end + 4 + length].to_vec()));
            }
        }
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await;
        match read {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return Err(String::from_utf8_lossy(&buf).into_owned()),
        }
    }
}
