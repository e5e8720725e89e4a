//! Invariant I1, checked on what bookend admits, written from the policies and Tekton's rules
//! rather than from bookend's composition:
//!
//! For every TaskRun CREATE, the admitted TaskRun carries every applicable Enforce policy's steps
//! exactly once, in policy order, each exactly as its policy defines it once Tekton has merged
//! the stepTemplate into it (bookend's documented `Always` changes aside: `onError: continue`
//! and a condition on one of bookend's own gates), nothing of the author before the first org
//! pre-step or after the last org post-step (bookend's verdict aside), no condition of the
//! author's on an org step, and none of the TaskRun fields Tekton merges into every step set by
//! the author; or it is refused with a message naming the field. A second look at what was
//! admitted changes nothing.

use bookend::engine::{self, Catalog, Decision, Outcome, Request, canonical};
use bookend::policy::{Mode, Policy, PolicySet, PostStepsRun, Verdict};
use bookend::tekton::{self, ApiVersion, TaskRunView};
use regex::Regex;
use serde_json::{Value, json};

/// Where a TaskRun's steps come from, as Tekton's reconciler decides (`GetTaskData`,
/// `GetTaskFunc`): a named taskRef is fetched (through its resolver if it has one), then an
/// inline spec, then a resolver.
#[derive(Debug, PartialEq)]
enum Source {
    Inline,
    Local,
    Remote,
    Refused,
}

fn source_of(taskrun: &Value) -> Source {
    let spec = &taskrun["spec"];
    let task_ref = spec.get("taskRef").filter(|r| !r.is_null());
    let has_spec = spec.get("taskSpec").is_some_and(|s| !s.is_null());
    match (task_ref, has_spec) {
        (None, true) => Source::Inline,
        (None, false) | (Some(_), true) => Source::Refused,
        (Some(r), false) if !r.is_object() => Source::Refused,
        (Some(r), false) => {
            let text = |k: &str| r.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
            if text("bundle").is_some() {
                // Tekton's webhook refuses bundles on create.
                return Source::Refused;
            }
            match (text("name"), text("resolver")) {
                (Some(_), None) => Source::Local,
                _ => Source::Remote,
            }
        }
    }
}

