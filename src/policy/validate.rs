//! Policy checks: Tekton's own Step rules (`Step.Validate` in Tekton's
//! `pkg/apis/pipeline/v1/container_validation.go`) on every injected step, plus bookend's rules
//! (reserved prefix, length, volumes, selectors, globs).

use std::collections::BTreeSet;

use super::api::{Step, StepPolicySpec};
use super::select::{Matcher, is_dns_label};
use super::{FieldError, Issue, IssueKind, Settings};

/// Longest injected step name: Tekton's container name `step-<name>` is cut at 63 characters, so
/// two names that share their first 58 characters collide at Pod creation.
pub const MAX_STEP_NAME: usize = 58;

/// Everything that can be checked on one policy spec alone. Cross-policy rules (unique step
/// names) live in [`super::PolicySet`].
pub fn check_spec(spec: &StepPolicySpec, settings: &Settings) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (field, criteria, is_exclude) in [
        ("spec.match", &spec.match_, false),
        ("spec.exclude", &spec.exclude, true),
    ] {
        if let Err(errs) = Matcher::new(criteria) {
            errors.extend(
                errs.into_iter()
                    .map(|e| FieldError::new(format!("{field}.{}", e.path), e.message)),
            );
        }
        if is_exclude {
            for (name, sel) in [
                ("selector", &criteria.selector),
                ("namespaceSelector", &criteria.namespace_selector),
            ] {
                if sel.as_ref().is_some_and(|s| {
                    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                        && s.match_expressions.as_ref().is_none_or(|m| m.is_empty())
                }) {
                    errors.push(FieldError::new(
                        format!("{field}.{name}"),
                        "an empty selector selects everything, so this would exclude every TaskRun; remove it or give it matchLabels/matchExpressions",
                    ));
                }
            }
        }
    }

    let volume_names: BTreeSet<&str> = spec.volumes.iter().map(|v| v.name.as_str()).collect();
    let mut seen_volumes = BTreeSet::new();
    for (i, volume) in spec.volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}].name");
        if !is_dns_label(&volume.name) {
            errors.push(FieldError::new(
                &path,
                format!(
                    "invalid volume name {:?}: must be a DNS-1123 label",
                    volume.name
                ),
            ));
        }
        if volume.name.starts_with("tekton-internal-") {
            errors.push(FieldError::new(
                &path,
                format!(
                    "volume name {:?} cannot start with \"tekton-internal-\" (reserved by Tekton)",
                    volume.name
                ),
            ));
        }
        if !seen_volumes.insert(volume.name.as_str()) {
            errors.push(FieldError::new(
                &path,
                format!("multiple volumes with same name {:?}", volume.name),
            ));
        }
        if volume_source_count(volume) != 1 {
            errors.push(FieldError::new(
                format!("spec.volumes[{i}]"),
                format!(
                    "volume {:?} needs exactly one source (emptyDir, secret, configMap, ...)",
                    volume.name
                ),
            ));
        }
    }

    let mut names = BTreeSet::new();
    for (list, steps) in [
        ("preSteps", &spec.pre_steps),
        ("postSteps", &spec.post_steps),
    ] {
        for (i, step) in steps.iter().enumerate() {
            let path = format!("spec.{list}[{i}]");
            if !step.name.is_empty() && !names.insert(step.name.as_str()) {
                errors.push(FieldError::new(
                    format!("{path}.name"),
                    format!("step name {:?} is used twice in this policy", step.name),
                ));
            }
            check_step(step, &path, settings, &volume_names, &mut errors);
        }
    }
    errors
}

fn volume_source_count(volume: &k8s_openapi::api::core::v1::Volume) -> usize {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(map)) => map.keys().filter(|k| *k != "name").count(),
        _ => 0,
    }
}

