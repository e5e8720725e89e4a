//! A TaskRun UPDATE (`/validate`): bookend's marks are bookend's alone.
//!
//! The marks are the labels and annotations under `bookend.dev/` (the `bookend.dev/injected`
//! record, the `bookend.dev/verify` label the post-run watch selects by, the
//! `bookend.dev/verified` mark). An author who could change them after CREATE could leave the
//! watch (remove the label) or make bookend take the TaskRun for verified (write the mark).
//! So an UPDATE that adds, changes or removes one is refused unless the requester is bookend's
//! own identity, which bookend asked the API server for at start (a SelfSubjectReview), never
//! anything in the request but `userInfo`, which the API server fills. Everything else in an
//! UPDATE (Tekton's controller's labels, annotations, finalizers, a cancellation) is admitted.
//!
//! The chart sends only UPDATEs that change a mark (a `matchCondition`), so Tekton's own
//! updates never wait for bookend; this check does not rely on that filter.

use serde_json::{Map, Value};

use super::Answer;
use super::wire::RequestIn;
use crate::engine::record::MARK_PREFIX;

/// One mark an UPDATE changes, as `metadata.<map>.<key>`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ChangedMark {
    pub(super) field: String,
}

/// The marks whose value differs between `old` and `new` (added, changed or removed), labels
/// then annotations, each in key order.
pub(super) fn changed(old: &Value, new: &Value) -> Vec<ChangedMark> {
    let mut out = Vec::new();
    for map in ["labels", "annotations"] {
        let entries = |object: &Value| -> Map<String, Value> {
            object
                .get("metadata")
                .and_then(|m| m.get(map))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.starts_with(MARK_PREFIX))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (before, after) = (entries(old), entries(new));
        let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            if before.get(key) != after.get(key) {
                out.push(ChangedMark {
                    field: format!("metadata.{map}.{key}"),
                });
            }
        }
    }
    out
}

/// The answer to a TaskRun UPDATE: refused when it changes a mark and `requester` is not
/// `own_user` (bookend's identity; `None` when bookend does not know it, and then nobody may).
pub(super) fn taskrun_update(
    request: &RequestIn,
    own_user: Option<&str>,
) -> Result<Answer, String> {
    let new = super::request_object(request)?;
    let old = request
        .old_object
        .as_ref()
        .map(|o| &o.0)
        .ok_or_else(|| "request.oldObject is missing (an UPDATE carries it)".to_owned())?;
    let changed = changed(old, new);
    if changed.is_empty() {
        return Ok(Answer::allow());
    }
    let requester = request.user_info.username.as_str();
    if own_user.is_some_and(|own| !own.is_empty() && own == requester) {
        return Ok(Answer::allow());
    }
    let fields: Vec<&str> = changed.iter().map(|c| c.field.as_str()).collect();
    Ok(Answer::deny(format!(
        "bookend: {} {} written by bookend only (they decide the TaskRun's post-run verification); {requester:?} may not add, change or remove {}. Leave every label and annotation under {MARK_PREFIX} as it is",
        fields.join(", "),
        if fields.len() == 1 { "is" } else { "are" },
        if fields.len() == 1 { "it" } else { "them" },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taskrun(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"labels": labels, "annotations": annotations}})
    }

    fn fields(old: &Value, new: &Value) -> Vec<String> {
        changed(old, new).into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn every_added_changed_or_removed_mark_is_named_and_nothing_else() {
        let old = taskrun(
            json!({"bookend.dev/verify": "true", "app": "a"}),
            json!({"bookend.dev/injected": "{}", "note": "x"}),
        );
        // Tekton's own changes: other labels and annotations, anything outside metadata.
        let mut tekton = old.clone();
        tekton["metadata"]["labels"]["tekton.dev/task"] = json!("build");
        tekton["metadata"]["annotations"]["note"] = json!("y");
        tekton["metadata"]["finalizers"] = json!(["chains.tekton.dev"]);
        tekton["spec"] = json!({"status": "TaskRunCancelled"});
        assert!(fields(&old, &tekton).is_empty());

        let mut removed = old.clone();
        removed["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("bookend.dev/verify");
        assert_eq!(
            fields(&old, &removed),
            ["metadata.labels.bookend.dev/verify"]
        );
        let mut marked = old.clone();
        marked["metadata"]["annotations"]["bookend.dev/verified"] = json!("{}");
        marked["metadata"]["annotations"]["bookend.dev/injected"] = json!("{\"policies\":[]}");
        assert_eq!(
            fields(&old, &marked),
            [
                "metadata.annotations.bookend.dev/injected",
                "metadata.annotations.bookend.dev/verified"
            ]
        );
        // The whole map gone, or not a map at all, removes every mark in it.
        let mut no_labels = old.clone();
        no_labels["metadata"]["labels"] = json!(null);
        assert_eq!(
            fields(&old, &no_labels),
            ["metadata.labels.bookend.dev/verify"]
        );
        let mut other_value = old.clone();
        other_value["metadata"]["labels"]["bookend.dev/verify"] = json!("false");
        assert_eq!(
            fields(&old, &other_value),
            ["metadata.labels.bookend.dev/verify"]
        );
        // Any key under the prefix is a mark, one bookend does not write today included.
        let mut new_key = old.clone();
        new_key["metadata"]["labels"]["bookend.dev/anything"] = json!("1");
        assert_eq!(
            fields(&old, &new_key),
            ["metadata.labels.bookend.dev/anything"]
        );
    }

    fn update(user: &str, old: Value, new: Value) -> RequestIn {
        serde_json::from_value(json!({
            "uid": "u", "operation": "UPDATE",
            "kind": {"group": "tekton.dev", "version": "v1", "kind": "TaskRun"},
            "userInfo": {"username": user},
            "object": new, "oldObject": old,
        }))
        .unwrap()
    }

    #[test]
    fn only_bookends_own_identity_changes_a_mark() {
        let own = "system:serviceaccount:bookend-system:bookend";
        let old = taskrun(json!({"bookend.dev/verify": "true"}), json!({}));
        let mut marked = old.clone();
        marked["metadata"]["annotations"]["bookend.dev/verified"] = json!("{}");
        let outcome = |user: &str, own_user: Option<&str>| {
            taskrun_update(&update(user, old.clone(), marked.clone()), own_user)
                .unwrap()
                .outcome
        };
        use crate::engine::Outcome;
        assert_eq!(outcome(own, Some(own)), Outcome::Admitted);
        assert_eq!(outcome("alice", Some(own)), Outcome::Denied);
        assert_eq!(
            outcome(
                "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller",
                Some(own)
            ),
            Outcome::Denied
        );
        // bookend not knowing itself: nobody, not even an empty username.
        assert_eq!(outcome(own, None), Outcome::Denied);
        assert_eq!(outcome("", Some("")), Outcome::Denied);
        let answer = taskrun_update(&update("alice", old.clone(), marked), Some(own)).unwrap();
        let message = answer.message.unwrap();
        assert!(
            message.contains("metadata.annotations.bookend.dev/verified")
                && message.contains("\"alice\""),
            "{message}"
        );
        // An UPDATE that leaves the marks alone is anyone's.
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"]["team"] = json!("a");
        assert_eq!(
            taskrun_update(&update("alice", old.clone(), relabelled), Some(own))
                .unwrap()
                .outcome,
            Outcome::Admitted
        );
        // No oldObject: a request bookend cannot judge (HTTP 400), not an admission.
        let mut broken = update("alice", old.clone(), old);
        broken.old_object = None;
        assert!(taskrun_update(&broken, Some(own)).is_err());
    }
}
