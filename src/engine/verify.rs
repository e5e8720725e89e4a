//! Post-run verification: from a finished TaskRun, did the org steps bookend injected run as
//! their policies say they must? Pure: the TaskRun (with Tekton's `status`) and the policy set
//! in, one [`PolicyRun`] per policy out; the timestamps are the TaskRun's own, no clock.
//!
//! Which steps are the org's is decided as admission decides it, never by the author: the
//! policies the record names are composed again around the TaskRun's other steps
//! (`recognise`, then `compose`), and only when that gives back the TaskRun's steps in place
//! are the composition's kinds (pre-step, post-step, helper) taken. When it does not (a policy
//! changed or went away since admission) the record's step names are used, and the
//! [`PolicyRun::drift`] says so. A reserved-prefix step of a current policy that the record
//! leaves out is verified too: editing the record after admission hides no policy.
//!
//! What a step's state means follows Tekton v1.15 (`pkg/pod/status.go`, `pkg/entrypoint`,
//! `pkg/reconciler/taskrun`): the entrypoint's `terminationReason` (`Skipped`, `Continued`,
//! `TimeoutExceeded`, `Cancelled`), the container's `OOMKilled`, and on a TaskRun timeout or
//! cancellation the controller's `TaskRunTimeout` / `TaskRunCancelled` on every step still
//! running or waiting when it stopped the Pod. The condition's reason for a failed step differs
//! by release (`StepOOM`/`StepFailed` since v1.12, `Failed` before; an OOM kill ends the TaskRun
//! only at its timeout before v0.64): what a step did is read from the steps, not that reason.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::SubjectFacts;
use super::inject::{self, ParamValues, StepKind};
use super::lookup::Lookup;
use super::recognise::recognise_as_run;
use super::record::{self, Record};
use crate::policy::{Mode, Policy, PolicySet, PostStepsRun, Verdict};
use crate::tekton::{self, ApiVersion, TaskRunView, step_action};

/// How one step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepOutcome {
    /// Ran and exited 0.
    Completed,
    /// Ran and exited non-zero (an OOM kill included); the chain stopped.
    Failed,
    /// Ran and exited non-zero with `onError: continue`; the chain went on.
    Continued,
    /// Not run: a `when` was false or an earlier step failed.
    Skipped,
    /// Stopped by a timeout: its own `timeout`, or the TaskRun's while it ran.
    TimedOut,
    /// Stopped by a cancellation of the TaskRun while it ran.
    Cancelled,
    /// The TaskRun ended before the step began.
    NeverStarted,
}

impl StepOutcome {
    pub const ALL: [Self; 7] = [
        Self::Completed,
        Self::Failed,
        Self::Continued,
        Self::Skipped,
        Self::TimedOut,
        Self::Cancelled,
        Self::NeverStarted,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Continued => "continued",
            Self::Skipped => "skipped",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
            Self::NeverStarted => "never_started",
        }
    }

    /// Whether the step's own run went wrong (what stops, or would stop, the chain).
    fn is_failure(self) -> bool {
        matches!(
            self,
            Self::Failed | Self::Continued | Self::TimedOut | Self::Cancelled
        )
    }
}

/// Where an org step stands in the TaskRun.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Pre,
    Post,
}

impl Place {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pre => "pre-step",
            Self::Post => "post-step",
        }
    }
}

/// One org step of a finished TaskRun.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRun {
    pub name: String,
    pub place: Place,
    pub outcome: StepOutcome,
    pub exit_code: Option<i64>,
    /// `finishedAt − startedAt`, for a step that ran.
    pub duration_seconds: Option<f64>,
}

/// Whether a policy's steps ran as its `postStepsRun` says they must.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunVerdict {
    Pass,
    /// The reason names each step and its cause.
    Fail(String),
    /// The policy applies to the TaskRun but bookend cannot inject its steps, so nothing says
    /// whether they ran: a policy that selects by the TaskRun's labels or origin, on a TaskRun
    /// whose Task a resolver fetches. The reason says why and what to do.
    Skip(String),
}

impl RunVerdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail(_) => "fail",
            Self::Skip(_) => "skip",
        }
    }
}

/// What kind of failure a verdict is, worst first (a closed set, for metrics and alerts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// A user step of a `userSteps.network: None` policy could not start: Tekton's entrypoint
    /// could not set up its jail (the node refuses user namespaces, or the step runs as a
    /// non-root user). First, as the root of what else did not run.
    HermeticJailFailed,
    /// A step that must run did not, or did not finish (skipped, never started, stopped by a
    /// timeout or a cancellation).
    DidNotRun,
    /// The policy applies but its steps were never injected (drift).
    NotInjected,
    /// A step ran and exited non-zero.
    Failed,
}

impl Cause {
    pub const ALL: [Self; 4] = [
        Self::HermeticJailFailed,
        Self::DidNotRun,
        Self::NotInjected,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::HermeticJailFailed => "hermetic_jail_failed",
            Self::DidNotRun => "did_not_run",
            Self::NotInjected => "not_injected",
            Self::Failed => "failed",
        }
    }
}

/// Why what bookend verified differs from what the policies say now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift {
    /// The policy's spec changed since admission (the record's hash is not the current one).
    Changed { recorded: String, current: String },
    /// The record names a policy that is no longer loaded.
    Gone,
    /// The policy applies to the TaskRun now but was not injected: it was created after the
    /// TaskRun (`created_after`) or its selection changed.
    NotInjected { created_after: bool },
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Changed { recorded, current } => write!(
                f,
                "the policy changed since the TaskRun was admitted (recorded hash {recorded}, now {current})"
            ),
            Self::Gone => f.write_str("the policy was deleted or is invalid since the TaskRun was admitted"),
            Self::NotInjected { created_after: true } => f.write_str(
                "the TaskRun was created before the policy existed; its steps were not injected",
            ),
            Self::NotInjected {
                created_after: false,
            } => f.write_str(
                "the policy applies to the TaskRun now but did not when it was admitted; its steps were not injected",
            ),
        }
    }
}

