//! Policy checks: Tekton's own Step rules (`Step.Validate` in Tekton's
//! `pkg/apis/pipeline/v1/container_validation.go`, and the step parts of `TaskSpec.Validate`)
//! on every injected step, one function per rule group (`step.rs`), plus bookend's rules
//! (reserved prefix, length, volumes, selectors, globs) and the authoring hazards it refuses
//! (`limits.rs`, `sources.rs`, `injection.rs`; `docs/policy.md`, "Hazards bookend refuses").
//!
//! Errors are collected with the path of their field ([`FieldPath`], after knative's
//! `apis.FieldError`), relative to the policy object: `spec.preSteps[0].volumeMounts[2].name`.

mod injection;
pub mod limits;
mod path;
mod sources;
mod step;
mod syntax;

use std::collections::BTreeSet;

use super::api::{AlwaysFallback, Mode, PostStepsRun, StepPolicySpec};
use super::select::{Matcher, is_dns_label};
use super::{FieldError, Issue, IssueKind, PolicyId, Settings};

pub use injection::SHELLS;
pub use limits::{MAX_SPEC_BYTES, MAX_STEPS, MAX_VOLUMES};
pub use path::{Errors, FieldPath};
pub use step::MAX_STEP_NAME;
pub use syntax::{DurationError, clean_path, mount_point, parse_go_duration};

/// Everything that can be checked on one policy spec without knowing its kind: every rule but
/// the hazards of [`check_policy`], which callers that know the policy's id should use instead.
/// Cross-policy rules (unique step names) live in [`super::PolicySet`].
pub fn check_spec(spec: &StepPolicySpec, settings: &Settings) -> Vec<FieldError> {
    check(None, spec, settings)
}

/// [`check_spec`] and the hazards that depend on who wrote the policy: a ClusterStepPolicy's
/// `ref` must come from a source the platform controls, and an Enforce ClusterStepPolicy's
/// steps must not run code the TaskRun's author writes (`$(params.…)` in a script, …).
///
/// The validation output has no warning channel, so StepPolicies and Audit policies are not
/// checked for author-controlled variables at all.
pub fn check_policy(id: &PolicyId, spec: &StepPolicySpec, settings: &Settings) -> Vec<FieldError> {
    check(Some(id), spec, settings)
}

/// Which hazards apply to a policy.
#[derive(Clone, Copy)]
struct Hazards {
    /// `ref` sources: ClusterStepPolicies.
    sources: bool,
    /// Author-controlled variables in code: ClusterStepPolicies in mode Enforce.
    injection: bool,
}

impl Hazards {
    fn of(id: Option<&PolicyId>, spec: &StepPolicySpec) -> Self {
        let org = matches!(id, Some(PolicyId::Cluster { .. }));
        Self {
            sources: org,
            injection: org && spec.mode == Mode::Enforce,
        }
    }
}

fn check(id: Option<&PolicyId>, spec: &StepPolicySpec, settings: &Settings) -> Vec<FieldError> {
    let at = FieldPath::new("spec");
    let mut errs = Errors::new();
    if !limits::size(spec, &at, &mut errs) {
        // Too large to be worth reading further.
        return errs.into_vec();
    }
    limits::counts(spec, &at, &mut errs);
    criteria(spec, &at, &mut errs);
    volumes(spec, &at, settings, &mut errs);
    let hazards = Hazards::of(id, spec);
    steps(spec, &at, settings, hazards, &mut errs);
    results(spec, &at, &mut errs);
    if hazards.injection {
        injection::check_volumes(&spec.volumes, &at.field("volumes"), &mut errs);
    }
    errs.into_vec()
}

