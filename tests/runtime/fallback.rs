//! Scenario 21: `postStepsRun: Always` with `postStepsRunFallback: OnSuccess`. Where the
//! cluster's Tekton runs step `when`/`results`, the post-step runs after a failure (Always);
//! where it does not (v0.62–v0.70 without `enable-step-actions`), bookend injects what that
//! Tekton can run — the post-step only on success — and says so in a warning.

use serde_json::{Value, json};

use crate::kube::cluster_policy;
use crate::runs::{Checks, assert_trace, condition, step, taskrun};
use crate::scenarios::Ctx;

pub const FALLBACK: &str = "rt-fallback";

pub fn policies() -> Vec<Value> {
    vec![cluster_policy(
        "rt-fallback",
        json!({"postStepsRun": "Always", "postStepsRunFallback": "OnSuccess",
               "match": {"namespaces": [FALLBACK]},
               "preSteps": [step("bookend-fb-pre", "")],
               "postSteps": [step("bookend-fb-post", "")]}),
    )]
}

pub fn scenario_fallback(ctx: &mut Ctx) -> String {
    let fails = taskrun(
        FALLBACK,
        "fb-fail",
        json!({"steps": [step("build", "exit 3")]}),
    );
    let passes = taskrun(FALLBACK, "fb-pass", json!({"steps": [step("build", "")]}));
    let degraded = ctx.always_degraded;
    let dry_run = ctx
        .env
        .kubectl
        .with_object(&["create", "--dry-run=server"], &fails);
    let runs = ctx.env.run_all(&[fails, passes]);
    let [fail, pass] = &runs[..] else {
        unreachable!()
    };
    let env = &ctx.env;
    let mut checks = Checks::default();
    checks.check(
        "the warning says whether post-steps run only on success",
        || {
            assert!(dry_run.ok(), "admitted: {}", dry_run.stderr);
            let warned = dry_run
                .stderr
                .contains("its post-steps run only when every earlier step succeeded");
            assert_eq!(warned, degraded, "warning: {:?}", dry_run.stderr);
        },
    );
    checks.check("a failing TaskRun", || {
        assert_eq!(condition(&fail.object).0, "False", "{}", fail.describe(env));
        let expected: &[&str] = if degraded {
            &["bookend-fb-pre", "build"]
        } else {
            &["bookend-fb-pre", "build", "bookend-fb-post"]
        };
        assert_trace(env, fail, expected);
    });
    checks.check("a passing TaskRun runs the post-step", || {
        assert_eq!(condition(&pass.object).0, "True", "{}", pass.describe(env));
        assert_trace(env, pass, &["bookend-fb-pre", "build", "bookend-fb-post"]);
    });
    checks.finish();
    if degraded {
        "OnSuccess fallback: warned; post-step ran on success only".to_owned()
    } else {
        "Always: post-step ran after the failure too; no warning".to_owned()
    }
}
