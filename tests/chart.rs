//! The Helm chart (`charts/bookend`), with a real `helm` (v4, built from its Go module by
//! `tests/e2e/build-tools.sh`): `helm lint --strict` over every values file, `helm template` over
//! a matrix of values with assertions on the objects, the schema's refusals, the chart-generated
//! certificate, and the one-source-of-truth rule: `deploy/` is the chart rendered with
//! `charts/bookend/ci/kustomize-values.yaml`, and `kubectl kustomize` of it yields the chart's
//! objects. A real install, upgrade and uninstall are in tests/e2e/cluster/.
//!
//! Regenerate `charts/bookend/files/crds.yaml` and the rendered files under `deploy/` with
//! `BOOKEND_BLESS=1 cargo test --test chart`, then review the diff.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use bookend::policy::api::crds_yaml;
use bookend::policy::load::yaml_documents;
use common::root;
use serde_json::{Value, json};

const CHART: &str = "charts/bookend";
const NAMESPACE: &str = "bookend-system";
const TEKTON_MUTATING: &str = "webhook.pipeline.tekton.dev";

fn helm() -> PathBuf {
    common::e2e_tool("helm")
}

fn bless() -> bool {
    std::env::var_os("BOOKEND_BLESS").is_some()
}

fn template(release: &str, namespace: &str, args: &[&str]) -> Result<String, String> {
    common::helm_template(release, namespace, args)
}

#[track_caller]
fn render(release: &str, namespace: &str, args: &[&str]) -> Vec<Value> {
    let text = template(release, namespace, args)
        .unwrap_or_else(|e| panic!("helm template {release} -n {namespace} {args:?}:\n{e}"));
    yaml_documents(&text).unwrap_or_else(|e| panic!("helm template output does not parse: {e}"))
}

fn values(file: &str) -> String {
    format!("{CHART}/ci/{file}")
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[track_caller]
fn one<'a>(objects: &'a [Value], k: &str) -> &'a Value {
    let found = kind(objects, k);
    assert_eq!(found.len(), 1, "expected one {k}, found {}", found.len());
    found[0]
}

#[track_caller]
fn named<'a>(objects: &'a [Value], k: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == k && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {k} {name}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn container(objects: &[Value]) -> Value {
    one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0].clone()
}

fn args(objects: &[Value]) -> Vec<String> {
    strings(&container(objects)["args"])
        .into_iter()
        .map(str::to_owned)
        .collect()
}

fn arg<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().find_map(|a| a.strip_prefix(&prefix))
}

