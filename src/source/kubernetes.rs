//! `--source kubernetes`: kube-runtime reflectors keep the policies, namespaces, Tasks and
//! StepActions in memory, so answering a review never calls the API server. Policy changes
//! rebuild the [`PolicySet`]; an invalid policy is left out with a log line, a count, its
//! `status` (see [`super::status`]) and a Kubernetes Event, and never breaks the others.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tokio::sync::Notify;

use super::{PolicySource, Snapshot, TaskRunReader};
use crate::engine::{
    CONFIG_DEFAULTS_CONFIG_MAP, FEATURE_FLAGS_CONFIG_MAP, Lookup, parse_pod_template,
    refuses_inline_task_spec,
};
use crate::metrics::Metrics;
use crate::policy::api::VerificationStatus;
use crate::policy::load::policy_set_from_objects;
use crate::policy::select::Labels;
use crate::policy::{PolicyId, PolicySet, Settings};
use crate::tekton::TaskObject;
use crate::tekton::cluster::{Cluster, FeatureFlags, Version};

/// Source name used in policy issues from the API server.
pub const SOURCE: &str = "kubernetes";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `tekton.dev/v1` Task (the storage version; v1beta1 Tasks are served converted).
pub fn task_resource() -> ApiResource {
    resource("tekton.dev", "v1", "Task", "tasks")
}

/// `tekton.dev/v1beta1` StepAction (there is no v1).
pub fn step_action_resource() -> ApiResource {
    resource("tekton.dev", "v1beta1", "StepAction", "stepactions")
}

/// `tekton.dev/v1` TaskRun (the storage version).
pub fn taskrun_resource() -> ApiResource {
    resource("tekton.dev", "v1", "TaskRun", "taskruns")
}

pub fn cluster_policy_resource() -> ApiResource {
    resource(
        "bookend.dev",
        "v1alpha1",
        "ClusterStepPolicy",
        "clustersteppolicies",
    )
}

pub fn step_policy_resource() -> ApiResource {
    resource("bookend.dev", "v1alpha1", "StepPolicy", "steppolicies")
}

/// The in-memory view of the cluster that the engine reads.
#[derive(Clone)]
pub struct ClusterLookup {
    pub namespaces: Store<Namespace>,
    pub tasks: Store<DynamicObject>,
    pub step_actions: Store<DynamicObject>,
    /// Tekton's `feature-flags` ConfigMap (at most one object).
    pub feature_flags: Store<ConfigMap>,
    /// Tekton's `config-defaults` ConfigMap (at most one object).
    pub config_defaults: Store<ConfigMap>,
    /// Tekton's `pipelines-info` ConfigMap (at most one object): its version.
    pub pipelines_info: Store<ConfigMap>,
}

/// Tekton's ConfigMap with its release (`data.version`, e.g. `v0.62.3`).
pub const PIPELINES_INFO_CONFIG_MAP: &str = "pipelines-info";

/// What the cluster's Tekton can run, from its `pipelines-info` and `feature-flags`
/// ConfigMaps; what is missing or unreadable keeps `assumed`'s part (`--tekton-version`, the
/// newest by default), and each problem is returned to be logged.
pub fn tekton_cluster(
    pipelines_info: Option<&ConfigMap>,
    feature_flags: Option<&ConfigMap>,
    assumed: &Cluster,
) -> (Cluster, Vec<String>) {
    let mut cluster = assumed.clone();
    let mut problems = Vec::new();
    match pipelines_info
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get("version"))
    {
        Some(text) => match text.parse::<Version>() {
            Ok(version) => cluster.version = version,
            Err(e) => problems.push(format!("{PIPELINES_INFO_CONFIG_MAP}: {e}; assuming {}", assumed.version)),
        },
        None => problems.push(format!(
            "no version in Tekton's {PIPELINES_INFO_CONFIG_MAP} ConfigMap (not readable, or not installed yet); assuming {}",
            assumed.version
        )),
    }
    if let Some(data) = feature_flags.and_then(|cm| cm.data.as_ref()) {
        let mut flags = FeatureFlags::default();
        for (key, value) in data {
            if let Err(e) = flags.set(key, value) {
                problems.push(format!(
                    "{FEATURE_FLAGS_CONFIG_MAP}: {e}; Tekton's default assumed"
                ));
            }
        }
        cluster.flags = flags;
    }
    (cluster, problems)
}

