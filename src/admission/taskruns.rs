//! The routes the engine decides: a TaskRun CREATE (`Route::TaskRun`: injected on `/mutate`,
//! checked by the backstop on `/validate`) and the dry-run Task CREATE of a remotely resolved
//! Task (`Route::ResolvedTask`). Each turns the engine's [`Decision`] into the `Answer` the
//! AdmissionReview carries. A file of its own so that the front file holds only the endpoints
//! and the routing.

use serde_json::Value;

use super::wire::RequestIn;
use super::{Answer, Summary, TaskRunCheck, request_object};
use crate::engine::{self, Decision, Lookup, Outcome, Request};
use crate::patch::Operation;
use crate::policy::PolicySet;
use crate::tekton;

/// A TaskRun CREATE: the engine's decision, as `/mutate` injects it or as the backstop checks it.
pub(super) fn taskrun(
    check: TaskRunCheck,
    request: &RequestIn,
    set: &PolicySet,
    lookup: &dyn Lookup,
    summary: &mut Summary,
) -> Result<Answer, String> {
    let object = request_object(request)?;
    let view = tekton::TaskRunView::new(object).ok_or_else(|| {
        format!(
            "request.object is not a tekton.dev/{} TaskRun",
            request.kind.version
        )
    })?;
    let namespace = request
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .or(view.namespace())
        .unwrap_or("default");
    if summary.name.is_empty() {
        summary.name = view.display_name();
    }
    let request = Request {
        object,
        namespace,
        dry_run: summary.dry_run,
    };
    Ok(match check {
        TaskRunCheck::Inject => mutate_answer(engine::decide_patch(request, set, lookup), summary),
        TaskRunCheck::Backstop { .. } => {
            backstop_answer(object, engine::decide_backstop(request, set, lookup))
        }
    })
}

/// The dry-run Task CREATE of Tekton's controller for a remotely resolved Task.
pub(super) fn resolved_task(
    request: &RequestIn,
    set: &PolicySet,
    lookup: &dyn Lookup,
    summary: &mut Summary,
) -> Result<Answer, String> {
    let object = request_object(request)?;
    let namespace = request
        .namespace
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "request.namespace is missing".to_owned())?;
    let decision = engine::decide_resolved_task(
        Request {
            object,
            namespace,
            dry_run: true,
        },
        set,
        lookup,
    );
    Ok(mutate_answer(decision, summary))
}

fn mutate_answer(decision: Decision, summary: &mut Summary) -> Answer {
    let Decision {
        outcome,
        patch,
        message,
        warnings,
        audit_annotations,
        injected,
        ..
    } = decision;
    match outcome {
        Outcome::Denied => Answer {
            warnings,
            ..Answer::deny(message.unwrap_or_default())
        },
        Outcome::Admitted => Answer {
            warnings,
            audit_annotations,
            ..Answer::allow()
        },
        Outcome::Mutated => {
            summary.injected = injected;
            Answer {
                outcome,
                message: None,
                patch: Some(serde_json::to_vec(&patch).expect("a patch serialises")),
                warnings,
                audit_annotations,
            }
        }
    }
}

/// The validating backstop: the final object must already be what the mutating webhook makes
/// of it. Anything the engine would still change in `spec` means mandatory steps are missing or
/// were modified after injection; a mark the engine would drop or change ([`forged_mark`], and
/// the record param in `spec.params`) means the TaskRun arrives with marks bookend did not
/// write: the mutation did not run.
fn backstop_answer(object: &Value, decision: Decision) -> Answer {
    match decision.outcome {
        Outcome::Denied => Answer::deny(decision.message.unwrap_or_default()),
        Outcome::Admitted => Answer::allow(),
        Outcome::Mutated => {
            let changes = |refused: &dyn Fn(&Operation) -> bool| -> Vec<String> {
                decision
                    .patch
                    .iter()
                    .filter(|op| refused(op))
                    .map(|op| describe(op, object))
                    .collect()
            };
            // The record param is a mark in `spec`: one bookend would add is a previous
            // release's admission (it wrote none); one bookend would change or drop is not
            // bookend's.
            let carries_param = crate::engine::record::carries_record_param(object);
            let spec_changes =
                changes(&|op| op.path().starts_with("/spec") && !is_params_path(op.path()));
            if !spec_changes.is_empty() {
                let policies = decision
                    .injected
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Answer::deny(format!(
                    "bookend: the TaskRun lacks the steps that {policies} require, or they were changed after injection (was bookend's mutating webhook skipped?): {}. Create the TaskRun again so bookend can inject them, or check `bookend render --explain`",
                    spec_changes.join("; ")
                ));
            }
            // A previous release never writes the label: with it, the record is bookend's
            // current one or forged.
            let labelled = object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .is_some_and(|labels| labels.contains_key(crate::engine::record::LABEL));
            let mark_changes = changes(&|op| {
                forged_mark(op, labelled) || (carries_param && is_params_path(op.path()))
            });
            if mark_changes.is_empty() {
                return Answer::allow();
            }
            Answer::deny(format!(
                "bookend: the TaskRun's marks are not the ones bookend writes at admission (was bookend's mutating webhook skipped?): {}. Labels and annotations under {} and the param {:?} are bookend's alone: remove them and create the TaskRun again",
                mark_changes.join("; "),
                crate::engine::record::MARK_PREFIX,
                crate::engine::record::PARAM,
            ))
        }
    }
}

/// Whether a backstop operation on `metadata` (the engine changes only bookend's marks there)
/// shows a mark the author wrote: any mark bookend would drop or change (a forged
/// `bookend.dev/verified`, a `bookend.dev/verify` label or a record on a TaskRun nothing is
/// injected into, a label with another value), and `bookend.dev/verified` in any form. Adding
/// the label or the record, or replacing the record of a TaskRun without the label, is not
/// refused: a previous release's mutation, during a rolling upgrade, writes its own record form
/// and no label (such a TaskRun is not watched; docs/operations.md). A `labelled` TaskRun whose
/// record bookend would replace carries a forged one.
fn forged_mark(op: &Operation, labelled: bool) -> bool {
    let path = op.path();
    if !path.starts_with("/metadata") {
        return false;
    }
    let verified = format!(
        "/metadata/annotations/{}",
        crate::engine::record::VERIFIED_ANNOTATION.replace('/', "~1")
    );
    let record = format!(
        "/metadata/annotations/{}",
        crate::engine::record::ANNOTATION.replace('/', "~1")
    );
    match op {
        Operation::Remove { .. } => true,
        Operation::Add { .. } => path == verified,
        Operation::Replace { .. } => path != record || labelled,
    }
}

/// Whether a patch path is `spec.params` or inside it.
fn is_params_path(path: &str) -> bool {
    path.strip_prefix("/spec/params")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn describe(op: &Operation, object: &Value) -> String {
    use crate::patch::Operation;
    let name_of = |v: &Value| {
        tekton::step_name(v)
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    };
    match op {
        Operation::Add { path, value } => format!("missing {path}{}", name_of(value)),
        Operation::Replace { path, .. } => format!("changed {path}"),
        Operation::Remove { path } => {
            let current = object.pointer(path).map(name_of).unwrap_or_default();
            format!("unexpected {path}{current}")
        }
    }
}
