//! The manifests under `deploy/`: the CRDs equal `bookend crds`, the hardening the install
//! promises is really there, every flag the Deployment passes exists, and the webhook
//! configurations say what docs/install.md says they say.
//!
//! When a kubectl binary is available (`BOOKEND_KUBECTL`, else `tests/e2e/bin/current/kubectl`,
//! built by `tests/e2e/build-tools.sh`), `kubectl kustomize` renders `deploy/` and
//! `deploy/overlays/cert-manager` and the rendered CRDs are compared too; without one that part
//! is skipped with a note on stdout.
//!
//! Regenerate the CRDs with `BOOKEND_BLESS=1 cargo test --test deploy` (or
//! `cargo run -q -- crds > deploy/base/crds.yaml`), then review the diff.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use bookend::policy::api::crds_yaml;
use bookend::policy::load::yaml_documents;
use serde_json::Value;

const NAMESPACE: &str = "bookend-system";
const SERVICE: &str = "bookend";
const TLS_SECRET: &str = "bookend-tls";
const TEKTON_MUTATING: &str = "webhook.pipeline.tekton.dev";
const TEKTON_CONTROLLER: &str =
    "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller";

fn deploy_dir() -> PathBuf {
    common::root().join("deploy")
}

/// One object from a manifest, with the file it came from (for messages).
struct Object {
    file: PathBuf,
    value: Value,
}

impl Object {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or("")
    }
    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or("")
    }
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

/// Every document of every YAML file under `deploy/` (kustomizations included).
fn all_objects() -> Vec<Object> {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    assert!(!files.is_empty(), "no YAML under deploy/");
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs = yaml_documents(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        assert!(!docs.is_empty(), "{}: no documents", file.display());
        for value in docs {
            assert!(
                value["kind"].is_string() && value["apiVersion"].is_string(),
                "{}: a document without kind/apiVersion",
                file.display()
            );
            objects.push(Object {
                file: file.clone(),
                value,
            });
        }
    }
    objects
}

/// The objects of `deploy/base` (what `kubectl apply -k deploy/` installs).
fn base_objects() -> Vec<Object> {
    let base = deploy_dir().join("base");
    all_objects()
        .into_iter()
        .filter(|o| o.file.starts_with(&base) && o.kind() != "Kustomization")
        .collect()
}

fn one<'a>(objects: &'a [Object], kind: &str) -> &'a Value {
    let found: Vec<_> = objects.iter().filter(|o| o.kind() == kind).collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind} in deploy/base, found {}",
        found.len()
    );
    &found[0].value
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// CRDs

#[test]
fn crds_yaml_is_what_bookend_crds_prints() {
    let path = deploy_dir().join("base/crds.yaml");
    let expected = crds_yaml();
    if std::env::var_os("BOOKEND_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(&path).unwrap();
    assert!(
        actual == expected,
        "deploy/base/crds.yaml is stale: run `cargo run -q -- crds > deploy/base/crds.yaml` \
         (or BOOKEND_BLESS=1 cargo test --test deploy) and review the diff"
    );
}

#[test]
fn the_base_installs_the_crds() {
    let kustomization =
        std::fs::read_to_string(deploy_dir().join("base/kustomization.yaml")).unwrap();
    let docs = yaml_documents(&kustomization).unwrap();
    let resources = strings(&docs[0]["resources"]);
    assert!(resources.contains(&"crds.yaml"), "{resources:?}");
    let root =
        yaml_documents(&std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap())
            .unwrap();
    assert_eq!(strings(&root[0]["resources"]), ["base"]);
}

// ---------------------------------------------------------------------------------------------
// Namespaces

#[test]
fn namespaced_objects_live_in_bookend_system() {
    let cluster_scoped = [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "Kustomization",
    ];
    for o in all_objects() {
        if cluster_scoped.contains(&o.kind()) {
            continue;
        }
        assert_eq!(
            o.value["metadata"]["namespace"].as_str(),
            Some(NAMESPACE),
            "{}: {} {} must name namespace {NAMESPACE}",
            o.file.display(),
            o.kind(),
            o.name()
        );
    }
    let objects = base_objects();
    let ns = one(&objects, "Namespace");
    assert_eq!(ns["metadata"]["name"], NAMESPACE);
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

// ---------------------------------------------------------------------------------------------
// Deployment

fn deployment() -> Value {
    one(&base_objects(), "Deployment").clone()
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 1, "one container: bookend");
    &containers[0]
}

/// `--flag=value` and `--flag value` forms, as a map flag → values.
fn parse_args(args: &[&str]) -> BTreeMap<String, Vec<String>> {
    let mut flags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i];
        assert!(arg.starts_with("--"), "argument {arg:?} is not a flag");
        if let Some((flag, value)) = arg.split_once('=') {
            flags
                .entry(flag.to_owned())
                .or_default()
                .push(value.to_owned());
        } else if i + 1 < args.len() && !args[i + 1].starts_with("--") {
            flags
                .entry(arg.to_owned())
                .or_default()
                .push(args[i + 1].to_owned());
            i += 1;
        } else {
            flags.entry(arg.to_owned()).or_default();
        }
        i += 1;
    }
    flags
}

