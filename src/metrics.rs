//! Prometheus metrics of the webhook (`GET /metrics` on the admin port).
//!
//! One [`Metrics`] value owns the registry; it is cheap to clone (every metric is an `Arc`).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::admission::Summary;

/// Latency buckets in seconds: decisions take microseconds, so the low end is fine-grained.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0,
];

/// Labels of `bookend_admission_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `mutate` or `validate`.
    pub endpoint: &'static str,
    /// CREATE, UPDATE, DELETE, CONNECT; `unknown` when the request was unreadable, `other`
    /// for anything else.
    pub operation: String,
    /// allowed, mutated, denied or error.
    pub outcome: &'static str,
    /// `true` for `--dry-run=server` requests.
    pub dry_run: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    policy: String,
}

/// The cluster's Tekton: its version (one value at a time: the family is cleared on change),
/// whether bookend supports it, and the flags bookend depends on.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TektonLabels {
    version: String,
    supported: &'static str,
    step_actions: &'static str,
    api_fields: &'static str,
}

/// `success` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Why a finished TaskRun was verified without its mark: `deleted` (gone before bookend
/// marked it) or `unmarkable` (the API server refuses the mark for good, e.g. annotations full).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnmarkedLabels {
    reason: &'static str,
}

/// Events posted: what they are about (`taskrun`, `policy`) and `success` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    regarding: &'static str,
    result: &'static str,
}

/// An org step's run: its policy, its name and how it ended (policy × step × outcome: bounded
/// by the loaded policies, never per TaskRun).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepRunLabels {
    policy: String,
    step: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    policy: String,
    step: String,
}

/// A verdict on a finished TaskRun for one policy: `pass`, `skip` or `fail`, and the cause of a fail
/// (`none`, `hermetic_jail_failed`, `did_not_run`, `not_injected`, `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    policy: String,
    verdict: &'static str,
    cause: &'static str,
}

