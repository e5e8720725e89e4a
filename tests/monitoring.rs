//! The monitoring bundle of the chart: the alerting rules pass `promtool check rules` and the
//! unit tests in `tests/monitoring/alerts-test.yaml` (`promtool test rules`), every alert has a
//! firing case there, and every series the rules and the Grafana dashboard read is one that a
//! real `bookend serve` exports, with label names (and, for `=` matchers, values) it really has.
//! Series of the API server and kube-state-metrics are an explicit allow-list (the e2e test
//! checks the API server's against a real kube-apiserver).
//!
//! promtool and promql-selectors (Prometheus's PromQL parser) come from
//! `tests/e2e/build-tools.sh`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bookend::policy::load::yaml_documents;
use common::root;
use serde_json::{Value, json};

/// Series that bookend does not export but the rules or the dashboard read, by exporter. Each
/// must be used (a stale entry fails the test).
const ALLOWED: [(&str, &str); 7] = [
    // Post-run verification runs in kubernetes mode only, and its series appear once a TaskRun
    // finished; their labels are checked by the unit test in src/metrics.rs and by the e2e
    // scenario (tests/e2e/cluster/verification.rs).
    ("bookend_run_verdicts_total", "bookend in kubernetes mode"),
    (
        "bookend_step_duration_seconds_sum",
        "bookend in kubernetes mode",
    ),
    (
        "apiserver_admission_webhook_fail_open_count",
        "kube-apiserver",
    ),
    (
        "apiserver_admission_webhook_rejection_count",
        "kube-apiserver",
    ),
    (
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
        "kube-apiserver",
    ),
    (
        "kube_deployment_status_replicas_available",
        "kube-state-metrics",
    ),
    ("kube_deployment_spec_replicas", "kube-state-metrics"),
];

/// Labels Prometheus adds when it scrapes a target (not part of /metrics).
const TARGET_LABELS: [&str; 6] = [
    "namespace",
    "pod",
    "job",
    "instance",
    "service",
    "container",
];

/// The chart's PrometheusRule with every alert on (release `bookend`, namespace bookend-system).
fn rendered_rule() -> Value {
    monitoring_template("templates/prometheusrule.yaml")
}

/// One template of the chart with `ci/monitoring-values.yaml` (every monitoring object on).
fn monitoring_template(template: &str) -> Value {
    let text = common::helm_template(
        "bookend",
        "bookend-system",
        &[
            "-f",
            "charts/bookend/ci/monitoring-values.yaml",
            "--show-only",
            template,
        ],
    )
    .unwrap_or_else(|e| panic!("helm template --show-only {template}: {e}"));
    yaml_documents(&text).unwrap().remove(0)
}

