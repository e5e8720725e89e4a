//! What counts as bookend's own in a TaskRun: exactly what bookend would write for it now.
//!
//! A TaskRun whose steps carry no reserved-prefix name is all the author's. One that carries any
//! is taken for bookend's earlier output (a re-invocation after Tekton's defaulting or after
//! another webhook, the validating backstop, a copied spec) only if its reserved-prefix steps
//! are exactly what bookend writes for it now: its other steps, with what the `Always`
//! construction did to them undone, composed again with the policies that apply now, give back
//! the same reserved-prefix steps, in the same order, each as bookend writes it (compared as
//! Tekton's defaulting leaves them). Where the author's steps stand among them does not matter:
//! bookend puts them back between the org's (a later webhook may have added a step first).
//! Anything else is a denial naming the first step that differs, never a silent drop.
//!
//! Nothing the author writes decides it. The `bookend.dev/injected` record only suggests which
//! user steps bookend set to `onError: continue` (the one thing the composition cannot tell by
//! itself), and a suggestion is checked like every other reading: by composing again.

use std::collections::BTreeSet;

use serde_json::Value;

use super::Denial;
use super::canonical::{canonical, equivalent};
use super::inject::{self, Composed, ParamValues, StepKind, user_step_key};
use super::record::Record;
use super::reindex;
use crate::policy::{Policy, Settings};
use crate::tekton::{self, ApiVersion};

/// The author's steps of a TaskRun.
#[derive(Debug)]
pub struct Recognised {
    /// The author's steps, as they were before bookend composed them.
    pub user: Vec<Value>,
    /// Whether the steps are, in place, exactly what bookend composes for them now.
    pub in_place: bool,
}

/// Which user steps bookend set to `onError: continue`, in one reading of a composed list.
enum Continued {
    /// Those the record names (by name, or `#<ordinal>`).
    Listed(BTreeSet<String>),
    /// Every user step that reads `continue` (an `Always` policy applies, so bookend sets it on
    /// every user step that did not already have it).
    All,
    /// None (the author wrote every `continue`).
    None,
}

/// Where a reading of the steps stops agreeing with the composition: the reserved-prefix step
/// of the TaskRun (its index) and of the composition (its index) that differ; `None` where one
/// list has no more of them.
struct Mismatch {
    actual: Option<usize>,
    expected: Option<usize>,
    /// How many reserved-prefix steps agreed before it.
    agreed: usize,
}

/// Separates the author's steps from bookend's in `steps`, for the `applied` policies (in
/// evaluation order). `hint` is the TaskRun's record, if it has one that parses.
pub fn recognise(
    steps: &[Value],
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
    hint: Option<&Record>,
) -> Result<Recognised, Denial> {
    recognise_as_run(steps, applied, settings, version, params, hint, &|_, _| {})
}

/// [`recognise`] of steps as Tekton's controller ran them: `as_run` turns each composition (its
/// steps, and what each is) into that form (the variables Tekton substituted) before it is
/// compared with `steps`.
pub fn recognise_as_run(
    steps: &[Value],
    applied: &[&Policy],
    settings: &Settings,
    version: ApiVersion,
    params: &ParamValues<'_>,
    hint: Option<&Record>,
    as_run: &dyn Fn(&mut [Value], &[StepKind]),
) -> Result<Recognised, Denial> {
    let prefix = settings.prefix.as_str();
    let reserved = |s: &Value| tekton::step_name(s).is_some_and(|n| n.starts_with(prefix));
    if !steps.iter().any(reserved) {
        // A condition on one of bookend's gates is bookend's to write: on the author's own step
        // it could not be told from bookend's on the next pass.
        for (i, step) in steps.iter().enumerate() {
            let whens = step.get("when").and_then(Value::as_array);
            if let Some(j) =
                whens.and_then(|w| w.iter().position(|w| inject::is_gate_when(settings, w)))
            {
                return Err(Denial::field(
                    format!("spec.taskSpec.steps[{i}].when[{j}]"),
                    format!(
                        "a condition on a result of bookend's gate steps ({prefix}gate-<n>), which are bookend's to write and to condition steps on; remove it"
                    ),
                ));
            }
        }
        return Ok(Recognised {
            user: steps.to_vec(),
            in_place: false,
        });
    }
    let always = applied.iter().any(|p| p.runs_post_steps_always());
    let mut readings = Vec::with_capacity(3);
    if let Some(record) = hint {
        readings.push(Continued::Listed(
            record.continued.iter().cloned().collect(),
        ));
    }
    if always {
        readings.push(Continued::All);
    }
    readings.push(Continued::None);

    let mut closest: Option<(Mismatch, Composed)> = None;
    for reading in &readings {
        let user = undo(steps, settings, reading);
        let mut composed = inject::compose(user.clone(), applied, settings, version, params);
        as_run(&mut composed.steps, &composed.kinds);
        match first_difference(steps, &composed, settings) {
            None => {
                let in_place = steps.len() == composed.steps.len()
                    && steps
                        .iter()
                        .zip(&composed.steps)
                        .all(|(a, b)| same_place(a, b, prefix));
                return Ok(Recognised { user, in_place });
            }
            Some(m) => {
                if closest.as_ref().is_none_or(|(c, _)| m.agreed > c.agreed) {
                    closest = Some((m, composed));
                }
            }
        }
    }
    let (mismatch, composed) = closest.expect("at least one reading was tried");
    Err(explain(
        steps, &composed, &mismatch, applied, settings, hint,
    ))
}

