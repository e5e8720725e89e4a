//! Post-run verification in the cluster (kubernetes mode): did the org steps run?
//!
//! One watch, filtered by the API server to the TaskRuns bookend injected into (label
//! `bookend.dev/verify=true`, set with the record at admission). Nothing is cached: each watch
//! event is looked at and dropped; only the uids of the TaskRuns still running are kept, for
//! the `bookend_taskruns_watched` gauge. When a TaskRun has finished and carries no
//! `bookend.dev/verified` annotation yet, [`engine::verify`](crate::engine::verify) decides
//! per policy, and then, in this order:
//!
//! 1. **the mark**: a merge patch that sets `bookend.dev/verified` with the `resourceVersion`
//!    the verdict was computed from as its precondition. Of several replicas (each runs the
//!    same watch; there is no leader) exactly one wins; the others get a 409, read the TaskRun
//!    again, find it marked and drop it, and a replica that restarts finds the mark on its
//!    initial list. A 409 from anyone else's change (Tekton's, the author's labels) is retried
//!    on the object read again. Without the mark (an API error) nothing is written, and the next
//!    watch event of the TaskRun (or the next initial list) tries again.
//! 2. only then the outputs: an Event on the TaskRun (`Normal OrgStepsRan` or `Warning
//!    OrgStepsDidNotRun` with the reason), one PolicyReport result per policy (Enforce
//!    policies included), the metrics. So each finished TaskRun is counted once across
//!    restarts and replicas; a crash between the mark and the outputs loses that TaskRun's
//!    outputs (at most once, never twice).
//!
//! A TaskRun that finished while bookend was down is on the initial list of the next start,
//! unmarked, and verified then. Two cases have no mark to write, and get their verdict anyway:
//!
//! - **deleted before the mark**: the watch's Delete event carries the final object, and an
//!   unmarked finished one is verified from it (outputs only; the Event may be refused as its
//!   object is gone). A TaskRun finished and deleted while no replica watched is lost
//!   (docs/operations.md). With several replicas, each that sees the Delete reports it.
//! - **unmarkable** (the API server refuses the mark with 422, e.g. annotations already at
//!   their size limit): the outputs once per bookend process (the uid is remembered), so
//!   exactly-once becomes once per bookend start for such TaskRuns.
//!
//! A TaskRun whose record names a policy that cannot apply in its namespace
//! ([`verify::policies_out_of_reach`]) is not verified but counted: bookend's admission did not
//! write that record.

pub mod counts;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use crate::engine::record;
use crate::engine::verdict_counts::Mark;
use crate::engine::verify::{self, RunVerdict, Verification};
use crate::metrics::Metrics;
use crate::reports::{self, Reports, Subject};
use crate::source::PolicySource;
use crate::source::kubernetes::taskrun_resource;

/// The annotation that marks a TaskRun verified: each policy's verdict.
pub use crate::engine::record::VERIFIED_ANNOTATION;
/// TaskRuns per page of the initial list (what memory holds at once while it streams).
const PAGE_SIZE: u32 = 100;
/// Mark writes per watch event: a 409 (someone changed the TaskRun meanwhile) is retried on
/// the object read again, this many times in all; after that, the next watch event tries.
const MARK_ATTEMPTS: usize = 4;

/// What the watch does with one TaskRun it sees.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// Not finished: watched until it is.
    Running,
    /// Verified already (this replica, another, or before a restart).
    Marked,
    /// Finished and not verified yet.
    Finished,
}

/// Where a TaskRun stands, from the object alone.
pub fn seen(taskrun: &Value) -> Seen {
    let marked = taskrun
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(VERIFIED_ANNOTATION))
        .is_some();
    if marked {
        Seen::Marked
    } else if verify::is_finished(taskrun) {
        Seen::Finished
    } else {
        Seen::Running
    }
}

/// The merge patch that marks the TaskRun verified at `at`, valid only against
/// `resource_version`.
pub fn mark_patch(verification: &Verification, at: Timestamp, resource_version: &str) -> Value {
    json!({"metadata": {
        "resourceVersion": resource_version,
        "annotations": {VERIFIED_ANNOTATION: Mark::of(verification, at).to_annotation()},
    }})
}