/// `spec.results`: Tekton's `TaskResult.Validate` (names follow `ResultNameFormat`; types
/// string, array or object; an object has properties, each of type string), unique names, and
/// bookend's rules: post-steps to write them, run `Always` (a user step's failure must not skip
/// the reset and the post-steps, leaving the author's values as the org's).
fn results(spec: &StepPolicySpec, at: &FieldPath, errs: &mut Errors) {
    if spec.results.is_empty() {
        return;
    }
    let mut names = BTreeSet::new();
    for (i, result) in spec.results.iter().enumerate() {
        let at = at.field_index("results", i);
        if !syntax::is_result_name(&result.name) {
            errs.add(
                &at.field("name"),
                format!(
                    "invalid key name {:?}: Name must consist of alphanumeric characters, '-', '_', '.', and must start and end with an alphanumeric character",
                    result.name
                ),
            );
        } else if !names.insert(result.name.as_str()) {
            errs.add(
                &at.field("name"),
                format!("result name {:?} is declared twice", result.name),
            );
        }
        match result.type_.as_deref() {
            None | Some("string" | "array") => {
                if result.properties.is_some() {
                    errs.add(
                        &at.field("properties"),
                        "properties are only for a result of type object",
                    );
                }
            }
            Some("object") => match &result.properties {
                None => errs.add(
                    &at.field("properties"),
                    format!("missing field(s): {}.properties", result.name),
                ),
                Some(properties) => {
                    let invalid: Vec<&str> = properties
                        .iter()
                        .filter(|(_, p)| p.type_.as_deref() != Some("string"))
                        .map(|(k, _)| k.as_str())
                        .collect();
                    if !invalid.is_empty() {
                        errs.add(
                            &at.field("properties"),
                            format!(
                                "The value type specified for these keys {invalid:?} is invalid, the type must be string"
                            ),
                        );
                    }
                }
            },
            Some(other) => errs.add(
                &at.field("type"),
                format!("invalid value: {other}: use string, array or object"),
            ),
        }
    }
    if spec.post_steps.is_empty() {
        errs.add(
            &at.field("results"),
            "the policy declares results but has no postSteps to write them; add the post-step that writes $(results.<name>.path)",
        );
    }
    if spec.post_steps_run != PostStepsRun::Always {
        errs.add(
            &at.field("postStepsRun"),
            "a policy that declares results needs postStepsRun: Always: with OnSuccess a failed user step skips the post-steps, and a value the TaskRun's own steps wrote to /tekton/results would be reported (and signed by Tekton Chains) as the org's",
        );
    } else if spec.post_steps_run_fallback == AlwaysFallback::OnSuccess {
        errs.add(
            &at.field("postStepsRunFallback"),
            "a policy that declares results cannot fall back to OnSuccess (a failed user step would skip the post-steps that write them); remove postStepsRunFallback",
        );
    }
}

/// `match` and `exclude`: globs and selectors compile; an `exclude` selector is not empty.
fn criteria(spec: &StepPolicySpec, at: &FieldPath, errs: &mut Errors) {
    for (field, criteria, is_exclude) in [
        ("match", &spec.match_, false),
        ("exclude", &spec.exclude, true),
    ] {
        let at = at.field(field);
        if let Err(found) = Matcher::new(criteria) {
            errs.extend(
                found
                    .into_iter()
                    .map(|e| FieldError::new(at.field(&e.path).as_str(), e.message)),
            );
        }
        if !is_exclude {
            continue;
        }
        for (name, sel) in [
            ("selector", &criteria.selector),
            ("namespaceSelector", &criteria.namespace_selector),
        ] {
            if sel.as_ref().is_some_and(|s| {
                s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
            }) {
                errs.add(
                    &at.field(name),
                    "an empty selector selects everything, so this would exclude every TaskRun; remove it or give it matchLabels/matchExpressions",
                );
            }
        }
    }
}

/// `spec.volumes`: the reserved prefix (bookend's rule, as for step names), DNS labels, not
/// Tekton's, unique (`ValidateVolumes`), one source each.
fn volumes(spec: &StepPolicySpec, at: &FieldPath, settings: &Settings, errs: &mut Errors) {
    let prefix = &settings.prefix;
    let mut seen = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().enumerate() {
        let at = at.field_index("volumes", i);
        let name = &volume.name;
        if !name.starts_with(prefix.as_str()) {
            errs.add(
                &at.field("name"),
                format!(
                    "volume name {name:?} must start with the reserved prefix {prefix:?} (rename it to \"{prefix}{name}\", here and in the steps' volumeMounts), so that it cannot collide with a TaskRun's own volumes"
                ),
            );
        }
        if !is_dns_label(name) {
            errs.add(
                &at.field("name"),
                format!("invalid volume name {name:?}: must be a DNS-1123 label"),
            );
        }
        if name.starts_with("tekton-internal-") {
            errs.add(
                &at.field("name"),
                format!(
                    "volume name {name:?} cannot start with \"tekton-internal-\" (reserved by Tekton)"
                ),
            );
        }
        if !seen.insert(name.as_str()) {
            errs.add(
                &at.field("name"),
                format!("multiple volumes with same name {name:?}"),
            );
        }
        if volume_source_count(volume) != 1 {
            errs.add(
                &at,
                format!(
                    "volume {name:?} needs exactly one source (emptyDir, secret, configMap, ...)"
                ),
            );
        }
    }
}

