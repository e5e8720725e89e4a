//! The chart's RBAC against what bookend does with it. In the main e2e test the API server
//! audits bookend's requests (start-cluster.sh's `E2E_AUDIT_USERS`): after the scenarios, every
//! grant of the chart's ClusterRole must have been used and no request refused. A test of its
//! own takes each rule away in turn and shows what a user sees break.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::Ctx;
use super::bookend::Bookend;
use super::certificates::Certs;
use super::helm::{RELEASE, RELEASE_NAMESPACE, helm_install, service_account_kubeconfig};
use super::objects::{busybox_step, first_line, metadata_str, taskrun};
use super::pod_backstop::taskrun_pod;
use super::tasks::impersonate_tekton_controller;
use crate::kube::{Clock, Cluster, cluster_policy, free_port, poll};
use crate::tools::tools;

/// The user the chart's ServiceAccount authenticates as.
pub(super) fn bookend_user() -> String {
    format!("system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}")
}

/// (API group, resource or resource/subresource, verb).
type Grant = (String, String, String);

/// Every (group, resource, verb) the chart's ClusterRole grants, as installed.
pub(super) fn granted(cluster: &Cluster) -> BTreeSet<Grant> {
    let role = cluster.get_json(&["clusterrole", RELEASE], "the chart's ClusterRole");
    let mut grants = BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    grants.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    grants
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// bookend's requests as the API server audited them: what was allowed (any answer but 401
/// and 403) and what was refused (403), each with one example URI.
fn audited(cluster: &Cluster) -> (BTreeSet<Grant>, Vec<String>) {
    let log = std::fs::read_to_string(cluster.dir.join("audit.log"))
        .expect("audit.log (start-cluster.sh with E2E_AUDIT_USERS)");
    let user = bookend_user();
    let (mut allowed, mut refused) = (BTreeSet::new(), Vec::new());
    for line in log.lines() {
        let event: Value = serde_json::from_str(line).expect("an audit event per line");
        if event["user"]["username"] != user.as_str() {
            continue;
        }
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        let verb = event["verb"].as_str().unwrap_or("").to_owned();
        let uri = event["requestURI"].as_str().unwrap_or("").to_owned();
        if code == 403 {
            refused.push(format!("{verb} {uri}"));
            continue;
        }
        let object = &event["objectRef"];
        // Discovery (non-resource URLs) is every authenticated user's (system:discovery).
        let Some(resource) = object["resource"].as_str() else {
            continue;
        };
        // So is asking who one is (system:basic-user): bookend's SelfSubjectReview at start.
        if (object["apiGroup"].as_str(), resource)
            == (Some("authentication.k8s.io"), "selfsubjectreviews")
        {
            continue;
        }
        let resource = match object["subresource"].as_str() {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        };
        let group = object["apiGroup"].as_str().unwrap_or("").to_owned();
        allowed.insert((group, resource, verb));
    }
    (allowed, refused)
}

/// Grants the e2e run does not reach, and why each stays (docs/security.md, "RBAC").
const KEPT_UNUSED: &[(&str, &str, &str, &str)] = &[
    (
        "events.k8s.io",
        "events",
        "patch",
        "kube-runtime's Recorder patches an Event that repeats (its series count); no Event repeats here",
    ),
    (
        "wgpolicyk8s.io",
        "policyreports",
        "update",
        "a namespace's later batch replaces its existing report; chart_rbac_each_rule_is_needed writes two batches",
    ),
];

/// Run after every scenario that uses the API (and before the uninstall, which takes the
/// binding away under the running bookend).
pub(super) fn scenario_rbac_audit(ctx: &mut Ctx) -> String {
    let (used, refused) = audited(&ctx.cluster);
    assert!(
        refused.is_empty(),
        "the API server refused bookend (the chart's RBAC lacks a rule): {refused:#?}"
    );
    let granted = granted(&ctx.cluster);
    let kept = |g: &Grant| {
        KEPT_UNUSED.iter().any(|(group, resource, verb, _)| {
            (g.0.as_str(), g.1.as_str(), g.2.as_str()) == (*group, *resource, *verb)
        })
    };
    let unused: Vec<&Grant> = granted.difference(&used).filter(|g| !kept(g)).collect();
    assert!(
        unused.is_empty(),
        "the chart grants what bookend never used in the whole e2e run: {unused:?} (remove it from charts/bookend/templates/rbac.yaml, or exercise it here)"
    );
    let beyond: Vec<&Grant> = used.difference(&granted).collect();
    assert!(
        beyond.is_empty(),
        "allowed beyond the ClusterRole: {beyond:?}"
    );
    format!(
        "{} grants, {} used, {} kept unused (documented); {} (group, resource, verb) used in all, 0 requests refused",
        granted.len(),
        granted.intersection(&used).count(),
        granted
            .iter()
            .filter(|g| kept(g) && !used.contains(*g))
            .count(),
        used.len()
    )
}

// ---------------------------------------------------------------------------------------------
// Each rule taken away in turn

/// What a rule of the chart's ClusterRole is for, as something a user sees break without it.
#[derive(Clone, Copy, Debug)]
enum Use {
    /// A cache bookend waits for before it is ready: without the rule its watch is refused and
    /// /readyz never turns 200 (the fail-closed webhooks then refuse every TaskRun).
    Cache(&'static [&'static str]),
    /// Policies' status (READY column, conditions).
    Status,
    /// Tekton's feature flags and config-defaults: bookend's refusal naming
    /// `disable-inline-spec`.
    TektonConfig,
    /// The Pod backstop's TaskRun GET.
    PodBackstop,
    /// PolicyReports of Audit policies.
    Reports,
    /// Events on TaskRuns and policies.
    Events,
}

