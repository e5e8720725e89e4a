//! The `bookend.dev/v1alpha1` API: `ClusterStepPolicy` and `StepPolicy`, one spec.
//!
//! The Rust types are the source of the CRDs (`bookend crds`): field docs become the OpenAPI
//! descriptions that `kubectl explain` shows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, ResourceRequirements, SecurityContext, Volume, VolumeDevice, VolumeMount,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, CustomResourceExt};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// API group of the policy kinds.
pub const GROUP: &str = "bookend.dev";
/// Version of the policy kinds.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the policy kinds.
pub const API_VERSION: &str = "bookend.dev/v1alpha1";

/// Steps injected into every matching TaskRun, before and after the TaskRun's own steps.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "bookend.dev",
    version = "v1alpha1",
    kind = "StepPolicy",
    plural = "steppolicies",
    shortname = "sp",
    namespaced,
    doc = "Pre-steps and post-steps bookend injects into the TaskRuns of this policy's own namespace.",
    status = "StepPolicyStatus",
    printcolumn = r#"{"name":"Ready","type":"string","description":"Whether the policy is in bookend's active set","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","description":"Loaded, TektonUnsupported, Invalid or Conflict","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.mode"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Failed","type":"integer","description":"TaskRuns whose org steps of this policy did not run as they must, over status.verification.window","jsonPath":".status.verification.failed"}"#,
    printcolumn = r#"{"name":"Passed","type":"integer","priority":1,"description":"TaskRuns whose org steps of this policy ran as they must, over status.verification.window","jsonPath":".status.verification.passed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"PostStepsRun","type":"string","priority":1,"jsonPath":".spec.postStepsRun"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepPolicySpec {
    /// Order among policies: lower is outer (its pre-steps run earlier and its post-steps
    /// later). Ties are broken by name.
    #[serde(default = "default_priority")]
    pub priority: i32,
    /// Enforce injects the steps; Audit only computes and reports them (admission warnings,
    /// metrics, `bookend render --explain`) without changing the TaskRun.
    #[serde(default)]
    pub mode: Mode,
    /// Which TaskRuns the policy applies to. Omitted: all TaskRuns. Every criterion given must
    /// hold.
    #[serde(default, rename = "match", skip_serializing_if = "Criteria::is_empty")]
    pub match_: Criteria,
    /// TaskRuns to leave alone: any criterion given that holds excludes the TaskRun.
    #[serde(default, skip_serializing_if = "Criteria::is_empty")]
    pub exclude: Criteria,
    /// Tekton v1 steps run before the TaskRun's steps. Names must start with the reserved prefix
    /// (`bookend-` by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_steps: Vec<Step>,
    /// Tekton v1 steps run after the TaskRun's steps. Names must start with the reserved prefix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_steps: Vec<Step>,
    /// OnSuccess: post-steps run only when every earlier step succeeded. Always: post-steps run
    /// even after a failed step, and the TaskRun still ends Failed (bookend adds gate steps and a
    /// final verdict step).
    #[serde(default)]
    pub post_steps_run: PostStepsRun,
    /// When the cluster's Tekton cannot run postStepsRun: Always (bookend's gates need step
    /// when and step results: Tekton v0.62 to v0.70 without enable-step-actions "true").
    /// Deny (the default): the TaskRuns the policy matches are refused, naming the flag to set.
    /// OnSuccess: the post-steps are injected to run only when every earlier step succeeded,
    /// with a warning on each TaskRun.
    #[serde(default, skip_serializing_if = "AlwaysFallback::is_default")]
    pub post_steps_run_fallback: AlwaysFallback,
    /// Volumes added to `taskSpec.volumes` for the injected steps' volumeMounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "volumes_schema")]
    pub volumes: Vec<Volume>,
    /// TaskRuns that reference a Task in their namespace (`taskRef.name`): Inline resolves the
    /// Task and inlines it as `taskSpec` so the steps can be injected; Skip admits them
    /// unchanged; Deny refuses them.
    #[serde(default)]
    pub task_ref: TaskRefPolicy,
    /// TaskRuns whose Task comes through a resolver (git, bundles, hub, cluster, http): Skip
    /// admits them unchanged with a warning; Deny refuses them.
    #[serde(default)]
    pub remote_task_ref: RemoteTaskRefPolicy,
    /// Where a TaskRun's Task may mount its workspaces. Tekton mounts every workspace into every
    /// step, org steps included, at the path the Task chose, so a workspace over a directory an
    /// org step runs from replaces its programs. UnderWorkspace (the default): only under
    /// /workspace (Tekton's default place). Anywhere: anywhere but system directories and the
    /// directories the policies' steps run from. The strictest applied policy decides.
    #[serde(default, skip_serializing_if = "WorkspaceMounts::is_default")]
    pub workspace_mounts: WorkspaceMounts,
    /// Task results the policy's post-steps write (`$(results.<name>.path)`), added to the
    /// TaskRun's `taskSpec.results`: for example the type hints Tekton Chains reads into
    /// provenance (IMAGE_URL, IMAGE_DIGEST, ARTIFACT_OUTPUTS). A Task that declares a result of
    /// the same name is refused. Needs postStepsRun: Always; bookend resets the files before
    /// the policy's post-steps run, so only the post-steps' values reach status.results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<StepResult>,
    /// What the TaskRun's own steps (those its author supplied) may do while the org's steps
    /// run beside them. `network: None` runs each of them without network (Tekton's entrypoint
    /// puts the step into a network namespace of its own) while org steps keep the Pod's
    /// network. The strictest applied policy decides.
    #[serde(default, skip_serializing_if = "UserSteps::is_default")]
    pub user_steps: UserSteps,
}