/// Every webhook entry of both configurations.
fn webhooks(objects: &[Value]) -> Vec<Value> {
    [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    .iter()
    .flat_map(|k| {
        one(objects, k)["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    })
    .collect()
}

fn excluded_namespaces(webhook: &Value) -> Vec<String> {
    webhook["namespaceSelector"]["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
        .flat_map(|e| strings(&e["values"]))
        .map(str::to_owned)
        .collect()
}

const CLUSTER_SCOPED: [&str; 5] = [
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

#[track_caller]
fn all_in_namespace(objects: &[Value], namespace: &str) {
    for o in objects {
        let k = o["kind"].as_str().unwrap();
        if CLUSTER_SCOPED.contains(&k) {
            assert!(
                o["metadata"]["namespace"].is_null(),
                "{k} is cluster-scoped"
            );
        } else {
            assert_eq!(
                o["metadata"]["namespace"], namespace,
                "{k} {} must be in {namespace}",
                o["metadata"]["name"]
            );
        }
    }
}

fn openssl(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs")
}

fn unb64(value: &Value) -> String {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().expect("base64 string"))
        .expect("valid base64");
    String::from_utf8(bytes).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The CRDs

#[test]
fn the_charts_crds_are_what_bookend_crds_prints() {
    let path = root().join(CHART).join("files/crds.yaml");
    if bless() {
        std::fs::write(&path, crds_yaml()).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap() == crds_yaml(),
        "{CHART}/files/crds.yaml is stale: BOOKEND_BLESS=1 cargo test --test chart"
    );
}

#[test]
fn installed_crds_are_bookend_crds_kept_on_uninstall() {
    let expected = yaml_documents(&crds_yaml()).unwrap();
    let objects = render("bookend", NAMESPACE, &[]);
    let crds = kind(&objects, "CustomResourceDefinition");
    assert_eq!(crds.len(), expected.len());
    for (crd, want) in crds.iter().zip(&expected) {
        let mut crd = (*crd).clone();
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "crds.keep (default): helm uninstall leaves the CRDs and every policy"
        );
        crd["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(&crd, want, "the CRD is `bookend crds` plus the annotation");
    }
    let dropped = render("bookend", NAMESPACE, &["--set", "crds.keep=false"]);
    for crd in kind(&dropped, "CustomResourceDefinition") {
        assert!(crd["metadata"]["annotations"].is_null());
    }
    let none = render("bookend", NAMESPACE, &["--set", "crds.install=false"]);
    assert!(kind(&none, "CustomResourceDefinition").is_empty());
}

// ---------------------------------------------------------------------------------------------
// Lint

#[test]
fn helm_lint_strict_passes_for_every_values_file() {
    let mut files = vec![None];
    let mut ci: Vec<_> = std::fs::read_dir(root().join(CHART).join("ci"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    ci.sort();
    assert!(ci.len() >= 5, "the values matrix in {CHART}/ci: {ci:?}");
    files.extend(ci.into_iter().map(Some));
    for file in files {
        let mut cmd = Command::new(helm());
        cmd.args(["lint", "--strict", CHART, "--namespace", NAMESPACE])
            .current_dir(root());
        if let Some(f) = &file {
            cmd.args(["-f", &values(f)]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "helm lint --strict ({file:?}):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The values matrix

#[test]
fn defaults_match_the_hardened_install() {
    let objects = render("bookend", NAMESPACE, &[]);
    all_in_namespace(&objects, NAMESPACE);
    let kinds: BTreeSet<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    for k in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Secret",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(kinds.contains(k), "defaults render no {k}");
    }
    // Off by default: on CNIs where ipBlock egress does not match the API server (Cilium with a
    // self-hosted control plane), bookend would never get ready and the fail-closed webhooks
    // would refuse every TaskRun.
    for k in [
        "NetworkPolicy",
        "Namespace",
        "Certificate",
        "Issuer",
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
    ] {
        assert!(!kinds.contains(k), "defaults render a {k}");
    }
    let d = one(&objects, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2);
    let image = container(&objects)["image"].clone();
    let chart =
        yaml_documents(&std::fs::read_to_string(root().join(CHART).join("Chart.yaml")).unwrap())
            .unwrap()
            .remove(0);
    assert_eq!(
        image,
        json!(format!(
            "ghcr.io/bookend-dev/bookend:{}",
            chart["appVersion"].as_str().unwrap()
        )),
        "the image the release publishes, at the chart's appVersion"
    );
    let a = args(&objects);
    assert_eq!(arg(&a, "--log-format"), Some("json"));
    assert_eq!(arg(&a, "--log-level"), Some("info"));
    // The Deployment's selector selects its own pods, and the Service and PDB select them too.
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    for selector in [
        &d["spec"]["selector"]["matchLabels"],
        &one(&objects, "Service")["spec"]["selector"],
        &one(&objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        &one(
            &render(
                "bookend",
                NAMESPACE,
                &["--set", "networkPolicy.enabled=true"],
            ),
            "NetworkPolicy",
        )["spec"]["podSelector"]["matchLabels"],
    ] {
        let selector = selector.as_object().unwrap();
        assert!(!selector.is_empty());
        for (k, v) in selector {
            assert_eq!(&pod_labels[k], v, "selector {k}");
        }
    }
    let spread = d["spec"]["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .unwrap();
    assert_eq!(spread.len(), 2);
    for c in spread {
        assert_eq!(
            c["labelSelector"]["matchLabels"], d["spec"]["selector"]["matchLabels"],
            "a constraint without labelSelector gets the pods' selector"
        );
        assert_eq!(strings(&c["matchLabelKeys"]), ["pod-template-hash"]);
    }
    // The webhooks call the Service, fail-open mutation and fail-closed validation, and skip
    // the release namespace.
    for w in webhooks(&objects) {
        let name = w["name"].as_str().unwrap();
        assert_eq!(
            w["clientConfig"]["service"]["namespace"], NAMESPACE,
            "{name}"
        );
        assert_eq!(w["clientConfig"]["service"]["name"], "bookend", "{name}");
        let expected = if name.contains(".mutate.") {
            "Ignore"
        } else {
            "Fail"
        };
        assert_eq!(w["failurePolicy"], expected, "{name}");
        if name != "policies.validate.bookend.dev" {
            assert_eq!(
                excluded_namespaces(&w),
                [NAMESPACE, "kube-system"],
                "{name}"
            );
        }
    }
    let mutating = one(&objects, "MutatingWebhookConfiguration");
    assert!(mutating["metadata"]["name"].as_str().unwrap() < TEKTON_MUTATING);
}

/// The generated certificate: a CA and a serving certificate for the Service's names, signed by
/// it, and the same CA in every webhook's caBundle (generated once per render).
#[test]
fn the_generated_certificate_is_signed_by_the_ca_every_webhook_trusts() {
    for namespace in [NAMESPACE, "tekton-addons"] {
        let objects = render(
            "bookend",
            namespace,
            &["--set", "webhook.url=https://127.0.0.1:9443"],
        );
        let tls = named(&objects, "Secret", "bookend-tls");
        let ca_secret = named(&objects, "Secret", "bookend-ca");
        assert_eq!(tls["type"], "kubernetes.io/tls");
        let ca = unb64(&tls["data"]["ca.crt"]);
        assert_eq!(
            ca,
            unb64(&ca_secret["data"]["tls.crt"]),
            "the CA Secret's certificate"
        );
        for w in webhooks(&objects) {
            assert_eq!(
                unb64(&w["clientConfig"]["caBundle"]),
                ca,
                "{}: caBundle is the generated CA",
                w["name"]
            );
            assert!(w["clientConfig"]["service"].is_null());
            let url = w["clientConfig"]["url"].as_str().unwrap();
            assert!(
                [
                    "https://127.0.0.1:9443/mutate",
                    "https://127.0.0.1:9443/validate",
                    "https://127.0.0.1:9443/validate-pods"
                ]
                .contains(&url),
                "{url}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), &ca).unwrap();
        std::fs::write(dir.path().join("tls.crt"), unb64(&tls["data"]["tls.crt"])).unwrap();
        std::fs::write(dir.path().join("tls.key"), unb64(&tls["data"]["tls.key"])).unwrap();
        let verify = openssl(
            &[
                "verify",
                "-CAfile",
                "ca.crt",
                "-purpose",
                "sslserver",
                "tls.crt",
            ],
            dir.path(),
        );
        assert!(
            verify.status.success(),
            "openssl verify: {}",
            String::from_utf8_lossy(&verify.stderr)
        );
        let text = openssl(&["x509", "-in", "tls.crt", "-noout", "-text"], dir.path());
        let text = String::from_utf8_lossy(&text.stdout);
        for san in [
            format!("DNS:bookend.{namespace}.svc"),
            format!("DNS:bookend.{namespace}.svc.cluster.local"),
            "IP Address:127.0.0.1".to_owned(),
        ] {
            assert!(text.contains(&san), "SAN {san} in\n{text}");
        }
        assert!(text.contains("ASN1 OID: prime256v1"), "ECDSA P-256");
        // The key is the certificate's.
        let a = openssl(&["x509", "-in", "tls.crt", "-noout", "-pubkey"], dir.path());
        let b = openssl(&["pkey", "-in", "tls.key", "-pubout"], dir.path());
        assert_eq!(a.stdout, b.stdout, "tls.key belongs to tls.crt");
        let not_after: i64 = tls["metadata"]["annotations"]["bookend.dev/not-after"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let enddate = openssl(
            &["x509", "-in", "tls.crt", "-noout", "-checkend", "0"],
            dir.path(),
        );
        assert!(enddate.status.success(), "not expired");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        assert!(
            (not_after - now - 365 * 86400).abs() < 3600,
            "bookend.dev/not-after is a year from now (certValidityDays): {not_after}"
        );
    }
}

#[test]
fn high_availability_values() {
    let objects = render("bookend", NAMESPACE, &["-f", &values("ha-values.yaml")]);
    let d = one(&objects, "Deployment");
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        one(&objects, "PodDisruptionBudget")["spec"]["minAvailable"],
        2
    );
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let zone = pod["topologySpreadConstraints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["topologyKey"] == "topology.kubernetes.io/zone")
        .unwrap();
    assert_eq!(zone["whenUnsatisfiable"], "DoNotSchedule");
    assert_eq!(
        container(&objects)["resources"]["limits"]["memory"],
        "256Mi"
    );
    // A budget as large as the replica count would block every drain: refused.
    let err = template(
        "bookend",
        NAMESPACE,
        &[
            "--set",
            "replicaCount=3",
            "--set",
            "podDisruptionBudget.minAvailable=3",
        ],
    )
    .unwrap_err();
    assert!(err.contains("must be below replicaCount"), "{err}");
    // One replica: no budget at all (it could only block drains).
    let single = render("bookend", NAMESPACE, &["--set", "replicaCount=1"]);
    assert!(kind(&single, "PodDisruptionBudget").is_empty());
}

#[test]
fn cert_manager_values() {
    for namespace in [NAMESPACE, "tekton-addons"] {
        let objects = render(
            "bookend",
            namespace,
            &["-f", &values("cert-manager-values.yaml")],
        );
        all_in_namespace(&objects, namespace);
        assert!(
            kind(&objects, "Secret").is_empty(),
            "cert-manager writes the Secret"
        );
        let serving = named(&objects, "Certificate", "bookend-serving");
        assert_eq!(serving["spec"]["secretName"], "bookend-tls");
        assert_eq!(
            strings(&serving["spec"]["dnsNames"]),
            [
                format!("bookend.{namespace}.svc"),
                format!("bookend.{namespace}.svc.cluster.local")
            ]
        );
        assert_eq!(serving["spec"]["issuerRef"]["name"], "bookend-ca");
        let ca = named(&objects, "Certificate", "bookend-ca");
        assert_eq!(ca["spec"]["isCA"], true);
        assert_eq!(ca["spec"]["privateKey"]["rotationPolicy"], "Never");
        named(&objects, "Issuer", "bookend-selfsigned");
        named(&objects, "Issuer", "bookend-ca");
        for k in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            assert_eq!(
                one(&objects, k)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                format!("{namespace}/bookend-serving"),
                "{k}"
            );
        }
        for w in webhooks(&objects) {
            assert!(
                w["clientConfig"]["caBundle"].is_null(),
                "{}: cainjector owns caBundle",
                w["name"]
            );
        }
    }
    // Your own issuer: no private CA objects.
    let objects = render(
        "bookend",
        NAMESPACE,
        &[
            "--set",
            "certManager.enabled=true",
            "--set",
            "certManager.issuerRef.kind=ClusterIssuer",
            "--set",
            "certManager.issuerRef.name=corp-ca",
        ],
    );
    assert!(kind(&objects, "Issuer").is_empty());
    let certificates = kind(&objects, "Certificate");
    assert_eq!(certificates.len(), 1);
    assert_eq!(
        certificates[0]["spec"]["issuerRef"],
        json!({"kind": "ClusterIssuer", "name": "corp-ca"})
    );
}

/// As a subchart of an umbrella chart, which passes `global` to every subchart.
#[test]
fn the_chart_installs_as_a_subchart() {
    let objects = render(
        "bookend",
        NAMESPACE,
        &["--set", "global.imageRegistry=registry.example.com"],
    );
    assert!(!kind(&objects, "Deployment").is_empty());
    // Anything else unknown is still refused.
    assert!(template("bookend", NAMESPACE, &["--set", "imageRegistry=x"]).is_err());
}

#[test]
fn monitoring_values() {
    let objects = render(
        "bookend",
        NAMESPACE,
        &["-f", &values("monitoring-values.yaml")],
    );
    all_in_namespace(&objects, NAMESPACE);
    let service = one(&objects, "Service");
    let monitor = one(&objects, "ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    let admin = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == port)
        .unwrap_or_else(|| panic!("the Service has no port {port}"));
    assert_eq!(admin["port"], 8080);
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    // prometheus-operator sets `endpoint` on every target; bookend's own `endpoint` label, which
    // the shipped rules group by, must win or the rules see one series.
    assert_eq!(monitor["spec"]["endpoints"][0]["honorLabels"], true);

    let rule = one(&objects, "PrometheusRule");
    assert!(
        rule.to_string().contains("endpoint"),
        "the rules read bookend's endpoint label (or honorLabels would not matter)"
    );
    assert_eq!(
        rule["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let alerts = alert_names(rule);
    for alert in [
        "BookendNoReadyReplica",
        "BookendCertificateExpiringSoon",
        "BookendCertificateExpiringCritical",
        "BookendMutationFailingOpen",
        "BookendWebhookCallsFailing",
        "BookendDenialsHigh",
        "BookendAdmissionLatencyHigh",
        "BookendWebhookLatencyHigh",
        "BookendInvalidPolicies",
        "BookendNoPolicies",
    ] {
        assert!(alerts.contains(alert), "missing alert {alert}: {alerts:?}");
    }
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let name = r["alert"].as_str().unwrap();
        let severity = r["labels"]["severity"].as_str().unwrap();
        assert!(
            matches!(severity, "critical" | "warning"),
            "{name}: {severity}"
        );
        let runbook = r["annotations"]["runbook_url"].as_str().unwrap();
        assert!(
            runbook.ends_with(&format!("operations.md#{}", name.to_lowercase())),
            "{name}: {runbook}"
        );
    }
    // Each alert is documented where its runbook_url points.
    let ops = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    for alert in &alerts {
        assert!(
            ops.contains(&format!("#### {alert}")),
            "docs/operations.md has no section for {alert}"
        );
    }

    let dashboard = one(&objects, "ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json_text = dashboard["data"]["bookend.json"].as_str().unwrap();
    let file =
        std::fs::read_to_string(root().join(CHART).join("files/dashboards/bookend.json")).unwrap();
    assert_eq!(json_text.trim_end(), file.trim_end());
    let parsed: Value = serde_json::from_str(json_text).expect("the dashboard is JSON");
    assert_eq!(parsed["uid"], "bookend");

    // Switches: leave an alert out; no kube-state-metrics; the dashboard in Grafana's namespace.
    let objects = render(
        "bookend",
        NAMESPACE,
        &[
            "-f",
            &values("monitoring-values.yaml"),
            "--set",
            "metrics.prometheusRule.disabled={BookendNoPolicies}",
            "--set",
            "metrics.prometheusRule.kubeStateMetrics=false",
            "--set",
            "metrics.grafanaDashboard.namespace=grafana",
        ],
    );
    let fewer = alert_names(one(&objects, "PrometheusRule"));
    assert!(!fewer.contains("BookendNoPolicies"));
    assert!(
        !fewer.contains("BookendNoReadyReplica") && !fewer.contains("BookendReplicasUnavailable")
    );
    assert_eq!(fewer.len() + 3, alerts.len());
    assert_eq!(
        one(&objects, "ConfigMap")["metadata"]["namespace"],
        "grafana"
    );
}

fn alert_names(rule: &Value) -> BTreeSet<String> {
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| r["alert"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_custom_namespace_and_release_name_are_used_everywhere() {
    let ns = "tekton-addons";
    let objects = render("demo", ns, &["-f", &values("monitoring-values.yaml")]);
    all_in_namespace(&objects, ns);
    for o in &objects {
        let name = o["metadata"]["name"].as_str().unwrap();
        if o["kind"] != "CustomResourceDefinition" {
            assert!(name.starts_with("demo-bookend"), "{} {name}", o["kind"]);
        }
    }
    let mutating = one(&objects, "MutatingWebhookConfiguration");
    assert_eq!(mutating["metadata"]["name"], "demo-bookend.bookend.dev");
    for w in webhooks(&objects) {
        let name = w["name"].as_str().unwrap();
        assert_eq!(w["clientConfig"]["service"]["namespace"], ns, "{name}");
        assert_eq!(
            w["clientConfig"]["service"]["name"], "demo-bookend",
            "{name}"
        );
        if name != "policies.validate.bookend.dev" {
            assert_eq!(excluded_namespaces(&w), [ns, "kube-system"], "{name}");
        }
    }
    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["subjects"][0]["namespace"], ns);
    assert_eq!(binding["subjects"][0]["name"], "demo-bookend");
    assert_eq!(
        binding["roleRef"]["name"],
        one(&objects, "ClusterRole")["metadata"]["name"]
    );
    let rule = serde_json::to_string(one(&objects, "PrometheusRule")).unwrap();
    assert!(rule.contains(r#"namespace=\"tekton-addons\""#));
    assert!(
        !rule.contains(NAMESPACE),
        "no trace of the default namespace"
    );
    assert!(rule.contains(r#"deployment=\"demo-bookend\""#));

    // A name that would sort after Tekton's webhook is refused with the reason.
    let err = template("zeta", ns, &[]).unwrap_err();
    assert!(err.contains("must sort before"), "{err}");
}

#[test]
fn custom_values_reach_the_flags_and_the_webhooks() {
    let objects = render("bookend", NAMESPACE, &["-f", &values("custom-values.yaml")]);
    let c = container(&objects);
    assert_eq!(
        c["image"],
        "registry.example.com/mirror/bookend@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "mirror-pull"}]));
    assert_eq!(pod["serviceAccountName"], "platform-bookend");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["tolerations"][0]["value"], "platform");
    assert!(kind(&objects, "ServiceAccount").is_empty());
    assert!(kind(&objects, "NetworkPolicy").is_empty());
    assert!(kind(&objects, "CustomResourceDefinition").is_empty());
    assert_eq!(
        one(&objects, "ClusterRoleBinding")["subjects"][0]["name"],
        "platform-bookend"
    );
    let a = args(&objects);
    let controller = "system:serviceaccount:openshift-pipelines:pipeline";
    assert_eq!(arg(&a, "--tekton-controller"), Some(controller));
    assert_eq!(
        arg(&a, "--helper-image"),
        Some("registry.example.com/mirror/busybox:1.37")
    );
    assert_eq!(arg(&a, "--reserved-prefix"), Some("org-"));
    assert_eq!(arg(&a, "--log-level"), Some("bookend=debug,info"));
    assert_eq!(arg(&a, "--log-format"), Some("text"));
    assert_eq!(arg(&a, "--pod-backstop"), Some("warn"));
    assert_flags_exist(&a);
    for w in webhooks(&objects) {
        let name = w["name"].as_str().unwrap();
        let mutate = name.contains(".mutate.");
        assert_eq!(w["timeoutSeconds"], if mutate { 5 } else { 10 }, "{name}");
        match name {
            "taskruns.validate.bookend.dev" => assert_eq!(w["failurePolicy"], "Ignore"),
            "policies.validate.bookend.dev"
            | "pods.validate.bookend.dev"
            | "taskrun-marks.validate.bookend.dev" => {
                assert_eq!(w["failurePolicy"], "Fail")
            }
            _ => assert_eq!(w["failurePolicy"], "Ignore", "{name}"),
        }
        if name == "policies.validate.bookend.dev" {
            assert!(w["namespaceSelector"].is_null());
            continue;
        }
        assert_eq!(
            excluded_namespaces(&w),
            [
                NAMESPACE,
                "kube-system",
                "tekton-pipelines",
                "openshift-pipelines"
            ],
            "{name}"
        );
        assert_eq!(
            w["namespaceSelector"]["matchLabels"],
            json!({"bookend.dev/enforce": "true"}),
            "{name}"
        );
    }
    let tasks = webhooks(&objects)
        .into_iter()
        .find(|w| w["name"] == "tasks-dryrun.mutate.bookend.dev")
        .unwrap();
    let conditions = serde_json::to_string(&tasks["matchConditions"]).unwrap();
    assert!(
        conditions.contains(&format!("'{controller}'")),
        "matchCondition and --tekton-controller name the same user: {conditions}"
    );
}

/// Every `--flag` the chart passes exists in `bookend serve --help`.
#[track_caller]
fn assert_flags_exist(args: &[String]) {
    let out = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(args.first().map(String::as_str), Some("serve"));
    for a in &args[1..] {
        let flag = a.split('=').next().unwrap();
        assert!(
            help.split_whitespace()
                .any(|w| w.trim_end_matches(',') == flag),
            "`bookend serve` has no flag {flag}"
        );
    }
}

#[test]
fn the_schema_refuses_what_would_break_the_install() {
    for (set, needle) in [
        ("webhook.timeoutSeconds.mutate=1", "timeoutSeconds/mutate"),
        (
            "webhook.timeoutSeconds.validate=31",
            "timeoutSeconds/validate",
        ),
        (
            "webhook.failurePolicy.validateTaskRuns=Sometimes",
            "validateTaskRuns",
        ),
        ("replicaCount=0", "replicaCount"),
        ("webhook.url=http://127.0.0.1:9443", "url"),
        ("extraArgs={serve}", "extraArgs"),
        ("logFormat=yaml", "logFormat"),
        ("webhookk.url=https://x", "webhookk"),
        ("image.digest=latest", "digest"),
        ("metrics.prometheusRule.disabled={NotAnAlert}", "disabled"),
        // Typed Kubernetes structs: a typo or a wrong type is refused, not rendered.
        ("resources.limits.memory=lots", "memory"),
        ("resources.limit.memory=1Gi", "limit"),
        ("securityContext.runAsUser=-1", "runAsUser"),
        ("securityContext.readOnlyRootFs=true", "readOnlyRootFs"),
        ("podSecurityContext.runAsNonRoot=yes", "runAsNonRoot"),
        ("affinity.podAntiAffinity.required=x", "required"),
        ("policyReports.api=kyverno", "api"),
        ("webhook.port=70000", "port"),
        ("adminPort=0", "adminPort"),
        ("metrics.serviceMonitor.scheme=ftp", "scheme"),
        ("updateStrategy.type=Replace", "type"),
    ] {
        let err = template("bookend", NAMESPACE, &["--set", set])
            .expect_err(&format!("--set {set} must be refused"));
        assert!(err.contains(needle), "--set {set}: {err}");
    }
}

// ---------------------------------------------------------------------------------------------
// The values are documented

/// Dotted paths of the leaves of a values tree (lists and empty maps are leaves).
fn leaves(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(v, &path, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn every_value_is_in_the_readme_table_and_the_schema() {
    let values =
        yaml_documents(&std::fs::read_to_string(root().join(CHART).join("values.yaml")).unwrap())
            .unwrap()
            .remove(0);
    let mut paths = Vec::new();
    leaves(&values, "", &mut paths);
    // Keys under these are free-form Kubernetes structs (or maps), documented as a whole.
    let opaque = [
        "resources",
        "updateStrategy",
        "livenessProbe",
        "readinessProbe",
        "podSecurityContext",
        "securityContext",
        "topologySpreadConstraints",
        "networkPolicy.metricsFrom",
        "metrics.grafanaDashboard.labels",
    ];
    let paths: BTreeSet<String> = paths
        .into_iter()
        .map(|p| {
            opaque
                .iter()
                .find(|o| p == **o || p.starts_with(&format!("{o}.")))
                .map(|o| (*o).to_owned())
                .unwrap_or(p)
        })
        .collect();
    let readme = std::fs::read_to_string(root().join(CHART).join("README.md")).unwrap();
    let documented: BTreeSet<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(k, _)| k.to_owned())
        .collect();
    let missing: Vec<_> = paths.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&paths).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{CHART}/README.md values table: missing {missing:?}, not in values.yaml {stale:?}"
    );
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(CHART).join("values.schema.json")).unwrap(),
    )
    .unwrap();
    for path in &paths {
        let mut node = &schema;
        for part in path.split('.') {
            node = &node["properties"][part];
        }
        assert!(
            node.is_object(),
            "values.schema.json does not describe {path}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// deploy/ is the chart, rendered

/// Where each template's output goes under deploy/, per render.
struct DeployRender {
    extra: &'static [&'static str],
    /// The values, for the generated files' header.
    values: &'static str,
    files: &'static [(&'static str, &'static str)],
}

const DEPLOY_RENDERS: [DeployRender; 4] = [
    DeployRender {
        extra: &[],
        values: "charts/bookend/ci/kustomize-values.yaml",
        files: &[
            ("crds.yaml", "deploy/base/crds.yaml"),
            ("rbac.yaml", "deploy/base/rbac.yaml"),
            ("deployment.yaml", "deploy/base/deployment.yaml"),
            ("service.yaml", "deploy/base/service.yaml"),
            ("pdb.yaml", "deploy/base/pdb.yaml"),
            ("networkpolicy.yaml", "deploy/base/networkpolicy.yaml"),
            ("webhooks.yaml", "deploy/base/webhooks.yaml"),
        ],
    },
    DeployRender {
        extra: &["--set", "certManager.enabled=true"],
        values: "charts/bookend/ci/kustomize-values.yaml, certManager.enabled=true",
        files: &[(
            "certificates.yaml",
            "deploy/overlays/cert-manager/certificates.yaml",
        )],
    },
    DeployRender {
        extra: &["-f", "charts/bookend/ci/monitoring-values.yaml"],
        values: "charts/bookend/ci/kustomize-values.yaml and monitoring-values.yaml",
        files: &[
            (
                "servicemonitor.yaml",
                "deploy/monitoring/servicemonitor.yaml",
            ),
            (
                "prometheusrule.yaml",
                "deploy/monitoring/prometheusrule.yaml",
            ),
            ("dashboard.yaml", "deploy/monitoring/dashboard.yaml"),
        ],
    },
    DeployRender {
        extra: &["--set", "policyReports.installCRD=true"],
        values: "charts/bookend/ci/kustomize-values.yaml, policyReports.installCRD=true",
        files: &[("policyreport-crd.yaml", "deploy/policyreport/crd.yaml")],
    },
];

const GENERATED: &str = "# Generated from charts/bookend/templates/{template} (values: {values}).\n\
# Edit the chart, then run `BOOKEND_BLESS=1 cargo test --test chart`; tests/chart.rs checks it.\n";

/// The rendered documents of each template, comments included, in helm's order.
fn split_by_template(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for chunk in text.split("---\n# Source: bookend/templates/").skip(1) {
        let (template, body) = chunk.split_once('\n').unwrap();
        let body = body.trim_end().to_owned();
        if !body.is_empty() {
            out.entry(template.to_owned()).or_default().push(body);
        }
    }
    out
}

fn kustomize_args(extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "-f".to_owned(),
        "charts/bookend/ci/kustomize-values.yaml".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[test]
fn deploy_is_the_chart_rendered() {
    let mut stale = Vec::new();
    for r in &DEPLOY_RENDERS {
        let args = kustomize_args(r.extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = template("bookend", NAMESPACE, &args).unwrap();
        let docs = split_by_template(&text);
        for (template, path) in r.files {
            let docs = docs
                .get(*template)
                .unwrap_or_else(|| panic!("templates/{template} rendered nothing"));
            let expected = if *template == "crds.yaml" {
                format!("---\n{}\n", docs.join("\n---\n"))
            } else {
                format!(
                    "{}{}\n",
                    GENERATED
                        .replace("{template}", template)
                        .replace("{values}", r.values),
                    docs.join("\n---\n")
                )
            };
            let file = root().join(path);
            if bless() {
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::fs::write(&file, &expected).unwrap();
            }
            if std::fs::read_to_string(&file).ok().as_deref() != Some(expected.as_str()) {
                stale.push(*path);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "not the chart's render: {stale:?}; run BOOKEND_BLESS=1 cargo test --test chart and review the diff"
    );
    // The CRD file is also exactly what `bookend crds` prints (tests/deploy.rs checks that too).
    assert_eq!(
        std::fs::read_to_string(root().join("deploy/base/crds.yaml")).unwrap(),
        crds_yaml()
    );
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                ),
                o,
            )
        })
        .collect()
}

/// `kubectl kustomize` of each kustomization gives exactly the chart's objects (plus the
/// Namespace deploy/ adds): the kustomizations' own parts (image pin, patches) agree with the
/// chart, object by object.
#[test]
fn kubectl_kustomize_of_deploy_equals_helm_template() {
    let kubectl = common::e2e_tool("kubectl");
    for (dir, extra, only) in [
        ("deploy/", &[][..], None),
        (
            "deploy/overlays/cert-manager",
            &["--set", "certManager.enabled=true"][..],
            None,
        ),
        (
            "deploy/monitoring",
            &["-f", "charts/bookend/ci/monitoring-values.yaml"][..],
            Some(&["ServiceMonitor", "PrometheusRule", "ConfigMap"][..]),
        ),
        (
            "deploy/policyreport",
            &["--set", "policyReports.installCRD=true"][..],
            Some(&["CustomResourceDefinition/policyreports.wgpolicyk8s.io"][..]),
        ),
    ] {
        let out = Command::new(&kubectl)
            .args(["kustomize", dir])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize {dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut kustomized =
            by_key(yaml_documents(&String::from_utf8(out.stdout).unwrap()).unwrap());
        if only.is_none() {
            let ns = kustomized
                .remove(&format!("Namespace/{NAMESPACE}"))
                .unwrap_or_else(|| panic!("{dir}: no Namespace"));
            assert_eq!(
                ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                "restricted"
            );
        }
        let args = kustomize_args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let helm = by_key(
            render("bookend", NAMESPACE, &args)
                .into_iter()
                .filter(|o| {
                    let kind = o["kind"].as_str().unwrap();
                    let key = format!("{kind}/{}", o["metadata"]["name"].as_str().unwrap());
                    only.is_none_or(|allowed| {
                        allowed.contains(&kind) || allowed.contains(&key.as_str())
                    })
                })
                .collect(),
        );
        assert_eq!(
            kustomized.keys().collect::<Vec<_>>(),
            helm.keys().collect::<Vec<_>>(),
            "{dir}: the same objects"
        );
        for (key, object) in &kustomized {
            assert!(
                object == &helm[key],
                "{dir}: {key} differs from helm template's"
            );
        }
    }
}

#[test]
fn the_taskrun_backstop_can_be_left_out_and_the_pod_backstop_stays() {
    let names = |args: &[&str]| -> Vec<String> {
        webhooks(&render("bookend", "bookend-system", args))
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let default = names(&[]);
    assert!(
        default.contains(&"taskruns.validate.bookend.dev".to_owned()),
        "{default:?}"
    );
    let without = names(&["--set", "webhook.taskRunBackstop.enabled=false"]);
    assert!(
        !without.contains(&"taskruns.validate.bookend.dev".to_owned()),
        "{without:?}"
    );
    for kept in [
        "pods.validate.bookend.dev",
        "policies.validate.bookend.dev",
        "taskruns.mutate.bookend.dev",
    ] {
        assert!(without.contains(&kept.to_owned()), "{kept}: {without:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation and production

/// What the scheduler must honour for a pod: spread constraints that refuse (DoNotSchedule),
/// required (anti-)affinity, ports on the node.
fn hard_constraints(pod: &Value) -> Vec<String> {
    let mut hard = Vec::new();
    for c in pod["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if c["whenUnsatisfiable"] == "DoNotSchedule" {
            hard.push(format!("spread on {}", c["topologyKey"]));
        }
    }
    for a in ["podAffinity", "podAntiAffinity", "nodeAffinity"] {
        if !pod["affinity"][a]["requiredDuringSchedulingIgnoredDuringExecution"].is_null() {
            hard.push(format!("required {a}"));
        }
    }
    if pod["hostNetwork"] == true {
        hard.push("ports on the node".to_owned());
    }
    hard
}

/// The evaluation set (charts/bookend/README.md) places every pod on one node, during install
/// and during a rolling update; the defaults keep the production guarantees.
#[test]
fn the_evaluation_set_fits_one_node_and_the_defaults_keep_production_guarantees() {
    let readme = std::fs::read_to_string(root().join(CHART).join("README.md")).unwrap();
    let documented = "--set replicaCount=1 --set-json 'topologySpreadConstraints=[]'";
    assert!(readme.contains(documented), "the README's evaluation set");
    let by_set = render(
        "bookend",
        NAMESPACE,
        &[
            "--set",
            "replicaCount=1",
            "--set-json",
            "topologySpreadConstraints=[]",
        ],
    );
    let by_file = render(
        "bookend",
        NAMESPACE,
        &["-f", &values("evaluation-values.yaml")],
    );
    for objects in [&by_set, &by_file] {
        let d = one(objects, "Deployment");
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(d["spec"]["replicas"], 1);
        assert!(
            hard_constraints(pod).is_empty(),
            "nothing can keep a pod off the only node: {:?}",
            hard_constraints(pod)
        );
        // A rolling update adds at most one pod, which fits beside the old one (no node ports).
        assert_eq!(d["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
        assert!(
            kind(objects, "PodDisruptionBudget").is_empty(),
            "no budget: with one replica it could only block the node's drain"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            webhooks(objects)
                .iter()
                .filter(|w| w["failurePolicy"] == "Fail")
                .count(),
            4,
            "the same fail-closed webhooks as in production"
        );
    }
    assert_eq!(
        one(&by_set, "Deployment")["spec"],
        one(&by_file, "Deployment")["spec"],
        "the documented --set set and ci/evaluation-values.yaml are the same"
    );

    // Production: two replicas that may not share a node while another one is schedulable,
    // never fewer than one ready during a rollout or a drain.
    let objects = render("bookend", NAMESPACE, &[]);
    let d = one(&objects, "Deployment");
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    assert_eq!(
        hard_constraints(&d["spec"]["template"]["spec"]),
        ["spread on \"kubernetes.io/hostname\""]
    );
    assert_eq!(
        one(&objects, "PodDisruptionBudget")["spec"]["minAvailable"],
        1
    );
}

// ---------------------------------------------------------------------------------------------
// Knobs

#[test]
fn every_knob_reaches_its_object() {
    let objects = render("bookend", NAMESPACE, &["-f", &values("knobs-values.yaml")]);
    // commonLabels on every object the chart renders (the CRDs are `bookend crds` as printed).
    for o in &objects {
        if o["kind"] != "CustomResourceDefinition" {
            assert_eq!(
                o["metadata"]["labels"]["team"], "platform",
                "{} {}",
                o["kind"], o["metadata"]["name"]
            );
        }
    }
    let d = one(&objects, "Deployment");
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"]["team"],
        "platform"
    );
    assert!(
        d["spec"]["selector"]["matchLabels"]["team"].is_null(),
        "selectors are immutable: commonLabels stay out of them"
    );
    assert_eq!(
        d["metadata"]["annotations"]["example.com/owner"],
        "platform"
    );
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(
        pod["volumes"][1],
        json!({"name": "corp-ca", "configMap": {"name": "corp-ca"}})
    );
    let c = container(&objects);
    assert_eq!(c["env"][0]["name"], "POD_NAME");
    assert_eq!(
        c["env"][1],
        json!({"name": "NO_PROXY", "value": ".svc,.cluster.local"})
    );
    assert_eq!(
        c["volumeMounts"][1],
        json!({"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": true})
    );
    // Probe keys given replace the chart's; the rest stay.
    assert_eq!(c["livenessProbe"]["periodSeconds"], 20);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["failureThreshold"], 4);
    assert_eq!(c["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    // The ports, everywhere they appear.
    let a = args(&objects);
    assert_eq!(arg(&a, "--listen"), Some("0.0.0.0:9443"));
    assert_eq!(arg(&a, "--admin-listen"), Some("0.0.0.0:9080"));
    assert_eq!(arg(&a, "--policy-report-api"), Some("openreports"));
    assert_flags_exist(&a);
    let ports: Vec<(Value, Value)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].clone(), p["containerPort"].clone()))
        .collect();
    assert_eq!(
        ports,
        [
            (json!("webhook"), json!(9443)),
            (json!("admin"), json!(9080))
        ]
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        "9080"
    );
    let service = one(&objects, "Service");
    assert_eq!(
        service["metadata"]["annotations"]["example.com/scrape-zone"],
        "internal"
    );
    let service_ports: Vec<(Value, Value)> = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["port"].clone(), p["targetPort"].clone()))
        .collect();
    assert_eq!(
        service_ports,
        [
            (json!(443), json!("webhook")),
            (json!(9080), json!("admin"))
        ],
        "the API server still calls port 443; the target is the named port"
    );
    let np = one(&objects, "NetworkPolicy");
    assert_eq!(np["spec"]["ingress"][0]["ports"][0]["port"], 9443);
    assert_eq!(np["spec"]["ingress"][1]["ports"][0]["port"], 9080);
    // The budget by maxUnavailable, without minAvailable.
    let pdb = one(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert!(pdb["spec"]["minAvailable"].is_null());
    // The webhook configurations' metadata (AKS's Admissions Enforcer).
    for k in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = one(&objects, k);
        assert_eq!(
            config["metadata"]["annotations"]["admissions.enforcer/disabled"], "true",
            "{k}"
        );
        assert_eq!(
            config["metadata"]["labels"]["example.com/tier"], "admission",
            "{k}"
        );
        assert_eq!(
            config["metadata"]["labels"]["app.kubernetes.io/component"],
            "webhook-configuration"
        );
    }
    // The ServiceMonitor: elsewhere, relabelled, over TLS, still selecting the release's Service.
    let monitor = one(&objects, "ServiceMonitor");
    assert_eq!(monitor["metadata"]["namespace"], "monitoring");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!([NAMESPACE])
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["tlsConfig"], json!({"insecureSkipVerify": true}));
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "cluster");
    assert_eq!(endpoint["metricRelabelings"][0]["regex"], "process_.*");
    assert_eq!(endpoint["honorLabels"], true);
    // RBAC for the chosen report API only.
    let groups: Vec<String> = one(&objects, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| strings(&r["apiGroups"]))
        .map(str::to_owned)
        .collect();
    assert!(groups.contains(&"openreports.io".to_owned()), "{groups:?}");
    assert!(!groups.contains(&"wgpolicyk8s.io".to_owned()), "{groups:?}");
    let test_pod = one(&objects, "Pod");
    assert_eq!(
        test_pod["spec"]["containers"][0]["image"],
        "registry.example.com/mirror/curl:8.11.1"
    );

    // Defaults: no extra metadata, the webhook configurations unannotated.
    let defaults = render("bookend", NAMESPACE, &[]);
    assert!(one(&defaults, "Deployment")["metadata"]["annotations"].is_null());
    assert!(one(&defaults, "Service")["metadata"]["annotations"].is_null());
    assert!(one(&defaults, "MutatingWebhookConfiguration")["metadata"]["annotations"].is_null());
    assert!(one(&defaults, "Deployment")["spec"]["template"]["spec"]["hostNetwork"].is_null());
    // cert-manager's annotation and the user's together.
    let both = render(
        "bookend",
        NAMESPACE,
        &[
            "--set",
            "certManager.enabled=true",
            "--set-json",
            r#"webhook.annotations={"admissions.enforcer/disabled":"true"}"#,
        ],
    );
    let annotations = &one(&both, "ValidatingWebhookConfiguration")["metadata"]["annotations"];
    assert_eq!(annotations["admissions.enforcer/disabled"], "true");
    assert_eq!(
        annotations["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/bookend-serving")
    );
    // A budget that allows no eviction is refused, as minAvailable = replicas is.
    let err = template(
        "bookend",
        NAMESPACE,
        &["--set", "podDisruptionBudget.maxUnavailable=0"],
    )
    .unwrap_err();
    assert!(err.contains("must be at least 1"), "{err}");
    let percent = render(
        "bookend",
        NAMESPACE,
        &["--set", "podDisruptionBudget.maxUnavailable=50%"],
    );
    assert_eq!(
        one(&percent, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        "50%"
    );
}

#[test]
fn report_rbac_follows_the_chosen_api() {
    let groups = |args: &[&str]| -> BTreeSet<String> {
        one(&render("bookend", NAMESPACE, args), "ClusterRole")["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| strings(&r["verbs"]).contains(&"create"))
            .flat_map(|r| strings(&r["resources"]))
            .map(str::to_owned)
            .collect()
    };
    let all =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| (*n).to_owned()).collect() };
    assert_eq!(
        groups(&[]),
        all(&["events", "policyreports", "reports"]),
        "auto (default): both"
    );
    assert_eq!(
        groups(&["--set", "policyReports.api=wgpolicyk8s"]),
        all(&["events", "policyreports"])
    );
    assert_eq!(
        groups(&["--set", "policyReports.api=openreports"]),
        all(&["events", "reports"])
    );
    assert_eq!(
        groups(&["--set", "policyReports.enabled=false"]),
        all(&["events"])
    );
    let a = args(&render("bookend", NAMESPACE, &[]));
    assert_eq!(arg(&a, "--policy-report-api"), Some("auto"));
}

// ---------------------------------------------------------------------------------------------
// helm test

struct LocalServe {
    child: std::process::Child,
    port: u16,
    admin: u16,
    certs: PathBuf,
}

impl Drop for LocalServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn bookend_certs(dir: &Path) -> PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(["certs", "--host", "127.0.0.1", "--out-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "bookend certs: {out:?}");
    dir.to_owned()
}

/// `bookend serve` (files mode) on loopback, until /readyz answers 200.
fn local_serve(dir: &Path) -> LocalServe {
    let certs = bookend_certs(&dir.join("certs"));
    let port = free_port();
    let mut admin = free_port();
    while admin == port {
        admin = free_port();
    }
    let child = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(["serve", "--policies"])
        .arg(root().join("examples/policies"))
        .arg("--tls-cert")
        .arg(certs.join("tls.crt"))
        .arg("--tls-key")
        .arg(certs.join("tls.key"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut serve = LocalServe {
        child,
        port,
        admin,
        certs,
    };
    for _ in 0..300 {
        assert!(
            serve.child.try_wait().unwrap().is_none(),
            "bookend serve exited"
        );
        let ready = Command::new("curl")
            .args(["-sf", &format!("http://127.0.0.1:{admin}/readyz")])
            .output()
            .is_ok_and(|o| o.status.success());
        if ready {
            return serve;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("bookend serve never got ready");
}

/// The `helm test` Pod's script, run here against a real `bookend serve` with the Pod's
/// environment pointed at it: it passes against bookend with the right CA and fails with
/// another CA or no server.
#[test]
fn the_helm_test_pod_checks_the_webhook_through_tls() {
    let objects = render("bookend", NAMESPACE, &[]);
    let pod = one(&objects, "Pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["spec"]["volumes"][0]["secret"]["secretName"], "bookend-tls",
        "the serving Secret's CA"
    );
    let env: BTreeMap<String, String> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(env["BOOKEND_HOST"], format!("bookend.{NAMESPACE}.svc"));
    assert_eq!(env["WEBHOOK_PORT"], "443");
    assert_eq!(env["ADMIN_PORT"], "8080");
    let command: Vec<&str> = strings(&c["command"]);
    assert_eq!(command, ["/bin/sh", "-ec"]);
    let script = c["args"][0].as_str().unwrap().to_owned();

    let dir = tempfile::tempdir().unwrap();
    let serve = local_serve(dir.path());
    let run = |ca: &Path, port: u16| {
        Command::new("sh")
            .args(["-ec", &script])
            .env("BOOKEND_HOST", "127.0.0.1")
            .env("WEBHOOK_PORT", port.to_string())
            .env("ADMIN_PORT", serve.admin.to_string())
            .env("CA_FILE", ca)
            .env("NAMESPACE", NAMESPACE)
            .output()
            .unwrap()
    };
    let ok = run(&serve.certs.join("ca.crt"), serve.port);
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "the helm test script against bookend: {stdout}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(stdout.contains(r#""allowed":true"#), "{stdout}");
    assert!(stdout.contains("bookend answers through its Service"));
    // Another CA: TLS verification fails, and so does the test.
    let other = bookend_certs(&dir.path().join("other"));
    let bad_ca = run(&other.join("ca.crt"), serve.port);
    assert!(
        !bad_ca.status.success(),
        "a CA bookend's certificate does not chain to"
    );
    // Nothing listening: fails too.
    let nothing = run(&serve.certs.join("ca.crt"), free_port());
    assert!(!nothing.status.success());
    // Not rendered when turned off (deploy/ has no helm test).
    let off = render("bookend", NAMESPACE, &["--set", "test.enabled=false"]);
    assert!(kind(&off, "Pod").is_empty());
}
