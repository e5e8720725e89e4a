//! The [`PolicySet`]: every valid policy compiled, in evaluation order, with the owners of the
//! step and volume names they inject. Building it is where cross-policy rules live (duplicate
//! ids, name conflicts and which policy has precedence), so the loader, `bookend validate` and
//! the admission of policy objects all answer them with the one `Owners` check.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::index::Index;
use super::select::Subject;
use super::validate::limits;
use super::{FieldError, Issue, IssueKind, Policy, PolicyDoc, PolicyId, Settings, StepPolicySpec};

/// The validated policies, in evaluation order (priority, then name), with a namespace index.
#[derive(Clone, Debug, Default)]
pub struct PolicySet {
    policies: Vec<Policy>,
    settings: Settings,
    /// Which policies can match a TaskRun, by one criterion each policy needs.
    index: Index,
    /// Every policy's step names (`bookend test` reports which steps were injected).
    step_names: HashSet<String>,
    /// Every policy's step containers ([`Policy::containers`]): the Pod backstop asks for each
    /// container of every Pod.
    org_containers: HashSet<String>,
}

/// The step and volume names policies inject, by the scope they must be unique in: the org's
/// (ClusterStepPolicies apply anywhere, so their names are taken everywhere) and each
/// namespace's (a StepPolicy applies only in its own, so two teams may use the same names).
#[derive(Default)]
struct Names<'a> {
    steps: HashMap<&'a str, &'a PolicyId>,
    volumes: HashMap<&'a str, &'a PolicyId>,
}

/// Which policies own which injected names, and how much each scope holds, while a set is
/// built or checked against.
#[derive(Default)]
struct Owners<'a> {
    cluster: Names<'a>,
    namespaces: HashMap<&'a str, Names<'a>>,
    /// Bytes of the ClusterStepPolicies' specs.
    cluster_bytes: usize,
    /// StepPolicies and their specs' bytes per namespace.
    namespace_load: HashMap<&'a str, (usize, usize)>,
}

impl<'a> Owners<'a> {
    fn claim(&mut self, id: &'a PolicyId, spec: &'a StepPolicySpec, bytes: usize) {
        let names = match id {
            PolicyId::Cluster { .. } => {
                self.cluster_bytes += bytes;
                &mut self.cluster
            }
            PolicyId::Namespaced { namespace, .. } => {
                let load = self.namespace_load.entry(namespace).or_default();
                load.0 += 1;
                load.1 += bytes;
                self.namespaces.entry(namespace).or_default()
            }
        };
        for step in spec.pre_steps.iter().chain(&spec.post_steps) {
            names.steps.insert(&step.name, id);
        }
        for volume in &spec.volumes {
            names.volumes.insert(&volume.name, id);
        }
    }

