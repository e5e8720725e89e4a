//! Failure and removal: the fail-closed backstop without the mutating webhook, `helm
//! upgrade` restoring it, bookend down, and `helm uninstall` deleting the webhooks first.

use std::time::Duration;

use serde_json::Value;

use crate::kube::{Cluster, poll};

use super::helm::{RELEASE, RELEASE_NAMESPACE, helm, helm_upgrade};
use super::objects::{first_line, step_names, taskrun};
use super::{Ctx, TEAM_A};

pub(super) fn scenario_fail_closed(ctx: &mut Ctx) -> String {
    ctx.cluster
        .kubectl(&["delete", "mutatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the MutatingWebhookConfiguration");
    let bare = taskrun(TEAM_A, "bare-", "work");
    let out = poll(
        "the apiserver to drop the mutating webhook",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            if out.ok() {
                Err(format!("admitted with steps {:?}", step_names(&out.json())))
            } else if out.stderr.contains("taskruns.validate.bookend.dev") {
                Ok(out)
            } else {
                Err(out.stderr)
            }
        },
    );
    assert!(
        out.stderr.contains("bookend: the TaskRun lacks the steps"),
        "bookend's backstop message: {}",
        out.stderr
    );
    let real = ctx.cluster.create(&bare);
    assert!(!real.ok(), "a real create is refused too");
    // A namespace no Enforce policy covers is not blocked.
    let other = ctx
        .cluster
        .dry_run(&taskrun("default", "free-", "work"))
        .expect_ok("a TaskRun in an uncovered namespace");
    let object = other.json();
    assert_eq!(step_names(&object), vec!["work"]);
    ctx.keep("uncovered namespace, no mutation", &object);
    first_line(&out.stderr)
}

pub(super) fn scenario_helm_upgrade_restores(ctx: &mut Ctx) -> String {
    // The fail-closed scenario deleted the MutatingWebhookConfiguration (a break glass).
    assert!(
        !ctx.cluster
            .kubectl(&["get", "mutatingwebhookconfiguration", "bookend.dev"])
            .ok(),
        "the previous scenario deleted it"
    );
    helm_upgrade(&ctx.cluster, &[]).expect_ok("helm upgrade --reuse-values");
    let probe = taskrun(TEAM_A, "restored-", "work");
    let object = ctx.poll_injected(
        "the re-created mutating webhook",
        &probe,
        "bookend-credentials",
        "dry-run after helm upgrade restored the webhook",
    );
    format!("re-created; steps {:?}", step_names(&object))
}