fn default_priority() -> i32 {
    100
}

impl Default for StepPolicySpec {
    fn default() -> Self {
        Self {
            priority: default_priority(),
            mode: Mode::default(),
            match_: Criteria::default(),
            exclude: Criteria::default(),
            pre_steps: Vec::new(),
            post_steps: Vec::new(),
            post_steps_run: PostStepsRun::default(),
            post_steps_run_fallback: AlwaysFallback::default(),
            volumes: Vec::new(),
            task_ref: TaskRefPolicy::default(),
            remote_task_ref: RemoteTaskRefPolicy::default(),
            workspace_mounts: WorkspaceMounts::default(),
            results: Vec::new(),
            user_steps: UserSteps::default(),
        }
    }
}

/// What bookend reports about a policy (`--source kubernetes`): whether it is in the active set,
/// and what it injects now.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepPolicyStatus {
    /// `Ready`: True (reason Loaded) when the policy is in bookend's active set; False when it
    /// is left out, with reason Invalid (the message names the field) or Conflict (the message
    /// names the policy that keeps the step or volume name), or TektonUnsupported (in the set,
    /// but the cluster's Tekton cannot run it, so the TaskRuns it matches are refused; the
    /// message names the Tekton version or the feature flag to set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<PolicyCondition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The pre-steps the policy injects now (none while it is not Ready).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_steps: Vec<String>,
    /// The post-steps the policy injects now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_steps: Vec<String>,
    /// The volumes the policy adds now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// Post-run verification over a window: how many finished TaskRuns ran this policy's
    /// steps as its `postStepsRun` says (`passed`) and how many did not (`failed`), counted
    /// from the `bookend.dev/verified` marks on the TaskRuns that still exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationStatus>,
}

/// The verdicts on one policy over a window, counted from the marks on the TaskRuns (every
/// replica counts the same marks, so they agree). TaskRuns deleted (pruned) leave the counts;
/// the metric `bookend_run_verdicts_total` is the durable record.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationStatus {
    /// How far back the counts reach from `observedAt` (e.g. `24h`).
    pub window: String,
    /// The end of the window: verdicts marked after it are in the next count (RFC 3339).
    #[schemars(schema_with = "date_time_schema")]
    pub observed_at: String,
    /// TaskRuns whose org steps of this policy ran as they must.
    pub passed: i64,
    /// TaskRuns whose org steps of this policy did not.
    pub failed: i64,
    /// TaskRuns the policy applies to whose org steps bookend could not inject, so nothing says
    /// whether they ran (a policy that selects by labels or origin, on a TaskRun whose Task a
    /// resolver fetches).
    #[serde(default)]
    pub skipped: i64,
    /// `failed` by cause (`did_not_run`, `not_injected`, `failed`, …), as the verdict names it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_by_cause: BTreeMap<String, i64>,
    /// The latest failure in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
}

/// One failed verdict: which TaskRun, why and when. The Event on the TaskRun and its
/// PolicyReport result carry the full reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    pub namespace: String,
    pub name: String,
    pub cause: String,
    /// When bookend marked the verdict (RFC 3339).
    #[schemars(schema_with = "date_time_schema")]
    pub at: String,
}