fn promtool(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(common::e2e_tool("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_alerting_rules_pass_promtool_check_and_their_unit_tests() {
    let rule = rendered_rule();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let tests = std::fs::read_to_string(root().join("tests/monitoring/alerts-test.yaml")).unwrap();
    std::fs::write(dir.path().join("alerts-test.yaml"), &tests).unwrap();

    let (ok, out) = promtool(&["check", "rules", "rules.yaml"], dir.path());
    assert!(ok, "promtool check rules:\n{out}");
    let (ok, out) = promtool(&["test", "rules", "alerts-test.yaml"], dir.path());
    assert!(
        ok,
        "promtool test rules tests/monitoring/alerts-test.yaml:\n{out}"
    );

    // Every alert the chart ships has a case where it fires.
    let alerts: BTreeSet<String> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_owned())
        .collect();
    let cases = yaml_documents(&tests).unwrap().remove(0);
    let fired: BTreeSet<String> = cases["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()))
        .map(|a| a["alertname"].as_str().unwrap().to_owned())
        .collect();
    let untested: Vec<_> = alerts.difference(&fired).collect();
    assert!(
        untested.is_empty(),
        "alerts with no firing case in alerts-test.yaml: {untested:?}"
    );
    assert!(alerts.len() >= 15, "{alerts:?}");
}

// ---------------------------------------------------------------------------------------------
// A real bookend serve

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Serve {
    child: Child,
    port: u16,
    admin: u16,
    ca: PathBuf,
    log: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(dir: &Path) -> Self {
        let bookend = env!("CARGO_BIN_EXE_bookend");
        let certs = dir.join("certs");
        let out = Command::new(bookend)
            .args(["certs", "--host", "127.0.0.1", "--out-dir"])
            .arg(&certs)
            .output()
            .unwrap();
        assert!(out.status.success(), "bookend certs: {out:?}");
        let port = free_port();
        let mut admin = free_port();
        while admin == port {
            admin = free_port();
        }
        let log = dir.join("bookend.log");
        let child = Command::new(bookend)
            .args(["serve", "--policies"])
            .arg(root().join("examples/policies"))
            .arg("--tls-cert")
            .arg(certs.join("tls.crt"))
            .arg("--tls-key")
            .arg(certs.join("tls.key"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut serve = Serve {
            child,
            port,
            admin,
            ca: certs.join("ca.crt"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = serve.child.try_wait().unwrap() {
                panic!(
                    "bookend serve exited ({status}):\n{}",
                    std::fs::read_to_string(&serve.log).unwrap_or_default()
                );
            }
            if serve.get("/readyz").is_some_and(|(code, _)| code == 200) {
                return serve;
            }
            assert!(
                Instant::now() < deadline,
                "bookend serve never became ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain-HTTP GET on the admin port.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.admin)).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let code = response.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, response.split_once("\r\n\r\n")?.1.to_owned()))
    }
}

/// The sample review (a TaskRun CREATE in team-a), with `dryRun` as given.
fn review(dry_run: bool) -> Value {
    let mut review: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("examples/admission-review.json")).unwrap(),
    )
    .unwrap();
    review["request"]["dryRun"] = json!(dry_run);
    review
}

/// One sample line of /metrics: name and labels.
fn parse_metrics(text: &str) -> BTreeMap<String, Vec<BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        let mut labels = BTreeMap::new();
        if let Some(body) = rest.strip_prefix('{').and_then(|r| r.split_once('}')) {
            for pair in body.0.split(',').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap();
                labels.insert(k.to_owned(), v.trim_matches('"').to_owned());
            }
        }
        out.entry(name.to_owned()).or_default().push(labels);
    }
    out
}

/// Every PromQL expression in the rules and the dashboard, with where it comes from.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in rendered_rule()["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
    {
        out.push((
            format!("alert {}", r["alert"].as_str().unwrap()),
            r["expr"].as_str().unwrap().to_owned(),
        ));
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("charts/bookend/files/dashboards/bookend.json"))
            .unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            // Grafana's variables, as Grafana would substitute them.
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "2m")
                .replace("$namespace", "bookend-system");
            out.push((
                format!("panel {:?}", panel["title"].as_str().unwrap()),
                expr,
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            // label_values(<series>, <label>): the series must exist and carry the label.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
                .unwrap_or_else(|| panic!("unexpected variable query {query}"));
            let (series, label) = inner.split_once(',').unwrap();
            out.push((
                format!("variable {}", variable["name"].as_str().unwrap()),
                format!("{}{{{}!=\"\"}}", series.trim(), label.trim()),
            ));
        }
    }
    out
}