fn serve_args(deployment: &Value) -> BTreeMap<String, Vec<String>> {
    let c = container(deployment);
    assert!(c["command"].is_null(), "the image's entrypoint is bookend");
    let args = strings(&c["args"]);
    assert_eq!(args.first(), Some(&"serve"), "args must start with `serve`");
    parse_args(&args[1..])
}

fn flag<'a>(flags: &'a BTreeMap<String, Vec<String>>, name: &str) -> &'a str {
    match flags.get(name).map(Vec::as_slice) {
        Some([v]) => v,
        other => panic!("{name}: expected one value, got {other:?}"),
    }
}

fn seconds(text: &str) -> f64 {
    if let Some(ms) = text.strip_suffix("ms") {
        ms.parse::<f64>().unwrap() / 1000.0
    } else if let Some(s) = text.strip_suffix('s') {
        s.parse().unwrap()
    } else if let Some(m) = text.strip_suffix('m') {
        m.parse::<f64>().unwrap() * 60.0
    } else {
        text.parse().unwrap()
    }
}

#[test]
fn every_container_arg_is_a_flag_bookend_serve_accepts() {
    let out = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "bookend serve --help failed");
    let help = String::from_utf8_lossy(&out.stdout);
    let known: BTreeSet<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.trim_end_matches([',', '.', ')', ':']))
        .map(|w| w.split('=').next().unwrap())
        .collect();
    let flags = serve_args(&deployment());
    let unknown: Vec<_> = flags
        .keys()
        .filter(|f| !known.contains(f.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "deploy/base/deployment.yaml passes flags `bookend serve` does not accept: {unknown:?}\n\
         (known: {known:?})"
    );
}

#[test]
fn the_server_runs_in_kubernetes_mode_on_all_interfaces_with_the_mounted_certificate() {
    let d = deployment();
    let flags = serve_args(&d);
    assert_eq!(flag(&flags, "--source"), "kubernetes");
    assert_eq!(flag(&flags, "--log-format"), "json");
    assert_eq!(flag(&flags, "--listen"), "0.0.0.0:8443");
    assert_eq!(flag(&flags, "--admin-listen"), "0.0.0.0:8080");

    let pod = &d["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == TLS_SECRET)
        .expect("a volume from the Secret bookend-tls");
    let mount = container(&d)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the TLS volume is mounted");
    assert_eq!(
        mount["readOnly"], true,
        "the TLS Secret is mounted read-only"
    );
    assert!(
        mount["subPath"].is_null(),
        "subPath would freeze the files: no rotation"
    );
    let dir = mount["mountPath"].as_str().unwrap();
    assert_eq!(dir, "/etc/bookend/tls");
    assert_eq!(flag(&flags, "--tls-cert"), format!("{dir}/tls.crt"));
    assert_eq!(flag(&flags, "--tls-key"), format!("{dir}/tls.key"));
}

#[test]
fn the_deployment_is_highly_available() {
    let d = deployment();
    assert!(d["spec"]["replicas"].as_u64().unwrap() >= 2, "2+ replicas");
    assert_eq!(
        d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "a rollout never removes a replica before its successor is ready"
    );
    let pod = &d["spec"]["template"]["spec"];
    let pod_labels = &d["spec"]["template"]["metadata"]["labels"];
    let spread_by_node = pod["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["topologyKey"] == "kubernetes.io/hostname"
                && c["whenUnsatisfiable"] == "DoNotSchedule"
                && selects(&c["labelSelector"], pod_labels)
        });
    let anti_affinity =
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| {
                t["topologyKey"] == "kubernetes.io/hostname"
                    && selects(&t["labelSelector"], pod_labels)
            });
    assert!(
        spread_by_node || anti_affinity,
        "replicas must be spread across nodes (topologySpreadConstraints or podAntiAffinity)"
    );
}