impl Drift {
    /// The label value for metrics and report properties.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Changed { .. } => "changed",
            Self::Gone => "gone",
            Self::NotInjected {
                created_after: true,
            } => "created_before_policy",
            Self::NotInjected {
                created_after: false,
            } => "not_injected",
        }
    }
}

/// One policy on one finished TaskRun.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyRun {
    /// `Kind/name` (or `StepPolicy/namespace/name`).
    pub policy: String,
    /// Enforce or Audit (Audit policies inject nothing; they appear here only as drift).
    pub mode: Option<Mode>,
    pub steps: Vec<StepRun>,
    pub verdict: RunVerdict,
    /// The worst cause of a `fail`.
    pub cause: Option<Cause>,
    pub drift: Option<Drift>,
}

/// Everything verification found on one finished TaskRun.
#[derive(Clone, Debug, PartialEq)]
pub struct Verification {
    /// Whether the TaskRun succeeded.
    pub succeeded: bool,
    /// The `Succeeded` condition's reason.
    pub reason: String,
    pub policies: Vec<PolicyRun>,
    /// Whether the org steps were identified by composing again (false: by the record's names,
    /// because a policy drifted).
    pub by_composition: bool,
}

/// The policies the TaskRun's record names that cannot apply to it where it is now: a
/// StepPolicy of another namespace, or a policy whose criteria are all namespace-level and do
/// not match its namespace. Such a record was not written by bookend's admission (a TaskRun
/// created where the webhooks do not run, with a record copied in), and its verdict would be
/// no evidence. Policies that select by the TaskRun's labels or origin are not checked again:
/// the author may change the TaskRun's labels after CREATE, and that must not switch
/// verification off. Policies no longer loaded are left to [`verify`] (which reports them).
pub fn policies_out_of_reach(taskrun: &Value, set: &PolicySet, lookup: &dyn Lookup) -> Vec<String> {
    let Some(view) = TaskRunView::new(taskrun) else {
        return Vec::new();
    };
    let Some(record) = view.annotation(record::ANNOTATION).and_then(Record::parse) else {
        return Vec::new();
    };
    let namespace = view.namespace().unwrap_or_default();
    let facts = SubjectFacts::of(&view, namespace, lookup);
    let subject = facts.subject(namespace);
    record
        .policies
        .iter()
        .filter(|entry| {
            set.policies()
                .iter()
                .find(|p| p.id.to_string() == entry.policy)
                .is_some_and(|policy| out_of_reach(policy, &subject))
        })
        .map(|entry| entry.policy.clone())
        .collect()
}

/// Whether `policy` cannot apply to `subject` whatever the TaskRun's labels say: a StepPolicy
/// of another namespace, or a policy whose criteria are all namespace-level and do not match.
pub(super) fn out_of_reach(policy: &Policy, subject: &crate::policy::select::Subject<'_>) -> bool {
    match policy.verdict(subject) {
        Verdict::Matched => false,
        Verdict::OtherNamespace => true,
        Verdict::NotMatched(_) | Verdict::Excluded(_) => policy.namespace_level_only(),
    }
}

/// Whether the TaskRun is done: its `Succeeded` condition is `True` or `False`.
pub fn is_finished(taskrun: &Value) -> bool {
    succeeded_condition(taskrun)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        .is_some_and(|s| s == "True" || s == "False")
}

fn succeeded_condition(taskrun: &Value) -> Option<&Value> {
    succeeded_condition_in(taskrun.get("status")?)
}

/// The `Succeeded` condition of a TaskRun status (the TaskRun's, or an archived attempt's).
fn succeeded_condition_in(status: &Value) -> Option<&Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Succeeded"))
}

/// The state of one step as Tekton reports it, read from `status.steps[]`.
#[derive(Clone, Debug, Default)]
struct StepState<'a> {
    terminated: Option<&'a Value>,
    reason: &'a str,
}

