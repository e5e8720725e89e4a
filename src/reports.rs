//! PolicyReports for Audit policies (kubernetes mode): one report per namespace, `bookend-audit`,
//! with one result per admitted TaskRun and Audit policy that matched it — would inject
//! (`pass`), would deny (`fail`) or skipped (`skip`) — naming the policy, its steps and what
//! would happen.
//!
//! Two APIs carry them, with the same result shape: `wgpolicyk8s.io/v1alpha2` PolicyReport and
//! its successor `openreports.io/v1alpha1` Report ([`ReportApi`]). `--policy-report-api` picks
//! one, or `auto`: whichever the API server serves, openreports first, looked up again every
//! 30 s (a cluster that gains the openreports CRD gets Reports without a restart). Only
//! namespaced reports are written: every result is about a TaskRun, so a ClusterReport would
//! stay empty.
//!
//! Results are collected in memory and written in batches by one task: read the report, merge
//! (a result per TaskRun and policy; the newest `limit` kept), replace it with the read
//! `resourceVersion` as precondition, and on a conflict (another replica wrote) read and merge
//! again. So several replicas add to one report without losing each other's results. When no
//! report CRD is installed, results are dropped with one log line and the API is looked up
//! again every 30 s; installing the CRD later needs no restart.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::engine::verify::{PolicyRun, RunVerdict};
use crate::engine::{AuditFinding, AuditOutcome};
use crate::metrics::Metrics;

/// The report's name in each namespace.
pub const REPORT_NAME: &str = "bookend-audit";
/// `source` of every result.
pub const SOURCE: &str = "bookend";
/// Default and largest number of results kept per report.
pub const DEFAULT_LIMIT: usize = 200;
pub const MAX_LIMIT: usize = 1000;
/// A result's message is cut to this many bytes.
pub const MESSAGE_LIMIT: usize = 512;
/// How often a missing report CRD (and, with `auto`, a preferred one) is looked for again.
const RECHECK: Duration = Duration::from_secs(30);

/// An API that carries policy reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportApi {
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport (Kyverno before 1.15, Kubewarden, Trivy Operator).
    WgPolicyK8s,
    /// `openreports.io/v1alpha1` Report, its successor (Kyverno 1.15 and later).
    OpenReports,
}

impl ReportApi {
    pub const fn group(self) -> &'static str {
        match self {
            Self::WgPolicyK8s => "wgpolicyk8s.io",
            Self::OpenReports => "openreports.io",
        }
    }

    pub const fn version(self) -> &'static str {
        match self {
            Self::WgPolicyK8s => "v1alpha2",
            Self::OpenReports => "v1alpha1",
        }
    }

    pub const fn kind(self) -> &'static str {
        match self {
            Self::WgPolicyK8s => "PolicyReport",
            Self::OpenReports => "Report",
        }
    }

    pub const fn plural(self) -> &'static str {
        match self {
            Self::WgPolicyK8s => "policyreports",
            Self::OpenReports => "reports",
        }
    }

    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    pub fn resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group(), self.version(), self.kind()),
            self.plural(),
        )
    }

    /// The report object for `namespace` holding `results` (no resourceVersion). openreports
    /// also names the engine at the top (`source`), as one engine writes every result.
    pub fn report(self, namespace: &str, results: &[Value]) -> Value {
        let mut report = json!({
            "apiVersion": self.api_version(),
            "kind": self.kind(),
            "metadata": {
                "name": REPORT_NAME,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "bookend"},
            },
            "summary": summary(results),
            "results": results,
        });
        if self == Self::OpenReports {
            report["source"] = json!(SOURCE);
        }
        report
    }
}

impl std::fmt::Display for ReportApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind())
    }
}

/// Which report API to write (`--policy-report-api`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportApiChoice {
    WgPolicyK8s,
    OpenReports,
    /// Whichever the API server serves, openreports first.
    #[default]
    Auto,
}

impl ReportApiChoice {
    /// The APIs to look for, preferred first.
    pub fn candidates(self) -> &'static [ReportApi] {
        match self {
            Self::WgPolicyK8s => &[ReportApi::WgPolicyK8s],
            Self::OpenReports => &[ReportApi::OpenReports],
            Self::Auto => &[ReportApi::OpenReports, ReportApi::WgPolicyK8s],
        }
    }

    /// The CRDs this choice can write, for the log line when none is served.
    fn describe(self) -> String {
        self.candidates()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" or ")
    }
}

