//! Post-run verification against a real kube-apiserver: bookend watches the TaskRuns it
//! injected into and, when each finishes, says whether the org steps ran. No Tekton controller
//! runs here, so the scenario writes each TaskRun's status itself, as Tekton v1.15 writes it
//! (`status.steps[]` with `terminated` and `terminationReason`, the `Succeeded` condition);
//! the runtime suite runs the same under Tekton's own controller. Checked: the label admission
//! sets, the `bookend.dev/verified` mark, the Event, the PolicyReport result, the metrics, and
//! that each TaskRun is counted once across a restart and with two replicas.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::poll;

use super::bookend::Bookend;
use super::objects::{busybox_step, metadata_str, step_names, taskrun};
use super::{Ctx, TEAM_A};

const VERIFIED: &str = "bookend.dev/verified";

/// A step's state as Tekton reports it when the step ended with `reason`.
fn step_state(name: &str, exit: i64, reason: &str) -> Value {
    json!({
        "name": name,
        "container": format!("step-{name}"),
        "terminated": {
            "exitCode": exit,
            "reason": reason,
            "startedAt": "2026-02-01T10:00:00Z",
            "finishedAt": "2026-02-01T10:00:03Z",
        },
        "terminationReason": reason,
    })
}

/// Writes the status of a finished TaskRun through the status subresource, as Tekton's
/// controller does: every step up to `stopped_at` completed, the rest ended with `reason`
/// (none: all completed and the TaskRun succeeded).
fn finish(ctx: &Ctx, name: &str, stopped_at: Option<(&str, &str)>) {
    let object = ctx
        .cluster
        .get_json(&["taskrun", name, "-n", TEAM_A], "the TaskRun");
    let mut stopped = false;
    let steps: Vec<Value> = step_names(&object)
        .iter()
        .map(|step| {
            if let Some((at, reason)) = stopped_at
                && (stopped || step == at)
            {
                stopped = true;
                return step_state(step, 1, reason);
            }
            step_state(step, 0, "Completed")
        })
        .collect();
    let (status, reason) = match stopped_at {
        None => ("True", "Succeeded"),
        Some((_, reason)) => ("False", reason),
    };
    let patch = json!({"status": {
        "conditions": [{"type": "Succeeded", "status": status, "reason": reason,
                        "message": "written by the e2e scenario",
                        "lastTransitionTime": "2026-02-01T10:01:00Z"}],
        "podName": format!("{name}-pod"),
        "startTime": "2026-02-01T10:00:00Z",
        "completionTime": "2026-02-01T10:01:00Z",
        "steps": steps,
    }});
    ctx.cluster
        .kubectl(&[
            "patch",
            "taskrun",
            name,
            "-n",
            TEAM_A,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
        .expect_ok("write the TaskRun's status");
}

/// Creates `team-a/<name>` (one user step, `build`); the example policies inject into it.
fn create(ctx: &mut Ctx, name: &str) -> Value {
    let mut object = taskrun(TEAM_A, "", "build");
    object["metadata"] = json!({"name": name, "namespace": TEAM_A});
    let created = ctx
        .cluster
        .create(&object)
        .expect_ok("create a TaskRun")
        .json();
    assert_eq!(
        created["metadata"]["labels"]["bookend.dev/verify"],
        json!("true"),
        "admission labels an injected TaskRun for the watch: {}",
        created["metadata"]
    );
    ctx.keep(name, &created);
    created
}

/// Polls until the TaskRun carries the mark; returns its verdicts (policy -> verdict).
fn poll_mark(ctx: &Ctx, name: &str) -> Value {
    poll(
        &format!("{name} marked {VERIFIED}"),
        Duration::from_secs(30),
        || {
            let object = ctx
                .cluster
                .get_json(&["taskrun", name, "-n", TEAM_A], "the TaskRun");
            object["metadata"]["annotations"][VERIFIED]
                .as_str()
                .ok_or_else(|| format!("{}", object["metadata"]["annotations"]))
                .and_then(|text| serde_json::from_str::<Value>(text).map_err(|e| e.to_string()))
                .map(|mark| mark["verdicts"].clone())
        },
    )
}

/// Events bookend posted about the TaskRun with `uid` for `reason`: (count, message) each.
fn events(ctx: &Ctx, uid: &str, reason: &str) -> Vec<(u64, String)> {
    ctx.cluster.get_json(
        &[
            "events",
            "-n",
            TEAM_A,
            "--field-selector",
            &format!("involvedObject.uid={uid},reason={reason}"),
        ],
        "kubectl get events",
    )["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let count = e["count"]
                .as_u64()
                .or_else(|| e["series"]["count"].as_u64())
                .unwrap_or(1);
            (count, e["message"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The value of one series on a bookend's `/metrics` (0 when absent).
fn metric(bookend: &Bookend, series: &str) -> f64 {
    let (_, body) = bookend.admin_get("/metrics").expect("GET /metrics");
    body.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

const SBOM: &str = "ClusterStepPolicy/org-sbom";
const SBOM_FAIL: &str = "bookend_run_verdicts_total{policy=\"ClusterStepPolicy/org-sbom\",verdict=\"fail\",cause=\"did_not_run\"}";
const SBOM_PASS: &str = "bookend_run_verdicts_total{policy=\"ClusterStepPolicy/org-sbom\",verdict=\"pass\",cause=\"none\"}";

pub(super) fn scenario_post_run_verification(ctx: &mut Ctx) -> String {
    // A TaskRun whose org steps all ran, and one whose TaskRun timed out in the user's step.
    let pass = create(ctx, "verify-pass");
    let timeout = create(ctx, "verify-timeout");
    finish(ctx, "verify-pass", None);
    finish(ctx, "verify-timeout", Some(("build", "TaskRunTimeout")));
    assert_eq!(poll_mark(ctx, "verify-pass")[SBOM], json!("pass"));
    assert_eq!(poll_mark(ctx, "verify-timeout")[SBOM], json!("fail"));

    let timeout_uid = metadata_str(&timeout, "uid");
    let warning = poll(
        "the OrgStepsDidNotRun Event",
        Duration::from_secs(30),
        || {
            events(ctx, &timeout_uid, "OrgStepsDidNotRun")
                .pop()
                .map(|(_, m)| m)
                .ok_or_else(|| "none yet".to_owned())
        },
    );
    // Both post-steps of org-sbom, each with the cause; org-credentials' pre-step ran.
    assert_eq!(
        warning,
        "ClusterStepPolicy/org-sbom: org post-step bookend-sbom did not run: the TaskRun timed out during step build; \
         org post-step bookend-sbom-upload did not run: the TaskRun timed out during step build"
    );
    let normal = poll("the OrgStepsRan Event", Duration::from_secs(30), || {
        events(ctx, &metadata_str(&pass, "uid"), "OrgStepsRan")
            .pop()
            .ok_or_else(|| "none yet".to_owned())
    });
    assert!(normal.1.contains("bookend-sbom-upload"), "{normal:?}");
    assert_eq!(metric(&ctx.bookend, SBOM_FAIL), 1.0);
    assert_eq!(metric(&ctx.bookend, SBOM_PASS), 1.0);
    assert_eq!(
        metric(
            &ctx.bookend,
            "bookend_step_runs_total{policy=\"ClusterStepPolicy/org-sbom\",step=\"bookend-sbom-upload\",outcome=\"never_started\"}"
        ),
        1.0
    );

    // The namespace's PolicyReport has the Enforce policy's run result (the CRD is installed
    // by the PolicyReport scenario before this one).
    let result = poll(
        "the run result in the PolicyReport",
        Duration::from_secs(30),
        || {
            let report = ctx.cluster.kubectl(&[
                "get",
                "policyreport",
                "bookend-audit",
                "-n",
                TEAM_A,
                "-o",
                "json",
            ]);
            let report = report.try_json()?;
            report["results"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| {
                    r["rule"] == "run"
                        && r["policy"] == SBOM
                        && r["resources"][0]["uid"] == json!(timeout_uid)
                })
                .cloned()
                .ok_or_else(|| "no run result yet".to_owned())
        },
    );
    assert_eq!(result["result"], "fail");
    assert_eq!(result["properties"]["mode"], "Enforce");
    assert_eq!(result["properties"]["cause"], "did_not_run");

    // A TaskRun that finishes while bookend is down is verified when it is back, and the
    // TaskRuns verified before the restart are not counted again.
    let late = create(ctx, "verify-late");
    ctx.bookend.stop();
    finish(ctx, "verify-late", None);
    let work = ctx.work.clone();
    let port = ctx.bookend.port;
    ctx.bookend = Bookend::start_counting(
        &work,
        port,
        &ctx.certs.live("tls.crt"),
        &ctx.certs.live("tls.key"),
        &work.join("bookend.kubeconfig"),
        COUNT_INTERVAL,
    );
    ctx.bookend.wait_ready(Duration::from_secs(60));
    assert_eq!(poll_mark(ctx, "verify-late")[SBOM], json!("pass"));
    poll(
        "the restarted bookend to count verify-late",
        Duration::from_secs(30),
        || match metric(&ctx.bookend, SBOM_PASS) {
            1.0 => Ok(()),
            n => Err(format!("{n}")),
        },
    );
    assert_eq!(
        metric(&ctx.bookend, SBOM_FAIL),
        0.0,
        "verify-timeout was verified before the restart: not counted again"
    );
    let warnings = events(ctx, &timeout_uid, "OrgStepsDidNotRun");
    assert_eq!(
        warnings.iter().map(|(n, _)| n).sum::<u64>(),
        1,
        "one Event for verify-timeout across the restart: {warnings:?}"
    );
    assert_eq!(metadata_str(&late, "name"), "verify-late");

    // Two replicas watch the same TaskRuns: the mark's resourceVersion precondition lets only
    // one of them count each.
    let second_dir = work.join("replica-2");
    std::fs::create_dir_all(&second_dir).expect("replica-2 directory");
    let mut second = Bookend::start_counting(
        &second_dir,
        crate::kube::free_port(),
        &ctx.certs.live("tls.crt"),
        &ctx.certs.live("tls.key"),
        &work.join("bookend.kubeconfig"),
        COUNT_INTERVAL,
    );
    second.wait_ready(Duration::from_secs(60));
    let names: Vec<String> = (0..6).map(|i| format!("verify-replicas-{i}")).collect();
    for name in &names {
        create(ctx, name);
    }
    for name in &names {
        finish(ctx, name, Some(("build", "TaskRunTimeout")));
    }
    for name in &names {
        poll_mark(ctx, name);
    }
    let counted = poll(
        "both replicas done counting",
        Duration::from_secs(30),
        || {
            let n = metric(&ctx.bookend, SBOM_FAIL) + metric(&second, SBOM_FAIL);
            if n >= names.len() as f64 {
                Ok(n)
            } else {
                Err(format!("{n}"))
            }
        },
    );
    // Counting is done once the marks are written; a second look finds no more.
    std::thread::sleep(Duration::from_secs(3));
    let again = metric(&ctx.bookend, SBOM_FAIL) + metric(&second, SBOM_FAIL);
    assert_eq!(
        (counted, again),
        (names.len() as f64, names.len() as f64),
        "each TaskRun counted once across two replicas"
    );
    let split = (metric(&ctx.bookend, SBOM_FAIL), metric(&second, SBOM_FAIL));
    // Both replicas count the policies' verdicts from the marks: one status for both.
    let failed = 1 + names.len() as i64;
    let counts = poll_counts(ctx, &["clustersteppolicy", "org-sbom"], |v| {
        v["passed"] == json!(2) && v["failed"] == json!(failed)
    });
    second.stop();
    assert_eq!(counts["failedByCause"], json!({"did_not_run": failed}));
    assert_eq!(counts["window"], "24h");
    let last = &counts["lastFailure"];
    assert!(
        last["namespace"] == TEAM_A
            && last["cause"] == "did_not_run"
            && last["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("verify-replicas-")),
        "{counts}"
    );
    assert_eq!(
        poll_counts(
            ctx,
            &["clustersteppolicy", "org-credentials"],
            |v| v["passed"] == json!(2 + failed)
        )["failed"],
        json!(0),
        "org-credentials' pre-step ran every time"
    );
    let table = ctx
        .cluster
        .kubectl(&["get", "clustersteppolicy", "org-sbom"])
        .expect_ok("kubectl get clustersteppolicy org-sbom")
        .stdout;
    let cell = |line: &str| line.split_whitespace().nth(5).map(str::to_owned);
    let mut lines = table.lines();
    assert_eq!(
        (lines.next().and_then(cell), lines.next().and_then(cell)),
        (Some("FAILED".to_owned()), Some(failed.to_string())),
        "the FAILED column: {table}"
    );
    // A pruned TaskRun leaves the window (the metrics keep it).
    ctx.cluster
        .kubectl(&["delete", "taskrun", "verify-timeout", "-n", TEAM_A])
        .expect_ok("delete verify-timeout");
    poll_counts(ctx, &["clustersteppolicy", "org-sbom"], |v| {
        v["failed"] == json!(failed - 1)
    });
    format!(
        "pass, TaskRun timeout (Event, report, metrics), a restart, two replicas (split {split:?}): each counted once; \
         org-sbom's status: {failed} failed, 2 passed, one less once a TaskRun is deleted"
    )
}

/// How often the scenarios count the policies' verdicts.
const COUNT_INTERVAL: &str = "2s";

/// Polls the policy's `status.verification` until `done` holds for it; returns it.
fn poll_counts(ctx: &Ctx, policy: &[&str], done: impl Fn(&Value) -> bool) -> Value {
    poll(
        &format!("{policy:?} status.verification"),
        Duration::from_secs(30),
        || {
            let object = ctx.cluster.get_json(policy, "the policy");
            let counts = &object["status"]["verification"];
            if done(counts) {
                Ok(counts.clone())
            } else {
                Err(counts.to_string())
            }
        },
    )
}

pub(super) fn scenario_verification_counts_by_namespace(ctx: &mut Ctx) -> String {
    // A team's StepPolicy: its counts come from its own namespace's TaskRuns.
    let policy = json!({
        "apiVersion": "bookend.dev/v1alpha1",
        "kind": "StepPolicy",
        "metadata": {"name": "e2e-verify-lint", "namespace": TEAM_A},
        "spec": {"priority": 60, "postSteps": [busybox_step("bookend-e2e-verify-lint")]},
    });
    ctx.cluster.apply(&policy).expect_ok("apply a StepPolicy");
    ctx.poll_injected(
        "the StepPolicy to take effect",
        &taskrun(TEAM_A, "lint-", "work"),
        "bookend-e2e-verify-lint",
        "dry-run with the StepPolicy",
    );
    create(ctx, "verify-lint");
    finish(ctx, "verify-lint", None);
    const LINT: &str = "StepPolicy/team-a/e2e-verify-lint";
    assert_eq!(poll_mark(ctx, "verify-lint")[LINT], json!("pass"));
    let lint = ["steppolicy", "e2e-verify-lint", "-n", TEAM_A];
    poll_counts(ctx, &lint, |v| v["passed"] == json!(1));
    let sbom_passed = ctx
        .cluster
        .get_json(&["clustersteppolicy", "org-sbom"], "org-sbom")["status"]["verification"]["passed"]
        .clone();

    // Where the webhooks do not run (kube-system), a TaskRun can carry any mark: one naming
    // team-a's StepPolicy and org-sbom (which selects team-* namespaces only) counts for
    // neither.
    let now = ctx.cluster.get_json(
        &["steppolicy", "e2e-verify-lint", "-n", TEAM_A],
        "the StepPolicy",
    )["status"]["verification"]["observedAt"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let forged_mark = json!({"at": now, "verdicts": {LINT: "pass", SBOM: "pass"}});
    let mut forged = taskrun("kube-system", "", "build");
    forged["metadata"] = json!({"name": "verify-forged", "namespace": "kube-system",
        "labels": {"bookend.dev/verify": "true"},
        "annotations": {VERIFIED: forged_mark.to_string()}});
    const COUNTED: &str = "bookend_verification_counted_taskruns";
    let counted_before = metric(&ctx.bookend, COUNTED);
    let created = ctx
        .cluster
        .create(&forged)
        .expect_ok("create a TaskRun where the webhooks do not run")
        .json();
    assert_eq!(
        created["metadata"]["annotations"][VERIFIED],
        json!(forged_mark.to_string()),
        "no webhook ran: the mark is stored as written"
    );
    // A count read it, and a later count wrote the status (the forged mark's time is inside
    // every later window).
    poll(
        "a count to read the forged mark",
        Duration::from_secs(30),
        || match metric(&ctx.bookend, COUNTED) {
            n if n == counted_before + 1.0 => Ok(()),
            n => Err(format!("{n}")),
        },
    );
    let after =
        ctx.cluster.get_json(&lint, "the StepPolicy")["status"]["verification"]["observedAt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    let counts = poll_counts(ctx, &lint, |v| {
        v["observedAt"].as_str().is_some_and(|t| t > after.as_str())
    });
    assert_eq!(
        (&counts["passed"], &counts["failed"]),
        (&json!(1), &json!(0)),
        "{counts}"
    );
    assert_eq!(
        ctx.cluster
            .get_json(&["clustersteppolicy", "org-sbom"], "org-sbom")["status"]["verification"]["passed"],
        sbom_passed
    );
    assert!(
        std::fs::read_to_string(&ctx.bookend.log)
            .unwrap_or_default()
            .contains("marks naming policies that cannot apply"),
        "the skipped entries are logged"
    );
    for args in [
        &["delete", "taskrun", "verify-forged", "-n", "kube-system"][..],
        &["delete", "taskrun", "verify-lint", "-n", TEAM_A],
        &["delete", "steppolicy", "e2e-verify-lint", "-n", TEAM_A],
    ] {
        ctx.cluster.kubectl(args).expect_ok("clean up");
    }
    "a StepPolicy counts its namespace's verdicts; a forged mark where the webhooks do not run counts for no policy"
        .to_owned()
}

const MARKS_WEBHOOK: &str = "taskrun-marks.validate.bookend.dev";
/// bookend's answers to TaskRun UPDATEs it refused (only mark changes reach it).
const UPDATES_DENIED: &str = "bookend_admission_requests_total{endpoint=\"validate\",operation=\"UPDATE\",outcome=\"denied\",dry_run=\"false\"}";
const UPDATES_ADMITTED: &str = "bookend_admission_requests_total{endpoint=\"validate\",operation=\"UPDATE\",outcome=\"admitted\",dry_run=\"false\"}";

pub(super) fn scenario_verification_cannot_be_escaped(ctx: &mut Ctx) -> String {
    // At CREATE the author writes the marks: bookend drops them and labels the TaskRun itself.
    let mut object = taskrun(TEAM_A, "", "build");
    object["metadata"] = json!({"name": "verify-escape", "namespace": TEAM_A,
        "labels": {"bookend.dev/verify": "false"},
        "annotations": {VERIFIED: "{\"ClusterStepPolicy/org-sbom\":\"pass\"}"}});
    let created = ctx
        .cluster
        .create(&object)
        .expect_ok("create a TaskRun with forged marks")
        .json();
    ctx.keep("verify-escape", &created);
    assert_eq!(
        created["metadata"]["labels"]["bookend.dev/verify"],
        json!("true")
    );
    assert!(
        created["metadata"]["annotations"].get(VERIFIED).is_none(),
        "{}",
        created["metadata"]
    );

    // After CREATE, every change of a mark is refused, by the author (the admin user here) and
    // by Tekton's controller (impersonated), with the fields named.
    let as_controller = as_controller_updating_taskruns(ctx);
    let denied_before = metric(&ctx.bookend, UPDATES_DENIED);
    let attempts: [(&[&str], &str); 6] = [
        (
            &["label", "taskrun", "verify-escape", "bookend.dev/verify-"],
            "metadata.labels.bookend.dev/verify",
        ),
        (
            &[
                "label",
                "--overwrite",
                "taskrun",
                "verify-escape",
                "bookend.dev/verify=false",
            ],
            "metadata.labels.bookend.dev/verify",
        ),
        (
            &[
                "annotate",
                "taskrun",
                "verify-escape",
                "bookend.dev/verified={}",
            ],
            "metadata.annotations.bookend.dev/verified",
        ),
        (
            &[
                "annotate",
                "taskrun",
                "verify-escape",
                "bookend.dev/injected-",
            ],
            "metadata.annotations.bookend.dev/injected",
        ),
        (
            &[
                "patch",
                "taskrun",
                "verify-escape",
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":null}}"#,
            ],
            "metadata.labels.bookend.dev/verify",
        ),
        (
            &[
                "annotate",
                &as_controller,
                "taskrun",
                "verify-escape",
                "bookend.dev/verified={}",
            ],
            "metadata.annotations.bookend.dev/verified",
        ),
    ];
    for (args, field) in attempts {
        let mut full = args.to_vec();
        full.extend(["-n", TEAM_A]);
        let out = ctx.cluster.kubectl(&full);
        assert!(
            !out.ok()
                && out.stderr.contains(MARKS_WEBHOOK)
                && out.stderr.contains(field)
                && out.stderr.contains("written by bookend only"),
            "kubectl {args:?} must be refused naming {field}: {}",
            out.stderr
        );
    }
    assert_eq!(
        metric(&ctx.bookend, UPDATES_DENIED) - denied_before,
        attempts.len() as f64,
        "each refusal is bookend's own (not a failed call)"
    );

    // Everything else in an UPDATE is anyone's, and never reaches bookend (the chart's
    // matchCondition): the author's label, the controller's annotation, a finalizer.
    let reviewed_before =
        metric(&ctx.bookend, UPDATES_DENIED) + metric(&ctx.bookend, UPDATES_ADMITTED);
    for args in [
        &["label", "taskrun", "verify-escape", "team=a"][..],
        &[
            "annotate",
            &as_controller,
            "taskrun",
            "verify-escape",
            "pipeline.tekton.dev/release=e2e",
        ],
        &[
            "patch",
            "taskrun",
            "verify-escape",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["e2e.example/keep"]}}"#,
        ],
    ] {
        let mut full = args.to_vec();
        full.extend(["-n", TEAM_A]);
        ctx.cluster
            .kubectl(&full)
            .expect_ok("an UPDATE that leaves bookend's marks alone");
    }
    assert_eq!(
        metric(&ctx.bookend, UPDATES_DENIED) + metric(&ctx.bookend, UPDATES_ADMITTED),
        reviewed_before,
        "UPDATEs that change no mark are not sent to bookend"
    );

    // bookend's own mark goes through the same webhook: one verdict, then it is frozen too.
    let admitted_before = metric(&ctx.bookend, UPDATES_ADMITTED);
    finish(ctx, "verify-escape", Some(("build", "TaskRunTimeout")));
    assert_eq!(poll_mark(ctx, "verify-escape")[SBOM], json!("fail"));
    assert!(
        metric(&ctx.bookend, UPDATES_ADMITTED) > admitted_before,
        "bookend's mark was reviewed and admitted as bookend's own"
    );
    let out = ctx.cluster.kubectl(&[
        "annotate",
        "--overwrite",
        "taskrun",
        "verify-escape",
        r#"bookend.dev/verified={"ClusterStepPolicy/org-sbom":"pass"}"#,
        "-n",
        TEAM_A,
    ]);
    assert!(
        !out.ok() && out.stderr.contains(MARKS_WEBHOOK),
        "{}",
        out.stderr
    );
    ctx.cluster
        .kubectl(&[
            "patch",
            "taskrun",
            "verify-escape",
            "-n",
            TEAM_A,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .expect_ok("drop the test's finalizer");
    let uid = metadata_str(&created, "uid");
    let warnings = events(ctx, &uid, "OrgStepsDidNotRun");
    assert_eq!(
        warnings.iter().map(|(n, _)| n).sum::<u64>(),
        1,
        "{warnings:?}"
    );
    format!(
        "forged marks dropped at CREATE; {} mark changes refused (author and controller); other UPDATEs not sent; one verdict",
        attempts.len()
    )
}

/// The `--as` flag of Tekton's controller, granted what it does to TaskRuns (get, patch,
/// update) as Tekton's own ClusterRole grants it.
fn as_controller_updating_taskruns(ctx: &Ctx) -> String {
    let as_controller = super::tasks::impersonate_tekton_controller(&ctx.cluster, &["tasks"]);
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "e2e-tekton-controller-taskruns"},
         "rules": [{"apiGroups": ["tekton.dev"], "resources": ["taskruns"],
                    "verbs": ["get", "patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "e2e-tekton-controller-taskruns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "e2e-tekton-controller-taskruns"},
         "subjects": [{"kind": "ServiceAccount", "name": "tekton-pipelines-controller",
                       "namespace": "tekton-pipelines"}]}]});
    ctx.cluster
        .apply(&rbac)
        .expect_ok("RBAC for the impersonated controller");
    as_controller
}

pub(super) fn scenario_remote_marks_and_unmarkable_taskruns(ctx: &mut Ctx) -> String {
    // A TaskRun whose Task a resolver fetches: nothing to inject at CREATE (the steps go into
    // the resolved Task at Tekton's controller's dry-run), but bookend's record (saying so) and
    // label are written then, in place of the ones the author wrote; no verified mark.
    let remote = |name: &str| {
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
            "metadata": {"name": name, "namespace": TEAM_A,
                "labels": {"bookend.dev/verify": "true"},
                "annotations": {VERIFIED: "{}"}},
            "spec": {"taskRef": {"resolver": "git", "params": [
                {"name": "url", "value": "https://example.invalid/tasks.git"},
                {"name": "pathInRepo", "value": "build.yaml"}]}}})
    };
    let created = ctx
        .cluster
        .create(&remote("verify-remote"))
        .expect_ok("create a remote-resolver TaskRun")
        .json();
    let meta = &created["metadata"];
    assert_eq!(meta["labels"]["bookend.dev/verify"], "true", "{meta}");
    assert!(meta["annotations"].get(VERIFIED).is_none(), "{meta}");
    let recorded: Value = serde_json::from_str(
        meta["annotations"]["bookend.dev/injected"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("bookend's record");
    assert_eq!(recorded["resolved"], true, "{recorded}");
    assert!(
        recorded["policies"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{recorded}"
    );
    assert!(created["spec"]["taskSpec"].is_null(), "{}", created["spec"]);

    // Tekton's controller keeps the resolved Task's own metadata after its dry-run CREATE
    // (readRuntimeObjectAsTask: `mutatedTask.ObjectMeta = obj.ObjectMeta`) and copies the
    // Task's labels and annotations into the TaskRun (storeTaskSpecAndMergeMeta, an Update as
    // its identity). A resolver's Task is anyone's (a git repository), so marks it carries are
    // the author's: the controller's copy of them is refused, like anyone's.
    let as_controller = as_controller_updating_taskruns(ctx);
    let record = r#"{"policies":[{"policy":"ClusterStepPolicy/org-sbom","hash":"0","steps":["bookend-sbom"]}]}"#;
    let current = ctx
        .cluster
        .get_json(&["taskrun", "verify-remote", "-n", TEAM_A], "the TaskRun");
    let mut copied = current.clone();
    copied["metadata"]["labels"]["bookend.dev/verify"] = json!("true");
    copied["metadata"]["labels"]["tekton.dev/task"] = json!("remote-build");
    copied["metadata"]["annotations"]["bookend.dev/injected"] = json!(record);
    for who in [as_controller.as_str(), ""] {
        let args: Vec<&str> = ["replace", who]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let out = ctx.cluster.with_object(&args, &copied);
        assert!(
            !out.ok() && out.stderr.contains(MARKS_WEBHOOK),
            "a remote Task's marks copied into the TaskRun ({who:?}) must be refused: {}",
            out.stderr
        );
    }
    ctx.cluster
        .kubectl(&["delete", "taskrun", "verify-remote", "-n", TEAM_A])
        .expect_ok("delete the scenario's TaskRun");

    // A TaskRun whose annotations leave no room for the mark (the API server refuses it with
    // 422): its verdict anyway, once in this bookend process, counted as unmarkable.
    const UNMARKABLE: &str = "bookend_verifications_unmarked_total{reason=\"unmarkable\"}";
    let unmarkable_before = metric(&ctx.bookend, UNMARKABLE);
    let full = create(ctx, "verify-full");
    let mut padded = ctx
        .cluster
        .get_json(&["taskrun", "verify-full", "-n", TEAM_A], "the TaskRun");
    let used: usize = padded["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    // 256 KiB is the API server's limit on all annotations together; leave 10 bytes.
    let room = 262_144 - used - "padding".len() - 10;
    padded["metadata"]["annotations"]["padding"] = json!("x".repeat(room));
    ctx.cluster
        .with_object(&["replace"], &padded)
        .expect_ok("fill the TaskRun's annotations");
    finish(ctx, "verify-full", Some(("build", "TaskRunTimeout")));
    let uid = metadata_str(&full, "uid");
    let warning = poll(
        "the unmarkable TaskRun's OrgStepsDidNotRun Event",
        Duration::from_secs(30),
        || {
            events(ctx, &uid, "OrgStepsDidNotRun")
                .pop()
                .ok_or_else(|| "none yet".to_owned())
        },
    );
    assert!(warning.1.contains("did not run"), "{warning:?}");
    assert_eq!(metric(&ctx.bookend, UNMARKABLE) - unmarkable_before, 1.0);
    let object = ctx
        .cluster
        .get_json(&["taskrun", "verify-full", "-n", TEAM_A], "the TaskRun");
    assert!(object["metadata"]["annotations"].get(VERIFIED).is_none());
    // Deleting it brings no second verdict (it was concluded, unmarked). The watch handles its
    // events in order: once a TaskRun finished after the deletion is marked, the deletion has
    // been handled.
    const DELETED: &str = "bookend_verifications_unmarked_total{reason=\"deleted\"}";
    let deleted_before = metric(&ctx.bookend, DELETED);
    ctx.cluster
        .kubectl(&["delete", "taskrun", "verify-full", "-n", TEAM_A])
        .expect_ok("delete the unmarkable TaskRun");
    create(ctx, "verify-after-full");
    finish(ctx, "verify-after-full", None);
    poll_mark(ctx, "verify-after-full");
    assert_eq!(metric(&ctx.bookend, DELETED) - deleted_before, 0.0);
    assert_eq!(metric(&ctx.bookend, UNMARKABLE) - unmarkable_before, 1.0);
    ctx.cluster
        .kubectl(&["delete", "taskrun", "verify-after-full", "-n", TEAM_A])
        .expect_ok("delete the scenario's TaskRun");
    format!(
        "remote-resolver TaskRun: bookend's record and label at CREATE (forged marks replaced), a resolved Task's marks copied by the controller refused; unmarkable TaskRun: verdict once ({} Event)",
        warning.0
    )
}