impl<'a> StepState<'a> {
    fn of(entry: &'a Value) -> Self {
        let terminated = entry.get("terminated").filter(|t| t.is_object());
        let text = |v: Option<&'a Value>, key: &str| {
            v.and_then(|v| v.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        // The entrypoint's reason wins over the container's (Tekton's getTerminationReason).
        let reason = match text(Some(entry), "terminationReason") {
            "" => text(terminated, "reason"),
            r => r,
        };
        Self { terminated, reason }
    }

    fn exit_code(&self) -> Option<i64> {
        self.terminated?.get("exitCode")?.as_i64()
    }

    fn oom_killed(&self) -> bool {
        self.reason == "OOMKilled"
            || self
                .terminated
                .and_then(|t| t.get("reason"))
                .and_then(Value::as_str)
                == Some("OOMKilled")
    }

    fn duration(&self) -> Option<f64> {
        let time = |key: &str| {
            self.terminated?
                .get(key)?
                .as_str()?
                .parse::<Timestamp>()
                .ok()
        };
        let (start, end) = (time("startedAt")?, time("finishedAt")?);
        let d = end.duration_since(start).as_secs_f64();
        (d >= 0.0).then_some(d)
    }
}

/// The outcome of every step, in order, and for those that ran their exit code and duration.
/// When the controller stopped the Pod (`TaskRunTimeout`, `TaskRunCancelled`) the first step
/// it terminated was running and the rest never began, unless a step before it had failed:
/// then none of them began. (A step killed whole, as by an OOM kill, writes no post file, so
/// the steps after it wait until the TaskRun's timeout on Tekton before v0.64, which ends a
/// TaskRun early only on `OOMKilled` since then: `isPodCompleted` in `pkg/pod/status.go`.)
fn outcomes(states: &[Option<StepState<'_>>]) -> Vec<StepOutcome> {
    let mut stopped = false;
    states
        .iter()
        .map(|state| {
            let Some(state) = state else {
                return StepOutcome::NeverStarted;
            };
            if state.terminated.is_none() {
                return StepOutcome::NeverStarted;
            }
            let outcome = match state.reason {
                "Skipped" => StepOutcome::Skipped,
                "Continued" => StepOutcome::Continued,
                "TimeoutExceeded" => StepOutcome::TimedOut,
                "Cancelled" => StepOutcome::Cancelled,
                "TaskRunTimeout" | "TaskRunCancelled" if stopped => StepOutcome::NeverStarted,
                "TaskRunTimeout" => StepOutcome::TimedOut,
                "TaskRunCancelled" => StepOutcome::Cancelled,
                _ if state.exit_code() == Some(0) && !state.oom_killed() => StepOutcome::Completed,
                _ => StepOutcome::Failed,
            };
            if outcome == StepOutcome::Failed
                || matches!(state.reason, "TaskRunTimeout" | "TaskRunCancelled")
            {
                stopped = true;
            }
            outcome
        })
        .collect()
}

/// What one step of the TaskRun is, for verification.
#[derive(Clone, Debug)]
enum Owner {
    User,
    Helper,
    /// bookend's step that runs nothing in the author's steps' jail ([`inject::Helper::JailCheck`]):
    /// when it fails, the jail could not be set up.
    JailCheck,
    /// The index into the verified policies, and pre or post.
    Org(usize, Place),
}

/// A policy verification covers: the policy now (if loaded) and what the record says.
struct Covered<'s> {
    id: String,
    policy: Option<&'s Policy>,
    /// The record's steps (the policy's own when the record does not name it).
    steps: Vec<String>,
    drift: Option<Drift>,
}

impl Covered<'_> {
    /// Adds the step names the cover does not list yet.
    fn add_steps<'n>(&mut self, names: impl IntoIterator<Item = &'n str>) {
        for name in names {
            if !self.steps.iter().any(|s| s == name) {
                self.steps.push(name.to_owned());
            }
        }
    }
}

/// What one policy's org steps did in one attempt.
struct Findings {
    runs: Vec<StepRun>,
    problems: Vec<(Cause, String)>,
}

/// One attempt of the TaskRun (its status, or an earlier one from `status.retriesStatus[]`),
/// verified: one [`Findings`] per covered policy, in order.
struct Attempt {
    findings: Vec<Findings>,
    /// How the attempt ended, for a Task never resolved into steps.
    ended: String,
}

impl Attempt {
    fn of(
        status: &Value,
        steps: &[Value],
        names: &[String],
        owners: &[Owner],
        covered: &[Covered<'_>],
    ) -> Self {
        let condition = succeeded_condition_in(status);
        let text = |key: &str| {
            condition
                .and_then(|c| c.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let (reason, message) = (text("reason"), text("message"));
        // Each step's state, by name (Tekton reports `status.steps[].name` as the step's name).
        let reported: BTreeMap<&str, &Value> = status
            .get("steps")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s.get("name")?.as_str()?, s)))
            .collect();
        let states: Vec<Option<StepState<'_>>> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let name = tekton::step_name(s)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("unnamed-{i}"));
                reported.get(name.as_str()).map(|v| StepState::of(v))
            })
            .collect();
        let outcomes = outcomes(&states);
        // A jailed step that could not start. bookend's jail check runs `:`, which cannot
        // fail: when it failed, the jail could not be set up. For a user step under
        // `onError: continue` Tekton's entrypoint reports a command that ran and failed as
        // `Continued`; `Failed` is left for a command it could not start, which for a jailed
        // step is first the jail (user namespaces refused, or a non-root step), else a command
        // missing from the image. Without `continue` such a step looks like one that exited 1,
        // and is not told apart (the jail check, which ran before it, passed).
        let jailed = covered
            .iter()
            .any(|c| c.policy.is_some_and(|p| p.spec.user_steps.hermetic()));
        // An OOM kill is the kernel's answer to a step that ran, never a jail that could not
        // be set up.
        let failed_to_start = |i: usize| {
            outcomes[i] == StepOutcome::Failed
                && !states[i].as_ref().is_some_and(StepState::oom_killed)
        };
        let not_started: Vec<bool> = owners
            .iter()
            .enumerate()
            .map(|(i, owner)| match owner {
                Owner::JailCheck => failed_to_start(i),
                Owner::User => {
                    jailed
                        && failed_to_start(i)
                        && steps[i].get("onError").and_then(Value::as_str) == Some("continue")
                }
                Owner::Helper | Owner::Org(..) => false,
            })
            .collect();
        let pod = status
            .get("podName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let stop = Stop {
            reason,
            message,
            names,
            owners,
            outcomes: &outcomes,
            states: &states,
            not_started: &not_started,
            pod,
        };
        let findings = covered
            .iter()
            .enumerate()
            .map(|(c, cover)| {
                let always = cover
                    .policy
                    .is_some_and(|p| p.spec.post_steps_run == PostStepsRun::Always);
                let mut runs = Vec::new();
                let mut problems = Vec::new();
                // The jail this policy asks for could not be set up: no user step ran, with or
                // without network. Said first, for the policy that asks for it.
                if cover.policy.is_some_and(|p| p.spec.user_steps.hermetic()) {
                    for i in (0..names.len()).filter(|&i| not_started[i]) {
                        problems.push((Cause::HermeticJailFailed, stop.jail_failure(i)));
                    }
                }
                for (i, owner) in owners.iter().enumerate() {
                    let Owner::Org(o, place) = owner else {
                        continue;
                    };
                    if *o != c {
                        continue;
                    }
                    let outcome = outcomes[i];
                    let state = states[i].as_ref();
                    let ran = !matches!(outcome, StepOutcome::Skipped | StepOutcome::NeverStarted);
                    runs.push(StepRun {
                        name: names[i].clone(),
                        place: *place,
                        outcome,
                        exit_code: state.filter(|_| ran).and_then(StepState::exit_code),
                        duration_seconds: state.filter(|_| ran).and_then(StepState::duration),
                    });
                    if let Some(problem) = stop.problem(i, *place, always) {
                        problems.push(problem);
                    }
                }
                Findings { runs, problems }
            })
            .collect();
        Self {
            findings,
            ended: stop.cause_before(0),
        }
    }
}