/// Whether a `matchLabels`-only selector selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let Some(want) = selector["matchLabels"].as_object() else {
        return false;
    };
    selector["matchExpressions"].is_null()
        && !want.is_empty()
        && want.iter().all(|(k, v)| &labels[k] == v)
}

#[test]
fn the_pod_is_hardened() {
    let d = deployment();
    let pod = &d["spec"]["template"]["spec"];
    let c = container(&d);
    let (psc, csc) = (&pod["securityContext"], &c["securityContext"]);
    assert_eq!(psc["runAsNonRoot"], true);
    assert!(psc["runAsUser"].as_u64().unwrap() > 0);
    assert_eq!(csc["runAsNonRoot"], true);
    assert_eq!(csc["readOnlyRootFilesystem"], true);
    assert_eq!(csc["allowPrivilegeEscalation"], false);
    assert_eq!(strings(&csc["capabilities"]["drop"]), ["ALL"]);
    assert!(
        csc["capabilities"]["add"].is_null(),
        "no capabilities added"
    );
    assert!(csc["privileged"].is_null() || csc["privileged"] == false);
    for sc in [psc, csc] {
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        assert!(pod[field].is_null() || pod[field] == false, "{field}");
    }
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][resource].is_string(),
                "resources.{kind}.{resource} must be set"
            );
        }
    }
}

#[test]
fn probes_use_the_admin_port() {
    let d = deployment();
    let c = container(&d);
    let flags = serve_args(&d);
    let admin_port: u64 = flag(&flags, "--admin-listen")
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let port_of = |p: &Value| -> u64 {
        if let Some(n) = p.as_u64() {
            return n;
        }
        let name = p.as_str().unwrap();
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|port| port["name"] == name)
            .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(
            port_of(&get["port"]),
            admin_port,
            "{probe} on the admin port"
        );
        assert!(
            get["scheme"].is_null() || get["scheme"] == "HTTP",
            "the admin port is plain HTTP"
        );
    }
}

