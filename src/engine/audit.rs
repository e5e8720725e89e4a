//! What each matching Audit policy would do to a TaskRun if it were enforced (for PolicyReports):
//! inject its steps, get the TaskRun denied, or skip it (a remote or signed Task, `taskRef:
//! Skip`). Each Audit policy is planned on its own, together with the Enforce policies that
//! apply, so a result says what switching that one policy to Enforce would do.

use super::plan::{as_authored, plan};
use super::{Lookup, Request, SubjectFacts};
use crate::policy::{Mode, Policy, PolicySet};
use crate::tekton::{TaskRunView, TaskSource};

/// The three results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditOutcome {
    /// Enforced, it would inject its steps.
    WouldInject,
    /// Enforced, the TaskRun would be refused.
    WouldDeny,
    /// Enforced, it would leave the TaskRun alone (the message says why).
    Skipped,
}

impl AuditOutcome {
    /// The name in reports: `would-inject`, `would-deny`, `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WouldInject => "would-inject",
            Self::WouldDeny => "would-deny",
            Self::Skipped => "skipped",
        }
    }
}

/// One Audit policy's result for one TaskRun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditFinding {
    /// `Kind/name` or `StepPolicy/namespace/name`.
    pub policy: String,
    pub outcome: AuditOutcome,
    /// The policy's steps, pre-steps first.
    pub steps: Vec<String>,
    /// What would happen, in words (the denial message, the reason for a skip).
    pub message: String,
}

/// The findings of every Audit policy that matches the TaskRun, in evaluation order. Empty for
/// objects that are not TaskRuns, when no Audit policy matches, and when the Enforce policies
/// alone refuse the TaskRun (it is not admitted, so there is nothing to report on).
pub fn audit(request: Request<'_>, set: &PolicySet, lookup: &dyn Lookup) -> Vec<AuditFinding> {
    let Some(view) = TaskRunView::new(request.object) else {
        return Vec::new();
    };
    let facts = SubjectFacts::of(&view, request.namespace, lookup);
    let subject = facts.subject(request.namespace);
    let (audit, enforce): (Vec<&Policy>, Vec<&Policy>) = set
        .candidates(&subject)
        .into_iter()
        .filter(|p| p.matches(&subject))
        .partition(|p| p.spec.mode == Mode::Audit);
    if audit.is_empty() {
        return Vec::new();
    }
    let base = plan(&view, request.namespace, &enforce, set, lookup);
    if base.outcome.is_err() {
        return Vec::new();
    }
    // Each Audit policy is planned on the TaskRun as its author wrote it: the admitted one
    // carries the Enforce policies' steps, which the Audit policy's composition does not.
    let authored = as_authored(&view, &enforce, set);
    let view = TaskRunView {
        object: authored.as_ref(),
        api_version: view.api_version,
    };
    let remote = match view.task_source() {
        TaskSource::RemoteRef { resolver } => Some(resolver),
        _ => None,
    };
    let position = |p: &&Policy| set.policies().iter().position(|q| q.id == p.id);
    audit
        .iter()
        .map(|policy| {
            let mut applied = enforce.clone();
            applied.push(policy);
            applied.sort_by_key(position);
            let would = plan(&view, request.namespace, &applied, set, lookup);
            let id = policy.id.to_string();
            let steps: Vec<String> = policy.step_names().map(str::to_owned).collect();
            let skipped = would
                .warnings
                .iter()
                .find(|w| mentions(w, &id) && !base.warnings.contains(w));
            let (outcome, message) = match (&would.outcome, skipped) {
                (Err(denial), _) => (AuditOutcome::WouldDeny, denial.message.clone()),
                (Ok(_), Some(warning)) => (AuditOutcome::Skipped, warning.clone()),
                // Enforced, it would inject only into the resolved Task, which nobody has yet:
                // nothing to judge at CREATE.
                (Ok(_), None) if remote.is_some() => (
                    AuditOutcome::Skipped,
                    format!(
                        "bookend: TaskRun uses a remote Task ({} resolver); {id} would inject {} into the resolved Task at Tekton's controller's dry-run, which is not known at CREATE",
                        remote.as_deref().unwrap_or_default(),
                        steps.join(", ")
                    ),
                ),
                (Ok(_), None) => (
                    AuditOutcome::WouldInject,
                    format!("would inject {}", steps.join(", ")),
                ),
            };
            AuditFinding {
                policy: id,
                outcome,
                steps,
                message,
            }
        })
        .collect()
}

