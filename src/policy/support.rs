//! Whether the cluster's Tekton can run a policy ([`Settings::tekton`]): the features its steps
//! and its `postStepsRun` need, checked against [`tekton::cluster::Cluster`]. Pure.
//!
//! [`Settings::tekton`]: super::Settings::tekton

use std::fmt;

use super::api::{AlwaysFallback, PostStepsRun, Step, StepPolicySpec};
use crate::tekton::cluster::{Cluster, Feature, Lack};

/// Whether the cluster runs a policy as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// As written.
    Full,
    /// `postStepsRun: Always` runs as `OnSuccess` (`postStepsRunFallback: OnSuccess`).
    Degraded(Lack),
    /// Not at all: the TaskRuns it matches are refused. `path` is the policy field that needs
    /// what the cluster lacks.
    Unsupported { path: String, lack: Lack },
}

impl Support {
    /// Why the policy cannot run, as a status message and denial: the field, the Tekton
    /// version or flag, the fix.
    pub fn problem(&self) -> Option<String> {
        match self {
            Self::Unsupported { path, lack } => Some(format!("{path}: {lack}")),
            _ => None,
        }
    }
}

impl fmt::Display for Support {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("supported"),
            Self::Degraded(lack) => write!(
                f,
                "postStepsRun: Always runs as OnSuccess (postStepsRunFallback: OnSuccess): {lack}"
            ),
            Self::Unsupported { path, lack } => write!(f, "{path}: {lack}"),
        }
    }
}

/// The features a policy needs, with the field that needs each, in field order.
pub fn needs(spec: &StepPolicySpec) -> Vec<(String, Feature)> {
    let mut needs = Vec::new();
    for (list, steps) in [
        ("preSteps", &spec.pre_steps),
        ("postSteps", &spec.post_steps),
    ] {
        for (i, step) in steps.iter().enumerate() {
            step_needs(&format!("spec.{list}[{i}]"), step, &mut needs);
        }
    }
    needs
}

fn step_needs(path: &str, step: &Step, needs: &mut Vec<(String, Feature)>) {
    let mut need = |field: &str, feature| needs.push((format!("{path}.{field}"), feature));
    if let Some(r) = &step.ref_ {
        need("ref", Feature::StepActionRef);
        if let Some(resolver) = &r.resolver {
            need("ref.resolver", Feature::StepActionResolver);
            if resolver == "cluster" {
                need("ref.resolver", Feature::StepActionClusterResolver);
            }
        }
    }
    if step.results.as_ref().is_some_and(|r| !r.is_empty()) {
        need("results", Feature::StepResults);
    }
    if let Some(when) = step.when.as_ref().filter(|w| !w.is_empty()) {
        need("when", Feature::StepWhen);
        if when.iter().any(|w| w.cel.is_some()) {
            need("when", Feature::WhenCel);
        }
    }
    if step.workspaces.as_ref().is_some_and(|w| !w.is_empty()) {
        need("workspaces", Feature::StepWorkspaces);
    }
    if step.stdout_config.is_some() {
        need("stdoutConfig", Feature::StepOutputConfig);
    }
    if step.stderr_config.is_some() {
        need("stderrConfig", Feature::StepOutputConfig);
    }
}