#[test]
fn shutdown_fits_in_the_grace_period() {
    let d = deployment();
    let flags = serve_args(&d);
    let grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_f64()
        .expect("terminationGracePeriodSeconds is set");
    let pre_stop = container(&d)["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_f64()
        .unwrap_or(0.0);
    // The server's own default drain bound, when the manifest does not set one.
    let drain = flags
        .get("--drain-timeout")
        .map(|v| seconds(&v[0]))
        .unwrap_or(20.0);
    let linger = flags
        .get("--shutdown-linger")
        .map(|v| seconds(&v[0]))
        .unwrap_or(2.0);
    assert!(
        grace > pre_stop + linger + drain,
        "terminationGracePeriodSeconds ({grace}) must exceed preStop ({pre_stop}) + linger ({linger}) + drain ({drain})"
    );
}

// ---------------------------------------------------------------------------------------------
// RBAC

#[test]
fn the_cluster_role_is_least_privilege() {
    let objects = base_objects();
    let role = one(&objects, "ClusterRole");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(
                !strings(&rule[field]).iter().any(|s| s.contains('*')),
                "ClusterRole: no wildcards in {field}: {rule}"
            );
        }
        assert!(rule["nonResourceURLs"].is_null());
        // ConfigMaps only by name: Tekton's feature flags, defaults and version, nothing else.
        if strings(&rule["resources"]) == ["configmaps"] {
            assert_eq!(
                strings(&rule["resourceNames"]),
                ["feature-flags", "config-defaults", "pipelines-info"],
                "{rule}"
            );
        } else {
            assert!(rule["resourceNames"].is_null(), "{rule}");
        }
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.insert((group.to_owned(), resource.to_owned(), verb.to_owned()));
                }
            }
        }
    }
    let mut expected = BTreeSet::new();
    for (group, resource) in [
        ("bookend.dev", "clustersteppolicies"),
        ("bookend.dev", "steppolicies"),
        ("", "namespaces"),
        ("tekton.dev", "tasks"),
        ("tekton.dev", "stepactions"),
    ] {
        // Reflectors list and watch; nothing GETs these (tests/e2e/cluster/rbac.rs audits it).
        for verb in ["list", "watch"] {
            expected.insert((group.to_owned(), resource.to_owned(), verb.to_owned()));
        }
    }
    // kube-runtime's Recorder posts events.k8s.io/v1 Events only.
    for verb in ["create", "patch"] {
        expected.insert((
            "events.k8s.io".to_owned(),
            "events".to_owned(),
            verb.to_owned(),
        ));
    }
    for verb in ["list", "watch"] {
        expected.insert(("".into(), "configmaps".into(), verb.into()));
    }
    // TaskRuns: one GET for the Pod backstop and the follow-ups' check that a TaskRun was
    // stored; list, watch and patch for post-run verification (the watch and the mark).
    for verb in ["get", "list", "watch", "patch"] {
        expected.insert((
            "tekton.dev".to_owned(),
            "taskruns".to_owned(),
            verb.to_owned(),
        ));
    }
    // Reports with policyReports.api=auto: whichever of the two APIs the cluster serves.
    for (group, resource) in [
        ("wgpolicyk8s.io", "policyreports"),
        ("openreports.io", "reports"),
    ] {
        for verb in ["get", "create", "update"] {
            expected.insert((group.to_owned(), resource.to_owned(), verb.to_owned()));
        }
    }
    for resource in ["clustersteppolicies/status", "steppolicies/status"] {
        expected.insert((
            "bookend.dev".to_owned(),
            resource.to_owned(),
            "patch".to_owned(),
        ));
    }
    assert_eq!(
        granted, expected,
        "ClusterRole grants exactly what the caches, the status writes, Events and reports need"
    );

    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let sa = one(&objects, "ServiceAccount");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}])
    );
    assert_eq!(
        deployment()["spec"]["template"]["spec"]["serviceAccountName"],
        sa["metadata"]["name"]
    );
}

// ---------------------------------------------------------------------------------------------
// Service, PDB, NetworkPolicy