/// The TaskRun a result is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    pub api_version: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

/// One PolicyReport result, as written (`results[]`).
pub fn result(subject: &Subject, finding: &AuditFinding, seconds: i64) -> Value {
    let result = match finding.outcome {
        AuditOutcome::WouldInject => "pass",
        AuditOutcome::WouldDeny => "fail",
        AuditOutcome::Skipped => "skip",
    };
    let message = cut(finding.message.clone());
    json!({
        "source": SOURCE,
        "policy": finding.policy,
        "result": result,
        "message": message,
        "timestamp": {"seconds": seconds, "nanos": 0},
        "resources": [{
            "apiVersion": subject.api_version,
            "kind": "TaskRun",
            "name": subject.name,
            "namespace": subject.namespace,
            "uid": subject.uid,
        }],
        "properties": {
            "mode": "Audit",
            "outcome": finding.outcome.as_str(),
            "steps": finding.steps.join(","),
        },
    })
}

/// One PolicyReport result for a policy's post-run verdict on a finished TaskRun
/// ([`crate::engine::verify`]): `pass`, or `fail` or `skip` with the reason; Enforce policies
/// too.
pub fn run_result(subject: &Subject, run: &PolicyRun, seconds: i64) -> Value {
    let message = match &run.verdict {
        RunVerdict::Pass => format!(
            "org steps ran: {}",
            run.steps
                .iter()
                .map(|s| format!("{} {}", s.name, s.outcome.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        RunVerdict::Fail(reason) | RunVerdict::Skip(reason) => reason.clone(),
    };
    let mut properties = serde_json::Map::new();
    properties.insert("check".into(), json!("run"));
    if let Some(mode) = run.mode {
        properties.insert("mode".into(), json!(format!("{mode:?}")));
    }
    if let Some(cause) = run.cause {
        properties.insert("cause".into(), json!(cause.as_str()));
    }
    if let Some(drift) = &run.drift {
        properties.insert("drift".into(), json!(drift.as_str()));
    }
    for step in &run.steps {
        properties.insert(format!("step.{}", step.name), json!(step.outcome.as_str()));
    }
    json!({
        "source": SOURCE,
        "policy": run.policy,
        "rule": "run",
        "result": run.verdict.as_str(),
        "message": cut(message),
        "timestamp": {"seconds": seconds, "nanos": 0},
        "resources": [{
            "apiVersion": subject.api_version,
            "kind": "TaskRun",
            "name": subject.name,
            "namespace": subject.namespace,
            "uid": subject.uid,
        }],
        "properties": properties,
    })
}

fn cut(mut message: String) -> String {
    if message.len() > MESSAGE_LIMIT {
        let mut cut = MESSAGE_LIMIT - 3;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

/// A result's identity: the TaskRun's uid, the policy and the rule (`run` for a post-run
/// verdict, none for an Audit finding; a TaskRun admitted twice, e.g. a retried request, keeps
/// one result per policy and rule).
fn key(result: &Value) -> (String, String, String) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        text(&result["resources"][0]["uid"]),
        text(&result["policy"]),
        text(&result["rule"]),
    )
}

fn seconds(result: &Value) -> i64 {
    result["timestamp"]["seconds"].as_i64().unwrap_or(0)
}

/// `existing` results (any source: other tools' are kept as they are) and `new` ones merged:
/// one per TaskRun and policy (the newer wins), oldest first, at most `limit` of bookend's (the
/// oldest are dropped).
pub fn merge(existing: &[Value], new: &[Value], limit: usize) -> Vec<Value> {
    let (ours, theirs): (Vec<&Value>, Vec<&Value>) =
        existing.iter().partition(|r| r["source"] == SOURCE);
    let mut by_key: HashMap<(String, String, String), Value> = HashMap::new();
    for r in ours.into_iter().chain(new) {
        let k = key(r);
        match by_key.get(&k) {
            Some(old) if seconds(old) > seconds(r) => {}
            _ => {
                by_key.insert(k, r.clone());
            }
        }
    }
    let mut merged: Vec<Value> = by_key.into_values().collect();
    merged.sort_by_key(|r| (seconds(r), key(r)));
    let excess = merged.len().saturating_sub(limit);
    merged.drain(..excess);
    theirs.into_iter().cloned().chain(merged).collect()
}

/// The report's `summary`: how many results of each kind.
pub fn summary(results: &[Value]) -> Value {
    let mut counts: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    for r in results {
        if let Some(n) = r["result"].as_str().and_then(|k| counts.get_mut(k)) {
            *n += 1;
        }
    }
    json!(counts)
}

/// Where new results wait for the writer.
#[derive(Clone)]
pub struct Reports {
    pending: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    wake: Arc<Notify>,
}

impl Reports {
    /// Starts the writer: batches are written at most every `every`, each report keeping at
    /// most `limit` of bookend's results, to the API `choice` names.
    pub fn start(
        client: Client,
        choice: ReportApiChoice,
        limit: usize,
        every: Duration,
        metrics: Metrics,
    ) -> Self {
        let reports = Self {
            pending: Arc::default(),
            wake: Arc::new(Notify::new()),
        };
        tokio::spawn(write_loop(
            client,
            reports.clone(),
            choice,
            limit.clamp(1, MAX_LIMIT),
            every,
            metrics,
        ));
        reports
    }

    /// Queues results for `namespace`'s report (never waits for the API server).
    pub fn add(&self, namespace: &str, results: Vec<Value>) {
        if results.is_empty() {
            return;
        }
        if let Ok(mut pending) = self.pending.lock() {
            let queued = pending.entry(namespace.to_owned()).or_default();
            queued.extend(results);
            // More than a report keeps would be dropped by the merge anyway.
            let excess = queued.len().saturating_sub(MAX_LIMIT);
            queued.drain(..excess);
        }
        self.wake.notify_one();
    }

    fn take(&self) -> HashMap<String, Vec<Value>> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }
}

/// Whether the API server serves `api`.
async fn served(client: &Client, api: ReportApi) -> bool {
    client
        .list_api_group_resources(&api.api_version())
        .await
        .is_ok_and(|list| list.resources.iter().any(|r| r.name == api.plural()))
}

/// The first of `choice`'s APIs the API server serves.
async fn detect(client: &Client, choice: ReportApiChoice) -> Option<ReportApi> {
    for api in choice.candidates() {
        if served(client, *api).await {
            return Some(*api);
        }
    }
    None
}

/// Logs what the writer does now that the detected API is `api` (after `previous`).
fn log_detected(choice: ReportApiChoice, previous: Option<ReportApi>, api: Option<ReportApi>) {
    match api {
        Some(api) if previous.is_some() => {
            tracing::info!(%api, "report API changed: Audit results now go to {api} objects")
        }
        Some(api) => tracing::info!(%api, "report CRD found: Audit results go to {api} objects"),
        None => tracing::info!(
            "no report CRD installed ({}): Audit results go to admission warnings and audit annotations only; install one to get reports (looked up again every 30s)",
            choice.describe()
        ),
    }
}

async fn write_loop(
    client: Client,
    reports: Reports,
    choice: ReportApiChoice,
    limit: usize,
    every: Duration,
    metrics: Metrics,
) {
    let mut current = detect(&client, choice).await;
    let mut checked = Instant::now();
    log_detected(choice, None, current);
    // With `auto`, a served API is looked up again too: openreports may arrive later.
    let recheck_served = choice == ReportApiChoice::Auto;
    loop {
        if current.is_some() {
            reports.wake.notified().await;
        } else {
            // Look for a CRD again every RECHECK, results or not.
            tokio::select! {
                () = reports.wake.notified() => {}
                () = tokio::time::sleep(RECHECK.saturating_sub(checked.elapsed())) => {}
            }
        }
        // Collect a batch: one write per namespace for everything that arrives meanwhile.
        tokio::time::sleep(every).await;
        let batch = reports.take();
        if (current.is_none() || recheck_served) && checked.elapsed() >= RECHECK {
            let found = detect(&client, choice).await;
            checked = Instant::now();
            if found != current {
                log_detected(choice, current, found);
                current = found;
            }
        }
        let Some(api) = current else {
            tracing::debug!(
                namespaces = batch.len(),
                "no report CRD: Audit results dropped"
            );
            continue;
        };
        for (namespace, results) in batch {
            match write(&client, api, &namespace, &results, limit).await {
                Ok(()) => metrics.policy_report_write(true),
                Err(WriteError::NotInstalled) => {
                    metrics.policy_report_write(false);
                    current = None;
                    checked = Instant::now();
                    tracing::warn!(
                        %api,
                        "the report CRD is gone: Audit results are dropped until a report CRD is back"
                    );
                    break;
                }
                Err(WriteError::Conflicts) => {
                    metrics.policy_report_write(false);
                    tracing::warn!(%namespace, "the PolicyReport kept changing under bookend (five conflicts); results dropped");
                }
                Err(WriteError::Api(error)) => {
                    metrics.policy_report_write(false);
                    tracing::warn!(%error, %namespace, "cannot write the PolicyReport; results dropped");
                }
            }
        }
    }
}

enum WriteError {
    NotInstalled,
    /// Five writes in a row lost to another writer.
    Conflicts,
    Api(kube::Error),
}

fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Adds `results` to `namespace`'s report: read, merge, replace (or create); again on conflict.
async fn write(
    client: &Client,
    report_api: ReportApi,
    namespace: &str,
    results: &[Value],
    limit: usize,
) -> Result<(), WriteError> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &report_api.resource());
    for _ in 0..5 {
        let current = match api.get_opt(REPORT_NAME).await {
            Ok(c) => c,
            Err(e) if status_code(&e) == Some(404) => return Err(WriteError::NotInstalled),
            Err(e) => return Err(WriteError::Api(e)),
        };
        let existing: Vec<Value> = current
            .as_ref()
            .and_then(|c| c.data.get("results"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let merged = merge(&existing, results, limit);
        let mut object = report_api.report(namespace, &merged);
        let outcome = match &current {
            Some(c) => {
                object["metadata"]["resourceVersion"] = json!(c.metadata.resource_version);
                if let Some(labels) = &c.metadata.labels {
                    for (k, v) in labels {
                        object["metadata"]["labels"][k] = json!(v);
                    }
                }
                let object: DynamicObject =
                    serde_json::from_value(object).expect("a report is an object");
                api.replace(REPORT_NAME, &PostParams::default(), &object)
                    .await
            }
            None => {
                let object: DynamicObject =
                    serde_json::from_value(object).expect("a report is an object");
                api.create(&PostParams::default(), &object).await
            }
        };
        match outcome {
            Ok(_) => return Ok(()),
            // Another replica wrote (409), or created it first (409 AlreadyExists): again.
            Err(e) if status_code(&e) == Some(409) => continue,
            Err(e) if status_code(&e) == Some(404) && current.is_none() => {
                return Err(WriteError::NotInstalled);
            }
            Err(e) => return Err(WriteError::Api(e)),
        }
    }
    Err(WriteError::Conflicts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(policy: &str, outcome: AuditOutcome) -> AuditFinding {
        AuditFinding {
            policy: policy.to_owned(),
            outcome,
            steps: vec!["bookend-a".into(), "bookend-b".into()],
            message: "would inject bookend-a, bookend-b".into(),
        }
    }

    fn subject(uid: &str) -> Subject {
        Subject {
            api_version: "tekton.dev/v1".into(),
            name: format!("run-{uid}"),
            namespace: "team-a".into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn a_result_names_the_policy_the_taskrun_and_the_steps() {
        let r = result(
            &subject("u1"),
            &finding("ClusterStepPolicy/p", AuditOutcome::WouldInject),
            100,
        );
        assert_eq!(r["policy"], "ClusterStepPolicy/p");
        assert_eq!(r["result"], "pass");
        assert_eq!(r["source"], "bookend");
        assert_eq!(r["resources"][0]["kind"], "TaskRun");
        assert_eq!(r["resources"][0]["uid"], "u1");
        assert_eq!(r["properties"]["outcome"], "would-inject");
        assert_eq!(r["properties"]["steps"], "bookend-a,bookend-b");
        assert_eq!(r["timestamp"], json!({"seconds": 100, "nanos": 0}));
        let deny = result(&subject("u1"), &finding("P", AuditOutcome::WouldDeny), 1);
        assert_eq!(deny["result"], "fail");
        let mut long = finding("P", AuditOutcome::Skipped);
        long.message = "é".repeat(600);
        let skip = result(&subject("u1"), &long, 1);
        assert_eq!(skip["result"], "skip");
        assert!(skip["message"].as_str().unwrap().len() <= MESSAGE_LIMIT);
    }

    #[test]
    fn merging_keeps_one_result_per_taskrun_and_policy_and_the_newest_within_the_limit() {
        let r = |uid: &str, policy: &str, at: i64| {
            result(
                &subject(uid),
                &finding(policy, AuditOutcome::WouldInject),
                at,
            )
        };
        let theirs = json!({"source": "kyverno", "policy": "require-labels", "result": "fail"});
        let existing = vec![
            theirs.clone(),
            r("u1", "A", 1),
            r("u2", "A", 2),
            r("u3", "A", 3),
        ];
        // u2/A again, newer; two new TaskRuns; a limit of 3 of bookend's results.
        let new = vec![r("u2", "A", 4), r("u4", "A", 5), r("u5", "B", 6)];
        let merged = merge(&existing, &new, 3);
        let keys: Vec<(String, String)> = merged
            .iter()
            .skip(1)
            .map(|r| {
                let (uid, policy, _) = key(r);
                (uid, policy)
            })
            .collect();
        assert_eq!(merged[0], theirs, "other tools' results are kept");
        assert_eq!(
            keys,
            [
                ("u2".into(), "A".into()),
                ("u4".into(), "A".into()),
                ("u5".into(), "B".into())
            ]
        );
        assert_eq!(seconds(&merged[1]), 4, "the newer result for u2/A");
        // An older copy never replaces a newer one (a slow replica's batch).
        let again = merge(&merged, &[r("u2", "A", 2)], 3);
        assert_eq!(seconds(&again[1]), 4);
    }

    #[test]
    fn both_apis_carry_the_same_results_and_openreports_names_the_source() {
        let results = vec![result(
            &subject("u1"),
            &finding("ClusterStepPolicy/p", AuditOutcome::WouldDeny),
            7,
        )];
        let wg = ReportApi::WgPolicyK8s.report("team-a", &results);
        let open = ReportApi::OpenReports.report("team-a", &results);
        assert_eq!(wg["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(wg["kind"], "PolicyReport");
        assert!(wg.get("source").is_none(), "not a PolicyReport field");
        assert_eq!(open["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(open["kind"], "Report");
        assert_eq!(open["source"], SOURCE);
        for report in [&wg, &open] {
            assert_eq!(report["metadata"]["name"], REPORT_NAME);
            assert_eq!(report["metadata"]["namespace"], "team-a");
            assert_eq!(report["results"], json!(results));
            assert_eq!(report["summary"]["fail"], 1);
        }
        assert_eq!(ReportApi::OpenReports.resource().plural, "reports");
        assert_eq!(ReportApi::WgPolicyK8s.resource().plural, "policyreports");
    }

    #[test]
    fn auto_prefers_openreports_and_a_named_api_is_the_only_one_looked_for() {
        assert_eq!(
            ReportApiChoice::Auto.candidates(),
            [ReportApi::OpenReports, ReportApi::WgPolicyK8s]
        );
        assert_eq!(
            ReportApiChoice::WgPolicyK8s.candidates(),
            [ReportApi::WgPolicyK8s]
        );
        assert_eq!(
            ReportApiChoice::OpenReports.candidates(),
            [ReportApi::OpenReports]
        );
        assert_eq!(ReportApiChoice::default(), ReportApiChoice::Auto);
    }

    #[test]
    fn the_summary_counts_every_kind() {
        let results = vec![
            json!({"result": "pass"}),
            json!({"result": "pass"}),
            json!({"result": "fail"}),
            json!({"result": "skip"}),
        ];
        assert_eq!(
            summary(&results),
            json!({"pass": 2, "fail": 1, "warn": 0, "error": 0, "skip": 1})
        );
    }
}
