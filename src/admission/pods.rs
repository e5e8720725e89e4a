//! `POST /validate-pods`: Pod CREATEs, UPDATEs and `pods/ephemeralcontainers` UPDATEs of
//! TaskRuns, and of Pods Tekton's controller would adopt as one by name (the webhook's
//! matchConditions send only Pods labelled `tekton.dev/taskRun`, or named `<taskrun>-pod`,
//! `-pod-retry<N>` and labelled `app.kubernetes.io/managed-by`).
//! Answering a CREATE takes the owning TaskRun as the API server has it, which the server
//! fetches between [`read`] and [`answer`]; both halves are pure.

use serde_json::Value;

use super::wire::{ObjectIn, RequestIn};
use super::{Answer, Endpoint, Parsed, Reply, Route, Summary, answered, bad_request, parse};
use crate::engine::{self, Lookup};
use crate::policy::PolicySet;

/// Label Tekton puts on a TaskRun's Pod: the TaskRun's name.
pub const TASKRUN_LABEL: &str = "tekton.dev/taskRun";

/// A Pod review, read: what to fetch before it can be answered.
pub struct PodReview {
    api_version: String,
    request: RequestIn,
    summary: Summary,
    owner: Option<Owner>,
}

/// The TaskRun a Pod belongs to: see [`owner_of`].
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

/// What the Pod backstop does with a Pod that lacks steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodBackstop {
    /// Refuse it (Tekton fails the TaskRun with bookend's message).
    #[default]
    Enforce,
    /// Admit it with a warning and a log line: for rolling the backstop out.
    Warn,
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
    Malformed(Box<Reply>),
}

