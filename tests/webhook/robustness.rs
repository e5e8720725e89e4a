//! No input gets a 5xx or takes the server down: every node of a real AdmissionReview replaced
//! by values of every JSON type, or removed, over HTTPS; plus the TLS protocol versions.

use std::sync::Arc;

use crate::support::*;
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// JSON pointers of every node under `value`.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(v, p, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(v, p, out);
            }
        }
        _ => {}
    }
}

fn remove(value: &mut Value, pointer: &str) {
    let (parent, last) = pointer.rsplit_once('/').unwrap();
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last.replace("~1", "/").replace("~0", "~"));
        }
        Some(Value::Array(items)) => {
            let i: usize = last.parse().unwrap();
            items.remove(i);
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mutation_of_a_review_gets_200_or_400_and_never_panics() {
    let server = TestServer::start(Options::default()).await;
    let sample = sample_review();
    let mut paths = Vec::new();
    pointers(&sample, String::new(), &mut paths);
    // (value, also sent to /validate); removals go to both endpoints.
    let replacements = [
        (json!(null), false),
        (json!("bookend-x"), false),
        (json!([]), false),
        (json!({}), false),
    ];
    let mut bodies = Vec::new();
    for path in &paths {
        for (r, both) in &replacements {
            let mut v = sample.clone();
            *v.pointer_mut(path).unwrap() = r.clone();
            bodies.push((format!("{path} = {r}"), v, *both));
        }
        let mut v = sample.clone();
        remove(&mut v, path);
        bodies.push((format!("remove {path}"), v, true));
    }
    assert!(bodies.len() > 500, "{}", bodies.len());

    let client = server.h2();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = JoinSet::new();
    for (what, review, both) in bodies {
        let endpoints: &[&str] = if both {
            &["/mutate", "/validate"]
        } else {
            &["/mutate"]
        };
        for endpoint in endpoints {
            let (client, url, review, what) = (
                client.clone(),
                server.url(endpoint),
                review.clone(),
                what.clone(),
            );
            let permit = semaphore.clone().acquire_owned().await.unwrap();
            tasks.spawn(async move {
                let _permit = permit;
                let (status, answer) =
                    post(&client, &url, serde_json::to_vec(&review).unwrap()).await;
                match status {
                    200 => {
                        assert_eq!(answer["kind"], "AdmissionReview", "{url} {what}: {answer}");
                        assert!(
                            answer["response"]["allowed"].is_boolean(),
                            "{url} {what}: {answer}"
                        );
                        assert_eq!(
                            answer["response"]["uid"], review["request"]["uid"],
                            "{url} {what}"
                        );
                    }
                    400 => assert!(answer["error"].is_string(), "{url} {what}: {answer}"),
                    other => panic!("{url} {what}: status {other}: {answer}"),
                }
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(server.metric("bookend_handler_panics_total").await, 0.0);
    let (status, _) = post(&client, &server.url("/mutate"), SAMPLE.as_bytes().to_vec()).await;
    assert_eq!(status, 200);
}

async fn handshake(
    server: &TestServer,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> (rustls::ProtocolVersion, Option<Vec<u8>>) {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(server.ca.pem().as_bytes()).unwrap())
        .unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(rustls_pki_types::ServerName::try_from(HOST).unwrap(), tcp)
        .await
        .unwrap();
    let (_, conn) = stream.get_ref();
    (
        conn.protocol_version().unwrap(),
        conn.alpn_protocol().map(<[u8]>::to_vec),
    )
}

#[tokio::test]
async fn tls_12_and_13_with_alpn_h2_and_http11() {
    let server = TestServer::start(Options::default()).await;
    let (v, alpn) = handshake(&server, &[&rustls::version::TLS13], &[b"h2", b"http/1.1"]).await;
    assert_eq!(v, rustls::ProtocolVersion::TLSv1_3);
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]));
    let (v, alpn) = handshake(&server, &[&rustls::version::TLS12], &[b"http/1.1"]).await;
    assert_eq!(v, rustls::ProtocolVersion::TLSv1_2);
    assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    let (_, alpn) = handshake(&server, &[&rustls::version::TLS13], &[]).await;
    assert_eq!(alpn, None);
}
