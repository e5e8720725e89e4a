//! Tekton's Step rules, one function per rule group, in the order `check_step` runs them.
//!
//! Each group is one paragraph of "Step rules" in `docs/tekton-notes.md`, which names the
//! Tekton function (v1.15.0, `pkg/apis/pipeline/v1/`) it follows. Messages use Tekton's wording
//! where Tekton has one; bookend's own rules (the reserved prefix, the 58-character limit, the
//! policy's volumes) come first in their group because they say the most.

use std::collections::BTreeSet;

use super::path::{Errors, FieldPath};
use super::syntax::{
    clean_path, has_step_result_ref, is_qualified_name, is_result_name, parse_go_duration,
    references,
};
use crate::policy::Settings;
use crate::policy::api::Step;
use crate::policy::select::is_dns_label;

/// Longest injected step name: Tekton's container name `step-<name>` is cut at 63 characters, so
/// two names that share their first 58 characters collide at Pod creation.
pub const MAX_STEP_NAME: usize = 58;

/// What the groups need besides the step.
pub(super) struct Context<'a> {
    pub settings: &'a Settings,
    /// The policy's `spec.volumes` names.
    pub volume_names: &'a BTreeSet<&'a str>,
}

/// One rule group: checks `step` (at `at`) and records what is wrong.
pub(super) type Group = fn(&Step, &FieldPath, &Context<'_>, &mut Errors);

/// The groups, by the name their paragraph in `docs/tekton-notes.md` starts with.
pub(super) const GROUPS: &[(&str, Group)] = &[
    ("name", name),
    ("ref or inline", reference),
    ("timeout", timeout),
    ("volumeMounts", mounts),
    ("onError", on_error),
    ("results", results),
    ("when", when),
    ("step-result references", result_references),
    ("workspaces", workspaces),
    ("context variables", context_variables),
    ("step-result variables", result_variables),
];

/// Every group on one injected step.
pub(super) fn check_step(step: &Step, at: &FieldPath, cx: &Context<'_>, errs: &mut Errors) {
    for (_, group) in GROUPS {
        group(step, at, cx, errs);
    }
}

/// `Step.Validate` (`validation.IsDNS1123Label` on a non-empty name), plus bookend's rules:
/// a name is required, starts with the reserved prefix, fits in 58 characters and is not one
/// of bookend's helper names.
fn name(step: &Step, at: &FieldPath, cx: &Context<'_>, errs: &mut Errors) {
    let at = at.field("name");
    let prefix = &cx.settings.prefix;
    let name = &step.name;
    if name.is_empty() {
        errs.add(
            &at,
            format!("missing field(s): injected steps need a name starting with {prefix:?}"),
        );
        return;
    }
    if !name.starts_with(prefix.as_str()) {
        errs.add(
            &at,
            format!(
                "step name {name:?} must start with the reserved prefix {prefix:?} (rename it to \"{prefix}{name}\")"
            ),
        );
    }
    if name.len() > MAX_STEP_NAME {
        errs.add(
            &at,
            format!(
                "step name {name:?} is {} characters; at most {MAX_STEP_NAME} are allowed (Tekton cuts container names at 63 characters, \"step-\" included)",
                name.len()
            ),
        );
    }
    if !is_dns_label(name) {
        errs.add(
            &at,
            format!(
                "invalid value {name:?}: Task step name must be a valid DNS Label (lowercase letters, digits and '-')"
            ),
        );
    }
    if cx.settings.is_helper_name(name) {
        errs.add(
            &at,
            format!(
                "step name {name:?} is reserved for bookend's own helper steps (gates, verdict, jail check)"
            ),
        );
    }
    if cx.settings.is_reset_name(name) {
        errs.add(
            &at,
            format!(
                "step name {name:?} is reserved for bookend's own step that resets a policy's results (names starting {:?})",
                cx.settings.reset_name("")
            ),
        );
    }
}

/// `Step.Validate`'s `if s.Ref != nil { … } else { … }` and `Ref.Validate` (`validateRef`):
/// a StepAction step has none of the container fields, exactly one of `ref.name` and
/// `ref.resolver`, params only with a resolver; an inline step has no `params`, an image of its
/// own (bookend's rule: the TaskRun's stepTemplate may not give one), and not `script` with
/// `command`.
fn reference(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    let Some(r) = &step.ref_ else {
        if step.params.is_some() {
            errs.add(&at.field("params"), "params cannot be used without Ref");
        }
        if step.image.as_deref().is_none_or(str::is_empty) {
            errs.add(
                &at.field("image"),
                "missing field(s): an injected inline step needs its own image (the TaskRun's stepTemplate may not set one)",
            );
        }
        if step.script.is_some() && step.command.is_some() {
            errs.add(&at.field("script"), "script cannot be used with command");
        }
        return;
    };
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
            errs.add(&at.field(field), format!("{what} cannot be used with Ref"));
        }
    }
    let at = at.field("ref");
    let has = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    match (has(&r.name), has(&r.resolver)) {
        (false, false) => errs.add(
            &at,
            "expected exactly one, got neither: ref.name, ref.resolver",
        ),
        (true, true) => errs.add(
            &at,
            "expected exactly one, got both: ref.name, ref.resolver",
        ),
        _ => {}
    }
    if r.params.is_some() && !has(&r.resolver) {
        errs.add(
            &at.field("resolver"),
            "missing field(s): resolver params need a resolver",
        );
    }
    if let Some(name) = r.name.as_deref().filter(|n| !n.is_empty())
        && !is_qualified_name(name)
    {
        errs.add(
            &at.field("name"),
            format!("invalid value {name:?}: a StepAction name must be a Kubernetes name"),
        );
    }
}