    /// The names of `spec` that another policy in its scope already owns, and whether its scope
    /// has room for it: the one check of the loader, `bookend validate` and the admission of
    /// policy objects. A ClusterStepPolicy is checked against ClusterStepPolicies only (a team
    /// can never block the org: a StepPolicy that clashes with it is the one left out), a
    /// StepPolicy against the org's and its own namespace's.
    fn clashes(&self, id: &PolicyId, spec: &StepPolicySpec, bytes: usize) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let scopes: Vec<&Names<'a>> = match id {
            PolicyId::Cluster { .. } => vec![&self.cluster],
            PolicyId::Namespaced { namespace, .. } => {
                let mut scopes = vec![&self.cluster];
                scopes.extend(self.namespaces.get(namespace.as_str()));
                scopes
            }
        };
        let owner_of = |volumes: bool, name: &str| {
            scopes.iter().find_map(|names| {
                let map = if volumes {
                    &names.volumes
                } else {
                    &names.steps
                };
                map.get(name).copied().filter(|owner| *owner != id)
            })
        };
        for (list, steps) in [
            ("preSteps", &spec.pre_steps),
            ("postSteps", &spec.post_steps),
        ] {
            for (i, step) in steps.iter().enumerate() {
                if let Some(owner) = owner_of(false, &step.name) {
                    errors.push(FieldError::new(
                        format!("spec.{list}[{i}].name"),
                        format!(
                            "step name {:?} is already used by {owner}; injected step names must be unique among the policies that can apply to one TaskRun (rename one of them)",
                            step.name
                        ),
                    ));
                }
            }
        }
        for (i, volume) in spec.volumes.iter().enumerate() {
            if let Some(owner) = owner_of(true, &volume.name) {
                errors.push(FieldError::new(
                    format!("spec.volumes[{i}].name"),
                    format!(
                        "volume name {:?} is already used by {owner}; injected volume names must be unique among the policies that can apply to one TaskRun (rename one of them)",
                        volume.name
                    ),
                ));
            }
        }
        match id {
            PolicyId::Cluster { .. } => {
                if self.cluster_bytes + bytes > limits::MAX_CLUSTER_SPEC_BYTES {
                    errors.push(FieldError::new(
                        "spec",
                        format!(
                            "the ClusterStepPolicies would hold {} bytes of specs; together they may hold at most {} ({} KiB): remove or shrink others first",
                            self.cluster_bytes + bytes,
                            limits::MAX_CLUSTER_SPEC_BYTES,
                            limits::MAX_CLUSTER_SPEC_BYTES / 1024
                        ),
                    ));
                }
            }
            PolicyId::Namespaced { namespace, .. } => {
                let (count, held) = self
                    .namespace_load
                    .get(namespace.as_str())
                    .copied()
                    .unwrap_or_default();
                if count + 1 > limits::MAX_STEP_POLICIES_PER_NAMESPACE {
                    errors.push(FieldError::new(
                        "metadata.name",
                        format!(
                            "namespace {namespace} already has {count} StepPolicies; a namespace may have at most {}: remove one first",
                            limits::MAX_STEP_POLICIES_PER_NAMESPACE
                        ),
                    ));
                } else if held + bytes > limits::MAX_NAMESPACE_SPEC_BYTES {
                    errors.push(FieldError::new(
                        "spec",
                        format!(
                            "namespace {namespace}'s StepPolicies would hold {} bytes of specs; together they may hold at most {} ({} KiB): remove or shrink others first",
                            held + bytes,
                            limits::MAX_NAMESPACE_SPEC_BYTES,
                            limits::MAX_NAMESPACE_SPEC_BYTES / 1024
                        ),
                    ));
                }
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
                let clashes = owners.clashes(&policy.id, &policy.spec, policy.size);
                if clashes.is_empty() {
                    owners.claim(&policy.id, &policy.spec, policy.size);
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
        let step_names = policies
            .iter()
            .flat_map(|p| p.step_names().map(str::to_owned))
            .collect();
        let org_containers = policies
            .iter()
            .flat_map(|p| p.containers.iter().cloned())
            .collect();
        let set = Self {
            index: Index::build(&policies),
            policies,
            settings,
            step_names,
            org_containers,
        };
        (set, issues)
    }

    /// The names of a policy being admitted (`id`, `spec`) that a loaded policy other than
    /// itself already uses: what the policy-object webhook refuses, by the same check
    /// [`PolicySet::build`] applies.
    pub fn conflicts(&self, id: &PolicyId, spec: &StepPolicySpec) -> Vec<FieldError> {
        let mut owners = Owners::default();
        for policy in self.policies.iter().filter(|p| &p.id != id) {
            owners.claim(&policy.id, &policy.spec, policy.size);
        }
        owners.clashes(id, spec, super::spec_size(spec))
    }

    /// All policies in evaluation order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether `container` is the Pod container of a step some policy defines.
    pub fn is_org_container(&self, container: &str) -> bool {
        self.org_containers.contains(container)
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

    /// Whether some policy defines a step named `name`.
    pub fn defines_step(&self, name: &str) -> bool {
        self.step_names.contains(name)
    }

    /// Finds a policy by id.
    pub fn get(&self, id: &PolicyId) -> Option<&Policy> {
        self.policies.iter().find(|p| &p.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::doc;

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
            "test.yaml: ClusterStepPolicy/first: spec.preSteps[0].name: step name \"bookend-x\" is already used by ClusterStepPolicy/second; injected step names must be unique among the policies that can apply to one TaskRun (rename one of them)"
        );
        assert!(set.defines_step("bookend-x"));
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
    fn a_team_policy_never_blocks_the_org_and_teams_never_block_each_other() {
        let team = namespaced(
            with_volume(doc("team", 1, &[], &["bookend-team"]), "bookend-cache"),
            "team-a",
        );
        let (set, _) = PolicySet::build(vec![team.clone()], Settings::default());
        // The org's policy with the team's names is admitted (issue "Sealed", class 5) ...
        let org = with_volume(doc("org", 100, &[], &["bookend-team"]), "bookend-cache");
        assert!(set.conflicts(&org.id, &org.spec).is_empty());
        // ... and wins in the set: the team's policy is the one left out, as a Conflict.
        let (both, issues) = PolicySet::build(vec![team.clone(), org.clone()], Settings::default());
        assert_eq!(ids(&both), ["ClusterStepPolicy/org"]);
        assert!(
            issues
                .iter()
                .all(|i| i.kind == IssueKind::Conflict && i.policy == "StepPolicy/team-a/team"),
            "{issues:?}"
        );
        // Another team may use the same names in its own namespace; the same team may not.
        let other = namespaced(
            with_volume(doc("other", 1, &[], &["bookend-team"]), "bookend-cache"),
            "team-b",
        );
        assert!(set.conflicts(&other.id, &other.spec).is_empty());
        let twin = namespaced(
            with_volume(doc("twin", 1, &[], &["bookend-team"]), "bookend-cache"),
            "team-a",
        );
        let errors = set.conflicts(&twin.id, &twin.spec);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert_eq!(errors[1].path, "spec.volumes[0].name");
        assert!(errors[1].message.contains("StepPolicy/team-a/team"));
        // A team cannot take the org's names.
        let (org_set, _) = PolicySet::build(vec![org.clone()], Settings::default());
        let errors = org_set.conflicts(&team.id, &team.spec);
        assert!(
            errors[0].message.contains("ClusterStepPolicy/org"),
            "{errors:?}"
        );
        // Updating a policy does not clash with itself.
        assert!(set.conflicts(&team.id, &team.spec).is_empty());
    }

    #[test]
    fn each_namespace_and_the_org_have_budgets_of_their_own() {
        use crate::policy::validate::limits::MAX_STEP_POLICIES_PER_NAMESPACE;
        let n = MAX_STEP_POLICIES_PER_NAMESPACE;
        let mut docs: Vec<PolicyDoc> = (0..n + 2)
            .map(|i| {
                namespaced(
                    doc(&format!("t{i:02}"), 1, &[], &[&format!("bookend-t{i}")]),
                    "team-a",
                )
            })
            .collect();
        docs.push(namespaced(doc("b", 1, &[], &["bookend-b"]), "team-b"));
        docs.push(doc("org", 1, &[], &["bookend-org"]));
        let (set, issues) = PolicySet::build(docs, Settings::default());
        // team-a keeps its first n (file order), team-b and the org are untouched.
        assert_eq!(set.len(), n + 2);
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert!(
            issues
                .iter()
                .all(|i| i.message.contains("namespace team-a already has")),
            "{issues:?}"
        );
        let more = namespaced(doc("more", 1, &[], &["bookend-more"]), "team-a");
        assert!(
            set.conflicts(&more.id, &more.spec)[0]
                .message
                .contains("at most")
        );
        let elsewhere = namespaced(doc("more", 1, &[], &["bookend-more"]), "team-c");
        assert!(set.conflicts(&elsewhere.id, &elsewhere.spec).is_empty());
        let org = doc("org2", 1, &[], &["bookend-org2"]);
        assert!(set.conflicts(&org.id, &org.spec).is_empty());
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
}