/// Wall-clock buckets of an org step, in seconds: Tekton's entrypoint polls once a second, so
/// one second is the floor.
pub const STEP_DURATION_BUCKETS: [f64; 11] = [
    1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

fn step_duration_histogram() -> Histogram {
    Histogram::new(STEP_DURATION_BUCKETS)
}

fn result(ok: bool) -> &'static str {
    if ok { "success" } else { "error" }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Every metric the server exports.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    duration: HistogramFamily<EndpointLabels>,
    in_flight: Gauge,
    connections: Gauge,
    injected: Family<PolicyLabels, Counter>,
    policies_loaded: Gauge,
    policy_reloads: Family<ResultLabels, Counter>,
    certificate_reloads: Family<ResultLabels, Counter>,
    certificate_expiry: Gauge,
    panics: Counter,
    invalid_policies: Gauge,
    watch_errors: Counter,
    tls_handshake_errors: Counter,
    events: Family<EventLabels, Counter>,
    status_writes: Family<ResultLabels, Counter>,
    report_writes: Family<ResultLabels, Counter>,
    followups_dropped: Counter,
    tekton_info: Family<TektonLabels, Gauge>,
    step_runs: Family<StepRunLabels, Counter>,
    step_duration: HistogramFamily<StepLabels>,
    verdicts: Family<VerdictLabels, Counter>,
    taskruns_watched: Gauge,
    verification_counted: Gauge,
    verification_count_errors: Counter,
    verification_errors: Counter,
    verifications_unmarked: Family<UnmarkedLabels, Counter>,
    verifications_ignored: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered (and zero-valued).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "bookend_admission_requests",
            "Admission reviews answered, by endpoint, operation, outcome and dry-run",
            requests.clone(),
        );
        let duration: HistogramFamily<EndpointLabels> =
            Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register(
            "bookend_admission_duration_seconds",
            "Time from request headers to answer, by endpoint",
            duration.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "bookend_admission_in_flight",
            "Admission requests being handled now",
            in_flight.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "bookend_webhook_connections",
            "Webhook connections open now (TLS handshake included)",
            connections.clone(),
        );
        let injected = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "bookend_injected_steps",
            "Steps injected into admitted TaskRuns, by policy (dry-run requests included)",
            injected.clone(),
        );
        let policies_loaded = Gauge::default();
        registry.register(
            "bookend_policies_loaded",
            "Policies in the active set",
            policies_loaded.clone(),
        );
        let policy_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "bookend_policy_reloads",
            "Policy reloads after a file change, by result (error: the last good set is kept)",
            policy_reloads.clone(),
        );
        let certificate_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "bookend_certificate_reloads",
            "Serving certificate reloads after a file change, by result (error: the old pair is kept)",
            certificate_reloads.clone(),
        );
        let certificate_expiry = Gauge::default();
        registry.register(
            "bookend_certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in use, as a Unix timestamp",
            certificate_expiry.clone(),
        );
        let panics = Counter::default();
        registry.register(
            "bookend_handler_panics",
            "Reviews that panicked (a bug; the request got a 400 and the server kept serving)",
            panics.clone(),
        );
        let tls_handshake_errors = Counter::default();
        registry.register(
            "bookend_tls_handshake_errors",
            "TLS handshakes that failed or timed out",
            tls_handshake_errors.clone(),
        );
        let invalid_policies = Gauge::default();
        registry.register(
            "bookend_invalid_policies",
            "Policy objects left out of the active set because they are invalid (kubernetes mode; each also gets an InvalidPolicy Event)",
            invalid_policies.clone(),
        );
        let watch_errors = Counter::default();
        registry.register(
            "bookend_watch_errors",
            "Kubernetes watch errors (each is retried with backoff; requests are answered from the last state)",
            watch_errors.clone(),
        );
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "bookend_events",
            "Kubernetes Events posted (kubernetes mode), by what they are about (taskrun, policy) and result",
            events.clone(),
        );
        let status_writes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "bookend_status_writes",
            "Writes of a policy's status (kubernetes mode; only when it changed), by result",
            status_writes.clone(),
        );
        let report_writes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "bookend_policy_report_writes",
            "Writes of a namespace's PolicyReport with Audit results, by result",
            report_writes.clone(),
        );
        let followups_dropped = Counter::default();
        registry.register(
            "bookend_followups_dropped",
            "Admitted TaskRuns whose Events and PolicyReport results were dropped because the queue to their writer was full (the admission answer never waits for it)",
            followups_dropped.clone(),
        );
        let tekton_info = Family::<TektonLabels, Gauge>::default();
        registry.register(
            "bookend_tekton_info",
            "The Tekton the policies are compiled for (1): its version (from the pipelines-info ConfigMap in kubernetes mode, else --tekton-version), whether bookend supports it, and the feature flags bookend depends on",
            tekton_info.clone(),
        );
        let step_runs = Family::<StepRunLabels, Counter>::default();
        registry.register(
            "bookend_step_runs",
            "Org steps of finished TaskRuns, by policy, step and outcome (completed, failed, continued, skipped, timed_out, cancelled, never_started)",
            step_runs.clone(),
        );
        let step_duration: HistogramFamily<StepLabels> =
            Family::new_with_constructor(step_duration_histogram as fn() -> Histogram);
        registry.register(
            "bookend_step_duration_seconds",
            "Wall-clock time of the org steps that ran (startedAt to finishedAt), by policy and step",
            step_duration.clone(),
        );
        let verdicts = Family::<VerdictLabels, Counter>::default();
        registry.register(
            "bookend_run_verdicts",
            "Post-run verdicts per finished TaskRun and policy: pass, skip (steps that could not be injected), or fail with its cause (hermetic_jail_failed, did_not_run, not_injected, failed)",
            verdicts.clone(),
        );
        let taskruns_watched = Gauge::default();
        registry.register(
            "bookend_taskruns_watched",
            "TaskRuns bookend injected into that have not finished yet (kubernetes mode)",
            taskruns_watched.clone(),
        );
        let verification_errors = Counter::default();
        registry.register(
            "bookend_verification_errors",
            "Finished TaskRuns whose verification could not be recorded (the mark could not be written; retried on the next watch event)",
            verification_errors.clone(),
        );
        let verifications_unmarked = Family::<UnmarkedLabels, Counter>::default();
        registry.register(
            "bookend_verifications_unmarked",
            "Finished TaskRuns verified without the bookend.dev/verified mark, by reason: deleted (gone before the mark; verdict from the final object) or unmarkable (the API server refuses the mark for good; verdict once per bookend start)",
            verifications_unmarked.clone(),
        );
        for reason in ["deleted", "unmarkable"] {
            let _ = verifications_unmarked.get_or_create(&UnmarkedLabels { reason });
        }
        let verification_counted = Gauge::default();
        registry.register(
            "bookend_verification_counted_taskruns",
            "TaskRuns with a bookend.dev/verified mark read by the last count of the policies' status.verification (kubernetes mode)",
            verification_counted.clone(),
        );
        let verification_count_errors = Counter::default();
        registry.register(
            "bookend_verification_count_errors",
            "Counts of the policies' status.verification that failed (the TaskRun list failed; counted again next period)",
            verification_count_errors.clone(),
        );
        let verifications_ignored = Counter::default();
        registry.register(
            "bookend_verifications_ignored",
            "Finished TaskRuns not verified because their record names a policy that cannot apply in their namespace (a record bookend did not write, e.g. in a namespace its webhooks skip)",
            verifications_ignored.clone(),
        );
        for result in ["success", "error"] {
            let _ = policy_reloads.get_or_create(&ResultLabels { result });
            let _ = certificate_reloads.get_or_create(&ResultLabels { result });
            let _ = status_writes.get_or_create(&ResultLabels { result });
            let _ = report_writes.get_or_create(&ResultLabels { result });
            for regarding in ["taskrun", "policy"] {
                let _ = events.get_or_create(&EventLabels { regarding, result });
            }
        }
        Self {
            registry: Arc::new(registry),
            requests,
            duration,
            in_flight,
            connections,
            injected,
            policies_loaded,
            policy_reloads,
            certificate_reloads,
            certificate_expiry,
            panics,
            tls_handshake_errors,
            invalid_policies,
            watch_errors,
            events,
            status_writes,
            report_writes,
            followups_dropped,
            tekton_info,
            step_runs,
            step_duration,
            verdicts,
            taskruns_watched,
            verification_counted,
            verification_count_errors,
            verification_errors,
            verifications_unmarked,
            verifications_ignored,
        }
    }

    /// Replaces the `bookend_tekton_info` series with the cluster's.
    pub fn set_tekton_info(&self, cluster: &crate::tekton::cluster::Cluster) {
        let bool_str = |b: bool| if b { "true" } else { "false" };
        self.tekton_info.clear();
        self.tekton_info
            .get_or_create(&TektonLabels {
                version: cluster.version.to_string(),
                supported: bool_str(cluster.is_supported()),
                step_actions: bool_str(cluster.step_actions_enabled()),
                api_fields: cluster.flags.enable_api_fields.as_str(),
            })
            .set(1);
    }

    /// Records the verification of one finished TaskRun: each org step's outcome and duration,
    /// and each policy's verdict.
    pub fn observe_verification(&self, verification: &crate::engine::verify::Verification) {
        for run in &verification.policies {
            for step in &run.steps {
                self.step_runs
                    .get_or_create(&StepRunLabels {
                        policy: run.policy.clone(),
                        step: step.name.clone(),
                        outcome: step.outcome.as_str(),
                    })
                    .inc();
                if let Some(seconds) = step.duration_seconds {
                    self.step_duration
                        .get_or_create(&StepLabels {
                            policy: run.policy.clone(),
                            step: step.name.clone(),
                        })
                        .observe(seconds);
                }
            }
            self.verdicts
                .get_or_create(&VerdictLabels {
                    policy: run.policy.clone(),
                    verdict: run.verdict.as_str(),
                    cause: run.cause.map_or("none", |c| c.as_str()),
                })
                .inc();
        }
    }

    /// How many injected TaskRuns are being watched until they finish.
    pub fn set_taskruns_watched(&self, n: usize) {
        self.taskruns_watched.set(n as i64);
    }

    /// How many marked TaskRuns the last count of the policies' verdicts read.
    pub fn set_verification_counted(&self, n: u64) {
        self.verification_counted.set(n as i64);
    }

    /// A count of the policies' verdicts that failed.
    pub fn verification_count_error(&self) {
        self.verification_count_errors.inc();
    }

    pub fn verification_error(&self) {
        self.verification_errors.inc();
    }

    /// A finished TaskRun verified without its mark: `deleted` or `unmarkable`.
    pub fn verification_unmarked(&self, reason: &'static str) {
        self.verifications_unmarked
            .get_or_create(&UnmarkedLabels { reason })
            .inc();
    }

    /// A finished TaskRun not verified: its record names a policy that cannot apply there.
    pub fn verification_ignored(&self) {
        self.verifications_ignored.inc();
    }

    /// Records one answered review.
    pub fn observe_review(&self, endpoint: &'static str, summary: &Summary, seconds: f64) {
        // A closed set: the operation comes from the request and must not grow the series.
        let operation = match summary.operation.as_str() {
            "" => "unknown",
            op @ ("CREATE" | "UPDATE" | "DELETE" | "CONNECT") => op,
            _ => "other",
        }
        .to_owned();
        let outcome = summary.outcome_label();
        self.requests
            .get_or_create(&RequestLabels {
                endpoint,
                operation,
                outcome,
                dry_run: if summary.dry_run { "true" } else { "false" },
            })
            .inc();
        self.duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(seconds);
        for (policy, steps) in &summary.injected {
            self.injected
                .get_or_create(&PolicyLabels {
                    policy: policy.clone(),
                })
                .inc_by(*steps as u64);
        }
    }

    /// A request started (the guard decrements on drop).
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// A webhook connection was accepted (the guard decrements on drop).
    pub fn connection(&self) -> InFlight {
        self.connections.inc();
        InFlight(self.connections.clone())
    }

    pub fn set_policies_loaded(&self, n: usize) {
        self.policies_loaded.set(n as i64);
    }

    pub fn policy_reload(&self, ok: bool) {
        self.policy_reloads
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "error" },
            })
            .inc();
    }

    pub fn certificate_reload(&self, ok: bool) {
        self.certificate_reloads
            .get_or_create(&ResultLabels {
                result: if ok { "success" } else { "error" },
            })
            .inc();
    }

    pub fn set_certificate_expiry(&self, unix_seconds: i64) {
        self.certificate_expiry.set(unix_seconds);
    }

    pub fn set_invalid_policies(&self, n: usize) {
        self.invalid_policies.set(n as i64);
    }

    pub fn watch_error(&self) {
        self.watch_errors.inc();
    }

    /// An Event about a `taskrun` or a `policy` was posted (or failed).
    pub fn event(&self, regarding: &'static str, ok: bool) {
        self.events
            .get_or_create(&EventLabels {
                regarding,
                result: result(ok),
            })
            .inc();
    }

    pub fn status_write(&self, ok: bool) {
        self.status_writes
            .get_or_create(&ResultLabels { result: result(ok) })
            .inc();
    }

    pub fn policy_report_write(&self, ok: bool) {
        self.report_writes
            .get_or_create(&ResultLabels { result: result(ok) })
            .inc();
    }

    /// An admitted TaskRun's Events and PolicyReport results were dropped (queue full).
    pub fn followup_dropped(&self) {
        self.followups_dropped.inc();
    }

    pub fn handler_panic(&self) {
        self.panics.inc();
    }

    pub fn tls_handshake_error(&self) {
        self.tls_handshake_errors.inc();
    }

    /// The text exposition (OpenMetrics, which Prometheus reads).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Decrements a gauge (`bookend_admission_in_flight`, `bookend_webhook_connections`) when
/// dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exposed() {
        let m = Metrics::new();
        let summary = Summary {
            operation: "CREATE".into(),
            outcome: Some(crate::engine::Outcome::Mutated),
            injected: vec![("ClusterStepPolicy/a".into(), 2)],
            ..Summary::default()
        };
        m.observe_review("mutate", &summary, 0.000_2);
        m.handler_panic();
        m.set_certificate_expiry(1_900_000_000);
        m.set_tekton_info(&crate::tekton::cluster::Cluster {
            version: crate::tekton::cluster::Version::new(0, 61, 0),
            flags: Default::default(),
        });
        m.set_tekton_info(&crate::tekton::cluster::Cluster::default());
        use crate::engine::verify::{
            Place, PolicyRun, RunVerdict, StepOutcome, StepRun, Verification,
        };
        m.observe_verification(&Verification {
            succeeded: true,
            reason: "Succeeded".into(),
            by_composition: true,
            policies: vec![PolicyRun {
                policy: "ClusterStepPolicy/a".into(),
                mode: None,
                steps: vec![StepRun {
                    name: "bookend-a".into(),
                    place: Place::Pre,
                    outcome: StepOutcome::Completed,
                    exit_code: Some(0),
                    duration_seconds: Some(3.5),
                }],
                verdict: RunVerdict::Pass,
                cause: None,
                drift: None,
            }],
        });
        let text = m.encode();
        assert!(!text.contains("v0.61.0"), "one Tekton at a time:\n{text}");
        for needle in [
            "bookend_admission_requests_total{endpoint=\"mutate\",operation=\"CREATE\",outcome=\"mutated\",dry_run=\"false\"} 1",
            "bookend_admission_duration_seconds_bucket{le=\"0.00025\",endpoint=\"mutate\"} 1",
            "bookend_injected_steps_total{policy=\"ClusterStepPolicy/a\"} 2",
            "bookend_policies_loaded 0",
            "bookend_policy_reloads_total{result=\"error\"} 0",
            "bookend_certificate_reloads_total{result=\"success\"} 0",
            "bookend_certificate_expiry_timestamp_seconds 1900000000",
            "bookend_handler_panics_total 1",
            "bookend_admission_in_flight 0",
            "bookend_events_total{regarding=\"taskrun\",result=\"error\"} 0",
            "bookend_status_writes_total{result=\"success\"} 0",
            "bookend_policy_report_writes_total{result=\"error\"} 0",
            "bookend_followups_dropped_total 0",
            "bookend_tekton_info{version=\"v1.15.0\",supported=\"true\",step_actions=\"true\",api_fields=\"beta\"} 1",
            "bookend_taskruns_watched 0",
            "bookend_verification_errors_total 0",
            "bookend_verification_counted_taskruns 0",
            "bookend_verification_count_errors_total 0",
            "bookend_verifications_unmarked_total{reason=\"deleted\"} 0",
            "bookend_verifications_ignored_total 0",
            "bookend_step_runs_total{policy=\"ClusterStepPolicy/a\",step=\"bookend-a\",outcome=\"completed\"} 1",
            "bookend_step_duration_seconds_bucket{le=\"5.0\",policy=\"ClusterStepPolicy/a\",step=\"bookend-a\"} 1",
            "bookend_run_verdicts_total{policy=\"ClusterStepPolicy/a\",verdict=\"pass\",cause=\"none\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
