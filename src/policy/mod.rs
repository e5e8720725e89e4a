//! Step policies: the `bookend.dev/v1alpha1` API, loading, validation and matching, compiled
//! into a [`PolicySet`] that the engine reads without further work per request. Pure: text and
//! JSON values in; the files they come from are walked by [`crate::source::walk`].
//!
//! This file holds the small shared vocabulary (settings, ids, field errors and issues) and one
//! compiled [`Policy`] with its [`Verdict`]; `set` builds the [`PolicySet`] (order, conflicts,
//! owners) and `index` files policies under the criteria a TaskRun must meet.

pub mod api;
pub(crate) mod helper_steps;
mod index;
pub mod load;
pub mod select;
mod set;
pub mod support;
pub mod validate;

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use api::{
    AlwaysFallback, Mode, PostStepsRun, RemoteTaskRefPolicy, StepPolicy, StepPolicySpec,
    TaskRefPolicy, WorkspaceMounts,
};
use select::{Criterion, Matcher, Subject};
pub use set::PolicySet;
pub use support::Support;

use crate::tekton::cluster::Cluster;

/// Engine-wide settings that policies are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Reserved step-name prefix: only bookend's steps may use it.
    pub prefix: String,
    /// Image of the gate and verdict steps of `postStepsRun: Always` and of the jail check of
    /// `userSteps.network: None` (needs `/bin/sh`).
    pub helper_image: String,
    /// The user the gate and verdict steps run as (`runAsUser` of their restricted
    /// securityContext); `None` leaves it to the platform (OpenShift assigns one per namespace).
    pub helper_run_as_user: Option<i64>,
    /// The user Tekton's controller acts as; its dry-run Task CREATEs (remote resolution) get
    /// the policies' steps too.
    pub tekton_controller: String,
    /// The user bookend itself acts as against the API server, as the API server says at start
    /// (a SelfSubjectReview); `None` outside a cluster. The only requester that may change
    /// bookend's marks on a TaskRun after CREATE (`admission::marks`).
    pub own_user: Option<String>,
    /// What the cluster's Tekton can run (version, feature flags): decides each policy's
    /// [`Support`].
    pub tekton: Cluster,
}

/// The jail check's name after the prefix ([`Settings::jail_check_name`]).
const JAIL_CHECK: &str = "jail-check";

/// Default reserved prefix.
pub const DEFAULT_PREFIX: &str = "bookend-";
/// Default helper image for the gate, verdict and jail check steps.
pub const DEFAULT_HELPER_IMAGE: &str = "docker.io/library/busybox:1.37";
/// Default user of the gate and verdict steps (not root: Pod Security `restricted` requires it).
pub const DEFAULT_HELPER_RUN_AS_USER: i64 = 65532;
/// Default user of Tekton's controller.
pub const DEFAULT_TEKTON_CONTROLLER: &str =
    "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller";

impl Default for Settings {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            helper_image: DEFAULT_HELPER_IMAGE.to_owned(),
            helper_run_as_user: Some(DEFAULT_HELPER_RUN_AS_USER),
            tekton_controller: DEFAULT_TEKTON_CONTROLLER.to_owned(),
            own_user: None,
            tekton: Cluster::default(),
        }
    }
}

impl Settings {
    /// Name of the `n`-th gate step (1-based).
    pub fn gate_name(&self, n: usize) -> String {
        format!("{}gate-{n}", self.prefix)
    }

    /// Name of the verdict step.
    pub fn verdict_name(&self) -> String {
        format!("{}verdict", self.prefix)
    }

    /// Name of the step bookend puts before the post-steps of a policy that declares `results`
    /// (`hash`: the policy's spec hash), which resets those results' files.
    pub fn reset_name(&self, hash: &str) -> String {
        format!("{}results-{hash}", self.prefix)
    }

    /// Whether `name` is (or looks like) a results-reset step's name.
    pub fn is_reset_name(&self, name: &str) -> bool {
        name.starts_with(&self.reset_name(""))
    }

    /// Name of the step bookend puts before the TaskRun's own steps under a
    /// `userSteps.network: None` policy: it runs nothing, in the jail they run in, so that a
    /// node that cannot set the jail up fails it, by name, before any of the author's steps.
    pub fn jail_check_name(&self) -> String {
        format!("{}{JAIL_CHECK}", self.prefix)
    }

