//! An org step's StepAction must come from a source the platform controls.
//!
//! Tekton resolves `ref: {name: x}` in the TaskRun's namespace (`resolveStepRef`), where the
//! tenant can write StepActions, and a resolver param with `$(…)` is substituted from the
//! TaskRun. A tag, a branch or a catalog version can be moved by whoever can push to it. So a
//! ClusterStepPolicy's `ref` names the cluster resolver with a literal namespace, or pins its
//! content: a bundle by digest, a git revision by full commit SHA, an http URL by a commit in its
//! path.

use serde_json::Value;

use super::path::{Errors, FieldPath};
use crate::policy::api::Step;

/// The `ref` of `step` (at `at`) of a ClusterStepPolicy.
pub(super) fn check(step: &Step, at: &FieldPath, errs: &mut Errors) {
    let Some(r) = &step.ref_ else {
        return;
    };
    let at = at.field("ref");
    let resolver = r.resolver.as_deref().unwrap_or_default();
    if resolver.is_empty() {
        if let Some(name) = r.name.as_deref().filter(|n| !n.is_empty()) {
            errs.add(
                &at.field("name"),
                format!(
                    "ref.name resolves StepAction {name:?} in the TaskRun's namespace, where the TaskRun's author can write it, so they would write this org step; use the cluster resolver with a namespace the platform controls: ref: {{resolver: cluster, params: [{{name: kind, value: stepaction}}, {{name: name, value: {name}}}, {{name: namespace, value: <namespace>}}]}}"
                ),
            );
        }
        return;
    }
    let params = r.params.as_deref().unwrap_or_default();
    for (i, p) in params.iter().enumerate() {
        if has_reference(&p.value) {
            errs.add(
                &at.field_index("params", i).field("value"),
                format!(
                    "resolver param {:?} uses $(…), which Tekton substitutes from the TaskRun, so its author would choose where this org step comes from; write the value literally",
                    p.name
                ),
            );
        }
    }
    let find = |name: &str| params.iter().enumerate().find(|(_, p)| p.name == name);
    // A param that is there but substituted is reported above.
    let mut require =
        |name: &str, pinned: fn(&str) -> bool, missing: String, loose: &str| match find(name) {
            Some((i, p)) => match p.value.as_str() {
                Some(v) if v.contains("$(") => {}
                Some(v) if pinned(v) => {}
                _ => errs.add(
                    &at.field_index("params", i).field("value"),
                    format!("{loose}: got {}", p.value),
                ),
            },
            None => errs.add(&at.field("params"), missing),
        };
    match resolver {
        "cluster" => {
            // Without it the cluster resolver fetches a Task of that name (its default kind),
            // which Tekton cannot run as a step, and verification cannot resolve the step.
            require(
                "kind",
                |v| v == "stepaction",
                "the cluster resolver needs the param kind: stepaction for a step (without it the resolver's default kind, task, applies)".to_owned(),
                "the cluster resolver's \"kind\" param must be the literal stepaction",
            );
            for name in ["name", "namespace"] {
                require(
                    name,
                    |v| !v.trim().is_empty(),
                    format!(
                        "the cluster resolver needs a literal {name:?} param{}",
                        if name == "namespace" {
                            " naming a namespace the platform controls (without it, the resolver's default-namespace applies)"
                        } else {
                            ""
                        }
                    ),
                    &format!("the cluster resolver's {name:?} param must be a literal, non-empty string"),
                );
            }
        }
        "bundles" => require(
            "bundle",
            is_digest_reference,
            "the bundles resolver needs a \"bundle\" param pinned by digest (<image>@sha256:<64 hex digits>)".to_owned(),
            "the bundles resolver must pin the bundle by digest (<image>@sha256:<64 hex digits>), else whoever can push the tag chooses this org step",
        ),
        "git" => require(
            "revision",
            is_commit,
            "the git resolver needs a \"revision\" param pinned to a full commit SHA (40 or 64 hex digits); without it, the resolver's default-revision (a branch) applies".to_owned(),
            "the git resolver must pin revision to a full commit SHA (40 or 64 hex digits), else whoever can move the branch or tag chooses this org step",
        ),
        "http" => require(
            "url",
            is_commit_url,
            "the http resolver needs a \"url\" param".to_owned(),
            "the http resolver fetches whatever the server serves at the URL; bookend accepts only an https URL with a full commit SHA (40 or 64 hex digits) as one segment of its path, as a forge serves a file at a commit (https://raw.githubusercontent.com/<org>/<repo>/<sha>/<file>)",
        ),
        other => errs.add(
            &at.field("resolver"),
            format!(
                "the {other} resolver has no digest or commit pin bookend can check, so whoever can change what it serves would choose this org step; use the cluster resolver with a literal namespace, bundles pinned by digest, git pinned to a commit, or http with a commit URL"
            ),
        ),
    }
}