/// Verifies a finished TaskRun; `None` when it has not finished or is not a TaskRun.
pub fn verify(taskrun: &Value, set: &PolicySet, lookup: &dyn Lookup) -> Option<Verification> {
    let view = TaskRunView::new(taskrun)?;
    let condition = succeeded_condition(taskrun)?;
    let status = condition.get("status").and_then(Value::as_str)?;
    if status != "True" && status != "False" {
        return None;
    }
    let reason = condition
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let settings = set.settings();
    let prefix = settings.prefix.as_str();

    // The steps as the TaskRun carries them: inline, or as the controller resolved them (a
    // remote Task: `status.taskSpec`, which only Tekton's controller writes, through the
    // `taskruns/status` subresource). Its content is the resolver's Task, which the author may
    // control, so there only composing again says which steps are the org's, never a name.
    let inline = view.task_spec().filter(|t| t.get("steps").is_some());
    let from_status = inline.is_none();
    let task_spec = inline.or_else(|| taskrun.pointer("/status/taskSpec"));
    let empty = Value::Null;
    let task_spec = task_spec.unwrap_or(&empty);
    let steps: &[Value] = task_spec
        .get("steps")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let hint = view.annotation(record::ANNOTATION).and_then(Record::parse);
    let namespace = view.namespace().unwrap_or_default();
    let facts = SubjectFacts::of(&view, namespace, lookup);
    let subject = facts.subject(namespace);
    // A resolved Task gets only the policies whose criteria are all about the namespace (the
    // others the TaskRun's admission skipped or refused, by their remoteTaskRef).
    let remote = matches!(view.task_source(), tekton::TaskSource::RemoteRef { .. });

    // The policies to verify: the record's, then any current policy one of whose steps the
    // TaskRun carries (admission admits a reserved-prefix step only as bookend's) and that can
    // apply to it: a step named like another namespace's policy's is the author's.
    let by_id = |id: &str| set.policies().iter().find(|p| p.id.to_string() == id);
    let mut covered: Vec<Covered<'_>> = Vec::new();
    for entry in hint.iter().flat_map(|r| &r.policies) {
        // One cover per policy, whatever the record says (bookend never names one twice):
        // each cover is a verdict, and a policy's mark keeps one.
        if let Some(cover) = covered.iter_mut().find(|c| c.id == entry.policy) {
            cover.add_steps(entry.steps.iter().map(String::as_str));
            continue;
        }
        let policy = by_id(&entry.policy);
        let drift = match policy {
            None => Some(Drift::Gone),
            Some(p) if p.hash != entry.hash => Some(Drift::Changed {
                recorded: entry.hash.clone(),
                current: p.hash.clone(),
            }),
            Some(_) => None,
        };
        covered.push(Covered {
            id: entry.policy.clone(),
            policy,
            steps: entry.steps.clone(),
            drift,
        });
    }
    for step in steps {
        let Some(name) = tekton::step_name(step).filter(|n| n.starts_with(prefix)) else {
            continue;
        };
        if settings.is_helper_name(name)
            || covered.iter().any(|c| c.steps.iter().any(|s| s == name))
        {
            continue;
        }
        if let Some(p) = set
            .policies()
            .iter()
            .find(|p| p.step_names().any(|s| s == name))
            .filter(|p| !out_of_reach(p, &subject) && (!remote || p.namespace_level_only()))
        {
            let id = p.id.to_string();
            match covered.iter_mut().find(|c| c.id == id) {
                // The record names the policy but not all of its steps: verified all the same.
                Some(cover) => cover.add_steps(p.step_names()),
                None => covered.push(Covered {
                    id,
                    policy: Some(p),
                    steps: p.step_names().map(str::to_owned).collect(),
                    drift: None,
                }),
            }
        }
    }
    // Evaluation order, as admission composed them.
    covered.sort_by_key(|c| {
        c.policy
            .and_then(|p| set.policies().iter().position(|q| q.id == p.id))
            .unwrap_or(usize::MAX)
    });

    // Who owns each step: by composing again when every policy is as it was at admission.
    // A resolved Task is composed again in any case (its steps were injected at its
    // resolution, after the record: the current policies may be the ones that injected), and
    // when that fails none of its steps is the org's: a step named like one could be the
    // author's own (the dry-run mutation skipped, the Pod backstop in warn mode).
    let current: Vec<&Policy> = covered.iter().filter_map(|c| c.policy).collect();
    let composed = ((from_status || covered.iter().all(|c| c.drift.is_none()))
        && !current.is_empty())
    .then(|| {
        compose_owners(
            steps,
            task_spec,
            &view,
            &current,
            set,
            from_status.then_some(lookup),
        )
    })
    .flatten();
    let by_composition = composed.is_some();
    let owners = match composed {
        Some(owners) => owners,
        None if from_status => vec![Owner::User; steps.len()],
        None => name_owners(steps, &covered, settings),
    };

    let names: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            tekton::step_name(s)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("#{i}"))
        })
        .collect();
    // Every attempt, each verified on its own: with `spec.retries` Tekton's controller archives
    // each failed attempt's whole status (its steps included) in `status.retriesStatus[]`
    // (`retryTaskRun`, v0.62 to v1.15) and the TaskRun's own status is the last attempt's. An
    // earlier attempt ran the author's steps too, so a policy passes only if it passes in each.
    let last = taskrun.get("status").unwrap_or(&empty);
    let mut statuses: Vec<&Value> = last
        .get("retriesStatus")
        .and_then(Value::as_array)
        .map(|earlier| earlier.iter().collect())
        .unwrap_or_default();
    statuses.push(last);
    let attempts: Vec<Attempt> = statuses
        .iter()
        .map(|status| Attempt::of(status, steps, &names, &owners, &covered))
        .collect();
    let count = attempts.len();

    let mut policies: Vec<PolicyRun> = covered
        .iter()
        .enumerate()
        .map(|(c, cover)| {
            let mut problems = Vec::new();
            for (a, attempt) in attempts.iter().enumerate() {
                let label = |text: &str| {
                    if count == 1 {
                        text.to_owned()
                    } else {
                        format!("attempt {} of {count}: {text}", a + 1)
                    }
                };
                problems.extend(
                    attempt.findings[c]
                        .problems
                        .iter()
                        .map(|(cause, text)| (*cause, label(text))),
                );
            }
            // The steps (durations, exit codes) are the last attempt's.
            let last = attempts
                .last()
                .expect("the TaskRun's own status is an attempt");
            let runs = last.findings[c].runs.clone();
            // A recorded step the TaskRun does not carry as the org's: removed after admission,
            // or, from a resolved Task, not injected at its resolution (or never resolved).
            for missing in cover
                .steps
                .iter()
                .filter(|s| !runs.iter().any(|r| &r.name == *s))
            {
                let why = if steps.is_empty() && from_status {
                    format!("its Task was never resolved into steps: {}", last.ended)
                } else if names.contains(missing) {
                    let step_action = from_status
                        .then(|| step_action_mismatch(cover.policy?, missing, namespace, lookup))
                        .flatten()
                        .unwrap_or_default();
                    format!(
                        "the TaskRun carries a step of that name that is not the policy's (its \
                         Task's own, so not evidence){step_action}"
                    )
                } else if from_status {
                    "the Task that ran (status.taskSpec) does not carry it: it was not injected \
                     when the Task was resolved"
                        .to_owned()
                } else {
                    "the TaskRun does not carry it".to_owned()
                };
                problems.push((
                    Cause::DidNotRun,
                    format!("org step {missing} did not run: {why}"),
                ));
            }
            PolicyRun {
                policy: cover.id.clone(),
                mode: cover.policy.map(|p| p.spec.mode),
                steps: runs,
                verdict: if problems.is_empty() {
                    RunVerdict::Pass
                } else {
                    RunVerdict::Fail(
                        problems
                            .iter()
                            .map(|(_, p)| p.as_str())
                            .collect::<Vec<_>>()
                            .join("; "),
                    )
                },
                cause: problems.iter().map(|(c, _)| *c).min(),
                drift: cover.drift.clone(),
            }
        })
        .collect();

    // Policies that apply now but that the TaskRun was not given.
    let created = taskrun
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str);
    for policy in set.candidates(&subject) {
        if policy.spec.mode != Mode::Enforce
            || !policy.matches(&subject)
            || covered.iter().any(|c| c.id == policy.id.to_string())
        {
            continue;
        }
        if remote && !policy.namespace_level_only() {
            // Its steps cannot go into a Task a resolver fetches: said, not left silent.
            policies.push(PolicyRun {
                policy: policy.id.to_string(),
                mode: Some(policy.spec.mode),
                steps: Vec::new(),
                verdict: RunVerdict::Skip(format!(
                    "org steps {} were not injected, so whether they ran is not known: the policy \
                     selects TaskRuns by their labels or origin, which the Task a resolver fetches \
                     does not carry when bookend injects into it (Tekton's dry-run), and \
                     remoteTaskRef: Skip admitted the TaskRun without them; select by namespace \
                     only, or run the Task inline or by taskRef.name",
                    policy.step_names().collect::<Vec<_>>().join(", ")
                )),
                cause: None,
                drift: None,
            });
            continue;
        }
        let created_after =
            matches!((policy.created.as_deref(), created), (Some(p), Some(c)) if p > c);
        let drift = Drift::NotInjected { created_after };
        policies.push(PolicyRun {
            policy: policy.id.to_string(),
            mode: Some(policy.spec.mode),
            steps: Vec::new(),
            verdict: RunVerdict::Fail(format!(
                "org steps {} did not run: {drift}",
                policy.step_names().collect::<Vec<_>>().join(", ")
            )),
            cause: Some(Cause::NotInjected),
            drift: Some(drift),
        });
    }

    Some(Verification {
        succeeded: status == "True",
        reason,
        policies,
        by_composition,
    })
}

