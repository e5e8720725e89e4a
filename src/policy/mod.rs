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

pub use api::{Mode, PostStepsRun, RemoteTaskRefPolicy, StepPolicy, StepPolicySpec, TaskRefPolicy};
use select::{Criterion, Matcher, Subject};

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
    pub(crate) matcher: Matcher,
    pub(crate) excluder: Matcher,
    /// Steps as Tekton v1 JSON.
    pub(crate) pre_steps: Vec<Value>,
    pub(crate) post_steps: Vec<Value>,
    pub(crate) volumes: Vec<Value>,
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
            created: doc.created,
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
    /// Which policies can match a TaskRun, by one criterion each policy needs.
    index: Index,
    /// Every policy's step names, to recognise what bookend injected.
    step_owner: HashMap<String, usize>,
    /// Every policy's volume names.
    volume_owner: HashMap<String, usize>,
}

/// The candidate index: each policy is filed under one criterion every TaskRun it matches must
/// meet (its namespace globs, else a required TaskRun label, else a required namespace label),
/// so a request looks only at the policies filed under what it has, plus the few that cannot
/// be indexed (no criterion, or globs like `*` or `*x*`).
#[derive(Clone, Debug, Default)]
struct Index {
    /// StepPolicies and literal namespace names.
    literal: HashMap<String, Vec<usize>>,
    /// Globs by their literal prefix (`team-*` under `team-`), and the distinct prefix lengths.
    prefix: HashMap<String, Vec<usize>>,
    prefix_lens: Vec<usize>,
    /// Globs without a literal prefix, by their literal suffix (`*-prod` under `-prod`).
    suffix: HashMap<String, Vec<usize>>,
    suffix_lens: Vec<usize>,
    /// Required TaskRun labels: key, value.
    labels: HashMap<String, HashMap<String, Vec<usize>>>,
    /// Required namespace labels (`kubernetes.io/metadata.name` implied): key, value.
    namespace_labels: HashMap<String, HashMap<String, Vec<usize>>>,
    /// Policies checked for every TaskRun.
    unindexed: Vec<usize>,
}

/// Where a policy is filed in the [`Index`].
enum Key {
    Literal(String),
    Prefix(String),
    Suffix(String),
    Label(String, String),
    NamespaceLabel(String, String),
}

impl Index {
    fn build(policies: &[Policy]) -> Self {
        let mut index = Self::default();
        for (i, policy) in policies.iter().enumerate() {
            match Self::keys(policy) {
                None => index.unindexed.push(i),
                Some(keys) => {
                    for key in keys {
                        let entry = match key {
                            Key::Literal(k) => index.literal.entry(k).or_default(),
                            Key::Prefix(k) => index.prefix.entry(k).or_default(),
                            Key::Suffix(k) => index.suffix.entry(k).or_default(),
                            Key::Label(k, v) => {
                                index.labels.entry(k).or_default().entry(v).or_default()
                            }
                            Key::NamespaceLabel(k, v) => index
                                .namespace_labels
                                .entry(k)
                                .or_default()
                                .entry(v)
                                .or_default(),
                        };
                        if entry.last() != Some(&i) {
                            entry.push(i);
                        }
                    }
                }
            }
        }
        let lens = |map: &HashMap<String, Vec<usize>>| {
            let mut lens: Vec<usize> = map.keys().map(String::len).collect();
            lens.sort_unstable();
            lens.dedup();
            lens
        };
        index.prefix_lens = lens(&index.prefix);
        index.suffix_lens = lens(&index.suffix);
        index
    }