/// Reads a Pod review.
pub fn read(body: &[u8]) -> Read {
    // No controller user: it matters only for the dry-run Task CREATEs of `/mutate`.
    let Parsed {
        api_version,
        request,
        summary,
        route,
    } = match parse(Endpoint::ValidatePods, body, "") {
        Ok(parsed) => parsed,
        Err(reply) => return Read::Malformed(reply),
    };
    let owner = match (route, &request.object) {
        (Route::Pod, Some(ObjectIn(pod))) if request.operation == "CREATE" => {
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

/// The TaskRun a Pod was made for: its controller ownerReference of kind TaskRun, which Tekton's
/// pod builder writes from the TaskRun itself (`NewControllerRef`, every supported version);
/// else, for a Pod without one, the `tekton.dev/taskRun` label, by name only. Labels never
/// give a uid: Tekton v0.62 copies the TaskRun's labels, its author's included, to the Pod.
fn owner_of(pod: &Value, summary: &Summary) -> Option<Owner> {
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| summary.namespace.clone());
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    if let Some(taskrun) = crate::engine::pod::taskrun_controller(pod) {
        return Some(Owner {
            namespace,
            name: text(taskrun, "name")?,
            uid: text(taskrun, "uid"),
        });
    }
    let labels = pod.get("metadata")?.get("labels")?;
    Some(Owner {
        namespace,
        name: text(labels, TASKRUN_LABEL)?,
        uid: None,
    })
}

/// Answers a Pod review once the owning TaskRun was looked up.
pub fn answer(
    review: Box<PodReview>,
    owner: OwnerLookup,
    mode: PodBackstop,
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
    let controller = &set.settings().tekton_controller;
    let user = request.user_info.username.as_str();
    let answer = match (wanted, owner) {
        // An UPDATE: judged against the Pod before it, without the TaskRun.
        (None, _) if request.operation == "UPDATE" => {
            let old = request.old_object.as_ref().map(|o| &o.0);
            match engine::pod::check_pod_update(
                old.unwrap_or(&Value::Null),
                pod,
                request.sub_resource.as_deref().unwrap_or(""),
                user == controller,
                set.settings(),
            ) {
                Ok(()) => Answer::allow(),
                Err(denial) => Answer::deny(denial.message),
            }
        }
        // Not a TaskRun's Pod yet, but Tekton's controller would adopt it as one by its name
        // (and the webhook's matchCondition sends only such Pods and TaskRuns' Pods).
        (None, _) if user != controller && engine::pod::tekton_would_adopt(pod) => {
            Answer::deny(format!(
                "bookend: only Tekton's controller ({controller}) creates a Pod named as a TaskRun's Pod (<taskrun>-pod, -pod-retry<N>) with the label {}: Tekton's controller would adopt this Pod as that TaskRun's, unchecked, when its own meets AlreadyExists; this one is created by {user:?}: rename the Pod or remove the label",
                engine::pod::MANAGED_BY_LABEL
            ))
        }
        (None, _) => Answer::allow(),
        // Tekton's controller creates a TaskRun's Pods; a Pod labelled as a TaskRun's by anyone
        // else would be adopted by the controller (a TaskRun created pending) and run in its
        // place.
        (Some(wanted), _) if user != controller => Answer::deny(format!(
            "bookend: only Tekton's controller ({controller}) creates the Pods of a TaskRun; this Pod is TaskRun {}'s (its tekton.dev/taskRun label or TaskRun ownerReference) but is created by {user:?}: remove the label and the ownerReference, or let Tekton create the TaskRun's Pod",
            wanted.name
        )),
        (Some(wanted), OwnerLookup::Found(taskrun)) => {
            let uid = taskrun.pointer("/metadata/uid").and_then(Value::as_str);
            if wanted.uid.is_some() && wanted.uid.as_deref() != uid {
                // The TaskRun it was made for is gone and another took its name, whose
                // controller would adopt this Pod by name: it is no one's to run.
                Answer::deny(format!(
                    "bookend: this Pod's owner is a TaskRun {}/{} that no longer exists (uid {}; the TaskRun of that name now is {}); it is not run: Tekton creates the new TaskRun's Pod",
                    wanted.namespace,
                    wanted.name,
                    wanted.uid.as_deref().unwrap_or_default(),
                    uid.unwrap_or("unknown")
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
    let answer = match (mode, answer.message) {
        (PodBackstop::Warn, Some(refusal)) => {
            tracing::warn!(%refusal, "pod backstop (warn mode): would refuse");
            warn(format!(
                "bookend (pod backstop in warn mode) would refuse this Pod: {refusal}"
            ))
        }
        (_, message) => Answer { message, ..answer },
    };
    answered(&api_version, &request.uid, answer, summary)
}

fn warn(warning: String) -> Answer {
    Answer {
        warnings: vec![warning],
        ..Answer::allow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::engine::Outcome;
    use crate::policy::Settings;
    use crate::policy::load::policy_set_from_yaml;
    use serde_json::json;

    fn set() -> PolicySet {
        policy_set_from_yaml(
            "t.yaml",
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: creds}\nspec:\n  preSteps: [{name: bookend-creds, image: alpine}]\n",
            Settings::default(),
        )
        .set
    }

    /// A review of the Pod Tekton's controller creates; a TaskRun's (labelled so) has the
    /// controller ownerReference Tekton writes.
    fn pod_review(labels: Value, containers: &[&str]) -> Vec<u8> {
        let owners = match labels.get(TASKRUN_LABEL) {
            Some(_) => json!([{"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "name": "run-1",
                               "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}]),
            None => json!([]),
        };
        let containers: Vec<Value> = containers
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.strip_prefix("step-").unwrap_or(c);
                let step = if name == "bookend-creds" {
                    json!({"name": name, "image": "alpine"})
                } else {
                    json!({"name": name, "image": "golang", "command": ["go", "build"]})
                };
                crate::engine::pod::tests::tekton_container(&step, i)
            })
            .collect();
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "namespace": "team-a",
                        "userInfo": {"username": crate::policy::DEFAULT_TEKTON_CONTROLLER},
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "object": {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "p", "labels": labels, "ownerReferences": owners},
                                   "spec": {"containers": containers}}}}))
        .unwrap()
    }

    fn taskrun(uid: &str) -> Value {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
               "metadata": {"name": "run-1", "namespace": "team-a", "uid": uid},
               "spec": {"taskRef": {"resolver": "git"}}})
    }

    fn labels() -> Value {
        json!({"tekton.dev/taskRun": "run-1", "tekton.dev/taskRunUID": "uid-1"})
    }

    /// Reads `body`, expects an owner, answers with `owner`.
    fn answer_with(body: &[u8], owner: OwnerLookup, mode: PodBackstop) -> Value {
        let Read::Review(review) = read(body) else {
            panic!("a readable review")
        };
        assert_eq!(
            review.owner(),
            Some(&Owner {
                namespace: "team-a".into(),
                name: "run-1".into(),
                uid: Some("uid-1".into())
            })
        );
        let reply = answer(review, owner, mode, &set(), &Catalog::default());
        assert!(reply.answered());
        serde_json::from_slice::<Value>(&reply.body).unwrap()["response"].clone()
    }

    #[test]
    fn a_pod_without_its_steps_is_refused_and_warn_mode_admits_it() {
        let bare = pod_review(labels(), &["step-clone"]);
        let r = answer_with(
            &bare,
            OwnerLookup::Found(taskrun("uid-1")),
            PodBackstop::Enforce,
        );
        assert_eq!(r["allowed"], false, "{r}");
        assert_eq!(r["status"]["code"], 400);
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("lacks the step(s) bookend-creds (ClusterStepPolicy/creds)"),
            "{r}"
        );
        let r = answer_with(
            &bare,
            OwnerLookup::Found(taskrun("uid-1")),
            PodBackstop::Warn,
        );
        assert_eq!(r["allowed"], true, "{r}");
        assert!(
            r["warnings"][0].as_str().unwrap().contains("would refuse"),
            "{r}"
        );
        let whole = pod_review(labels(), &["step-bookend-creds", "step-clone"]);
        let r = answer_with(
            &whole,
            OwnerLookup::Found(taskrun("uid-1")),
            PodBackstop::Enforce,
        );
        assert_eq!(r["allowed"], true, "{r}");
    }

    #[test]
    fn what_the_owner_lookup_found_decides_the_rest() {
        let bare = pod_review(labels(), &["step-clone"]);
        // Fail closed when the API server cannot be asked.
        let r = answer_with(
            &bare,
            OwnerLookup::Failed("timeout".into()),
            PodBackstop::Enforce,
        );
        assert_eq!(r["allowed"], false);
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("fails closed")
        );
        // The TaskRun it was made for is gone, another took its name: refused (that one's
        // controller would adopt the Pod by name).
        let r = answer_with(
            &bare,
            OwnerLookup::Found(taskrun("uid-2")),
            PodBackstop::Enforce,
        );
        refused_with(
            &r,
            "no longer exists (uid uid-1; the TaskRun of that name now is uid-2)",
        );
        // No such TaskRun, files mode: admitted, with a warning.
        for owner in [OwnerLookup::NotFound, OwnerLookup::Unavailable] {
            let r = answer_with(&bare, owner, PodBackstop::Enforce);
            assert_eq!(r["allowed"], true, "{r}");
            assert!(r["warnings"][0].is_string(), "{r}");
        }
    }

    #[test]
    fn only_tekton_creates_a_taskruns_pod() {
        let mut body: Value =
            serde_json::from_slice(&pod_review(labels(), &["step-bookend-creds", "step-clone"]))
                .unwrap();
        body["request"]["userInfo"]["username"] = json!("system:serviceaccount:team-a:default");
        let r = answer_with(
            &serde_json::to_vec(&body).unwrap(),
            OwnerLookup::Found(taskrun("uid-1")),
            PodBackstop::Enforce,
        );
        refused_with(&r, "only Tekton's controller");
    }

    /// `r` refuses, its message saying `text`.
    fn refused_with(r: &Value, text: &str) {
        assert_eq!(r["allowed"], false, "{r}");
        let message = r["status"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(text), "{text}: {r}");
    }

    fn update(old: Value, new: Value, subresource: &str, user: &str) -> Value {
        let body = serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-2", "operation": "UPDATE", "namespace": "team-a", "subResource": subresource,
                        "userInfo": {"username": user},
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "object": new, "oldObject": old}})).unwrap();
        serde_json::from_slice::<Value>(&answer_unowned(&body).body).unwrap()["response"].clone()
    }

    /// Reads `body`, which names no TaskRun to fetch (an UPDATE, a Pod that is no TaskRun's),
    /// and answers it.
    fn answer_unowned(body: &[u8]) -> Reply {
        let Read::Review(review) = read(body) else {
            panic!("a readable review")
        };
        assert!(review.owner().is_none(), "no TaskRun to fetch");
        answer(
            review,
            OwnerLookup::NotFound,
            PodBackstop::Enforce,
            &set(),
            &Catalog::default(),
        )
    }

    #[test]
    fn updates_that_change_org_containers_or_adopt_pods_are_refused() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": labels()},
            "spec": {"containers": [{"name": "step-bookend-creds", "image": "alpine"}, {"name": "step-build", "image": "golang"}],
                     "initContainers": [{"name": "place-scripts", "image": "shell"}]}});
        let tenant = "system:serviceaccount:team-a:default";
        // Tekton's own annotation patch, a tenant's change to its own step: fine.
        let mut annotated = pod.clone();
        annotated["metadata"]["annotations"] = json!({"tekton.dev/ready": "READY"});
        assert_eq!(update(pod.clone(), annotated, "", tenant)["allowed"], true);
        let mut own = pod.clone();
        own["spec"]["containers"][1]["image"] = json!("golang:2");
        assert_eq!(update(pod.clone(), own, "", tenant)["allowed"], true);
        // An org container's image, Tekton's script writer's image: refused.
        for list in ["containers", "initContainers"] {
            let mut swapped = pod.clone();
            swapped["spec"][list][0]["image"] = json!("evil");
            let r = update(
                pod.clone(),
                swapped,
                "",
                crate::policy::DEFAULT_TEKTON_CONTROLLER,
            );
            assert_eq!(r["allowed"], false, "{list}: {r}");
        }
        // Labelling a Pod as a TaskRun's: Tekton's controller only.
        let mut unlabelled = pod.clone();
        unlabelled["metadata"]["labels"] = json!({});
        let r = update(unlabelled, pod.clone(), "", tenant);
        assert_eq!(r["allowed"], false, "{r}");
        // Ephemeral containers: not into an org container's processes, not onto its volumes.
        let with = |e: Value| {
            let mut p = pod.clone();
            p["spec"]["ephemeralContainers"] = json!([e]);
            p
        };
        let r = update(
            pod.clone(),
            with(
                json!({"name": "debug", "image": "busybox", "targetContainerName": "step-bookend-creds"}),
            ),
            "ephemeralcontainers",
            tenant,
        );
        assert_eq!(r["allowed"], false, "{r}");
        let r = update(
            pod.clone(),
            with(
                json!({"name": "debug", "image": "busybox", "volumeMounts": [{"name": "tekton-internal-scripts", "mountPath": "/s"}]}),
            ),
            "ephemeralcontainers",
            tenant,
        );
        assert_eq!(r["allowed"], false, "{r}");
        let r = update(
            pod.clone(),
            with(json!({"name": "debug", "image": "busybox", "targetContainerName": "step-build"})),
            "ephemeralcontainers",
            tenant,
        );
        assert_eq!(r["allowed"], true, "{r}");
    }

    #[test]
    fn a_pod_tekton_would_adopt_by_name_is_the_controllers_to_create_or_label() {
        for name in [
            "run-1-pod",
            "run-1-pod-retry2",
            "a-very-long-run-0123456789abcdef-pod",
        ] {
            assert!(crate::engine::pod::is_taskrun_pod_name(name), "{name}");
        }
        for name in [
            "pod",
            "run-1",
            "run-1-podcast",
            "run-1-pod-retry",
            "run-1-pod-retryx",
            "run-1-pod-",
        ] {
            assert!(!crate::engine::pod::is_taskrun_pod_name(name), "{name}");
        }
        let review = |user: &str, name: &str, labels: Value| {
            let body = serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u-3", "operation": "CREATE", "namespace": "team-a",
                            "userInfo": {"username": user},
                            "kind": {"group": "", "version": "v1", "kind": "Pod"},
                            "object": {"apiVersion": "v1", "kind": "Pod",
                                       "metadata": {"name": name, "labels": labels},
                                       "spec": {"containers": [{"name": "step-build", "image": "busybox"}]}}}}))
            .unwrap();
            serde_json::from_slice::<Value>(&answer_unowned(&body).body).unwrap()["response"]
                .clone()
        };
        let tenant = "system:serviceaccount:team-a:default";
        let managed = json!({"app.kubernetes.io/managed-by": "tekton-pipelines"});
        let r = review(tenant, "run-1-pod", managed.clone());
        assert_eq!(r["allowed"], false, "{r}");
        let message = r["status"]["message"].as_str().unwrap();
        assert!(
            message.contains("adopt") && message.contains("rename the Pod or remove the label"),
            "{r}"
        );
        // Another name, or no label Tekton's informer watches: Tekton never takes it.
        assert_eq!(
            review(tenant, "run-1-web", managed.clone())["allowed"],
            true
        );
        assert_eq!(
            review(tenant, "run-1-pod", json!({"app": "x"}))["allowed"],
            true
        );
        // Tekton's controller: its own.
        let controller = crate::policy::DEFAULT_TEKTON_CONTROLLER;
        assert_eq!(
            review(controller, "run-1-pod", managed.clone())["allowed"],
            true
        );
        // Labelling such a Pod afterwards puts it in the informer: the controller's only.
        let bare = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "run-1-pod"},
                          "spec": {"containers": [{"name": "step-build", "image": "busybox"}]}});
        let mut labelled = bare.clone();
        labelled["metadata"]["labels"] = managed;
        let r = update(bare.clone(), labelled.clone(), "", tenant);
        assert_eq!(r["allowed"], false, "{r}");
        assert_eq!(
            update(bare, labelled.clone(), "", controller)["allowed"],
            true
        );
        assert_eq!(
            update(labelled.clone(), labelled, "", tenant)["allowed"],
            true
        );
    }

    #[test]
    fn pods_that_are_not_a_taskruns_need_nothing() {
        let reply = answer_unowned(&pod_review(json!({"app": "x"}), &["main"]));
        assert_eq!(reply.summary.outcome, Some(Outcome::Admitted));
        assert!(matches!(read(b"not json"), Read::Malformed(r) if !r.answered()));
    }
}

#[cfg(test)]
#[path = "pods_breaker34.rs"]
mod breaker34;