/// Whether `text` names the policy `id` as a whole (not `…/org` inside `…/org-sbom`).
fn mentions(text: &str, id: &str) -> bool {
    text.match_indices(id).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + id.len()..].chars().next();
        before.is_none_or(|c| c == ' ' || c == '(')
            && after.is_none_or(|c| matches!(c, ',' | ' ' | ')' | ';'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Catalog;
    use crate::policy::Settings;
    use crate::policy::load::policy_set_from_yaml;
    use serde_json::{Value, json};

    const POLICIES: &str = r#"
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org}
spec:
  priority: 10
  preSteps: [{name: bookend-org, image: alpine}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-audit}
spec:
  mode: Audit
  postSteps: [{name: bookend-audit, image: alpine, args: ["$(params.needed)"]}]
---
apiVersion: bookend.dev/v1alpha1
kind: ClusterStepPolicy
metadata: {name: org-report}
spec:
  mode: Audit
  postSteps: [{name: bookend-report, image: alpine}]
"#;

    fn findings(object: Value) -> Vec<AuditFinding> {
        let loaded = policy_set_from_yaml("p.yaml", POLICIES, Settings::default());
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        audit(
            Request {
                object: &object,
                namespace: "team-a",
                dry_run: false,
            },
            &loaded.set,
            &Catalog::default(),
        )
    }

    fn inline(params: Value) -> Value {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "r"},
               "spec": {"params": params,
                        "taskSpec": {"params": [{"name": "needed"}], "steps": [{"name": "build", "image": "go"}]}}})
    }

    #[test]
    fn each_audit_policy_is_judged_on_its_own() {
        // org-audit uses a param the TaskRun declares: both would inject.
        let f = findings(inline(json!([{"name": "needed", "value": "x"}])));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].policy, "ClusterStepPolicy/org-audit");
        assert_eq!(f[0].outcome, AuditOutcome::WouldInject);
        assert_eq!(f[0].steps, ["bookend-audit"]);
        assert_eq!(f[0].message, "would inject bookend-audit");
        assert_eq!(f[1].outcome, AuditOutcome::WouldInject);
    }

    #[test]
    fn a_denial_is_pinned_on_the_policy_that_causes_it() {
        let mut object = inline(json!([]));
        object["spec"]["taskSpec"]["params"] = json!([]);
        let f = findings(object);
        assert_eq!(f[0].outcome, AuditOutcome::WouldDeny);
        assert!(
            f[0].message.contains("ClusterStepPolicy/org-audit")
                && f[0].message.contains("\"needed\""),
            "{}",
            f[0].message
        );
        // The other Audit policy is unaffected by org-audit's problem.
        assert_eq!(f[1].outcome, AuditOutcome::WouldInject);
    }

    #[test]
    fn remote_tasks_are_skipped_with_the_reason() {
        // Enforced, a policy whose criteria are all about the namespace would inject into the
        // resolved Task (at the controller's dry-run), unknown at CREATE; one that selects by
        // the TaskRun's labels would skip it.
        let mut object = json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun", "metadata": {"name": "r"},
                            "spec": {"taskRef": {"resolver": "git"}}});
        let f = findings(object.clone());
        assert_eq!(f.len(), 2);
        assert!(
            f.iter().all(|f| f.outcome == AuditOutcome::Skipped),
            "{f:?}"
        );
        assert!(
            f[0].message.contains("remote Task (git resolver)")
                && f[0].message.contains("into the resolved Task"),
            "{}",
            f[0].message
        );
        object["metadata"]["labels"] = json!({"team": "a"});
        let loaded = policy_set_from_yaml(
            "p.yaml",
            &POLICIES.replace(
                "  mode: Audit\n  postSteps: [{name: bookend-report",
                "  mode: Audit\n  match: {selector: {matchLabels: {team: a}}}\n  postSteps: [{name: bookend-report",
            ),
            Settings::default(),
        );
        assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
        let f = audit(
            Request {
                object: &object,
                namespace: "team-a",
                dry_run: false,
            },
            &loaded.set,
            &Catalog::default(),
        );
        assert_eq!(f[1].policy, "ClusterStepPolicy/org-report");
        assert_eq!(f[1].outcome, AuditOutcome::Skipped, "{f:?}");
        assert!(f[1].message.contains("remote Task"), "{}", f[1].message);
        assert!(findings(json!({"kind": "Pod"})).is_empty());
    }

    #[test]
    fn policy_names_are_matched_whole() {
        let w = "not injected: ClusterStepPolicy/org-sbom, StepPolicy/a/b (remoteTaskRef: Skip)";
        assert!(mentions(w, "ClusterStepPolicy/org-sbom"));
        assert!(mentions(w, "StepPolicy/a/b"));
        assert!(!mentions(w, "ClusterStepPolicy/org"));
        assert!(!mentions(w, "StepPolicy/a"));
    }
}