/// `Step.Validate`: a timeout is not negative (`negative timeout`); bookend also parses it as
/// the Go duration Tekton's JSON decoding expects.
fn timeout(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    let Some(timeout) = &step.timeout else {
        return;
    };
    let at = at.field("timeout");
    match parse_go_duration(timeout) {
        Ok(d) if d < 0.0 => errs.add(&at, format!("invalid value: {timeout}: negative timeout")),
        Ok(_) => {}
        Err(e) => errs.add(&at, format!("invalid value {timeout:?}: {e}")),
    }
}

/// `Step.Validate`'s `volumeMounts` loop: not under `/tekton/` (but `/tekton/home`), no name
/// starting with `tekton-internal-`; bookend's rule: every mount names one of the policy's
/// volumes.
fn mounts(step: &Step, at: &FieldPath, cx: &Context<'_>, errs: &mut Errors) {
    for (j, mount) in step.volume_mounts.iter().flatten().enumerate() {
        let at = at.field_index("volumeMounts", j);
        let cleaned = clean_path(&mount.mount_path);
        if (cleaned == "/tekton" || cleaned.starts_with("/tekton/"))
            && !(cleaned == "/tekton/home" || cleaned.starts_with("/tekton/home/"))
        {
            errs.add(
                &at.field("mountPath"),
                format!(
                    "volumeMount cannot be mounted under /tekton/ (volumeMount {:?} mounted at {:?})",
                    mount.name, mount.mount_path
                ),
            );
        }
        if mount.name.starts_with("tekton-internal-") {
            errs.add(
                &at.field("name"),
                format!(
                    "volumeMount name {:?} cannot start with \"tekton-internal-\"",
                    mount.name
                ),
            );
        } else if !cx.volume_names.contains(mount.name.as_str()) {
            errs.add(
                &at.field("name"),
                format!(
                    "volume {:?} is not defined in spec.volumes of this policy; add it there",
                    mount.name
                ),
            );
        }
    }
}

/// `Step.Validate` with `isParamRefs`: `onError` is `continue`, `stopAndFail` or starts with
/// `$(params.`.
fn on_error(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    if let Some(on_error) = &step.on_error
        && !matches!(on_error.as_str(), "" | "continue" | "stopAndFail")
        && !on_error.starts_with("$(params.")
    {
        errs.add(
            &at.field("onError"),
            format!(
                "invalid value: {on_error:?}: Task step onError must be either \"continue\" or \"stopAndFail\""
            ),
        );
    }
}

