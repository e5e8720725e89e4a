//! The serving certificate: PEM files → `rustls::ServerConfig` (TLS 1.2 and 1.3, ALPN h2 and
//! http/1.1, optional client-certificate verification), and reload without restart.
//!
//! Reload polls the files' contents on a timer and swaps an `Arc<ServerConfig>`; it does not
//! use inotify, because Kubernetes updates Secret mounts by swapping a `..data` symlink and
//! path watches miss that. Each connection takes the config current at its handshake, so
//! established connections keep the pair they started with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;

/// Where the serving pair (and the optional client CA) are read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a client CA, every client must present a certificate signed by it.
    pub client_ca: Option<PathBuf>,
}

/// Why a certificate, key or client CA could not be used. Messages name the flag.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: cannot read: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{flag} {}: {message}", path.display())]
    Pem {
        flag: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("--tls-cert {} / --tls-key {}: {source}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("--client-ca {}: {message}", path.display())]
    ClientCa { path: PathBuf, message: String },
}

/// Facts about the certificate in use, for logs and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertInfo {
    /// Serial number, hex.
    pub serial: String,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// Subject alternative names, as text.
    pub sans: Vec<String>,
}

/// The file contents one config was built from.
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Contents {
    fn read(files: &TlsFiles) -> Result<Self, TlsError> {
        let read = |flag, path: &Path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                flag,
                path: path.to_owned(),
                source,
            })
        };
        Ok(Self {
            cert: read("--tls-cert", &files.cert)?,
            key: read("--tls-key", &files.key)?,
            client_ca: match &files.client_ca {
                Some(path) => Some(read("--client-ca", path)?),
                None => None,
            },
        })
    }

    fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for part in [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()] {
            let part = part.map(Vec::as_slice).unwrap_or_default();
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.finalize().into()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the server config from PEM contents.
fn build(files: &TlsFiles, contents: &Contents) -> Result<(ServerConfig, CertInfo), TlsError> {
    let pem_err = |flag, path: &Path, message: String| TlsError::Pem {
        flag,
        path: path.to_owned(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&contents.cert)
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err("--tls-cert", &files.cert, format!("invalid PEM: {e}")))?;
    if chain.is_empty() {
        return Err(pem_err(
            "--tls-cert",
            &files.cert,
            "no CERTIFICATE block found".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|e| {
        pem_err(
            "--tls-key",
            &files.key,
            format!("no usable PRIVATE KEY block: {e}"),
        )
    })?;
    let info = cert_info(&chain[0]).map_err(|m| pem_err("--tls-cert", &files.cert, m))?;

    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|source| TlsError::Pair {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    let builder = match (&files.client_ca, &contents.client_ca) {
        (Some(path), Some(pem)) => {
            let ca_err = |message: String| TlsError::ClientCa {
                path: path.clone(),
                message,
            };
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| ca_err(format!("invalid PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| ca_err(format!("not a usable CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(ca_err("no CERTIFICATE block found".to_owned()));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| ca_err(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::Pair {
            cert: files.cert.clone(),
            key: files.key.clone(),
            source,
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((config, info))
}

/// Serial, notAfter and SANs of a DER certificate.
pub fn cert_info(der: &[u8]) -> Result<CertInfo, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let sans = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|ext| ext.value.general_names.iter().map(san_text).collect())
        .unwrap_or_default();
    Ok(CertInfo {
        serial: cert.raw_serial_as_string().replace(':', ""),
        not_after: cert.validity().not_after.timestamp(),
        sans,
    })
}

fn san_text(name: &x509_parser::extensions::GeneralName<'_>) -> String {
    use x509_parser::extensions::GeneralName;
    match name {
        GeneralName::DNSName(dns) => (*dns).to_owned(),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => <[u8; 4]>::try_from(*bytes)
                .map(|b| std::net::IpAddr::from(b).to_string())
                .unwrap_or_default(),
            16 => <[u8; 16]>::try_from(*bytes)
                .map(|b| std::net::IpAddr::from(b).to_string())
                .unwrap_or_default(),
            _ => format!("{bytes:02x?}"),
        },
        other => other.to_string(),
    }
}

/// What the last poll saw: the digest of good or bad contents, or a read error.
#[derive(PartialEq, Eq)]
enum Seen {
    Contents([u8; 32]),
    Unreadable(String),
}

/// The current serving config, and its reloader.
pub struct TlsStore {
    files: TlsFiles,
    current: ArcSwap<ServerConfig>,
    info: Mutex<CertInfo>,
    seen: Mutex<Seen>,
    metrics: Metrics,
}

impl TlsStore {
    /// Loads the pair at startup; any problem is an error naming the flag.
    pub fn load(files: TlsFiles, metrics: Metrics) -> Result<Self, TlsError> {
        let contents = Contents::read(&files)?;
        let (config, info) = build(&files, &contents)?;
        metrics.set_certificate_expiry(info.not_after);
        Ok(Self {
            files,
            current: ArcSwap::from_pointee(config),
            info: Mutex::new(info),
            seen: Mutex::new(Seen::Contents(contents.digest())),
            metrics,
        })
    }

    /// An acceptor with the config current now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }

    /// The certificate in use.
    pub fn info(&self) -> CertInfo {
        self.info.lock().map(|i| i.clone()).unwrap_or_default()
    }

    /// Re-reads the files; when they changed, builds and swaps in a new config. A pair that
    /// does not load is refused (logged once, counted) and the current one kept. Returns
    /// whether a new pair was swapped in.
    pub fn poll(&self) -> bool {
        let read = Contents::read(&self.files);
        let now_seen = match &read {
            Ok(c) => Seen::Contents(c.digest()),
            Err(e) => Seen::Unreadable(e.to_string()),
        };
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        if *seen == now_seen {
            return false;
        }
        *seen = now_seen;
        drop(seen);
        let built = read.and_then(|contents| build(&self.files, &contents));
        match built {
            Ok((config, info)) => {
                self.current.store(Arc::new(config));
                self.metrics.certificate_reload(true);
                self.metrics.set_certificate_expiry(info.not_after);
                tracing::info!(
                    serial = %info.serial,
                    not_after = info.not_after,
                    sans = ?info.sans,
                    "serving certificate reloaded"
                );
                if let Ok(mut current) = self.info.lock() {
                    *current = info;
                }
                true
            }
            Err(error) => {
                self.metrics.certificate_reload(false);
                tracing::error!(
                    %error,
                    "new serving certificate refused; the previous one stays in use"
                );
                false
            }
        }
    }
}