/// Owners by composing again, as admission does; `None` when the composition does not give
/// back the TaskRun's steps in place. A resolved Task (`resolved`: the lookup its org steps'
/// StepActions are read from) was composed at the controller's dry-run, which knows none of the
/// TaskRun's param values: only the Task's defaults, as here.
fn compose_owners(
    steps: &[Value],
    task_spec: &Value,
    view: &TaskRunView<'_>,
    applied: &[&Policy],
    set: &PolicySet,
    resolved: Option<&dyn Lookup>,
) -> Option<Vec<Owner>> {
    let params_of = |holder: Option<&Value>| -> Vec<Value> {
        holder
            .and_then(|h| h.get("params"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let run_params = if resolved.is_some() {
        Vec::new()
    } else {
        params_of(view.spec())
    };
    let spec_params = params_of(Some(task_spec));
    let params = ParamValues {
        run_params: &run_params,
        spec_params: &spec_params,
    };
    let settings = set.settings();
    // A resolved Task's record of which author steps bookend set to `continue` stays on the
    // Task (Tekton's controller keeps the TaskRun's metadata): read them from its verdict.
    let hint = match resolved {
        Some(_) => continued_by_verdict(steps, settings),
        None => view.annotation(record::ANNOTATION).and_then(Record::parse),
    };
    let version = ApiVersion::V1;
    let substitutions = resolved.map(|lookup| (lookup, Substitutions::of(view, task_spec)));
    let namespace = view.namespace().unwrap_or_default();
    // As Tekton's controller runs it: StepActions resolved (`GetStepActionsData`), then its
    // variables substituted. Only bookend's steps, composed from the policies: the author's are
    // taken from what ran, where Tekton substituted them once already (substituted again, a
    // value that names a variable — a param defaulting to `$(params.q)` — would change, and
    // nothing would be taken for bookend's).
    let as_run = |composed: &mut [Value], kinds: &[StepKind]| {
        if let Some((lookup, substitutions)) = &substitutions {
            for (step, kind) in composed.iter_mut().zip(kinds) {
                if matches!(kind, StepKind::User(_)) {
                    continue;
                }
                if let Ok(ran) = resolve_step_action(step, namespace, *lookup) {
                    *step = ran;
                }
            }
            substitutions.apply(composed, kinds);
        }
    };
    let recognised = recognise_as_run(
        steps,
        applied,
        settings,
        version,
        &params,
        hint.as_ref(),
        &as_run,
    )
    .ok()?;
    if !recognised.in_place {
        return None;
    }
    if resolved.is_some() && !as_dry_run_leaves_it(task_spec, &recognised.user, applied, settings) {
        return None;
    }
    let composed = inject::compose(recognised.user, applied, settings, version, &params);
    if composed.kinds.len() != steps.len() {
        return None;
    }
    Some(
        composed
            .kinds
            .iter()
            .map(|k| match k {
                StepKind::User(_) => Owner::User,
                StepKind::Gate | StepKind::Verdict => Owner::Helper,
                StepKind::JailCheck => Owner::JailCheck,
                StepKind::Pre(p) => Owner::Org(*p, Place::Pre),
                StepKind::Post(p) => Owner::Org(*p, Place::Post),
            })
            .collect(),
    )
}

/// Which of the author's steps among `steps` bookend set to `onError: continue`, as the verdict
/// step among them reads their exit codes (by container name or index): a reading only, which
/// composing again confirms or refutes, as the Pod backstop reads a resolved Task's Pod.
fn continued_by_verdict(steps: &[Value], settings: &crate::policy::Settings) -> Option<Record> {
    let verdict = settings.verdict_name();
    let reads = super::pod::verdict_reads(
        steps
            .iter()
            .find(|s| tekton::step_name(s) == Some(&verdict))?,
    );
    let prefix = settings.prefix.as_str();
    let continued = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| !tekton::step_name(s).is_some_and(|n| n.starts_with(prefix)))
        .enumerate()
        .filter(|(_, (i, s))| {
            let container = tekton::container_name(s, *i);
            reads.iter().any(|r| *r == container || *r == i.to_string())
        })
        .map(|(ordinal, (_, s))| inject::user_step_key(s, ordinal))
        .collect();
    Some(Record {
        continued,
        ..Record::default()
    })
}

/// An org step with a `ref` as Tekton's controller resolves it, from the StepAction bookend's
/// cache holds now; a step without a `ref` is returned as it is. Every field is the StepAction's
/// or the policy's, so a step of the author's matches only when it is the org step in content.
fn resolve_step_action(
    step: &Value,
    namespace: &str,
    lookup: &dyn Lookup,
) -> Result<Value, String> {
    let Some(step_ref) = step.get("ref").filter(|r| !r.is_null()) else {
        return Ok(step.clone());
    };
    let source = step_action::Source::of(step_ref);
    let (at, name) = source.object(namespace).ok_or_else(|| {
        format!(
            "bookend cannot read {source} (it reads ref.name, and the cluster resolver's with literal kind stepaction, name and namespace params)"
        )
    })?;
    let action = lookup
        .step_action(&at, &name)
        .ok_or_else(|| format!("{source} does not exist now"))?;
    step_action::resolve(step, &action).map_err(|e| format!("{source}: {e}"))
}

/// Why an org step that is a StepAction did not match what ran, for the verdict's reason
/// (`None` when the policy's step `name` has no `ref`).
fn step_action_mismatch(
    policy: &Policy,
    name: &str,
    namespace: &str,
    lookup: &dyn Lookup,
) -> Option<String> {
    let step = policy
        .pre_steps
        .iter()
        .chain(&policy.post_steps)
        .find(|s| tekton::step_name(s) == Some(name))?;
    let step_ref = step.get("ref").filter(|r| !r.is_null())?;
    Some(match resolve_step_action(step, namespace, lookup) {
        Err(why) => format!("; the org step is a StepAction: {why}"),
        Ok(_) => format!(
            "; the org step is {}, and what ran is not it as it resolves now (the StepAction changed since the run, the step is not the StepAction's, or the Task is not one bookend's dry-run left)",
            step_action::Source::of(step_ref)
        ),
    })
}

/// Whether a resolved Task (`status.taskSpec`) is one bookend's dry-run mutation could have
/// left: no stepTemplate (the dry-run writes it into the author's steps), nothing the dry-run
/// refuses (a workspace over org steps' paths, the author's mounts of bookend's volumes), and
/// no volume under a policy volume's name but the policy's definition. Otherwise the mutation did not run (it
/// fails open) and a step that looks like the org's may run the author's files.
fn as_dry_run_leaves_it(
    task_spec: &Value,
    user: &[Value],
    applied: &[&Policy],
    settings: &crate::policy::Settings,
) -> bool {
    let template_set = task_spec
        .get("stepTemplate")
        .is_some_and(|t| !t.is_null() && t.as_object().is_none_or(|o| !o.is_empty()));
    if template_set || super::isolate::check_task_spec(task_spec, user, applied, settings).is_err()
    {
        return false;
    }
    let volumes = task_spec
        .get("volumes")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    applied.iter().flat_map(|p| &p.volumes).all(|want| {
        let name = want.get("name");
        volumes
            .iter()
            .filter(|v| v.get("name") == name)
            .all(|v| v == want)
    })
}

/// `status.taskSpec` is the spec after Tekton's controller substituted its variables
/// (`applyParamsContextsResultsAndWorkspaces` in Tekton's `pkg/reconciler/taskrun/taskrun.go`),
/// so what bookend composes again is substituted the same way before it is compared: a step is
/// the org's only if Tekton's substitution of bookend's step gives exactly what ran. Handled:
/// `$(context.taskRun.{name,namespace,uid})`, string `$(params.<p>)` (the TaskRun's value, else
/// the Task's default), `$(results.<r>.path)`, `$(step.results.<r>.path)` and
/// `$(steps.step-<s>.exitCode.path)`. A step with another variable Tekton substitutes does not match
/// (a `fail`, never a pass).
struct Substitutions {
    /// `$(key)` -> value, for every step.
    shared: Vec<(String, String)>,
}

impl Substitutions {
    fn of(view: &TaskRunView<'_>, task_spec: &Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let mut shared = Vec::new();
        for key in ["name", "namespace", "uid"] {
            if let Some(value) = text(view.object.pointer(&format!("/metadata/{key}"))) {
                shared.push((format!("$(context.taskRun.{key})"), value));
            }
        }
        let run_params = view
            .spec()
            .and_then(|s| s.get("params"))
            .and_then(Value::as_array);
        for param in task_spec
            .get("params")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = text(param.get("name")) else {
                continue;
            };
            let given = run_params
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(name.as_str()))
                .and_then(|p| p.get("value"));
            if let Some(value) = text(given.or_else(|| param.get("default"))) {
                shared.push((format!("$(params.{name})"), value));
            }
        }
        for result in task_spec
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = text(result.get("name")) {
                shared.push((
                    format!("$(results.{name}.path)"),
                    format!("/tekton/results/{name}"),
                ));
            }
        }
        Self { shared }
    }

    /// Substitutes bookend's steps of `steps` (`kinds` says which are the author's).
    fn apply(&self, steps: &mut [Value], kinds: &[StepKind]) {
        let names: Vec<String> = steps
            .iter()
            .filter_map(|s| tekton::step_name(s).map(str::to_owned))
            .collect();
        let mut exit_codes: Vec<(String, String)> = names
            .iter()
            .map(|s| {
                (
                    // Tekton's form names the step's container (`ApplyStepExitCodePath`:
                    // `pod.StepName`), `step-<name>`; `$(steps.<name>.exitCode.path)` it
                    // leaves as written.
                    format!("$(steps.step-{s}.exitCode.path)"),
                    format!("/tekton/steps/step-{s}/exitCode"),
                )
            })
            .collect();
        exit_codes.extend(self.shared.iter().cloned());
        for (step, _) in steps
            .iter_mut()
            .zip(kinds)
            .filter(|(_, k)| !matches!(k, StepKind::User(_)))
        {
            let mut pairs = exit_codes.clone();
            if let Some(s) = tekton::step_name(step).map(str::to_owned) {
                for result in step
                    .get("results")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(r) = result.get("name").and_then(Value::as_str) {
                        pairs.push((
                            format!("$(step.results.{r}.path)"),
                            format!("/tekton/steps/step-{s}/results/{r}"),
                        ));
                    }
                }
            }
            replace_in_strings(step, &pairs);
        }
    }
}