/// Whether `cluster` runs the policy: its own steps' needs first (they have no fallback), then
/// the gates of `postStepsRun: Always` (step `when` and `results`).
pub fn support(spec: &StepPolicySpec, cluster: &Cluster) -> Support {
    if let Some((path, lack)) = needs(spec)
        .into_iter()
        .find_map(|(path, feature)| Some((path, cluster.lacks(feature)?)))
    {
        return Support::Unsupported { path, lack };
    }
    if spec.post_steps_run == PostStepsRun::Always && !spec.post_steps.is_empty() {
        let lack = cluster
            .lacks(Feature::StepWhen)
            .or_else(|| cluster.lacks(Feature::StepResults));
        if let Some(lack) = lack {
            return match spec.post_steps_run_fallback {
                AlwaysFallback::Deny => Support::Unsupported {
                    path: "spec.postStepsRun".to_owned(),
                    lack,
                },
                AlwaysFallback::OnSuccess => Support::Degraded(lack),
            };
        }
    }
    Support::Full
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::{StepRef, WhenExpression};
    use crate::tekton::cluster::FeatureFlags;

    fn step(name: &str) -> Step {
        Step {
            name: name.into(),
            image: Some("alpine".into()),
            ..Step::default()
        }
    }

    fn lts(step_actions: bool) -> Cluster {
        let flags = FeatureFlags {
            enable_step_actions: Some(step_actions),
            ..FeatureFlags::default()
        };
        Cluster {
            version: "v0.62.3".parse().unwrap(),
            flags,
        }
    }

    #[test]
    fn always_needs_step_when_and_the_fallback_decides() {
        let mut spec = StepPolicySpec {
            post_steps: vec![step("bookend-report")],
            post_steps_run: PostStepsRun::Always,
            ..StepPolicySpec::default()
        };
        assert_eq!(support(&spec, &Cluster::default()), Support::Full);
        assert_eq!(support(&spec, &lts(true)), Support::Full);
        let denied = support(&spec, &lts(false));
        assert_eq!(
            denied.problem().unwrap(),
            "spec.postStepsRun: Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\"; set enable-step-actions: \"true\" in Tekton's feature-flags ConfigMap, or upgrade Tekton to v1.0.0 or later"
        );
        spec.post_steps_run_fallback = AlwaysFallback::OnSuccess;
        assert!(matches!(support(&spec, &lts(false)), Support::Degraded(_)));
        // Without post-steps there is nothing to gate.
        spec.post_steps.clear();
        spec.post_steps_run_fallback = AlwaysFallback::Deny;
        assert_eq!(support(&spec, &lts(false)), Support::Full);
    }

    #[test]
    fn a_steps_own_features_have_no_fallback_and_are_named_by_field() {
        let mut with_ref = step("bookend-clone");
        with_ref.image = None;
        with_ref.ref_ = Some(StepRef {
            resolver: Some("cluster".into()),
            ..StepRef::default()
        });
        let mut gated = step("bookend-report");
        gated.when = Some(vec![WhenExpression {
            input: Some("a".into()),
            operator: Some("in".into()),
            values: Some(vec!["a".into()]),
            cel: None,
        }]);
        let spec = StepPolicySpec {
            pre_steps: vec![step("bookend-a"), with_ref],
            post_steps: vec![gated],
            post_steps_run_fallback: AlwaysFallback::OnSuccess,
            ..StepPolicySpec::default()
        };
        let paths: Vec<String> = needs(&spec).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            paths,
            [
                "spec.preSteps[1].ref",
                "spec.preSteps[1].ref.resolver",
                "spec.preSteps[1].ref.resolver",
                "spec.postSteps[0].when"
            ]
        );
        match support(&spec, &lts(false)) {
            Support::Unsupported { path, lack } => {
                assert_eq!(path, "spec.preSteps[1].ref");
                assert_eq!(lack.feature(), Feature::StepActionRef);
            }
            other => panic!("{other:?}"),
        }
        // With the flag on, v0.62's cluster resolver still refuses StepActions; v0.63 has it.
        match support(&spec, &lts(true)) {
            Support::Unsupported { path, lack } => {
                assert_eq!(path, "spec.preSteps[1].ref.resolver");
                assert_eq!(
                    format!("{path}: {lack}"),
                    "spec.preSteps[1].ref.resolver: Tekton v0.62.3 has no StepActions from the cluster resolver (kind: stepaction) (it first shipped in v0.63.0); upgrade Tekton"
                );
            }
            other => panic!("{other:?}"),
        }
        let v063 = Cluster {
            version: "v0.63.0".parse().unwrap(),
            ..lts(true)
        };
        assert_eq!(support(&spec, &v063), Support::Full);
        assert_eq!(support(&spec, &Cluster::default()), Support::Full);
        // Another resolver is not the cluster resolver's limit.
        let mut other = spec.clone();
        other.pre_steps[1].ref_.as_mut().unwrap().resolver = Some("git".into());
        assert_eq!(support(&other, &lts(true)), Support::Full);
    }
}