/// The Event on the TaskRun: `Normal OrgStepsRan` when every policy passed, `Warning
/// OrgStepsDidNotRun` with the reasons when one failed (and the skipped ones after them), else
/// `Warning OrgStepsNotVerified` when one was skipped (with the policies that passed after
/// them). `None` when no policy was verified.
pub fn event(verification: &Verification) -> Option<Event> {
    if verification.policies.is_empty() {
        return None;
    }
    let reasons = |skipped: bool| -> Vec<String> {
        verification
            .policies
            .iter()
            .filter_map(|p| match &p.verdict {
                RunVerdict::Fail(reason) if !skipped => Some(format!("{}: {reason}", p.policy)),
                RunVerdict::Skip(reason) if skipped => {
                    Some(format!("{}: not verified: {reason}", p.policy))
                }
                _ => None,
            })
            .collect()
    };
    let (failed, skipped) = (reasons(false), reasons(true));
    let (type_, reason, note) = if !failed.is_empty() {
        (
            EventType::Warning,
            "OrgStepsDidNotRun",
            [failed, skipped].concat().join("; "),
        )
    } else {
        let passed: Vec<String> = verification
            .policies
            .iter()
            .filter(|p| p.verdict == RunVerdict::Pass)
            .map(|p| {
                let steps: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).collect();
                format!("{}: {}", p.policy, steps.join(", "))
            })
            .collect();
        let ran = format!("org steps ran as their policies say: {}", passed.join("; "));
        match (skipped.is_empty(), passed.is_empty()) {
            (true, _) => (EventType::Normal, "OrgStepsRan", ran),
            (false, true) => (
                EventType::Warning,
                "OrgStepsNotVerified",
                skipped.join("; "),
            ),
            (false, false) => (
                EventType::Warning,
                "OrgStepsNotVerified",
                format!("{}; {ran}", skipped.join("; ")),
            ),
        }
    };
    Some(Event {
        type_,
        reason: reason.to_owned(),
        note: Some(crate::events::truncate_note(note)),
        action: "Verify".to_owned(),
        secondary: None,
    })
}

/// Starts the watch. It waits for the policies to be loaded before verifying anything (an
/// empty set would report every policy gone).
pub fn start(
    client: Client,
    source: Arc<dyn PolicySource>,
    reporter: Reporter,
    reports: Option<Reports>,
    metrics: Metrics,
) {
    tokio::spawn(watch(client, source, reporter, reports, metrics));
}

async fn watch(
    client: Client,
    source: Arc<dyn PolicySource>,
    reporter: Reporter,
    reports: Option<Reports>,
    metrics: Metrics,
) {
    while !source.is_ready() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &taskrun_resource());
    let recorder = Recorder::new(client.clone(), reporter);
    let config = watcher::Config::default()
        .labels(&format!("{}={}", record::LABEL, record::LABEL_VALUE))
        .page_size(PAGE_SIZE);
    let mut events = watcher(api, config).default_backoff().boxed();
    // Uids of the TaskRuns not finished yet; a relist builds the set again.
    let mut running: HashSet<String> = HashSet::new();
    let mut relisted: HashSet<String> = HashSet::new();
    let writer = Writer {
        client: client.clone(),
        source,
        recorder,
        reports,
        metrics: metrics.clone(),
        concluded_unmarked: Mutex::new(HashSet::new()),
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => relisted.clear(),
            Ok(watcher::Event::InitApply(object)) => writer.see(object, &mut relisted).await,
            Ok(watcher::Event::InitDone) => {
                running = std::mem::take(&mut relisted);
                running.shrink_to_fit();
            }
            Ok(watcher::Event::Apply(object)) => writer.see(object, &mut running).await,
            Ok(watcher::Event::Delete(object)) => {
                if let Some(uid) = object.metadata.uid.as_deref() {
                    running.remove(uid);
                }
                writer.deleted(object).await;
            }
            Err(error) => {
                metrics.watch_error();
                tracing::warn!(%error, "TaskRun watch (post-run verification) failed; retrying");
            }
        }
        metrics.set_taskruns_watched(running.len().max(relisted.len()));
    }
}

