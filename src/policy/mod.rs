//! Step policies: the API types, loading from files, validation and matching, compiled into a
//! [`PolicySet`] that the engine reads without further work per request.

pub mod api;
pub mod load;
pub mod select;
pub mod validate;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use api::{
    ClusterStepPolicy, Mode, PostStepsRun, RemoteTaskRefPolicy, StepPolicy, StepPolicySpec,
    TaskRefPolicy,
};
use select::{Matcher, Subject};

/// Engine-wide settings that policies are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Reserved step-name prefix: only bookend's steps may use it.
    pub prefix: String,
    /// Image of the gate and verdict steps of `postStepsRun: Always` (needs `/bin/sh`).
    pub helper_image: String,
    /// The user Tekton's controller acts as; its dry-run Task CREATEs (remote resolution) get
    /// the policies' steps too.
    pub tekton_controller: String,
}

/// Default reserved prefix.
pub const DEFAULT_PREFIX: &str = "bookend-";
/// Default helper image for gate and verdict steps.
pub const DEFAULT_HELPER_IMAGE: &str = "docker.io/library/busybox:1.37";
/// Default user of Tekton's controller.
pub const DEFAULT_TEKTON_CONTROLLER: &str =
    "system:serviceaccount:tekton-pipelines:tekton-pipelines-controller";

impl Default for Settings {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            helper_image: DEFAULT_HELPER_IMAGE.to_owned(),
            tekton_controller: DEFAULT_TEKTON_CONTROLLER.to_owned(),
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

    /// Whether `name` is one of bookend's own helper step names.
    pub fn is_helper_name(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(self.prefix.as_str()) else {
            return false;
        };
        rest == "verdict"
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

/// A policy problem, printed as `source: policy: field.path: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// File path (or `kubernetes`).
    pub source: String,
    /// `Kind/name` (or `document N` when the document has no usable identity).
    pub policy: String,
    pub path: String,
    pub message: String,
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
    /// `metadata.resourceVersion` when it came from the API server.
    pub resource_version: Option<String>,
}

/// A validated policy with everything the engine needs precomputed.
#[derive(Clone, Debug)]
pub struct Policy {
    pub id: PolicyId,
    pub spec: StepPolicySpec,
    pub source: String,
    /// First 12 hex digits of the SHA-256 of the spec's JSON: changes when the spec changes.
    pub hash: String,
    pub(crate) matcher: Matcher,
    pub(crate) excluder: Matcher,
    /// Steps as Tekton v1 JSON.
    pub(crate) pre_steps: Vec<Value>,
    pub(crate) post_steps: Vec<Value>,
    pub(crate) volumes: Vec<Value>,
}

/// Why a policy did or did not apply to a TaskRun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Matched(String),
    NotMatched(String),
    Excluded(String),
}

impl Policy {
    fn compile(doc: PolicyDoc, settings: &Settings) -> Result<Self, Vec<Issue>> {
        let policy_name = doc.id.to_string();
        let errors = validate::check_spec(&doc.spec, settings);
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
        let post_steps = doc.spec.post_steps.iter().map(to_json).collect();
        let volumes = doc.spec.volumes.iter().map(to_json).collect();
        let hash = spec_hash(&doc.spec);
        Ok(Self {
            id: doc.id,
            spec: doc.spec,
            source: doc.source,
            hash,
            matcher,
            excluder,
            pre_steps,
            post_steps,
            volumes,
        })
    }

    /// Whether the policy applies to `subject` (StepPolicies only in their own namespace).
    pub fn verdict(&self, subject: &Subject<'_>) -> Verdict {
        if let Some(ns) = self.id.namespace()
            && ns != subject.namespace
        {
            return Verdict::NotMatched(format!(
                "StepPolicy applies only to namespace {ns}, TaskRun is in {}",
                subject.namespace
            ));
        }
        match self.matcher.check_all(subject) {
            Err(why) => Verdict::NotMatched(why),
            Ok(why) => match self.excluder.check_any(subject) {
                Some(excluded) => Verdict::Excluded(excluded),
                None => Verdict::Matched(why),
            },
        }
    }

    /// Whether every criterion is about the namespace (no TaskRun labels, no origin), so the
    /// policy can be evaluated without a TaskRun (Tekton's dry-run Task CREATE).
    pub fn namespace_level_only(&self) -> bool {
        [&self.matcher, &self.excluder]
            .iter()
            .all(|m| m.selector.is_none() && m.origin == api::OriginMatch::Any)
    }

