//! How large one policy may be. Every TaskRun a policy matches carries its steps, and every
//! byte is stored with the TaskRun and sent through the API server and every webhook, so a
//! policy stays small; a spec over [`MAX_SPEC_BYTES`] is not checked further.

use std::io;

use super::path::{Errors, FieldPath};
use crate::policy::api::StepPolicySpec;

/// Most steps (`preSteps` and `postSteps` together) in one policy.
pub const MAX_STEPS: usize = 64;
/// Most `volumes` in one policy.
pub const MAX_VOLUMES: usize = 16;
/// Most bytes of one policy's `spec`, serialised as JSON: 256 KiB.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// Most StepPolicies in one namespace, and most bytes of their specs together: what one team
/// can make bookend hold. A namespace over them never affects the org's budget or another's.
pub const MAX_STEP_POLICIES_PER_NAMESPACE: usize = 16;
pub const MAX_NAMESPACE_SPEC_BYTES: usize = 512 * 1024;
/// Most bytes of all ClusterStepPolicies' specs together (the platform team's budget; ten
/// thousand ordinary policies take under half of it). The budgets keep the largest set bookend
/// can be made to hold within its chart's memory limit, reloads included (tests/security,
/// class 6).
pub const MAX_CLUSTER_SPEC_BYTES: usize = 4 * 1024 * 1024;

/// The size limit; `false` when the spec is over it (and nothing else should be checked).
pub(super) fn size(spec: &StepPolicySpec, at: &FieldPath, errs: &mut Errors) -> bool {
    let bytes = json_len(spec);
    if bytes <= MAX_SPEC_BYTES {
        return true;
    }
    errs.add(
        at,
        format!(
            "the spec is {bytes} bytes as JSON; a policy may have at most {MAX_SPEC_BYTES} (256 KiB): split it into several policies"
        ),
    );
    false
}

/// The step and volume limits, reported at the first step and the first volume over them.
pub(super) fn counts(spec: &StepPolicySpec, at: &FieldPath, errs: &mut Errors) {
    let steps = spec.pre_steps.len() + spec.post_steps.len();
    if steps > MAX_STEPS {
        let over = if spec.pre_steps.len() > MAX_STEPS {
            at.field_index("preSteps", MAX_STEPS)
        } else {
            at.field_index("postSteps", MAX_STEPS - spec.pre_steps.len())
        };
        errs.add(
            &over,
            format!(
                "the policy has {steps} steps; a policy may have at most {MAX_STEPS} (preSteps and postSteps together): split it into several policies"
            ),
        );
    }
    if spec.volumes.len() > MAX_VOLUMES {
        errs.add(
            &at.field_index("volumes", MAX_VOLUMES),
            format!(
                "the policy has {} volumes; a policy may have at most {MAX_VOLUMES}",
                spec.volumes.len()
            ),
        );
    }
}

/// Length of `spec` as compact JSON, without building the text.
fn json_len(spec: &StepPolicySpec) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, spec).expect("policy specs serialise to JSON");
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::api::Step;
    use k8s_openapi::api::core::v1::Volume;

    fn steps(n: usize) -> Vec<Step> {
        (0..n)
            .map(|i| Step {
                name: format!("bookend-{i}"),
                image: Some("alpine".into()),
                ..Step::default()
            })
            .collect()
    }

    fn volumes(n: usize) -> Vec<Volume> {
        (0..n)
            .map(|i| Volume {
                name: format!("bookend-{i}"),
                empty_dir: Some(Default::default()),
                ..Volume::default()
            })
            .collect()
    }

    fn check(spec: &StepPolicySpec) -> (bool, Vec<String>) {
        let mut errs = Errors::new();
        let at = FieldPath::new("spec");
        let small = size(spec, &at, &mut errs);
        counts(spec, &at, &mut errs);
        let m = errs
            .into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        (small, m)
    }

    #[test]
    fn the_limits_themselves_pass() {
        let spec = StepPolicySpec {
            pre_steps: steps(MAX_STEPS / 2),
            post_steps: steps(MAX_STEPS / 2),
            volumes: volumes(MAX_VOLUMES),
            ..StepPolicySpec::default()
        };
        assert_eq!(check(&spec), (true, vec![]));
    }

    #[test]
    fn one_step_or_volume_more_is_refused_where_it_starts() {
        let spec = StepPolicySpec {
            pre_steps: steps(60),
            post_steps: steps(5),
            volumes: volumes(MAX_VOLUMES + 1),
            ..StepPolicySpec::default()
        };
        assert_eq!(
            check(&spec).1,
            [
                "spec.postSteps[4]: the policy has 65 steps; a policy may have at most 64 (preSteps and postSteps together): split it into several policies",
                "spec.volumes[16]: the policy has 17 volumes; a policy may have at most 16",
            ]
        );
        let spec = StepPolicySpec {
            pre_steps: steps(70),
            ..StepPolicySpec::default()
        };
        assert!(check(&spec).1[0].starts_with("spec.preSteps[64]: the policy has 70 steps"));
    }

    #[test]
    fn a_spec_over_256_kib_is_refused() {
        let mut spec = StepPolicySpec {
            pre_steps: steps(1),
            ..StepPolicySpec::default()
        };
        let base = serde_json::to_vec(&spec).unwrap().len();
        assert_eq!(json_len(&spec), base);
        // Exactly at the limit passes; one byte more does not.
        spec.pre_steps[0].script =
            Some("x".repeat(MAX_SPEC_BYTES - base - r#","script":"""#.len()));
        assert_eq!(json_len(&spec), MAX_SPEC_BYTES);
        assert_eq!(check(&spec), (true, vec![]));
        spec.pre_steps[0].script.as_mut().unwrap().push('x');
        let (small, m) = check(&spec);
        assert!(!small);
        assert_eq!(
            m,
            [
                "spec: the spec is 262145 bytes as JSON; a policy may have at most 262144 (256 KiB): split it into several policies"
            ]
        );
    }
}