struct Writer {
    client: Client,
    source: Arc<dyn PolicySource>,
    recorder: Recorder,
    reports: Option<Reports>,
    metrics: Metrics,
    /// Uids of the TaskRuns this process verified without a mark (unmarkable) or refused to
    /// verify (out of reach): each is concluded once per process, and forgotten when deleted.
    concluded_unmarked: Mutex<HashSet<String>>,
}

/// How writing the mark ended.
enum Marking {
    Marked,
    /// 409: the TaskRun changed since it was read.
    Conflict,
    /// 404: deleted; its Delete event carries the final object.
    Gone,
    /// 422: the API server will not take the mark on this object (annotations full, ...).
    Refused,
    /// Any other error: tried again on the next watch event.
    Failed,
}

impl Writer {
    async fn see(&self, object: DynamicObject, running: &mut HashSet<String>) {
        let Some(uid) = object.metadata.uid.clone() else {
            return;
        };
        let Ok(value) = serde_json::to_value(&object) else {
            return;
        };
        drop(object);
        match seen(&value) {
            Seen::Running => {
                running.insert(uid);
            }
            Seen::Marked => {
                running.remove(&uid);
            }
            Seen::Finished => {
                running.remove(&uid);
                self.verify(value).await;
            }
        }
    }

    /// A TaskRun the watch saw deleted: if it finished unmarked, its verdict from the final
    /// object (no mark to write any more).
    async fn deleted(&self, object: DynamicObject) {
        let Ok(value) = serde_json::to_value(&object) else {
            return;
        };
        // Concluded already without a mark (unmarkable, out of reach): not again. Forgetting
        // it here also keeps the set to TaskRuns that still exist.
        let concluded = object.metadata.uid.as_deref().is_some_and(|uid| {
            self.concluded_unmarked
                .lock()
                .is_ok_and(|mut set| set.remove(uid))
        });
        if concluded || seen(&value) != Seen::Finished {
            return;
        }
        if let Some(verification) = self.decide(&value) {
            self.metrics.verification_unmarked("deleted");
            self.outputs(&value, &verification).await;
        }
    }

    /// Whether `uid` is concluded for the first time in this process (and now remembered).
    fn first_conclusion(&self, uid: &str) -> bool {
        self.concluded_unmarked
            .lock()
            .map(|mut set| set.insert(uid.to_owned()))
            .unwrap_or(false)
    }

    /// The verdict, unless the record names policies that cannot apply where the TaskRun is.
    fn decide(&self, taskrun: &Value) -> Option<Verification> {
        let snapshot = self.source.current();
        let out_of_reach =
            verify::policies_out_of_reach(taskrun, &snapshot.set, snapshot.lookup.as_ref());
        if !out_of_reach.is_empty() {
            let text = |pointer: &str| taskrun.pointer(pointer).and_then(Value::as_str);
            if self.first_conclusion(text("/metadata/uid").unwrap_or_default()) {
                self.metrics.verification_ignored();
                tracing::warn!(
                    taskrun = text("/metadata/name").unwrap_or_default(),
                    namespace = text("/metadata/namespace").unwrap_or_default(),
                    policies = %out_of_reach.join(", "),
                    "not verified: the TaskRun's bookend.dev/injected record names policies that cannot apply in its namespace (bookend's admission did not write it)"
                );
            }
            return None;
        }
        verify::verify(taskrun, &snapshot.set, snapshot.lookup.as_ref())
    }

