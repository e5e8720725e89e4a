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
//! One exception, for TaskRuns whose Task a resolver fetches: bookend injects into that Task at
//! Tekton's controller's dry-run CREATE and writes the record and the verification label on
//! it; the controller then copies the Task's labels and annotations into the TaskRun (an
//! UPDATE, `storeTaskSpecAndMergeMeta` in Tekton's `pkg/reconciler/taskrun/taskrun.go`). So the
//! controller's identity may ADD exactly those two marks, together, to a remote-resolver
//! TaskRun that carries no mark yet; it may never write `bookend.dev/verified`, nor change or
//! remove a mark ([`controller_copies_resolved_marks`]).
//!
//! The chart sends only UPDATEs that change a mark (a `matchCondition`), so Tekton's own
//! updates never wait for bookend; this check does not rely on that filter.

use serde_json::{Map, Value};

use super::Answer;
use super::wire::RequestIn;
use crate::engine::record::{self, MARK_PREFIX, Record};
use crate::tekton::{TaskRunView, TaskSource};

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

/// Whether an UPDATE is Tekton's controller copying the marks bookend wrote on a remotely
/// resolved Task into the TaskRun it runs for: `old` is a remote-resolver TaskRun without any
/// mark, and the UPDATE adds exactly the record (one bookend can read) and the verification
/// label (`true`), nothing else under the prefix.
fn controller_copies_resolved_marks(old: &Value, new: &Value, changed: &[ChangedMark]) -> bool {
    let label_field = format!("metadata.labels.{}", record::LABEL);
    let record_field = format!("metadata.annotations.{}", record::ANNOTATION);
    let fields: Vec<&str> = changed.iter().map(|c| c.field.as_str()).collect();
    let entry = |object: &Value, map: &str, key: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(map))
            .and_then(Value::as_object)
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let old_has_marks = ["labels", "annotations"].iter().any(|map| {
        old.get("metadata")
            .and_then(|m| m.get(*map))
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.starts_with(MARK_PREFIX)))
    });
    let remote = TaskRunView::new(old)
        .is_some_and(|view| matches!(view.task_source(), TaskSource::RemoteRef { .. }));
    remote
        && !old_has_marks
        && fields == [label_field.as_str(), record_field.as_str()]
        && entry(new, "labels", record::LABEL).as_deref() == Some(record::LABEL_VALUE)
        && entry(new, "annotations", record::ANNOTATION)
            .is_some_and(|r| Record::parse(&r).is_some())
}

/// The answer to a TaskRun UPDATE: refused when it changes a mark and `requester` is not
/// `own_user` (bookend's identity; `None` when bookend does not know it, and then nobody may),
/// unless it is `controller` (Tekton's controller) copying a resolved Task's marks
/// ([`controller_copies_resolved_marks`]).
pub(super) fn taskrun_update(
    request: &RequestIn,
    own_user: Option<&str>,
    controller: &str,
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
    if !controller.is_empty()
        && controller == requester
        && controller_copies_resolved_marks(old, new, &changed)
    {
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
            taskrun_update(
                &update(user, old.clone(), marked.clone()),
                own_user,
                CONTROLLER,
            )
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
        let answer =
            taskrun_update(&update("alice", old.clone(), marked), Some(own), CONTROLLER).unwrap();
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
            taskrun_update(
                &update("alice", old.clone(), relabelled),
                Some(own),
                CONTROLLER
            )
            .unwrap()
            .outcome,
            Outcome::Admitted
        );
        // No oldObject: a request bookend cannot judge (HTTP 400), not an admission.
        let mut broken = update("alice", old.clone(), old);
        broken.old_object = None;
        assert!(taskrun_update(&broken, Some(own), CONTROLLER).is_err());
    }

    const CONTROLLER: &str = "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller";

    #[test]
    fn tektons_controller_only_adds_a_resolved_tasks_record_and_label() {
        use crate::engine::Outcome;
        let own = "system:serviceaccount:bookend-system:bookend";
        let remote = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"labels": {"app": "a"}, "annotations": {}},
            "spec": {"taskRef": {"resolver": "git", "params": []}}});
        let record =
            r#"{"policies":[{"policy":"ClusterStepPolicy/a","hash":"0","steps":["bookend-a"]}]}"#;
        let with = |object: &Value, label: Option<&str>, annotations: &[(&str, &str)]| {
            let mut new = object.clone();
            if let Some(value) = label {
                new["metadata"]["labels"][record::LABEL] = json!(value);
            }
            for (key, value) in annotations {
                new["metadata"]["annotations"][*key] = json!(value);
            }
            new
        };
        let outcome = |user: &str, old: &Value, new: &Value| {
            taskrun_update(
                &update(user, old.clone(), new.clone()),
                Some(own),
                CONTROLLER,
            )
            .unwrap()
            .outcome
        };
        // What Tekton's controller copies from the Task bookend injected into.
        let copied = with(&remote, Some("true"), &[(record::ANNOTATION, record)]);
        assert_eq!(outcome(CONTROLLER, &remote, &copied), Outcome::Admitted);
        // Nobody else, and not: one without the other, another value, an unreadable record,
        // the verified mark, any other key under the prefix.
        assert_eq!(outcome("alice", &remote, &copied), Outcome::Denied);
        for new in [
            with(&remote, Some("true"), &[]),
            with(&remote, None, &[(record::ANNOTATION, record)]),
            with(&remote, Some("false"), &[(record::ANNOTATION, record)]),
            with(&remote, Some("true"), &[(record::ANNOTATION, "not json")]),
            with(
                &remote,
                Some("true"),
                &[
                    (record::ANNOTATION, record),
                    (record::VERIFIED_ANNOTATION, "{}"),
                ],
            ),
            with(&remote, None, &[(record::VERIFIED_ANNOTATION, "{}")]),
            with(
                &remote,
                Some("true"),
                &[(record::ANNOTATION, record), ("bookend.dev/other", "x")],
            ),
        ] {
            assert_eq!(outcome(CONTROLLER, &remote, &new), Outcome::Denied, "{new}");
        }
        // Never changes or removes a mark: a TaskRun already marked keeps its marks.
        let other = record.replace("bookend-a", "bookend-b");
        let changed = with(&copied, Some("true"), &[(record::ANNOTATION, &other)]);
        assert_eq!(outcome(CONTROLLER, &copied, &changed), Outcome::Denied);
        let mut removed = copied.clone();
        removed["metadata"]["labels"] = json!({"app": "a"});
        assert_eq!(outcome(CONTROLLER, &copied, &removed), Outcome::Denied);
        // Only on a TaskRun whose Task a resolver fetches: an inline one was planned at CREATE.
        let inline = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"labels": {}, "annotations": {}},
            "spec": {"taskSpec": {"steps": []}}});
        let inline_copied = with(&inline, Some("true"), &[(record::ANNOTATION, record)]);
        assert_eq!(
            outcome(CONTROLLER, &inline, &inline_copied),
            Outcome::Denied
        );
        // An empty controller name configured matches nobody.
        assert_eq!(
            taskrun_update(&update("", remote.clone(), copied.clone()), Some(own), "")
                .unwrap()
                .outcome,
            Outcome::Denied
        );
    }
}
