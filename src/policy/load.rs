//! Reading policies from YAML text and API objects, with errors that name the source, the
//! policy and the field. Pure: the files these texts come from are listed and read by
//! [`crate::source::walk`].

use serde::Deserialize;
use serde_json::Value;

use super::api::{API_VERSION, StepPolicySpec};
use super::{Issue, IssueKind, PolicyDoc, PolicyId, PolicySet, Settings};

/// Parses a multi-document YAML (or JSON) stream into JSON values, skipping empty documents.
/// The error names the document (1-based) that failed.
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut docs = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let mut value = Value::deserialize(doc).map_err(|e| format!("document {}: {e}", i + 1))?;
        octal_modes(&mut value);
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// File modes as Kubernetes reads them: its YAML (1.1) takes `defaultMode: 0400` for the octal
/// 256, where this parser keeps the string "0400". Only `defaultMode` and `mode`, the fields
/// where octal is the idiom (a quoted string there is invalid for Kubernetes anyway).
fn octal_modes(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, v) in fields.iter_mut() {
                if matches!(key.as_str(), "defaultMode" | "mode")
                    && let Value::String(s) = v
                    && s.len() > 1
                    && s.starts_with('0')
                    && let Ok(n) = u32::from_str_radix(&s[1..], 8)
                {
                    *v = Value::from(n);
                } else {
                    octal_modes(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(octal_modes),
        _ => {}
    }
}

/// Policies loaded and built: the set (invalid policies left out) and every problem found.
#[derive(Debug)]
pub struct LoadedSet {
    pub set: PolicySet,
    pub issues: Vec<Issue>,
    /// Policies that parsed (valid or not).
    pub documents: usize,
    /// Documents and files that are not bookend policies (another tool's objects in the same
    /// directory: a Kustomization, Tasks, ConfigMaps), left out, each with a note.
    pub skipped: Vec<Issue>,
}

impl LoadedSet {
    /// Builds `docs` into a set; `issues` are the problems found while reading them, kept
    /// ahead of the set's own.
    pub fn build(docs: Vec<PolicyDoc>, mut issues: Vec<Issue>, settings: Settings) -> Self {
        let documents = docs.len();
        let (set, build_issues) = PolicySet::build(docs, settings);
        issues.extend(build_issues);
        Self {
            set,
            issues,
            documents,
            skipped: Vec::new(),
        }
    }
}

/// Validates and builds the policies in one YAML (or JSON) stream; `source` names it in issues.
pub fn policy_set_from_yaml(source: &str, text: &str, settings: Settings) -> LoadedSet {
    let (docs, issues) = parse_policies(source, text);
    LoadedSet::build(docs, issues, settings)
}

/// Validates and builds policy objects (from the API server); `source` names them in issues.
/// Their order does not matter: between two objects created at the same second, the one that
/// sorts first by namespace and name counts as the older.
pub fn policy_set_from_objects(source: &str, objects: &[Value], settings: Settings) -> LoadedSet {
    let mut docs = Vec::new();
    let mut issues = Vec::new();
    let text = |object: &Value, key: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut objects: Vec<&Value> = objects.iter().collect();
    objects.sort_by_key(|o| (text(o, "namespace"), text(o, "name")));
    for object in objects {
        let label = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_owned();
        match policy_from_value(source, &label, object.clone()) {
            Ok(doc) => docs.push(doc),
            Err(found) => issues.extend(found),
        }
    }
    LoadedSet::build(docs, issues, settings)
}

/// What one YAML stream holds: its policies, the problems found, and the documents that are
/// not bookend policies (left out, each with a note).
#[derive(Debug, Default)]
pub struct Parsed {
    pub docs: Vec<PolicyDoc>,
    pub issues: Vec<Issue>,
    pub skipped: Vec<Issue>,
}

/// Parses every policy in one YAML stream (`List` objects unpacked); documents of another API
/// group than bookend's (a Kustomization, a Task, a ConfigMap) are skipped with a note, so that
/// a GitOps directory can be validated as it is. A document of bookend's group or with a
/// policy kind is always read as a policy: a typo there is an error, never a skip.
pub fn parse_policies(source: &str, text: &str) -> (Vec<PolicyDoc>, Vec<Issue>) {
    let parsed = parse_policy_stream(source, text);
    (parsed.docs, parsed.issues)
}

/// [`parse_policies`] with the skipped documents.
pub fn parse_policy_stream(source: &str, text: &str) -> Parsed {
    let (docs, issues, skipped) = parse_stream(source, text);
    Parsed {
        docs,
        issues,
        skipped,
    }
}

/// Another tool's object: not of bookend's API group, and not of a policy kind.
fn foreign(value: &Value) -> Option<String> {
    let kind = value.get("kind").and_then(Value::as_str)?;
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())?;
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    (!matches!(kind, "ClusterStepPolicy" | "StepPolicy" | "List") && group != "bookend.dev")
        .then(|| format!("{kind} ({api_version})"))
}