/// The use of a rule, by what it grants; `None` for a rule this test does not know.
fn use_of(rule: &Value) -> Option<Use> {
    let resources = strings(&rule["resources"]);
    let has = |r: &str| resources.iter().any(|x| x == r);
    Some(if has("clustersteppolicies") || has("steppolicies") {
        Use::Cache(&["ClusterStepPolicy", "StepPolicy"])
    } else if has("clustersteppolicies/status") || has("steppolicies/status") {
        Use::Status
    } else if has("namespaces") {
        Use::Cache(&["Namespace"])
    } else if has("tasks") || has("stepactions") {
        Use::Cache(&["Task", "StepAction"])
    } else if has("configmaps") {
        Use::TektonConfig
    } else if has("taskruns") {
        Use::PodBackstop
    } else if has("policyreports") && strings(&rule["apiGroups"]) == ["wgpolicyk8s.io"] {
        Use::Reports
    } else if has("events") {
        Use::Events
    } else {
        return None;
    })
}

/// One cluster with the chart installed (the PolicyReport CRD too), bookend started again and
/// again as the chart's ServiceAccount, the ClusterRole changed under it.
struct Rig {
    cluster: Cluster,
    certs: Certs,
    work: PathBuf,
    port: u16,
    kubeconfig: PathBuf,
    as_controller: String,
    runs: usize,
}

const PROBE_NS: &str = "rbac-probe";
const TASK: &str = "rbac-unit";

impl Rig {
    fn bookend(&mut self, label: &str) -> Bookend {
        self.runs += 1;
        let dir = self.work.join(format!("run-{}-{label}", self.runs));
        std::fs::create_dir_all(&dir).expect("mkdir");
        Bookend::start(
            &dir,
            self.port,
            &self.certs.live("tls.crt"),
            &self.certs.live("tls.key"),
            &self.kubeconfig,
        )
    }

    /// A namespace of its own for one check (Events and reports are per namespace).
    fn namespace(&self, what: &str) -> String {
        let ns = format!("rbac-{what}-{}", self.runs);
        self.cluster
            .kubectl(&["create", "namespace", &ns])
            .expect_ok("create namespace");
        ns
    }

