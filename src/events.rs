//! After admission (kubernetes mode): Events on the TaskRuns bookend admitted, and their Audit
//! results for PolicyReports ([`crate::reports`]).
//!
//! The backstop (`/validate`) sees each TaskRun as it will be stored, with its name and uid, and
//! hands it over with the snapshot that decided it ([`Followups::offer`]): a `try_send` into a
//! bounded queue, nothing more, so the admission answer never waits for the API server. A full
//! queue drops the TaskRun (counted in `bookend_followups_dropped_total`). A background task
//! takes it from there:
//!
//! - `Normal StepsInjected` on the TaskRun, naming the policies and their steps (from the
//!   `bookend.dev/injected` record the mutating webhook wrote);
//! - `Warning PolicySkipped` when a policy that matched left it alone (a remote or signed Task,
//!   `taskRef: Skip`), with the reason;
//! - the findings of the Audit policies ([`crate::engine::audit`]), for the namespace's
//!   PolicyReport.
//!
//! Events go through kube's [`Recorder`], which folds repeats (the same TaskRun reviewed twice)
//! into one Event series. Dry-run requests never get here. Validating admission comes before
//! the API server stores the object, so the task waits two seconds and checks (a metadata GET)
//! that the TaskRun with that uid exists before writing anything about it.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::admission::Admitted;
use crate::engine::{self, Request, record::Record};
use crate::metrics::Metrics;
use crate::policy::{Mode, PolicySet};
use crate::reports::{self, Reports, Subject};
use crate::source::Snapshot;

/// How many admitted TaskRuns may wait for their Events and results.
pub const QUEUE: usize = 512;
/// How many are handled at once (each is a few API calls).
const CONCURRENCY: usize = 8;
/// The API server's limit on an Event's note, in bytes.
const NOTE_LIMIT: usize = 1024;

/// What is written after admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Events on TaskRuns (`--taskrun-events`).
    pub taskrun_events: bool,
    /// PolicyReports for Audit policies (`--policy-reports`), when the CRD is installed.
    pub policy_reports: bool,
    /// Results kept per namespace's report (`--policy-report-max-results`).
    pub report_limit: usize,
    /// Which report API (`--policy-report-api`).
    pub report_api: reports::ReportApiChoice,
    /// Post-run verification of the TaskRuns bookend injected into (`--verify-runs`).
    pub verify_runs: bool,
    /// The policies' `status.verification`: its window and how often it is counted.
    pub verification_counts: crate::engine::verdict_counts::CountOptions,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            taskrun_events: true,
            policy_reports: true,
            report_limit: reports::DEFAULT_LIMIT,
            report_api: reports::ReportApiChoice::Auto,
            verify_runs: true,
            verification_counts: Default::default(),
        }
    }
}

struct Item {
    admitted: Admitted,
    snapshot: Arc<Snapshot>,
    at: tokio::time::Instant,
}

/// How long after its admission a TaskRun is looked at: by then the API server has stored it,
/// or refused it after bookend's answer (another validating webhook, a name already taken).
const SETTLE: Duration = Duration::from_secs(2);

/// The handler's end of the queue.
pub struct Followups {
    tx: mpsc::Sender<Item>,
    options: Options,
    metrics: Metrics,
}