fn replace_in_strings(value: &mut Value, pairs: &[(String, String)]) {
    match value {
        Value::String(text) if text.contains("$(") => {
            for (variable, substituted) in pairs {
                if text.contains(variable.as_str()) {
                    *text = text.replace(variable.as_str(), substituted);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| replace_in_strings(v, pairs)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_in_strings(v, pairs)),
        _ => {}
    }
}

/// Owners by the record's step names (a policy drifted, so composing again cannot tell): a
/// recorded step before the first of the author's steps is a pre-step.
fn name_owners(
    steps: &[Value],
    covered: &[Covered<'_>],
    settings: &crate::policy::Settings,
) -> Vec<Owner> {
    let prefix = settings.prefix.as_str();
    let jail_check = settings.jail_check_name();
    let mut seen_user = false;
    steps
        .iter()
        .map(|s| {
            let name = tekton::step_name(s).unwrap_or_default();
            if name == jail_check {
                return Owner::JailCheck;
            }
            if name.starts_with(prefix) && settings.is_helper_name(name) {
                return Owner::Helper;
            }
            let org = name.starts_with(prefix).then(|| {
                covered
                    .iter()
                    .position(|c| c.steps.iter().any(|n| n == name))
            });
            match org.flatten() {
                Some(c) => Owner::Org(c, if seen_user { Place::Post } else { Place::Pre }),
                None => {
                    seen_user = true;
                    Owner::User
                }
            }
        })
        .collect()
}

/// What stopped the chain, to explain an org step that did not run.
struct Stop<'a> {
    reason: &'a str,
    message: &'a str,
    names: &'a [String],
    owners: &'a [Owner],
    outcomes: &'a [StepOutcome],
    states: &'a [Option<StepState<'a>>],
    /// Jailed user steps that could not start.
    not_started: &'a [bool],
    /// `status.podName`.
    pod: &'a str,
}

impl Stop<'_> {
    /// The problem with org step `i`, if it did not run as it must.
    fn problem(&self, i: usize, place: Place, always: bool) -> Option<(Cause, String)> {
        let step = format!("org {} {}", place.as_str(), self.names[i]);
        let outcome = self.outcomes[i];
        let did_not = |text: String| Some((Cause::DidNotRun, text));
        match outcome {
            StepOutcome::Completed => None,
            StepOutcome::Failed | StepOutcome::Continued => Some((
                Cause::Failed,
                format!("{step} failed: {}", self.how_it_failed(i)),
            )),
            StepOutcome::TimedOut | StepOutcome::Cancelled
                if matches!(self.reason, "TaskRunTimeout" | "TaskRunCancelled")
                    && self.is_stopped_by_controller(i) =>
            {
                did_not(format!("{step} did not finish: {}", self.taskrun_stop()))
            }
            StepOutcome::TimedOut => did_not(format!("{step} did not finish: it timed out")),
            StepOutcome::Cancelled => {
                did_not(format!("{step} did not finish: the TaskRun was cancelled"))
            }
            StepOutcome::Skipped | StepOutcome::NeverStarted => {
                // An OnSuccess post-step is not run after a step before it went wrong: that is
                // what its policy says.
                let earlier_failure = (0..i).any(|j| {
                    !matches!(self.owners[j], Owner::Helper) && self.outcomes[j].is_failure()
                });
                if place == Place::Post && !always && earlier_failure {
                    return None;
                }
                did_not(format!("{step} did not run: {}", self.cause_before(i)))
            }
        }
    }

    fn is_stopped_by_controller(&self, i: usize) -> bool {
        self.states[i]
            .as_ref()
            .is_some_and(|s| matches!(s.reason, "TaskRunTimeout" | "TaskRunCancelled"))
    }

    fn how_it_failed(&self, i: usize) -> String {
        let state = self.states[i].as_ref();
        let code = state
            .and_then(StepState::exit_code)
            .map_or_else(|| "no exit code".to_owned(), |c| format!("exit code {c}"));
        if state.is_some_and(StepState::oom_killed) {
            format!("it was OOMKilled ({code})")
        } else {
            code
        }
    }

    /// Why jailed step `i` (a user step or the jail check) did not run.
    fn jail_failure(&self, i: usize) -> String {
        let pod = if self.pod.is_empty() {
            String::new()
        } else {
            format!(" in Pod {}", self.pod)
        };
        if matches!(self.owners[i], Owner::JailCheck) {
            return format!(
                "the hermetic jail (userSteps.network: None) could not be set up{pod}: bookend's step {}, which runs nothing in the jail the TaskRun's steps run in, could not start — the node refuses user namespaces (a seccomp profile without CAP_SYS_ADMIN, user.max_user_namespaces=0, an AppArmor restriction), or the Pod's security context does (a non-root runAsUser); none of the TaskRun's own steps ran, with or without network",
                self.names[i]
            );
        }
        format!(
            "user step {} could not start{pod}: the hermetic jail (userSteps.network: None) could not be set up — the node refuses user namespaces, or the step runs as a non-root user (or its command is not in the image); it did not run, with or without network",
            self.names[i]
        )
    }

    /// The TaskRun's timeout or cancellation, and the step it stopped.
    fn taskrun_stop(&self) -> String {
        let what = if self.reason == "TaskRunTimeout" {
            "the TaskRun timed out"
        } else {
            "the TaskRun was cancelled"
        };
        // The step it stopped: the one running then (the first the controller terminated
        // that had begun), else the last that finished.
        let running = (0..self.names.len()).find(|&j| {
            self.is_stopped_by_controller(j)
                && matches!(
                    self.outcomes[j],
                    StepOutcome::TimedOut | StepOutcome::Cancelled
                )
        });
        if let Some(j) = running {
            return format!("{what} during step {}", self.names[j]);
        }
        let last = (0..self.names.len()).rev().find(|&j| {
            !matches!(
                self.outcomes[j],
                StepOutcome::Skipped | StepOutcome::NeverStarted
            )
        });
        match last {
            Some(j) => format!("{what} after step {}", self.names[j]),
            None => format!("{what} before any step began"),
        }
    }

    /// Why step `i` did not run: the first step before it that went wrong without `continue`
    /// (a step that failed, even when the TaskRun's timeout or cancellation came after it),
    /// else the TaskRun's stop, else the TaskRun's reason.
    fn cause_before(&self, i: usize) -> String {
        let culprit = (0..i).find(|&j| {
            !matches!(self.owners[j], Owner::Helper)
                && matches!(
                    self.outcomes[j],
                    StepOutcome::Failed | StepOutcome::TimedOut | StepOutcome::Cancelled
                )
        });
        let failed_first = culprit.is_some_and(|j| self.outcomes[j] == StepOutcome::Failed);
        if !failed_first && matches!(self.reason, "TaskRunTimeout" | "TaskRunCancelled") {
            return self.taskrun_stop();
        }
        if let Some(j) = culprit {
            let name = &self.names[j];
            if self.not_started[j] && matches!(self.owners[j], Owner::JailCheck) {
                return format!(
                    "the hermetic jail could not be set up (step {name} could not start)"
                );
            }
            if self.not_started[j] {
                return format!("step {name} could not start in its hermetic jail");
            }
            return match self.outcomes[j] {
                StepOutcome::TimedOut => format!("step {name} timed out"),
                StepOutcome::Cancelled => format!("step {name} was cancelled"),
                _ => format!("step {name} failed ({})", self.how_it_failed(j)),
            };
        }
        let reason = if self.reason.is_empty() {
            "no reason"
        } else {
            self.reason
        };
        if self.message.is_empty() {
            format!("the TaskRun ended with {reason}")
        } else {
            format!("the TaskRun ended with {reason}: {}", self.message)
        }
    }
}

#[cfg(test)]
#[path = "verify_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "verify_breaker34.rs"]
mod breaker34;