    /// Whether the chart's ServiceAccount may do the first thing `rule` grants.
    fn can(&self, rule: &Value) -> bool {
        let verb = strings(&rule["verbs"])[0].clone();
        let (resource, sub) = match strings(&rule["resources"])[0].split_once('/') {
            Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
            None => (strings(&rule["resources"])[0].clone(), None),
        };
        let group = strings(&rule["apiGroups"])[0].clone();
        let mut target = if group.is_empty() {
            resource
        } else {
            format!("{resource}.{group}")
        };
        if let Some(name) = strings(&rule["resourceNames"]).first() {
            target = format!("{target}/{name}");
        }
        let user = format!("--as={}", bookend_user());
        let mut args = vec!["auth", "can-i", verb.as_str(), target.as_str(), &user, "-A"];
        let sub = sub.map(|s| format!("--subresource={s}"));
        if let Some(sub) = &sub {
            args.push(sub);
        }
        self.cluster.kubectl(&args).stdout.trim() == "yes"
    }

    /// Replaces the chart's ClusterRole's rules, and waits until the authorizer has it.
    fn set_rules(&self, role: &Value, rules: Vec<Value>, probe: &Value, allowed: bool) {
        let mut role = role.clone();
        role["rules"] = Value::Array(rules);
        let meta = role["metadata"].as_object_mut().expect("metadata");
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(field);
        }
        self.cluster
            .with_object(&["replace"], &role)
            .expect_ok("replace the ClusterRole");
        poll("the authorizer to see the ClusterRole", WAIT, || {
            if self.can(probe) == allowed {
                Ok(())
            } else {
                Err(format!("can-i still says {}", !allowed))
            }
        });
    }
}

const WAIT: Duration = Duration::from_secs(60);

/// The first log line of `bookend` containing every one of `parts`, polled for.
fn poll_log(bookend: &Bookend, what: &str, parts: &[&str]) -> String {
    poll(what, WAIT, || {
        let log = std::fs::read_to_string(&bookend.log).unwrap_or_default();
        log.lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
            .ok_or_else(|| format!("no line with {parts:?} yet"))
    })
}

fn short(line: &str) -> String {
    line.chars().take(220).collect()
}

