//! Building the final step list: strip what bookend injected earlier, then put the policies'
//! steps around the user's, re-index references, and add gates and a verdict for
//! `postStepsRun: Always`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::canonical::canonical;
use super::record::Record;
use super::{Denial, reindex};
use crate::policy::{Policy, PolicySet, PostStepsRun, Settings};
use crate::tekton::{self, ApiVersion};

/// What a step in the final list is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// The user's step with this ordinal (index in the user's own list).
    User(usize),
    /// A pre-step or post-step of the applied policy with this index.
    Pre(usize),
    Post(usize),
    Gate,
    Verdict,
}

/// The user's steps with bookend's earlier work undone.
#[derive(Debug)]
pub struct Stripped {
    pub user: Vec<Value>,
    pub warnings: Vec<String>,
}

/// The composed step list.
#[derive(Debug)]
pub struct Composed {
    pub steps: Vec<Value>,
    pub kinds: Vec<StepKind>,
    pub helpers: Vec<String>,
    /// User steps bookend set to `onError: continue` (name, or `#<ordinal>` when unnamed).
    pub continued: Vec<String>,
}

/// Identity of a user step across passes.
pub fn user_step_key(step: &Value, ordinal: usize) -> String {
    match tekton::step_name(step) {
        Some(name) => name.to_owned(),
        None => format!("#{ordinal}"),
    }
}

fn gate_input(name: &str) -> String {
    format!("$(steps.{name}.results.ok)")
}

/// Whether a `when` entry is one of bookend's gate conditions.
fn is_gate_when(settings: &Settings, when: &Value) -> bool {
    when.get("input")
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("$(steps."))
        .and_then(|s| s.strip_suffix(".results.ok)"))
        .is_some_and(|name| settings.is_helper_name(name))
}

/// Removes bookend's gate conditions from a step; true when there were any.
fn remove_gate_whens(settings: &Settings, step: &mut Value) -> bool {
    let Some(obj) = step.as_object_mut() else {
        return false;
    };
    let Some(Value::Array(whens)) = obj.get_mut("when") else {
        return false;
    };
    let before = whens.len();
    whens.retain(|w| !is_gate_when(settings, w));
    let removed = whens.len() != before;
    if whens.is_empty() {
        obj.remove("when");
    }
    removed
}

/// Removes every step bookend injected (recognised by name and content), restores the user
/// steps it changed, and maps index references back. A step that uses the reserved prefix but
/// is not bookend's is a denial, never silently dropped.
pub fn strip(
    steps: &[Value],
    set: &PolicySet,
    record: Option<&Record>,
    version: ApiVersion,
) -> Result<Stripped, Denial> {
    let settings = set.settings();
    let mut user = Vec::with_capacity(steps.len());
    let mut kept_index = vec![None; steps.len()];
    let mut warnings = Vec::new();
    let mut found_injected = false;
    for (i, step) in steps.iter().enumerate() {
        let name = tekton::step_name(step).unwrap_or_default();
        if !name.starts_with(settings.prefix.as_str()) {
            kept_index[i] = Some(user.len());
            user.push(step.clone());
            continue;
        }
        found_injected = true;
        if settings.is_helper_name(name) {
            let ours = record.is_some_and(|r| r.helpers.iter().any(|h| h == name))
                || (step.get("image").and_then(Value::as_str)
                    == Some(settings.helper_image.as_str())
                    && step.get("command") == Some(&json!(["/bin/sh", "-c"])));
            if ours {
                continue;
            }
            return Err(Denial::field(
                format!("spec.taskSpec.steps[{i}].name"),
                format!(
                    "step {name:?} uses a name bookend reserves for its gate and verdict steps, but it is not one of them; rename the step"
                ),
            ));
        }
        match set.step_owner(name) {
            Some(owner) if is_policy_step(step, owner, name, settings, version) => continue,
            owner => {
                // Recorded by an earlier version of a policy (its hash differs from today's):
                // replace it. With the same hash the step must be as defined, so a difference
                // is tampering.
                let stale = record
                    .and_then(|r| r.entry_with_step(name))
                    .filter(|entry| {
                        owner.is_none_or(|p| {
                            p.id.to_string() != entry.policy || p.hash != entry.hash
                        })
                    });
                if let Some(entry) = stale {
                    warnings.push(format!(
                        "bookend: replaced step {name} injected by an earlier version of {} (hash {})",
                        entry.policy, entry.hash
                    ));
                    continue;
                }
                let why = match owner {
                    Some(p) => format!(
                        "step {name:?} differs from its definition in {}; remove it from the TaskRun (bookend injects it) or restore it as the policy defines it",
                        p.id
                    ),
                    None => format!(
                        "step {name:?} uses the reserved prefix {:?} but no policy defines it; rename the step (the prefix is reserved for steps bookend injects)",
                        settings.prefix
                    ),
                };
                return Err(Denial::field(format!("spec.taskSpec.steps[{i}].name"), why));
            }
        }
    }

    if found_injected {
        // Undo what the Always construction did to user steps.
        let continued: BTreeSet<&str> = record
            .map(|r| r.continued.iter().map(String::as_str).collect())
            .unwrap_or_default();
        for (ordinal, step) in user.iter_mut().enumerate() {
            let gated = remove_gate_whens(settings, step);
            let key = user_step_key(step, ordinal);
            let was_continued = match record {
                Some(_) => continued.contains(key.as_str()),
                None => gated,
            };
            if was_continued
                && step.get("onError").and_then(Value::as_str) == Some("continue")
                && let Some(obj) = step.as_object_mut()
            {
                obj.remove("onError");
            }
        }
        let map = |i: usize| kept_index.get(i).copied().flatten();
        for step in &mut user {
            reindex::rewrite(step, &map);
        }
    }
    Ok(Stripped { user, warnings })
}