    async fn verify(&self, mut taskrun: Value) {
        let text = |taskrun: &Value, pointer: &str| {
            taskrun
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let (Some(namespace), Some(name), Some(uid)) = (
            text(&taskrun, "/metadata/namespace"),
            text(&taskrun, "/metadata/name"),
            text(&taskrun, "/metadata/uid"),
        ) else {
            return;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &namespace, &taskrun_resource());
        for _ in 0..MARK_ATTEMPTS {
            let Some(verification) = self.decide(&taskrun) else {
                return;
            };
            let Some(resource_version) = text(&taskrun, "/metadata/resourceVersion") else {
                return;
            };
            match self
                .mark(&api, &name, &verification, &resource_version)
                .await
            {
                Marking::Marked => return self.outputs(&taskrun, &verification).await,
                Marking::Refused => {
                    if self.first_conclusion(&uid) {
                        self.metrics.verification_unmarked("unmarkable");
                        self.outputs(&taskrun, &verification).await;
                    }
                    return;
                }
                Marking::Gone | Marking::Failed => return,
                Marking::Conflict => {}
            }
            // Changed since read: by another replica's mark (then it is marked now), Tekton or
            // the author. Read it again and decide on what it is now.
            match api.get(&name).await {
                Ok(object) if object.metadata.uid.as_deref() == Some(uid.as_str()) => {
                    let Ok(value) = serde_json::to_value(&object) else {
                        return;
                    };
                    if seen(&value) != Seen::Finished {
                        return;
                    }
                    taskrun = value;
                }
                // Gone, or another TaskRun of the same name: the Delete event follows.
                Ok(_) => return,
                Err(kube::Error::Api(status)) if status.code == 404 => return,
                Err(error) => {
                    self.metrics.verification_error();
                    tracing::warn!(%error, taskrun = %name, %namespace, "cannot read the TaskRun again to mark it verified; it is tried again on its next watch event");
                    return;
                }
            }
        }
        self.metrics.verification_error();
        tracing::warn!(taskrun = %name, %namespace, "the TaskRun kept changing while bookend marked it verified; it is tried again on its next watch event");
    }

    /// The mark, under the resourceVersion the verdict was computed from: only one replica's
    /// write succeeds, and only that one writes the outputs.
    async fn mark(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        verification: &Verification,
        resource_version: &str,
    ) -> Marking {
        let patch = mark_patch(verification, Timestamp::now(), resource_version);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Marking::Marked,
            Err(kube::Error::Api(status)) if status.code == 409 => Marking::Conflict,
            Err(kube::Error::Api(status)) if status.code == 404 => Marking::Gone,
            Err(kube::Error::Api(status)) if status.code == 422 => {
                tracing::warn!(taskrun = name, message = %status.message, "the API server refuses bookend's verified mark on the TaskRun; its verdict is reported once per bookend start");
                Marking::Refused
            }
            Err(error) => {
                self.metrics.verification_error();
                tracing::warn!(%error, taskrun = name, "cannot mark the TaskRun verified; it is tried again on its next watch event");
                Marking::Failed
            }
        }
    }