/// `ValidateStepResults` → `StepResult.Validate` and `validateObjectStepResult`: result names
/// follow `ResultNameFormat`, types are string, array or object, an object has properties.
fn results(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    for (j, result) in step.results.iter().flatten().enumerate() {
        let at = at.field_index("results", j);
        if !is_result_name(&result.name) {
            errs.add(
                &at.field("name"),
                format!("invalid key name {:?}", result.name),
            );
        }
        match result.type_.as_deref() {
            None | Some("string" | "array") => {}
            Some("object") if result.properties.is_none() => errs.add(
                &at.field("properties"),
                "missing field(s): an object result needs properties",
            ),
            Some("object") => {}
            Some(other) => errs.add(
                &at.field("type"),
                format!("invalid value: {other}: use string, array or object"),
            ),
        }
    }
}

/// `WhenExpressions.validate` → `validateWhenExpressionFields`: `cel` alone, or `input`,
/// operator `in`/`notin` and non-empty `values`; never empty.
fn when(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    for (j, when) in step.when.iter().flatten().enumerate() {
        let at = at.field_index("when", j);
        let has_classic = when.input.is_some() || when.operator.is_some() || when.values.is_some();
        if when.cel.is_some() {
            if has_classic {
                errs.add(
                    &at,
                    "cel and input+operator+values cannot be set in one WhenExpression",
                );
            }
            continue;
        }
        if !has_classic {
            errs.add(&at, "missing field(s): an empty when expression");
            continue;
        }
        match when.operator.as_deref() {
            Some("in" | "notin") => {}
            other => errs.add(
                &at.field("operator"),
                format!(
                    "invalid value: operator {:?} is not recognized. valid operators: in,notin",
                    other.unwrap_or("")
                ),
            ),
        }
        if when.values.as_ref().is_none_or(Vec::is_empty) {
            errs.add(
                &at.field("values"),
                "invalid value: expecting non-empty values field",
            );
        }
    }
}

/// `validateStepResultReference` → `errorIfStepResultReferencedInField`: step results are only
/// substituted in `env`, `command` and `args`, so `$(steps.<s>.results.<r>)` anywhere else
/// (bookend checks `image`, `script`, `workingDir`, `imagePullPolicy`) is refused.
fn result_references(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    let fields = [
        ("image", step.image.as_deref()),
        ("script", step.script.as_deref()),
        ("workingDir", step.working_dir.as_deref()),
        ("imagePullPolicy", step.image_pull_policy.as_deref()),
    ];
    for (field, value) in fields {
        if value.is_some_and(has_step_result_ref) {
            errs.add(
                &at.field(field),
                format!(
                    "stepResult substitutions are only allowed in env, command and args. Found usage in: {field}"
                ),
            );
        }
    }
}

/// `validateWorkspaceUsages`: a step workspace has a name. That it names a workspace the Task
/// declares is checked when the step is injected (the policy does not know the Task).
fn workspaces(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    for (j, ws) in step.workspaces.iter().flatten().enumerate() {
        if ws.name.is_empty() {
            errs.add(
                &at.field_index("workspaces", j).field("name"),
                "missing field(s): name",
            );
        }
    }
}