fn volume_source_count(volume: &k8s_openapi::api::core::v1::Volume) -> usize {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(map)) => map.keys().filter(|k| *k != "name").count(),
        _ => 0,
    }
}

/// `preSteps` and `postSteps`: names unique within the policy (`StepList.Validate`), each
/// step by Tekton's rule groups, then by the hazards that apply.
fn steps(
    spec: &StepPolicySpec,
    at: &FieldPath,
    settings: &Settings,
    hazards: Hazards,
    errs: &mut Errors,
) {
    let own_steps: BTreeSet<&str> = spec
        .pre_steps
        .iter()
        .chain(&spec.post_steps)
        .map(|s| s.name.as_str())
        .collect();
    let volume_names: BTreeSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
    let cx = step::Context {
        settings,
        volume_names: &volume_names,
    };
    let mut names = BTreeSet::new();
    for (list, steps) in [
        ("preSteps", &spec.pre_steps),
        ("postSteps", &spec.post_steps),
    ] {
        for (i, step) in steps.iter().enumerate() {
            let at = at.field_index(list, i);
            if !step.name.is_empty() && !names.insert(step.name.as_str()) {
                errs.add(
                    &at.field("name"),
                    format!("step name {:?} is used twice in this policy", step.name),
                );
            }
            step::check_step(step, &at, &cx, errs);
            if hazards.sources {
                sources::check(step, &at, errs);
            }
            if hazards.injection {
                injection::check(step, &at, &own_steps, errs);
                injection::check_code_from_namespace(step, &spec.volumes, &at, errs);
            }
        }
    }
}

