//! What bookend reports: policy status (READY, reasons, observedGeneration), Events on
//! policies and TaskRuns, and PolicyReports for Audit policies.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{Cluster, cluster_policy, poll};

use super::helm::helm_upgrade;
use super::objects::{busybox_step, first_line, metadata_str, step_names, taskrun};
use super::{Ctx, TEAM_A, TEAM_B};

/// `kubectl get clustersteppolicies` as a user reads it: name -> the other columns (READY,
/// REASON, MODE, PRIORITY, FAILED, AGE).
fn policy_table(cluster: &Cluster) -> HashMap<String, Vec<String>> {
    let out = cluster
        .kubectl(&["get", "clustersteppolicies"])
        .expect_ok("kubectl get clustersteppolicies");
    let mut lines = out.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "READY", "REASON", "MODE", "PRIORITY", "FAILED", "AGE"
        ],
        "the printer columns"
    );
    lines
        .map(|l| {
            let mut cells = l.split_whitespace().map(str::to_owned);
            (cells.next().unwrap_or_default(), cells.collect())
        })
        .collect()
}

/// READY and REASON of a policy in `kubectl get clustersteppolicies`, until they are `want`.
fn poll_ready(cluster: &Cluster, name: &str, want: [&str; 2]) {
    poll(
        &format!("{name}: READY {} REASON {}", want[0], want[1]),
        Duration::from_secs(30),
        || {
            let table = policy_table(cluster);
            let row = table.get(name).cloned().unwrap_or_default();
            if row.len() >= 2 && row[0] == want[0] && row[1] == want[1] {
                Ok(())
            } else {
                Err(format!("{row:?}"))
            }
        },
    )
}

/// The core/v1 view of the Events in `namespace` matching a field selector.
fn events(cluster: &Cluster, namespace: &str, selector: &str) -> Vec<Value> {
    cluster.get_json(
        &["events", "-n", namespace, "--field-selector", selector],
        "kubectl get events",
    )["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Polls until an Event with `reason` matches `selector`; returns its message.
fn poll_event(cluster: &Cluster, namespace: &str, selector: &str, reason: &str) -> String {
    poll(
        &format!("a {reason} Event ({selector})"),
        Duration::from_secs(30),
        || {
            let found = events(cluster, namespace, selector);
            found
                .iter()
                .find(|e| e["reason"] == reason)
                .map(|e| e["message"].as_str().unwrap_or("").to_owned())
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        found.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
                    )
                })
        },
    )
}

