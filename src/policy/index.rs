//! The candidate index of a [`PolicySet`](super::PolicySet): which policies a TaskRun needs to
//! look at. A file of its own because it is the one place that knows how a criterion narrows
//! the search; filing globs and required labels (not only literal namespaces) took a review
//! with 10,000 policies from 15.0 M to 1.66 M instructions (docs/benchmarks.md, "Candidate
//! index").

use std::collections::HashMap;

use super::select::{self, Subject};
use super::{Policy, PolicyId};

/// The candidate index: each policy is filed under one criterion every TaskRun it matches must
/// meet (its namespace globs, else a required TaskRun label, else a required namespace label),
/// so a request looks only at the policies filed under what it has, plus the few that cannot
/// be indexed (no criterion, or globs like `*` or `*x*`).
#[derive(Clone, Debug, Default)]
pub(super) struct Index {
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
    pub(super) fn build(policies: &[Policy]) -> Self {
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
    pub(super) fn candidates(&self, subject: &Subject<'_>) -> Vec<usize> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::doc;
    use crate::policy::{PolicyDoc, PolicySet, Settings, Verdict};
    use crate::tekton::Origin;

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
}