#[test]
fn every_series_the_rules_and_the_dashboard_read_is_exported() {
    let tmp = tempfile::tempdir().unwrap();
    let serve = Serve::start(tmp.path());

    // Reviews that produce every outcome the rules and the dashboard select on.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let statuses = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(&std::fs::read(&serve.ca).unwrap()).unwrap(),
            )
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let url = |path: &str| format!("https://127.0.0.1:{}{path}", serve.port);
        let mut statuses = Vec::new();
        for (path, body) in [
            ("/mutate", review(false).to_string()), // mutated, injected steps
            ("/mutate", review(true).to_string()),  // mutated, dry-run
            ("/validate", review(false).to_string()), // denied: the steps are missing
            ("/mutate", "{\"not\": \"a review\"}".into()), // error (400)
        ] {
            let response = client.post(url(path)).body(body).send().await.unwrap();
            statuses.push(response.status().as_u16());
        }
        statuses
    });
    assert_eq!(statuses, [200, 200, 200, 400]);
    let (code, text) = serve.get("/metrics").expect("/metrics");
    assert_eq!(code, 200);
    let exported = parse_metrics(&text);
    let outcomes: BTreeSet<&str> = exported["bookend_admission_requests_total"]
        .iter()
        .map(|l| l["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        ["denied", "error", "mutated"].into(),
        "the reviews gave the outcomes the rules select on"
    );

    // Parse every expression with Prometheus's own parser.
    let exprs = expressions();
    let input: Vec<&str> = exprs.iter().map(|(_, e)| e.as_str()).collect();
    let mut child = Command::new(common::e2e_tool("promql-selectors"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&input).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let parsed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed.len(), exprs.len());

    let allowed: BTreeMap<&str, &str> = ALLOWED.into_iter().collect();
    let mut used_allowed = BTreeSet::new();
    let mut problems = Vec::new();
    let mut read = BTreeSet::new();
    for ((source, expr), result) in exprs.iter().zip(&parsed) {
        if let Some(e) = result["error"].as_str().filter(|e| !e.is_empty()) {
            problems.push(format!("{source}: does not parse: {e}\n  {expr}"));
            continue;
        }
        let selectors = result["selectors"].as_array().unwrap();
        if selectors.is_empty() {
            problems.push(format!("{source}: reads no series: {expr}"));
        }
        for s in selectors {
            let name = s["name"].as_str().unwrap();
            read.insert(name.to_owned());
            let Some(series) = exported.get(name) else {
                if allowed.contains_key(name) {
                    used_allowed.insert(name);
                } else {
                    problems.push(format!(
                        "{source}: reads {name:?}, which bookend does not export and the \
                         allow-list does not name"
                    ));
                }
                continue;
            };
            for m in s["matchers"].as_array().unwrap() {
                let label = m["name"].as_str().unwrap();
                if TARGET_LABELS.contains(&label) {
                    continue;
                }
                let values: BTreeSet<&str> = series
                    .iter()
                    .filter_map(|l| l.get(label).map(String::as_str))
                    .collect();
                if values.is_empty() {
                    problems.push(format!("{source}: {name} has no label {label:?}"));
                } else if m["type"] == "=" && !values.contains(m["value"].as_str().unwrap()) {
                    problems.push(format!(
                        "{source}: {name}{{{label}={:?}}}: bookend exports {label} only as {values:?}",
                        m["value"].as_str().unwrap()
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let unused: Vec<_> = allowed
        .keys()
        .filter(|k| !used_allowed.contains(*k))
        .collect();
    assert!(
        unused.is_empty(),
        "allow-list entries nothing reads: {unused:?}"
    );
    // The dashboard covers what the issue asks for.
    for family in [
        "bookend_admission_requests_total",
        "bookend_admission_duration_seconds_bucket",
        "bookend_injected_steps_total",
        "bookend_policy_reloads_total",
        "bookend_certificate_reloads_total",
        "bookend_certificate_expiry_timestamp_seconds",
    ] {
        assert!(read.contains(family), "nothing reads {family}");
    }
}

// ---------------------------------------------------------------------------------------------
// Series as prometheus-operator scrapes them

/// The target labels prometheus-operator gives a ServiceMonitor endpoint's targets (its
/// generated scrape config: job from the Service, namespace, service, pod, container, the
/// Service port's name as `endpoint`, and instance).
fn operator_target_labels(pod: &str) -> BTreeMap<String, String> {
    [
        ("job", "bookend"),
        ("namespace", "bookend-system"),
        ("service", "bookend"),
        ("pod", pod),
        ("container", "bookend"),
        ("endpoint", "http-admin"),
        (
            "instance",
            if pod.ends_with('a') {
                "10.0.0.1:8080"
            } else {
                "10.0.0.2:8080"
            },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// A scraped series' labels, by Prometheus's `honor_labels` rule: true keeps the exposed value
/// where it clashes with a target label; false keeps the target's and renames the exposed one
/// to `exported_<name>`.
fn scraped(
    exposed: &BTreeMap<String, String>,
    target: &BTreeMap<String, String>,
    honor_labels: bool,
) -> BTreeMap<String, String> {
    let mut labels = target.clone();
    for (k, v) in exposed {
        if target.contains_key(k) && !honor_labels {
            labels.insert(format!("exported_{k}"), v.clone());
        } else {
            labels.insert(k.clone(), v.clone());
        }
    }
    labels
}

fn series_text(name: &str, labels: &BTreeMap<String, String>) -> String {
    let body: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{name}{{{}}}", body.join(", "))
}

/// What a real bookend exports for `bookend_admission_requests_total` after a mutation, a
/// denial and a malformed review (the label sets, not the values).
fn exported_request_label_sets() -> Vec<BTreeMap<String, String>> {
    let tmp = tempfile::tempdir().unwrap();
    let serve = Serve::start(tmp.path());
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(&std::fs::read(&serve.ca).unwrap()).unwrap(),
            )
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        for (path, body) in [
            ("/mutate", review(false).to_string()),
            ("/validate", review(false).to_string()),
            ("/mutate", "{\"not\": \"a review\"}".into()),
        ] {
            let url = format!("https://127.0.0.1:{}{path}", serve.port);
            client.post(url).body(body).send().await.unwrap();
        }
    });
    let (_, text) = serve.get("/metrics").expect("/metrics");
    parse_metrics(&text)
        .remove("bookend_admission_requests_total")
        .expect("bookend_admission_requests_total")
}

/// promtool unit tests over bookend's series as prometheus-operator scrapes two replicas: the
/// BookendBadRequests alert and the dashboard's requests-by-endpoint panel must name bookend's
/// endpoints (`mutate`, `validate`), not the scrape endpoint.
fn operator_scrape_tests(
    rule: &Value,
    label_sets: &[BTreeMap<String, String>],
    honor_labels: bool,
) -> String {
    let mut input = Vec::new();
    for pod in ["bookend-a", "bookend-b"] {
        for exposed in label_sets {
            let labels = scraped(exposed, &operator_target_labels(pod), honor_labels);
            // One request a second on each series.
            input.push(json!({
                "series": series_text("bookend_admission_requests_total", &labels),
                "values": "0+60x30",
            }));
        }
    }
    // The alert, with its annotations as Prometheus expands them for endpoint "mutate".
    let alert = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "BookendBadRequests")
        .expect("BookendBadRequests");
    let annotations: BTreeMap<String, String> = alert["annotations"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_str()
                    .unwrap()
                    .replace("{{ $labels.endpoint }}", "mutate"),
            )
        })
        .collect();
    let errors: BTreeSet<&str> = label_sets
        .iter()
        .filter(|l| l["outcome"] == "error")
        .map(|l| l["endpoint"].as_str())
        .collect();
    assert_eq!(errors, ["mutate"].into(), "the malformed review's endpoint");
    // The panel, and what it must show: per (endpoint, outcome), two replicas at 1/s per series.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("charts/bookend/files/dashboards/bookend.json"))
            .unwrap(),
    )
    .unwrap();
    let panel_expr = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_owned))
        .find(|e| e.contains("sum by (endpoint, outcome)"))
        .expect("the requests-by-endpoint panel")
        .replace("$__rate_interval", "2m")
        .replace("$namespace", "bookend-system");
    let mut per_group: BTreeMap<(String, String), u32> = BTreeMap::new();
    for l in label_sets {
        *per_group
            .entry((l["endpoint"].clone(), l["outcome"].clone()))
            .or_default() += 2;
    }
    let expected: Vec<Value> = per_group
        .iter()
        .map(|((endpoint, outcome), n)| {
            json!({"labels": format!("{{endpoint={endpoint:?}, outcome={outcome:?}}}"), "value": n})
        })
        .collect();
    let tests = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input,
            "alert_rule_test": [{
                "eval_time": "20m",
                "alertname": "BookendBadRequests",
                "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "namespace": "bookend-system", "endpoint": "mutate"},
                    "exp_annotations": annotations,
                }],
            }],
            "promql_expr_test": [{
                "expr": panel_expr,
                "eval_time": "20m",
                "exp_samples": expected,
            }],
        }],
    });
    serde_yaml_ng::to_string(&tests).unwrap()
}