/// Turns field errors into issues for one policy.
pub fn issues(source: &str, policy: &str, errors: Vec<FieldError>) -> Vec<Issue> {
    errors
        .into_iter()
        .map(|e| Issue {
            source: source.to_owned(),
            policy: policy.to_owned(),
            path: e.path,
            message: e.message,
            kind: IssueKind::Invalid,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::Mode;
    use crate::policy::api::{Step, StepRef, WhenExpression};
    use k8s_openapi::api::core::v1::{Volume, VolumeMount};

    fn settings() -> Settings {
        Settings::default()
    }

    fn inline(name: &str) -> Step {
        Step {
            name: name.into(),
            image: Some("alpine:3".into()),
            ..Step::default()
        }
    }

    fn errors_for(step: Step) -> Vec<FieldError> {
        let spec = StepPolicySpec {
            pre_steps: vec![step],
            volumes: vec![Volume {
                name: "bookend-cache".into(),
                empty_dir: Some(Default::default()),
                ..Volume::default()
            }],
            ..StepPolicySpec::default()
        };
        check_spec(&spec, &settings())
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    fn results_spec(results: serde_json::Value) -> StepPolicySpec {
        StepPolicySpec {
            post_steps: vec![inline("bookend-publish")],
            post_steps_run: PostStepsRun::Always,
            results: serde_json::from_value(results).unwrap(),
            ..StepPolicySpec::default()
        }
    }

    #[test]
    fn results_follow_tektons_rules() {
        let good = results_spec(serde_json::json!([
            {"name": "IMAGE_URL"},
            {"name": "IMAGES", "type": "array"},
            {"name": "ARTIFACT_OUTPUTS", "type": "object",
             "properties": {"uri": {"type": "string"}}}
        ]));
        assert!(check_spec(&good, &settings()).is_empty());
        let bad = results_spec(serde_json::json!([
            {"name": "-bad"},
            {"name": "A"}, {"name": "A"},
            {"name": "B", "type": "number"},
            {"name": "C", "type": "object"},
            {"name": "D", "type": "object", "properties": {"x": {"type": "array"}}},
            {"name": "E", "properties": {"x": {"type": "string"}}}
        ]));
        let got = messages(&check_spec(&bad, &settings()));
        let want = [
            "spec.results[0].name: invalid key name \"-bad\"",
            "spec.results[2].name: result name \"A\" is declared twice",
            "spec.results[3].type: invalid value: number: use string, array or object",
            "spec.results[4].properties: missing field(s): C.properties",
            "spec.results[5].properties: The value type specified for these keys [\"x\"] is invalid, the type must be string",
            "spec.results[6].properties: properties are only for a result of type object",
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (got, want) in got.iter().zip(want) {
            assert!(got.starts_with(want), "{got} does not start with {want}");
        }
    }

    #[test]
    fn results_need_post_steps_that_run_always() {
        let mut spec = results_spec(serde_json::json!([{"name": "IMAGE_URL"}]));
        spec.post_steps_run = PostStepsRun::OnSuccess;
        let got = messages(&check_spec(&spec, &settings()));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with(
            "spec.postStepsRun: a policy that declares results needs postStepsRun: Always"
        ));
        spec.post_steps_run = PostStepsRun::Always;
        spec.post_steps_run_fallback = AlwaysFallback::OnSuccess;
        let got = messages(&check_spec(&spec, &settings()));
        assert!(got[0].starts_with("spec.postStepsRunFallback: "), "{got:?}");
        spec.post_steps_run_fallback = AlwaysFallback::Deny;
        spec.post_steps.clear();
        let got = messages(&check_spec(&spec, &settings()));
        assert!(
            got[0].starts_with("spec.results: the policy declares results but has no postSteps"),
            "{got:?}"
        );
    }

    #[test]
    fn the_reset_steps_names_are_reserved() {
        let got = messages(&errors_for(inline("bookend-results-x")));
        assert!(
            got.iter()
                .any(|m| m
                    .contains("is reserved for bookend's own step that resets a policy's results")),
            "{got:?}"
        );
    }

    #[test]
    fn a_good_step_passes() {
        assert!(errors_for(inline("bookend-creds")).is_empty());
    }

    #[test]
    fn names_need_prefix_dns_label_and_58_chars() {
        let m = messages(&errors_for(inline("creds")));
        assert!(
            m[0].contains("spec.preSteps[0].name") && m[0].contains("reserved prefix"),
            "{m:?}"
        );
        let m = messages(&errors_for(inline("bookend-Creds")));
        assert!(m.iter().any(|m| m.contains("DNS Label")), "{m:?}");
        let long = format!("bookend-{}", "a".repeat(51));
        assert_eq!(long.len(), 59);
        let m = messages(&errors_for(inline(&long)));
        assert!(m.iter().any(|m| m.contains("at most 58")), "{m:?}");
        assert!(errors_for(inline(&long[..58])).is_empty());
        let m = messages(&errors_for(inline("")));
        assert!(m[0].contains("missing field"), "{m:?}");
        let m = messages(&errors_for(inline("bookend-verdict")));
        assert!(m[0].contains("reserved for bookend"), "{m:?}");
        let m = messages(&errors_for(inline("bookend-gate-3")));
        assert!(m[0].contains("reserved for bookend"), "{m:?}");
    }

    #[test]
    fn ref_excludes_inline_fields() {
        let step = Step {
            name: "bookend-clone".into(),
            image: Some("x".into()),
            script: Some("echo".into()),
            working_dir: Some("/w".into()),
            ref_: Some(StepRef {
                name: Some("git-clone".into()),
                ..StepRef::default()
            }),
            ..Step::default()
        };
        let m = messages(&errors_for(step));
        assert!(
            m.contains(
                &"spec.preSteps[0].workingDir: working dir cannot be used with Ref".to_owned()
            ),
            "{m:?}"
        );
        assert!(
            m.contains(&"spec.preSteps[0].image: image cannot be used with Ref".to_owned()),
            "{m:?}"
        );
        assert!(
            m.contains(&"spec.preSteps[0].script: script cannot be used with Ref".to_owned()),
            "{m:?}"
        );
        let step = Step {
            name: "bookend-clone".into(),
            ref_: Some(StepRef::default()),
            ..Step::default()
        };
        assert!(messages(&errors_for(step))[0].contains("got neither"));
        let step = Step {
            name: "bookend-clone".into(),
            ref_: Some(StepRef {
                name: Some("a".into()),
                resolver: Some("git".into()),
                params: None,
            }),
            ..Step::default()
        };
        assert!(messages(&errors_for(step))[0].contains("got both"));
    }

    #[test]
    fn inline_steps_need_image_and_not_script_with_command() {
        let step = Step {
            name: "bookend-x".into(),
            ..Step::default()
        };
        assert!(messages(&errors_for(step))[0].contains("spec.preSteps[0].image"));
        let mut step = inline("bookend-x");
        step.script = Some("echo hi".into());
        step.command = Some(vec!["sh".into()]);
        assert_eq!(
            messages(&errors_for(step)),
            vec!["spec.preSteps[0].script: script cannot be used with command"]
        );
        let mut step = inline("bookend-x");
        step.params = Some(vec![]);
        assert!(messages(&errors_for(step))[0].contains("params cannot be used without Ref"));
    }

    #[test]
    fn on_error_values() {
        for ok in ["continue", "stopAndFail", "$(params.mode)"] {
            let mut step = inline("bookend-x");
            step.on_error = Some(ok.into());
            assert!(errors_for(step).is_empty(), "{ok}");
        }
        let mut step = inline("bookend-x");
        step.on_error = Some("ignore".into());
        assert!(messages(&errors_for(step))[0].contains("onError must be either"));
    }

    #[test]
    fn reserved_mounts_and_missing_volumes() {
        let mount = |name: &str, path: &str| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..VolumeMount::default()
        };
        let mut step = inline("bookend-x");
        step.volume_mounts = Some(vec![
            mount("bookend-cache", "/tekton/results"),
            mount("bookend-cache", "/tekton/home/.cache"),
            mount("tekton-internal-bin", "/cache"),
            mount("undeclared", "/cache"),
            mount("bookend-cache", "/x/../tekton/steps"),
        ]);
        let m = messages(&errors_for(step));
        assert_eq!(m.len(), 4, "{m:?}");
        assert!(m[0].contains("volumeMounts[0].mountPath") && m[0].contains("under /tekton/"));
        assert!(m[1].contains("volumeMounts[2].name") && m[1].contains("tekton-internal-"));
        assert!(
            m[2].contains("volumeMounts[3].name") && m[2].contains("not defined in spec.volumes")
        );
        assert!(m[3].contains("volumeMounts[4].mountPath"));
    }

    #[test]
    fn timeouts_results_and_when() {
        let mut step = inline("bookend-x");
        step.timeout = Some("-1s".into());
        assert!(messages(&errors_for(step))[0].contains("negative timeout"));
        let mut step = inline("bookend-x");
        step.timeout = Some("10 minutes".into());
        assert!(messages(&errors_for(step))[0].contains("timeout"));
        let mut step = inline("bookend-x");
        step.when = Some(vec![WhenExpression {
            input: Some("a".into()),
            operator: Some("equals".into()),
            values: Some(vec![]),
            cel: None,
        }]);
        let m = messages(&errors_for(step));
        assert!(m[0].contains("when[0].operator"), "{m:?}");
        assert!(m[1].contains("when[0].values"), "{m:?}");
    }

    #[test]
    fn volume_names_need_the_reserved_prefix() {
        let spec = |name: &str| StepPolicySpec {
            volumes: vec![Volume {
                name: name.into(),
                empty_dir: Some(Default::default()),
                ..Volume::default()
            }],
            ..StepPolicySpec::default()
        };
        assert_eq!(
            messages(&check_spec(&spec("cache"), &settings())),
            [
                r#"spec.volumes[0].name: volume name "cache" must start with the reserved prefix "bookend-" (rename it to "bookend-cache", here and in the steps' volumeMounts), so that it cannot collide with a TaskRun's own volumes"#
            ]
        );
        assert!(check_spec(&spec("bookend-cache"), &settings()).is_empty());
        // The prefix is the configured one.
        let org = Settings {
            prefix: "org-".into(),
            ..Settings::default()
        };
        assert!(check_spec(&spec("org-cache"), &org).is_empty());
        assert!(messages(&check_spec(&spec("bookend-cache"), &org))[0].contains("\"org-\""));
    }

    #[test]
    fn size_limits_apply_to_the_whole_spec() {
        // Over 256 KiB: nothing else is checked (the unprefixed step name is not reported).
        let mut step = inline("creds");
        step.script = Some("x".repeat(MAX_SPEC_BYTES));
        let m = messages(&errors_for(step));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("spec: the spec is "), "{m:?}");
        let spec = StepPolicySpec {
            post_steps: (0..=MAX_STEPS)
                .map(|i| inline(&format!("bookend-{i}")))
                .collect(),
            ..StepPolicySpec::default()
        };
        let m = messages(&check_spec(&spec, &settings()));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("spec.postSteps[64]: the policy has 65 steps"));
    }

    fn org() -> PolicyId {
        PolicyId::Cluster { name: "org".into() }
    }

    fn team() -> PolicyId {
        PolicyId::Namespaced {
            namespace: "team-a".into(),
            name: "team".into(),
        }
    }

    /// A spec with both hazards: a param in a script, a StepAction by name.
    fn hazardous(mode: Mode) -> StepPolicySpec {
        serde_json::from_value(serde_json::json!({
            "mode": mode,
            "preSteps": [
                {"name": "bookend-fetch", "image": "alpine", "script": "curl $(params.url)"},
                {"name": "bookend-clone", "ref": {"name": "git-clone"}}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn an_enforced_org_policy_gets_both_hazards() {
        let m = messages(&check_policy(
            &org(),
            &hazardous(Mode::Enforce),
            &settings(),
        ));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("spec.preSteps[0].script: script uses $(params.url)"),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("spec.preSteps[1].ref.name: ref.name resolves"),
            "{m:?}"
        );
    }

    #[test]
    fn an_audit_org_policy_gets_only_the_source_hazard() {
        let m = messages(&check_policy(&org(), &hazardous(Mode::Audit), &settings()));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("spec.preSteps[1].ref.name"), "{m:?}");
    }

    #[test]
    fn team_policies_and_check_spec_get_neither_hazard() {
        for mode in [Mode::Enforce, Mode::Audit] {
            assert_eq!(check_policy(&team(), &hazardous(mode), &settings()), vec![]);
            assert_eq!(check_spec(&hazardous(mode), &settings()), vec![]);
        }
    }

    #[test]
    fn the_example_policies_pass_check_policy() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for value in crate::policy::load::yaml_documents(&text).unwrap() {
                let doc = crate::policy::load::policy_from_value("example", "doc", value).unwrap();
                let errors = check_policy(&doc.id, &doc.spec, &settings());
                assert_eq!(errors, vec![], "{}", path.display());
                n += 1;
            }
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn helper_names_are_refused_in_post_steps_and_with_any_prefix() {
        let spec = |name: &str| StepPolicySpec {
            post_steps: vec![inline(name)],
            ..StepPolicySpec::default()
        };
        let m = messages(&check_spec(&spec("bookend-gate-2"), &settings()));
        assert_eq!(
            m,
            [
                r#"spec.postSteps[0].name: step name "bookend-gate-2" is reserved for bookend's own helper steps (gates, verdict, jail check)"#
            ]
        );
        let custom = Settings {
            prefix: "org-".into(),
            ..Settings::default()
        };
        assert!(
            messages(&check_spec(&spec("org-verdict"), &custom))[0]
                .contains("reserved for bookend")
        );
        assert!(check_spec(&spec("org-gate-x"), &custom).is_empty());
    }

    #[test]
    fn exclude_with_empty_selector_is_refused() {
        let spec: StepPolicySpec = serde_json::from_value(serde_json::json!({
            "exclude": {"selector": {}},
            "match": {"namespaces": ["team-[a"]}
        }))
        .unwrap();
        let m = messages(&check_spec(&spec, &settings()));
        assert!(
            m.iter()
                .any(|m| m.starts_with("spec.match.namespaces[0]: unclosed")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|m| m.starts_with("spec.exclude.selector: an empty selector")),
            "{m:?}"
        );
    }

    /// Every message and path `check_step` gives, in order: the characterisation the rule
    /// groups keep.
    #[test]
    fn every_step_rule_keeps_its_path_and_message() {
        let spec: StepPolicySpec = serde_json::from_value(serde_json::json!({
            "volumes": [{"name": "bookend-cache", "emptyDir": {}}],
            "preSteps": [
                {"name": "Bad_Name", "image": "alpine", "timeout": "-5s",
                 "volumeMounts": [
                     {"name": "tekton-internal-x", "mountPath": "/tekton/results"},
                     {"name": "nope", "mountPath": "/ok"}
                 ],
                 "onError": "ignore",
                 "results": [
                     {"name": "-bad"},
                     {"name": "obj", "type": "object"},
                     {"name": "num", "type": "number"}
                 ],
                 "when": [
                     {},
                     {"cel": "true", "input": "a"},
                     {"input": "a", "operator": "equals"}
                 ],
                 "workspaces": [{"name": ""}]},
                {"name": "", "command": ["sh"], "script": "echo $(steps.a.results.b)",
                 "params": [{"name": "p", "value": "v"}], "timeout": "5 minutes",
                 "workingDir": "$(steps.a.results.dir)",
                 "imagePullPolicy": "$(steps.a.results.policy)"},
                {"name": "bookend-ref", "image": "x", "command": ["a"], "args": ["b"],
                 "script": "s", "workingDir": "/w", "env": [], "volumeMounts": [],
                 "results": [], "ref": {"params": []}},
                {"name": "bookend-both", "ref": {"name": "a", "resolver": "git"}},
                {"name": "bookend-bad-ref", "ref": {"name": "Not_A_Name"}},
                {"name": "bookend-verdict", "image": "alpine"},
                {"name": format!("bookend-{}", "a".repeat(51)), "image": "alpine"}
            ]
        }))
        .unwrap();
        let expected = [
            r#"spec.preSteps[0].name: step name "Bad_Name" must start with the reserved prefix "bookend-" (rename it to "bookend-Bad_Name")"#,
            r#"spec.preSteps[0].name: invalid value "Bad_Name": Task step name must be a valid DNS Label (lowercase letters, digits and '-')"#,
            r#"spec.preSteps[0].timeout: invalid value: -5s: negative timeout"#,
            r#"spec.preSteps[0].volumeMounts[0].mountPath: volumeMount cannot be mounted under /tekton/ (volumeMount "tekton-internal-x" mounted at "/tekton/results")"#,
            r#"spec.preSteps[0].volumeMounts[0].name: volumeMount name "tekton-internal-x" cannot start with "tekton-internal-""#,
            r#"spec.preSteps[0].volumeMounts[1].name: volume "nope" is not defined in spec.volumes of this policy; add it there"#,
            r#"spec.preSteps[0].onError: invalid value: "ignore": Task step onError must be either "continue" or "stopAndFail""#,
            r#"spec.preSteps[0].results[0].name: invalid key name "-bad""#,
            r#"spec.preSteps[0].results[1].properties: missing field(s): an object result needs properties"#,
            r#"spec.preSteps[0].results[2].type: invalid value: number: use string, array or object"#,
            r#"spec.preSteps[0].when[0]: missing field(s): an empty when expression"#,
            r#"spec.preSteps[0].when[1]: cel and input+operator+values cannot be set in one WhenExpression"#,
            r#"spec.preSteps[0].when[2].operator: invalid value: operator "equals" is not recognized. valid operators: in,notin"#,
            r#"spec.preSteps[0].when[2].values: invalid value: expecting non-empty values field"#,
            r#"spec.preSteps[0].workspaces[0].name: missing field(s): name"#,
            r#"spec.preSteps[1].name: missing field(s): injected steps need a name starting with "bookend-""#,
            r#"spec.preSteps[1].params: params cannot be used without Ref"#,
            r#"spec.preSteps[1].image: missing field(s): an injected inline step needs its own image (the TaskRun's stepTemplate may not set one)"#,
            r#"spec.preSteps[1].script: script cannot be used with command"#,
            r#"spec.preSteps[1].timeout: invalid value "5 minutes": unknown unit " minutes" in duration "5 minutes""#,
            r#"spec.preSteps[1].script: stepResult substitutions are only allowed in env, command and args. Found usage in: script"#,
            r#"spec.preSteps[1].workingDir: stepResult substitutions are only allowed in env, command and args. Found usage in: workingDir"#,
            r#"spec.preSteps[1].imagePullPolicy: stepResult substitutions are only allowed in env, command and args. Found usage in: imagePullPolicy"#,
            r#"spec.preSteps[2].image: image cannot be used with Ref"#,
            r#"spec.preSteps[2].command: command cannot be used with Ref"#,
            r#"spec.preSteps[2].args: args cannot be used with Ref"#,
            r#"spec.preSteps[2].script: script cannot be used with Ref"#,
            r#"spec.preSteps[2].workingDir: working dir cannot be used with Ref"#,
            r#"spec.preSteps[2].env: env cannot be used with Ref"#,
            r#"spec.preSteps[2].volumeMounts: volumeMounts cannot be used with Ref"#,
            r#"spec.preSteps[2].results: results cannot be used with Ref"#,
            r#"spec.preSteps[2].ref: expected exactly one, got neither: ref.name, ref.resolver"#,
            r#"spec.preSteps[2].ref.resolver: missing field(s): resolver params need a resolver"#,
            r#"spec.preSteps[3].ref: expected exactly one, got both: ref.name, ref.resolver"#,
            r#"spec.preSteps[4].ref.name: invalid value "Not_A_Name": a StepAction name must be a Kubernetes name"#,
            r#"spec.preSteps[5].name: step name "bookend-verdict" is reserved for bookend's own helper steps (gates, verdict, jail check)"#,
            r#"spec.preSteps[6].name: step name "bookend-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" is 59 characters; at most 58 are allowed (Tekton cuts container names at 63 characters, "step-" included)"#,
        ];
        assert_eq!(messages(&check_spec(&spec, &settings())), expected);
    }

    /// The spec-level rules' paths and messages.
    #[test]
    fn every_volume_and_name_rule_keeps_its_path_and_message() {
        let spec: StepPolicySpec = serde_json::from_value(serde_json::json!({
            "volumes": [
                {"name": "bookend-Bad_Vol", "emptyDir": {}},
                {"name": "tekton-internal-x", "emptyDir": {}},
                {"name": "bookend-a", "emptyDir": {}},
                {"name": "bookend-a", "emptyDir": {}},
                {"name": "bookend-none"},
                {"name": "bookend-two", "emptyDir": {}, "secret": {"secretName": "s"}}
            ],
            "preSteps": [{"name": "bookend-x", "image": "alpine"}],
            "postSteps": [{"name": "bookend-x", "image": "alpine"}]
        }))
        .unwrap();
        let expected = [
            r#"spec.volumes[0].name: invalid volume name "bookend-Bad_Vol": must be a DNS-1123 label"#,
            r#"spec.volumes[1].name: volume name "tekton-internal-x" must start with the reserved prefix "bookend-" (rename it to "bookend-tekton-internal-x", here and in the steps' volumeMounts), so that it cannot collide with a TaskRun's own volumes"#,
            r#"spec.volumes[1].name: volume name "tekton-internal-x" cannot start with "tekton-internal-" (reserved by Tekton)"#,
            r#"spec.volumes[3].name: multiple volumes with same name "bookend-a""#,
            r#"spec.volumes[4]: volume "bookend-none" needs exactly one source (emptyDir, secret, configMap, ...)"#,
            r#"spec.volumes[5]: volume "bookend-two" needs exactly one source (emptyDir, secret, configMap, ...)"#,
            r#"spec.postSteps[0].name: step name "bookend-x" is used twice in this policy"#,
        ];
        assert_eq!(messages(&check_spec(&spec, &settings())), expected);
    }
}