impl Followups {
    /// Starts the background task (and the PolicyReport writer when reports are on).
    pub fn start(client: Client, reporter: Reporter, options: Options, metrics: Metrics) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let client_for_checks = client.clone();
        let recorder = options
            .taskrun_events
            .then(|| Recorder::new(client.clone(), reporter));
        let reports = options.policy_reports.then(|| {
            Reports::start(
                client,
                options.report_api,
                options.report_limit,
                Duration::from_secs(2),
                metrics.clone(),
            )
        });
        tokio::spawn(work(
            client_for_checks,
            rx,
            recorder,
            reports,
            metrics.clone(),
        ));
        Self {
            tx,
            options,
            metrics,
        }
    }

    /// Queues an admitted TaskRun, or drops it (counted) when the queue is full. Never waits.
    pub fn offer(&self, admitted: Admitted, snapshot: &Arc<Snapshot>) {
        if !self.wanted(&snapshot.set) {
            return;
        }
        let item = Item {
            admitted,
            snapshot: snapshot.clone(),
            at: tokio::time::Instant::now(),
        };
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(item) {
            self.metrics.followup_dropped();
        }
    }

    /// Whether anything would be written for a TaskRun under `set`.
    fn wanted(&self, set: &PolicySet) -> bool {
        self.options.taskrun_events
            || (self.options.policy_reports
                && set.policies().iter().any(|p| p.spec.mode == Mode::Audit))
    }
}

async fn work(
    client: Client,
    rx: mpsc::Receiver<Item>,
    recorder: Option<Recorder>,
    reports: Option<Reports>,
    metrics: Metrics,
) {
    // Items arrive in admission order, so waiting for each in turn delays the stream by SETTLE
    // without slowing it down.
    let items = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .then(|item| async move {
        tokio::time::sleep_until(item.at + SETTLE).await;
        item
    });
    items
        .for_each_concurrent(CONCURRENCY, |item| {
            let (client, recorder, reports, metrics) = (&client, &recorder, &reports, &metrics);
            async move {
                let plan = plan(&item.admitted, &item.snapshot, reports.is_some(), now());
                if plan.events.is_empty() && plan.results.is_empty() {
                    return;
                }
                if !stored(client, &item.admitted).await {
                    return;
                }
                if let Some(recorder) = recorder {
                    for (event, regarding) in &plan.events {
                        match recorder.publish(&event.to_event(), regarding).await {
                            Ok(()) => metrics.event("taskrun", true),
                            Err(error) => {
                                metrics.event("taskrun", false);
                                tracing::warn!(%error, taskrun = ?regarding.name, reason = %event.reason, "cannot post the TaskRun's Event");
                            }
                        }
                    }
                }
                if let Some(reports) = reports {
                    reports.add(&item.admitted.namespace, plan.results);
                }
            }
        })
        .await;
}

/// Whether the TaskRun was stored: validating admission comes before storage, and a request
/// bookend admitted can still fail after (another webhook's refusal, a name already taken).
/// Unsure (no permission, API errors): yes.
async fn stored(client: &Client, admitted: &Admitted) -> bool {
    let object = &admitted.object;
    let (Some(name), Some(uid)) = (
        object.pointer("/metadata/name").and_then(Value::as_str),
        object.pointer("/metadata/uid").and_then(Value::as_str),
    ) else {
        return false;
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &admitted.namespace, &taskrun_resource());
    match api.get_metadata_opt(name).await {
        Ok(Some(meta)) => meta.metadata.uid.as_deref() == Some(uid),
        Ok(None) => false,
        Err(error) => {
            tracing::debug!(%error, taskrun = name, "cannot check that the TaskRun was stored");
            true
        }
    }
}

/// `tekton.dev/v1` TaskRun (v1beta1 ones are served as v1 too).
fn taskrun_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("tekton.dev", "v1", "TaskRun"),
        "taskruns",
    )
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// An Event to post on a TaskRun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRunEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
    pub action: &'static str,
}

impl TaskRunEvent {
    fn to_event(&self) -> Event {
        Event {
            type_: self.type_,
            reason: self.reason.to_owned(),
            note: Some(self.note.clone()),
            action: self.action.to_owned(),
            secondary: None,
        }
    }
}

/// What to write for one admitted TaskRun.
#[derive(Debug, Default)]
pub struct Plan {
    /// Events and the TaskRun they are about.
    pub events: Vec<(TaskRunEvent, ObjectReference)>,
    /// PolicyReport results.
    pub results: Vec<Value>,
}