/// The shipped ServiceMonitor sets honorLabels, so under prometheus-operator's target labels
/// bookend's own `endpoint` survives and the alerts and panels grouped by it still tell
/// /mutate from /validate; without honorLabels the very same tests fail (every series becomes
/// endpoint="http-admin", bookend's value moves to exported_endpoint).
#[test]
fn alerts_and_panels_group_by_endpoint_under_operator_scrape_labels() {
    let monitor = monitoring_template("templates/servicemonitor.yaml");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(
        endpoint["port"], "http-admin",
        "the target label endpoint is this port's name"
    );
    let shipped_honor = endpoint["honorLabels"].as_bool().unwrap_or(false);

    let rule = rendered_rule();
    let label_sets = exported_request_label_sets();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml_ng::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let run = |honor: bool| {
        let file = format!("operator-scrape-honor-{honor}.yaml");
        std::fs::write(
            dir.path().join(&file),
            operator_scrape_tests(&rule, &label_sets, honor),
        )
        .unwrap();
        promtool(&["test", "rules", &file], dir.path())
    };
    let (ok, out) = run(shipped_honor);
    assert!(
        ok,
        "with the shipped ServiceMonitor (honorLabels {shipped_honor}) the alert and the panel \
         must group by bookend's endpoints:\n{out}"
    );
    let (ok, out) = run(false);
    assert!(
        !ok,
        "without honorLabels the endpoint grouping must collapse (else this test proves nothing)"
    );
    assert!(
        out.contains("http-admin"),
        "collapsed onto the scrape endpoint:\n{out}"
    );
}