/// Tekton's Step rules and bookend's naming rules for one injected step.
fn check_step(
    step: &Step,
    path: &str,
    settings: &Settings,
    volume_names: &BTreeSet<&str>,
    errors: &mut Vec<FieldError>,
) {
    let mut err = |field: &str, message: String| {
        let p = if field.is_empty() {
            path.to_owned()
        } else {
            format!("{path}.{field}")
        };
        errors.push(FieldError::new(p, message));
    };
    let prefix = &settings.prefix;

    // Name: bookend's rules first, they say the most.
    if step.name.is_empty() {
        err(
            "name",
            format!("missing field(s): injected steps need a name starting with {prefix:?}"),
        );
    } else {
        if !step.name.starts_with(prefix.as_str()) {
            err(
                "name",
                format!(
                    "step name {:?} must start with the reserved prefix {prefix:?} (rename it to \"{prefix}{}\")",
                    step.name, step.name
                ),
            );
        }
        if step.name.len() > MAX_STEP_NAME {
            err(
                "name",
                format!(
                    "step name {:?} is {} characters; at most {MAX_STEP_NAME} are allowed (Tekton cuts container names at 63 characters, \"step-\" included)",
                    step.name,
                    step.name.len()
                ),
            );
        }
        if !is_dns_label(&step.name) {
            err(
                "name",
                format!(
                    "invalid value {:?}: Task step name must be a valid DNS Label (lowercase letters, digits and '-')",
                    step.name
                ),
            );
        }
        if settings.is_helper_name(&step.name) {
            err(
                "name",
                format!(
                    "step name {:?} is reserved for bookend's own gate and verdict steps",
                    step.name
                ),
            );
        }
    }

    if let Some(r) = &step.ref_ {
        let forbidden = [
            ("image", step.image.is_some()),
            ("command", step.command.is_some()),
            ("args", step.args.is_some()),
            ("script", step.script.is_some()),
            ("workingDir", step.working_dir.is_some()),
            ("env", step.env.is_some()),
            ("volumeMounts", step.volume_mounts.is_some()),
            ("results", step.results.is_some()),
        ];
        for (field, set) in forbidden {
            if set {
                // Tekton's wording, which spells this one field out.
                let what = if field == "workingDir" {
                    "working dir"
                } else {
                    field
                };
                err(field, format!("{what} cannot be used with Ref"));
            }
        }
        let has = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        match (has(&r.name), has(&r.resolver)) {
            (false, false) => err(
                "ref",
                "expected exactly one, got neither: ref.name, ref.resolver".to_owned(),
            ),
            (true, true) => err(
                "ref",
                "expected exactly one, got both: ref.name, ref.resolver".to_owned(),
            ),
            _ => {}
        }
        if r.params.is_some() && !has(&r.resolver) {
            err(
                "ref.resolver",
                "missing field(s): resolver params need a resolver".to_owned(),
            );
        }
        if let Some(name) = r.name.as_deref().filter(|n| !n.is_empty())
            && !is_qualified_name(name)
        {
            err(
                "ref.name",
                format!("invalid value {name:?}: a StepAction name must be a Kubernetes name"),
            );
        }
    } else {
        if step.params.is_some() {
            err("params", "params cannot be used without Ref".to_owned());
        }
        if step.image.as_deref().is_none_or(str::is_empty) {
            err(
                "image",
                "missing field(s): an injected inline step needs its own image (the TaskRun's stepTemplate may not set one)".to_owned(),
            );
        }
        if step.script.is_some() && step.command.is_some() {
            err("script", "script cannot be used with command".to_owned());
        }
    }

    if let Some(timeout) = &step.timeout {
        match parse_go_duration(timeout) {
            Ok(d) if d < 0.0 => err(
                "timeout",
                format!("invalid value: {timeout}: negative timeout"),
            ),
            Ok(_) => {}
            Err(e) => err("timeout", format!("invalid value {timeout:?}: {e}")),
        }
    }

    for (j, mount) in step.volume_mounts.iter().flatten().enumerate() {
        let cleaned = clean_path(&mount.mount_path);
        if (cleaned == "/tekton" || cleaned.starts_with("/tekton/"))
            && !(cleaned == "/tekton/home" || cleaned.starts_with("/tekton/home/"))
        {
            err(
                &format!("volumeMounts[{j}].mountPath"),
                format!(
                    "volumeMount cannot be mounted under /tekton/ (volumeMount {:?} mounted at {:?})",
                    mount.name, mount.mount_path
                ),
            );
        }
        if mount.name.starts_with("tekton-internal-") {
            err(
                &format!("volumeMounts[{j}].name"),
                format!(
                    "volumeMount name {:?} cannot start with \"tekton-internal-\"",
                    mount.name
                ),
            );
        } else if !volume_names.contains(mount.name.as_str()) {
            err(
                &format!("volumeMounts[{j}].name"),
                format!(
                    "volume {:?} is not defined in spec.volumes of this policy; add it there",
                    mount.name
                ),
            );
        }
    }

    if let Some(on_error) = &step.on_error
        && !matches!(on_error.as_str(), "" | "continue" | "stopAndFail")
        && !on_error.starts_with("$(params.")
    {
        err(
            "onError",
            format!(
                "invalid value: {on_error:?}: Task step onError must be either \"continue\" or \"stopAndFail\""
            ),
        );
    }

    for (j, result) in step.results.iter().flatten().enumerate() {
        if !is_result_name(&result.name) {
            err(
                &format!("results[{j}].name"),
                format!("invalid key name {:?}", result.name),
            );
        }
        match result.type_.as_deref() {
            None | Some("string" | "array") => {}
            Some("object") if result.properties.is_none() => err(
                &format!("results[{j}].properties"),
                "missing field(s): an object result needs properties".to_owned(),
            ),
            Some("object") => {}
            Some(other) => err(
                &format!("results[{j}].type"),
                format!("invalid value: {other}: use string, array or object"),
            ),
        }
    }

    for (j, when) in step.when.iter().flatten().enumerate() {
        let field = format!("when[{j}]");
        let has_classic = when.input.is_some() || when.operator.is_some() || when.values.is_some();
        if when.cel.is_some() {
            if has_classic {
                err(
                    &field,
                    "cel and input+operator+values cannot be set in one WhenExpression".to_owned(),
                );
            }
            continue;
        }
        if !has_classic {
            err(
                &field,
                "missing field(s): an empty when expression".to_owned(),
            );
            continue;
        }
        match when.operator.as_deref() {
            Some("in" | "notin") => {}
            other => err(
                &format!("{field}.operator"),
                format!(
                    "invalid value: operator {:?} is not recognized. valid operators: in,notin",
                    other.unwrap_or("")
                ),
            ),
        }
        if when.values.as_ref().is_none_or(Vec::is_empty) {
            err(
                &format!("{field}.values"),
                "invalid value: expecting non-empty values field".to_owned(),
            );
        }
    }

    // Step-result references are only substituted in env, command and args.
    let result_ref_fields = [
        ("image", step.image.as_deref()),
        ("script", step.script.as_deref()),
        ("workingDir", step.working_dir.as_deref()),
        ("imagePullPolicy", step.image_pull_policy.as_deref()),
    ];
    for (field, value) in result_ref_fields {
        if value.is_some_and(has_step_result_ref) {
            err(
                field,
                format!(
                    "stepResult substitutions are only allowed in env, command and args. Found usage in: {field}"
                ),
            );
        }
    }

    for (j, ws) in step.workspaces.iter().flatten().enumerate() {
        if ws.name.is_empty() {
            err(
                &format!("workspaces[{j}].name"),
                "missing field(s): name".to_owned(),
            );
        }
    }
}