/// Tekton's namespace: the one its controller's service account lives in
/// (`system:serviceaccount:<namespace>:<name>`).
pub fn tekton_namespace(settings: &Settings) -> &str {
    settings
        .tekton_controller
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map_or("tekton-pipelines", |(namespace, _)| namespace)
}

impl Lookup for ClusterLookup {
    fn namespace_labels(&self, namespace: &str) -> Option<Labels> {
        let ns = self.namespaces.get(&ObjectRef::new(namespace))?;
        Some(ns.labels().clone().into_iter().collect())
    }

    fn task(&self, namespace: &str, name: &str) -> Option<TaskObject> {
        let key = ObjectRef::new_with(name, task_resource()).within(namespace);
        let task = self.tasks.get(&key)?;
        let mut value = serde_json::to_value(task.as_ref()).ok()?;
        if value.get("apiVersion").is_none() {
            value["apiVersion"] = Value::String("tekton.dev/v1".to_owned());
            value["kind"] = Value::String("Task".to_owned());
        }
        TaskObject::from_object(&value)
    }

    fn step_action_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        let key = ObjectRef::new_with(name, step_action_resource()).within(namespace);
        Some(self.step_actions.get(&key).is_some())
    }

    fn step_action(&self, namespace: &str, name: &str) -> Option<Value> {
        let key = ObjectRef::new_with(name, step_action_resource()).within(namespace);
        serde_json::to_value(self.step_actions.get(&key)?.as_ref()).ok()
    }

    fn inline_task_spec_refused(&self) -> bool {
        self.feature_flags.state().iter().any(|flags| {
            flags
                .data
                .as_ref()
                .and_then(|d| d.get("disable-inline-spec"))
                .is_some_and(|v| refuses_inline_task_spec(v))
        })
    }

    fn default_pod_template(&self) -> Option<Value> {
        self.config_defaults.state().iter().find_map(|defaults| {
            defaults
                .data
                .as_ref()
                .and_then(|d| d.get("default-pod-template"))
                .and_then(|text| parse_pod_template(text))
        })
    }
}

/// What `start` hands to the server: the snapshot the rebuild task swaps, whether every
/// cache has synced once, and the client TaskRuns are read with.
pub struct KubernetesSource {
    current: Arc<ArcSwap<Snapshot>>,
    ready: Arc<AtomicBool>,
    taskruns: ApiTaskRuns,
    /// The ClusterStepPolicies and StepPolicies as watched, status included.
    cluster_policies: Store<DynamicObject>,
    step_policies: Store<DynamicObject>,
}

impl PolicySource for KubernetesSource {
    fn current(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn task_runs(&self) -> Option<&dyn TaskRunReader> {
        Some(&self.taskruns)
    }

    fn stored_verification(&self, policy: &PolicyId) -> Option<VerificationStatus> {
        stored_verification(&self.cluster_policies, &self.step_policies, policy)
    }
}

/// A policy's `status.verification` in the watched policies; `None` when the policy or its
/// status is not there or not readable.
fn stored_verification(
    cluster_policies: &Store<DynamicObject>,
    step_policies: &Store<DynamicObject>,
    policy: &PolicyId,
) -> Option<VerificationStatus> {
    let object = match policy {
        PolicyId::Cluster { name } => {
            cluster_policies.get(&ObjectRef::new_with(name, cluster_policy_resource()))
        }
        PolicyId::Namespaced { namespace, name } => {
            step_policies.get(&ObjectRef::new_with(name, step_policy_resource()).within(namespace))
        }
    }?;
    let status = object.data.get("status")?.get("verification")?;
    serde_json::from_value(status.clone()).ok()
}

/// TaskRuns read with one GET each.
struct ApiTaskRuns {
    client: Client,
}

impl TaskRunReader for ApiTaskRuns {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, String>> {
        Box::pin(async move {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &taskrun_resource());
            match api.get_opt(name).await {
                Ok(Some(taskrun)) => serde_json::to_value(taskrun)
                    .map(Some)
                    .map_err(|e| e.to_string()),
                Ok(None) => Ok(None),
                Err(error) => Err(error.to_string()),
            }
        })
    }
}