    /// Whether `name` is one of bookend's own helper step names.
    pub fn is_helper_name(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        rest == "verdict"
            || rest == JAIL_CHECK
            || rest
                .strip_prefix("gate-")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// Which kind of policy, and where it lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyId {
    Cluster { name: String },
    Namespaced { namespace: String, name: String },
}

impl PolicyId {
    pub fn name(&self) -> &str {
        match self {
            Self::Cluster { name } | Self::Namespaced { name, .. } => name,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cluster { .. } => "ClusterStepPolicy",
            Self::Namespaced { .. } => "StepPolicy",
        }
    }

    /// The namespace of a StepPolicy.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Self::Cluster { .. } => None,
            Self::Namespaced { namespace, .. } => Some(namespace),
        }
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cluster { name } => write!(f, "ClusterStepPolicy/{name}"),
            Self::Namespaced { namespace, name } => write!(f, "StepPolicy/{namespace}/{name}"),
        }
    }
}

/// A problem with one field: its path (relative to what was checked: the policy object, a
/// selector, the criteria) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A policy problem, printed as `source: policy: field.path: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// File path (or `kubernetes`).
    pub source: String,
    /// `Kind/name` (or `document N` when the document has no usable identity).
    pub policy: String,
    pub path: String,
    pub message: String,
    pub kind: IssueKind,
}

/// Why a policy is not in the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssueKind {
    /// It cannot be read or breaks a rule of its own.
    Invalid,
    /// It is valid, but names a step or volume that a policy with precedence already uses.
    Conflict,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: {}",
            self.source, self.policy, self.path, self.message
        )
    }
}

/// A policy as loaded, before validation.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyDoc {
    pub id: PolicyId,
    pub spec: StepPolicySpec,
    /// File the policy came from, or `kubernetes`.
    pub source: String,
    /// `metadata.creationTimestamp` (RFC 3339, so text order is time order) when it came from
    /// the API server: between conflicting policies of one kind, the older stays.
    pub created: Option<String>,
    /// `metadata.generation` when it came from the API server.
    pub generation: Option<i64>,
}

/// A validated policy with everything the engine needs precomputed.
#[derive(Clone, Debug)]
pub struct Policy {
    pub id: PolicyId,
    pub spec: StepPolicySpec,
    pub source: String,
    /// `metadata.creationTimestamp` when it came from the API server.
    pub created: Option<String>,
    /// First 12 hex digits of the SHA-256 of the spec's JSON: changes when the spec changes.
    pub hash: String,
    /// Bytes of the spec as JSON (what the set's limits count).
    pub size: usize,
    pub(crate) matcher: Matcher,
    pub(crate) excluder: Matcher,
    /// Steps as Tekton v1 JSON.
    pub(crate) pre_steps: Vec<Value>,
    pub(crate) post_steps: Vec<Value>,
    pub(crate) volumes: Vec<Value>,
    /// The Pod containers of its steps as Tekton names them (`step-<name>`, cut to 63
    /// characters): what the Pod backstop looks for, computed once here.
    pub(crate) containers: Vec<String>,
    /// Where its steps run from and mount: what `engine::isolate::OrgPaths` keeps the author's
    /// files away from, computed once here.
    pub(crate) paths: StepPaths,
    /// Whether the cluster's Tekton runs it ([`Settings::tekton`]); when `Degraded`, `spec`
    /// already says `postStepsRun: OnSuccess` (the hash is the authored spec's).
    pub tekton: Support,
}

/// Where a policy's steps run from and what they mount.
#[derive(Clone, Debug, Default)]
pub(crate) struct StepPaths {
    /// The top-level directories of the steps' commands, working directories and mount paths,
    /// `workspace` aside (where Tekton mounts workspaces by default, only an exact clash
    /// counts).
    pub tops: BTreeSet<String>,
    /// The steps' mount paths, cleaned ([`validate::mount_point`]).
    pub mounts: BTreeSet<String>,
}

impl StepPaths {
    fn of<'s>(steps: impl Iterator<Item = &'s Value>) -> Self {
        let top = |path: &str| {
            path.strip_prefix('/')
                .and_then(|p| p.split('/').next())
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        let mut paths = Self::default();
        for step in steps {
            let command = step
                .get("command")
                .and_then(|c| c.get(0))
                .and_then(Value::as_str);
            let working_dir = step.get("workingDir").and_then(Value::as_str);
            paths.tops.extend(command.and_then(top));
            paths.tops.extend(working_dir.and_then(top));
            for mount in step
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(path) = mount.get("mountPath").and_then(Value::as_str) {
                    paths.tops.extend(top(path));
                    paths.mounts.insert(validate::mount_point(path));
                }
            }
        }
        paths.tops.remove("workspace");
        paths
    }
}