/// The user steps of `steps` (the ones without the reserved prefix) with bookend's gate
/// conditions removed, `onError: continue` removed where `continued` says bookend set it, and
/// index references mapped back to the user's own list.
fn undo(steps: &[Value], settings: &Settings, continued: &Continued) -> Vec<Value> {
    let prefix = settings.prefix.as_str();
    let mut user = Vec::with_capacity(steps.len());
    let mut kept_index = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        if tekton::step_name(step).is_some_and(|n| n.starts_with(prefix)) {
            continue;
        }
        kept_index[i] = Some(user.len());
        user.push(step.clone());
    }
    for (ordinal, step) in user.iter_mut().enumerate() {
        inject::remove_gate_whens(settings, step);
        let was_continued = match continued {
            Continued::Listed(keys) => keys.contains(&user_step_key(step, ordinal)),
            Continued::All => true,
            Continued::None => false,
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
    user
}

/// The first step where `steps` and the composition differ, comparing the reserved-prefix
/// steps with each other in order, and the author's steps with each other in order (compared as
/// Tekton's defaulting leaves steps; a helper step may also be in the form an earlier release
/// wrote, so that an upgrade does not refuse what an older replica injected).
fn first_difference(steps: &[Value], composed: &Composed, settings: &Settings) -> Option<Mismatch> {
    let prefix = settings.prefix.as_str();
    let mut actual = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| is_reserved(s, prefix))
        .map(|(i, _)| i);
    let mut helpers = composed.checks.iter();
    let mut expected = composed
        .kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| !matches!(k, StepKind::User(_)))
        .map(|(i, k)| {
            let helper = k
                .is_helper()
                .then(|| helpers.next().expect("one check per helper"));
            (i, helper)
        });
    let mut agreed = 0;
    loop {
        let (a, e) = (actual.next(), expected.next());
        let (Some(a), Some((e, helper))) = (a, e) else {
            if a.is_some() || e.is_some() {
                return Some(Mismatch {
                    actual: a,
                    expected: e.map(|(e, _)| e),
                    agreed,
                });
            }
            break;
        };
        let (step, want) = (&steps[a], &composed.steps[e]);
        let same = equivalent(step, want)
            || helper.is_some_and(|spec| {
                tekton::step_name(want).is_some_and(|name| {
                    inject::earlier_helper_steps(settings, name, spec)
                        .iter()
                        .any(|earlier| equivalent(step, earlier))
                })
            });
        if !same {
            return Some(Mismatch {
                actual: Some(a),
                expected: Some(e),
                agreed,
            });
        }
        agreed += 1;
    }
    // The author's steps carry exactly bookend's conditions and `onError` changes, no other.
    let user_actual = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| !is_reserved(s, prefix));
    let user_expected = composed
        .steps
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(composed.kinds[*i], StepKind::User(_)));
    for ((a, step), (e, want)) in user_actual.zip(user_expected) {
        if !equivalent(step, want) {
            return Some(Mismatch {
                actual: Some(a),
                expected: Some(e),
                agreed,
            });
        }
        agreed += 1;
    }
    None
}

fn is_reserved(step: &Value, prefix: &str) -> bool {
    tekton::step_name(step).is_some_and(|n| n.starts_with(prefix))
}

/// Whether a step stands where the composition has it: a reserved-prefix step opposite a
/// reserved-prefix step (their content was compared already), a user step opposite the same
/// user step.
fn same_place(actual: &Value, composed: &Value, prefix: &str) -> bool {
    match (is_reserved(actual, prefix), is_reserved(composed, prefix)) {
        (true, true) => true,
        (false, false) => equivalent(actual, composed),
        _ => false,
    }
}