fn policy_key(object: &DynamicObject) -> String {
    match object.namespace() {
        Some(ns) => format!("StepPolicy/{ns}/{}", object.name_any()),
        None => format!("ClusterStepPolicy/{}", object.name_any()),
    }
}

/// Who posts bookend's Events: controller `bookend`, instance `$POD_NAME` (the replica).
pub fn reporter() -> Reporter {
    Reporter {
        controller: "bookend".to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

/// The user bookend acts as, as the API server authenticates it (a SelfSubjectReview, which
/// every authenticated user may create on Kubernetes 1.28 and later): the identity that alone
/// may change bookend's marks on TaskRuns. Asked, not configured, so it is right whatever
/// credential bookend runs with (service account, kubeconfig). Retried (1 s, doubling to 30 s)
/// until the API server answers with a user.
async fn learn_own_user(client: &Client) -> String {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let mut wait = Duration::from_secs(1);
    loop {
        let answer = api
            .create(
                &kube::api::PostParams::default(),
                &SelfSubjectReview::default(),
            )
            .await;
        let problem = match answer {
            Ok(review) => match review
                .status
                .and_then(|s| s.user_info)
                .and_then(|u| u.username)
                .filter(|u| !u.is_empty())
            {
                Some(user) => {
                    tracing::info!(user = %user, "bookend's own user: only it may change bookend's marks on TaskRuns");
                    return user;
                }
                None => "the review names no user".to_owned(),
            },
            Err(error) => error.to_string(),
        };
        tracing::error!(%problem, retry_in = ?wait, "cannot learn bookend's own user from the API server (a SelfSubjectReview, which every authenticated user may create on Kubernetes 1.28 and later); not ready until it can");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

/// Starts the reflectors and the policy rebuild task. Returns at once; the source turns ready
/// once every cache has synced and the first policy set is built.
pub fn start(client: Client, settings: Settings, metrics: Metrics) -> KubernetesSource {
    let notify = Arc::new(Notify::new());
    let m = &metrics;

    let namespaces = spawn_reflector::<Namespace>(
        Api::all(client.clone()),
        (),
        watcher::Config::default(),
        None,
        m.clone(),
    );
    // Waited for only briefly: bookend must start without it (a missing Role, no Tekton yet);
    // until it has synced, inlining is allowed and Tekton's own validation decides, and the
    // policies are compiled for the Tekton of `--tekton-version`. A change rebuilds the set.
    let feature_flags = spawn_reflector::<ConfigMap>(
        Api::namespaced(client.clone(), tekton_namespace(&settings)),
        (),
        watcher::Config::default().fields(&format!("metadata.name={FEATURE_FLAGS_CONFIG_MAP}")),
        Some(notify.clone()),
        m.clone(),
    );
    let pipelines_info = spawn_reflector::<ConfigMap>(
        Api::namespaced(client.clone(), tekton_namespace(&settings)),
        (),
        watcher::Config::default().fields(&format!("metadata.name={PIPELINES_INFO_CONFIG_MAP}")),
        Some(notify.clone()),
        m.clone(),
    );
    // Likewise: until it has synced, bookend knows no default pod template, and refuses
    // podTemplate fields that reach org steps whoever set them.
    let config_defaults = spawn_reflector::<ConfigMap>(
        Api::namespaced(client.clone(), tekton_namespace(&settings)),
        (),
        watcher::Config::default().fields(&format!("metadata.name={CONFIG_DEFAULTS_CONFIG_MAP}")),
        None,
        m.clone(),
    );
    let tasks = spawn_reflector(
        Api::all_with(client.clone(), &task_resource()),
        task_resource(),
        watcher::Config::default(),
        None,
        m.clone(),
    );
    let step_actions = spawn_reflector(
        Api::all_with(client.clone(), &step_action_resource()),
        step_action_resource(),
        watcher::Config::default(),
        None,
        m.clone(),
    );
    let cluster_policies = spawn_reflector(
        Api::all_with(client.clone(), &cluster_policy_resource()),
        cluster_policy_resource(),
        watcher::Config::default(),
        Some(notify.clone()),
        m.clone(),
    );
    let step_policies = spawn_reflector(
        Api::all_with(client.clone(), &step_policy_resource()),
        step_policy_resource(),
        watcher::Config::default(),
        Some(notify.clone()),
        m.clone(),
    );

    let lookup: Arc<ClusterLookup> = Arc::new(ClusterLookup {
        namespaces: namespaces.clone(),
        tasks: tasks.clone(),
        step_actions: step_actions.clone(),
        feature_flags: feature_flags.clone(),
        config_defaults,
        pipelines_info: pipelines_info.clone(),
    });
    let current = Arc::new(ArcSwap::from_pointee(Snapshot {
        set: Arc::new(PolicySet::default()),
        lookup: lookup.clone(),
    }));
    let ready = Arc::new(AtomicBool::new(false));
    let taskruns = ApiTaskRuns {
        client: client.clone(),
    };
    let reporter = reporter();
    let user_client = client.clone();
    let status = super::status::Writer::start(
        client,
        [cluster_policies.clone(), step_policies.clone()],
        reporter,
        metrics.clone(),
    );

    let watched_policies = (cluster_policies.clone(), step_policies.clone());
    let (rebuilt, now_ready) = (current.clone(), ready.clone());
    tokio::spawn(async move {
        // Not ready (no policy set) until bookend knows who it is: the marks webhook lets only
        // that user change bookend's marks. Asked again until the API server answers, so a
        // replica that starts while the API server is unreachable waits, unready, instead of
        // exiting.
        let settings = Settings {
            own_user: Some(learn_own_user(&user_client).await),
            ..settings
        };
        let synced = async {
            namespaces.wait_until_ready().await?;
            tasks.wait_until_ready().await?;
            step_actions.wait_until_ready().await?;
            cluster_policies.wait_until_ready().await?;
            step_policies.wait_until_ready().await
        };
        if synced.await.is_err() {
            tracing::error!("a cache writer stopped before it synced");
            return;
        }
        // Tekton's ConfigMaps decide which policies the cluster can run: give them a moment to
        // sync (they may never, without the Role), so the first set is compiled for the real
        // cluster rather than the assumed one.
        let tekton_synced = async {
            let _ = pipelines_info.wait_until_ready().await;
            let _ = feature_flags.wait_until_ready().await;
        };
        if tokio::time::timeout(Duration::from_secs(5), tekton_synced)
            .await
            .is_err()
        {
            tracing::warn!(
                "Tekton's pipelines-info or feature-flags ConfigMap not synced after 5s (check the Role on them); assuming {} until they are",
                settings.tekton
            );
        }
        tracing::info!("kubernetes caches synced");
        let mut built_from = None;
        let mut tekton_seen: Option<Cluster> = None;
        loop {
            let (tekton, problems) = tekton_cluster(
                pipelines_info.state().first().map(AsRef::as_ref),
                feature_flags.state().first().map(AsRef::as_ref),
                &settings.tekton,
            );
            if tekton_seen.as_ref() != Some(&tekton) {
                for problem in &problems {
                    tracing::warn!(%problem, "Tekton's configuration");
                }
                tracing::info!(
                    tekton_version = %tekton.version,
                    supported = tekton.is_supported(),
                    flags = %tekton.describe_flags(),
                    "Tekton cluster"
                );
                metrics.set_tekton_info(&tekton);
                tekton_seen = Some(tekton.clone());
            }
            let objects: Vec<Arc<DynamicObject>> = cluster_policies
                .state()
                .into_iter()
                .chain(step_policies.state())
                .collect();
            // What the set depends on: each policy's identity (a re-created policy has a new
            // uid), generation (bumped by every spec change, not by status writes or metadata
            // edits) and creation time. bookend's own status writes come back as watch events;
            // they need no rebuild.
            type Input = (String, Option<String>, Option<i64>, Option<String>);
            let mut inputs: Vec<Input> = objects
                .iter()
                .map(|o| {
                    (
                        policy_key(o),
                        o.metadata.uid.clone(),
                        o.metadata.generation,
                        o.metadata
                            .creation_timestamp
                            .as_ref()
                            .map(|t| t.0.to_string()),
                    )
                })
                .collect();
            inputs.sort();
            let inputs = (inputs, tekton.clone());
            if built_from.as_ref() == Some(&inputs) {
                notify.notified().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            built_from = Some(inputs);
            let values: Vec<Value> = objects
                .iter()
                .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
                .map(|mut v| {
                    // Store objects may lack TypeMeta; the loader wants it.
                    if v.get("kind").is_none() {
                        let kind = if v.pointer("/metadata/namespace").is_some() {
                            "StepPolicy"
                        } else {
                            "ClusterStepPolicy"
                        };
                        v["kind"] = Value::String(kind.to_owned());
                        v["apiVersion"] = Value::String(crate::policy::api::API_VERSION.to_owned());
                    }
                    v
                })
                .collect();
            let settings = Settings {
                tekton,
                ..settings.clone()
            };
            let loaded = policy_set_from_objects(SOURCE, &values, settings);
            let notes = super::status::event_notes(&loaded.issues);
            let mut states = super::status::states(&loaded);
            metrics.set_invalid_policies(notes.len());
            metrics.set_policies_loaded(loaded.set.len());
            metrics.policy_reload(true);
            for issue in &loaded.issues {
                tracing::warn!(%issue, "invalid policy left out");
            }
            tracing::info!(
                policies = loaded.set.len(),
                invalid = notes.len(),
                "policy set rebuilt"
            );
            rebuilt.store(Arc::new(Snapshot {
                set: Arc::new(loaded.set),
                lookup: lookup.clone(),
            }));
            now_ready.store(true, Ordering::Release);

            status.publish(
                objects
                    .iter()
                    .filter_map(|object| {
                        let key = policy_key(object);
                        let state = states.remove(&key)?;
                        Some(super::status::Target {
                            resource: if object.namespace().is_some() {
                                step_policy_resource()
                            } else {
                                cluster_policy_resource()
                            },
                            name: object.name_any(),
                            namespace: object.namespace(),
                            generation: object.metadata.generation,
                            key,
                            state,
                        })
                    })
                    .collect(),
            );

            notify.notified().await;
            // Coalesce a burst of changes (kubectl apply -f dir/) into one rebuild.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    KubernetesSource {
        current,
        ready,
        taskruns,
        cluster_policies: watched_policies.0,
        step_policies: watched_policies.1,
    }
}

fn spawn_reflector<K>(
    api: Api<K>,
    dyntype: K::DynamicType,
    config: watcher::Config,
    notify: Option<Arc<Notify>>,
    metrics: Metrics,
) -> Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let kind = K::kind(&dyntype).into_owned();
    let writer = reflector::store::Writer::new(dyntype);
    let reader = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher(api, config)
            .default_backoff()
            // Managed fields are large and unused: keep memory proportional to what bookend reads.
            .modify(|o| o.managed_fields_mut().clear()),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    if let Some(n) = &notify {
                        n.notify_one();
                    }
                }
                Err(error) => {
                    metrics.watch_error();
                    tracing::warn!(%error, %kind, "watch error; retrying with backoff");
                }
            }
        }
    });
    reader
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_of<K>(dyntype: K::DynamicType, objects: Vec<K>) -> Store<K>
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone,
    {
        let mut writer = reflector::store::Writer::new(dyntype);
        for o in objects {
            writer.apply_watcher_event(&watcher::Event::Apply(o));
        }
        writer.as_reader()
    }

    fn dynamic(value: Value, ar: &ApiResource) -> DynamicObject {
        let mut o: DynamicObject = serde_json::from_value(value).unwrap();
        o.types = Some(kube::api::TypeMeta {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        });
        o
    }

    #[test]
    fn the_stored_verification_is_read_from_the_watched_policy() {
        let verification = json!({"window": "24h", "observedAt": "2026-12-02T08:05:00Z",
                                   "passed": 2, "failed": 1, "skipped": 0});
        let cluster = store_of(
            cluster_policy_resource(),
            vec![dynamic(
                json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
                       "metadata": {"name": "org"}, "spec": {},
                       "status": {"verification": verification}}),
                &cluster_policy_resource(),
            )],
        );
        let namespaced = store_of(
            step_policy_resource(),
            vec![dynamic(
                json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "StepPolicy",
                       "metadata": {"name": "org", "namespace": "team-a"}, "spec": {},
                       "status": {"verification": {"window": 3}}}),
                &step_policy_resource(),
            )],
        );
        let stored = |id: PolicyId| stored_verification(&cluster, &namespaced, &id);
        let found = stored(PolicyId::Cluster { name: "org".into() }).unwrap();
        assert_eq!(
            (found.passed, found.failed, found.window.as_str()),
            (2, 1, "24h")
        );
        // Another kind's object of that name, unreadable, or absent: nothing stored.
        let namespaced_id = |ns: &str| PolicyId::Namespaced {
            namespace: ns.into(),
            name: "org".into(),
        };
        assert_eq!(stored(namespaced_id("team-a")), None);
        assert_eq!(stored(namespaced_id("team-b")), None);
        assert_eq!(
            stored(PolicyId::Cluster {
                name: "other".into()
            }),
            None
        );
    }

    fn lookup() -> ClusterLookup {
        let ns: Namespace = serde_json::from_value(
            json!({"metadata": {"name": "team-a", "labels": {"tier": "gold"}}}),
        )
        .unwrap();
        let task = dynamic(
            json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                   "metadata": {"name": "build", "namespace": "team-a", "resourceVersion": "7"},
                   "spec": {"steps": [{"name": "compile", "image": "go"}]}}),
            &task_resource(),
        );
        let signed = dynamic(
            json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
                   "metadata": {"name": "signed", "namespace": "team-a",
                                "annotations": {"tekton.dev/signature": "MEQ"}},
                   "spec": {"steps": [{"image": "go"}]}}),
            &task_resource(),
        );
        let action = dynamic(
            json!({"apiVersion": "tekton.dev/v1beta1", "kind": "StepAction",
                   "metadata": {"name": "git-clone", "namespace": "team-a"}, "spec": {}}),
            &step_action_resource(),
        );
        ClusterLookup {
            namespaces: store_of((), vec![ns]),
            tasks: store_of(task_resource(), vec![task, signed]),
            step_actions: store_of(step_action_resource(), vec![action]),
            feature_flags: store_of((), vec![]),
            config_defaults: store_of((), vec![]),
            pipelines_info: store_of((), vec![]),
        }
    }

    #[test]
    fn the_tekton_cluster_comes_from_its_config_maps() {
        let cm = |name: &str, data: Value| -> ConfigMap {
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "tekton-pipelines"}, "data": data}),
            )
            .unwrap()
        };
        let info = cm("pipelines-info", json!({"version": "v0.62.3"}));
        let flags = cm(
            "feature-flags",
            json!({"enable-step-actions": "true", "enable-api-fields": "beta"}),
        );
        let assumed = Cluster::default();
        let (c, problems) = tekton_cluster(Some(&info), None, &assumed);
        assert_eq!(c.version, Version::new(0, 62, 3));
        assert!(!c.step_actions_enabled(), "Tekton's default before v1.0");
        assert!(problems.is_empty(), "{problems:?}");
        let (c, _) = tekton_cluster(Some(&info), Some(&flags), &assumed);
        assert!(c.step_actions_enabled());
        // Nothing readable: the assumed cluster, and a problem naming the ConfigMap.
        let (c, problems) = tekton_cluster(None, None, &assumed);
        assert_eq!(c, assumed);
        assert!(problems[0].contains("pipelines-info"), "{problems:?}");
        let bad = cm("pipelines-info", json!({"version": "devel"}));
        let bad_flag = cm("feature-flags", json!({"enable-api-fields": "gamma"}));
        let (c, problems) = tekton_cluster(Some(&bad), Some(&bad_flag), &assumed);
        assert_eq!(c, assumed);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn tekton_feature_flags_in_the_cache_refuse_inlining() {
        let mut l = lookup();
        assert!(!l.inline_task_spec_refused());
        let flags: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
            "data": {"disable-inline-spec": "pipelinerun,taskrun"}}))
        .unwrap();
        l.feature_flags = store_of((), vec![flags]);
        assert!(l.inline_task_spec_refused());
        assert_eq!(tekton_namespace(&Settings::default()), "tekton-pipelines");
        let openshift = Settings {
            tekton_controller: "system:serviceaccount:openshift-pipelines:pipeline".into(),
            ..Settings::default()
        };
        assert_eq!(tekton_namespace(&openshift), "openshift-pipelines");
    }

    #[test]
    fn cache_backed_lookups() {
        let l = lookup();
        assert_eq!(
            l.namespace_labels("team-a")
                .unwrap()
                .get("tier")
                .map(String::as_str),
            Some("gold")
        );
        assert!(l.namespace_labels("team-b").is_none());
        let task = l.task("team-a", "build").unwrap();
        assert_eq!(task.resource_version.as_deref(), Some("7"));
        assert!(!task.signed);
        assert_eq!(task.spec["steps"][0]["name"], "compile");
        assert!(l.task("team-a", "signed").unwrap().signed);
        assert!(l.task("team-b", "build").is_none());
        assert_eq!(l.step_action_exists("team-a", "git-clone"), Some(true));
        assert_eq!(l.step_action_exists("team-a", "other"), Some(false));
    }

    #[test]
    fn cached_tasks_are_inlined_and_signed_ones_refused() {
        let loaded = crate::policy::load::policy_set_from_yaml(
            "t.yaml",
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: p}\nspec:\n  preSteps: [{name: bookend-p, image: alpine}]\n",
            Settings::default(),
        );
        assert!(loaded.issues.is_empty());
        let set = loaded.set;
        let l = lookup();
        let run = |task: &str| {
            let object = json!({"apiVersion": "tekton.dev/v1beta1", "kind": "TaskRun",
                "metadata": {"name": "r"}, "spec": {"taskRef": {"name": task}}});
            crate::engine::decide(
                crate::engine::Request {
                    object: &object,
                    namespace: "team-a",
                    dry_run: false,
                },
                &set,
                &l,
            )
        };
        let d = run("build");
        assert_eq!(d.outcome, crate::engine::Outcome::Mutated);
        assert_eq!(
            d.object["metadata"]["annotations"]["bookend.dev/inlined-task"],
            "build@7"
        );
        assert_eq!(d.object["spec"]["taskSpec"]["steps"][1]["name"], "compile");
        let d = run("signed");
        assert_eq!(d.outcome, crate::engine::Outcome::Denied);
        assert!(d.message.unwrap().contains("trusted-resources signature"));
    }

    #[test]
    fn invalid_policies_become_event_notes_and_valid_ones_load() {
        let objects = vec![
            json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
                   "metadata": {"name": "good"},
                   "spec": {"preSteps": [{"name": "bookend-good", "image": "alpine"}]}}),
            json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "ClusterStepPolicy",
                   "metadata": {"name": "bad"},
                   "spec": {"preSteps": [{"name": "no-prefix", "image": "alpine"}]}}),
            json!({"apiVersion": "bookend.dev/v1alpha1", "kind": "StepPolicy",
                   "metadata": {"name": "typo", "namespace": "team-a"},
                   "spec": {"mode": "Enforced"}}),
        ];
        let loaded = policy_set_from_objects(SOURCE, &objects, Settings::default());
        assert_eq!(loaded.set.len(), 1);
        let notes = crate::source::status::event_notes(&loaded.issues);
        assert_eq!(notes.len(), 2);
        assert!(
            notes["ClusterStepPolicy/bad"]
                .starts_with("spec.preSteps[0].name: step name \"no-prefix\"")
        );
        assert!(notes["StepPolicy/team-a/typo"].starts_with("spec.mode: unknown variant"));
        let long = vec![crate::policy::Issue {
            source: "k".into(),
            policy: "P".into(),
            path: "p".into(),
            message: "é".repeat(800),
            kind: crate::policy::IssueKind::Invalid,
        }];
        assert!(crate::source::status::event_notes(&long)["P"].len() <= 1003);
    }
}
