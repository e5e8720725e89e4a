//! Matching: namespace globs, label selectors and origin, compiled once when a policy loads.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Expression, SelectorExt};

use super::FieldError;
use super::api::{Criteria, OriginMatch};
use crate::tekton::Origin;

/// Labels as a sorted map.
pub type Labels = BTreeMap<String, String>;

/// What matching looks at: the TaskRun's namespace, its namespace's labels, its own labels and
/// its origin.
#[derive(Clone, Debug)]
pub struct Subject<'a> {
    pub namespace: &'a str,
    /// Labels of the namespace (`kubernetes.io/metadata.name` is implied, as Kubernetes sets it
    /// on every namespace).
    pub namespace_labels: &'a Labels,
    pub labels: &'a Labels,
    pub origin: Origin,
}

// === impl Glob ===

/// A shell-style glob on namespace names: `*`, `?`, `[abc]`, `[a-z]`, `[!a-z]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyRun,
    AnyOne,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    /// Compiles `pattern`; the error says what is wrong with it.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("empty glob".to_owned());
        }
        let mut tokens = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                }
                '?' => tokens.push(Token::AnyOne),
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut closed = false;
                    while let Some(c) = chars.next() {
                        if c == ']' && !ranges.is_empty() {
                            closed = true;
                            break;
                        }
                        if chars.peek() == Some(&'-') {
                            chars.next();
                            match chars.next() {
                                Some(']') => {
                                    ranges.push((c, c));
                                    ranges.push(('-', '-'));
                                    closed = true;
                                    break;
                                }
                                Some(end) if end >= c => ranges.push((c, end)),
                                Some(end) => {
                                    return Err(format!(
                                        "invalid range {c}-{end} in glob {pattern:?}"
                                    ));
                                }
                                None => break,
                            }
                        } else {
                            ranges.push((c, c));
                        }
                    }
                    if !closed {
                        return Err(format!("unclosed [ in glob {pattern:?}"));
                    }
                    tokens.push(Token::Class { negated, ranges });
                }
                ']' => return Err(format!("unmatched ] in glob {pattern:?}")),
                other => tokens.push(Token::Literal(other)),
            }
        }
        Ok(Self {
            pattern: pattern.to_owned(),
            tokens,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// The literal text when the glob has no wildcard.
    pub fn literal(&self) -> Option<String> {
        self.tokens
            .iter()
            .map(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// The literal text every match starts with (empty when the glob starts with a wildcard).
    pub fn literal_prefix(&self) -> String {
        self.tokens
            .iter()
            .map_while(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// The literal text every match ends with (empty when the glob ends with a wildcard).
    pub fn literal_suffix(&self) -> String {
        let mut suffix: Vec<char> = self
            .tokens
            .iter()
            .rev()
            .map_while(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect();
        suffix.reverse();
        suffix.into_iter().collect()
    }

    /// Whether `text` matches the whole glob.
    pub fn matches(&self, text: &str) -> bool {
        // Iterative matcher with single-star backtracking: linear for the patterns people write.
        // `t` is a byte offset into `text`; no allocation.
        let next = |t: usize| text[t..].chars().next();
        let (mut t, mut p) = (0, 0);
        let mut star: Option<(usize, usize)> = None;
        while let Some(c) = next(t) {
            match self.tokens.get(p) {
                Some(Token::AnyRun) => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                Some(token) if token.matches_char(c) => {
                    t += c.len_utf8();
                    p += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((sp, st)) => {
                    let skipped = next(st).map_or(1, char::len_utf8);
                    p = sp + 1;
                    t = st + skipped;
                    star = Some((sp, t));
                }
                None => return false,
            }
        }
        self.tokens[p..].iter().all(|t| *t == Token::AnyRun)
    }
}

impl Token {
    fn matches_char(&self, c: char) -> bool {
        match self {
            Token::Literal(l) => *l == c,
            Token::AnyOne => true,
            Token::AnyRun => false,
            Token::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
            }
        }
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

// === impl Selector ===

/// A compiled Kubernetes LabelSelector (matchLabels and matchExpressions, ANDed).
///
/// Matching is kube-core's ([`kube::core::Selector`] and its [`Expression`]s); what this type
/// adds is what kube-core does not do: checking keys, values and operators as the API server
/// does when the selector is written (kube-core accepts `In` with no values and any key), so a
/// policy with a selector that could never be written into a Kubernetes object is refused with
/// the field, and saying which requirement failed, for `render --explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    expressions: Vec<Expression>,
}

impl Selector {
    /// Compiles and checks a LabelSelector as the API server would.
    pub fn new(selector: &LabelSelector) -> Result<Self, FieldError> {
        let err = |path: String, message: String| FieldError { path, message };
        for (key, value) in selector.match_labels.iter().flatten() {
            let path = format!("matchLabels[{key}]");
            check_label_key(key).map_err(|m| err(path.clone(), m))?;
            check_label_value(value).map_err(|m| err(path.clone(), m))?;
        }
        for (i, expr) in selector.match_expressions.iter().flatten().enumerate() {
            let path = format!("matchExpressions[{i}]");
            check_label_key(&expr.key).map_err(|m| err(format!("{path}.key"), m))?;
            let values = expr.values.as_deref().unwrap_or_default();
            for (j, v) in values.iter().enumerate() {
                check_label_value(v).map_err(|m| err(format!("{path}.values[{j}]"), m))?;
            }
            match (expr.operator.as_str(), values.is_empty()) {
                ("In" | "NotIn", true) => {
                    return Err(err(
                        format!("{path}.values"),
                        format!("operator {} needs at least one value", expr.operator),
                    ));
                }
                ("Exists" | "DoesNotExist", false) => {
                    return Err(err(
                        format!("{path}.values"),
                        format!("operator {} takes no values", expr.operator),
                    ));
                }
                ("In" | "NotIn" | "Exists" | "DoesNotExist", _) => {}
                (other, _) => {
                    return Err(err(
                        format!("{path}.operator"),
                        format!(
                            "unknown operator {other:?}; use In, NotIn, Exists or DoesNotExist"
                        ),
                    ));
                }
            }
        }
        let compiled = kube::core::Selector::try_from(selector.clone())
            .map_err(|e| err(String::new(), e.to_string()))?;
        Ok(Self {
            expressions: compiled.into_iter().collect(),
        })
    }

    /// True for `{}`, which selects everything.
    pub fn is_empty(&self) -> bool {
        self.expressions.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn holds(&self, labels: &Labels) -> bool {
        self.expressions.iter().all(|e| e.matches(labels))
    }

    /// A label key and the values one of which any selected object must carry under it (from
    /// the first `matchLabels` entry, else the first `In` expression), for indexing.
    pub fn required_label(&self) -> Option<(&str, Vec<&str>)> {
        let equals = self.expressions.iter().find_map(|e| match e {
            Expression::Equal(k, v) => Some((k.as_str(), vec![v.as_str()])),
            _ => None,
        });
        equals.or_else(|| {
            self.expressions.iter().find_map(|e| match e {
                Expression::In(k, vs) => {
                    Some((k.as_str(), vs.iter().map(String::as_str).collect()))
                }
                _ => None,
            })
        })
    }

    /// `Ok(())` when `labels` satisfy every requirement, else why the first one that fails
    /// does (text for `render --explain`).
    pub fn check(&self, labels: &Labels) -> Result<(), String> {
        match self.expressions.iter().find(|e| !e.matches(labels)) {
            None => Ok(()),
            Some(e) => Err(describe_failure(e, labels)),
        }
    }
}

fn describe_failure(expression: &Expression, labels: &Labels) -> String {
    let actual = |k: &str| match labels.get(k) {
        Some(v) => format!("{k}={v}"),
        None => format!("{k} is not set"),
    };
    let list = |vs: &std::collections::BTreeSet<String>| {
        vs.iter().map(String::as_str).collect::<Vec<_>>().join(",")
    };
    match expression {
        Expression::Equal(k, v) => format!("needs {k}={v}, but {}", actual(k)),
        Expression::NotEqual(k, v) => format!("needs {k}!={v}, but {}", actual(k)),
        Expression::In(k, vs) => format!("needs {k} in ({}), but {}", list(vs), actual(k)),
        Expression::NotIn(k, vs) => {
            format!("needs {k} not in ({}), but {}", list(vs), actual(k))
        }
        Expression::Exists(k) => format!("needs label {k}, which is not set"),
        Expression::DoesNotExist(k) => format!("needs no label {k}, but {}", actual(k)),
    }
}

fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && (p.is_empty() || p.len() > 253 || !p.split('.').all(is_dns_label))
    {
        return Err(format!(
            "invalid label key {key:?}: the prefix must be a DNS subdomain"
        ));
    }
    if !is_qualified_name_part(name) {
        return Err(format!(
            "invalid label key {key:?}: the name must be at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
        ));
    }
    Ok(())
}

fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_qualified_name_part(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {value:?}: at most 63 characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
        ))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `s` is a DNS-1123 label (lowercase alphanumerics and `-`, at most 63 characters).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

// === impl Matcher ===

/// Compiled [`Criteria`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    pub namespaces: Vec<Glob>,
    pub namespace_selector: Option<Selector>,
    pub selector: Option<Selector>,
    pub origin: OriginMatch,
}

/// One criterion of a [`Matcher`]; an evaluation says which one decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Criterion {
    Namespaces,
    NamespaceSelector,
    Selector,
    Origin,
}

impl Criterion {
    /// Every criterion, in the order they are evaluated and explained.
    pub const ALL: [Self; 4] = [
        Self::Namespaces,
        Self::NamespaceSelector,
        Self::Selector,
        Self::Origin,
    ];
}

impl Matcher {
    /// Compiles criteria; errors carry paths relative to the criteria object.
    pub fn new(criteria: &Criteria) -> Result<Self, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut namespaces = Vec::new();
        for (i, pattern) in criteria.namespaces.iter().enumerate() {
            match Glob::new(pattern) {
                Ok(g) => namespaces.push(g),
                Err(message) => errors.push(FieldError {
                    path: format!("namespaces[{i}]"),
                    message,
                }),
            }
        }
        let mut compile = |field: &str, s: &Option<LabelSelector>| {
            s.as_ref().and_then(|s| match Selector::new(s) {
                Ok(s) => Some(s),
                Err(e) => {
                    errors.push(FieldError {
                        path: format!("{field}.{}", e.path),
                        message: e.message,
                    });
                    None
                }
            })
        };
        let namespace_selector = compile("namespaceSelector", &criteria.namespace_selector);
        let selector = compile("selector", &criteria.selector);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            namespaces,
            namespace_selector,
            selector,
            origin: criteria.origin.unwrap_or_default(),
        })
    }

    /// Whether `criterion` holds for `subject`; `None` when the criterion is not given.
    fn holds(&self, criterion: Criterion, subject: &Subject<'_>) -> Option<bool> {
        match criterion {
            Criterion::Namespaces => (!self.namespaces.is_empty())
                .then(|| self.namespaces.iter().any(|g| g.matches(subject.namespace))),
            Criterion::NamespaceSelector => self.namespace_selector.as_ref().map(|s| {
                // The API server sets the name label on every namespace; offline input
                // may lack it, and then it is implied.
                if subject.namespace_labels.contains_key(NAME_LABEL) {
                    s.holds(subject.namespace_labels)
                } else {
                    s.holds(&namespace_labels(subject))
                }
            }),
            Criterion::Selector => self.selector.as_ref().map(|s| s.holds(subject.labels)),
            Criterion::Origin => {
                (self.origin != OriginMatch::Any).then(|| origin_holds(self.origin, subject.origin))
            }
        }
    }

    /// Match semantics: every criterion given must hold. `Err` names the first that does not.
    pub fn all(&self, subject: &Subject<'_>) -> Result<(), Criterion> {
        match Criterion::ALL
            .into_iter()
            .find(|&c| self.holds(c, subject) == Some(false))
        {
            Some(failed) => Err(failed),
            None => Ok(()),
        }
    }

    /// Exclude semantics: the first criterion given that holds, if any.
    pub fn any(&self, subject: &Subject<'_>) -> Option<Criterion> {
        Criterion::ALL
            .into_iter()
            .find(|&c| self.holds(c, subject) == Some(true))
    }

    /// Why `criterion` holds or does not hold for `subject`, as `render --explain` says it.
    pub fn describe(&self, criterion: Criterion, subject: &Subject<'_>) -> String {
        let ns = subject.namespace;
        match criterion {
            Criterion::Namespaces => match self.namespaces.iter().find(|g| g.matches(ns)) {
                Some(g) => format!("namespace {ns} matches {g}"),
                None => format!("namespace {ns} matches none of [{}]", self.globs()),
            },
            Criterion::NamespaceSelector => {
                self.namespace_selector
                    .as_ref()
                    .map_or_else(String::new, |s| match s.check(&namespace_labels(subject)) {
                        Ok(()) => "namespaceSelector holds".to_owned(),
                        Err(e) => format!("namespaceSelector: {e}"),
                    })
            }
            Criterion::Selector => {
                self.selector
                    .as_ref()
                    .map_or_else(String::new, |s| match s.check(subject.labels) {
                        Ok(()) => "selector holds".to_owned(),
                        Err(e) => format!("selector: {e}"),
                    })
            }
            Criterion::Origin if origin_holds(self.origin, subject.origin) => {
                format!("origin is {:?}", subject.origin)
            }
            Criterion::Origin => format!(
                "origin is {:?}, policy wants {:?}",
                subject.origin, self.origin
            ),
        }
    }

    /// Why every criterion given holds (they do), as `render --explain` says it.
    pub fn describe_match(&self, subject: &Subject<'_>) -> String {
        let held: Vec<String> = Criterion::ALL
            .into_iter()
            .filter(|&c| self.holds(c, subject).is_some())
            .map(|c| self.describe(c, subject))
            .collect();
        if held.is_empty() {
            "no match criteria: all TaskRuns".to_owned()
        } else {
            held.join(", ")
        }
    }

    fn globs(&self) -> String {
        self.namespaces
            .iter()
            .map(Glob::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn origin_holds(wanted: OriginMatch, actual: Origin) -> bool {
    match wanted {
        OriginMatch::Any => true,
        OriginMatch::Standalone => actual == Origin::Standalone,
        OriginMatch::Pipeline => actual == Origin::Pipeline,
    }
}

/// The label Kubernetes sets on every namespace to its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn namespace_labels(subject: &Subject<'_>) -> Labels {
    let mut labels = subject.namespace_labels.clone();
    labels
        .entry(NAME_LABEL.to_owned())
        .or_insert_with(|| subject.namespace.to_owned());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn globs_match_like_a_shell() {
        let g = |p: &str| Glob::new(p).unwrap();
        assert!(g("team-*").matches("team-a"));
        assert!(g("team-*").matches("team-"));
        assert!(!g("team-*").matches("teams-a"));
        assert!(g("*-prod").matches("payments-prod"));
        assert!(!g("*-prod").matches("payments-prod2"));
        assert!(g("a*b*c").matches("aXXbYYc"));
        assert!(!g("a*b*c").matches("aXXbYY"));
        assert!(g("ns-?").matches("ns-1"));
        assert!(!g("ns-?").matches("ns-12"));
        assert!(g("ns-[0-9]").matches("ns-7"));
        assert!(!g("ns-[!0-9]").matches("ns-7"));
        assert!(g("ns-[ab-]").matches("ns--"));
        assert!(g("*").matches(""));
        assert!(g("exact").matches("exact"));
        assert!(!g("exact").matches("exactly"));
        assert_eq!(g("exact").literal().as_deref(), Some("exact"));
        assert_eq!(g("team-*").literal(), None);
    }

    #[test]
    fn invalid_globs_are_errors() {
        assert!(Glob::new("").is_err());
        assert!(Glob::new("team-[a").unwrap_err().contains("unclosed"));
        assert!(Glob::new("team-]").unwrap_err().contains("unmatched"));
        assert!(Glob::new("ns-[z-a]").unwrap_err().contains("invalid range"));
    }

    fn selector(labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect()
            }),
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, op, vs)| LabelSelectorRequirement {
                        key: (*k).into(),
                        operator: (*op).into(),
                        values: (!vs.is_empty())
                            .then(|| vs.iter().map(|v| (*v).to_owned()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn label_selectors_have_kubernetes_semantics() {
        let s = Selector::new(&selector(
            &[("team", "a")],
            &[
                ("tier", "In", &["gold", "silver"]),
                ("env", "NotIn", &["dev"]),
                ("owner", "Exists", &[]),
                ("skip", "DoesNotExist", &[]),
            ],
        ))
        .unwrap();
        let good = labels(&[("team", "a"), ("tier", "gold"), ("owner", "x")]);
        assert!(s.check(&good).is_ok());
        let mut l = good.clone();
        l.insert("env".into(), "dev".into());
        assert!(s.check(&l).unwrap_err().contains("env not in"));
        let mut l = good.clone();
        l.insert("skip".into(), "1".into());
        assert!(s.check(&l).unwrap_err().contains("needs no label skip"));
        let mut l = good.clone();
        l.remove("owner");
        assert!(s.check(&l).is_err());
        let mut l = good.clone();
        l.insert("tier".into(), "bronze".into());
        assert!(s.check(&l).is_err());
        let mut l = good;
        l.insert("team".into(), "b".into());
        assert!(s.check(&l).unwrap_err().contains("team=a"));
        // NotIn holds when the label is absent, as in Kubernetes.
        let s = Selector::new(&selector(&[], &[("env", "NotIn", &["dev"])])).unwrap();
        assert!(s.check(&Labels::new()).is_ok());
        assert!(Selector::new(&LabelSelector::default()).unwrap().is_empty());
    }

    #[test]
    fn malformed_selectors_name_the_field() {
        let e = Selector::new(&selector(&[], &[("a", "In", &[])])).unwrap_err();
        assert_eq!(e.path, "matchExpressions[0].values");
        let e = Selector::new(&selector(&[], &[("a", "Exists", &["x"])])).unwrap_err();
        assert_eq!(e.path, "matchExpressions[0].values");
        let e = Selector::new(&selector(&[], &[("a", "Equals", &["x"])])).unwrap_err();
        assert_eq!(e.path, "matchExpressions[0].operator");
        let e = Selector::new(&selector(&[("bad key!", "x")], &[])).unwrap_err();
        assert!(e.path.starts_with("matchLabels"));
        let e = Selector::new(&selector(&[("k", "bad value!")], &[])).unwrap_err();
        assert!(e.message.contains("label value"));
        assert!(Selector::new(&selector(&[("example.com/team", "a")], &[])).is_ok());
        assert!(Selector::new(&selector(&[("Bad_Prefix/team", "a")], &[])).is_err());
    }

    fn subject<'a>(
        ns: &'a str,
        ns_labels: &'a Labels,
        labels: &'a Labels,
        origin: Origin,
    ) -> Subject<'a> {
        Subject {
            namespace: ns,
            namespace_labels: ns_labels,
            labels,
            origin,
        }
    }

    #[test]
    fn match_needs_every_criterion_exclude_needs_any() {
        let criteria = Criteria {
            namespaces: vec!["team-*".into()],
            namespace_selector: Some(selector(&[("tier", "gold")], &[])),
            selector: None,
            origin: Some(OriginMatch::Pipeline),
        };
        let m = Matcher::new(&criteria).unwrap();
        let gold = labels(&[("tier", "gold")]);
        let none = Labels::new();
        let held = subject("team-a", &gold, &none, Origin::Pipeline);
        assert_eq!(m.all(&held), Ok(()));
        assert_eq!(
            m.describe_match(&held),
            "namespace team-a matches team-*, namespaceSelector holds, origin is Pipeline"
        );
        let ops = subject("ops", &gold, &none, Origin::Pipeline);
        assert_eq!(m.all(&ops), Err(Criterion::Namespaces));
        assert_eq!(
            m.describe(Criterion::Namespaces, &ops),
            "namespace ops matches none of [team-*]"
        );
        let bronze = subject("team-a", &none, &none, Origin::Pipeline);
        assert_eq!(m.all(&bronze), Err(Criterion::NamespaceSelector));
        assert_eq!(
            m.describe(Criterion::NamespaceSelector, &bronze),
            "namespaceSelector: needs tier=gold, but tier is not set"
        );
        let standalone = subject("team-a", &gold, &none, Origin::Standalone);
        assert_eq!(m.all(&standalone), Err(Criterion::Origin));
        assert_eq!(
            m.describe(Criterion::Origin, &standalone),
            "origin is Standalone, policy wants Pipeline"
        );

        assert_eq!(
            m.any(&subject("ops", &none, &none, Origin::Standalone)),
            None
        );
        assert_eq!(
            m.any(&subject("team-x", &none, &none, Origin::Standalone)),
            Some(Criterion::Namespaces)
        );
        assert_eq!(
            m.any(&subject("ops", &gold, &none, Origin::Standalone)),
            Some(Criterion::NamespaceSelector)
        );
        let pipeline = subject("ops", &none, &none, Origin::Pipeline);
        assert_eq!(m.any(&pipeline), Some(Criterion::Origin));
        assert_eq!(
            m.describe(Criterion::Origin, &pipeline),
            "origin is Pipeline"
        );

        let empty = Matcher::new(&Criteria::default()).unwrap();
        let anything = subject("x", &none, &none, Origin::Standalone);
        assert_eq!(empty.all(&anything), Ok(()));
        assert_eq!(empty.any(&anything), None);
        assert_eq!(
            empty.describe_match(&anything),
            "no match criteria: all TaskRuns"
        );
    }

    #[test]
    fn namespace_selector_sees_the_implied_name_label() {
        let m = Matcher::new(&Criteria {
            namespace_selector: Some(selector(&[("kubernetes.io/metadata.name", "team-a")], &[])),
            ..Criteria::default()
        })
        .unwrap();
        let none = Labels::new();
        assert_eq!(
            m.all(&subject("team-a", &none, &none, Origin::Standalone)),
            Ok(())
        );
        let other = subject("team-b", &none, &none, Origin::Standalone);
        assert_eq!(m.all(&other), Err(Criterion::NamespaceSelector));
        assert_eq!(
            m.describe(Criterion::NamespaceSelector, &other),
            "namespaceSelector: needs kubernetes.io/metadata.name=team-a, but kubernetes.io/metadata.name=team-b"
        );
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("bookend-creds"));
        assert!(is_dns_label("a1"));
        assert!(!is_dns_label("Bookend"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("a-"));
        assert!(!is_dns_label("a_b"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
