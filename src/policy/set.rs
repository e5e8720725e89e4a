//! The [`PolicySet`]: every valid policy compiled, in evaluation order, with the owners of the
//! step and volume names they inject. Building it is where cross-policy rules live (duplicate
//! ids, name conflicts and which policy has precedence), so the loader, `bookend validate` and
//! the admission of policy objects all answer them with the one `Owners` check.

use std::collections::{BTreeMap, HashMap};

use super::index::Index;
use super::select::Subject;
use super::{FieldError, Issue, IssueKind, Policy, PolicyDoc, PolicyId, Settings, StepPolicySpec};

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
}