type Stream = (Vec<PolicyDoc>, Vec<Issue>, Vec<Issue>);

fn parse_stream(source: &str, text: &str) -> Stream {
    let values = match yaml_documents(text) {
        Ok(v) => v,
        Err(message) => {
            return (
                Vec::new(),
                vec![Issue {
                    source: source.to_owned(),
                    policy: "-".to_owned(),
                    path: "-".to_owned(),
                    message: format!("invalid YAML: {message}"),
                    kind: IssueKind::Invalid,
                }],
                Vec::new(),
            );
        }
    };
    let mut docs = Vec::new();
    let mut issues = Vec::new();
    let mut skipped = Vec::new();
    let mut queue: Vec<(String, Value)> = values
        .into_iter()
        .enumerate()
        .map(|(i, v)| (format!("document {}", i + 1), v))
        .collect();
    queue.reverse();
    while let Some((label, value)) = queue.pop() {
        if value.get("kind").and_then(Value::as_str) == Some("List") {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (j, item) in items.into_iter().enumerate().rev() {
                queue.push((format!("{label} item {}", j + 1), item));
            }
            continue;
        }
        if let Some(what) = foreign(&value) {
            skipped.push(Issue {
                source: source.to_owned(),
                policy: label,
                path: "kind".to_owned(),
                message: format!("skipped: {what} is not a bookend policy"),
                kind: IssueKind::Invalid,
            });
            continue;
        }
        match policy_from_value(source, &label, value) {
            Ok(doc) => docs.push(doc),
            Err(found) => issues.extend(found),
        }
    }
    (docs, issues, skipped)
}

/// Reads one policy object (from a file or the API server). `label` names it in errors when it
/// has no usable kind and name.
pub fn policy_from_value(source: &str, label: &str, value: Value) -> Result<PolicyDoc, Vec<Issue>> {
    let issue = |policy: &str, path: &str, message: String| Issue {
        source: source.to_owned(),
        policy: policy.to_owned(),
        path: path.to_owned(),
        message,
        kind: IssueKind::Invalid,
    };
    let one = |i: Issue| vec![i];
    let Value::Object(mut object) = value else {
        return Err(one(issue(label, "-", "not a YAML mapping".to_owned())));
    };
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "ClusterStepPolicy" && kind != "StepPolicy" {
        return Err(one(issue(
            label,
            "kind",
            format!(
                "kind {kind:?} is not a bookend policy (expected ClusterStepPolicy or StepPolicy)"
            ),
        )));
    }
    if api_version != API_VERSION {
        return Err(one(issue(
            label,
            "apiVersion",
            format!("apiVersion {api_version:?} is not supported; use {API_VERSION:?}"),
        )));
    }
    let meta = object.get("metadata").cloned().unwrap_or(Value::Null);
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        return Err(one(issue(
            &format!("{kind} ({label})"),
            "metadata.name",
            "missing field(s): a policy needs a name".to_owned(),
        )));
    }
    let namespace = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let id = match (kind.as_str(), namespace) {
        ("ClusterStepPolicy", _) => PolicyId::Cluster { name },
        (_, Some(ns)) => PolicyId::Namespaced {
            namespace: ns.to_owned(),
            name,
        },
        (_, None) => {
            return Err(one(issue(
                &format!("StepPolicy/{name}"),
                "metadata.namespace",
                "missing field(s): a StepPolicy applies to its own namespace, so it needs one"
                    .to_owned(),
            )));
        }
    };
    let spec_value = object
        .remove("spec")
        .unwrap_or(Value::Object(Default::default()));
    let spec = read_spec(spec_value).map_err(|errors| {
        errors
            .into_iter()
            .map(|(path, message)| issue(&id.to_string(), &path, message))
            .collect::<Vec<_>>()
    })?;
    Ok(PolicyDoc {
        id,
        spec,
        source: source.to_owned(),
        created: meta
            .get("creationTimestamp")
            .and_then(Value::as_str)
            .map(str::to_owned),
        generation: meta.get("generation").and_then(Value::as_i64),
    })
}