    /// Names of the steps this policy injects, pre-steps first.
    pub fn step_names(&self) -> impl Iterator<Item = &str> {
        self.spec
            .pre_steps
            .iter()
            .chain(&self.spec.post_steps)
            .map(|s| s.name.as_str())
    }
}

/// Serialises a policy part; plain data types always serialise.
fn to_json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("policy types serialise to JSON")
}

/// Hash of a spec, as recorded in the `bookend.dev/injected` annotation.
pub fn spec_hash(spec: &StepPolicySpec) -> String {
    let bytes = serde_json::to_vec(spec).expect("policy spec serialises");
    let digest = Sha256::digest(&bytes);
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// The validated policies, in evaluation order (priority, then name), with a namespace index.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
    settings: Settings,
    /// Policies whose only namespace criteria are literal names, by name.
    by_namespace: HashMap<String, Vec<usize>>,
    /// Policies that must be checked for every TaskRun (globs or no namespace criterion).
    unindexed: Vec<usize>,
    /// Every policy's step and volume names, to recognise what bookend injected.
    step_owner: HashMap<String, usize>,
}

impl PolicySet {
    /// Validates and compiles `docs`. Invalid policies are left out and reported; when two
    /// policies conflict (same step name), the later one in evaluation order is left out.
    pub fn build(docs: Vec<PolicyDoc>, settings: Settings) -> (Self, Vec<Issue>) {
        let mut issues = Vec::new();
        let mut seen_ids: BTreeMap<PolicyId, String> = BTreeMap::new();
        let mut compiled = Vec::new();
        for doc in docs {
            if let Some(first) = seen_ids.get(&doc.id) {
                issues.push(Issue {
                    source: doc.source.clone(),
                    policy: doc.id.to_string(),
                    path: "metadata.name".to_owned(),
                    message: format!("{} is defined twice (first in {first})", doc.id),
                });
                continue;
            }
            seen_ids.insert(doc.id.clone(), doc.source.clone());
            match Policy::compile(doc, &settings) {
                Ok(p) => compiled.push(p),
                Err(errs) => issues.extend(errs),
            }
        }
        compiled.sort_by(|a, b| {
            (a.spec.priority, a.id.name(), &a.id).cmp(&(b.spec.priority, b.id.name(), &b.id))
        });

        let mut policies: Vec<Policy> = Vec::new();
        let mut step_owner: HashMap<String, usize> = HashMap::new();
        let mut volume_owner: HashMap<String, usize> = HashMap::new();
        for policy in compiled {
            let mut conflicts = Vec::new();
            for (list, steps) in [
                ("preSteps", &policy.spec.pre_steps),
                ("postSteps", &policy.spec.post_steps),
            ] {
                for (i, step) in steps.iter().enumerate() {
                    if let Some(&owner) = step_owner.get(&step.name) {
                        conflicts.push((
                            format!("spec.{list}[{i}].name"),
                            format!(
                                "step name {:?} is already used by {}; injected step names must be unique across all policies",
                                step.name, policies[owner].id
                            ),
                        ));
                    }
                }
            }
            for (i, volume) in policy.spec.volumes.iter().enumerate() {
                if let Some(&owner) = volume_owner.get(&volume.name) {
                    conflicts.push((
                        format!("spec.volumes[{i}].name"),
                        format!(
                            "volume name {:?} is already used by {}; injected volume names must be unique across all policies",
                            volume.name, policies[owner].id
                        ),
                    ));
                }
            }
            if !conflicts.is_empty() {
                issues.extend(conflicts.into_iter().map(|(path, message)| Issue {
                    source: policy.source.clone(),
                    policy: policy.id.to_string(),
                    path,
                    message,
                }));
                continue;
            }
            let index = policies.len();
            for name in policy.step_names() {
                step_owner.insert(name.to_owned(), index);
            }
            for volume in &policy.spec.volumes {
                volume_owner.insert(volume.name.clone(), index);
            }
            policies.push(policy);
        }

        let mut by_namespace: HashMap<String, Vec<usize>> = HashMap::new();
        let mut unindexed = Vec::new();
        for (i, policy) in policies.iter().enumerate() {
            let literals: Option<Vec<String>> = match &policy.id {
                PolicyId::Namespaced { namespace, .. } => Some(vec![namespace.clone()]),
                PolicyId::Cluster { .. } if !policy.matcher.namespaces.is_empty() => policy
                    .matcher
                    .namespaces
                    .iter()
                    .map(select::Glob::literal)
                    .collect(),
                PolicyId::Cluster { .. } => None,
            };
            match literals {
                Some(names) => {
                    for name in names {
                        let entry = by_namespace.entry(name).or_default();
                        if entry.last() != Some(&i) {
                            entry.push(i);
                        }
                    }
                }
                None => unindexed.push(i),
            }
        }
        let set = Self {
            policies,
            settings,
            by_namespace,
            unindexed,
            step_owner,
        };
        (set, issues)
    }

