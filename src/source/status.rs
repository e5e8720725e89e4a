//! The policies' `status` and their Events (`--source kubernetes`): after every rebuild of the
//! policy set, each policy object gets a `Ready` condition (Loaded, Invalid or Conflict), the
//! generation it describes and the steps and volumes it injects now.
//!
//! Several replicas write without flapping: every replica computes the same status from the same
//! objects (a pure function of the set), applies it with server-side apply under one field
//! manager (`bookend`), keeps `lastTransitionTime` from the stored condition while `status` does
//! not change, and writes only when the stored status differs. Writes run in their own task, off
//! the rebuild loop and far from the request path.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::{Timestamp, Unit};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::policy::api::{API_VERSION, PolicyCondition, StepPolicyStatus};
use crate::policy::load::LoadedSet;
use crate::policy::{Issue, IssueKind, Mode, Support};

/// The field manager of every status write.
pub const FIELD_MANAGER: &str = "bookend";

/// The condition type.
pub const READY: &str = "Ready";

/// Where a policy stands after a rebuild.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// In the active set.
    Loaded {
        mode: Mode,
        pre_steps: Vec<String>,
        post_steps: Vec<String>,
        volumes: Vec<String>,
        /// How the cluster's Tekton changes what it does (`postStepsRunFallback: OnSuccess`).
        degraded: Option<String>,
    },
    /// In the set, but the cluster's Tekton cannot run it: the TaskRuns it matches are refused
    /// (the message names the field, the Tekton version or the flag to set).
    TektonUnsupported(String),
    /// Left out: it breaks a rule of its own (the message names the field).
    Invalid(String),
    /// Left out: a policy with precedence uses one of its names (the message names it).
    Conflict(String),
}

impl State {
    fn reason(&self) -> &'static str {
        match self {
            Self::Loaded { .. } => "Loaded",
            Self::TektonUnsupported(_) => "TektonUnsupported",
            Self::Invalid(_) => "Invalid",
            Self::Conflict(_) => "Conflict",
        }
    }

    fn message(&self) -> String {
        match self {
            Self::Loaded {
                mode,
                pre_steps,
                post_steps,
                volumes,
                degraded,
            } => {
                let mut parts = Vec::new();
                for (what, names) in [
                    ("pre-steps", pre_steps),
                    ("post-steps", post_steps),
                    ("volumes", volumes),
                ] {
                    if !names.is_empty() {
                        parts.push(format!("{what} {}", names.join(", ")));
                    }
                }
                let what = if parts.is_empty() {
                    "nothing".to_owned()
                } else {
                    parts.join("; ")
                };
                let active = match mode {
                    Mode::Enforce => format!("active: injects {what}"),
                    Mode::Audit => {
                        format!("active in Audit mode: reports, without injecting, {what}")
                    }
                };
                match degraded {
                    Some(how) => format!("{active}; {how}"),
                    None => active,
                }
            }
            Self::TektonUnsupported(m) => format!(
                "the cluster's Tekton cannot run this policy, so the TaskRuns it matches are refused: {m}"
            ),
            Self::Invalid(m) | Self::Conflict(m) => m.clone(),
        }
    }

    /// The Event that announces this state: type and reason.
    fn event(&self) -> (EventType, &'static str) {
        match self {
            Self::Loaded { .. } => (EventType::Normal, "PolicyLoaded"),
            Self::TektonUnsupported(_) => (EventType::Warning, "PolicyUnsupportedByTekton"),
            Self::Invalid(_) => (EventType::Warning, "InvalidPolicy"),
            Self::Conflict(_) => (EventType::Warning, "PolicyConflict"),
        }
    }
}