fn has_step_result_ref(s: &str) -> bool {
    s.match_indices("$(steps.").any(|(i, _)| {
        s[i..]
            .split(')')
            .next()
            .is_some_and(|r| r.contains(".results."))
    })
}

fn is_result_name(name: &str) -> bool {
    // ^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$
    !name.is_empty()
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn is_qualified_name(name: &str) -> bool {
    name.len() <= 253
        && name
            .split('.')
            .all(|part| !part.is_empty() && part.len() <= 63 && is_dns_label(part))
}

/// Lexically cleans an absolute path the way Go's `filepath.Clean` does.
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    if path.starts_with('/') {
        format!("/{}", parts.join("/"))
    } else if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`, `-1s`, `0`) into seconds.
pub fn parse_go_duration(s: &str) -> Result<f64, String> {
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0.0);
    }
    if rest.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        if num_len == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    Ok(sign * total)
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
            r#"spec.preSteps[5].name: step name "bookend-verdict" is reserved for bookend's own gate and verdict steps"#,
            r#"spec.preSteps[6].name: step name "bookend-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" is 59 characters; at most 58 are allowed (Tekton cuts container names at 63 characters, "step-" included)"#,
        ];
        assert_eq!(messages(&check_spec(&spec, &settings())), expected);
    }

    /// The spec-level rules' paths and messages.
    #[test]
    fn every_volume_and_name_rule_keeps_its_path_and_message() {
        let spec: StepPolicySpec = serde_json::from_value(serde_json::json!({
            "volumes": [
                {"name": "Bad_Vol", "emptyDir": {}},
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
            r#"spec.volumes[0].name: invalid volume name "Bad_Vol": must be a DNS-1123 label"#,
            r#"spec.volumes[1].name: volume name "tekton-internal-x" cannot start with "tekton-internal-" (reserved by Tekton)"#,
            r#"spec.volumes[3].name: multiple volumes with same name "bookend-a""#,
            r#"spec.volumes[4]: volume "bookend-none" needs exactly one source (emptyDir, secret, configMap, ...)"#,
            r#"spec.volumes[5]: volume "bookend-two" needs exactly one source (emptyDir, secret, configMap, ...)"#,
            r#"spec.postSteps[0].name: step name "bookend-x" is used twice in this policy"#,
        ];
        assert_eq!(messages(&check_spec(&spec, &settings())), expected);
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1h30m").unwrap(), 5400.0);
        assert_eq!(parse_go_duration("300ms").unwrap(), 0.3);
        assert_eq!(parse_go_duration("0").unwrap(), 0.0);
        assert_eq!(parse_go_duration("-2s").unwrap(), -2.0);
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("").is_err());
    }

    #[test]
    fn clean_paths_like_go() {
        assert_eq!(clean_path("/a/./b/../c/"), "/a/c");
        assert_eq!(clean_path("/tekton//home"), "/tekton/home");
        assert_eq!(clean_path("/../x"), "/x");
    }
}