/// At most this many problems are reported per policy spec.
const MAX_SPEC_ERRORS: usize = 50;

/// Reads a policy's spec, reporting every structural problem (unknown fields, wrong types,
/// unknown values) rather than the first: serde stops at the first, so each field found wrong
/// is taken out of a copy and the read repeated. It stops early where taking a value out
/// would mislead — a whole list item (later indices would shift) or a required field, whose
/// absence is then reported instead. Paths are `spec.…`.
fn read_spec(mut spec: Value) -> Result<StepPolicySpec, Vec<(String, String)>> {
    use serde_path_to_error::Segment;
    let mut errors = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    while errors.len() < MAX_SPEC_ERRORS {
        let error = match serde_path_to_error::deserialize::<_, StepPolicySpec>(spec.clone()) {
            Ok(read) if errors.is_empty() => return Ok(read),
            Ok(_) => break,
            Err(e) => e,
        };
        let segments: Vec<Segment> = error.path().iter().cloned().collect();
        let path = match error.path().to_string().as_str() {
            "." => "spec".to_owned(),
            p => format!("spec.{p}"),
        };
        let message = error.into_inner().to_string();
        // A required field reported missing because its wrong value was taken out: already
        // reported as wrong.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|m| m.strip_suffix('`'));
        if let Some(field) = missing {
            let field_path = if path == "spec" {
                format!("spec.{field}")
            } else {
                format!("{path}.{field}")
            };
            if !removed.contains(&field_path) {
                errors.push((path, message));
            }
            break;
        }
        errors.push((path.clone(), message));
        let Some((Segment::Map { key }, parents)) = segments.split_last() else {
            break;
        };
        let mut at = &mut spec;
        for segment in parents {
            let next = match segment {
                Segment::Map { key } => at.get_mut(key.as_str()),
                Segment::Seq { index } => at.get_mut(*index),
                _ => None,
            };
            match next {
                Some(v) => at = v,
                None => return Err(errors),
            }
        }
        match at.as_object_mut().and_then(|o| o.remove(key.as_str())) {
            Some(_) => removed.push(path),
            None => break,
        }
    }
    Err(errors)
}

#[cfg(test)]
mod tests {

    #[test]
    fn file_modes_are_octal_as_kubernetes_reads_them() {
        let docs = yaml_documents(
            "volumes: [{name: a, secret: {secretName: s, defaultMode: 0400, items: [{key: k, path: p, mode: 0755}]}}, {name: b, configMap: {name: c, defaultMode: 420}}]\nname: \"0400\"\n",
        )
        .unwrap();
        assert_eq!(docs[0]["volumes"][0]["secret"]["defaultMode"], 256);
        assert_eq!(docs[0]["volumes"][0]["secret"]["items"][0]["mode"], 493);
        assert_eq!(docs[0]["volumes"][1]["configMap"]["defaultMode"], 420);
        assert_eq!(docs[0]["name"], "0400");
    }
    use super::*;

    #[test]
    fn multi_document_yaml_with_lists() {
        let text = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: a}
spec: {priority: 5}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: bookend.dev/v1alpha1
  kind: StepPolicy
  metadata: {name: b, namespace: team-a}
"#;
        let (docs, issues) = parse_policies("p.yaml", text);
        assert!(issues.is_empty(), "{issues:?}");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].id, PolicyId::Cluster { name: "a".into() });
        assert_eq!(docs[0].spec.priority, 5);
        assert_eq!(docs[1].id.to_string(), "StepPolicy/team-a/b");
    }

    #[test]
    fn errors_name_file_policy_and_field() {
        let text = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: creds}
spec:
  preSteps:
  - name: bookend-creds
    imagee: alpine
