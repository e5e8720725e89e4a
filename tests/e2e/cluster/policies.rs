//! Policy objects: invalid ones refused, new ones live and deleted ones gone without a
//! restart, StepPolicies in their namespace and inside the org's steps, `origin: Pipeline`.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::kube::{cluster_policy, poll};

use super::helm::helm_upgrade;
use super::objects::{busybox_step, first_line, has_step, includes, step_names, taskrun};
use super::{Ctx, TEAM_A, TEAM_B};

pub(super) fn scenario_policy_lifecycle(ctx: &mut Ctx) -> String {
    // Invalid: a step name without the reserved prefix.
    let invalid = cluster_policy(
        "e2e-invalid",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("no-prefix")]}),
    );
    let out = ctx.cluster.apply(&invalid);
    assert!(!out.ok(), "an invalid policy is refused: {}", out.stdout);
    assert!(
        out.stderr.contains("policies.validate.bookend.dev")
            && out.stderr.contains("spec.preSteps[0].name"),
        "refused by the validating webhook with the field path: {}",
        out.stderr
    );
    let refusal = first_line(&out.stderr);
    let get = ctx
        .cluster
        .kubectl(&["get", "clustersteppolicy", "e2e-invalid"]);
    assert!(!get.ok(), "the invalid policy was not stored");

    // Valid: takes effect for the next TaskRun without a restart.
    let probe = taskrun(TEAM_B, "probe-", "work");
    let before = ctx
        .cluster
        .dry_run(&probe)
        .expect_ok("probe dry-run")
        .json();
    assert!(!has_step(&before, "bookend-e2e-extra"));
    let policy = cluster_policy(
        "e2e-extra",
        json!({"priority": 5, "match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("bookend-e2e-extra")]}),
    );
    ctx.cluster.apply(&policy).expect_ok("apply a valid policy");
    let applied = Instant::now();
    // Priority 5, the lowest (outermost): its pre-step comes first.
    let out = ctx
        .cluster
        .poll_steps("the new policy to take effect", &probe, |steps| {
            steps.first().is_some_and(|s| s == "bookend-e2e-extra")
        });
    let took_effect = applied.elapsed();
    ctx.keep("dry-run with e2e-extra", &out.json());

    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-extra"])
        .expect_ok("delete the policy");
    let deleted = Instant::now();
    ctx.cluster
        .poll_steps("the deleted policy to stop injecting", &probe, |steps| {
            !includes(steps, "bookend-e2e-extra")
        });
    format!(
        "invalid refused ({refusal}); new policy live after {:.1}s, deletion after {:.1}s",
        took_effect.as_secs_f64(),
        deleted.elapsed().as_secs_f64()
    )
}

pub(super) fn scenario_step_policy(ctx: &mut Ctx) -> String {
    // A namespaced StepPolicy applies only to TaskRuns in its own namespace, whatever its match.
    let policy = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "e2e-team-b", "namespace": TEAM_B},
        "spec": {"priority": 60, "match": {"namespaces": ["team-*"]},
                 "postSteps": [busybox_step("bookend-e2e-team-b")]},
    });
    ctx.cluster.apply(&policy).expect_ok("apply a StepPolicy");
    let in_b = taskrun(TEAM_B, "sp-", "work");
    let object = ctx.poll_injected(
        "the StepPolicy to take effect",
        &in_b,
        "bookend-e2e-team-b",
        "dry-run with a StepPolicy",
    );
    // Its status too (a namespaced status write).
    poll("the StepPolicy's status", Duration::from_secs(30), || {
        let p = ctx.cluster.get_json(
            &["steppolicy", "-n", TEAM_B, "e2e-team-b"],
            "the StepPolicy",
        );
        let c = &p["status"]["conditions"][0];
        if c["reason"] == "Loaded" && p["status"]["postSteps"] == json!(["bookend-e2e-team-b"]) {
            Ok(())
        } else {
            Err(p["status"].to_string())
        }
    });
    let in_a = ctx
        .cluster
        .dry_run(&taskrun(TEAM_A, "sp-", "work"))
        .expect_ok("dry-run in team-a")
        .json();
    assert!(
        !has_step(&in_a, "bookend-e2e-team-b"),
        "a StepPolicy in team-b does not apply in team-a: {:?}",
        step_names(&in_a)
    );
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_B, "e2e-team-b"])
        .expect_ok("delete the StepPolicy");
    ctx.cluster
        .poll_steps("the deleted StepPolicy to stop injecting", &in_b, |steps| {
            !includes(steps, "bookend-e2e-team-b")
        });
    format!(
        "team-b: steps {:?}; team-a: not applied; deletion stops it",
        step_names(&object)
    )
}