/// Checks the decision bookend made for `taskrun` in `namespace`.
pub fn check(
    taskrun: &Value,
    namespace: &str,
    set: &PolicySet,
    catalog: &Catalog,
    decision: &Decision,
) -> Result<(), String> {
    let request = Request {
        object: taskrun,
        namespace,
        dry_run: false,
    };
    let applied: Vec<&Policy> = engine::explain(request, set, catalog)
        .iter()
        .filter(|e| e.mode == Mode::Enforce && e.verdict == Verdict::Matched)
        .map(|e| {
            set.policies()
                .iter()
                .find(|p| p.id.to_string() == e.policy)
                .expect("an explained policy exists")
        })
        .collect();
    if decision.outcome == Outcome::Denied {
        let message = decision.message.as_deref().unwrap_or("");
        if !message.starts_with("bookend: ")
            || !(message.contains("spec") || message.contains("metadata"))
        {
            return Err(format!("a denial must name the field: {message:?}"));
        }
        return Ok(());
    }
    let admitted = &decision.object;
    let source = source_of(taskrun);
    if applied.is_empty() {
        return if has_reserved_step(admitted, set) {
            Err("a TaskRun no policy applies to keeps reserved-prefix steps".into())
        } else {
            Ok(())
        };
    }
    match source {
        Source::Refused => {
            return Err(format!(
                "admitted a TaskRun Tekton refuses: {:?}",
                taskrun["spec"]
            ));
        }
        Source::Remote => {
            if let Some(p) = applied
                .iter()
                .find(|p| p.spec.remote_task_ref == bookend::policy::RemoteTaskRefPolicy::Deny)
            {
                return Err(format!("{} says remoteTaskRef: Deny", p.id));
            }
            check_run_fields(admitted, set, &applied)?;
            if let Some(p) = applied
                .iter()
                .find(|p| p.spec.user_steps.hermetic() && !p.namespace_level_only())
            {
                return Err(format!(
                    "{} requires hermetic user steps, and a remote Task it cannot reach was admitted",
                    p.id
                ));
            }
            return check_pod_template_keeps_the_jail(admitted, &applied);
        }
        Source::Local => {
            if let Some(p) = applied
                .iter()
                .find(|p| p.spec.task_ref == bookend::policy::TaskRefPolicy::Deny)
            {
                return Err(format!("{} says taskRef: Deny", p.id));
            }
            if applied
                .iter()
                .all(|p| p.spec.task_ref == bookend::policy::TaskRefPolicy::Skip)
            {
                // Unchanged but for bookend's marks, which no TaskRun keeps from its author (I8).
                return if without_marks(admitted) == without_marks(taskrun)
                    && without_marks(admitted) == *admitted
                {
                    Ok(())
                } else {
                    Err("a Skip policy changed the TaskRun".into())
                };
            }
            if source_of(admitted) != Source::Inline {
                return Err("a local Task that Inline policies apply to was not inlined".into());
            }
        }
        Source::Inline => {}
    }
    check_sealed(admitted, &applied, set)?;
    check_run_fields(admitted, set, &applied)?;
    check_hermetic(admitted, &applied, set)?;
    // Idempotent: what was admitted is what bookend writes.
    let again = engine::decide(
        Request {
            object: admitted,
            namespace,
            dry_run: false,
        },
        set,
        catalog,
    );
    if again.outcome != Outcome::Admitted {
        return Err(format!(
            "a second pass over the admitted TaskRun: {:?} {:?} {:?}",
            again.outcome, again.message, again.patch
        ));
    }
    Ok(())
}

fn has_reserved_step(object: &Value, set: &PolicySet) -> bool {
    let prefix = &set.settings().prefix;
    object["spec"]["taskSpec"]["steps"]
        .as_array()
        .is_some_and(|s| {
            s.iter()
                .any(|s| tekton::step_name(s).is_some_and(|n| n.starts_with(prefix.as_str())))
        })
}