/// Whether a policy applies to a TaskRun, and which criterion decided when it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Matched,
    /// A StepPolicy and a TaskRun in another namespace.
    OtherNamespace,
    /// This `match` criterion does not hold.
    NotMatched(Criterion),
    /// This `exclude` criterion holds.
    Excluded(Criterion),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Matched => "matched",
            Self::OtherNamespace | Self::NotMatched(_) => "not matched",
            Self::Excluded(_) => "excluded",
        })
    }
}

impl Policy {
    /// Whether the policy has post-steps that run whatever the TaskRun's steps do
    /// (`postStepsRun: Always`): what the Always machinery (gates, verdict) and its guards are
    /// for; an Always policy without post-steps has nothing to protect.
    pub fn runs_post_steps_always(&self) -> bool {
        self.spec.post_steps_run == PostStepsRun::Always && !self.post_steps.is_empty()
    }

    fn compile(doc: PolicyDoc, settings: &Settings) -> Result<Self, Vec<Issue>> {
        let policy_name = doc.id.to_string();
        let errors = validate::check_policy(&doc.id, &doc.spec, settings);
        if !errors.is_empty() {
            return Err(validate::issues(&doc.source, &policy_name, errors));
        }
        let (Ok(matcher), Ok(excluder)) = (
            Matcher::new(&doc.spec.match_),
            Matcher::new(&doc.spec.exclude),
        ) else {
            unreachable!("check_spec compiles the criteria");
        };
        let pre_steps = doc.spec.pre_steps.iter().map(to_json).collect();
        let (hash, size) = (spec_hash(&doc.spec), spec_size(&doc.spec));
        let mut post_steps: Vec<Value> = Vec::new();
        if !doc.spec.results.is_empty() {
            // Validation made sure there are post-steps to write them (and that they run Always).
            post_steps.push(helper_steps::reset_step(
                settings,
                &settings.reset_name(&hash),
                &doc.spec.results,
            ));
        }
        post_steps.extend(doc.spec.post_steps.iter().map(to_json));
        let volumes = doc.spec.volumes.iter().map(to_json).collect();
        let tekton = support::support(&doc.spec, &settings.tekton);
        let mut spec = doc.spec;
        if matches!(tekton, Support::Degraded(_)) {
            spec.post_steps_run = PostStepsRun::OnSuccess;
        }
        let mut policy = Self {
            id: doc.id,
            spec,
            source: doc.source,
            created: doc.created,
            hash,
            size,
            matcher,
            excluder,
            pre_steps,
            post_steps,
            volumes,
            containers: Vec::new(),
            paths: StepPaths::default(),
            tekton,
        };
        policy.containers = policy
            .step_names()
            .map(|step| crate::tekton::restrict_length(&crate::tekton::step_container(step)))
            .collect();
        policy.paths = StepPaths::of(policy.pre_steps.iter().chain(&policy.post_steps));
        Ok(policy)
    }

    /// Whether the policy applies to `subject` (StepPolicies only in their own namespace).
    pub fn verdict(&self, subject: &Subject<'_>) -> Verdict {
        if self
            .id
            .namespace()
            .is_some_and(|ns| ns != subject.namespace)
        {
            return Verdict::OtherNamespace;
        }
        if let Err(failed) = self.matcher.all(subject) {
            return Verdict::NotMatched(failed);
        }
        match self.excluder.any(subject) {
            Some(held) => Verdict::Excluded(held),
            None => Verdict::Matched,
        }
    }

    pub fn matches(&self, subject: &Subject<'_>) -> bool {
        self.verdict(subject) == Verdict::Matched
    }

    /// Why the policy got its verdict, in words (`render --explain`).
    pub fn explain(&self, verdict: Verdict, subject: &Subject<'_>) -> String {
        match verdict {
            Verdict::Matched => self.matcher.describe_match(subject),
            Verdict::OtherNamespace => format!(
                "StepPolicy applies only to namespace {}, TaskRun is in {}",
                self.id.namespace().unwrap_or_default(),
                subject.namespace
            ),
            Verdict::NotMatched(failed) => self.matcher.describe(failed, subject),
            Verdict::Excluded(held) => self.excluder.describe(held, subject),
        }
    }

