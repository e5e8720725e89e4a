//! A development CA and a serving certificate, written with rcgen (`bookend certs`).
//!
//! The same code makes the dev pair that `bookend serve` generates into `certs/` when the default
//! certificate files are missing. Production certificates come from cert-manager or a Secret.

use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// Why certificates could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A `--host` is neither an IP address nor a DNS name.
    #[error("--host {host:?} is not a DNS name or an IP address")]
    BadHost { host: String },
    /// No `--host` given.
    #[error("at least one --host is required")]
    NoHost,
    /// rcgen failed (key generation or signing).
    #[error("cannot generate the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The output directory or a file in it could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The files `generate` wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// Base64 of `ca.crt`, ready for a webhook configuration's `caBundle`.
    pub ca_bundle_b64: PathBuf,
}

impl Written {
    /// Every path, in the order they were written.
    pub fn paths(&self) -> [&Path; 5] {
        [
            &self.ca_cert,
            &self.ca_key,
            &self.tls_cert,
            &self.tls_key,
            &self.ca_bundle_b64,
        ]
    }
}

/// A CA and a serving certificate signed by it, as PEM.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub tls_cert_pem: String,
    pub tls_key_pem: String,
}

/// Makes a new CA and a serving certificate for `hosts` (IP addresses become IP SANs).
pub fn bundle(hosts: &[String], days: u32) -> Result<Bundle, CertsError> {
    if hosts.is_empty() {
        return Err(CertsError::NoHost);
    }
    let now = OffsetDateTime::now_utc();
    let days = i64::from(days.max(1));

    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "bookend development CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = now - Duration::hours(1);
    ca_params.not_after = now + Duration::days(days * 10);
    let ca_key = KeyPair::generate()?;
    let ca_key_pem = ca_key.serialize_pem();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let mut params = leaf_params(hosts)?;
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    Ok(Bundle {
        ca_cert_pem: ca.pem(),
        ca_key_pem,
        tls_cert_pem: cert.pem(),
        tls_key_pem: key.serialize_pem(),
    })
}

fn leaf_params(hosts: &[String]) -> Result<CertificateParams, CertsError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, hosts[0].as_str());
    for host in hosts {
        let san = match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) if is_dns_name(host) => SanType::DnsName(
                host.as_str()
                    .try_into()
                    .map_err(|_| CertsError::BadHost { host: host.clone() })?,
            ),
            Err(_) => return Err(CertsError::BadHost { host: host.clone() }),
        };
        params.subject_alt_names.push(san);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// A DNS name (optionally a `*.` wildcard): dot-separated labels of letters, digits and `-`.
fn is_dns_name(host: &str) -> bool {
    let name = host.strip_prefix("*.").unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// Writes a new CA and serving certificate into `out_dir` (keys with mode 0600).
pub fn generate(out_dir: &Path, hosts: &[String], days: u32) -> Result<Written, CertsError> {
    let bundle = bundle(hosts, days)?;
    fs::create_dir_all(out_dir).map_err(|source| CertsError::Write {
        path: out_dir.to_owned(),
        source,
    })?;
    let written = Written {
        ca_cert: out_dir.join("ca.crt"),
        ca_key: out_dir.join("ca.key"),
        tls_cert: out_dir.join("tls.crt"),
        tls_key: out_dir.join("tls.key"),
        ca_bundle_b64: out_dir.join("ca.crt.b64"),
    };
    let b64 = base64::engine::general_purpose::STANDARD.encode(bundle.ca_cert_pem.as_bytes());
    write_file(&written.ca_cert, bundle.ca_cert_pem.as_bytes(), false)?;
    write_file(&written.ca_key, bundle.ca_key_pem.as_bytes(), true)?;
    // Key before certificate: a server polling the pair never sees a new cert with an old key
    // for long (it refuses a mismatched pair and retries).
    write_file(&written.tls_key, bundle.tls_key_pem.as_bytes(), true)?;
    write_file(&written.tls_cert, bundle.tls_cert_pem.as_bytes(), false)?;
    write_file(&written.ca_bundle_b64, format!("{b64}\n").as_bytes(), false)?;
    Ok(written)
}

/// Writes through a temporary file and a rename, so readers never see half a file.
fn write_file(path: &Path, contents: &[u8], secret: bool) -> Result<(), CertsError> {
    let err = |source| CertsError::Write {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut file = options.open(&tmp).map_err(err)?;
    file.write_all(contents).map_err(err)?;
    file.sync_all().map_err(err)?;
    drop(file);
    fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    #[test]
    fn writes_ca_and_serving_pair_with_ip_and_dns_sans() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec!["bookend.bookend.svc".to_owned(), "127.0.0.1".to_owned()];
        let written = generate(dir.path(), &hosts, 30).unwrap();
        for path in written.paths() {
            assert!(path.exists(), "{}", path.display());
        }
        let pem = fs::read(&written.tls_cert).unwrap();
        let der = CertificateDer::from_pem_slice(&pem).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        let text = format!("{:?}", sans.value.general_names);
        assert!(text.contains("bookend.bookend.svc"), "{text}");
        assert!(text.contains("IPAddress([127, 0, 0, 1])"), "{text}");
        let b64 = fs::read_to_string(&written.ca_bundle_b64).unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .unwrap();
        assert_eq!(decoded, fs::read(&written.ca_cert).unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&written.tls_key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn bad_host_names_the_flag() {
        let err = bundle(&["not a host!".to_owned()], 1).unwrap_err();
        assert!(
            err.to_string().starts_with("--host \"not a host!\""),
            "{err}"
        );
        assert!(matches!(bundle(&[], 1), Err(CertsError::NoHost)));
    }
}