/// The steps of an inline TaskRun as Tekton runs them: the stepTemplate merged into each.
fn effective_steps(object: &Value) -> Vec<Value> {
    let version = TaskRunView::new(object).map_or(ApiVersion::V1, |v| v.api_version);
    let template = &object["spec"]["taskSpec"]["stepTemplate"];
    object["spec"]["taskSpec"]["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    if template.is_object() {
                        tekton::merge::merge_step_template(template, s, version).unwrap()
                    } else {
                        s.clone()
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn check_sealed(admitted: &Value, applied: &[&Policy], set: &PolicySet) -> Result<(), String> {
    let settings = set.settings();
    let version = TaskRunView::new(admitted).expect("a TaskRun").api_version;
    let steps = admitted["spec"]["taskSpec"]["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let effective = effective_steps(admitted);
    let as_written = |p: &Policy, i: usize, pre: bool| {
        let def = if pre {
            &p.spec.pre_steps[i]
        } else {
            &p.spec.post_steps[i]
        };
        tekton::convert_container(serde_json::to_value(def).unwrap(), version)
    };
    let pre: Vec<(String, Value)> = applied
        .iter()
        .flat_map(|p| {
            (0..p.spec.pre_steps.len()).map(move |i| (p.id.to_string(), as_written(p, i, true)))
        })
        .collect();
    let post: Vec<(String, Value)> = applied
        .iter()
        .rev()
        .flat_map(|p| {
            (0..p.spec.post_steps.len()).map(move |i| (p.id.to_string(), as_written(p, i, false)))
        })
        .collect();
    let always = applied
        .iter()
        .any(|p| p.spec.post_steps_run == PostStepsRun::Always && !p.spec.post_steps.is_empty());
    let verdict = settings.verdict_name();
    let has_verdict = steps.last().and_then(tekton::step_name) == Some(verdict.as_str());
    if has_verdict && !always {
        return Err("a verdict without an Always policy".into());
    }
    let helpers = Helpers::new(settings);
    if has_verdict {
        helpers.check(&effective[steps.len() - 1], false)?;
    }
    // bookend's gates may stand before any step that is not an Always post-step; every other
    // step is, in order: the org's pre-steps, the author's, the org's post-steps.
    let body_end = steps.len() - usize::from(has_verdict);
    let mut rest = Vec::new();
    let mut jail_check = None;
    let hermetic = applied.iter().any(|p| p.spec.user_steps.hermetic());
    for i in 0..body_end {
        let name = tekton::step_name(&steps[i]).unwrap_or("");
        if name == settings.jail_check_name() {
            if !hermetic || jail_check.replace(i).is_some() {
                return Err(format!(
                    "step {i} ({name}): a jail check where none belongs"
                ));
            }
            helpers
                .check_jail_check(&effective[i])
                .map_err(|e| format!("step {i} ({name}): {e}"))?;
        } else if settings.is_helper_name(name) && !name.ends_with("verdict") {
            helpers
                .check(&effective[i], true)
                .map_err(|e| format!("step {i} ({name}): {e}"))?;
        } else {
            rest.push(i);
        }
    }
    if rest.len() < pre.len() + post.len() + 1 {
        return Err(format!(
            "{} steps cannot hold {} org steps and one of the author's",
            rest.len(),
            pre.len() + post.len()
        ));
    }
    let post_start = rest.len() - post.len();
    // Under hermetic user steps, bookend's jail check runs right before the author's first
    // step (a gate may stand between them under Always).
    if hermetic {
        let first_author = rest[pre.len()];
        let at = jail_check.ok_or("hermetic user steps without bookend's jail check")?;
        if at > first_author
            || (at + 1..first_author).any(|j| {
                let n = tekton::step_name(&steps[j]).unwrap_or("");
                !(settings.is_helper_name(n) && n != settings.jail_check_name())
            })
        {
            return Err(format!(
                "the jail check (step {at}) is not right before the author's first step ({first_author})"
            ));
        }
    }
    for (k, &i) in rest.iter().enumerate() {
        let name = tekton::step_name(&steps[i]).unwrap_or("");
        let org = if k < pre.len() {
            Some(&pre[k])
        } else if k >= post_start {
            Some(&post[k - post_start])
        } else {
            None
        };
        match org {
            Some((policy, def)) => check_org_step(&effective[i], def, &steps, i, &helpers)
                .map_err(|e| format!("step {i} ({name}) of {policy}: {e}"))?,
            None if name.starts_with(settings.prefix.as_str()) => {
                return Err(format!(
                    "step {i} ({name}): a reserved name among the author's steps"
                ));
            }
            None => {}
        }
    }
    // The org's volumes, each once and as defined; no other reserved-prefix volume.
    let volumes = admitted["spec"]["taskSpec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for p in applied {
        for v in &p.spec.volumes {
            let def = serde_json::to_value(v).unwrap();
            let found = volumes
                .iter()
                .filter(|x| x["name"] == def["name"])
                .collect::<Vec<_>>();
            if found.len() != 1 || canonical(found[0]) != canonical(&def) {
                return Err(format!(
                    "volume {} of {} is not there once as defined",
                    v.name, p.id
                ));
            }
        }
    }
    for v in &volumes {
        let name = v["name"].as_str().unwrap_or("");
        if name.starts_with(settings.prefix.as_str())
            && !applied
                .iter()
                .any(|p| p.spec.volumes.iter().any(|pv| pv.name == name))
        {
            return Err(format!(
                "reserved volume {name} that no applied policy injects"
            ));
        }
    }
    Ok(())
}

/// An org step as Tekton runs it against its definition: equal, but for `onError: continue`
/// and conditions on bookend's gates that stand before it.
fn check_org_step(
    step: &Value,
    def: &Value,
    steps: &[Value],
    index: usize,
    helpers: &Helpers,
) -> Result<(), String> {
    let mut step = step.clone();
    let obj = step.as_object_mut().ok_or("not an object")?;
    if obj.get("onError") != def.get("onError") {
        if obj.get("onError") != Some(&json!("continue")) {
            return Err(format!("onError {:?}", obj.get("onError")));
        }
        obj.remove("onError");
    }
    if let Some(Value::Array(whens)) = obj.get_mut("when") {
        let own: Vec<Value> = def
            .get("when")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut kept = Vec::new();
        for when in whens.drain(..) {
            match helpers.gate_of(&when) {
                Some(gate) => {
                    let at = steps
                        .iter()
                        .position(|s| tekton::step_name(s) == Some(gate.as_str()))
                        .ok_or_else(|| format!("a condition on {gate}, which is not there"))?;
                    if at >= index {
                        return Err(format!("a condition on {gate}, which comes after it"));
                    }
                    helpers.check(&steps[at], true)?;
                }
                None => kept.push(when),
            }
        }
        if canonical(&Value::Array(kept.clone())) != canonical(&Value::Array(own)) {
            return Err(format!("conditions the policy does not set: {kept:?}"));
        }
        if kept.is_empty() {
            obj.remove("when");
        } else {
            obj.insert("when".into(), Value::Array(kept));
        }
    }
    let mut def = def.clone();
    if let Some(o) = def.as_object_mut() {
        o.remove("onError");
        if let Some(Value::Array(w)) = o.get("when")
            && w.is_empty()
        {
            o.remove("when");
        }
    }
    let mut step_no_on_error = step;
    if let Some(o) = step_no_on_error.as_object_mut() {
        o.remove("onError");
    }
    if canonical(&step_no_on_error) != canonical(&def) {
        return Err(format!(
            "as Tekton runs it {} differs from the policy's {}",
            canonical(&step_no_on_error),
            canonical(&def)
        ));
    }
    Ok(())
}

/// bookend's gate and verdict steps: busybox running one of two fixed scripts.
struct Helpers {
    image: String,
    prefix: String,
    gate: Regex,
    verdict: Regex,
    legacy_gate: Regex,
    legacy_verdict: Regex,
}

impl Helpers {
    fn new(settings: &bookend::policy::Settings) -> Self {
        Self {
            image: settings.helper_image.clone(),
            prefix: settings.prefix.clone(),
            gate: Regex::new(r#"^cd /tekton/steps;(until \[ -s [0-9]+/exitCode \];do sleep 1;done;)*\[ "(\$\(cat [0-9]+/(results/ok|exitCode)\))+" = (true)?0* \]&&r=true\|\|r=false;printf \$r>\$\(step\.results\.ok\.path\)$"#).unwrap(),
            verdict: Regex::new(r#"^cd /tekton/steps;r=0;for s in [a-z0-9 -]+;do c=\$\(cat \$s/exitCode\);\[ "\$c" = 0 \]\|\|\{ echo "bookend: \$s failed \(exit code \$\{c:-none\}\)";r=1;\};done;exit \$r$"#).unwrap(),
            legacy_gate: Regex::new(r#"^ok=true; (\[ "\$\(cat /tekton/steps/step-[a-z0-9-]+/results/ok 2>/dev/null\)" = true \] \|\| ok=false; )?for s in [a-z0-9: -]+; do c=\$\(cat /tekton/steps/\$\{s%%:\*\}/exitCode 2>/dev/null\); \[ "\$c" = 0 \] \|\| ok=false; done; printf %s "\$ok" > \$\(step\.results\.ok\.path\)$"#).unwrap(),
            legacy_verdict: Regex::new(r#"^rc=0; for s in [a-z0-9: -]+; do c=\$\(cat /tekton/steps/\$\{s%%:\*\}/exitCode 2>/dev/null\); if \[ "\$c" != 0 \]; then echo "bookend: \$\{s#\*:\} failed \(exit code \$\{c:-none\}\)"; rc=1; fi; done; exit \$rc$"#).unwrap(),
        }
    }

    /// The gate a condition names, if it is one of bookend's gate conditions.
    fn gate_of(&self, when: &Value) -> Option<String> {
        let input = when.get("input")?.as_str()?;
        let name = input
            .strip_prefix("$(steps.")?
            .strip_suffix(".results.ok)")?;
        let n = name.strip_prefix(&format!("{}gate-", self.prefix))?;
        (!n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && when.get("operator") == Some(&json!("in"))
            && when.get("values") == Some(&json!(["true"])))
        .then(|| name.to_owned())
    }

    /// bookend's jail check: `:` in the helper image, jailed as the author's steps are (the
    /// two entries, literal, last), no securityContext (the jail needs the image's root user),
    /// and at most a condition on one of bookend's gates.
    fn check_jail_check(&self, step: &Value) -> Result<(), String> {
        let c = canonical(step);
        let keys: Vec<&String> = c
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        let whens = c["when"].as_array().cloned().unwrap_or_default();
        if c["name"] != json!(format!("{}jail-check", self.prefix))
            || c["image"] != json!(self.image)
            || c["command"] != json!(["/bin/sh", "-c"])
            || c["args"] != json!([":"])
            || c["env"]
                != canonical(
                    &json!([{"name": "TEKTON_HERMETIC", "value": "1"}, {"name": "TEKTON_RESOURCE_NAME"}]),
                )
            || whens.len() > 1
            || whens.iter().any(|w| self.gate_of(w).is_none())
            || keys
                .iter()
                .any(|k| !["args", "command", "env", "image", "name", "when"].contains(&k.as_str()))
        {
            return Err(format!("not bookend's jail check: {c}"));
        }
        Ok(())
    }

    /// A step is one of bookend's gates (`gate`) or its verdict, written by bookend.
    fn check(&self, step: &Value, gate: bool) -> Result<(), String> {
        let c = canonical(step);
        let name = c["name"].as_str().unwrap_or("");
        let script = c["args"][0].as_str().unwrap_or("");
        let (name_ok, script_ok) = if gate {
            let n = name
                .strip_prefix(&format!("{}gate-", self.prefix))
                .unwrap_or("");
            (
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()),
                self.gate.is_match(script) || self.legacy_gate.is_match(script),
            )
        } else {
            (
                name == format!("{}verdict", self.prefix),
                self.verdict.is_match(script) || self.legacy_verdict.is_match(script),
            )
        };
        let keys: Vec<&String> = c
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        let allowed = [
            "args",
            "command",
            "image",
            "name",
            "results",
            "securityContext",
        ];
        // The helpers run restricted (Pod Security), or, as earlier releases wrote them, bare.
        let restricted = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}});
        if c.get("securityContext")
            .is_some_and(|sc| *sc != canonical(&restricted))
        {
            return Err(format!("a helper step with another securityContext: {c}"));
        }
        if !name_ok
            || !script_ok
            || c["image"] != json!(self.image)
            || c["command"] != json!(["/bin/sh", "-c"])
            || c["args"].as_array().map(Vec::len) != Some(1)
            || keys.iter().any(|k| !allowed.contains(&k.as_str()))
        {
            return Err(format!("not one of bookend's helper steps: {c}"));
        }
        Ok(())
    }
}

/// The TaskRun fields Tekton merges into every step: none the author's.
fn check_run_fields(admitted: &Value, set: &PolicySet, applied: &[&Policy]) -> Result<(), String> {
    let prefix = set.settings().prefix.as_str();
    let spec = &admitted["spec"];
    for key in ["stepSpecs", "stepOverrides"] {
        for s in spec[key].as_array().into_iter().flatten() {
            if s["name"].as_str().is_some_and(|n| n.starts_with(prefix)) {
                return Err(format!("{key} names {}", s["name"]));
            }
        }
    }
    if spec
        .get("computeResources")
        .is_some_and(|c| canonical(c) != json!({}))
    {
        return Err("TaskRun-level computeResources".into());
    }
    for key in ["env", "hostAliases", "dnsConfig", "dnsPolicy"] {
        if spec["podTemplate"]
            .get(key)
            .is_some_and(|v| canonical(&json!({"v": v})) != json!({}))
        {
            return Err(format!("podTemplate.{key}"));
        }
    }
    if spec["podTemplate"]["hostNetwork"] == json!(true) {
        return Err("podTemplate.hostNetwork".into());
    }
    if admitted["metadata"]["annotations"]["experimental.tekton.dev/execution-mode"]
        == json!("hermetic")
    {
        return Err("hermetic execution mode".into());
    }
    // Tekton's entrypoint holds a failing step for a debugger before it reads `onError`: the
    // Always post-steps would wait for someone to continue.
    // ... and holds a jail check that could not start, under hermetic user steps.
    if applied
        .iter()
        .any(|p| p.spec.post_steps_run == PostStepsRun::Always || p.spec.user_steps.hermetic())
        && spec["debug"]["breakpoints"]["onFailure"]
            .as_str()
            .is_some_and(|v| !v.is_empty())
    {
        return Err(
            "a failure breakpoint under a postStepsRun: Always or userSteps.network: None policy"
                .into(),
        );
    }
    // Directories an org step runs from: its command's, its working directory, its mounts.
    let mut protected: Vec<String> = [
        "bin", "sbin", "usr", "lib", "lib64", "etc", "tekton", "tmp", "opt",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for p in applied {
        for step in p.spec.pre_steps.iter().chain(&p.spec.post_steps) {
            let step = serde_json::to_value(step).unwrap();
            let mut paths: Vec<&str> = vec![
                step["command"][0].as_str().unwrap_or(""),
                step["workingDir"].as_str().unwrap_or(""),
            ];
            for m in step["volumeMounts"].as_array().into_iter().flatten() {
                paths.push(m["mountPath"].as_str().unwrap_or(""));
            }
            for path in paths {
                if let Some(top) = path.strip_prefix('/').and_then(|p| p.split('/').next()) {
                    protected.push(top.to_owned());
                }
            }
        }
    }
    // Workspace names become paths (/workspace/<name>) in every step.
    let plain = |name: &str| {
        !name.is_empty()
            && !name.contains("..")
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    for w in spec["workspaces"]
        .as_array()
        .into_iter()
        .chain(spec["taskSpec"]["workspaces"].as_array())
        .flatten()
    {
        let name = w["name"].as_str().unwrap_or("");
        if !plain(name) {
            return Err(format!("a workspace named {name:?}"));
        }
    }
    // Mount names Tekton substitutes could name any volume; a workspace's volume is Tekton's.
    let holders = spec["taskSpec"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(
            spec["taskSpec"]["sidecars"]
                .as_array()
                .into_iter()
                .flatten(),
        )
        .chain(std::iter::once(&spec["taskSpec"]["stepTemplate"]));
    for holder in holders {
        for m in holder["volumeMounts"].as_array().into_iter().flatten() {
            let name = m["name"].as_str().unwrap_or("");
            let workspace_volume = name
                .strip_prefix("$(workspaces.")
                .and_then(|r| r.strip_suffix(".volume)"))
                .is_some_and(plain);
            if name.contains("$(") && !workspace_volume {
                return Err(format!("a mount named {name:?}"));
            }
        }
    }
    for w in spec["taskSpec"]["workspaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let path = w["mountPath"].as_str().unwrap_or("");
        let top = path.trim_start_matches('/').split('/').next().unwrap_or("");
        if path.contains("$(")
            || path.trim_end_matches('/').is_empty() && !path.is_empty()
            || protected.iter().any(|p| p == top)
        {
            return Err(format!("a workspace at {path}"));
        }
    }
    Ok(())
}

/// The TaskRun without the marks bookend writes (record, verification label, verified mark).
fn without_marks(taskrun: &Value) -> Value {
    use bookend::engine::record;
    let mut object = taskrun.clone();
    for (map, key) in [
        ("annotations", record::ANNOTATION),
        ("annotations", record::VERIFIED_ANNOTATION),
        ("labels", record::LABEL),
    ] {
        if let Some(entries) = object
            .pointer_mut(&format!("/metadata/{map}"))
            .and_then(Value::as_object_mut)
        {
            entries.remove(key);
        }
    }
    object
}

/// I9: under a policy with `userSteps.network: None`, every step of the author's is jailed as
/// the kubelet and Tekton's entrypoint read its env (the last entry of a name, `env` over
/// `envFrom`; `TEKTON_HERMETIC` "1" and `TEKTON_RESOURCE_NAME` empty, both literal), runs
/// nothing outside the entrypoint, and no org step is jailed (bookend's jail check is, like the
/// author's steps); nothing that runs beside the steps
/// with the network (sidecars) or gives them a socket of the node (hostPath) is admitted.
fn check_hermetic(admitted: &Value, applied: &[&Policy], set: &PolicySet) -> Result<(), String> {
    if !applied.iter().any(|p| p.spec.user_steps.hermetic()) {
        return Ok(());
    }
    // The platform's jail leaves the network to the platform's steps only.
    if applied
        .iter()
        .any(|p| p.spec.user_steps.hermetic() && p.id.namespace().is_none())
        && let Some(p) = applied
            .iter()
            .find(|p| p.id.namespace().is_some() && p.step_names().next().is_some())
    {
        return Err(format!(
            "{}'s steps keep the network under a ClusterStepPolicy's jail",
            p.id
        ));
    }
    let prefix = set.settings().prefix.as_str();
    let last = |env: &[Value], name: &str| -> Option<Value> {
        env.iter().rev().find(|e| e["name"] == json!(name)).cloned()
    };
    let literal = |entry: &Option<Value>, want: &str| {
        entry.as_ref().is_some_and(|e| {
            e.get("valueFrom").is_none_or(Value::is_null)
                && e.get("value").and_then(Value::as_str).unwrap_or("") == want
                && e.get("value").is_none_or(|v| v.is_string() || v.is_null())
        })
    };
    for step in effective_steps(admitted) {
        let name = tekton::step_name(&step).unwrap_or("<unnamed>").to_owned();
        let env: Vec<Value> = step["env"].as_array().cloned().unwrap_or_default();
        let hermetic = last(&env, "TEKTON_HERMETIC");
        let resource = last(&env, "TEKTON_RESOURCE_NAME");
        // bookend's jail check runs `:` in the jail, as the author's steps run.
        let jail_check = name == format!("{prefix}jail-check");
        if name.starts_with(prefix) && !jail_check {
            if literal(&hermetic, "1") {
                return Err(format!("org step {name} is jailed"));
            }
            continue;
        }
        if !literal(&hermetic, "1") || !literal(&resource, "") {
            return Err(format!(
                "the author's step {name} keeps the network: env {env:?}"
            ));
        }
        // A name Tekton substitutes after admission may not come after the jail.
        let jail_at = env
            .iter()
            .rposition(|e| e["name"] == json!("TEKTON_HERMETIC"))
            .unwrap_or(0);
        if env[jail_at..]
            .iter()
            .any(|e| e["name"].as_str().is_some_and(|n| n.contains("$(")))
        {
            return Err(format!(
                "the author's step {name} has a variable env name after the jail"
            ));
        }
        for key in [
            "ref",
            "lifecycle",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        ] {
            if step.get(key).is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "the author's step {name} has {key}, outside the jail"
                ));
            }
        }
    }
    let task_spec = &admitted["spec"]["taskSpec"];
    if task_spec["sidecars"]
        .as_array()
        .is_some_and(|s| !s.is_empty())
    {
        return Err("sidecars beside hermetic steps".into());
    }
    for volumes in [
        &task_spec["volumes"],
        &admitted["spec"]["podTemplate"]["volumes"],
    ] {
        if volumes
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        {
            return Err("a hostPath volume beside hermetic steps".into());
        }
    }
    for volume in task_spec["volumes"].as_array().into_iter().flatten() {
        not_networked(volume, false)?;
    }
    check_pod_template_keeps_the_jail(admitted, applied)
}

/// Tekton appends podTemplate env after every step's own: none for the jail's variables.
fn check_pod_template_keeps_the_jail(admitted: &Value, applied: &[&Policy]) -> Result<(), String> {
    if !applied.iter().any(|p| p.spec.user_steps.hermetic()) {
        return Ok(());
    }
    let pod_template = &admitted["spec"]["podTemplate"];
    for e in pod_template["env"].as_array().into_iter().flatten() {
        if matches!(
            e["name"].as_str(),
            Some("TEKTON_HERMETIC" | "TEKTON_RESOURCE_NAME")
        ) {
            return Err(format!("podTemplate env {e} decides the jail"));
        }
    }
    if pod_template["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
    {
        return Err("a podTemplate hostPath volume beside hermetic steps".into());
    }
    for volume in pod_template["volumes"].as_array().into_iter().flatten() {
        not_networked(volume, false)?;
    }
    for binding in admitted["spec"]["workspaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        not_networked(binding, true)?;
    }
    may_run_off_linux(pod_template)
}

/// A volume (or a workspace binding) whose source the kubelet mounts over the network, or
/// from the node: an error naming it. Only the sources the kubelet fills from the API server
/// or local disk, and the platform's claims, are fine.
pub fn not_networked(volume: &Value, binding: bool) -> Result<(), String> {
    const LOCAL: &[&str] = &[
        "name",
        "emptyDir",
        "configMap",
        "secret",
        "downwardAPI",
        "projected",
        "persistentVolumeClaim",
        "ephemeral",
    ];
    for (key, value) in volume.as_object().into_iter().flatten() {
        let local = LOCAL.contains(&key.as_str())
            || (binding && matches!(key.as_str(), "subPath" | "volumeClaimTemplate"));
        if !local && !value.is_null() {
            return Err(format!("a {key} volume beside hermetic steps: {volume}"));
        }
    }
    Ok(())
}

/// A podTemplate or Pod spec that lets the scheduler pick a node that is not Linux (where
/// Tekton's entrypoint ignores TEKTON_HERMETIC).
pub fn may_run_off_linux(template: &Value) -> Result<(), String> {
    for label in ["kubernetes.io/os", "beta.kubernetes.io/os"] {
        if let Some(os) = template["nodeSelector"].get(label)
            && os != "linux"
        {
            return Err(format!("nodeSelector {label}={os} beside hermetic steps"));
        }
        let affinity = &template["affinity"]["nodeAffinity"];
        let required =
            affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                .as_array()
                .into_iter()
                .flatten();
        let preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| &p["preference"]);
        for term in required.chain(preferred) {
            for e in term["matchExpressions"].as_array().into_iter().flatten() {
                if e["key"] == label
                    && !(e["operator"] == "In"
                        && e["values"]
                            .as_array()
                            .is_some_and(|v| !v.is_empty() && v.iter().all(|x| x == "linux")))
                {
                    return Err(format!("node affinity {e} beside hermetic steps"));
                }
            }
        }
    }
    if let Some(os) = template.pointer("/os/name")
        && os != "linux"
    {
        return Err(format!("os.name {os} beside hermetic steps"));
    }
    Ok(())
}