    /// Whether every criterion is about the namespace (no TaskRun labels, no origin), so the
    /// policy can be evaluated without a TaskRun (Tekton's dry-run Task CREATE).
    pub fn namespace_level_only(&self) -> bool {
        [&self.matcher, &self.excluder]
            .iter()
            .all(|m| m.selector.is_none() && m.origin == api::OriginMatch::Any)
    }

    /// Names of the steps this policy injects, pre-steps first (with the step that resets its
    /// results, when it declares any).
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.pre_steps
            .iter()
            .chain(&self.post_steps)
            .map(|s| s.get("name").and_then(Value::as_str).unwrap_or_default())
    }

    /// The Task results this policy adds to `taskSpec.results`, as Tekton v1 JSON.
    pub fn results(&self) -> impl Iterator<Item = Value> + '_ {
        self.spec.results.iter().map(to_json)
    }
}

/// Serialises a policy part; plain data types always serialise.
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("policy types serialise to JSON")
}

/// Bytes of a spec as JSON.
pub fn spec_size(spec: &StepPolicySpec) -> usize {
    serde_json::to_vec(spec).map_or(0, |b| b.len())
}

/// Hash of a spec, as recorded in the `bookend.dev/injected` annotation.
pub fn spec_hash(spec: &StepPolicySpec) -> String {
    let bytes = serde_json::to_vec(spec).expect("policy spec serialises");
    let digest = Sha256::digest(&bytes);
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::Step;
    use crate::tekton::Origin;

    /// A ClusterStepPolicy with `namespaces` as its only criterion and one pre-step per name;
    /// shared with the tests of [`set`] and [`index`].
    pub(super) fn doc(name: &str, priority: i32, namespaces: &[&str], steps: &[&str]) -> PolicyDoc {
        PolicyDoc {
            id: PolicyId::Cluster { name: name.into() },
            spec: StepPolicySpec {
                priority,
                match_: api::Criteria {
                    namespaces: namespaces.iter().map(|s| (*s).to_owned()).collect(),
                    ..Default::default()
                },
                pre_steps: steps
                    .iter()
                    .map(|s| Step {
                        name: (*s).into(),
                        image: Some("alpine".into()),
                        ..Step::default()
                    })
                    .collect(),
                ..StepPolicySpec::default()
            },
            source: "test.yaml".into(),
            created: None,
            generation: None,
        }
    }

    #[test]
    fn step_policies_apply_only_in_their_namespace() {
        let mut d = doc("local", 1, &[], &["bookend-l"]);
        d.id = PolicyId::Namespaced {
            namespace: "team-a".into(),
            name: "local".into(),
        };
        let (set, _) = PolicySet::build(vec![d], Settings::default());
        let labels = select::Labels::new();
        let subject = |ns| Subject {
            namespace: ns,
            namespace_labels: &labels,
            labels: &labels,
            origin: Origin::Standalone,
        };
        let p = &set.policies()[0];
        assert_eq!(p.verdict(&subject("team-a")), Verdict::Matched);
        assert_eq!(p.verdict(&subject("team-b")), Verdict::OtherNamespace);
        assert_eq!(
            p.explain(Verdict::OtherNamespace, &subject("team-b")),
            "StepPolicy applies only to namespace team-a, TaskRun is in team-b"
        );
        assert!(set.candidates(&subject("team-b")).is_empty());
    }

    #[test]
    fn helper_names() {
        let s = Settings::default();
        assert!(s.is_helper_name("bookend-gate-1"));
        assert!(s.is_helper_name("bookend-verdict"));
        assert!(s.is_helper_name("bookend-jail-check"));
        assert!(!s.is_helper_name("bookend-jail-check-2"));
        assert!(!s.is_helper_name("bookend-gate-"));
        assert!(!s.is_helper_name("bookend-gate-x"));
        assert!(!s.is_helper_name("bookend-creds"));
        assert_eq!(s.gate_name(2), "bookend-gate-2");
    }

    #[test]
    fn hash_changes_with_the_spec() {
        let a = doc("a", 1, &[], &["bookend-a"]);
        let b = doc("a", 2, &[], &["bookend-a"]);
        assert_ne!(spec_hash(&a.spec), spec_hash(&b.spec));
        assert_eq!(spec_hash(&a.spec), spec_hash(&a.spec.clone()));
        assert_eq!(spec_hash(&a.spec).len(), 12);
    }
}
