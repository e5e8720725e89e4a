//! Each policy's `status.verification` (kubernetes mode): the verdicts over a window, counted
//! from the `bookend.dev/verified` marks on the TaskRuns by
//! [`engine::verdict_counts`](crate::engine::verdict_counts).
//!
//! Each replica marks only the TaskRuns it won, so what one replica saw is not the cluster's
//! count. The marks are: every `--verification-count-interval` each replica lists the
//! labelled TaskRuns metadata-only (the mark is an annotation; 500 a page, each page dropped
//! once counted, so memory does not grow with the TaskRuns), ends the window on the period's
//! boundary and writes every policy's counts with server-side apply under one field manager of
//! its own. Replicas count the same marks up to the same instant, so their applies are equal
//! and the API server stores the first and finds the others unchanged: no leader is needed, and
//! a policy's status changes once a period, not once per replica. Where their counts differ
//! (clocks across a period boundary, different windows during a rollout) a replica writes only
//! a count that supersedes the stored one ([`supersedes`]: later end, longer window, more
//! verdicts), so the status settles on one count instead of flapping between replicas.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::engine::record;
use crate::engine::verdict_counts::{Skipped, Tally, supersedes, window_end};
use crate::metrics::Metrics;
use crate::policy::PolicyId;
use crate::policy::api::{API_VERSION, VerificationStatus};
use crate::source::PolicySource;
use crate::source::kubernetes::{cluster_policy_resource, step_policy_resource, taskrun_resource};

/// The field manager of `status.verification` (the rest of the status is `bookend`'s).
pub const FIELD_MANAGER: &str = "bookend-verification";
/// TaskRuns per page of the list.
const PAGE_SIZE: u32 = 500;

// The window and how often it is counted (`CountOptions`) is a plain value the configuration
// carries, so it lives in the pure core (`engine::verdict_counts`), below everything that
// passes it on.
use crate::engine::verdict_counts::CountOptions;

/// Starts counting once the policies are loaded.
pub fn start(
    client: Client,
    source: Arc<dyn PolicySource>,
    options: CountOptions,
    metrics: Metrics,
) {
    tokio::spawn(run(client, source, options, metrics));
}

async fn run(
    client: Client,
    source: Arc<dyn PolicySource>,
    options: CountOptions,
    metrics: Metrics,
) {
    while !source.is_ready() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // What this process wrote last, per policy: an unchanged count is not sent again.
    let mut written: HashMap<String, VerificationStatus> = HashMap::new();
    loop {
        let end = window_end(Timestamp::now(), options.interval);
        let started = std::time::Instant::now();
        match count(&client, source.as_ref(), end, options.window).await {
            Ok(statuses) => {
                tracing::debug!(
                    taskruns = statuses.taskruns,
                    seconds = started.elapsed().as_secs_f64(),
                    observed_at = %end,
                    "counted the policies' verdicts"
                );
                metrics.set_verification_counted(statuses.taskruns);
                write(
                    &client,
                    source.as_ref(),
                    &metrics,
                    &mut written,
                    statuses.by_policy,
                )
                .await;
            }
            Err(error) => {
                metrics.verification_count_error();
                tracing::warn!(%error, "cannot list the TaskRuns to count the policies' verdicts; counted again next period");
            }
        }
        tokio::time::sleep(until_next(Timestamp::now(), options.interval)).await;
    }
}

/// From `now` to a little after the next period boundary (so that marks written in the
/// boundary's last second are stored when every replica lists).
fn until_next(now: Timestamp, interval: Duration) -> Duration {
    let next = window_end(now, interval).as_second() + interval.as_secs().max(1) as i64;
    let settle = (interval / 10).min(Duration::from_secs(5));
    let to_next =
        Duration::from_secs_f64(((next as f64) - (now.as_millisecond() as f64 / 1000.0)).max(0.0));
    to_next + settle
}

struct Counted {
    taskruns: u64,
    by_policy: std::collections::BTreeMap<String, VerificationStatus>,
}

async fn count(
    client: &Client,
    source: &dyn PolicySource,
    end: Timestamp,
    window: Duration,
) -> Result<Counted, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &taskrun_resource());
    let snapshot = source.current();
    let mut tally = Tally::new(&snapshot.set, snapshot.lookup.as_ref(), end, window);
    let mut params = ListParams::default()
        .labels(&format!("{}={}", record::LABEL, record::LABEL_VALUE))
        .limit(PAGE_SIZE);
    loop {
        let page = api.list_metadata(&params).await?;
        for item in &page.items {
            if let Ok(metadata) = serde_json::to_value(&item.metadata) {
                tally.add(&metadata);
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params.continue_token = Some(token),
            _ => break,
        }
    }
    if let Some(n) = tally.skipped.get(&Skipped::OutOfReach) {
        tracing::warn!(
            entries = n,
            "not counted: bookend.dev/verified marks naming policies that cannot apply in their TaskRun's namespace (bookend did not write them)"
        );
    }
    Ok(Counted {
        taskruns: tally.taskruns,
        by_policy: tally.statuses(),
    })
}

async fn write(
    client: &Client,
    source: &dyn PolicySource,
    metrics: &Metrics,
    written: &mut HashMap<String, VerificationStatus>,
    mut statuses: std::collections::BTreeMap<String, VerificationStatus>,
) {
    let snapshot = source.current();
    for policy in snapshot.set.policies() {
        let key = policy.id.to_string();
        let Some(status) = statuses.remove(&key) else {
            continue;
        };
        if written.get(&key) == Some(&status)
            || !supersedes(&status, source.stored_verification(&policy.id).as_ref())
        {
            continue;
        }
        let (api, kind, name, namespace): (Api<DynamicObject>, _, _, _) = match &policy.id {
            PolicyId::Cluster { name } => (
                Api::all_with(client.clone(), &cluster_policy_resource()),
                "ClusterStepPolicy",
                name,
                None,
            ),
            PolicyId::Namespaced { namespace, name } => (
                Api::namespaced_with(client.clone(), namespace, &step_policy_resource()),
                "StepPolicy",
                name,
                Some(namespace),
            ),
        };
        let mut metadata = json!({"name": name});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        let apply = json!({
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": metadata,
            "status": {"verification": status},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch_status(name, &params, &Patch::Apply(&apply)).await {
            Ok(_) => {
                metrics.status_write(true);
                written.insert(key, status);
            }
            // Deleted meanwhile: the next count no longer has it.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => {
                metrics.status_write(false);
                tracing::warn!(%error, policy = %key, "cannot write the policy's verification counts");
            }
        }
    }
    let loaded: std::collections::HashSet<String> = snapshot
        .set
        .policies()
        .iter()
        .map(|p| p.id.to_string())
        .collect();
    written.retain(|key, _| loaded.contains(key));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_count_is_a_little_after_the_next_boundary() {
        let now: Timestamp = "2026-12-02T08:03:17.5Z".parse().unwrap();
        let wait = until_next(now, Duration::from_secs(300));
        // 08:05:00 + 5 s settle.
        assert_eq!(wait, Duration::from_millis(102_500 + 5_000));
        let wait = until_next(now, Duration::from_secs(2));
        // 08:03:18 + 0.2 s.
        assert_eq!(wait, Duration::from_millis(500 + 200));
    }
}