pub(super) fn scenario_policy_status(ctx: &mut Ctx) -> String {
    // The example policies are live.
    poll_ready(&ctx.cluster, "org-credentials", ["True", "Loaded"]);
    let table = policy_table(&ctx.cluster);
    assert_eq!(
        table["org-credentials"][2..4],
        ["Enforce", "10"],
        "MODE, PRIORITY"
    );
    assert_eq!(
        table["org-provenance-audit"][..3],
        ["True", "Loaded", "Audit"]
    );
    let org = ctx.cluster.get_json(
        &["clustersteppolicy", "org-credentials"],
        "the org-credentials policy",
    );
    assert_eq!(org["status"]["preSteps"], json!(["bookend-credentials"]));
    assert_eq!(org["status"]["volumes"], json!(["bookend-registry"]));

    // An invalid policy and the loser of a name clash reach the cluster only while the
    // validating webhook is absent (created meanwhile, or by a GitOps tool racing an install).
    ctx.cluster
        .kubectl(&["delete", "validatingwebhookconfiguration", "bookend.dev"])
        .expect_ok("delete the ValidatingWebhookConfiguration");
    let invalid = cluster_policy(
        "e2e-invalid",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("no-prefix")]}),
    );
    poll(
        "the apiserver to stop calling the validating webhook",
        Duration::from_secs(30),
        || ctx.cluster.apply(&invalid).succeeded(),
    );
    let mut clash = cluster_policy(
        "e2e-clash",
        json!({"match": {"namespaces": [TEAM_B]}, "preSteps": [busybox_step("bookend-credentials")]}),
    );
    ctx.cluster
        .apply(&clash)
        .expect_ok("apply a clashing policy");
    poll_ready(&ctx.cluster, "e2e-invalid", ["False", "Invalid"]);
    poll_ready(&ctx.cluster, "e2e-clash", ["False", "Conflict"]);
    let message = |name: &str| {
        let p = ctx.cluster.get_json(&["clustersteppolicy", name], name);
        p["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let why_invalid = message("e2e-invalid");
    assert!(
        why_invalid.starts_with("spec.preSteps[0].name: step name \"no-prefix\""),
        "the field and the problem: {why_invalid}"
    );
    let why_clash = message("e2e-clash");
    assert!(
        why_clash.contains("already used by ClusterStepPolicy/org-credentials"),
        "the policy that keeps the name: {why_clash}"
    );
    let wide = ctx
        .cluster
        .kubectl(&["get", "clustersteppolicy", "e2e-clash", "-o", "wide"])
        .expect_ok("kubectl get -o wide")
        .stdout;
    assert!(
        wide.contains("MESSAGE") && wide.contains("ClusterStepPolicy/org-credentials"),
        "{wide}"
    );
    // Cluster-scoped objects' Events go to the default namespace.
    poll_event(
        &ctx.cluster,
        "default",
        "involvedObject.name=e2e-invalid",
        "InvalidPolicy",
    );
    poll_event(
        &ctx.cluster,
        "default",
        "involvedObject.name=e2e-clash",
        "PolicyConflict",
    );
    // A loser is inactive: its step is not injected (the org's is, once).
    let probe = ctx
        .cluster
        .dry_run(&taskrun(TEAM_B, "status-", "work"))
        .expect_ok("dry-run in team-b")
        .json();
    assert_eq!(
        step_names(&probe)
            .iter()
            .filter(|s| *s == "bookend-credentials")
            .count(),
        1
    );

    // Back to normal, then an edit: the loser renames its step and becomes Ready; the
    // condition follows the new generation.
    helm_upgrade(&ctx.cluster, &[])
        .expect_ok("helm upgrade restores the ValidatingWebhookConfiguration");
    clash["spec"]["preSteps"] = json!([busybox_step("bookend-e2e-renamed")]);
    let applied = poll(
        "the fixed policy through the restored webhook",
        Duration::from_secs(30),
        || {
            let out = ctx.cluster.apply(&clash);
            out.succeeded().map(|()| out.json())
        },
    );
    let generation = applied["metadata"]["generation"]
        .as_i64()
        .expect("generation");
    assert!(
        generation >= 2,
        "an edit bumps the generation: {generation}"
    );
    poll_ready(&ctx.cluster, "e2e-clash", ["True", "Loaded"]);
    let fixed = ctx
        .cluster
        .get_json(&["clustersteppolicy", "e2e-clash"], "e2e-clash");
    assert_eq!(fixed["status"]["observedGeneration"], json!(generation));
    assert_eq!(
        fixed["status"]["conditions"][0]["observedGeneration"],
        json!(generation)
    );
    assert_eq!(fixed["status"]["preSteps"], json!(["bookend-e2e-renamed"]));
    let loaded = poll(
        "a PolicyLoaded Event for the new generation",
        Duration::from_secs(30),
        || {
            events(
                &ctx.cluster,
                "default",
                "involvedObject.name=e2e-clash,reason=PolicyLoaded",
            )
            .iter()
            .filter_map(|e| e["message"].as_str())
            .find(|m| m.starts_with(&format!("generation {generation}: ")))
            .map(str::to_owned)
            .ok_or_else(|| "none yet".to_owned())
        },
    );
    // Nothing flaps: with no change, the status is not written again.
    let rv = |c: &Cluster| {
        c.get_json(&["clustersteppolicy", "e2e-clash"], "e2e-clash")["metadata"]["resourceVersion"]
            .clone()
    };
    let before = rv(&ctx.cluster);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(rv(&ctx.cluster), before, "no status write without a change");
    for name in ["e2e-invalid", "e2e-clash"] {
        ctx.cluster
            .kubectl(&["delete", "clustersteppolicy", name])
            .expect_ok("delete");
    }
    format!(
        "examples READY True; invalid: False/Invalid ({why_invalid:.60}...); clash: False/Conflict; \
         fixed at generation {generation}: True/Loaded, observedGeneration {generation}; \
         Event {loaded:?}"
    )
}

pub(super) fn scenario_taskrun_events(ctx: &mut Ctx) -> String {
    // A dry run first: were it to get an Event, it would come before the real one's.
    let mut dry = taskrun(TEAM_A, "", "work");
    dry["metadata"] = json!({"name": "events-dry-run", "namespace": TEAM_A});
    ctx.cluster.dry_run(&dry).expect_ok("dry-run");
    // A real one, by generateName: the Event names the generated name and the uid.
    let created = ctx
        .cluster
        .create(&taskrun(TEAM_A, "events-", "work"))
        .expect_ok("create a TaskRun")
        .json();
    let (name, uid) = (
        metadata_str(&created, "name"),
        metadata_str(&created, "uid"),
    );
    let injected = poll_event(
        &ctx.cluster,
        TEAM_A,
        &format!("involvedObject.uid={uid}"),
        "StepsInjected",
    );
    assert!(
        injected.contains("ClusterStepPolicy/org-credentials: bookend-credentials")
            && injected.contains("ClusterStepPolicy/org-sbom: bookend-sbom, bookend-sbom-upload"),
        "policies and steps: {injected}"
    );
    let event = &events(&ctx.cluster, TEAM_A, &format!("involvedObject.uid={uid}"))[0];
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["involvedObject"]["name"], json!(name));
    assert_eq!(event["reportingComponent"], "bookend");
    // A remote Task: the namespace's policies go into the resolved Task at Tekton's
    // controller's dry-run, and the Event says so.
    let remote = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": "events-remote-", "namespace": TEAM_A},
        "spec": {"taskRef": {"resolver": "git", "params": [
            {"name": "url", "value": "https://example.com/org/tasks.git"},
            {"name": "pathInRepo", "value": "build.yaml"},
        ]}},
    });
    let remote = ctx
        .cluster
        .create(&remote)
        .expect_ok("create a remote-Task TaskRun")
        .json();
    let skipped = poll_event(
        &ctx.cluster,
        TEAM_A,
        &format!("involvedObject.uid={}", metadata_str(&remote, "uid")),
        "StepsInjected",
    );
    assert!(
        skipped.starts_with("at the Task's resolution, injects ")
            && skipped.contains("ClusterStepPolicy/org-credentials: bookend-credentials"),
        "{skipped}"
    );
    let dry_events = events(&ctx.cluster, TEAM_A, "involvedObject.name=events-dry-run");
    assert!(
        dry_events.is_empty(),
        "no Event for a dry run: {dry_events:?}"
    );
    let (_, metrics) = ctx.bookend.admin_get("/metrics").expect("/metrics");
    let posted = metrics
        .lines()
        .find(|l| l.starts_with(r#"bookend_events_total{regarding="taskrun",result="success"}"#))
        .unwrap_or("")
        .to_owned();
    format!("{name}: {injected:?}; remote: {skipped:?}; dry run: none; {posted}")
}

pub(super) fn scenario_policy_reports(ctx: &mut Ctx) -> String {
    // Without the CRD (the chart's default) bookend said so once and carried on.
    let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
    assert!(
        log.contains("no report CRD installed (openreports.io/v1alpha1 Report or wgpolicyk8s.io/v1alpha2 PolicyReport)"),
        "bookend logs the missing CRDs"
    );
    assert!(
        !ctx.cluster
            .kubectl(&["get", "crd", "policyreports.wgpolicyk8s.io"])
            .ok(),
        "no PolicyReport CRD yet"
    );
    // The chart installs it on request; bookend finds it without a restart.
    helm_upgrade(&ctx.cluster, &["--set", "policyReports.installCRD=true"])
        .expect_ok("helm upgrade --set policyReports.installCRD=true");
    poll(
        "the PolicyReport CRD in discovery",
        Duration::from_secs(60),
        || {
            ctx.cluster
                .kubectl(&["get", "policyreports", "-A"])
                .succeeded()
        },
    );
    poll("bookend to find the CRD", Duration::from_secs(60), || {
        let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
        if log.contains("report CRD found") && log.contains("wgpolicyk8s.io/v1alpha2 PolicyReport")
        {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    });

    // An Audit policy for team-c whose step needs a param: one TaskRun passes it (would
    // inject), one does not (would deny), one has a remote Task (skipped).
    let mut step = busybox_step("bookend-e2e-audit");
    step["args"] = json!(["echo $(params.release)"]);
    let policy = cluster_policy(
        "e2e-audit",
        json!({"mode": "Audit", "match": {"namespaces": ["team-c"]}, "postSteps": [step]}),
    );
    ctx.cluster
        .apply(&policy)
        .expect_ok("apply the Audit policy");
    let with_param = json!({
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "audit-pass-", "namespace": "team-c"},
        "spec": {"params": [{"name": "release", "value": "1.0"}],
                 "taskSpec": {"params": [{"name": "release"}],
                              "steps": [{"name": "work", "image": "docker.io/library/alpine:3.20", "script": "echo"}]}},
    });
    ctx.cluster
        .poll_dry_run("the Audit policy to be loaded", &with_param, |out| {
            if out
                .warnings()
                .iter()
                .any(|w| w.contains("ClusterStepPolicy/e2e-audit would inject"))
            {
                Ok(())
            } else {
                Err(out.stderr.clone())
            }
        });
    let uid_of = |object: &Value| {
        let out = ctx
            .cluster
            .create(object)
            .expect_ok("create a TaskRun in team-c");
        metadata_str(&out.json(), "uid")
    };
    let pass = uid_of(&with_param);
    let fail = uid_of(&taskrun("team-c", "audit-fail-", "work"));
    let skip = uid_of(&json!({
        "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
        "metadata": {"generateName": "audit-skip-", "namespace": "team-c"},
        "spec": {"taskRef": {"resolver": "git"}},
    }));
    let report = poll(
        "the three results in team-c's PolicyReport",
        Duration::from_secs(60),
        || {
            let out = ctx.cluster.kubectl(&[
                "get",
                "policyreport",
                "bookend-audit",
                "-n",
                "team-c",
                "-o",
                "json",
            ]);
            let report = out.try_json()?;
            let n = report["results"].as_array().map_or(0, Vec::len);
            if n >= 3 {
                Ok(report)
            } else {
                Err(format!("{n} results"))
            }
        },
    );
    let results = report["results"].as_array().unwrap();
    let result_for = |uid: &str| {
        results
            .iter()
            .find(|r| r["resources"][0]["uid"] == uid)
            .unwrap_or_else(|| panic!("no result for {uid}: {report}"))
    };
    let (p, f, k) = (result_for(&pass), result_for(&fail), result_for(&skip));
    for r in [p, f, k] {
        assert_eq!(r["policy"], "ClusterStepPolicy/e2e-audit");
        assert_eq!(r["source"], "bookend");
        assert_eq!(r["properties"]["steps"], "bookend-e2e-audit");
        assert_eq!(r["resources"][0]["kind"], "TaskRun");
    }
    assert_eq!(
        (p["result"].as_str(), p["properties"]["outcome"].as_str()),
        (Some("pass"), Some("would-inject"))
    );
    assert_eq!(
        (f["result"].as_str(), f["properties"]["outcome"].as_str()),
        (Some("fail"), Some("would-deny"))
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap_or("")
            .contains("non-existent variable"),
        "why it would be denied: {}",
        f["message"]
    );
    assert_eq!(
        (k["result"].as_str(), k["properties"]["outcome"].as_str()),
        (Some("skip"), Some("skipped"))
    );
    assert!(
        k["message"].as_str().unwrap_or("").contains("remote Task"),
        "{}",
        k["message"]
    );
    assert_eq!(
        report["summary"],
        json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 1}),
        "the summary counts them"
    );
    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-audit"])
        .expect_ok("delete the Audit policy");
    format!(
        "no CRD: logged, serving; CRD installed by helm upgrade and found without a restart; \
         team-c: pass/fail/skip = {}/{}/{} ({:.70}...)",
        p["result"],
        f["result"],
        k["result"],
        f["message"].as_str().unwrap_or("")
    )
}