    /// All policies in evaluation order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn len(&self) -> usize {
        self.policies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Policies that may apply in `namespace`, in evaluation order (the index prunes policies
    /// whose literal namespace criteria cannot hold; the caller still checks each).
    pub fn candidates(&self, namespace: &str) -> Vec<&Policy> {
        let indexed = self
            .by_namespace
            .get(namespace)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut merged = Vec::with_capacity(indexed.len() + self.unindexed.len());
        let (mut a, mut b) = (indexed.iter().peekable(), self.unindexed.iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&x), Some(&&y)) if x < y => a.next(),
                (Some(_), Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, Some(_)) => b.next(),
                (None, None) => break,
            };
            if let Some(&i) = next {
                merged.push(&self.policies[i]);
            }
        }
        merged
    }

    /// The policy that defines a step named `name`, if any.
    pub fn step_owner(&self, name: &str) -> Option<&Policy> {
        self.step_owner.get(name).map(|&i| &self.policies[i])
    }

    /// Finds a policy by id.
    pub fn get(&self, id: &PolicyId) -> Option<&Policy> {
        self.policies.iter().find(|p| &p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::Step;
    use crate::tekton::Origin;

    fn doc(name: &str, priority: i32, namespaces: &[&str], steps: &[&str]) -> PolicyDoc {
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
            resource_version: None,
        }
    }

    #[test]
    fn order_is_priority_then_name() {
        let (set, issues) = PolicySet::build(
            vec![
                doc("b", 10, &[], &["bookend-b"]),
                doc("a", 10, &[], &["bookend-a"]),
                doc("z", 1, &[], &["bookend-z"]),
            ],
            Settings::default(),
        );
        assert!(issues.is_empty(), "{issues:?}");
        let names: Vec<_> = set.policies().iter().map(|p| p.id.name()).collect();
        assert_eq!(names, ["z", "a", "b"]);
    }

    #[test]
    fn duplicate_step_names_across_policies_drop_the_later_policy() {
        let (set, issues) = PolicySet::build(
            vec![
                doc("first", 1, &[], &["bookend-x"]),
                doc("second", 2, &[], &["bookend-x"]),
            ],
            Settings::default(),
        );
        assert_eq!(set.len(), 1);
        assert_eq!(issues.len(), 1);
        assert_eq!(
            issues[0].to_string(),
            "test.yaml: ClusterStepPolicy/second: spec.preSteps[0].name: step name \"bookend-x\" is already used by ClusterStepPolicy/first; injected step names must be unique across all policies"
        );
        assert_eq!(set.step_owner("bookend-x").unwrap().id.name(), "first");
    }

    #[test]
    fn duplicate_policy_ids_are_reported() {
        let (set, issues) = PolicySet::build(
            vec![
                doc("p", 1, &[], &["bookend-x"]),
                doc("p", 1, &[], &["bookend-y"]),
            ],
            Settings::default(),
        );
        assert_eq!(set.len(), 1);
        assert!(issues[0].message.contains("defined twice"));
    }

    #[test]
    fn namespace_index_keeps_order_and_prunes() {
        let (set, _) = PolicySet::build(
            vec![
                doc("literal", 1, &["team-a"], &["bookend-1"]),
                doc("glob", 2, &["team-*"], &["bookend-2"]),
                doc("everywhere", 3, &[], &["bookend-3"]),
                doc("other", 4, &["team-b"], &["bookend-4"]),
            ],
            Settings::default(),
        );
        let names = |ns: &str| {
            set.candidates(ns)
                .iter()
                .map(|p| p.id.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("team-a"), ["literal", "glob", "everywhere"]);
        assert_eq!(names("team-b"), ["glob", "everywhere", "other"]);
        assert_eq!(names("ops"), ["glob", "everywhere"]);
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
        assert!(matches!(p.verdict(&subject("team-a")), Verdict::Matched(_)));
        assert!(matches!(
            p.verdict(&subject("team-b")),
            Verdict::NotMatched(_)
        ));
        assert!(set.candidates("team-b").is_empty());
    }

    #[test]
    fn helper_names() {
        let s = Settings::default();
        assert!(s.is_helper_name("bookend-gate-1"));
        assert!(s.is_helper_name("bookend-verdict"));
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