"#;
        let (docs, issues) = parse_policies("policies/creds.yaml", text);
        assert!(docs.is_empty());
        let line = issues[0].to_string();
        assert!(
            line.starts_with(
                "policies/creds.yaml: ClusterStepPolicy/creds: spec.preSteps[0].imagee: unknown field `imagee`"
            ),
            "{line}"
        );
        let (_, issues) = parse_policies(
            "x.yaml",
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: m}\nspec: {mode: Enforced}\n",
        );
        assert!(
            issues[0]
                .to_string()
                .starts_with("x.yaml: ClusterStepPolicy/m: spec.mode: unknown variant `Enforced`"),
            "{}",
            issues[0]
        );
    }

    #[test]
    fn every_problem_in_a_policy_is_reported_not_only_the_first() {
        let text = "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: m}\nspec:\n  mode: Enforced\n  priorty: 3\n  preSteps:\n  - name: bookend-a\n    image: alpine\n    imagee: x\n    workingDir: 5\n";
        let (docs, issues) = parse_policies("x.yaml", text);
        assert!(docs.is_empty());
        let mut found: Vec<String> = issues
            .iter()
            .map(|i| format!("{}: {}", i.path, i.message))
            .collect();
        found.sort();
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(
            found[0].starts_with("spec.mode: unknown variant `Enforced`"),
            "{found:#?}"
        );
        assert!(
            found[1].starts_with("spec.preSteps[0].imagee: unknown field"),
            "{found:#?}"
        );
        assert!(
            found[2].starts_with("spec.preSteps[0].workingDir: invalid type"),
            "{found:#?}"
        );
        assert!(
            found[3].starts_with("spec.priorty: unknown field"),
            "{found:#?}"
        );
        // A required field whose value was wrong is not reported again as missing, and a
        // policy without problems still reads.
        let (docs, issues) = parse_policies(
            "x.yaml",
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: m}\nspec: {preSteps: [{name: bookend-a, image: alpine, env: [{name: 5}]}], priorty: 1}\n",
        );
        assert!(docs.is_empty());
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(!paths.iter().any(|p| p.ends_with("env[0]")), "{issues:?}");
        assert!(
            paths.contains(&"spec.preSteps[0].env[0].name"),
            "{issues:?}"
        );
    }

    #[test]
    fn wrong_kinds_versions_and_missing_identity() {
        // Another tool's objects are skipped with a note; a policy kind or bookend's group is
        // always read as a policy.
        let parsed = parse_policy_stream(
            "x.yaml",
            "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
        );
        assert!(parsed.docs.is_empty() && parsed.issues.is_empty());
        let notes: Vec<String> = parsed.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            notes,
            [
                "x.yaml: document 1: kind: skipped: ConfigMap (v1) is not a bookend policy",
                "x.yaml: document 2: kind: skipped: Kustomization (kustomize.config.k8s.io/v1beta1) is not a bookend policy"
            ]
        );
        for text in [
            "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicyy\nmetadata: {name: a}\n",
            "apiVersion: v1\nkind: ClusterStepPolicy\nmetadata: {name: a}\n",
            "kind: ConfigMap\n",
        ] {
            let parsed = parse_policy_stream("x.yaml", text);
            assert_eq!(parsed.issues.len(), 1, "{text}: {:?}", parsed.skipped);
            assert!(parsed.skipped.is_empty(), "{text}");
        }
        let (_, issues) = parse_policies(
            "x.yaml",
            "apiVersion: bookend.dev/v1\nkind: StepPolicy\nmetadata: {name: a, namespace: b}\n",
        );
        assert_eq!(issues[0].path, "apiVersion");
        let (_, issues) = parse_policies(
            "x.yaml",
            "apiVersion: bookend.dev/v1alpha1\nkind: StepPolicy\nmetadata: {name: a}\n",
        );
        assert_eq!(issues[0].path, "metadata.namespace");
        let (_, issues) = parse_policies("x.yaml", "key: [unclosed\n");
        assert!(issues[0].message.starts_with("invalid YAML"));
        let (_, issues) = parse_policies("x.yaml", "- a\n- b\n");
        assert!(issues[0].message.contains("not a YAML mapping"));
    }
}