/// A condition of a policy, as Kubernetes conditions are written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCondition {
    /// `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// Loaded, TektonUnsupported, Invalid or Conflict.
    pub reason: String,
    pub message: String,
    /// The `metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339).
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: String,
}

fn date_time_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}

/// Whether a policy changes TaskRuns or only reports what it would do.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Mode {
    #[default]
    Enforce,
    Audit,
}

/// When post-steps run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PostStepsRun {
    #[default]
    OnSuccess,
    Always,
}

/// What to do with TaskRuns that reference a local Task.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TaskRefPolicy {
    #[default]
    Inline,
    Skip,
    Deny,
}

/// What `postStepsRun: Always` becomes on a Tekton that cannot run it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AlwaysFallback {
    /// Refuse the TaskRuns the policy matches.
    #[default]
    Deny,
    /// Inject the post-steps to run only on success, with a warning.
    OnSuccess,
}

impl AlwaysFallback {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Where a TaskRun's Task may mount its workspaces.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum WorkspaceMounts {
    /// Anywhere but system directories and those the policies' steps run from.
    Anywhere,
    /// Only under /workspace.
    #[default]
    UnderWorkspace,
}

impl WorkspaceMounts {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// What the TaskRun's own steps may do.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserSteps {
    /// Pod (the default): the TaskRun's steps have the Pod's network, as Tekton runs them. None:
    /// every step the TaskRun's author supplied runs without network (bookend appends
    /// `TEKTON_HERMETIC=1` and an empty `TEKTON_RESOURCE_NAME` to its env, and Tekton's
    /// entrypoint runs it in a network namespace of its own); org steps keep the network. The
    /// TaskRun may then carry no sidecars, StepAction (`ref`) steps, hostPath volumes, lifecycle
    /// hooks or probes, which would run outside that namespace.
    #[serde(default)]
    pub network: UserStepNetwork,
}

impl UserSteps {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the TaskRun's own steps must run without network.
    pub fn hermetic(&self) -> bool {
        self.network == UserStepNetwork::None
    }
}

/// The network of the TaskRun's own steps.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum UserStepNetwork {
    /// The Pod's network, as Tekton gives it.
    #[default]
    Pod,
    /// No network: the step runs in a network namespace of its own.
    None,
}

/// What to do with TaskRuns whose Task is resolved remotely.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RemoteTaskRefPolicy {
    #[default]
    Skip,
    Deny,
}

/// Which TaskRuns the origin criterion selects.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OriginMatch {
    /// Every TaskRun.
    #[default]
    Any,
    /// TaskRuns not owned by a PipelineRun.
    Standalone,
    /// TaskRuns owned by a PipelineRun.
    Pipeline,
}

/// Match or exclude criteria.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Criteria {
    /// Globs on the TaskRun's namespace (`*` any run of characters, `?` one character,
    /// `[a-z]` a class). The criterion holds when any glob matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Label selector on the labels of the TaskRun's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Label selector on the TaskRun's own labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Any, Standalone (not owned by a PipelineRun) or Pipeline (owned by a PipelineRun).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<OriginMatch>,
}

impl Criteria {
    /// True when no criterion is given.
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
            && self.namespace_selector.is_none()
            && self.selector.is_none()
            && self.origin.is_none()
    }
}

/// A Tekton v1 Step, as in `tekton.dev/v1` TaskSpec.steps.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Step name: a DNS-1123 label of at most 58 characters that starts with the reserved
    /// prefix, unique across all policies.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Container image (required unless `ref` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// Resource requirements (written as `resources` into v1beta1 TaskRuns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mounts: Option<Vec<VolumeMount>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_devices: Option<Vec<VolumeDevice>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Script run by the step (not together with `command`; a TaskRun whose stepTemplate sets
    /// `command` makes a script step invalid, so bookend refuses to inject it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Step timeout, a Go duration such as `30s` or `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Isolated workspaces the step mounts (each must be declared by the TaskRun's Task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<Vec<WorkspaceUsage>>,
    /// `continue` or `stopAndFail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_config: Option<StepOutputConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_config: Option<StepOutputConfig>,
    /// A StepAction reference (instead of image/command/args/script/env/volumeMounts).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ref")]
    pub ref_: Option<StepRef>,
    /// Parameters for the referenced StepAction (only with `ref`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Vec<Param>>,
    /// Results the step writes (not with `ref`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<StepResult>>,
    /// Conditions for running the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Vec<WhenExpression>>,
}