/// Every policy's state after a build, by `Kind/name` (`StepPolicy/namespace/name`).
pub fn states(loaded: &LoadedSet) -> HashMap<String, State> {
    let mut out: HashMap<String, State> = HashMap::new();
    for policy in loaded.set.policies() {
        if let Some(problem) = policy.tekton.problem() {
            out.insert(policy.id.to_string(), State::TektonUnsupported(problem));
            continue;
        }
        out.insert(
            policy.id.to_string(),
            State::Loaded {
                mode: policy.spec.mode,
                pre_steps: policy
                    .spec
                    .pre_steps
                    .iter()
                    .map(|s| s.name.clone())
                    .collect(),
                post_steps: policy
                    .spec
                    .post_steps
                    .iter()
                    .map(|s| s.name.clone())
                    .collect(),
                volumes: policy.spec.volumes.iter().map(|v| v.name.clone()).collect(),
                degraded: matches!(policy.tekton, Support::Degraded(_))
                    .then(|| policy.tekton.to_string()),
            },
        );
    }
    let notes = event_notes(&loaded.issues);
    for issue in &loaded.issues {
        let Some(note) = notes.get(&issue.policy) else {
            continue;
        };
        let state = match issue.kind {
            IssueKind::Invalid => State::Invalid(note.clone()),
            IssueKind::Conflict => State::Conflict(note.clone()),
        };
        out.entry(issue.policy.clone()).or_insert(state);
    }
    out
}

/// The status a policy at `generation` in `state` should have. `current` is the stored status:
/// its `lastTransitionTime` is kept while the condition's `status` stays the same, so replicas
/// computing the same state write the same object.
pub fn desired(
    state: &State,
    generation: Option<i64>,
    current: Option<&StepPolicyStatus>,
    now: &str,
) -> StepPolicyStatus {
    let ready = matches!(state, State::Loaded { .. });
    let status = if ready { "True" } else { "False" };
    let since = current
        .and_then(|c| c.conditions.iter().find(|c| c.type_ == READY))
        .filter(|c| c.status == status)
        .map_or_else(|| now.to_owned(), |c| c.last_transition_time.clone());
    let (pre_steps, post_steps, volumes) = match state {
        State::Loaded {
            pre_steps,
            post_steps,
            volumes,
            ..
        } => (pre_steps.clone(), post_steps.clone(), volumes.clone()),
        _ => Default::default(),
    };
    StepPolicyStatus {
        conditions: vec![PolicyCondition {
            type_: READY.to_owned(),
            status: status.to_owned(),
            reason: state.reason().to_owned(),
            message: state.message(),
            observed_generation: generation,
            last_transition_time: since,
        }],
        observed_generation: generation,
        pre_steps,
        post_steps,
        volumes,
        // Written by the verification count under a field manager of its own.
        verification: None,
    }
}

/// The API server's limit on an Event's note, in bytes.
pub const NOTE_LIMIT: usize = 1024;

/// `text` cut to at most `limit` bytes (on a character boundary), ending in `...` when cut.
pub fn truncate(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut cut = limit.saturating_sub(3);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str("...");
    text
}

/// Now, to the second, as the API server writes times.
fn now() -> String {
    Timestamp::now()
        .round(Unit::Second)
        .unwrap_or_else(|_| Timestamp::now())
        .to_string()
}

/// One policy object and where it stands, as of one rebuild.
#[derive(Clone, Debug)]
pub struct Target {
    /// `Kind/name` or `StepPolicy/namespace/name`.
    pub key: String,
    pub resource: ApiResource,
    pub name: String,
    pub namespace: Option<String>,
    pub generation: Option<i64>,
    pub state: State,
}

/// The status writer: [`Writer::publish`] hands it the targets of a rebuild (the latest wins,
/// nothing queues up); its task writes what changed.
pub struct Writer {
    tx: watch::Sender<Arc<Vec<Target>>>,
}

impl Writer {
    /// Starts the writing task. `stores` are the reflector caches of both policy kinds, read
    /// for the stored status just before each write; Events name `reporter`.
    pub fn start(
        client: Client,
        stores: [Store<DynamicObject>; 2],
        reporter: Reporter,
        metrics: Metrics,
    ) -> Self {
        let (tx, mut rx) = watch::channel(Arc::new(Vec::<Target>::new()));
        tokio::spawn(async move {
            // What this replica last announced per policy: (reason, message, generation).
            let mut announced: HashMap<String, (String, String, Option<i64>)> = HashMap::new();
            while rx.changed().await.is_ok() {
                let targets = rx.borrow_and_update().clone();
                for target in targets.iter() {
                    write_one(
                        &client,
                        &stores,
                        &reporter,
                        &metrics,
                        &mut announced,
                        target,
                    )
                    .await;
                }
                announced.retain(|key, _| targets.iter().any(|t| &t.key == key));
            }
        });
        Self { tx }
    }