/// Checks what `use_` is for: working when `granted`, failing visibly (and bookend naming the
/// refusal in its log) when not. Returns what was seen.
fn check(rig: &mut Rig, use_: Use, granted: bool) -> String {
    let mut bookend = rig.bookend(
        &format!("{use_:?}")
            .to_lowercase()
            .replace(['(', ')', '[', ']', '"', ',', ' '], ""),
    );
    if let Use::Cache(kinds) = use_ {
        if granted {
            bookend.wait_ready(WAIT);
            return "ready".to_owned();
        }
        let line = poll(&format!("a refused watch of {kinds:?}"), WAIT, || {
            let log = std::fs::read_to_string(&bookend.log).unwrap_or_default();
            log.lines()
                .find(|l| {
                    l.contains("watch error")
                        && l.contains("forbidden")
                        && kinds.iter().any(|k| l.contains(&format!("kind={k}")))
                })
                .map(str::to_owned)
                .ok_or_else(|| "no refused watch yet".to_owned())
        });
        let (status, _) = bookend.admin_get("/readyz").expect("/readyz answers");
        assert_ne!(status, 200, "ready without its caches: {line}");
        return format!("/readyz {status} (never ready): {}", short(&line));
    }
    bookend.wait_ready(WAIT);
    match use_ {
        Use::Cache(_) => unreachable!(),
        Use::Status => {
            let name = format!("rbac-status-{}", rig.runs);
            let mut step = busybox_step(&format!("bookend-{name}"));
            step["args"] = json!(["echo status"]);
            let policy = cluster_policy(
                &name,
                json!({"match": {"namespaces": ["rbac-nowhere"]}, "preSteps": [step]}),
            );
            rig.cluster.apply(&policy).expect_ok("apply a policy");
            let ready = |cluster: &Cluster| {
                let p = cluster.get_json(&["clustersteppolicy", &name], "the policy");
                p["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .map(|c| c["status"].as_str().unwrap_or("").to_owned())
            };
            if granted {
                poll("the policy's status", WAIT, || {
                    ready(&rig.cluster)
                        .filter(|s| s == "True")
                        .ok_or_else(|| "no Ready condition".to_owned())
                });
                "status Ready=True written".to_owned()
            } else {
                let line = poll_log(
                    &bookend,
                    "bookend to fail writing the status",
                    &["cannot write the policy's status", &name],
                );
                assert_eq!(ready(&rig.cluster), None, "no status without the rule");
                format!("no READY status: {}", short(&line))
            }
        }
        Use::TektonConfig => {
            let run = json!({
                "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"generateName": "inline-", "namespace": PROBE_NS},
                "spec": {"taskRef": {"name": TASK}},
            });
            if granted {
                let out = rig.cluster.poll_dry_run(
                    "bookend to refuse inlining under disable-inline-spec",
                    &run,
                    |out| {
                        if out.stderr.contains("disable-inline-spec lists taskrun") {
                            Ok(())
                        } else {
                            Err(format!("{} {}", out.stdout, out.stderr))
                        }
                    },
                );
                format!("refused: {}", first_line(&out.stderr))
            } else {
                let line = poll_log(
                    &bookend,
                    "a refused watch of Tekton's ConfigMaps",
                    &["watch error", "forbidden", "kind=ConfigMap"],
                );
                let out = rig.cluster.dry_run(&run).expect_ok("dry-run: inlined");
                assert!(
                    out.json()["spec"]["taskSpec"].is_object(),
                    "inlined although Tekton refuses spec.taskSpec: {}",
                    out.stdout
                );
                format!(
                    "inlined despite disable-inline-spec (Tekton would refuse it without bookend's message): {}",
                    short(&line)
                )
            }
        }
        Use::PodBackstop => {
            let ns = rig.namespace("pods");
            let remote = json!({
                "apiVersion": "tekton.dev/v1", "kind": "TaskRun",
                "metadata": {"generateName": "remote-", "namespace": ns},
                "spec": {"taskRef": {"resolver": "git", "params": [
                    {"name": "url", "value": "https://git.example.com/tasks.git"}]}},
            });
            let taskrun = rig
                .cluster
                .create(&remote)
                .expect_ok("a remote TaskRun")
                .json();
            let task = json!({
                "apiVersion": "tekton.dev/v1", "kind": "Task",
                "metadata": {"generateName": "resolved-", "namespace": ns},
                "spec": {"steps": [{"name": "remote-build", "image": "docker.io/library/alpine:3.20",
                                    "script": "echo remote"}]},
            });
            let injected = rig
                .cluster
                .with_object(&["create", "--dry-run=server", &rig.as_controller], &task)
                .expect_ok("the controller's dry-run of the Task")
                .json();
            let pod = taskrun_pod(
                &ns,
                &metadata_str(&taskrun, "name"),
                &metadata_str(&taskrun, "uid"),
                &injected,
            );
            let out = rig
                .cluster
                .with_object(&["create", &rig.as_controller], &pod);
            if granted {
                out.expect_ok("the TaskRun's Pod with its steps");
                "the Pod with its steps admitted".to_owned()
            } else {
                assert!(
                    !out.ok() && out.stderr.contains("cannot read TaskRun"),
                    "the backstop fails closed: {} {}",
                    out.stdout,
                    out.stderr
                );
                format!(
                    "every TaskRun Pod refused: {}",
                    short(&first_line(&out.stderr))
                )
            }
        }
        Use::Reports => {
            let ns = rig.namespace("reports");
            let audited = taskrun(&ns, "audited-", "work");
            rig.cluster
                .create(&audited)
                .expect_ok("a TaskRun the Audit policy reports");
            // (reports in the namespace, results in them)
            let reports = |cluster: &Cluster| {
                let items =
                    cluster.get_json(&["policyreports", "-n", &ns], "PolicyReports")["items"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                let results = items
                    .iter()
                    .map(|r| r["results"].as_array().map_or(0, Vec::len))
                    .sum::<usize>();
                (items.len(), results)
            };
            if granted {
                poll("the namespace's PolicyReport", WAIT, || {
                    (reports(&rig.cluster) == (1, 1))
                        .then_some(())
                        .ok_or_else(|| "not yet".to_owned())
                });
                // A second batch replaces the report (`update`).
                rig.cluster
                    .create(&audited)
                    .expect_ok("a second TaskRun the Audit policy reports");
                poll("the second result in the report", WAIT, || {
                    (reports(&rig.cluster) == (1, 2))
                        .then_some(())
                        .ok_or_else(|| "not yet".to_owned())
                });
                "PolicyReport written, then updated with a second result".to_owned()
            } else {
                let line = poll_log(
                    &bookend,
                    "bookend to fail writing the PolicyReport",
                    &["cannot write the PolicyReport", &ns],
                );
                assert_eq!(reports(&rig.cluster), (0, 0), "no report without the rule");
                format!("no PolicyReport: {}", short(&line))
            }
        }
        Use::Events => {
            let ns = rig.namespace("events");
            let created = rig
                .cluster
                .create(&taskrun(&ns, "evented-", "work"))
                .expect_ok("a TaskRun bookend injects into")
                .json();
            let selector = format!("involvedObject.uid={}", metadata_str(&created, "uid"));
            let events = |cluster: &Cluster| {
                cluster.get_json(
                    &["events", "-n", &ns, "--field-selector", &selector],
                    "Events",
                )["items"]
                    .as_array()
                    .map_or(0, Vec::len)
            };
            if granted {
                poll("the TaskRun's StepsInjected Event", WAIT, || {
                    (events(&rig.cluster) > 0)
                        .then_some(())
                        .ok_or_else(|| "none yet".to_owned())
                });
                "Event posted".to_owned()
            } else {
                let line = poll_log(
                    &bookend,
                    "bookend to fail posting the Event",
                    &["cannot post the TaskRun's Event"],
                );
                assert_eq!(events(&rig.cluster), 0, "no Event without the rule");
                format!("no Events: {}", short(&line))
            }
        }
    }
}

/// The chart's RBAC, rule by rule: with every rule bookend does all it is for; without any one
/// of them something a user sees breaks, named here (docs/security.md, "RBAC").
#[test]
fn chart_rbac_each_rule_is_needed() {
    let mut clock = Clock::new("rbac");
    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-rbac-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    let cluster = Cluster::start(work.join("cluster"));
    let certs = Certs::create(work.join("certs"));
    let port = free_port();
    helm_install(
        &cluster,
        port,
        &certs.ca_bundle_b64(),
        // One report API (the default, auto, grants both groups): the checks write
        // wgpolicyk8s.io PolicyReports; the openreports.io rule is the same writer with the other
        // group, its use shown by the main test's audit.
        &[
            "--set",
            "policyReports.installCRD=true",
            "--set",
            "policyReports.api=wgpolicyk8s",
        ],
    )
    .expect_ok("helm install");
    poll("the chart's CRDs served", WAIT, || {
        for kind in [
            "clustersteppolicies.bookend.dev",
            "policyreports.wgpolicyk8s.io",
        ] {
            cluster.kubectl(&["get", kind, "-A"]).succeeded()?;
        }
        Ok(())
    });
    let kubeconfig = service_account_kubeconfig(&cluster, &work.join("bookend.kubeconfig"));
    // What the checks need: a namespace with a Task, Tekton's flag refusing inline specs, an
    // Enforce and an Audit policy for rbac-* namespaces (applied while a full bookend runs: the
    // policy webhook calls it).
    for ns in [PROBE_NS, "tekton-pipelines"] {
        cluster
            .kubectl(&["create", "namespace", ns])
            .expect_ok("create namespace");
    }
    cluster
        .apply(&json!({
            "apiVersion": "tekton.dev/v1", "kind": "Task",
            "metadata": {"name": TASK, "namespace": PROBE_NS},
            "spec": {"steps": [{"name": "test", "image": "docker.io/library/alpine:3.20",
                                "script": "echo"}]},
        }))
        .expect_ok("a Task");
    cluster
        .apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "feature-flags", "namespace": "tekton-pipelines"},
            "data": {"disable-inline-spec": "taskrun"},
        }))
        .expect_ok("Tekton's feature flags");
    let as_controller = impersonate_tekton_controller(&cluster, &["pods", "tasks"]);
    let mut rig = Rig {
        cluster,
        certs,
        work,
        port,
        kubeconfig,
        as_controller,
        runs: 0,
    };
    {
        let mut bookend = rig.bookend("setup");
        bookend.wait_ready(WAIT);
        let mut pre = busybox_step("bookend-rbac-pre");
        pre["args"] = json!(["echo pre"]);
        let mut audit = busybox_step("bookend-rbac-audit");
        audit["args"] = json!(["echo audit"]);
        for policy in [
            cluster_policy(
                "rbac-enforce",
                json!({"match": {"namespaces": ["rbac-*"]}, "preSteps": [pre]}),
            ),
            cluster_policy(
                "rbac-audit",
                json!({"mode": "Audit", "match": {"namespaces": ["rbac-*"]}, "postSteps": [audit]}),
            ),
        ] {
            rig.cluster.apply(&policy).expect_ok("apply a policy");
        }
    }
    clock.done("cluster, chart (with the PolicyReport CRD), Task, flags, policies");

    let role = rig
        .cluster
        .get_json(&["clusterrole", RELEASE], "the chart's ClusterRole");
    let rules = role["rules"].as_array().expect("rules").clone();
    let unknown: Vec<&Value> = rules.iter().filter(|r| use_of(r).is_none()).collect();
    assert!(
        unknown.is_empty(),
        "rules this test cannot take away (add what each is for to use_of and check): {unknown:?}"
    );

    // With every rule: each use works (so that its failure below is the rule's doing).
    let mut uses: Vec<Use> = Vec::new();
    for rule in &rules {
        let use_ = use_of(rule).unwrap();
        if !uses.iter().any(|u| format!("{u:?}") == format!("{use_:?}")) {
            uses.push(use_);
        }
    }
    let mut summary = Vec::new();
    for use_ in &uses {
        let seen = check(&mut rig, *use_, true);
        summary.push(format!("all rules, {use_:?}: {seen}"));
    }
    clock.done("every rule: each use works");

    for (i, rule) in rules.iter().enumerate() {
        let use_ = use_of(rule).unwrap();
        let mut fewer = rules.clone();
        fewer.remove(i);
        rig.set_rules(&role, fewer, rule, false);
        let seen = check(&mut rig, use_, false);
        rig.set_rules(&role, rules.clone(), rule, true);
        let line = format!(
            "without {} {:?} {:?}: {seen}",
            strings(&rule["apiGroups"]).join(","),
            strings(&rule["resources"]),
            strings(&rule["verbs"])
        );
        println!("[rbac] {line}");
        summary.push(line);
        clock.done(&format!("rule {i} taken away"));
    }
    println!("\n=== the chart's RBAC, rule by rule ===");
    for line in &summary {
        println!("{line}");
    }
    clock.print_phases();
    drop(rig);
    if std::env::var_os("BOOKEND_E2E_KEEP").is_some() {
        println!("kept {}", tmp.keep().display());
    }
}