#[test]
fn the_service_pdb_and_network_policy_select_the_pods() {
    let objects = base_objects();
    let d = deployment();
    let labels = &d["spec"]["template"]["metadata"]["labels"];

    let svc = one(&objects, "Service");
    assert_eq!(svc["metadata"]["name"], SERVICE);
    let selector = &svc["spec"]["selector"];
    assert!(
        selector.as_object().is_some_and(|s| !s.is_empty())
            && selector
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, v)| &labels[k] == v)
    );
    let https = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == 443)
        .expect("Service port 443");
    let webhook_port = container(&d)["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == https["targetPort"] || p["containerPort"] == https["targetPort"])
        .expect("443 targets a container port")["containerPort"]
        .clone();
    assert_eq!(webhook_port, 8443);

    let pdb = one(&objects, "PodDisruptionBudget");
    assert!(pdb["spec"]["minAvailable"].as_u64().unwrap() >= 1);
    assert!(
        pdb["spec"]["minAvailable"].as_u64().unwrap() < d["spec"]["replicas"].as_u64().unwrap(),
        "minAvailable < replicas, or no node could ever be drained"
    );
    assert!(selects(&pdb["spec"]["selector"], labels));

    let np = one(&objects, "NetworkPolicy");
    assert!(selects(&np["spec"]["podSelector"], labels));
    let types = strings(&np["spec"]["policyTypes"]);
    assert!(
        types.contains(&"Ingress") && types.contains(&"Egress"),
        "{types:?}"
    );
    let ingress = np["spec"]["ingress"].as_array().unwrap();
    let rule_for = |port: u64| {
        ingress
            .iter()
            .find(|r| {
                r["ports"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["port"] == port))
            })
            .unwrap_or_else(|| panic!("NetworkPolicy: no ingress rule for port {port}"))
    };
    assert!(
        rule_for(8443)["from"].is_null(),
        "8443 is open to every source: the API server's address varies by provider"
    );
    assert!(
        rule_for(8080)["from"]
            .as_array()
            .is_some_and(|f| !f.is_empty()),
        "8080 (metrics) is restricted"
    );
    assert!(
        np["spec"]["egress"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
}

// ---------------------------------------------------------------------------------------------
// Webhook configurations

fn webhooks(objects: &[Object], kind: &str) -> (String, Vec<Value>) {
    let config = one(objects, kind);
    (
        config["metadata"]["name"].as_str().unwrap().to_owned(),
        config["webhooks"].as_array().unwrap().clone(),
    )
}

fn entry<'a>(webhooks: &'a [Value], name: &str) -> &'a Value {
    webhooks
        .iter()
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("no webhook entry {name}"))
}