    /// Keys one of which every TaskRun the policy matches has; `None`: check it always.
    fn keys(policy: &Policy) -> Option<Vec<Key>> {
        if let PolicyId::Namespaced { namespace, .. } = &policy.id {
            return Some(vec![Key::Literal(namespace.clone())]);
        }
        let matcher = &policy.matcher;
        if !matcher.namespaces.is_empty() {
            // Any glob may match: every glob needs a key, or the policy is not indexed by them.
            let globs: Option<Vec<Key>> = matcher
                .namespaces
                .iter()
                .map(|g| {
                    if let Some(literal) = g.literal() {
                        return Some(Key::Literal(literal));
                    }
                    let prefix = g.literal_prefix();
                    if !prefix.is_empty() {
                        return Some(Key::Prefix(prefix));
                    }
                    let suffix = g.literal_suffix();
                    (!suffix.is_empty()).then_some(Key::Suffix(suffix))
                })
                .collect();
            if globs.is_some() {
                return globs;
            }
        }
        if let Some((key, values)) = matcher.selector.as_ref().and_then(|s| s.required_label()) {
            return Some(
                values
                    .into_iter()
                    .map(|v| Key::Label(key.to_owned(), v.to_owned()))
                    .collect(),
            );
        }
        if let Some((key, values)) = matcher
            .namespace_selector
            .as_ref()
            .and_then(|s| s.required_label())
        {
            return Some(
                values
                    .into_iter()
                    .map(|v| Key::NamespaceLabel(key.to_owned(), v.to_owned()))
                    .collect(),
            );
        }
        None
    }