/// Who injects the step at `index` of the composition.
fn injector(composed: &Composed, index: usize, applied: &[&Policy]) -> Option<String> {
    match composed.kinds.get(index)? {
        StepKind::Pre(p) | StepKind::Post(p) => Some(applied[*p].id.to_string()),
        kind => kind.helper_owner().map(str::to_owned),
    }
}

/// The denial for a TaskRun whose reserved-prefix steps are not what bookend would write.
fn explain(
    steps: &[Value],
    composed: &Composed,
    mismatch: &Mismatch,
    applied: &[&Policy],
    settings: &Settings,
    hint: Option<&Record>,
) -> Denial {
    const FIX: &str = "create the TaskRun from its own definition, without the steps whose names start with the reserved prefix (bookend injects those), or rename your step";
    let prefix = settings.prefix.as_str();
    let stale = stale_note(hint, applied);
    let Some(a) = mismatch.actual else {
        let e = mismatch.expected.expect("one side of a mismatch is a step");
        return Denial::field(
            "spec.taskSpec.steps",
            format!(
                "the TaskRun carries steps with the reserved prefix {prefix:?}, but not {:?}, which {} injects{stale}; {FIX}",
                tekton::step_name(&composed.steps[e]).unwrap_or_default(),
                injector(composed, e, applied).unwrap_or_default()
            ),
        );
    };
    let step = &steps[a];
    let name = tekton::step_name(step).unwrap_or_default();
    if !name.starts_with(prefix) {
        let e = mismatch
            .expected
            .expect("the author's steps are compared in pairs");
        return Denial::field(
            format!("spec.taskSpec.steps[{a}]"),
            format!(
                "the TaskRun carries steps with the reserved prefix {prefix:?}, but its own step {name:?} is not as bookend leaves it ({}){stale}; {FIX}",
                difference(step, &composed.steps[e])
            ),
        );
    }
    let at = composed
        .steps
        .iter()
        .position(|s| tekton::step_name(s) == Some(name));
    let message = match (at, mismatch.expected) {
        (None, _) => format!(
            "step {name:?} uses the reserved prefix {prefix:?}, but no policy that applies to this TaskRun injects a step of that name{stale}; {FIX}"
        ),
        (Some(at), Some(e)) if at == e => format!(
            "step {name:?} differs from what {} injects ({}){stale}; {FIX}",
            injector(composed, e, applied).unwrap_or_default(),
            difference(step, &composed.steps[e])
        ),
        (Some(at), expected) => format!(
            "step {name:?} is one that {} injects, but not in the order bookend puts its steps ({}){stale}; {FIX}",
            injector(composed, at, applied).unwrap_or_default(),
            match expected {
                Some(e) => format!(
                    "{:?} comes first",
                    tekton::step_name(&composed.steps[e]).unwrap_or_default()
                ),
                None => "it comes once".to_owned(),
            }
        ),
    };
    Denial::field(format!("spec.taskSpec.steps[{a}].name"), message)
}

/// What the record says about policy versions, when it names a version that is not the current
/// one (the likely reason a copied TaskRun no longer matches).
fn stale_note(hint: Option<&Record>, applied: &[&Policy]) -> String {
    let Some(record) = hint else {
        return String::new();
    };
    for entry in &record.policies {
        let current = applied.iter().find(|p| p.id.to_string() == entry.policy);
        match current {
            Some(p) if p.hash != entry.hash => {
                return format!(
                    " (its bookend.dev/injected record names version {} of {}, which is now {})",
                    entry.hash, entry.policy, p.hash
                );
            }
            None => {
                return format!(
                    " (its bookend.dev/injected record names {}, which does not apply to it now)",
                    entry.policy
                );
            }
            Some(_) => {}
        }
    }
    String::new()
}

/// The first member in which two steps differ, in words.
fn difference(actual: &Value, expected: &Value) -> String {
    let (a, e) = (canonical(actual), canonical(expected));
    let keys: BTreeSet<&String> = a
        .as_object()
        .into_iter()
        .chain(e.as_object())
        .flat_map(|m| m.keys())
        .collect();
    for key in keys {
        match (a.get(key), e.get(key)) {
            (Some(_), None) => return format!("it has {key}, which the definition does not"),
            (None, Some(_)) => return format!("it lacks {key}"),
            (Some(x), Some(y)) if x != y => return format!("its {key} differs"),
            _ => {}
        }
    }
    "it differs".to_owned()
}
