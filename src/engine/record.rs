//! The `bookend.dev/injected` annotation: which policies (and spec hashes) injected which steps,
//! which helper steps were added and which user steps were set to `onError: continue`.

use serde::{Deserialize, Serialize};

/// Annotation key of the record.
pub const ANNOTATION: &str = "bookend.dev/injected";
/// The TaskRun param that carries the same record into `spec.params`: Tekton Chains' default
/// SLSA v1.0 buildType records the TaskRun's spec (`externalParameters.runSpec`) but none of
/// its annotations (docs/provenance.md). bookend writes it with the record and removes one it
/// did not write; it never reads it back.
pub const PARAM: &str = "bookend-injected";

/// Whether a param (of a TaskRun or a Task) is named [`PARAM`], as Tekton compares names.
pub fn is_record_param(param: &serde_json::Value) -> bool {
    param
        .get("name")
        .and_then(serde_json::Value::as_str)
        .is_some_and(is_record_param_name)
}

/// Whether an object's `spec.params` carries a record param.
pub fn carries_record_param(object: &serde_json::Value) -> bool {
    object
        .pointer("/spec/params")
        .and_then(serde_json::Value::as_array)
        .is_some_and(|params| params.iter().any(is_record_param))
}

/// Whether Tekton takes `name` for the record param's: it compares param names lower-cased
/// (`validateNoDuplicateNames`, `strings.ToLower`, a simple per-rune mapping: the first of
/// Rust's full mapping is the same for the letters of `bookend-injected`, `İ` and the Kelvin
/// sign `K` included), so `Bookend-Injected` is the same param to Tekton and to bookend.
fn is_record_param_name(name: &str) -> bool {
    name.chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .eq(PARAM.chars())
}
/// Label bookend sets beside the record, so that the post-run watch selects only the TaskRuns
/// it injected into (a label selector: the API server filters, bookend caches nothing else).
/// The author cannot opt out by writing it: bookend sets it with the record and removes it with
/// a record it did not write.
pub const LABEL: &str = "bookend.dev/verify";
pub const LABEL_VALUE: &str = "true";
/// Annotation naming the Task bookend inlined for a `taskRef` TaskRun.
pub const INLINED_ANNOTATION: &str = "bookend.dev/inlined-task";
/// Annotation that marks a TaskRun verified after it finished (each policy's verdict). Only
/// bookend's own identity writes it, and never at CREATE: an author who wrote it would make
/// the post-run watch take the TaskRun for verified.
pub const VERIFIED_ANNOTATION: &str = "bookend.dev/verified";
/// The prefix of every label and annotation bookend writes on a TaskRun. After CREATE only
/// bookend's own identity may change an entry under it (`admission::marks`).
pub const MARK_PREFIX: &str = "bookend.dev/";

/// What bookend did to a TaskRun.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    #[serde(default)]
    pub policies: Vec<RecordEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub helpers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub continued: Vec<String>,
    /// The TaskRun's Task comes from a resolver: the policies' steps are injected into the
    /// resolved Task at Tekton's controller's dry-run, after this record was written at the
    /// TaskRun's CREATE (so it lists no helpers and no continued steps). Wording only: what
    /// ran is read from `status.taskSpec`, and which steps are the org's is decided by
    /// composing again, never by this flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resolved: bool,
}

/// One applied policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordEntry {
    /// `Kind/name` (or `StepPolicy/namespace/name`).
    pub policy: String,
    pub hash: String,
    pub steps: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// The Task results the policy added (its post-steps write them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<String>,
}

impl Record {
    /// Parses the annotation value; a value bookend cannot read counts as absent.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("record serialises")
    }

    pub fn entry_with_step(&self, name: &str) -> Option<&RecordEntry> {
        self.policies
            .iter()
            .find(|e| e.steps.iter().any(|s| s == name))
    }

    pub fn has_volume(&self, name: &str) -> bool {
        self.policies
            .iter()
            .any(|e| e.volumes.iter().any(|v| v == name))
    }

    /// The entry bookend records for a policy it injects (or will inject at resolution).
    pub fn entry_of(policy: &crate::policy::Policy) -> RecordEntry {
        RecordEntry {
            policy: policy.id.to_string(),
            hash: policy.hash.clone(),
            steps: policy.step_names().map(str::to_owned).collect(),
            volumes: policy.spec.volumes.iter().map(|v| v.name.clone()).collect(),
            results: policy.spec.results.iter().map(|r| r.name.clone()).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty() && self.helpers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_tolerates_garbage() {
        let r = Record {
            policies: vec![RecordEntry {
                policy: "ClusterStepPolicy/a".into(),
                hash: "0123456789ab".into(),
                steps: vec!["bookend-a".into()],
                volumes: vec![],
                results: vec![],
            }],
            helpers: vec!["bookend-verdict".into()],
            continued: vec!["build".into(), "#1".into()],
            resolved: false,
        };
        let text = r.to_json();
        assert_eq!(
            text,
            r##"{"policies":[{"policy":"ClusterStepPolicy/a","hash":"0123456789ab","steps":["bookend-a"]}],"helpers":["bookend-verdict"],"continued":["build","#1"]}"##
        );
        assert_eq!(Record::parse(&text), Some(r.clone()));
        assert_eq!(Record::parse("not json"), None);
        assert!(r.entry_with_step("bookend-a").is_some());
        assert!(r.entry_with_step("bookend-b").is_none());
    }
}