    /// Indexes (ascending, distinct) of the policies that may match `subject`.
    fn candidates(&self, subject: &Subject<'_>) -> Vec<usize> {
        let ns = subject.namespace;
        let mut out: Vec<usize> = self.unindexed.clone();
        let mut add = |hits: Option<&Vec<usize>>| {
            if let Some(hits) = hits {
                out.extend_from_slice(hits);
            }
        };
        add(self.literal.get(ns));
        for &len in &self.prefix_lens {
            if len > ns.len() {
                break;
            }
            if ns.is_char_boundary(len) {
                add(self.prefix.get(&ns[..len]));
            }
        }
        for &len in &self.suffix_lens {
            if len > ns.len() {
                break;
            }
            if ns.is_char_boundary(ns.len() - len) {
                add(self.suffix.get(&ns[ns.len() - len..]));
            }
        }
        if !self.labels.is_empty() {
            for (k, v) in subject.labels {
                add(self.labels.get(k).and_then(|values| values.get(v)));
            }
        }
        if !self.namespace_labels.is_empty() {
            for (k, v) in subject.namespace_labels {
                add(self
                    .namespace_labels
                    .get(k)
                    .and_then(|values| values.get(v)));
            }
            if !subject.namespace_labels.contains_key(select::NAME_LABEL) {
                add(self
                    .namespace_labels
                    .get(select::NAME_LABEL)
                    .and_then(|values| values.get(ns)));
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Which policies own which injected names while a set is built or checked against.
#[derive(Default)]
struct Owners<'a> {
    steps: HashMap<&'a str, &'a PolicyId>,
    volumes: HashMap<&'a str, &'a PolicyId>,
}

impl<'a> Owners<'a> {
    fn claim(&mut self, id: &'a PolicyId, spec: &'a StepPolicySpec) {
        for step in spec.pre_steps.iter().chain(&spec.post_steps) {
            self.steps.insert(&step.name, id);
        }
        for volume in &spec.volumes {
            self.volumes.insert(&volume.name, id);
        }
    }

    /// The names of `spec` that another policy already owns: the one conflicts check of the
    /// loader, `bookend validate` and the admission of policy objects.
    fn clashes(&self, id: &PolicyId, spec: &StepPolicySpec) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let other = |owner: Option<&&'a PolicyId>| -> Option<&'a PolicyId> {
            owner.copied().filter(|owner| *owner != id)
        };
        for (list, steps) in [
            ("preSteps", &spec.pre_steps),
            ("postSteps", &spec.post_steps),
        ] {
            for (i, step) in steps.iter().enumerate() {
                if let Some(owner) = other(self.steps.get(step.name.as_str())) {
                    errors.push(FieldError::new(
                        format!("spec.{list}[{i}].name"),
                        format!(
                            "step name {:?} is already used by {owner}; injected step names must be unique across all policies (rename one of them)",
                            step.name
                        ),
                    ));
                }
            }
        }
        for (i, volume) in spec.volumes.iter().enumerate() {
            if let Some(owner) = other(self.volumes.get(volume.name.as_str())) {
                errors.push(FieldError::new(
                    format!("spec.volumes[{i}].name"),
                    format!(
                        "volume name {:?} is already used by {owner}; injected volume names must be unique across all policies (rename one of them)",
                        volume.name
                    ),
                ));
            }
        }
        errors
    }
}

/// Scope rank: ClusterStepPolicies come before (outside, and with precedence over)
/// StepPolicies.
fn scope(id: &PolicyId) -> u8 {
    match id {
        PolicyId::Cluster { .. } => 0,
        PolicyId::Namespaced { .. } => 1,
    }
}

impl PolicySet {
    /// Validates and compiles `docs`. Invalid policies are left out and reported. When two
    /// policies name the same step or volume, the one with precedence stays and the other is
    /// left out (an [`IssueKind::Conflict`] naming both): a ClusterStepPolicy over a
    /// StepPolicy, else the older (`created`), else the one earlier in `docs` (file order).
    pub fn build(docs: Vec<PolicyDoc>, settings: Settings) -> (Self, Vec<Issue>) {
        let mut issues = Vec::new();
        let mut seen_ids: BTreeMap<PolicyId, String> = BTreeMap::new();
        let mut compiled = Vec::new();
        for (order, doc) in docs.into_iter().enumerate() {
            if let Some(first) = seen_ids.get(&doc.id) {
                issues.push(Issue {
                    source: doc.source.clone(),
                    policy: doc.id.to_string(),
                    path: "metadata.name".to_owned(),
                    message: format!("{} is defined twice (first in {first})", doc.id),
                    kind: IssueKind::Invalid,
                });
                continue;
            }
            seen_ids.insert(doc.id.clone(), doc.source.clone());
            let created = doc.created.clone();
            match Policy::compile(doc, &settings) {
                Ok(p) => compiled.push((created, order, p)),
                Err(errs) => issues.extend(errs),
            }
        }
        // Precedence: a newcomer never displaces what was there first, and a team's policy
        // never displaces the org's.
        compiled.sort_by(|(ca, oa, a), (cb, ob, b)| {
            (scope(&a.id), ca, oa).cmp(&(scope(&b.id), cb, ob))
        });
        let mut kept = vec![true; compiled.len()];
        {
            let mut owners = Owners::default();
            for (i, (_, _, policy)) in compiled.iter().enumerate() {
                let clashes = owners.clashes(&policy.id, &policy.spec);
                if clashes.is_empty() {
                    owners.claim(&policy.id, &policy.spec);
                } else {
                    kept[i] = false;
                    issues.extend(clashes.into_iter().map(|e| Issue {
                        source: policy.source.clone(),
                        policy: policy.id.to_string(),
                        path: e.path,
                        message: e.message,
                        kind: IssueKind::Conflict,
                    }));
                }
            }
        }
        let mut policies: Vec<Policy> = compiled
            .into_iter()
            .zip(kept)
            .filter_map(|((_, _, p), keep)| keep.then_some(p))
            .collect();
        // Evaluation order: ClusterStepPolicies outside StepPolicies, whatever the priorities
        // (org pre-steps first, org post-steps last); within a scope, priority, then name.
        policies.sort_by(|a, b| {
            (scope(&a.id), a.spec.priority, a.id.name(), &a.id).cmp(&(
                scope(&b.id),
                b.spec.priority,
                b.id.name(),
                &b.id,
            ))
        });
        let mut step_owner = HashMap::new();
        let mut volume_owner = HashMap::new();
        for (i, policy) in policies.iter().enumerate() {
            for name in policy.step_names() {
                step_owner.insert(name.to_owned(), i);
            }
            for volume in &policy.spec.volumes {
                volume_owner.insert(volume.name.clone(), i);
            }
        }
        let set = Self {
            index: Index::build(&policies),
            policies,
            settings,
            step_owner,
            volume_owner,
        };
        (set, issues)
    }

    /// The names of a policy being admitted (`id`, `spec`) that a loaded policy other than
    /// itself already uses: what the policy-object webhook refuses, by the same check
    /// [`PolicySet::build`] applies.
    pub fn conflicts(&self, id: &PolicyId, spec: &StepPolicySpec) -> Vec<FieldError> {
        let mut owners = Owners::default();
        for policy in &self.policies {
            owners.claim(&policy.id, &policy.spec);
        }
        owners.clashes(id, spec)
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

    /// Policies that may apply to `subject`, in evaluation order: the index prunes policies
    /// that need a namespace, TaskRun label or namespace label the subject does not have; the
    /// caller still checks each ([`Policy::matches`]).
    pub fn candidates(&self, subject: &Subject<'_>) -> Vec<&Policy> {
        self.index
            .candidates(subject)
            .into_iter()
            .map(|i| &self.policies[i])
            .collect()
    }

    /// The policy that defines a step named `name`, if any.
    pub fn step_owner(&self, name: &str) -> Option<&Policy> {
        self.step_owner.get(name).map(|&i| &self.policies[i])
    }

    /// The policy that defines a volume named `name`, if any.
    pub fn volume_owner(&self, name: &str) -> Option<&Policy> {
        self.volume_owner.get(name).map(|&i| &self.policies[i])
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
            created: None,
            generation: None,
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

    fn namespaced(mut d: PolicyDoc, namespace: &str) -> PolicyDoc {
        d.id = PolicyId::Namespaced {
            namespace: namespace.into(),
            name: d.id.name().into(),
        };
        d
    }

    fn with_volume(mut d: PolicyDoc, volume: &str) -> PolicyDoc {
        d.spec.volumes.push(k8s_openapi::api::core::v1::Volume {
            name: volume.into(),
            empty_dir: Some(Default::default()),
            ..Default::default()
        });
        d
    }

    fn ids(set: &PolicySet) -> Vec<String> {
        set.policies().iter().map(|p| p.id.to_string()).collect()
    }

    #[test]
    fn of_two_policies_with_one_step_name_the_first_in_file_order_stays() {
        // The later one has the lower priority and sorts first by name: neither may win.
        let (set, issues) = PolicySet::build(
            vec![
                doc("second", 2, &[], &["bookend-x"]),
                doc("first", 1, &[], &["bookend-x"]),
            ],
            Settings::default(),
        );
        assert_eq!(ids(&set), ["ClusterStepPolicy/second"]);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].kind, IssueKind::Conflict);
        assert_eq!(
            issues[0].to_string(),
            "test.yaml: ClusterStepPolicy/first: spec.preSteps[0].name: step name \"bookend-x\" is already used by ClusterStepPolicy/second; injected step names must be unique across all policies (rename one of them)"
        );
        assert_eq!(set.step_owner("bookend-x").unwrap().id.name(), "second");
    }

    #[test]
    fn a_team_policy_never_displaces_an_org_policy() {
        // The reproduction of issue 14: the team's StepPolicy sorts first by priority and name,
        // in either file order; the org's ClusterStepPolicy stays.
        let org = with_volume(
            doc("org-audit", 100, &[], &["bookend-audit"]),
            "bookend-cache",
        );
        let team = namespaced(
            with_volume(doc("aaa-team", 0, &[], &["bookend-team"]), "bookend-cache"),
            "team-a",
        );
        for docs in [
            vec![team.clone(), org.clone()],
            vec![org.clone(), team.clone()],
        ] {
            let (set, issues) = PolicySet::build(docs, Settings::default());
            assert_eq!(ids(&set), ["ClusterStepPolicy/org-audit"]);
            assert_eq!(issues.len(), 1, "{issues:?}");
            assert_eq!(issues[0].policy, "StepPolicy/team-a/aaa-team");
            assert_eq!(issues[0].path, "spec.volumes[0].name");
            assert!(
                issues[0]
                    .message
                    .contains("already used by ClusterStepPolicy/org-audit"),
                "{issues:?}"
            );
        }
        // The same with a step name: the team cannot take over an org step either.
        let team = namespaced(doc("aaa-team", -1000, &[], &["bookend-audit"]), "team-a");
        let (set, issues) = PolicySet::build(vec![team, org], Settings::default());
        assert_eq!(ids(&set), ["ClusterStepPolicy/org-audit"]);
        assert_eq!(issues[0].kind, IssueKind::Conflict);
    }

    #[test]
    fn between_api_objects_the_older_stays() {
        let mut old = doc("zzz-old", 50, &[], &["bookend-x"]);
        old.created = Some("2026-01-01T00:00:00Z".into());
        let mut new = doc("aaa-new", 1, &[], &["bookend-x"]);
        new.created = Some("2026-06-01T00:00:00Z".into());
        let (set, issues) = PolicySet::build(vec![new.clone(), old.clone()], Settings::default());
        assert_eq!(ids(&set), ["ClusterStepPolicy/zzz-old"]);
        assert_eq!(issues[0].policy, "ClusterStepPolicy/aaa-new");
        // Created in the same second: the one that sorts first by name counts as the older
        // (policy_set_from_objects sorts the objects by name).
        new.created = old.created.clone();
        let (set, _) = PolicySet::build(vec![new, old], Settings::default());
        assert_eq!(ids(&set), ["ClusterStepPolicy/aaa-new"]);
    }

    #[test]
    fn org_policies_are_outside_team_policies_whatever_the_priorities() {
        let (set, issues) = PolicySet::build(
            vec![
                namespaced(doc("team-early", -100, &[], &["bookend-t1"]), "team-a"),
                doc("org-late", 100, &[], &["bookend-o1"]),
                namespaced(doc("team-late", 5, &[], &["bookend-t2"]), "team-a"),
                doc("org-early", 1, &[], &["bookend-o2"]),
            ],
            Settings::default(),
        );
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(
            ids(&set),
            [
                "ClusterStepPolicy/org-early",
                "ClusterStepPolicy/org-late",
                "StepPolicy/team-a/team-early",
                "StepPolicy/team-a/team-late",
            ]
        );
    }

    #[test]
    fn admission_refuses_a_newcomer_that_clashes_whatever_its_kind() {
        let team = namespaced(
            with_volume(doc("team", 1, &[], &["bookend-team"]), "bookend-cache"),
            "team-a",
        );
        let (set, _) = PolicySet::build(vec![team.clone()], Settings::default());
        let org = with_volume(doc("org", 100, &[], &["bookend-org"]), "bookend-cache");
        let errors = set.conflicts(&org.id, &org.spec);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "spec.volumes[0].name");
        assert!(errors[0].message.contains("StepPolicy/team-a/team"));
        // Updating a policy does not clash with itself.
        assert!(set.conflicts(&team.id, &team.spec).is_empty());
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
            set.candidates(&subject(ns, &select::Labels::new(), &select::Labels::new()))
                .iter()
                .map(|p| p.id.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("team-a"), ["literal", "glob", "everywhere"]);
        assert_eq!(names("team-b"), ["glob", "everywhere", "other"]);
        assert_eq!(names("ops"), ["everywhere"]);
        assert_eq!(names("team-"), ["glob", "everywhere"]);
    }

    fn subject<'a>(
        namespace: &'a str,
        namespace_labels: &'a select::Labels,
        labels: &'a select::Labels,
    ) -> Subject<'a> {
        Subject {
            namespace,
            namespace_labels,
            labels,
            origin: Origin::Pipeline,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> select::Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn with_criteria(name: &str, priority: i32, criteria: serde_json::Value) -> PolicyDoc {
        let mut d = doc(name, priority, &[], &[&format!("bookend-{name}")]);
        d.spec.match_ = serde_json::from_value(criteria).unwrap();
        d
    }

    #[test]
    fn index_prunes_by_globs_and_required_labels() {
        use serde_json::json;
        let (set, issues) = PolicySet::build(
            vec![
                with_criteria("prefix", 1, json!({"namespaces": ["team-*", "ops"]})),
                with_criteria("suffix", 2, json!({"namespaces": ["*-prod"]})),
                with_criteria("infix", 3, json!({"namespaces": ["*-x-*"]})),
                with_criteria(
                    "label",
                    4,
                    json!({"namespaces": ["*"], "selector": {"matchLabels": {"app": "web"}}}),
                ),
                with_criteria(
                    "label-in",
                    5,
                    json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}}),
                ),
                with_criteria(
                    "ns-label",
                    6,
                    json!({"namespaceSelector": {"matchLabels": {"cost-center": "cc1"}}}),
                ),
                with_criteria(
                    "ns-name",
                    7,
                    json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}),
                ),
                with_criteria(
                    "not-in",
                    8,
                    json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}}),
                ),
            ],
            Settings::default(),
        );
        assert!(issues.is_empty(), "{issues:?}");
        let none = labels(&[]);
        let names = |s: Subject<'_>| {
            set.candidates(&s)
                .iter()
                .map(|p| p.id.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(subject("team-a", &none, &none)),
            ["prefix", "infix", "not-in"]
        );
        assert_eq!(
            names(subject("ops", &none, &none)),
            ["prefix", "infix", "ns-name", "not-in"]
        );
        assert_eq!(
            names(subject("pay-prod", &none, &none)),
            ["suffix", "infix", "not-in"]
        );
        let web = labels(&[("app", "web"), ("tier", "b")]);
        assert_eq!(
            names(subject("x", &none, &web)),
            ["infix", "label", "label-in", "not-in"]
        );
        let cc = labels(&[("cost-center", "cc1")]);
        assert_eq!(
            names(subject("x", &cc, &none)),
            ["infix", "ns-label", "not-in"]
        );
        // An explicit name label wins over the implied one.
        let renamed = labels(&[("kubernetes.io/metadata.name", "other")]);
        assert_eq!(
            names(subject("ops", &renamed, &none)),
            ["prefix", "infix", "not-in"]
        );
    }

    #[test]
    fn candidates_never_drop_a_match_and_matches_agrees_with_verdict() {
        use serde_json::json;
        let criteria = [
            json!({"namespaces": ["team-*"]}),
            json!({"namespaces": ["*-prod", "ops"]}),
            json!({"namespaces": ["t?am-[ab]"]}),
            json!({"namespaces": ["*"], "origin": "Standalone"}),
            json!({"selector": {"matchLabels": {"app": "web"}}}),
            json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}}),
            json!({"selector": {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}}),
            json!({"namespaceSelector": {"matchLabels": {"cost-center": "cc1"}}}),
            json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}}),
            json!({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}}),
            json!({}),
        ];
        let mut docs: Vec<PolicyDoc> = criteria
            .iter()
            .enumerate()
            .map(|(i, c)| with_criteria(&format!("p{i}"), i as i32, c.clone()))
            .collect();
        docs[0].spec.exclude =
            serde_json::from_value(json!({"selector": {"matchLabels": {"app": "web"}}})).unwrap();
        docs[4].spec.exclude = serde_json::from_value(json!({"namespaces": ["ops"]})).unwrap();
        let mut local = doc("local", 99, &[], &["bookend-local"]);
        local.id = PolicyId::Namespaced {
            namespace: "team-a".into(),
            name: "local".into(),
        };
        docs.push(local);
        let (set, issues) = PolicySet::build(docs, Settings::default());
        assert!(issues.is_empty(), "{issues:?}");
        let label_sets = [
            labels(&[]),
            labels(&[("app", "web")]),
            labels(&[("tier", "b"), ("app", "api")]),
            labels(&[("cost-center", "cc1"), ("env", "dev")]),
            labels(&[("kubernetes.io/metadata.name", "ops")]),
        ];
        for ns in ["team-a", "team-b", "tam-a", "ops", "pay-prod", "prod", "x"] {
            for ns_labels in &label_sets {
                for run_labels in &label_sets {
                    for origin in [Origin::Pipeline, Origin::Standalone] {
                        let s = Subject {
                            namespace: ns,
                            namespace_labels: ns_labels,
                            labels: run_labels,
                            origin,
                        };
                        let candidates = set.candidates(&s);
                        for p in set.policies() {
                            let matched = p.verdict(&s) == Verdict::Matched;
                            assert_eq!(p.matches(&s), matched, "{} {s:?}", p.id);
                            if matched {
                                assert!(
                                    candidates.iter().any(|c| c.id == p.id),
                                    "{} missing for {s:?}",
                                    p.id
                                );
                            }
                        }
                    }
                }
            }
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