/// Issue 14: a team that may write StepPolicies in its namespace can neither switch off an org
/// policy by taking one of its names (refused by the webhook; left out by bookend when the
/// webhook was absent) nor run a step outside the org's steps.
pub(super) fn scenario_team_cannot_evict_or_wrap_org(ctx: &mut Ctx) -> String {
    // org-credentials (examples/policies) injects volume bookend-registry in team-*.
    let clash = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "aaa-team", "namespace": TEAM_A},
        "spec": {"priority": 0, "preSteps": [busybox_step("bookend-e2e-team")],
                 "volumes": [{"name": "bookend-registry", "emptyDir": {}}]},
    });
    let refused = ctx.cluster.apply(&clash);
    assert!(!refused.ok(), "the webhook refuses the clash");
    assert!(
        refused.stderr.contains("policies.validate.bookend.dev")
            && refused.stderr.contains(
                "volume name \"bookend-registry\" is already used by ClusterStepPolicy/org-credentials"
            ),
        "{}",
        refused.stderr
    );

    // The same clash created while the validating webhooks are absent (deleted, as in a break
    // glass) reaches bookend's caches.
    ctx.cluster
        .kubectl(&["delete", "validatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the ValidatingWebhookConfiguration");
    poll(
        "the apiserver to drop the policy webhook",
        Duration::from_secs(30),
        || ctx.cluster.apply(&clash).succeeded(),
    );
    let log = ctx.bookend.log.clone();
    poll(
        "bookend to log the conflict",
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .any(|l| {
                    l.contains("StepPolicy/team-a/aaa-team")
                        && l.contains("already used by ClusterStepPolicy/org-credentials")
                })
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    let run = taskrun(TEAM_A, "evict-", "work");
    let object = ctx
        .cluster
        .dry_run(&run)
        .expect_ok("dry-run in team-a")
        .json();
    let steps = step_names(&object);
    assert!(
        includes(&steps, "bookend-credentials") && !includes(&steps, "bookend-e2e-team"),
        "the org policy stays, the team's is inactive: {steps:?}"
    );
    let events = poll("the PolicyConflict Event", Duration::from_secs(30), || {
        let out = ctx.cluster.kubectl(&[
            "get",
            "events",
            "-n",
            TEAM_A,
            "--field-selector",
            "involvedObject.name=aaa-team",
            "-o",
            "json",
        ]);
        let text = out.stdout.clone();
        (text.contains("PolicyConflict") && text.contains("ClusterStepPolicy/org-credentials"))
            .then_some(text)
            .ok_or(out.stderr)
    });
    assert!(!events.is_empty());
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade restores the validating webhooks");
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_A, "aaa-team"])
        .expect_ok("delete the clashing StepPolicy");

    // A team policy of the lowest priority still runs inside the org's steps.
    let wrap = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "team-wrap", "namespace": TEAM_A},
        "spec": {"priority": -1000,
                 "preSteps": [busybox_step("bookend-e2e-team-pre")],
                 "postSteps": [busybox_step("bookend-e2e-team-post")]},
    });
    ctx.cluster
        .apply(&wrap)
        .expect_ok("apply a low-priority StepPolicy");
    let object = ctx.poll_injected(
        "the StepPolicy to take effect",
        &run,
        "bookend-e2e-team-pre",
        "org steps outside team steps",
    );
    let order: Vec<String> = step_names(&object)
        .into_iter()
        .filter(|s| !s.starts_with("bookend-gate-") && s != "bookend-verdict")
        .collect();
    assert_eq!(
        order,
        [
            "bookend-credentials",
            "bookend-e2e-team-pre",
            "work",
            "bookend-e2e-team-post",
            "bookend-sbom",
            "bookend-sbom-upload"
        ],
        "org pre-steps first, org post-steps last"
    );
    ctx.cluster
        .kubectl(&["delete", "steppolicy", "-n", TEAM_A, "team-wrap"])
        .expect_ok("delete the StepPolicy");
    format!(
        "clash refused by the webhook; created without it: org stays, team inactive (Event PolicyConflict); order {order:?}"
    )
}

pub(super) fn scenario_origin_pipeline(ctx: &mut Ctx) -> String {
    let policy = cluster_policy(
        "e2e-pipeline-only",
        json!({"priority": 50, "match": {"namespaces": [TEAM_B], "origin": "Pipeline"},
               "preSteps": [busybox_step("bookend-e2e-pipeline")]}),
    );
    ctx.cluster
        .apply(&policy)
        .expect_ok("apply the origin: Pipeline policy");
    let mut owned = taskrun(TEAM_B, "pr-task-", "work");
    owned["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "name": "fake-pipelinerun",
        "uid": "6f1e3c2a-0000-4000-8000-0000000000e2",
        "controller": true,
        "blockOwnerDeletion": true,
    }]);
    ctx.cluster.poll_steps(
        "the origin: Pipeline policy to take effect",
        &owned,
        |steps| includes(steps, "bookend-e2e-pipeline"),
    );
    let out = ctx
        .cluster
        .create(&owned)
        .expect_ok("create the PipelineRun-owned TaskRun");
    let object = out.json();
    assert!(
        has_step(&object, "bookend-e2e-pipeline"),
        "{:?}",
        step_names(&object)
    );
    let audit = out
        .warnings()
        .into_iter()
        .find(|w| {
            w.contains("org-provenance-audit") && w.contains("would inject bookend-provenance")
        })
        .map(str::to_owned);
    assert!(
        audit.is_some(),
        "the Audit policy (origin: Pipeline) warns: {}",
        out.stderr
    );
    assert!(
        !has_step(&object, "bookend-provenance"),
        "Audit injects nothing"
    );
    ctx.keep("PipelineRun-owned TaskRun", &object);

    let standalone = ctx
        .cluster
        .dry_run(&taskrun(TEAM_B, "alone-", "work"))
        .expect_ok("standalone dry-run");
    let alone = standalone.json();
    assert!(
        !has_step(&alone, "bookend-e2e-pipeline"),
        "standalone: {:?}",
        step_names(&alone)
    );
    assert!(
        !standalone.stderr.contains("org-provenance-audit"),
        "no audit warning for a standalone TaskRun: {}",
        standalone.stderr
    );
    ctx.keep("standalone dry-run", &alone);
    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-pipeline-only"])
        .expect_ok("delete the policy");
    format!(
        "owned: steps {:?}, warning {:?}; standalone: not matched",
        step_names(&object),
        audit.unwrap_or_default()
    )
}