/// The resourceVersion at which `name` was deleted: the DELETED event of a watch on the
/// collection `path` replayed from `since` (the API server's watch cache keeps recent events).
fn deleted_at(cluster: &Cluster, path: &str, name: &str, since: u64) -> u64 {
    let url = format!("{path}?watch=1&resourceVersion={since}&timeoutSeconds=2");
    let out = cluster.kubectl(&["get", "--raw", &url]).expect_ok("watch");
    out.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "DELETED" && e["object"]["metadata"]["name"] == name)
        .and_then(|e| {
            e["object"]["metadata"]["resourceVersion"]
                .as_str()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no DELETED event for {name} in {path}: {}", out.stdout))
}

/// A sample of the API server's /metrics with these labels (any order), and its value.
fn apiserver_sample(metrics: &str, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(f64::max)
}

pub(super) fn scenario_uninstall(ctx: &mut Ctx) -> String {
    // kubectl's own `get -o json` list has no resourceVersion; the API's list has.
    let since: u64 = ctx
        .cluster
        .kubectl(&["get", "--raw", "/api/v1/namespaces"])
        .expect_ok("list namespaces")
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .expect("a list's resourceVersion")
        .parse()
        .expect("a number");
    // bookend goes away first, as it would if its pods were gone: the mutation fails open and
    // the backstop fails closed, so TaskRun creation in team-a is refused.
    ctx.bookend.stop();
    let bare = taskrun(TEAM_A, "down-", "work");
    let out = poll(
        "the apiserver to find bookend gone",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            if !out.ok()
                && out.stderr.contains("failed calling webhook")
                && out.stderr.contains("taskruns.validate.bookend.dev")
            {
                Ok(out)
            } else {
                Err(format!("{}: {}", out.status, out.stderr))
            }
        },
    );
    let refused = first_line(&out.stderr);
    // The API server counted both, under the names and labels the chart's alerts read
    // (BookendMutationFailingOpen, BookendWebhookCallsFailing, BookendWebhookLatencyHigh).
    let metrics = ctx
        .cluster
        .kubectl(&["get", "--raw", "/metrics"])
        .expect_ok("the apiserver's /metrics")
        .stdout;
    for (family, labels) in [
        (
            "apiserver_admission_webhook_fail_open_count",
            &[("name", "taskruns.mutate.bookend.dev"), ("type", "admit")][..],
        ),
        (
            "apiserver_admission_webhook_rejection_count",
            &[
                ("name", "taskruns.validate.bookend.dev"),
                ("error_type", "calling_webhook_error"),
            ][..],
        ),
        (
            "apiserver_admission_webhook_rejection_count",
            &[
                ("name", "taskruns.mutate.bookend.dev"),
                ("error_type", "no_error"),
            ][..],
        ),
        (
            "apiserver_admission_webhook_admission_duration_seconds_bucket",
            &[("name", "taskruns.validate.bookend.dev"), ("le", "+Inf")][..],
        ),
    ] {
        let value = apiserver_sample(&metrics, family, labels);
        assert!(
            value.is_some_and(|v| v >= 1.0),
            "the apiserver exports {family} with {labels:?} >= 1: {value:?}"
        );
    }

    let out = helm(
        &ctx.cluster,
        &["uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE],
    )
    .expect_ok("helm uninstall");
    let kept = out
        .stdout
        .lines()
        .filter(|l| l.contains("CustomResourceDefinition"))
        .count();
    let left = ctx
        .cluster
        .kubectl(&[
            "get",
            "mutatingwebhookconfigurations,validatingwebhookconfigurations",
            "-o",
            "name",
        ])
        .expect_ok("list webhook configurations")
        .stdout;
    assert!(
        !left.contains("bookend.dev"),
        "webhook configurations left: {left}"
    );
    // bookend is still down, and TaskRuns are created again, unmutated.
    let out = poll(
        "TaskRun creation without bookend",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.dry_run(&bare);
            out.succeeded().map(|()| out)
        },
    );
    assert_eq!(step_names(&out.json()), vec!["work"]);
    // The CRDs stay (helm.sh/resource-policy: keep), and so do the policies.
    let policies = ctx
        .cluster
        .get_json(&["clustersteppolicies"], "policies after uninstall");
    let count = policies["items"].as_array().map_or(0, Vec::len);
    assert!(count > 0, "the policies survive the uninstall");

    // The order: both webhook configurations were deleted before the Service and Deployment
    // that back them (Helm's uninstall order), so no fail-closed webhook outlived its pods.
    let admission = "/apis/admissionregistration.k8s.io/v1";
    let validating = deleted_at(
        &ctx.cluster,
        &format!("{admission}/validatingwebhookconfigurations"),
        "bookend.dev",
        since,
    );
    let mutating = deleted_at(
        &ctx.cluster,
        &format!("{admission}/mutatingwebhookconfigurations"),
        "bookend.dev",
        since,
    );
    let service = deleted_at(
        &ctx.cluster,
        &format!("/api/v1/namespaces/{RELEASE_NAMESPACE}/services"),
        RELEASE,
        since,
    );
    let deployment = deleted_at(
        &ctx.cluster,
        &format!("/apis/apps/v1/namespaces/{RELEASE_NAMESPACE}/deployments"),
        RELEASE,
        since,
    );
    assert!(
        validating.max(mutating) < service.min(deployment),
        "deleted at resourceVersion: validating {validating}, mutating {mutating}, \
         service {service}, deployment {deployment}"
    );
    format!(
        "with bookend down: {refused:?}; uninstall deleted validating@{validating}, \
         mutating@{mutating}, then service@{service}, deployment@{deployment}; TaskRuns \
         admitted again; CRDs kept ({kept} listed by helm), {count} policies kept"
    )
}