/// Works out the Events and PolicyReport results for an admitted TaskRun (pure: the engine on
/// the snapshot that admitted it). Nothing when the object has no name or uid to refer to.
pub fn plan(admitted: &Admitted, snapshot: &Snapshot, audit: bool, seconds: i64) -> Plan {
    let object = &admitted.object;
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let (Some(name), Some(uid)) = (text("/metadata/name"), text("/metadata/uid")) else {
        return Plan::default();
    };
    let api_version = text("/apiVersion").unwrap_or("tekton.dev/v1");
    let regarding = ObjectReference {
        api_version: Some(api_version.to_owned()),
        kind: Some("TaskRun".to_owned()),
        name: Some(name.to_owned()),
        namespace: Some(admitted.namespace.clone()),
        uid: Some(uid.to_owned()),
        ..ObjectReference::default()
    };
    let mut plan = Plan::default();

    let request = Request {
        object,
        namespace: &admitted.namespace,
        dry_run: false,
    };
    let decision = engine::decide(request, &snapshot.set, snapshot.lookup.as_ref());
    // The record is the author's to write too: it is reported only when it is exactly what
    // bookend writes for this TaskRun now (the decision would not touch it).
    let record_is_bookends = decision.outcome != engine::Outcome::Denied
        && !decision
            .patch
            .iter()
            .any(|op| op.path().starts_with("/metadata/annotations"));
    if let Some(record) = text(&format!(
        "/metadata/annotations/{}",
        engine::record::ANNOTATION.replace('/', "~1")
    ))
    .and_then(Record::parse)
        && record_is_bookends
        && !record.policies.is_empty()
    {
        let note = record
            .policies
            .iter()
            .map(|e| format!("{}: {}", e.policy, e.steps.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        // A remote Task's steps go in when Tekton's controller resolves it (its dry-run).
        let when = if record.resolved {
            "at the Task's resolution, injects"
        } else {
            "injected"
        };
        plan.events.push((
            TaskRunEvent {
                type_: EventType::Normal,
                reason: "StepsInjected",
                note: truncate_note(format!("{when} {note}")),
                action: "Inject",
            },
            regarding.clone(),
        ));
    }

    let skipped: Vec<&str> = decision
        .warnings
        .iter()
        .filter(|w| is_skip(w))
        .map(|w| w.strip_prefix("bookend: ").unwrap_or(w))
        .collect();
    if !skipped.is_empty() {
        plan.events.push((
            TaskRunEvent {
                type_: EventType::Warning,
                reason: "PolicySkipped",
                note: truncate_note(skipped.join("; ")),
                action: "Skip",
            },
            regarding,
        ));
    }

    if audit {
        let subject = Subject {
            api_version: api_version.to_owned(),
            name: name.to_owned(),
            namespace: admitted.namespace.clone(),
            uid: uid.to_owned(),
        };
        plan.results = engine::audit(request, &snapshot.set, snapshot.lookup.as_ref())
            .iter()
            .map(|finding| reports::result(&subject, finding, seconds))
            .collect();
    }
    plan
}

/// Whether a warning of the engine says that a policy that matched was not applied.
fn is_skip(warning: &str) -> bool {
    warning.starts_with("bookend: ") && warning.contains("not injected: ")
}

/// An Event note cut to the API server's limit for `note` (shared by the post-run Events).
pub(crate) fn truncate_note(mut text: String) -> String {
    if text.len() <= NOTE_LIMIT {
        return text;
    }
    let mut cut = NOTE_LIMIT - 3;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("...");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::policy::Settings;
    use crate::policy::load::policy_set_from_yaml;
    use serde_json::json;

    const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  preSteps: [{name: bookend-org, image: alpine}]
  postSteps: [{name: bookend-org-post, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: skips-refs}
spec:
  taskRef: Skip
  preSteps: [{name: bookend-skips, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: trial}
spec:
  mode: Audit
  postSteps: [{name: bookend-trial, image: alpine}]
"#;

    fn snapshot() -> Snapshot {
        let loaded = policy_set_from_yaml("p.yaml", POLICIES, Settings::default());
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        Snapshot {
            set: Arc::new(loaded.set),
            lookup: Arc::new(Catalog::default()),
        }
    }

    /// `object` as the mutating webhook admits it, with the name and uid the API server gives.
    fn admitted(object: Value, snapshot: &Snapshot) -> Admitted {
        let mut object = engine::decide(
            Request {
                object: &object,
                namespace: "team-a",
                dry_run: false,
            },
            &snapshot.set,
            snapshot.lookup.as_ref(),
        )
        .object;
        object["metadata"]["name"] = json!("build-x7k2p");
        object["metadata"]["uid"] = json!("9f0c2d4e-0000-4000-8000-000000000001");
        Admitted {
            object,
            namespace: "team-a".into(),
        }
    }

    #[test]
    fn an_injected_taskrun_gets_a_normal_event_and_audit_results() {
        let s = snapshot();
        let run = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                         "metadata": {"generateName": "build-"},
                         "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
        let plan = plan(&admitted(run, &s), &s, true, 1_700_000_000);
        assert_eq!(plan.events.len(), 1, "{:?}", plan.events);
        let (event, regarding) = &plan.events[0];
        assert_eq!(event.type_, EventType::Normal);
        assert_eq!(event.reason, "StepsInjected");
        assert_eq!(
            event.note,
            "injected ClusterStepPolicy/org: bookend-org, bookend-org-post; ClusterStepPolicy/skips-refs: bookend-skips"
        );
        assert_eq!(regarding.name.as_deref(), Some("build-x7k2p"));
        assert_eq!(
            regarding.uid.as_deref(),
            Some("9f0c2d4e-0000-4000-8000-000000000001")
        );
        assert_eq!(regarding.api_version.as_deref(), Some("tekton.dev/v1"));
        assert_eq!(plan.results.len(), 1);
        assert_eq!(plan.results[0]["policy"], "ClusterStepPolicy/trial");
        assert_eq!(plan.results[0]["result"], "pass");
        assert_eq!(plan.results[0]["resources"][0]["name"], "build-x7k2p");
        // Without reports, no results are worked out.
        assert!(plan_without_reports(&s).results.is_empty());
    }

    #[test]
    fn a_record_bookend_did_not_write_is_not_reported() {
        let s = snapshot();
        let run = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                         "metadata": {"generateName": "build-"},
                         "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
        let mut admitted = admitted(run, &s);
        admitted.object["metadata"]["annotations"][engine::record::ANNOTATION] = json!(
            r#"{"policies":[{"policy":"ClusterStepPolicy/evil","hash":"0","steps":["bookend-evil"]}]}"#
        );
        let plan = plan(&admitted, &s, false, 1_700_000_000);
        assert!(
            plan.events.iter().all(|(e, _)| !e.note.contains("evil")),
            "{:?}",
            plan.events
        );
    }

    fn plan_without_reports(s: &Snapshot) -> Plan {
        let run = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {},
                         "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
        plan(&admitted(run, s), s, false, 0)
    }

    #[test]
    fn skipped_policies_get_a_warning_event_with_the_reason() {
        // A remote Task: the policies whose criteria are all about the namespace go into the
        // resolved Task (said so); one that selects by the TaskRun's labels is skipped.
        let loaded = policy_set_from_yaml(
            "p.yaml",
            &format!(
                "{POLICIES}---\napiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {{name: labelled}}\nspec:\n  match: {{selector: {{matchLabels: {{team: a}}}}}}\n  preSteps: [{{name: bookend-labelled, image: alpine}}]\n"
            ),
            Settings::default(),
        );
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        let s = Snapshot {
            set: Arc::new(loaded.set),
            lookup: Arc::new(Catalog::default()),
        };
        let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                            "metadata": {"labels": {"team": "a"}},
                            "spec": {"taskRef": {"resolver": "git"}}});
        let plan = plan(&admitted(remote, &s), &s, true, 0);
        let events: Vec<(&str, &str)> = plan
            .events
            .iter()
            .map(|(e, _)| (e.reason, e.note.as_str()))
            .collect();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(plan.events[0].0.type_, EventType::Normal);
        assert_eq!(
            events[0],
            (
                "StepsInjected",
                "at the Task's resolution, injects ClusterStepPolicy/org: bookend-org, bookend-org-post; ClusterStepPolicy/skips-refs: bookend-skips"
            )
        );
        assert_eq!(plan.events[1].0.type_, EventType::Warning);
        assert_eq!(events[1].0, "PolicySkipped");
        assert!(
            events[1].1.starts_with("TaskRun uses a remote Task (git resolver); not injected: ClusterStepPolicy/labelled ("),
            "{events:?}"
        );
        assert_eq!(plan.results[0]["result"], "skip");

        // taskRef: Skip alone: the TaskRun keeps its taskRef, and the warning names the policy.
        let loaded = policy_set_from_yaml(
            "p.yaml",
            &POLICIES
                .split("---")
                .nth(1)
                .unwrap()
                .replace("skips-refs", "only-skips"),
            Settings::default(),
        );
        let s = Snapshot {
            set: Arc::new(loaded.set),
            lookup: Arc::new(Catalog::default()),
        };
        let local = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {},
                           "spec": {"taskRef": {"name": "build"}}});
        let plan = super::plan(&admitted(local, &s), &s, false, 0);
        let notes: Vec<&str> = plan.events.iter().map(|(e, _)| e.note.as_str()).collect();
        assert_eq!(
            notes,
            [
                "TaskRun references Task build; not injected: ClusterStepPolicy/only-skips (taskRef: Skip)"
            ]
        );
    }

    #[test]
    fn nothing_without_a_name_and_uid() {
        let s = snapshot();
        let mut a = admitted(
            json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {},
                   "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}}),
            &s,
        );
        a.object["metadata"].as_object_mut().unwrap().remove("uid");
        let plan = plan(&a, &s, true, 0);
        assert!(plan.events.is_empty() && plan.results.is_empty());
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_never_waits() {
        let s = Arc::new(snapshot());
        let run = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {},
                         "spec": {"taskSpec": {"steps": [{"name": "build", "image": "go"}]}}});
        let one = admitted(run, &s);
        let (tx, mut rx) = mpsc::channel(1);
        let metrics = Metrics::new();
        let followups = Followups {
            tx,
            options: Options::default(),
            metrics: metrics.clone(),
        };
        // No runtime, no consumer: offer must not wait (it would hang here).
        followups.offer(one.clone(), &s);
        followups.offer(one.clone(), &s);
        assert!(
            metrics
                .encode()
                .contains("bookend_followups_dropped_total 1\n")
        );
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err(), "the second was dropped, not queued");

        // Nothing to write (TaskRun Events off, no Audit policy): nothing queued or counted.
        let no_audit = policy_set_from_yaml(
            "p.yaml",
            POLICIES.split("---").next().unwrap(),
            Settings::default(),
        );
        let quiet = Arc::new(Snapshot {
            set: Arc::new(no_audit.set),
            lookup: Arc::new(Catalog::default()),
        });
        let (tx, mut rx) = mpsc::channel(1);
        let followups = Followups {
            tx,
            options: Options {
                taskrun_events: false,
                ..Options::default()
            },
            metrics: metrics.clone(),
        };
        followups.offer(one, &quiet);
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn notes_fit_the_api_servers_limit() {
        assert_eq!(truncate_note("short".into()), "short");
        let long = truncate_note("é".repeat(800));
        assert!(long.len() <= NOTE_LIMIT && long.ends_with("..."));
    }
}