/// Whether a param value (a string, array or object of strings) contains `$(`.
fn has_reference(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains("$("),
        Value::Array(items) => items.iter().any(has_reference),
        Value::Object(map) => map.values().any(has_reference),
        _ => false,
    }
}

/// `<image>@sha256:<64 lowercase hex digits>`, the OCI digest form.
fn is_digest_reference(bundle: &str) -> bool {
    bundle
        .rsplit_once("@sha256:")
        .is_some_and(|(image, digest)| {
            !image.is_empty()
                && digest.len() == 64
                && digest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// A full git object name: 40 (SHA-1) or 64 (SHA-256) hex digits.
fn is_commit(revision: &str) -> bool {
    matches!(revision.len(), 40 | 64) && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An https URL one of whose path segments is a full commit SHA.
fn is_commit_url(url: &str) -> bool {
    url.strip_prefix("https://")
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(host, path)| {
            !host.is_empty()
                && path
                    .split(['?', '#'])
                    .next()
                    .is_some_and(|p| p.split('/').any(is_commit))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::{Param, StepRef};

    fn params(pairs: &[(&str, &str)]) -> Vec<Param> {
        pairs
            .iter()
            .map(|(n, v)| Param {
                name: (*n).to_owned(),
                value: Value::String((*v).to_owned()),
            })
            .collect()
    }

    const SHA1: &str = "0123456789abcdef0123456789abcdef01234567";
    const SHA256: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn run(name: Option<&str>, resolver: Option<&str>, ps: &[(&str, &str)]) -> Vec<String> {
        let step = Step {
            name: "bookend-x".into(),
            ref_: Some(StepRef {
                name: name.map(Into::into),
                resolver: resolver.map(Into::into),
                params: (!ps.is_empty()).then(|| params(ps)),
            }),
            ..Step::default()
        };
        let mut errs = Errors::new();
        check(
            &step,
            &FieldPath::new("spec").field_index("preSteps", 0),
            &mut errs,
        );
        errs.into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    #[test]
    fn a_name_alone_resolves_in_the_tenants_namespace() {
        assert_eq!(
            run(Some("git-clone"), None, &[]),
            [
                r#"spec.preSteps[0].ref.name: ref.name resolves StepAction "git-clone" in the TaskRun's namespace, where the TaskRun's author can write it, so they would write this org step; use the cluster resolver with a namespace the platform controls: ref: {resolver: cluster, params: [{name: kind, value: stepaction}, {name: name, value: git-clone}, {name: namespace, value: <namespace>}]}"#
            ]
        );
    }

    #[test]
    fn the_cluster_resolver_needs_kind_stepaction_and_literal_name_and_namespace() {
        let ok = [
            ("kind", "stepaction"),
            ("name", "git-clone"),
            ("namespace", "tekton-catalog"),
        ];
        assert!(run(None, Some("cluster"), &ok).is_empty());
        assert_eq!(
            run(
                None,
                Some("cluster"),
                &[("kind", "stepaction"), ("name", "git-clone")]
            ),
            [
                r#"spec.preSteps[0].ref.params: the cluster resolver needs a literal "namespace" param naming a namespace the platform controls (without it, the resolver's default-namespace applies)"#
            ]
        );
        assert_eq!(
            run(
                None,
                Some("cluster"),
                &[
                    ("kind", "stepaction"),
                    ("name", "git-clone"),
                    ("namespace", "$(context.taskRun.namespace)")
                ]
            ),
            [
                r#"spec.preSteps[0].ref.params[2].value: resolver param "namespace" uses $(…), which Tekton substitutes from the TaskRun, so its author would choose where this org step comes from; write the value literally"#
            ]
        );
        let m = run(
            None,
            Some("cluster"),
            &[("kind", "stepaction"), ("name", " "), ("namespace", "ci")],
        );
        assert_eq!(
            m,
            [
                r#"spec.preSteps[0].ref.params[1].value: the cluster resolver's "name" param must be a literal, non-empty string: got " ""#
            ]
        );
        // Without kind the resolver fetches a Task of that name.
        assert_eq!(
            run(
                None,
                Some("cluster"),
                &[("name", "git-clone"), ("namespace", "ci")]
            ),
            [
                r#"spec.preSteps[0].ref.params: the cluster resolver needs the param kind: stepaction for a step (without it the resolver's default kind, task, applies)"#
            ]
        );
        assert_eq!(
            run(
                None,
                Some("cluster"),
                &[("kind", "task"), ("name", "git-clone"), ("namespace", "ci")]
            ),
            [
                r#"spec.preSteps[0].ref.params[0].value: the cluster resolver's "kind" param must be the literal stepaction: got "task""#
            ]
        );
    }

    #[test]
    fn bundles_are_pinned_by_digest() {
        let pinned = format!("registry.example.com/steps/clone@sha256:{SHA256}");
        let tagged_and_pinned = format!("registry.example.com/steps/clone:v1@sha256:{SHA256}");
        for bundle in [&pinned, &tagged_and_pinned] {
            assert!(
                run(
                    None,
                    Some("bundles"),
                    &[("bundle", bundle), ("name", "clone")]
                )
                .is_empty(),
                "{bundle}"
            );
        }
        for bundle in [
            "registry.example.com/steps/clone:v1",
            "registry.example.com/steps/clone@sha256:abc",
            &format!(
                "registry.example.com/steps/clone@sha256:{}",
                SHA256.to_uppercase()
            ),
            &format!("@sha256:{SHA256}"),
        ] {
            let m = run(None, Some("bundles"), &[("bundle", bundle)]);
            assert_eq!(m.len(), 1, "{bundle}");
            assert!(
                m[0].starts_with("spec.preSteps[0].ref.params[0].value: the bundles resolver must pin the bundle by digest"),
                "{m:?}"
            );
        }
        assert!(
            run(None, Some("bundles"), &[("name", "clone")])[0]
                .contains("needs a \"bundle\" param")
        );
    }

    #[test]
    fn git_revisions_are_full_commits() {
        for rev in [SHA1, SHA256, &SHA1.to_uppercase()] {
            assert!(
                run(
                    None,
                    Some("git"),
                    &[("url", "https://g/x.git"), ("revision", rev)]
                )
                .is_empty(),
                "{rev}"
            );
        }
        for rev in ["main", "v1.2.3", &SHA1[..12]] {
            let m = run(
                None,
                Some("git"),
                &[("url", "https://g/x.git"), ("revision", rev)],
            );
            assert_eq!(
                m,
                [format!(
                    "spec.preSteps[0].ref.params[1].value: the git resolver must pin revision to a full commit SHA (40 or 64 hex digits), else whoever can move the branch or tag chooses this org step: got \"{rev}\""
                )]
            );
        }
        assert!(
            run(None, Some("git"), &[("url", "https://g/x.git")])[0].starts_with(
                "spec.preSteps[0].ref.params: the git resolver needs a \"revision\" param"
            )
        );
    }

    #[test]
    fn http_urls_need_a_commit_in_their_path() {
        let ok = format!("https://raw.githubusercontent.com/org/repo/{SHA1}/stepaction.yaml");
        assert!(run(None, Some("http"), &[("url", &ok)]).is_empty());
        for url in [
            "https://example.com/stepaction.yaml",
            &format!("http://raw.githubusercontent.com/org/repo/{SHA1}/s.yaml"),
            &format!("https://example.com/s.yaml?rev={SHA1}"),
        ] {
            let m = run(None, Some("http"), &[("url", url)]);
            assert_eq!(m.len(), 1, "{url}");
            assert!(m[0].contains("bookend accepts only an https URL"), "{m:?}");
        }
    }

    #[test]
    fn other_resolvers_are_refused() {
        for resolver in ["hub", "my-resolver"] {
            let m = run(
                None,
                Some(resolver),
                &[("name", "git-clone"), ("version", "0.9")],
            );
            assert_eq!(m.len(), 1);
            assert!(
                m[0].starts_with(&format!(
                    "spec.preSteps[0].ref.resolver: the {resolver} resolver has no digest or commit pin"
                )),
                "{m:?}"
            );
        }
    }

    #[test]
    fn any_substituted_param_is_refused_whatever_the_resolver() {
        let m = run(
            None,
            Some("git"),
            &[("url", "$(params.repo)"), ("revision", SHA1)],
        );
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "spec.preSteps[0].ref.params[0].value: resolver param \"url\" uses $(…)"
            )
        );
        // Arrays and objects too.
        assert!(has_reference(
            &serde_json::json!(["a", {"k": "$(params.x)"}])
        ));
        assert!(!has_reference(&serde_json::json!(["a", {"k": "b"}, 1])));
    }
}
