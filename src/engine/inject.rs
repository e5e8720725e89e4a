//! Building the final step list: strip what bookend injected earlier, then put the policies'
//! steps around the user's, re-index references, and add gates and a verdict for
//! `postStepsRun: Always`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::canonical::{canonical, equivalent_without, lists_equivalent};
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
    /// What each helper (in `helpers` order) checks.
    pub checks: Vec<Helper>,
    /// User steps bookend set to `onError: continue` (name, or `#<ordinal>` when unnamed).
    pub continued: Vec<String>,
}

/// What a helper step checks: enough to write it in the current form, or in the form earlier
/// releases wrote (which bookend still accepts as its own, so an upgrade does not refuse
/// TaskRuns an older replica injected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Helper {
    /// Before a guarded step: the previous gate (its index and name), if any, and the
    /// must-succeed steps since it.
    Gate {
        previous: Option<(usize, String)>,
        checks: Vec<Checked>,
    },
    /// The last step: every must-succeed step.
    Verdict { checks: Vec<Checked> },
}

/// A must-succeed step: its index in the final list and its container name (`step-<name>`, or
/// `step-unnamed-<index>`), which is also its directory under `/tekton/steps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    pub index: usize,
    pub container: String,
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
/// have set `onError: continue` and added a gate condition). Compared in canonical form (as
/// Tekton's defaulting leaves it), without copying either step.
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
    let converted;
    let def = match version {
        ApiVersion::V1 => def,
        ApiVersion::V1beta1 => {
            converted = tekton::convert_container(def.clone(), version);
            &converted
        }
    };
    fn on_error(v: &Value) -> Option<&str> {
        v.get("onError").and_then(Value::as_str)
    }
    let (actual_on_error, def_on_error) = (on_error(step), on_error(def));
    if actual_on_error != def_on_error && actual_on_error != Some("continue") {
        return false;
    }
    // `when`: the definition's own conditions; bookend's gate conditions do not count.
    fn whens<'a>(settings: &Settings, v: &'a Value) -> Vec<&'a Value> {
        v.get("when")
            .and_then(Value::as_array)
            .map(|w| w.iter().filter(|w| !is_gate_when(settings, w)).collect())
            .unwrap_or_default()
    }
    let odd = |v: &Value| v.get("when").is_some_and(|w| !w.is_array());
    if odd(step) || odd(def) {
        // A `when` that is not a list (no valid step has one): the plain way, with copies.
        let mut actual = step.clone();
        remove_gate_whens(settings, &mut actual);
        let without_on_error = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("onError");
            }
            canonical(&v)
        };
        return without_on_error(&actual) == without_on_error(def);
    }
    lists_equivalent("when", &whens(settings, step), &whens(settings, def))
        && equivalent_without(step, def, &["onError", "when"])
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
    compose_with(user, applied, settings, version, params, true)
}

/// [`compose`] for checks only: the same layout (same steps at the same indexes, same
/// `onError` and gate conditions), but each helper is only its name (no script).
pub fn compose_layout(
    user: Vec<Value>,
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
) -> Composed {
    compose_with(user, applied, settings, version, params, false)
}