fn excludes_system_namespaces(w: &Value) {
    let exprs = w["namespaceSelector"]["matchExpressions"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: namespaceSelector.matchExpressions", w["name"]));
    let excluded: Vec<&str> = exprs
        .iter()
        .filter(|e| e["key"] == "kubernetes.io/metadata.name" && e["operator"] == "NotIn")
        .flat_map(|e| strings(&e["values"]))
        .collect();
    for ns in [NAMESPACE, "kube-system"] {
        assert!(excluded.contains(&ns), "{}: must exclude {ns}", w["name"]);
    }
}

fn rule_is(w: &Value, group: &str, versions: &[&str], ops: &[&str], resources: &[&str]) {
    let rules = w["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{}: one rule", w["name"]);
    let r = &rules[0];
    assert_eq!(strings(&r["apiGroups"]), [group], "{}", w["name"]);
    assert_eq!(strings(&r["apiVersions"]), versions, "{}", w["name"]);
    assert_eq!(strings(&r["operations"]), ops, "{}", w["name"]);
    assert_eq!(strings(&r["resources"]), resources, "{}", w["name"]);
}

#[test]
fn every_webhook_entry_is_explicit_and_calls_the_service() {
    let objects = base_objects();
    let svc = one(&objects, "Service");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let (_, entries) = webhooks(&objects, kind);
        assert!(!entries.is_empty());
        let mut names = BTreeSet::new();
        for w in &entries {
            let name = w["name"].as_str().unwrap();
            assert!(names.insert(name), "duplicate webhook name {name}");
            assert!(name.split('.').count() >= 3, "{name}: a qualified name");
            assert_eq!(strings(&w["admissionReviewVersions"]), ["v1"], "{name}");
            // The backstop posts Events and PolicyReport results after admitting a TaskRun,
            // never for a dry run; nothing else has side effects.
            let side_effects = if name == "taskruns.validate.bookend.dev" {
                "NoneOnDryRun"
            } else {
                "None"
            };
            assert_eq!(w["sideEffects"], side_effects, "{name}");
            assert_eq!(w["matchPolicy"], "Exact", "{name}");
            let timeout = w["timeoutSeconds"].as_u64().expect("timeoutSeconds set");
            assert!(
                (1..=5).contains(&timeout),
                "{name}: timeoutSeconds {timeout}"
            );
            assert!(
                matches!(w["failurePolicy"].as_str(), Some("Ignore" | "Fail")),
                "{name}: explicit failurePolicy"
            );
            let client = &w["clientConfig"];
            assert!(
                client["url"].is_null(),
                "{name}: calls the Service, not a URL"
            );
            assert!(
                client["caBundle"].is_null(),
                "{name}: caBundle must stay out of the manifest (cert-manager or \
                 certs/install-dev-certs.sh fill it; a declared value is reset by every apply)"
            );
            let service = &client["service"];
            assert_eq!(service["namespace"], NAMESPACE, "{name}");
            assert_eq!(service["name"], svc["metadata"]["name"], "{name}");
            assert_eq!(service["port"], 443, "{name}");
            let path = if kind.starts_with("Mutating") {
                "/mutate"
            } else if name.starts_with("pods.") {
                "/validate-pods"
            } else {
                "/validate"
            };
            assert_eq!(service["path"], path, "{name}");
            // A matchCondition that errors makes a fail-closed webhook refuse: keep them few.
            for c in w["matchConditions"].as_array().into_iter().flatten() {
                assert!(
                    c["name"].is_string() && c["expression"].is_string(),
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn mutation_is_fail_open_runs_before_tekton_and_is_reinvoked() {
    let objects = base_objects();
    let (config, entries) = webhooks(&objects, "MutatingWebhookConfiguration");
    assert!(
        config.as_str() < TEKTON_MUTATING,
        "{config:?} must sort before {TEKTON_MUTATING:?} so bookend sees the raw TaskRun"
    );
    for w in &entries {
        assert_eq!(
            w["failurePolicy"], "Ignore",
            "{}: mutation fails open",
            w["name"]
        );
        assert_eq!(w["reinvocationPolicy"], "IfNeeded", "{}", w["name"]);
        assert!(w["timeoutSeconds"].as_u64().unwrap() <= 5);
        excludes_system_namespaces(w);
    }

    let taskruns = entry(&entries, "taskruns.mutate.bookend.dev");
    rule_is(
        taskruns,
        "tekton.dev",
        &["v1", "v1beta1"],
        &["CREATE"],
        &["taskruns"],
    );
    assert!(
        taskruns["matchConditions"].is_null(),
        "no semantic filters on TaskRuns: the API server cannot know which policies apply"
    );

    let tasks = entry(&entries, "tasks-dryrun.mutate.bookend.dev");
    rule_is(
        tasks,
        "tekton.dev",
        &["v1", "v1beta1"],
        &["CREATE"],
        &["tasks"],
    );
    let conditions: Vec<&str> = tasks["matchConditions"]
        .as_array()
        .expect("the Task entry is limited by matchConditions")
        .iter()
        .map(|c| c["expression"].as_str().unwrap())
        .collect();
    assert!(
        conditions.iter().any(|c| c.contains("request.dryRun")),
        "dry-run only: {conditions:?}"
    );
    assert!(
        conditions
            .iter()
            .any(|c| c.contains("request.userInfo.username") && c.contains(TEKTON_CONTROLLER)),
        "Tekton's controller only: {conditions:?}"
    );
    // bookend checks the user again: the Deployment must name the same one.
    let flags = serve_args(&deployment());
    let server_side = flags
        .get("--tekton-controller")
        .map(|v| v[0].as_str())
        .unwrap_or(bookend::policy::DEFAULT_TEKTON_CONTROLLER);
    assert_eq!(
        server_side, TEKTON_CONTROLLER,
        "--tekton-controller vs the matchCondition"
    );
}

#[test]
fn validation_is_the_fail_closed_backstop() {
    let objects = base_objects();
    let (_, entries) = webhooks(&objects, "ValidatingWebhookConfiguration");
    for w in &entries {
        assert_eq!(
            w["failurePolicy"], "Fail",
            "{}: validation fails closed",
            w["name"]
        );
    }
    let taskruns = entry(&entries, "taskruns.validate.bookend.dev");
    rule_is(
        taskruns,
        "tekton.dev",
        &["v1", "v1beta1"],
        &["CREATE"],
        &["taskruns"],
    );
    excludes_system_namespaces(taskruns);

    let policies = entry(&entries, "policies.validate.bookend.dev");
    rule_is(
        policies,
        "bookend.dev",
        &["v1alpha1"],
        &["CREATE", "UPDATE"],
        &["clustersteppolicies", "steppolicies"],
    );
    // Every CREATE is validated; only UPDATEs that leave the spec alone may be skipped.
    for c in policies["matchConditions"].as_array().into_iter().flatten() {
        let e = c["expression"].as_str().unwrap();
        assert!(
            e.contains("request.operation != 'UPDATE'"),
            "a condition on policies must keep every CREATE: {e}"
        );
    }
    // The Pod backstop sees the Pods labelled as a TaskRun's and those Tekton's controller would
    // adopt as one by name, whoever creates or changes them (only Tekton's controller may create
    // one; nobody may change an org container); an objectSelector cannot test a name.
    let pods = entry(&entries, "pods.validate.bookend.dev");
    rule_is(
        pods,
        "",
        &["v1"],
        &["CREATE", "UPDATE"],
        &["pods", "pods/ephemeralcontainers", "pods/status"],
    );
    excludes_system_namespaces(pods);
    assert!(
        pods.get("objectSelector").is_none(),
        "an objectSelector on tekton.dev/taskRun keeps away the Pods Tekton adopts by name"
    );
    let conditions = serde_json::to_string(&pods["matchConditions"]).unwrap();
    for needed in [
        "'tekton.dev/taskRun' in object.metadata.labels",
        "'tekton.dev/taskRun' in oldObject.metadata.labels",
        "'app.kubernetes.io/managed-by' in object.metadata.labels",
        "object.metadata.name.matches('-pod(-retry[0-9]+)?$')",
        // pods/status may change labels; kubelets' status updates must not wait for bookend.
        // `request.subResource` is absent, not empty, without a subresource: an unguarded
        // read is an evaluation error, which this fail-closed webhook turns into a refusal
        // (runtime scenario 10 found it: Tekton's controller's Pod UPDATEs were refused).
        "!has(request.subResource) || request.subResource != 'status'",
        "object.metadata.labels != oldObject.metadata.labels",
    ] {
        assert!(conditions.contains(needed), "{needed}: {conditions}");
    }
    assert!(
        !conditions.contains("userInfo"),
        "not limited to Tekton's controller: a Pod anyone else makes a TaskRun's is refused"
    );

    // The policy CRDs' group and plural names are the ones the rule names.
    let crd_names: BTreeSet<String> = yaml_documents(&crds_yaml())
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let ruled: BTreeSet<String> = strings(&policies["rules"][0]["resources"])
        .iter()
        .map(|r| format!("{r}.bookend.dev"))
        .collect();
    assert_eq!(crd_names, ruled);
}

// ---------------------------------------------------------------------------------------------
// cert-manager overlay

#[test]
fn the_cert_manager_overlay_issues_bookend_tls_and_injects_the_ca() {
    let dir = deploy_dir().join("overlays/cert-manager");
    let objects: Vec<Object> = all_objects()
        .into_iter()
        .filter(|o| o.file.starts_with(&dir))
        .collect();
    let certificate = |name: &str| {
        objects
            .iter()
            .find(|o| o.kind() == "Certificate" && o.name() == name)
            .unwrap_or_else(|| panic!("no Certificate {name}"))
            .value
            .clone()
    };
    let serving = certificate("bookend-serving");
    assert_eq!(serving["spec"]["secretName"], TLS_SECRET);
    let dns = strings(&serving["spec"]["dnsNames"]);
    assert!(dns.contains(&"bookend.bookend-system.svc"), "{dns:?}");
    let ca = certificate("bookend-ca");
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(
        ca["spec"]["privateKey"]["rotationPolicy"], "Never",
        "the CA keeps its key on renewal, so the injected bundle never stops verifying the \
         serving certificate the pods still present"
    );
    let kustomization = objects
        .iter()
        .find(|o| o.kind() == "Kustomization")
        .expect("overlays/cert-manager/kustomization.yaml");
    assert!(
        strings(&kustomization.value["resources"]).contains(&"../../base"),
        "the overlay builds on deploy/base"
    );
    let patches = serde_json::to_string(&kustomization.value["patches"]).unwrap();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert!(patches.contains(kind), "inject-ca-from patch for {kind}");
    }
    assert!(patches.contains("cert-manager.io/inject-ca-from: bookend-system/bookend-serving"));
}

// ---------------------------------------------------------------------------------------------
// certs/install-dev-certs.sh

#[test]
fn the_dev_certs_script_is_valid_bash() {
    let script = common::root().join("certs/install-dev-certs.sh");
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash -n {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&script).unwrap();
    for needle in [
        "--prune-old-ca",
        "bookend.bookend-system.svc",
        "bookend.bookend-system.svc.cluster.local",
        TLS_SECRET,
    ] {
        assert!(text.contains(needle), "the script mentions {needle}");
    }
}

// ---------------------------------------------------------------------------------------------
// kubectl kustomize (when a kubectl is available)

fn kubectl() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("BOOKEND_KUBECTL") {
        return Some(PathBuf::from(path));
    }
    let built = common::root().join("tests/e2e/bin/current/kubectl");
    built.is_file().then_some(built)
}

fn kustomize(kubectl: &Path, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .args(["kustomize", dir])
        .current_dir(common::root())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    yaml_documents(&String::from_utf8(out.stdout).unwrap())
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir}: output does not parse: {e}"))
}

fn by_kind_and_name(docs: &[Value]) -> BTreeMap<(String, String), Value> {
    docs.iter()
        .map(|d| {
            (
                (
                    d["kind"].as_str().unwrap().to_owned(),
                    d["metadata"]["name"].as_str().unwrap().to_owned(),
                ),
                d.clone(),
            )
        })
        .collect()
}

#[test]
fn kubectl_kustomize_renders_and_its_crds_equal_bookend_crds() {
    let Some(kubectl) = kubectl() else {
        println!(
            "skipped: no kubectl (set BOOKEND_KUBECTL or run tests/e2e/build-tools.sh); \
             `kubectl kustomize deploy/` was not checked"
        );
        return;
    };
    let expected: BTreeMap<String, Value> = yaml_documents(&crds_yaml())
        .unwrap()
        .into_iter()
        .map(|c| (c["metadata"]["name"].as_str().unwrap().to_owned(), c))
        .collect();
    let base_kinds = [
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ];
    for dir in ["deploy/", "deploy/overlays/cert-manager"] {
        let docs = by_kind_and_name(&kustomize(&kubectl, dir));
        let crds: BTreeMap<String, Value> = docs
            .iter()
            .filter(|((kind, _), _)| kind == "CustomResourceDefinition")
            .map(|((_, name), v)| (name.clone(), v.clone()))
            .collect();
        assert_eq!(
            crds.keys().collect::<Vec<_>>(),
            expected.keys().collect::<Vec<_>>(),
            "{dir}: CRD names"
        );
        for (name, crd) in &crds {
            assert!(
                crd == &expected[name],
                "{dir}: CRD {name} differs from `bookend crds`"
            );
        }
        let kinds: BTreeSet<&str> = docs.keys().map(|(k, _)| k.as_str()).collect();
        for kind in base_kinds {
            assert!(kinds.contains(kind), "{dir}: renders no {kind}");
        }
        for ((kind, name), doc) in &docs {
            if let Some(ns) = doc["metadata"]["namespace"].as_str() {
                assert_eq!(ns, NAMESPACE, "{dir}: {kind} {name}");
            }
        }
        let injected = |kind: &str| {
            docs[&(kind.to_owned(), "bookend.dev".to_owned())]["metadata"]["annotations"]
                ["cert-manager.io/inject-ca-from"]
                .clone()
        };
        for kind in [
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ] {
            if dir.ends_with("cert-manager") {
                assert_eq!(
                    injected(kind),
                    "bookend-system/bookend-serving",
                    "{dir}: {kind}"
                );
                assert!(docs.contains_key(&("Certificate".into(), "bookend-serving".into())));
                assert!(docs.contains_key(&("Issuer".into(), "bookend-ca".into())));
            } else {
                assert!(
                    injected(kind).is_null(),
                    "{dir}: {kind} without cert-manager"
                );
            }
        }
    }
    println!("checked with {}", kubectl.display());
}
