//! The `bookend.dev/verified` mark and the policies' verification counts over a window
//! (`status.verification`), counted from the marks. Pure: the marked TaskRuns' metadata, the
//! policy set, the end of the window and its length in; each policy's counts out.
//!
//! Every replica reads the same marks and ends the window at the same instant (a boundary of
//! the counting period), so every replica computes the same status.
//!
//! Only marks bookend's machinery protects count. Where the webhooks run, the mark is
//! bookend's alone (dropped at CREATE, refused at UPDATE: invariant I8). Where they do not (a
//! namespace they skip) a TaskRun can carry any mark, so an entry counts only for a policy that
//! can apply in the TaskRun's namespace, as [`verify::policies_out_of_reach`] decides for
//! records: a StepPolicy only in its own namespace, a policy that selects by namespace alone
//! only where it selects. Cause keys are bounded, so no mark can grow a status without limit.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SubjectFacts;
use super::lookup::Lookup;
use super::record::VERIFIED_ANNOTATION;
use super::verify::{self, RunVerdict, Verification};
use crate::policy::api::{LastFailure, VerificationStatus};
use crate::policy::{Policy, PolicySet};
use crate::tekton::TaskRunView;

/// The window and how often it is counted (`--verification-window`,
/// `--verification-count-interval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountOptions {
    pub window: Duration,
    pub interval: Duration,
}

impl Default for CountOptions {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(24 * 3600),
            interval: Duration::from_secs(300),
        }
    }
}

/// Distinct cause keys kept per policy; further ones are counted as `other`.
const MAX_CAUSES: usize = 16;
/// The longest cause key kept as it is.
const MAX_CAUSE_LEN: usize = 63;

/// What the mark says: when bookend verified the TaskRun, each policy's verdict (`pass` or
/// `fail`), and the cause of each `fail` (the key the verdict carries, e.g. `did_not_run`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// RFC 3339, to the second.
    pub at: String,
    pub verdicts: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub causes: BTreeMap<String, String>,
}

impl Mark {
    /// The mark of `verification`, made at `at`.
    pub fn of(verification: &Verification, at: Timestamp) -> Self {
        let mut mark = Self {
            at: seconds(at).to_string(),
            ..Self::default()
        };
        for run in &verification.policies {
            mark.verdicts
                .insert(run.policy.clone(), run.verdict.as_str().to_owned());
            if let (RunVerdict::Fail(_), Some(cause)) = (&run.verdict, run.cause) {
                mark.causes
                    .insert(run.policy.clone(), cause.as_str().to_owned());
            }
        }
        mark
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A mark read from the annotation; `None` when it is not one.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// `at` to the whole second, as the API server writes times.
fn seconds(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second()).unwrap_or(at)
}

/// The end of the window a count at `now` describes: `now` rounded down to a multiple of
/// `period` since the epoch, so replicas counting within one period agree on it.
pub fn window_end(now: Timestamp, period: Duration) -> Timestamp {
    let period = period.as_secs().max(1) as i64;
    let second = now.as_second();
    Timestamp::from_second(second - second.rem_euclid(period)).unwrap_or(now)
}

/// A duration as Kubernetes writes one: `24h`, `90m`, `45s`.
pub fn duration_text(duration: Duration) -> String {
    let s = duration.as_secs();
    if s > 0 && s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[derive(Default)]
struct Counts {
    passed: i64,
    failed: i64,
    skipped: i64,
    by_cause: BTreeMap<String, i64>,
    /// (at, namespace, name, cause) of the latest failure; ties go to the greatest namespace
    /// and name, so the order of the list does not matter.
    last: Option<(i64, String, String, String)>,
}

/// Why an entry of a mark was not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skipped {
    /// The annotation is not a mark (not JSON of the mark's shape, or no valid time).
    Unreadable,
    /// The entry names a policy that cannot apply in the TaskRun's namespace.
    OutOfReach,
}

/// The counts of one window, fed one TaskRun's metadata at a time (a page of a list is
/// dropped once it is fed).
pub struct Tally<'a> {
    /// The loaded policies by `Kind/name`.
    policies: HashMap<String, &'a Policy>,
    lookup: &'a dyn Lookup,
    /// The window: (start, end] in seconds since the epoch.
    start: i64,
    end: Timestamp,
    window: Duration,
    counts: BTreeMap<String, Counts>,
    /// TaskRuns with a mark read.
    pub taskruns: u64,
    /// Entries not counted, by why.
    pub skipped: BTreeMap<Skipped, u64>,
}

