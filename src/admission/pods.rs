//! `POST /validate-pods`: Pod CREATEs of TaskRuns (the webhook's objectSelector sends only Pods
//! labelled `tekton.dev/taskRun`). Answering one takes the owning TaskRun as the API server has
//! it, which the server fetches between [`read`] and [`answer`]; both halves are pure.

use serde_json::Value;

use super::{Answer, ObjectIn, Reply, RequestIn, Summary, answered, bad_request, parse};
use crate::engine::{self, Lookup};
use crate::policy::PolicySet;

/// Label Tekton puts on a TaskRun's Pod: the TaskRun's name.
pub const TASKRUN_LABEL: &str = "tekton.dev/taskRun";
/// Label Tekton puts on a TaskRun's Pod: the TaskRun's uid.
pub const TASKRUN_UID_LABEL: &str = "tekton.dev/taskRunUID";

/// A Pod review, read: what to fetch before it can be answered.
pub struct PodReview {
    api_version: String,
    request: RequestIn,
    summary: Summary,
    owner: Option<Owner>,
}

/// The TaskRun a Pod belongs to, by its labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl PodReview {
    /// The TaskRun to fetch; `None` when there is nothing to check (not a TaskRun's Pod).
    pub fn owner(&self) -> Option<&Owner> {
        self.owner.as_ref()
    }
}

/// What the server found when it looked for the owning TaskRun.
pub enum OwnerLookup {
    Found(Value),
    NotFound,
    /// This source cannot read TaskRuns (`--source files`).
    Unavailable,
    /// The API server could not be asked (the reason).
    Failed(String),
}

/// A Pod review, read: or the final reply to a malformed one.
pub enum Read {
    Review(Box<PodReview>),
    Malformed(Reply),
}

/// Reads a Pod review.
pub fn read(body: &[u8]) -> Read {
    let (api_version, request, summary) = match parse(body) {
        Ok(parsed) => parsed,
        Err(reply) => return Read::Malformed(*reply),
    };
    let owner = match (
        &request.kind.group[..],
        &request.kind.kind[..],
        &request.object,
    ) {
        ("", "Pod", Some(ObjectIn(pod))) if request.operation == "CREATE" => {
            owner_of(pod, &summary)
        }
        _ => None,
    };
    Read::Review(Box::new(PodReview {
        api_version,
        request,
        summary,
        owner,
    }))
}

fn owner_of(pod: &Value, summary: &Summary) -> Option<Owner> {
    let labels = pod.get("metadata")?.get("labels")?;
    let label = |key| labels.get(key).and_then(Value::as_str).map(str::to_owned);
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| summary.namespace.clone());
    Some(Owner {
        namespace,
        name: label(TASKRUN_LABEL)?,
        uid: label(TASKRUN_UID_LABEL),
    })
}

/// Answers a Pod review once the owning TaskRun was looked up.
pub fn answer(
    review: Box<PodReview>,
    owner: OwnerLookup,
    set: &PolicySet,
    lookup: &dyn Lookup,
) -> Reply {
    let PodReview {
        api_version,
        request,
        summary,
        owner: wanted,
    } = *review;
    let Some(ObjectIn(pod)) = &request.object else {
        return bad_request(summary, "request.object is missing".to_owned());
    };
    let decision = match (wanted, owner) {
        (None, _) => Answer::allow(),
        (Some(wanted), OwnerLookup::Found(taskrun)) => {
            let uid = taskrun.pointer("/metadata/uid").and_then(Value::as_str);
            if wanted.uid.is_some() && wanted.uid.as_deref() != uid {
                warn(format!(
                    "bookend: TaskRun {}/{} is not the one this Pod was made for (uid differs); not checked",
                    wanted.namespace, wanted.name
                ))
            } else {
                match engine::pod::check_pod(pod, &taskrun, set, lookup) {
                    Ok(warnings) => Answer {
                        warnings,
                        ..Answer::allow()
                    },
                    Err(denial) => Answer::deny(denial.message),
                }
            }
        }
        (Some(wanted), OwnerLookup::NotFound) => warn(format!(
            "bookend: TaskRun {}/{} does not exist; the Pod is not a TaskRun's and was not checked",
            wanted.namespace, wanted.name
        )),
        (Some(_), OwnerLookup::Unavailable) => warn(
            "bookend: running with --source files, bookend cannot read TaskRuns; TaskRun Pods are not checked"
                .to_owned(),
        ),
        (Some(wanted), OwnerLookup::Failed(reason)) => Answer::deny(format!(
            "bookend: cannot read TaskRun {}/{} to check that its Pod carries the steps its policies require ({reason}); the Pod backstop fails closed: create the TaskRun again when the API server answers",
            wanted.namespace, wanted.name
        )),
    };
    answered(&api_version, &request.uid, decision, summary)
}

fn warn(warning: String) -> Answer {
    Answer {
        warnings: vec![warning],
        ..Answer::allow()
    }
}