/// A workspace mounted by one step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceUsage {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
}

/// Where a step's stdout or stderr is also written.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepOutputConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Reference to a StepAction: `name` for one in the TaskRun's namespace, or `resolver` and
/// `params` for a remote one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Vec<Param>>,
}

/// A parameter value: a string, an array of strings or an object of strings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Param {
    pub name: String,
    #[schemars(schema_with = "any_value_schema")]
    pub value: Value,
}

/// A result a step writes to `$(step.results.<name>.path)`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepResult {
    pub name: String,
    /// string, array or object.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<BTreeMap<String, PropertySpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Type of an object result's property.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PropertySpec {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// A `when` expression: `input` `operator` (`in`/`notin`) `values`, or `cel`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WhenExpression {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<String>,
}

fn any_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "A string, an array of strings or an object of strings.",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

// The full core/v1 Volume schema would make the CRD several hundred kilobytes (too large for
// client-side `kubectl apply`); bookend checks volumes itself when it loads a policy.
fn volumes_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "description": "A core/v1 Volume.",
            "required": ["name"],
            "properties": {"name": {"type": "string"}},
            "x-kubernetes-preserve-unknown-fields": true
        }
    })
}

/// The two CRDs, generated from these types: StepPolicy, then ClusterStepPolicy (the same
/// schema, cluster-scoped).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let namespaced = StepPolicy::crd();
    let mut cluster = namespaced.clone();
    cluster.metadata.name = Some(format!("clustersteppolicies.{GROUP}"));
    cluster.spec.scope = "Cluster".to_owned();
    cluster.spec.names.kind = "ClusterStepPolicy".to_owned();
    cluster.spec.names.list_kind = Some("ClusterStepPolicyList".to_owned());
    cluster.spec.names.plural = "clustersteppolicies".to_owned();
    cluster.spec.names.singular = Some("clustersteppolicy".to_owned());
    cluster.spec.names.short_names = Some(vec!["csp".to_owned()]);
    for version in &mut cluster.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            schema.description = Some(
                "Pre-steps and post-steps bookend injects into the TaskRuns of every namespace \
                 the policy's criteria select."
                    .to_owned(),
            );
        }
    }
    vec![namespaced, cluster]
}

/// The CRDs as a multi-document YAML stream, as `bookend crds` prints it.
pub fn crds_yaml() -> String {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd).expect("CRDs serialise to YAML"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_defaults_follow_the_brief() {
        let spec: StepPolicySpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(spec.priority, 100);
        assert_eq!(spec.mode, Mode::Enforce);
        assert_eq!(spec.post_steps_run, PostStepsRun::OnSuccess);
        assert_eq!(spec.task_ref, TaskRefPolicy::Inline);
        assert_eq!(spec.remote_task_ref, RemoteTaskRefPolicy::Skip);
        assert_eq!(spec, StepPolicySpec::default());
    }

    #[test]
    fn unknown_step_fields_are_rejected() {
        let err = serde_json::from_value::<Step>(serde_json::json!({"name": "x", "imagee": "y"}))
            .unwrap_err();
        assert!(err.to_string().contains("imagee"), "{err}");
    }

    #[test]
    fn crds_have_both_kinds_with_descriptions() {
        let crds = crds();
        assert_eq!(crds.len(), 2);
        assert_eq!(crds[0].spec.scope, "Namespaced");
        assert_eq!(crds[0].spec.names.kind, "StepPolicy");
        assert_eq!(crds[1].spec.scope, "Cluster");
        assert_eq!(crds[1].spec.names.kind, "ClusterStepPolicy");
        let yaml = crds_yaml();
        assert!(
            yaml.contains("lower is outer"),
            "field docs become descriptions"
        );
        assert!(yaml.contains("name: clustersteppolicies.bookend.dev"));
        // `kubectl apply` (client-side) keeps each object's JSON in an annotation, and
        // annotations are limited to 256 KiB per object: each CRD stays well below.
        for crd in &crds {
            let json = serde_json::to_string(crd).unwrap();
            assert!(
                json.len() < 200_000,
                "{}: {} bytes",
                crd.spec.names.kind,
                json.len()
            );
        }
    }
}