impl<'a> Tally<'a> {
    /// Every policy of `set` starts at zero: a policy with no verdict in the window says so.
    pub fn new(
        set: &'a PolicySet,
        lookup: &'a dyn Lookup,
        end: Timestamp,
        window: Duration,
    ) -> Self {
        let policies: HashMap<String, &Policy> = set
            .policies()
            .iter()
            .map(|p| (p.id.to_string(), p))
            .collect();
        Self {
            lookup,
            start: end.as_second().saturating_sub(window.as_secs() as i64),
            end,
            window,
            counts: policies
                .keys()
                .map(|id| (id.clone(), Counts::default()))
                .collect(),
            policies,
            taskruns: 0,
            skipped: BTreeMap::new(),
        }
    }

    fn skip(&mut self, why: Skipped) {
        *self.skipped.entry(why).or_default() += 1;
    }

    /// One TaskRun's `metadata` (as a metadata-only list gives it).
    pub fn add(&mut self, metadata: &Value) {
        let text = |key: &str| {
            metadata
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let Some(annotation) = metadata
            .pointer("/annotations")
            .and_then(|a| a.get(VERIFIED_ANNOTATION))
            .and_then(Value::as_str)
        else {
            return;
        };
        self.taskruns += 1;
        let Some(mark) = Mark::parse(annotation) else {
            return self.skip(Skipped::Unreadable);
        };
        let Ok(at) = mark.at.parse::<Timestamp>() else {
            return self.skip(Skipped::Unreadable);
        };
        let at = at.as_second();
        if at <= self.start || at > self.end.as_second() {
            return;
        }
        let (namespace, name) = (text("namespace"), text("name"));
        let object =
            json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": metadata});
        let Some(view) = TaskRunView::new(&object) else {
            return;
        };
        let facts = SubjectFacts::of(&view, namespace, self.lookup);
        let subject = facts.subject(namespace);
        for (policy_id, verdict) in &mark.verdicts {
            let Some(policy) = self.policies.get(policy_id) else {
                // Not loaded now: it has no status to count into.
                continue;
            };
            if verify::out_of_reach(policy, &subject) {
                self.skip(Skipped::OutOfReach);
                continue;
            }
            let Some(counts) = self.counts.get_mut(policy_id) else {
                continue;
            };
            match verdict.as_str() {
                "pass" => counts.passed += 1,
                "skip" => counts.skipped += 1,
                "fail" => {
                    counts.failed += 1;
                    let mut cause = cause_key(mark.causes.get(policy_id).map(String::as_str));
                    if !counts.by_cause.contains_key(&cause) && counts.by_cause.len() >= MAX_CAUSES
                    {
                        cause = "other".to_owned();
                    }
                    *counts.by_cause.entry(cause.clone()).or_default() += 1;
                    let candidate = (at, namespace.to_owned(), name.to_owned(), cause);
                    if counts.last.as_ref().is_none_or(|last| candidate > *last) {
                        counts.last = Some(candidate);
                    }
                }
                _ => self.skip(Skipped::Unreadable),
            }
        }
    }

    /// Each policy's `status.verification`, by `Kind/name` (`StepPolicy/namespace/name`).
    pub fn statuses(self) -> BTreeMap<String, VerificationStatus> {
        let window = duration_text(self.window);
        let observed_at = self.end.to_string();
        self.counts
            .into_iter()
            .map(|(policy, c)| {
                let status = VerificationStatus {
                    window: window.clone(),
                    observed_at: observed_at.clone(),
                    passed: c.passed,
                    failed: c.failed,
                    skipped: c.skipped,
                    failed_by_cause: c.by_cause,
                    last_failure: c.last.map(|(at, namespace, name, cause)| LastFailure {
                        namespace,
                        name,
                        cause,
                        at: Timestamp::from_second(at)
                            .map(|t| t.to_string())
                            .unwrap_or_default(),
                    }),
                };
                (policy, status)
            })
            .collect()
    }
}

/// Whether this replica's count `own` should replace `stored`, the policy's status now: only
/// when it comes later in one total order — the later window end, then the longer window, then
/// more verdicts, then the text. Replicas whose counts differ (clocks on either side of a
/// period boundary, different `--verification-window`s during a rollout, a mark stored between
/// their lists) then converge on the greatest of their counts instead of overwriting each other
/// every period; equal counts are not sent again. A stored status this cannot read is replaced.
pub fn supersedes(own: &VerificationStatus, stored: Option<&VerificationStatus>) -> bool {
    let Some(stored) = stored else {
        return true;
    };
    let key = |s: &VerificationStatus| {
        (
            s.observed_at.parse::<Timestamp>().ok(),
            humantime::parse_duration(&s.window).ok(),
            s.passed.saturating_add(s.failed).saturating_add(s.skipped),
            serde_json::to_string(s).unwrap_or_default(),
        )
    };
    let (own, stored) = (key(own), key(stored));
    if stored.0.is_none() || stored.1.is_none() {
        return own != stored;
    }
    own > stored
}

/// A cause as the status shows it: the verdict's key when it looks like one (lowercase,
/// digits, `_`), `other` when not, `unknown` when the mark names none.
fn cause_key(cause: Option<&str>) -> String {
    match cause {
        None => "unknown".to_owned(),
        Some(c)
            if !c.is_empty()
                && c.len() <= MAX_CAUSE_LEN
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
        {
            c.to_owned()
        }
        Some(_) => "other".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::engine::tests::policies;
    use crate::engine::verify::{Cause, PolicyRun};

    const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: sbom, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  postSteps: [{name: bookend-sbom, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: teams, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  match: {namespaces: ["team-*"]}
  postSteps: [{name: bookend-teams, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: StepPolicy
metadata: {name: lint, namespace: team-a, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  postSteps: [{name: bookend-lint, image: alpine}]
"#;

    const SBOM: &str = "ClusterStepPolicy/sbom";
    const TEAMS: &str = "ClusterStepPolicy/teams";
    const LINT: &str = "StepPolicy/team-a/lint";

    fn end() -> Timestamp {
        "2026-12-02T12:00:00Z".parse().unwrap()
    }

    /// A TaskRun's metadata marked at `at` with `verdicts` (policy, verdict, cause).
    fn marked(namespace: &str, name: &str, at: &str, verdicts: &[(&str, &str, &str)]) -> Value {
        let mut mark = Mark {
            at: at.to_owned(),
            ..Mark::default()
        };
        for (policy, verdict, cause) in verdicts {
            mark.verdicts.insert((*policy).into(), (*verdict).into());
            if !cause.is_empty() {
                mark.causes.insert((*policy).into(), (*cause).into());
            }
        }
        json!({"namespace": namespace, "name": name,
               "annotations": {VERIFIED_ANNOTATION: mark.to_annotation()}})
    }

    fn count(set: &PolicySet, taskruns: &[Value]) -> BTreeMap<String, VerificationStatus> {
        let catalog = Catalog::default();
        let mut tally = Tally::new(set, &catalog, end(), Duration::from_secs(24 * 3600));
        for t in taskruns {
            tally.add(t);
        }
        tally.statuses()
    }

    #[test]
    fn the_mark_carries_the_time_each_verdict_and_the_cause_of_each_fail() {
        let verification = Verification {
            succeeded: false,
            reason: "TaskRunTimeout".into(),
            by_composition: true,
            policies: [
                (SBOM, RunVerdict::Pass, None),
                (TEAMS, RunVerdict::Fail("x".into()), Some(Cause::DidNotRun)),
            ]
            .into_iter()
            .map(|(policy, verdict, cause)| PolicyRun {
                policy: policy.into(),
                mode: None,
                steps: Vec::new(),
                verdict,
                cause,
                drift: None,
            })
            .collect(),
        };
        let at: Timestamp = "2026-12-02T08:00:00.750Z".parse().unwrap();
        let mark = Mark::of(&verification, at);
        assert_eq!(
            mark.to_annotation(),
            r#"{"at":"2026-12-02T08:00:00Z","verdicts":{"ClusterStepPolicy/sbom":"pass","ClusterStepPolicy/teams":"fail"},"causes":{"ClusterStepPolicy/teams":"did_not_run"}}"#
        );
        assert_eq!(Mark::parse(&mark.to_annotation()), Some(mark));
    }

    #[test]
    fn counts_pass_and_fail_per_policy_and_fail_per_cause_with_the_last_failure() {
        let set = policies(POLICIES);
        let s = count(
            &set,
            &[
                marked(
                    "team-a",
                    "a1",
                    "2026-12-02T10:00:00Z",
                    &[(SBOM, "pass", ""), (LINT, "pass", "")],
                ),
                marked(
                    "team-a",
                    "a2",
                    "2026-12-02T11:00:00Z",
                    &[(SBOM, "fail", "did_not_run")],
                ),
                marked(
                    "team-b",
                    "b1",
                    "2026-12-02T11:30:00Z",
                    &[(SBOM, "fail", "oom_killed")],
                ),
                marked(
                    "team-b",
                    "b2",
                    "2026-12-02T09:00:00Z",
                    &[(SBOM, "fail", "did_not_run"), (TEAMS, "pass", "")],
                ),
                marked(
                    "team-b",
                    "b3",
                    "2026-12-02T09:30:00Z",
                    &[(SBOM, "skip", ""), (TEAMS, "skip", "")],
                ),
            ],
        );
        let sbom = &s[SBOM];
        assert_eq!((sbom.passed, sbom.failed, sbom.skipped), (1, 3, 1));
        // Whatever key the verdict carries is counted: no list of causes here.
        assert_eq!(
            sbom.failed_by_cause,
            BTreeMap::from([("did_not_run".into(), 2), ("oom_killed".into(), 1)])
        );
        assert_eq!(
            sbom.last_failure,
            Some(LastFailure {
                namespace: "team-b".into(),
                name: "b1".into(),
                cause: "oom_killed".into(),
                at: "2026-12-02T11:30:00Z".into()
            })
        );
        assert_eq!(
            (sbom.window.as_str(), sbom.observed_at.as_str()),
            ("24h", "2026-12-02T12:00:00Z")
        );
        assert_eq!(
            (s[TEAMS].passed, s[TEAMS].failed, s[TEAMS].skipped),
            (1, 0, 1)
        );
        assert_eq!(
            (s[LINT].passed, s[LINT].failed, s[LINT].last_failure.clone()),
            (1, 0, None)
        );
    }

    /// Two replicas writing the same policy's status every period, in this order, the API
    /// server keeping the last write. Each replica skips what it wrote last (the writer's
    /// cache) and, with `ordered`, a count that does not supersede the stored one. Returns how
    /// often the stored status changed, and what it was at the end of each period.
    fn two_replicas(
        replicas: [&dyn Fn(u32) -> VerificationStatus; 2],
        periods: u32,
        ordered: bool,
    ) -> (usize, Vec<VerificationStatus>) {
        let mut stored: Option<VerificationStatus> = None;
        let mut written: [Option<VerificationStatus>; 2] = [None, None];
        let (mut changes, mut settled) = (0, Vec::new());
        for period in 0..periods {
            for (r, count) in replicas.iter().enumerate() {
                let own = count(period);
                if written[r].as_ref() == Some(&own)
                    || (ordered && !supersedes(&own, stored.as_ref()))
                {
                    continue;
                }
                if stored.as_ref() != Some(&own) {
                    changes += 1;
                }
                stored = Some(own.clone());
                written[r] = Some(own);
            }
            settled.extend(stored.clone());
        }
        (changes, settled)
    }

    fn status_at(observed_at: &str, window: &str, passed: i64) -> VerificationStatus {
        VerificationStatus {
            window: window.into(),
            observed_at: observed_at.into(),
            passed,
            ..VerificationStatus::default()
        }
    }

    #[test]
    fn two_replicas_with_different_windows_or_clocks_settle_on_one_count() {
        let end = |period: u32| format!("2026-12-02T08:{:02}:00Z", 5 * period);
        let each = |f: &dyn Fn(u32) -> VerificationStatus| (0..6).map(f).collect::<Vec<_>>();
        // Different windows (a rollout changing --verification-window): the same end, other
        // counts. Without an order the status is whichever replica wrote last in the period.
        let day = |p: u32| status_at(&end(p), "24h", 9);
        let hour = |p: u32| status_at(&end(p), "1h", 2);
        assert_eq!(two_replicas([&day, &hour], 6, false), (12, each(&hour)));
        assert_eq!(two_replicas([&hour, &day], 6, false), (12, each(&day)));
        // With it, the longer window's count whoever writes last; the shorter one's shows only
        // between the two writes of a period when it writes first.
        assert_eq!(two_replicas([&day, &hour], 6, true), (6, each(&day)));
        assert_eq!(two_replicas([&hour, &day], 6, true), (12, each(&day)));

        // Clocks on either side of a period boundary: one replica's window ends a period later
        // (its count has one more verdict). Without an order the status goes back in time.
        let ahead = |p: u32| status_at(&end(p + 1), "24h", 3);
        let behind = |p: u32| status_at(&end(p), "24h", 2);
        assert_eq!(
            two_replicas([&ahead, &behind], 6, false),
            (12, each(&behind))
        );
        assert_eq!(two_replicas([&ahead, &behind], 6, true), (6, each(&ahead)));
        // (The one behind writes only before the first count of the one ahead is stored.)
        assert_eq!(two_replicas([&behind, &ahead], 6, true), (7, each(&ahead)));

        // Equal counts: written once, then left alone.
        let same = |_: u32| status_at(&end(0), "24h", 4);
        assert_eq!(two_replicas([&same, &same], 6, true).0, 1);
        // A stored status that cannot be read is replaced.
        assert!(supersedes(
            &same(0),
            Some(&status_at("yesterday", "24h", 1))
        ));
        assert!(!supersedes(&same(0), Some(&same(0))));
    }

    #[test]
    fn only_verdicts_marked_within_the_window_count() {
        let set = policies(POLICIES);
        let s = count(
            &set,
            &[
                // (end − 24h, end]: the start is out, the end is in, later is the next count's.
                marked(
                    "team-a",
                    "start",
                    "2026-12-01T12:00:00Z",
                    &[(SBOM, "pass", "")],
                ),
                marked(
                    "team-a",
                    "in",
                    "2026-12-01T12:00:01Z",
                    &[(SBOM, "pass", "")],
                ),
                marked(
                    "team-a",
                    "end",
                    "2026-12-02T12:00:00Z",
                    &[(SBOM, "pass", "")],
                ),
                marked(
                    "team-a",
                    "later",
                    "2026-12-02T12:00:01Z",
                    &[(SBOM, "fail", "failed")],
                ),
            ],
        );
        assert_eq!((s[SBOM].passed, s[SBOM].failed), (2, 0));
    }

    #[test]
    fn a_policy_counts_only_taskruns_where_it_can_apply() {
        let set = policies(POLICIES);
        let catalog = Catalog::default();
        let mut tally = Tally::new(&set, &catalog, end(), Duration::from_secs(3600));
        let at = "2026-12-02T11:59:00Z";
        // A StepPolicy of team-a named on a TaskRun of team-b; a namespace-only policy for
        // team-* named in kube-system: marks bookend cannot have written there.
        tally.add(&marked("team-b", "x", at, &[(LINT, "pass", "")]));
        tally.add(&marked(
            "kube-system",
            "y",
            at,
            &[(TEAMS, "pass", ""), (SBOM, "pass", "")],
        ));
        tally.add(&marked(
            "team-a",
            "z",
            at,
            &[(LINT, "fail", "failed"), (TEAMS, "pass", "")],
        ));
        assert_eq!(tally.skipped[&Skipped::OutOfReach], 2);
        let s = tally.statuses();
        assert_eq!((s[LINT].passed, s[LINT].failed), (0, 1));
        assert_eq!((s[TEAMS].passed, s[TEAMS].failed), (1, 0));
        assert_eq!(s[SBOM].passed, 1);
    }

    #[test]
    fn unreadable_marks_and_strange_causes_count_nothing_or_are_bounded() {
        let set = policies(POLICIES);
        let catalog = Catalog::default();
        let mut tally = Tally::new(&set, &catalog, end(), Duration::from_secs(3600));
        let at = "2026-12-02T11:59:00Z";
        for annotation in [
            "{}",
            "not json",
            r#"{"ClusterStepPolicy/sbom":"pass"}"#,
            r#"{"at":"yesterday","verdicts":{"ClusterStepPolicy/sbom":"pass"}}"#,
        ] {
            tally.add(&json!({"namespace": "team-a", "name": "u",
                              "annotations": {VERIFIED_ANNOTATION: annotation}}));
        }
        tally.add(&marked("team-a", "v", at, &[(SBOM, "maybe", "")]));
        tally.add(&marked(
            "team-a",
            "w",
            at,
            &[(SBOM, "fail", "Did Not Run!")],
        ));
        tally.add(&marked("team-a", "n", at, &[(SBOM, "fail", "")]));
        for i in 0..40 {
            tally.add(&marked(
                "team-a",
                "c",
                at,
                &[(SBOM, "fail", &format!("cause_{i}"))],
            ));
        }
        // Gone policies have no status to count into.
        tally.add(&marked(
            "team-a",
            "g",
            at,
            &[("ClusterStepPolicy/gone", "pass", "")],
        ));
        assert_eq!(tally.skipped[&Skipped::Unreadable], 5);
        let s = tally.statuses();
        let sbom = &s[SBOM];
        assert_eq!((sbom.passed, sbom.failed), (0, 42));
        assert!(
            sbom.failed_by_cause.len() <= MAX_CAUSES + 1,
            "{:?}",
            sbom.failed_by_cause
        );
        assert_eq!(sbom.failed_by_cause.values().sum::<i64>(), 42);
        assert!(sbom.failed_by_cause["other"] >= 1 && sbom.failed_by_cause["unknown"] == 1);
        assert!(!s.contains_key("ClusterStepPolicy/gone"));
    }

    #[test]
    fn the_window_ends_on_a_period_boundary_and_is_written_as_kubernetes_does() {
        let now: Timestamp = "2026-12-02T08:03:17.5Z".parse().unwrap();
        assert_eq!(
            window_end(now, Duration::from_secs(300)).to_string(),
            "2026-12-02T08:00:00Z"
        );
        assert_eq!(
            window_end(now, Duration::from_secs(1)).to_string(),
            "2026-12-02T08:03:17Z"
        );
        assert_eq!(duration_text(Duration::from_secs(86400)), "24h");
        assert_eq!(duration_text(Duration::from_secs(5400)), "90m");
        assert_eq!(duration_text(Duration::from_secs(45)), "45s");
    }

    #[test]
    fn the_order_of_the_list_does_not_change_the_counts() {
        let set = policies(POLICIES);
        let at = "2026-12-02T11:00:00Z";
        let mut runs = vec![
            marked("team-a", "a", at, &[(SBOM, "fail", "did_not_run")]),
            marked("team-b", "b", at, &[(SBOM, "fail", "failed")]),
            marked("team-a", "c", "2026-12-02T10:00:00Z", &[(SBOM, "pass", "")]),
        ];
        let forward = count(&set, &runs);
        runs.reverse();
        assert_eq!(count(&set, &runs), forward);
        assert_eq!(forward[SBOM].last_failure.as_ref().unwrap().name, "b");
    }
}