/// Whether `step` is the policy's step `name`, as bookend would have written it (Always may
/// have set `onError: continue` and added a gate condition).
fn is_policy_step(
    step: &Value,
    owner: &Policy,
    name: &str,
    settings: &Settings,
    version: ApiVersion,
) -> bool {
    let Some(def) = owner
        .pre_steps
        .iter()
        .chain(&owner.post_steps)
        .find(|s| tekton::step_name(s) == Some(name))
    else {
        return false;
    };
    let mut actual = step.clone();
    remove_gate_whens(settings, &mut actual);
    let def = tekton::convert_container(def.clone(), version);
    let on_error = |v: &Value| v.get("onError").and_then(Value::as_str).map(str::to_owned);
    let (actual_on_error, def_on_error) = (on_error(&actual), on_error(&def));
    if actual_on_error != def_on_error && actual_on_error.as_deref() != Some("continue") {
        return false;
    }
    let without_on_error = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("onError");
        }
        canonical(&v)
    };
    without_on_error(&actual) == without_on_error(&def)
}

/// Context for resolving a user step's `onError: $(params.x)`.
pub struct ParamValues<'a> {
    pub run_params: &'a [Value],
    pub spec_params: &'a [Value],
}

impl ParamValues<'_> {
    fn resolve(&self, reference: &str) -> Option<String> {
        let name = reference.strip_prefix("$(params.")?.strip_suffix(')')?;
        let from = |params: &[Value], key: &str| {
            params
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
                .and_then(|p| p.get(key))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        from(self.run_params, "value").or_else(|| from(self.spec_params, "default"))
    }
}

/// Puts the applied policies' steps around the user's steps (outer policy outermost),
/// re-indexes user references, and for `postStepsRun: Always` adds gates and a verdict.
pub fn compose(
    user: Vec<Value>,
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
) -> Composed {
    let user_count = user.len();
    let mut sequence: Vec<(Value, StepKind)> = Vec::new();
    for (p, policy) in applied.iter().enumerate() {
        for step in &policy.pre_steps {
            sequence.push((
                tekton::convert_container(step.clone(), version),
                StepKind::Pre(p),
            ));
        }
    }
    for (u, step) in user.into_iter().enumerate() {
        sequence.push((step, StepKind::User(u)));
    }
    for (p, policy) in applied.iter().enumerate().rev() {
        for step in &policy.post_steps {
            sequence.push((
                tekton::convert_container(step.clone(), version),
                StepKind::Post(p),
            ));
        }
    }

    let is_always = |kind: StepKind| matches!(kind, StepKind::Post(p) if applied[p].spec.post_steps_run == PostStepsRun::Always);
    let last_always = sequence.iter().rposition(|(_, k)| is_always(*k));

    let mut steps = Vec::with_capacity(sequence.len() + 2);
    let mut kinds = Vec::with_capacity(sequence.len() + 2);
    let mut helpers = Vec::new();
    let mut continued = Vec::new();
    let mut must_succeed: Vec<(usize, String)> = Vec::new(); // final index, display name
    let mut gate: Option<(String, usize)> = None; // current gate and how many steps it checks
    for (position, (mut step, kind)) in sequence.into_iter().enumerate() {
        if let Some(last) = last_always {
            if !is_always(kind) && !must_succeed.is_empty() {
                if gate.as_ref().is_none_or(|(_, n)| *n != must_succeed.len()) {
                    let name = settings.gate_name(helpers.len() + 1);
                    // Each gate checks the previous gate's verdict and only the must-succeed
                    // steps since, so gates stay small however many steps there are.
                    let (previous, since) = match &gate {
                        Some((prev, checked)) => (Some(prev.as_str()), &must_succeed[*checked..]),
                        None => (None, &must_succeed[..]),
                    };
                    steps.push(gate_step(settings, &name, previous, since));
                    kinds.push(StepKind::Gate);
                    helpers.push(name.clone());
                    gate = Some((name, must_succeed.len()));
                }
                let (gate_name, _) = gate.as_ref().expect("a gate was just set");
                append_when(&mut step, &gate_input(gate_name));
            }
            if position < last && effective_on_error(&step, params) != "continue" {
                set_on_error_continue(&mut step);
                let index = steps.len();
                let display = match kind {
                    StepKind::User(u) => {
                        continued.push(user_step_key(&step, u));
                        tekton::container_name(&step, index)
                    }
                    _ => tekton::container_name(&step, index),
                };
                must_succeed.push((index, display));
            }
        }
        steps.push(step);
        kinds.push(kind);
    }
    if !must_succeed.is_empty() {
        let name = settings.verdict_name();
        steps.push(verdict_step(settings, &name, &must_succeed));
        kinds.push(StepKind::Verdict);
        helpers.push(name);
    }

    // Re-index references in user steps: original ordinal -> final index.
    let mut final_index = vec![0; user_count];
    for (i, kind) in kinds.iter().enumerate() {
        if let StepKind::User(u) = kind {
            final_index[*u] = i;
        }
    }
    if final_index.iter().enumerate().any(|(u, &f)| u != f) {
        let map = |i: usize| final_index.get(i).copied();
        for (step, kind) in steps.iter_mut().zip(&kinds) {
            if matches!(kind, StepKind::User(_)) {
                reindex::rewrite(step, &map);
            }
        }
    }
    Composed {
        steps,
        kinds,
        helpers,
        continued,
    }
}