    /// The verdict's outputs: metrics, the Event, the PolicyReport results.
    async fn outputs(&self, taskrun: &Value, verification: &Verification) {
        let text = |pointer: &str| taskrun.pointer(pointer).and_then(Value::as_str);
        let (Some(namespace), Some(name), Some(uid)) = (
            text("/metadata/namespace"),
            text("/metadata/name"),
            text("/metadata/uid"),
        ) else {
            return;
        };
        self.metrics.observe_verification(verification);
        for run in &verification.policies {
            match &run.verdict {
                RunVerdict::Fail(reason) => {
                    tracing::warn!(taskrun = name, %namespace, policy = %run.policy, %reason, "org steps did not run as their policy says");
                }
                RunVerdict::Skip(reason) => {
                    tracing::info!(taskrun = name, %namespace, policy = %run.policy, %reason, "org steps not verified");
                }
                RunVerdict::Pass => {}
            }
        }
        let api_version = text("/apiVersion").unwrap_or("tekton.dev/v1");
        if let Some(event) = event(verification) {
            let regarding = ObjectReference {
                api_version: Some(api_version.to_owned()),
                kind: Some("TaskRun".to_owned()),
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                uid: Some(uid.to_owned()),
                ..ObjectReference::default()
            };
            match self.recorder.publish(&event, &regarding).await {
                Ok(()) => self.metrics.event("taskrun", true),
                Err(error) => {
                    self.metrics.event("taskrun", false);
                    tracing::warn!(%error, taskrun = name, "cannot post the TaskRun's verification Event");
                }
            }
        }
        if let Some(reports) = &self.reports {
            let subject = Subject {
                api_version: api_version.to_owned(),
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                uid: uid.to_owned(),
            };
            let seconds = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            reports.add(
                namespace,
                verification
                    .policies
                    .iter()
                    .map(|run| reports::run_result(&subject, run, seconds))
                    .collect(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::verify::{Cause, Place, PolicyRun, StepOutcome, StepRun};

    fn verification(verdict: RunVerdict) -> Verification {
        Verification {
            succeeded: false,
            reason: "TaskRunTimeout".into(),
            by_composition: true,
            policies: vec![PolicyRun {
                policy: "ClusterStepPolicy/sbom".into(),
                mode: None,
                steps: vec![StepRun {
                    name: "bookend-sbom-upload".into(),
                    place: Place::Post,
                    outcome: StepOutcome::NeverStarted,
                    exit_code: None,
                    duration_seconds: None,
                }],
                cause: matches!(verdict, RunVerdict::Fail(_)).then_some(Cause::DidNotRun),
                verdict,
                drift: None,
            }],
        }
    }

    #[test]
    fn the_mark_carries_the_resource_version_precondition_and_the_verdicts() {
        let v = verification(RunVerdict::Pass);
        let at = "2026-12-02T08:00:00Z".parse().unwrap();
        assert_eq!(
            mark_patch(&v, at, "4711"),
            json!({"metadata": {
                "resourceVersion": "4711",
                "annotations": {"bookend.dev/verified": r#"{"at":"2026-12-02T08:00:00Z","verdicts":{"ClusterStepPolicy/sbom":"pass"}}"#},
            }})
        );
    }

    #[test]
    fn a_taskrun_is_running_finished_or_marked() {
        let mut tr = json!({"metadata": {}, "status": {"conditions": [
            {"type": "Succeeded", "status": "Unknown"}]}});
        assert_eq!(seen(&tr), Seen::Running);
        tr["status"]["conditions"][0]["status"] = json!("False");
        assert_eq!(seen(&tr), Seen::Finished);
        tr["metadata"]["annotations"] = json!({VERIFIED_ANNOTATION: "{}"});
        assert_eq!(seen(&tr), Seen::Marked);
    }

    #[test]
    fn a_failed_verdict_is_a_warning_event_with_the_reason() {
        let reason = "org post-step bookend-sbom-upload did not run: the TaskRun timed out during step build";
        let e = event(&verification(RunVerdict::Fail(reason.into()))).unwrap();
        assert_eq!(e.type_, EventType::Warning);
        assert_eq!(e.reason, "OrgStepsDidNotRun");
        assert_eq!(e.note.unwrap(), format!("ClusterStepPolicy/sbom: {reason}"));
        let e = event(&verification(RunVerdict::Pass)).unwrap();
        assert_eq!(
            (e.type_, e.reason.as_str()),
            (EventType::Normal, "OrgStepsRan")
        );
        let none = Verification {
            policies: Vec::new(),
            ..verification(RunVerdict::Pass)
        };
        assert!(event(&none).is_none());
        // A policy bookend could not inject into the TaskRun is said, never silent: alone a
        // warning of its own, beside a fail after the fail's reason.
        let skip = "org steps bookend-x were not injected";
        let mut v = verification(RunVerdict::Skip(skip.into()));
        let e = event(&v).unwrap();
        assert_eq!(
            (e.type_, e.reason.as_str(), e.note.unwrap()),
            (
                EventType::Warning,
                "OrgStepsNotVerified",
                format!("ClusterStepPolicy/sbom: not verified: {skip}")
            )
        );
        let mut failed = verification(RunVerdict::Fail(reason.into())).policies;
        failed[0].policy = "ClusterStepPolicy/other".into();
        v.policies.extend(failed);
        let e = event(&v).unwrap();
        assert_eq!(
            (e.reason.as_str(), e.note.unwrap()),
            (
                "OrgStepsDidNotRun",
                format!(
                    "ClusterStepPolicy/other: {reason}; ClusterStepPolicy/sbom: not verified: {skip}"
                )
            )
        );
    }
}