/// `validateTaskContextVariables` (through `validateStepVariables`): only
/// `$(context.taskRun.{name,namespace,uid})` and `$(context.task.{name,retry-count})` exist;
/// Tekton refuses the whole TaskRun over any other, so bookend refuses the policy.
fn context_variables(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    for (field, value) in substituted_fields(step, at) {
        for r in references(value) {
            let (known, names): (&[&str], &str) =
                if let Some(var) = r.strip_prefix("context.taskRun.") {
                    if ["name", "namespace", "uid"].contains(&var) {
                        continue;
                    }
                    (&["name", "namespace", "uid"], "context.taskRun")
                } else if let Some(var) = r.strip_prefix("context.task.") {
                    if ["name", "retry-count"].contains(&var) {
                        continue;
                    }
                    (&["name", "retry-count"], "context.task")
                } else {
                    continue;
                };
            errs.add(
                &field,
                format!(
                    "non-existent variable $({r}): Tekton has only {}",
                    known
                        .iter()
                        .map(|k| format!("$({names}.{k})"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

/// `ValidateStepResultsVariables`: when the step declares results, every
/// `$(step.results.<r>.path)` in its script names one of them.
fn result_variables(step: &Step, at: &FieldPath, _: &Context<'_>, errs: &mut Errors) {
    let (Some(results), Some(script)) = (&step.results, &step.script) else {
        return;
    };
    for r in references(script) {
        let Some(name) = r
            .strip_prefix("step.results.")
            .map(|rest| rest.split_once('.').map_or(rest, |(n, _)| n))
        else {
            continue;
        };
        if !results.iter().any(|d| d.name == name) {
            let declared: Vec<&str> = results.iter().map(|d| d.name.as_str()).collect();
            errs.add(
                &at.field("script"),
                format!(
                    "non-existent variable $({r}): the step declares no result {name:?} (its results: {declared:?})"
                ),
            );
        }
    }
}

/// The fields Tekton's `validateStepVariables` looks into, with their paths.
fn substituted_fields<'s>(step: &'s Step, at: &FieldPath) -> Vec<(FieldPath, &'s str)> {
    let mut fields = Vec::new();
    let mut one = |path: FieldPath, value: Option<&'s str>| {
        if let Some(v) = value {
            fields.push((path, v));
        }
    };
    one(at.field("image"), step.image.as_deref());
    one(at.field("workingDir"), step.working_dir.as_deref());
    one(at.field("script"), step.script.as_deref());
    for (i, c) in step.command.iter().flatten().enumerate() {
        one(at.field_index("command", i), Some(c));
    }
    for (i, a) in step.args.iter().flatten().enumerate() {
        one(at.field_index("args", i), Some(a));
    }
    for env in step.env.iter().flatten() {
        one(at.field("env").key(&env.name), env.value.as_deref());
    }
    for (i, m) in step.volume_mounts.iter().flatten().enumerate() {
        let mount = at.field_index("volumeMounts", i);
        one(mount.field("mountPath"), Some(&m.mount_path));
        one(mount.field("subPath"), m.sub_path.as_deref());
    }
    one(at.field("onError"), step.on_error.as_deref());
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::{StepRef, StepResult, WhenExpression, WorkspaceUsage};
    use k8s_openapi::api::core::v1::{EnvVar, VolumeMount};

    /// Runs one group on `step` at `spec.preSteps[0]`, with the volume `bookend-cache`.
    fn run(group: Group, step: &Step) -> Vec<String> {
        let settings = Settings::default();
        let volume_names = BTreeSet::from(["bookend-cache"]);
        let cx = Context {
            settings: &settings,
            volume_names: &volume_names,
        };
        let mut errs = Errors::new();
        group(
            step,
            &FieldPath::new("spec").field_index("preSteps", 0),
            &cx,
            &mut errs,
        );
        errs.into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect()
    }

    fn inline(name: &str) -> Step {
        Step {
            name: name.into(),
            image: Some("alpine:3".into()),
            ..Step::default()
        }
    }

    /// Each group is one paragraph of "Step rules" in the Tekton notes, in the same order.
    #[test]
    fn every_group_has_its_paragraph_in_the_tekton_notes() {
        let notes = include_str!("../../../docs/tekton-notes.md");
        let section = notes
            .split("\n## Step rules\n")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .expect("a Step rules section");
        let paragraphs: Vec<&str> = section
            .split("\n\n")
            .filter_map(|p| {
                p.strip_prefix("**")?
                    .split_once(".**")
                    .map(|(name, _)| name)
            })
            .collect();
        let groups: Vec<&str> = GROUPS.iter().map(|(name, _)| *name).collect();
        assert_eq!(paragraphs, groups);
    }

    #[test]
    fn every_group_passes_a_good_step() {
        let mut step = inline("bookend-ok");
        step.script = Some("echo $(context.taskRun.name) > $(step.results.out.path)".into());
        step.results = Some(vec![StepResult {
            name: "out".into(),
            ..StepResult::default()
        }]);
        for (group_name, group) in GROUPS {
            assert_eq!(run(*group, &step), Vec::<String>::new(), "{group_name}");
        }
    }

    #[test]
    fn name_group() {
        assert_eq!(
            run(name, &inline("")),
            [
                r#"spec.preSteps[0].name: missing field(s): injected steps need a name starting with "bookend-""#
            ]
        );
        let m = run(name, &inline("Creds"));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].contains("must start with the reserved prefix"),
            "{m:?}"
        );
        assert!(m[1].contains("valid DNS Label"), "{m:?}");
        let long = format!("bookend-{}", "a".repeat(51));
        assert!(run(name, &inline(&long))[0].contains("at most 58"));
        assert!(run(name, &inline(&long[..58])).is_empty());
        for helper in ["bookend-verdict", "bookend-gate-1", "bookend-gate-12"] {
            assert!(
                run(name, &inline(helper))[0].contains("reserved for bookend's own"),
                "{helper}"
            );
        }
        assert!(run(name, &inline("bookend-gate-x")).is_empty());
    }

    #[test]
    fn ref_or_inline_group() {
        let mut step = inline("bookend-x");
        step.params = Some(vec![]);
        step.script = Some("echo".into());
        step.command = Some(vec!["sh".into()]);
        assert_eq!(
            run(reference, &step),
            [
                "spec.preSteps[0].params: params cannot be used without Ref",
                "spec.preSteps[0].script: script cannot be used with command",
            ]
        );
        step.image = None;
        assert!(run(reference, &step)[1].contains("spec.preSteps[0].image: missing field"));
        let by_name = Step {
            name: "bookend-x".into(),
            env: Some(vec![]),
            ref_: Some(StepRef {
                name: Some("git-clone".into()),
                ..StepRef::default()
            }),
            ..Step::default()
        };
        assert_eq!(
            run(reference, &by_name),
            ["spec.preSteps[0].env: env cannot be used with Ref"]
        );
        let remote = Step {
            name: "bookend-x".into(),
            ref_: Some(StepRef {
                resolver: Some("git".into()),
                params: Some(vec![]),
                ..StepRef::default()
            }),
            ..Step::default()
        };
        assert!(run(reference, &remote).is_empty());
        let params_only = Step {
            ref_: Some(StepRef {
                params: Some(vec![]),
                ..StepRef::default()
            }),
            ..remote
        };
        assert_eq!(
            run(reference, &params_only),
            [
                "spec.preSteps[0].ref: expected exactly one, got neither: ref.name, ref.resolver",
                "spec.preSteps[0].ref.resolver: missing field(s): resolver params need a resolver",
            ]
        );
    }

    #[test]
    fn timeout_group() {
        let with = |t: &str| {
            let mut step = inline("bookend-x");
            step.timeout = Some(t.into());
            run(timeout, &step)
        };
        assert!(with("1h30m").is_empty());
        assert!(with("0").is_empty());
        assert_eq!(
            with("-1s"),
            ["spec.preSteps[0].timeout: invalid value: -1s: negative timeout"]
        );
        assert_eq!(
            with("10"),
            [r#"spec.preSteps[0].timeout: invalid value "10": missing unit in duration "10""#]
        );
    }

    #[test]
    fn volume_mounts_group() {
        let mount = |name: &str, path: &str| VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..VolumeMount::default()
        };
        let mut step = inline("bookend-x");
        step.volume_mounts = Some(vec![
            mount("bookend-cache", "/cache"),
            mount("bookend-cache", "/tekton/home/.cache"),
            mount("bookend-cache", "/tekton"),
            mount("tekton-internal-bin", "/bin2"),
            mount("undeclared", "/x"),
        ]);
        assert_eq!(
            run(mounts, &step),
            [
                r#"spec.preSteps[0].volumeMounts[2].mountPath: volumeMount cannot be mounted under /tekton/ (volumeMount "bookend-cache" mounted at "/tekton")"#,
                r#"spec.preSteps[0].volumeMounts[3].name: volumeMount name "tekton-internal-bin" cannot start with "tekton-internal-""#,
                r#"spec.preSteps[0].volumeMounts[4].name: volume "undeclared" is not defined in spec.volumes of this policy; add it there"#,
            ]
        );
    }

    #[test]
    fn on_error_group() {
        for (value, ok) in [
            ("continue", true),
            ("stopAndFail", true),
            ("$(params.mode)", true),
            ("", true),
            ("Continue", false),
            ("$(context.task.name)", false),
        ] {
            let mut step = inline("bookend-x");
            step.on_error = Some(value.into());
            assert_eq!(run(on_error, &step).is_empty(), ok, "{value}");
        }
    }

    #[test]
    fn results_group() {
        let result = |name: &str, type_: Option<&str>| StepResult {
            name: name.into(),
            type_: type_.map(Into::into),
            ..StepResult::default()
        };
        let mut step = inline("bookend-x");
        step.results = Some(vec![
            result("digest", None),
            result("list", Some("array")),
            result("bad-", Some("string")),
            result("obj", Some("object")),
            result("n", Some("int")),
        ]);
        assert_eq!(
            run(results, &step),
            [
                r#"spec.preSteps[0].results[2].name: invalid key name "bad-""#,
                "spec.preSteps[0].results[3].properties: missing field(s): an object result needs properties",
                "spec.preSteps[0].results[4].type: invalid value: int: use string, array or object",
            ]
        );
    }

    #[test]
    fn when_group() {
        let w =
            |input: Option<&str>, op: Option<&str>, values: Option<&[&str]>, cel| WhenExpression {
                input: input.map(Into::into),
                operator: op.map(Into::into),
                values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
                cel,
            };
        let mut step = inline("bookend-x");
        step.when = Some(vec![
            w(Some("a"), Some("in"), Some(&["a"]), None),
            w(None, None, None, Some("'a' == 'a'".into())),
            w(None, None, None, None),
            w(Some("a"), None, None, Some("true".into())),
            w(Some("a"), Some("notin"), Some(&[]), None),
        ]);
        assert_eq!(
            run(when, &step),
            [
                "spec.preSteps[0].when[2]: missing field(s): an empty when expression",
                "spec.preSteps[0].when[3]: cel and input+operator+values cannot be set in one WhenExpression",
                "spec.preSteps[0].when[4].values: invalid value: expecting non-empty values field",
            ]
        );
    }

    #[test]
    fn step_result_references_group() {
        let mut step = inline("bookend-x");
        step.command = Some(vec!["$(steps.a.results.cmd)".into()]);
        step.args = Some(vec!["$(steps.a.results.arg)".into()]);
        step.env = Some(vec![EnvVar {
            name: "A".into(),
            value: Some("$(steps.a.results.env)".into()),
            ..EnvVar::default()
        }]);
        assert!(run(result_references, &step).is_empty());
        step.image = Some("$(steps.a.results.image)".into());
        assert_eq!(
            run(result_references, &step),
            [
                "spec.preSteps[0].image: stepResult substitutions are only allowed in env, command and args. Found usage in: image"
            ]
        );
    }

    #[test]
    fn workspaces_group() {
        let mut step = inline("bookend-x");
        step.workspaces = Some(vec![
            WorkspaceUsage {
                name: "source".into(),
                mount_path: None,
            },
            WorkspaceUsage::default(),
        ]);
        assert_eq!(
            run(workspaces, &step),
            ["spec.preSteps[0].workspaces[1].name: missing field(s): name"]
        );
    }

    #[test]
    fn context_variables_group() {
        let mut step = inline("bookend-x");
        step.args = Some(vec![
            "$(context.taskRun.name) $(context.taskRun.namespace) $(context.taskRun.uid)".into(),
            "$(context.task.name) $(context.task.retry-count) $(context.pipelineRun.name)".into(),
        ]);
        assert!(run(context_variables, &step).is_empty());
        step.env = Some(vec![EnvVar {
            name: "SA".into(),
            value: Some("$(context.taskRun.serviceAccountName)".into()),
            ..EnvVar::default()
        }]);
        step.working_dir = Some("/w/$(context.task.namespace)".into());
        assert_eq!(
            run(context_variables, &step),
            [
                "spec.preSteps[0].workingDir: non-existent variable $(context.task.namespace): Tekton has only $(context.task.name), $(context.task.retry-count)",
                "spec.preSteps[0].env[SA]: non-existent variable $(context.taskRun.serviceAccountName): Tekton has only $(context.taskRun.name), $(context.taskRun.namespace), $(context.taskRun.uid)",
            ]
        );
    }

    #[test]
    fn step_result_variables_group() {
        let mut step = inline("bookend-x");
        step.script = Some("echo > $(step.results.other.path)".into());
        // Without declared results Tekton does not look (and neither does bookend).
        assert!(run(result_variables, &step).is_empty());
        step.results = Some(vec![StepResult {
            name: "out".into(),
            ..StepResult::default()
        }]);
        assert_eq!(
            run(result_variables, &step),
            [
                r#"spec.preSteps[0].script: non-existent variable $(step.results.other.path): the step declares no result "other" (its results: ["out"])"#
            ]
        );
        step.script = Some("echo > $(step.results.out.path); cat $(results.x.path)".into());
        assert!(run(result_variables, &step).is_empty());
    }
}