/// `--policy-report-api=auto` (the chart's default): with the PolicyReport CRD already in use,
/// the cluster gains the openreports Report CRD (tests/fixtures/openreports); bookend finds it
/// at its next look (every 30 s), without a restart, and writes new Audit results to an
/// `openreports.io/v1alpha1` Report, through the chart's RBAC for that group.
pub(super) fn scenario_openreports(ctx: &mut Ctx) -> String {
    let crd = crate::root().join("tests/fixtures/openreports/openreports.io_reports.yaml");
    ctx.cluster
        .kubectl(&["apply", "-f", &crd.display().to_string()])
        .expect_ok("apply the openreports Report CRD");
    poll("reports in discovery", Duration::from_secs(60), || {
        ctx.cluster
            .kubectl(&["get", "reports.openreports.io", "-A"])
            .succeeded()
    });
    let step = busybox_step("bookend-e2e-open-audit");
    let policy = cluster_policy(
        "e2e-open-audit",
        json!({"mode": "Audit", "match": {"namespaces": ["team-c"]}, "postSteps": [step]}),
    );
    ctx.cluster
        .apply(&policy)
        .expect_ok("apply the Audit policy");
    let probe = taskrun("team-c", "open-audit-", "work");
    ctx.cluster
        .poll_dry_run("the Audit policy to be loaded", &probe, |out| {
            if out
                .warnings()
                .iter()
                .any(|w| w.contains("ClusterStepPolicy/e2e-open-audit would inject"))
            {
                Ok(())
            } else {
                Err(out.stderr.clone())
            }
        });
    // bookend looks again when results arrive and 30 s have passed since its last look: create a
    // TaskRun every few seconds until one's result is in the Report.
    let mut uids: Vec<String> = Vec::new();
    let mut last_create: Option<std::time::Instant> = None;
    let (report, uid) = poll(
        "a result in team-c's openreports Report",
        Duration::from_secs(120),
        || {
            if last_create.is_none_or(|t| t.elapsed() >= Duration::from_secs(3)) {
                let out = ctx
                    .cluster
                    .create(&probe)
                    .expect_ok("create a TaskRun in team-c");
                uids.push(metadata_str(&out.json(), "uid"));
                last_create = Some(std::time::Instant::now());
            }
            let out = ctx.cluster.kubectl(&[
                "get",
                "reports.openreports.io",
                "bookend-audit",
                "-n",
                "team-c",
                "-o",
                "json",
            ]);
            let report = out.try_json()?;
            let found = report["results"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|r| {
                    let uid = r["resources"][0]["uid"].as_str()?;
                    uids.iter().any(|u| u == uid).then(|| uid.to_owned())
                });
            match found {
                Some(uid) => Ok((report, uid)),
                None => Err(format!("{} TaskRuns, no result yet", uids.len())),
            }
        },
    );
    assert_eq!(report["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(report["kind"], "Report");
    assert_eq!(report["source"], "bookend", "openreports names the engine");
    let result = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"][0]["uid"] == uid.as_str())
        .unwrap();
    assert_eq!(result["policy"], "ClusterStepPolicy/e2e-open-audit");
    assert_eq!(result["result"], "pass");
    assert_eq!(result["properties"]["outcome"], "would-inject");
    assert_eq!(result["properties"]["steps"], "bookend-e2e-open-audit");
    assert_eq!(result["resources"][0]["kind"], "TaskRun");
    assert!(
        report["summary"]["pass"].as_u64().unwrap_or(0) >= 1,
        "{}",
        report["summary"]
    );
    let log = std::fs::read_to_string(&ctx.bookend.log).unwrap_or_default();
    assert!(
        log.contains("report API changed"),
        "bookend logs the switch to openreports"
    );
    ctx.cluster
        .kubectl(&["delete", "clustersteppolicy", "e2e-open-audit"])
        .expect_ok("delete the Audit policy");
    format!(
        "openreports CRD installed beside the PolicyReport CRD: bookend switched without a restart \
         after {} TaskRun(s); team-c's Report: {} result(s), summary {}",
        uids.len(),
        report["results"].as_array().map_or(0, Vec::len),
        report["summary"]
    )
}

/// The cluster's Tekton: bookend reads `pipelines-info` and `feature-flags`. On v0.62.3 with
/// Tekton's default flags the example `Always` policy (org-sbom) turns READY False, reason
/// TektonUnsupported, and a TaskRun it matches is refused naming the flag; setting
/// `enable-step-actions: "true"` turns it READY True and the TaskRun is admitted again; without
/// the ConfigMaps bookend assumes the newest Tekton.
pub(super) fn scenario_tekton_version(ctx: &mut Ctx) -> String {
    let run = super::objects::yaml_docs(&super::objects::example("examples/taskruns/build.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "TaskRun")
        .expect("a TaskRun in build.yaml");
    let config_map = |name: &str, data: Value| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "tekton-pipelines"}, "data": data})
    };
    let _ = ctx
        .cluster
        .kubectl(&["create", "namespace", "tekton-pipelines"]);
    poll_ready(&ctx.cluster, "org-sbom", ["True", "Loaded"]);
    ctx.cluster
        .apply(&config_map("pipelines-info", json!({"version": "v0.62.3"})))
        .expect_ok("Tekton's pipelines-info");
    poll_ready(&ctx.cluster, "org-sbom", ["False", "TektonUnsupported"]);
    let message = ctx.cluster.get_json(
        &["clustersteppolicy", "org-sbom"],
        "kubectl get clustersteppolicy org-sbom",
    )["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\""),
        "{message}"
    );
    let refused = ctx.cluster.dry_run(&run);
    assert!(
        !refused.ok() && refused.stderr.contains("set enable-step-actions: \"true\""),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
    ctx.cluster
        .apply(&config_map(
            "feature-flags",
            json!({"enable-step-actions": "true"}),
        ))
        .expect_ok("Tekton's feature flags");
    poll_ready(&ctx.cluster, "org-sbom", ["True", "Loaded"]);
    ctx.cluster.poll_dry_run(
        "admitted with enable-step-actions",
        &run,
        crate::kube::Out::succeeded,
    );
    for name in ["feature-flags", "pipelines-info"] {
        ctx.cluster
            .kubectl(&["delete", "configmap", "-n", "tekton-pipelines", name])
            .expect_ok("delete Tekton's ConfigMap");
    }
    poll_ready(&ctx.cluster, "org-sbom", ["True", "Loaded"]);
    format!(
        "v0.62.3 default flags: TektonUnsupported ({}); enable-step-actions: Loaded",
        first_line(&refused.stderr)
    )
}
