//! Building the final step list: put the policies' steps around the user's, re-index
//! references, and add gates and a verdict for `postStepsRun: Always`. (What bookend injected
//! earlier is told apart from the user's steps in `recognise`, by composing again.)

use serde_json::{Value, json};

use super::reindex;
use crate::policy::helper_steps::{helper_security_context, shell_step};
use crate::policy::{Policy, PostStepsRun, Settings};
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
    /// Under `userSteps.network: None`: the step before the author's that runs nothing in
    /// their jail ([`Helper::JailCheck`]).
    JailCheck,
}

impl StepKind {
    /// Whether the step is one of bookend's helpers (listed in [`Composed::helpers`]).
    pub fn is_helper(self) -> bool {
        matches!(self, Self::Gate | Self::Verdict | Self::JailCheck)
    }

    /// Who a helper step is for, as messages name it.
    pub fn helper_owner(self) -> Option<&'static str> {
        match self {
            Self::Gate | Self::Verdict => Some("bookend (postStepsRun: Always)"),
            Self::JailCheck => Some("bookend (userSteps.network: None)"),
            Self::User(_) | Self::Pre(_) | Self::Post(_) => None,
        }
    }
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
    /// Before the author's first step under `userSteps.network: None`: runs `:` in the jail
    /// the author's steps run in (Tekton's entrypoint, `TEKTON_HERMETIC`), as the image's
    /// user (root) under the Pod's security context. Tekton reports a step whose command ran
    /// and exited 1 exactly as one its entrypoint could not start; this step's command cannot
    /// fail, so when it fails the jail could not be set up on that node, and the TaskRun
    /// fails naming it before any step of the author's starts.
    JailCheck,
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
pub(super) fn is_gate_when(settings: &Settings, when: &Value) -> bool {
    when.get("input")
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("$(steps."))
        .and_then(|s| s.strip_suffix(".results.ok)"))
        .is_some_and(|name| settings.is_helper_name(name))
}

/// Removes bookend's gate conditions from a step; true when there were any.
pub(super) fn remove_gate_whens(settings: &Settings, step: &mut Value) -> bool {
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
    compose_with(user, applied, settings, version, params)
}

fn compose_with(
    user: Vec<Value>,
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
) -> Composed {
    let helper = |name: &str, spec: &Helper| helper_step(settings, name, spec);
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
    if applied.iter().any(|p| p.spec.user_steps.hermetic()) {
        let name = settings.jail_check_name();
        sequence.push((
            helper_step(settings, &name, &Helper::JailCheck),
            StepKind::JailCheck,
        ));
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
    // Gates so far (the jail check is a helper too, but not numbered with them).
    let mut gates = 0;
    // The current gate: its index, its name, and how many must-succeed steps it covers.
    let mut gate: Option<(usize, String, usize)> = None;
    for (position, (mut step, kind)) in sequence.into_iter().enumerate() {
        if let Some(last) = last_always {
            if !is_always(kind) && !must_succeed.is_empty() {
                if gate
                    .as_ref()
                    .is_none_or(|(_, _, n)| *n != must_succeed.len())
                {
                    gates += 1;
                    let name = settings.gate_name(gates);
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
            // The jail check's `:` cannot exit non-zero: it fails only when its jail cannot be
            // set up, and then Tekton's entrypoint skips every later step whatever `onError`
            // says. Nothing to continue past: no `onError`, and no gate checks it (it carries
            // the current gate's condition like any step).
            if position < last
                && kind != StepKind::JailCheck
                && effective_on_error(&step, params) != "continue"
            {
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
        if kind == StepKind::JailCheck
            && let Some(name) = tekton::step_name(&step)
        {
            helpers.push(name.to_owned());
            checks.push(Helper::JailCheck);
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
//
// A gate first waits until each exit code file it reads is not empty: Tekton's entrypoint
// writes a step's post file (which starts the next step) before its `exitCode` (creating the
// file, then writing it; `Entrypointer.Go`, every release up to v1.15), so a gate right after a
// step could read it empty, write `false`, and the guarded steps would be skipped while the
// verdict, reading later, passes: a green TaskRun whose steps never ran. Every path that starts
// the gate (a post file without `.err`) writes the exit code next, so the wait ends.

/// A gate's script; `wait` is false for the form releases up to 0.2 wrote.
fn gate_script(previous: &Option<(usize, String)>, checks: &[Checked], wait: bool) -> String {
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
    let wait: String = checks
        .iter()
        .filter(|_| wait)
        .map(|c| format!("until [ -s {}/exitCode ];do sleep 1;done;", c.index))
        .collect();
    format!(
        "cd /tekton/steps;{wait}[ \"{read}\" = {want} ]&&r=true||r=false;printf $r>$(step.results.ok.path)"
    )
}

/// A helper step as bookend writes it.
pub fn helper_step(settings: &Settings, name: &str, spec: &Helper) -> Value {
    let mut step = match spec {
        Helper::Gate { previous, checks } => shell_step(
            settings,
            name,
            gate_script(previous, checks, true),
            Some(json!([{"name": "ok"}])),
        ),
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
        Helper::JailCheck => {
            // No securityContext of its own: the jail needs root with the runtime's default
            // capabilities (Tekton maps every uid into it), as the author's steps do, so this
            // step fails exactly where the node or the Pod's security context refuse it.
            let mut step = shell_step(settings, name, ":".to_owned(), None);
            super::hermetic::jail(&mut step);
            return step;
        }
    };
    step["securityContext"] = helper_security_context(settings);
    step
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
        Helper::JailCheck => helper_step(settings, name, spec),
    }
}

/// Only characters a shell takes literally, unquoted.
fn is_shell_word(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The forms earlier releases wrote a helper step in, which bookend still takes for its own so
/// that an upgrade does not refuse what an older replica injected: gates that read without
/// waiting, with a securityContext and without (0.2), and 0.1's per-step loops. None for the
/// jail check, which no earlier release wrote: its one form is the composition's, with the gate
/// condition `compose` gives it under `Always` (a jail check without it would be kept).
pub fn earlier_helper_steps(settings: &Settings, name: &str, spec: &Helper) -> Vec<Value> {
    if matches!(spec, Helper::JailCheck) {
        return Vec::new();
    }
    let mut unwaited = helper_step(settings, name, spec);
    if let Helper::Gate { previous, checks } = spec {
        unwaited["args"] = json!([gate_script(previous, checks, false)]);
    }
    let mut bare = unwaited.clone();
    if let Some(step) = bare.as_object_mut() {
        step.remove("securityContext");
    }
    vec![unwaited, bare, legacy_helper_step(settings, name, spec)]
}