fn effective_on_error(step: &Value, params: &ParamValues<'_>) -> String {
    match step.get("onError").and_then(Value::as_str) {
        None | Some("") => "stopAndFail".to_owned(),
        Some(r) if r.starts_with("$(params.") => params
            .resolve(r)
            .unwrap_or_else(|| "stopAndFail".to_owned()),
        Some(v) => v.to_owned(),
    }
}

fn set_on_error_continue(step: &mut Value) {
    if let Some(obj) = step.as_object_mut() {
        obj.insert("onError".to_owned(), Value::String("continue".to_owned()));
    }
}

fn append_when(step: &mut Value, input: &str) {
    let Some(obj) = step.as_object_mut() else {
        return;
    };
    let entry = json!({"input": input, "operator": "in", "values": ["true"]});
    match obj.get_mut("when") {
        Some(Value::Array(whens)) => whens.push(entry),
        _ => {
            obj.insert("when".to_owned(), Value::Array(vec![entry]));
        }
    }
}

fn checks(must_succeed: &[(usize, String)]) -> String {
    must_succeed
        .iter()
        .map(|(i, name)| format!("{i}:{name}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// Helper steps use command/args, never script: a stepTemplate `command` would make a script
// step invalid. Exit codes are read by index through Tekton's /tekton/steps/<i> symlinks; a
// missing file means the step did not run or failed. A gate reads the previous gate's result
// (written as `true`/`false` without a newline) from its step directory.
fn gate_step(
    settings: &Settings,
    name: &str,
    previous: Option<&str>,
    must_succeed: &[(usize, String)],
) -> Value {
    let previous_check = previous
        .map(|p| {
            format!(
                "[ \"$(cat /tekton/steps/step-{p}/results/ok 2>/dev/null)\" = true ] || ok=false; "
            )
        })
        .unwrap_or_default();
    let script = format!(
        "ok=true; {previous_check}for s in {}; do c=$(cat /tekton/steps/${{s%%:*}}/exitCode 2>/dev/null); [ \"$c\" = 0 ] || ok=false; done; printf %s \"$ok\" > $(step.results.ok.path)",
        checks(must_succeed)
    );
    helper_step(
        settings,
        name,
        script,
        Some(json!([{"name": "ok", "type": "string"}])),
    )
}

fn verdict_step(settings: &Settings, name: &str, must_succeed: &[(usize, String)]) -> Value {
    let script = format!(
        "rc=0; for s in {}; do c=$(cat /tekton/steps/${{s%%:*}}/exitCode 2>/dev/null); if [ \"$c\" != 0 ]; then echo \"bookend: ${{s#*:}} failed (exit code ${{c:-none}})\"; rc=1; fi; done; exit $rc",
        checks(must_succeed)
    );
    helper_step(settings, name, script, None)
}

fn helper_step(settings: &Settings, name: &str, script: String, results: Option<Value>) -> Value {
    let mut step = Map::new();
    step.insert("name".into(), json!(name));
    step.insert("image".into(), json!(settings.helper_image));
    step.insert("command".into(), json!(["/bin/sh", "-c"]));
    step.insert("args".into(), json!([script]));
    if let Some(results) = results {
        step.insert("results".into(), results);
    }
    Value::Object(step)
}