fn compose_with(
    user: Vec<Value>,
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
    helper_scripts: bool,
) -> Composed {
    let helper = |name: &str, spec: &Helper| {
        if helper_scripts {
            helper_step(settings, name, spec)
        } else {
            json!({ "name": name })
        }
    };
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
    let mut checks = Vec::new();
    let mut continued = Vec::new();
    let mut must_succeed: Vec<Checked> = Vec::new();
    // The current gate: its index, its name, and how many must-succeed steps it covers.
    let mut gate: Option<(usize, String, usize)> = None;
    for (position, (mut step, kind)) in sequence.into_iter().enumerate() {
        if let Some(last) = last_always {
            if !is_always(kind) && !must_succeed.is_empty() {
                if gate
                    .as_ref()
                    .is_none_or(|(_, _, n)| *n != must_succeed.len())
                {
                    let name = settings.gate_name(helpers.len() + 1);
                    // Each gate checks the previous gate's result and only the must-succeed
                    // steps since, so gates stay small however many steps there are.
                    let (previous, since) = match &gate {
                        Some((index, prev, covered)) => {
                            (Some((*index, prev.clone())), &must_succeed[*covered..])
                        }
                        None => (None, &must_succeed[..]),
                    };
                    let spec = Helper::Gate {
                        previous,
                        checks: since.to_vec(),
                    };
                    steps.push(helper(&name, &spec));
                    kinds.push(StepKind::Gate);
                    helpers.push(name.clone());
                    checks.push(spec);
                    gate = Some((steps.len() - 1, name, must_succeed.len()));
                }
                let (_, gate_name, _) = gate.as_ref().expect("a gate was just set");
                append_when(&mut step, &gate_input(gate_name));
            }
            if position < last && effective_on_error(&step, params) != "continue" {
                set_on_error_continue(&mut step);
                let index = steps.len();
                if let StepKind::User(u) = kind {
                    continued.push(user_step_key(&step, u));
                }
                must_succeed.push(Checked {
                    index,
                    container: tekton::container_name(&step, index),
                });
            }
        }
        steps.push(step);
        kinds.push(kind);
    }
    if !must_succeed.is_empty() {
        let name = settings.verdict_name();
        let spec = Helper::Verdict {
            checks: must_succeed,
        };
        steps.push(helper(&name, &spec));
        kinds.push(StepKind::Verdict);
        helpers.push(name);
        checks.push(spec);
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
        checks,
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

// Helper steps are `/bin/sh -c <script>` (never `script`, which a stepTemplate `command` would
// break), as short as they can be: every byte is stored in etcd with each TaskRun, sent to and
// from the API server and parsed again by every webhook. They read Tekton's per-step
// directories `/tekton/steps/<index>` and `/tekton/steps/step-<name>` (links to
// `/tekton/run/<index>/status`): `exitCode` (written without a newline, `0` for a skipped step)
// and a step result `results/ok`.
//
// A gate writes `true` to its result `ok` when the previous gate's result and the exit codes of
// the must-succeed steps since read, one after the other, `true0…0` — each `$(cat …)` on its
// own, so a trailing newline could never join two files — and `false` otherwise (a missing
// file reads empty: false). Reading the previous gate is what keeps a step skipped by its `when`
// (exit code 0) from counting as a success. The verdict names every must-succeed step that did
// not exit 0 and exits 1 if any did not.

/// A helper step as bookend writes it.
pub fn helper_step(settings: &Settings, name: &str, spec: &Helper) -> Value {
    match spec {
        Helper::Gate { previous, checks } => {
            let mut read = String::new();
            let mut want = String::new();
            if let Some((index, _)) = previous {
                read.push_str(&format!("$(cat {index}/results/ok)"));
                want.push_str("true");
            }
            for c in checks {
                read.push_str(&format!("$(cat {}/exitCode)", c.index));
                want.push('0');
            }
            let script = format!(
                "cd /tekton/steps;[ \"{read}\" = {want} ]&&r=true||r=false;printf $r>$(step.results.ok.path)"
            );
            shell_step(settings, name, script, Some(json!([{"name": "ok"}])))
        }
        Helper::Verdict { checks } => {
            let list = checks
                .iter()
                .map(|c| {
                    // The directory by name, which the message shows; by index should a name
                    // ever not be a plain DNS label (Tekton refuses such names anyway).
                    if is_shell_word(&c.container) {
                        c.container.clone()
                    } else {
                        c.index.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join(" ");
            let script = format!(
                "cd /tekton/steps;r=0;for s in {list};do c=$(cat $s/exitCode);[ \"$c\" = 0 ]||{{ echo \"bookend: $s failed (exit code ${{c:-none}})\";r=1;}};done;exit $r"
            );
            shell_step(settings, name, script, None)
        }
    }
}

/// A helper step as releases up to 0.1.0 wrote it (per-step loops, full paths, `type: string`):
/// recognised as bookend's own, never written.
pub fn legacy_helper_step(settings: &Settings, name: &str, spec: &Helper) -> Value {
    let list = |checks: &[Checked]| {
        checks
            .iter()
            .map(|c| format!("{}:{}", c.index, c.container))
            .collect::<Vec<_>>()
            .join(" ")
    };
    match spec {
        Helper::Gate { previous, checks } => {
            let previous_check = previous
                .as_ref()
                .map(|(_, p)| {
                    format!(
                        "[ \"$(cat /tekton/steps/step-{p}/results/ok 2>/dev/null)\" = true ] || ok=false; "
                    )
                })
                .unwrap_or_default();
            let script = format!(
                "ok=true; {previous_check}for s in {}; do c=$(cat /tekton/steps/${{s%%:*}}/exitCode 2>/dev/null); [ \"$c\" = 0 ] || ok=false; done; printf %s \"$ok\" > $(step.results.ok.path)",
                list(checks)
            );
            shell_step(
                settings,
                name,
                script,
                Some(json!([{"name": "ok", "type": "string"}])),
            )
        }
        Helper::Verdict { checks } => {
            let script = format!(
                "rc=0; for s in {}; do c=$(cat /tekton/steps/${{s%%:*}}/exitCode 2>/dev/null); if [ \"$c\" != 0 ]; then echo \"bookend: ${{s#*:}} failed (exit code ${{c:-none}})\"; rc=1; fi; done; exit $rc",
                list(checks)
            );
            shell_step(settings, name, script, None)
        }
    }
}

/// Only characters a shell takes literally, unquoted.
fn is_shell_word(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn shell_step(settings: &Settings, name: &str, script: String, results: Option<Value>) -> Value {
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