    /// The targets of the latest rebuild.
    pub fn publish(&self, targets: Vec<Target>) {
        let _ = self.tx.send(Arc::new(targets));
    }
}

async fn write_one(
    client: &Client,
    stores: &[Store<DynamicObject>; 2],
    reporter: &Reporter,
    metrics: &Metrics,
    announced: &mut HashMap<String, (String, String, Option<i64>)>,
    target: &Target,
) {
    let mut key = ObjectRef::new_with(&target.name, target.resource.clone());
    if let Some(ns) = &target.namespace {
        key = key.within(ns);
    }
    let Some(object) = stores.iter().find_map(|s| s.get(&key)) else {
        return;
    };
    // Edited since the rebuild: the next rebuild describes the new generation.
    if object.metadata.generation != target.generation {
        return;
    }
    // `verification` is the verification count's (`crate::verdict_counts`), not this
    // writer's: left out of the comparison and of the apply.
    let current: Option<StepPolicyStatus> = object
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .map(|status: StepPolicyStatus| StepPolicyStatus {
            verification: None,
            ..status
        });
    let desired = desired(&target.state, target.generation, current.as_ref(), &now());
    if current.as_ref() == Some(&desired) {
        return;
    }
    let condition = &desired.conditions[0];
    let changed = current
        .as_ref()
        .and_then(|c| c.conditions.iter().find(|c| c.type_ == READY))
        .is_none_or(|c| {
            c.reason != condition.reason
                || c.message != condition.message
                || c.observed_generation != condition.observed_generation
        });
    let announcement = (
        condition.reason.clone(),
        condition.message.clone(),
        target.generation,
    );
    if changed && announced.get(&target.key) != Some(&announcement) {
        let (type_, reason) = target.state.event();
        let note = match target.generation {
            Some(g) => format!("generation {g}: {}", condition.message),
            None => condition.message.clone(),
        };
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(truncate(note, NOTE_LIMIT)),
            action: "Load".to_owned(),
            secondary: None,
        };
        // A Recorder of its own: kube's Recorder folds repeats of a reason on one object into a
        // series that keeps the first note, and each transition (another generation, another
        // problem) must say what it is.
        let recorder = Recorder::new(client.clone(), reporter.clone());
        match recorder
            .publish(&event, &object.object_ref(&target.resource))
            .await
        {
            Ok(()) => {
                metrics.event("policy", true);
                announced.insert(target.key.clone(), announcement);
            }
            Err(error) => {
                metrics.event("policy", false);
                tracing::warn!(%error, policy = %target.key, "cannot post the policy's Event");
            }
        }
    }
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &target.resource),
        None => Api::all_with(client.clone(), &target.resource),
    };
    let mut metadata = json!({"name": target.name});
    if let Some(ns) = &target.namespace {
        metadata["namespace"] = json!(ns);
    }
    let apply = json!({
        "apiVersion": API_VERSION,
        "kind": target.resource.kind,
        "metadata": metadata,
        "status": desired,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match api
        .patch_status(&target.name, &params, &Patch::Apply(&apply))
        .await
    {
        Ok(_) => {
            metrics.status_write(true);
            tracing::debug!(policy = %target.key, reason = %condition.reason, "status written");
        }
        Err(error) => {
            metrics.status_write(false);
            tracing::warn!(%error, policy = %target.key, "cannot write the policy's status");
        }
    }
}

/// Groups issues by the policy they belong to (`Kind/name` or `StepPolicy/ns/name`), as the
/// note of the Event bookend posts on it.
pub fn event_notes(issues: &[Issue]) -> HashMap<String, String> {
    let mut notes: HashMap<String, String> = HashMap::new();
    for issue in issues {
        let line = format!("{}: {}", issue.path, issue.message);
        notes
            .entry(issue.policy.clone())
            .and_modify(|n| {
                n.push_str("; ");
                n.push_str(&line);
            })
            .or_insert(line);
    }
    for note in notes.values_mut() {
        if note.len() > 1000 {
            let mut cut = 997;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str("...");
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Settings;
    use crate::policy::load::policy_set_from_objects;
    use serde_json::Value;

    fn policy(kind: &str, name: &str, created: &str, spec: Value) -> Value {
        let mut metadata = json!({"name": name, "creationTimestamp": created, "generation": 3});
        if kind == "StepPolicy" {
            metadata["namespace"] = json!("team-a");
        }
        json!({"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec})
    }

    fn loaded() -> LoadedSet {
        let objects = vec![
            policy(
                "ClusterStepPolicy",
                "org",
                "2024-01-01T00:00:00Z",
                json!({"preSteps": [{"name": "bookend-org", "image": "alpine"}],
                       "volumes": [{"name": "bookend-cache", "emptyDir": {}}]}),
            ),
            policy(
                "ClusterStepPolicy",
                "audit",
                "2024-01-01T00:00:00Z",
                json!({"mode": "Audit", "postSteps": [{"name": "bookend-audit", "image": "alpine"}]}),
            ),
            policy(
                "ClusterStepPolicy",
                "bad",
                "2024-01-01T00:00:00Z",
                json!({"preSteps": [{"name": "no-prefix", "image": "alpine"}]}),
            ),
            policy(
                "StepPolicy",
                "team",
                "2023-01-01T00:00:00Z",
                json!({"postSteps": [{"name": "bookend-org", "image": "alpine"}]}),
            ),
        ];
        policy_set_from_objects("kubernetes", &objects, Settings::default())
    }

    #[test]
    fn every_policy_gets_its_state() {
        let states = states(&loaded());
        assert_eq!(states.len(), 4);
        assert_eq!(
            states["ClusterStepPolicy/org"],
            State::Loaded {
                mode: Mode::Enforce,
                pre_steps: vec!["bookend-org".into()],
                post_steps: vec![],
                volumes: vec!["bookend-cache".into()],
                degraded: None,
            }
        );
        assert_eq!(
            states["ClusterStepPolicy/org"].message(),
            "active: injects pre-steps bookend-org; volumes bookend-cache"
        );
        assert_eq!(
            states["ClusterStepPolicy/audit"].message(),
            "active in Audit mode: reports, without injecting, post-steps bookend-audit"
        );
        let State::Invalid(why) = &states["ClusterStepPolicy/bad"] else {
            panic!("{:?}", states["ClusterStepPolicy/bad"]);
        };
        assert!(
            why.starts_with("spec.preSteps[0].name: step name \"no-prefix\""),
            "{why}"
        );
        // Older, but a StepPolicy never displaces a ClusterStepPolicy: the message names the org's.
        let State::Conflict(why) = &states["StepPolicy/team-a/team"] else {
            panic!("{:?}", states["StepPolicy/team-a/team"]);
        };
        assert!(
            why.contains("already used by ClusterStepPolicy/org"),
            "{why}"
        );
    }

    #[test]
    fn status_keeps_its_transition_time_until_ready_changes() {
        let states = states(&loaded());
        let org = &states["ClusterStepPolicy/org"];
        let first = desired(org, Some(3), None, "2024-05-01T10:00:00Z");
        assert_eq!(first.observed_generation, Some(3));
        assert_eq!(first.pre_steps, ["bookend-org"]);
        assert_eq!(first.volumes, ["bookend-cache"]);
        let c = &first.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Ready", "True", "Loaded")
        );
        assert_eq!(c.observed_generation, Some(3));
        // Recomputed later (another replica, another rebuild): the same object, so no write.
        let again = desired(org, Some(3), Some(&first), "2024-05-01T11:00:00Z");
        assert_eq!(again, first);
        // A new generation: new observedGeneration, same transition time (still Ready).
        let edited = desired(org, Some(4), Some(&first), "2024-05-01T12:00:00Z");
        assert_eq!(edited.conditions[0].observed_generation, Some(4));
        assert_eq!(
            edited.conditions[0].last_transition_time,
            "2024-05-01T10:00:00Z"
        );
        // Ready turns False: a new transition time, and the policy contributes nothing.
        let bad = &states["ClusterStepPolicy/bad"];
        let broken = desired(bad, Some(5), Some(&edited), "2024-05-01T13:00:00Z");
        let c = &broken.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Invalid"));
        assert_eq!(c.last_transition_time, "2024-05-01T13:00:00Z");
        assert!(broken.pre_steps.is_empty() && broken.volumes.is_empty());
    }

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short".into(), 10), "short");
        let cut = truncate("é".repeat(600), NOTE_LIMIT);
        assert!(
            cut.len() <= NOTE_LIMIT && cut.ends_with("..."),
            "{}",
            cut.len()
        );
    }

    #[test]
    fn the_status_round_trips_as_the_api_server_stores_it() {
        let states = states(&loaded());
        let status = desired(&states["StepPolicy/team-a/team"], Some(1), None, &now());
        let value = serde_json::to_value(&status).unwrap();
        assert!(
            value.get("preSteps").is_none(),
            "empty lists are left out: {value}"
        );
        let time = value["conditions"][0]["lastTransitionTime"]
            .as_str()
            .unwrap();
        assert!(
            time.len() == 20 && time.ends_with('Z'),
            "RFC 3339 to the second, as stored: {time}"
        );
        let back: StepPolicyStatus = serde_json::from_value(value).unwrap();
        assert_eq!(back, status);
    }
}

#[cfg(test)]
mod tekton_tests {
    use super::*;
    use crate::policy::Settings;
    use crate::policy::load::policy_set_from_objects;
    use crate::tekton::cluster::{Cluster, FeatureFlags};

    /// A policy the cluster's Tekton cannot run is Ready False with reason TektonUnsupported
    /// and the flag in its message; with the fallback it is Loaded and says how it runs.
    #[test]
    fn a_policy_the_clusters_tekton_cannot_run_is_not_ready() {
        let always = |name: &str, fallback: &str| {
            json!({"apiVersion": API_VERSION, "kind": "ClusterStepPolicy",
                   "metadata": {"name": name, "generation": 1},
                   "spec": {"postStepsRun": "Always", "postStepsRunFallback": fallback,
                            "postSteps": [{"name": format!("bookend-{name}"), "image": "alpine"}]}})
        };
        let settings = |step_actions| Settings {
            tekton: Cluster {
                version: "v0.62.3".parse().unwrap(),
                flags: FeatureFlags {
                    enable_step_actions: step_actions,
                    ..FeatureFlags::default()
                },
            },
            ..Settings::default()
        };
        let objects = [always("deny", "Deny"), always("degrade", "OnSuccess")];
        let first = states(&policy_set_from_objects(
            "kubernetes",
            &objects,
            settings(None),
        ));
        let status = desired(&first["ClusterStepPolicy/deny"], Some(1), None, "now");
        let c = &status.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "TektonUnsupported")
        );
        assert!(
            c.message.contains("spec.postStepsRun: Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\""),
            "{}",
            c.message
        );
        assert!(
            status.post_steps.is_empty(),
            "nothing injected while not Ready"
        );
        assert_eq!(
            first["ClusterStepPolicy/deny"].event(),
            (EventType::Warning, "PolicyUnsupportedByTekton")
        );
        let degraded = desired(&first["ClusterStepPolicy/degrade"], Some(1), None, "now");
        let c = &degraded.conditions[0];
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Loaded"));
        assert!(c.message.contains("runs as OnSuccess"), "{}", c.message);
        // With the flag set both are simply loaded.
        let flagged = states(&policy_set_from_objects(
            "kubernetes",
            &objects,
            settings(Some(true)),
        ));
        for state in flagged.values() {
            assert!(
                matches!(state, State::Loaded { degraded: None, .. }),
                "{state:?}"
            );
        }
    }
}
