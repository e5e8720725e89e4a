//! The attack classes of tests/security through a real kube-apiserver: the same policies, Tasks
//! and TaskRuns (`cases`, `classes`, shared by `#[path]`), each TaskRun sent as a real CREATE,
//! and the same invariant (`oracle`) checked on what the apiserver stored. Tekton's own
//! validation (`tekton-validate`) then reads every stored TaskRun.

use std::process::Command;
use std::time::Duration;

use bookend::engine::{Catalog, Decision, Outcome};
use bookend::policy::load::{policy_set_from_yaml, yaml_documents};
use bookend::policy::{PolicySet, Settings};
use serde_json::{Value, json};

use crate::cases::{self, Case, Expect};
use crate::kube::{Kubectl, Out, names, poll, run};
use crate::oracle;
use crate::tools::tools;

/// The namespaces the cases are created in.
const NAMESPACES: [&str; 4] = ["team-a", "strict", "skip", "open"];

/// How many `kubectl create`s run at once.
const SENDERS: usize = 4;

/// The policies as bookend loads them (the oracle reads them), with bookend serve's defaults.
fn policies() -> PolicySet {
    let loaded = policy_set_from_yaml("security.yaml", cases::POLICIES, Settings::default());
    assert!(loaded.issues.is_empty(), "{:?}", loaded.issues);
    loaded.set
}

/// The Tasks as objects to create (no resourceVersion: the apiserver sets it).
fn tasks() -> Vec<Value> {
    let mut tasks = yaml_documents(cases::TASKS).expect("cases::TASKS");
    for task in &mut tasks {
        if let Some(meta) = task["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
    }
    tasks
}

/// The Tasks as bookend's cache holds them, for the oracle.
fn catalog() -> Catalog {
    let mut catalog = Catalog::default();
    catalog.add_objects(&tasks(), "team-a");
    catalog
}

/// What the apiserver stored, seen as the TaskRun bookend admitted: the TaskRun as sent with the
/// stored `spec`, labels and annotations (the apiserver's own fields left out).
fn as_admitted(sent: &Value, stored: &Value) -> Value {
    let mut admitted = sent.clone();
    admitted["spec"] = stored["spec"].clone();
    for key in ["labels", "annotations"] {
        let meta = admitted["metadata"].as_object_mut().expect("metadata");
        match stored["metadata"].get(key) {
            Some(v) if !v.is_null() => {
                meta.insert(key.to_owned(), v.clone());
            }
            _ => {
                meta.remove(key);
            }
        }
    }
    admitted
}

fn decision(outcome: Outcome, object: Value, message: Option<String>) -> Decision {
    Decision {
        outcome,
        patch: Vec::new(),
        object,
        message,
        warnings: Vec::new(),
        audit_annotations: Default::default(),
        injected: Vec::new(),
    }
}

/// The webhook that refused a request, and its message, from kubectl's error.
fn refusal(stderr: &str) -> Option<(String, String)> {
    let line = stderr
        .lines()
        .find(|l| l.contains("denied the request: "))?;
    let webhook = line
        .split("admission webhook \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
        .to_owned();
    let at = stderr.find("denied the request: ")? + "denied the request: ".len();
    Some((webhook, stderr[at..].trim().to_owned()))
}

/// One TaskRun to send: a case, or a variant of one.
struct Send {
    name: String,
    namespace: &'static str,
    taskrun: Value,
    expect: Answer,
}

/// The answer a TaskRun must get through the apiserver.
#[derive(Clone, Copy)]
enum Answer {
    /// The case's own answer, from bookend.
    Case(Expect),
    /// Refused by the apiserver itself (its schema, kubectl's strict field validation) before any
    /// webhook sees it, with this text.
    Schema(&'static str),
}

/// The TaskRuns to send for the cases. A `tekton.dev/v1` TaskRun with `taskRef.bundle` (a field
/// of v1beta1 only) never reaches a webhook: the apiserver refuses the unknown field (kubectl's
/// default strict validation; without it the field is pruned). The form reaches bookend as
/// `tekton.dev/v1beta1`, so that is sent too, with the case's answer.
fn sends(cases: Vec<Case>) -> Vec<Send> {
    let mut sends = Vec::new();
    for case in cases {
        let v1_bundle = case.taskrun["apiVersion"] == "tekton.dev/v1"
            && case.taskrun["spec"]["taskRef"].get("bundle").is_some();
        if v1_bundle {
            let mut v1beta1 = case.taskrun.clone();
            v1beta1["apiVersion"] = json!("tekton.dev/v1beta1");
            sends.push(Send {
                name: format!("{} (as tekton.dev/v1beta1)", case.name),
                namespace: case.namespace,
                taskrun: v1beta1,
                expect: Answer::Case(case.expect),
            });
        }
        sends.push(Send {
            name: case.name.to_owned(),
            namespace: case.namespace,
            taskrun: case.taskrun,
            expect: if v1_bundle {
                Answer::Schema("unknown field \"spec.taskRef.bundle\"")
            } else {
                Answer::Case(case.expect)
            },
        });
    }
    sends
}

/// Sends every TaskRun as a real CREATE, `SENDERS` at a time; kubectl's results in order.
fn send_all(kubectl: &Kubectl, sends: &[Send]) -> Vec<Out> {
    let chunk = sends.len().div_ceil(SENDERS).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = sends
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|s| kubectl.with_object(&["create"], &s.taskrun))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a sender thread"))
            .collect()
    })
}

/// `tekton-validate --json` over `objects`: (ok, error) for each.
fn tekton_validate(objects: &[&Value], dir: &std::path::Path) -> Vec<(bool, String)> {
    let path = dir.join("attack-classes.json");
    std::fs::write(&path, serde_json::to_vec(objects).unwrap()).expect("write");
    let mut cmd = Command::new(tools().path("tekton-validate"));
    cmd.arg("--json").arg(&path);
    let out = run(cmd, None);
    let results: Vec<Value> = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("tekton-validate --json: {e}: {} {}", out.stdout, out.stderr));
    assert_eq!(results.len(), objects.len(), "one result per object");
    results
        .iter()
        .map(|r| {
            (
                r["ok"] == json!(true),
                r["error"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Tekton's error with step indexes left out: bookend's steps shift the author's.
fn without_indexes(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    let mut chars = error.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '[' {
            while chars.peek().is_some_and(char::is_ascii_digit) {
                chars.next();
            }
        }
    }
    out
}

/// Dry-runs `object` until `check` accepts kubectl's result (bookend's caches catch up with new
/// policies and Tasks asynchronously).
fn poll_until(kubectl: &Kubectl, what: &str, object: &Value, check: impl Fn(&Out) -> bool) {
    poll(what, Duration::from_secs(30), || {
        let out = kubectl.with_object(&["create", "--dry-run=server"], object);
        if check(&out) {
            Ok(())
        } else {
            Err(format!("{}{}", out.stdout, out.stderr))
        }
    });
}

fn has_steps(out: &Out, wanted: &[&str]) -> bool {
    out.try_json().is_ok_and(|o| {
        let steps = names(&o["spec"]["taskSpec"]["steps"]);
        wanted.iter().all(|w| steps.iter().any(|s| s == w))
    })
}

/// Installs the security policies and Tasks in place of `examples/policies`, sends every case,
/// checks each answer, and puts the example policies back.
pub fn scenario(kubectl: &Kubectl, examples: &std::path::Path, work: &std::path::Path) -> String {
    let examples = examples.display().to_string();
    // The oracle knows the security policies only: nothing else may apply.
    kubectl.ok(&["delete", "-f", &examples], "delete examples/policies");
    for kind in ["clustersteppolicies", "steppolicies"] {
        let left = kubectl
            .ok(&["get", kind, "-A", "-o", "name"], "list policies")
            .stdout;
        assert!(left.trim().is_empty(), "policies left: {left}");
    }
    for ns in &NAMESPACES[1..] {
        kubectl.ok(&["create", "namespace", ns], "create namespace");
    }
    kubectl
        .run(&["apply", "-f", "-"], Some(cases::POLICIES.as_bytes()))
        .expect_ok("apply the security policies");
    let tasks = tasks();
    for task in &tasks {
        kubectl
            .with_object(&["create"], task)
            .expect_ok("create a Task");
    }
    // bookend sees every policy and Task: a probe for each.
    let probe = |ns: &str, spec: Value| {
        let mut t = cases::with_spec(spec);
        t["metadata"]["namespace"] = json!(ns);
        t
    };
    let inline = json!({"taskSpec": {"steps": [cases::build_step()]}});
    poll_until(
        kubectl,
        "the org and team policies in team-a, and Task build",
        &probe("team-a", json!({"taskRef": {"name": "build"}})),
        |out| {
            has_steps(
                out,
                &["bookend-creds", "bookend-team-lint", "bookend-upload"],
            )
        },
    );
    poll_until(
        kubectl,
        "Task signed in team-a",
        &probe("team-a", json!({"taskRef": {"name": "signed"}})),
        |out| out.stderr.contains("trusted-resources signature"),
    );
    poll_until(
        kubectl,
        "strict-refs",
        &probe("strict", inline.clone()),
        |out| has_steps(out, &["bookend-strict"]),
    );
    poll_until(
        kubectl,
        "skip-refs",
        &probe("skip", inline.clone()),
        |out| has_steps(out, &["bookend-skip-pre"]),
    );
    poll_until(kubectl, "open-workspaces", &probe("open", inline), |out| {
        has_steps(out, &["bookend-open"])
    });

    let (set, catalog) = (policies(), catalog());
    let all = sends(cases::all());
    let sent = std::time::Instant::now();
    let outs = send_all(kubectl, &all);
    let send_took = sent.elapsed();

    let mut failures = Vec::new();
    let mut validate: Vec<(usize, Value)> = Vec::new();
    let (mut denied, mut injected, mut unchanged, mut schema) = (0, 0, 0, 0);
    for (i, (case, out)) in all.iter().zip(&outs).enumerate() {
        let mut fail = |why: String| failures.push(format!("{}: {why}", case.name));
        let expect = match case.expect {
            Answer::Schema(text) => {
                if out.ok() || refusal(&out.stderr).is_some() || !out.stderr.contains(text) {
                    fail(format!(
                        "expected the apiserver to refuse it ({text}), got {}{}",
                        out.stdout, out.stderr
                    ));
                } else {
                    schema += 1;
                }
                continue;
            }
            Answer::Case(expect) => expect,
        };
        match expect {
            Expect::Denied(text) => {
                let Some((webhook, message)) = refusal(&out.stderr).filter(|_| !out.ok()) else {
                    fail(format!(
                        "expected a denial, got {}",
                        if out.ok() { &out.stdout } else { &out.stderr }
                    ));
                    continue;
                };
                if webhook != "taskruns.mutate.bookend.dev" || !message.contains(text) {
                    fail(format!("{webhook} said {message:?}; expected {text:?}"));
                    continue;
                }
                let d = decision(Outcome::Denied, case.taskrun.clone(), Some(message));
                if let Err(e) = oracle::check(&case.taskrun, case.namespace, &set, &catalog, &d) {
                    fail(format!("invariant: {e}"));
                }
                denied += 1;
            }
            Expect::Injected | Expect::Unchanged => {
                let stored = match out.try_json() {
                    Ok(stored) if out.ok() => stored,
                    _ => {
                        fail(format!("refused: {}", out.stderr.trim()));
                        continue;
                    }
                };
                let admitted = as_admitted(&case.taskrun, &stored);
                let changed = admitted != case.taskrun;
                let outcome = match (expect, changed) {
                    (Expect::Injected, true) => Outcome::Mutated,
                    (Expect::Unchanged, false) => Outcome::Admitted,
                    (_, changed) => {
                        fail(format!(
                            "stored {}: {}",
                            if changed { "changed" } else { "as sent" },
                            stored["spec"]
                        ));
                        continue;
                    }
                };
                let d = decision(outcome, admitted, None);
                if let Err(e) = oracle::check(&case.taskrun, case.namespace, &set, &catalog, &d) {
                    fail(format!("invariant on the stored TaskRun: {e}"));
                }
                if outcome == Outcome::Mutated {
                    injected += 1;
                } else {
                    unchanged += 1;
                }
                validate.push((i, stored));
            }
        }
    }

    // Tekton's validation: every stored TaskRun, and the same TaskRun as sent (a refusal Tekton
    // makes of both is the author's, not bookend's).
    let objects: Vec<&Value> = validate
        .iter()
        .flat_map(|(i, stored)| [stored, &all[*i].taskrun])
        .collect();
    let results = tekton_validate(&objects, work);
    let mut refused_both = Vec::new();
    for (k, (i, _)) in validate.iter().enumerate() {
        let ((stored_ok, stored_error), (sent_ok, sent_error)) =
            (&results[2 * k], &results[2 * k + 1]);
        let name = &all[*i].name;
        if *stored_ok {
            continue;
        }
        if !sent_ok && without_indexes(stored_error) == without_indexes(sent_error) {
            refused_both.push(format!("{name} ({stored_error})"));
        } else {
            failures.push(format!(
                "{name}: Tekton refuses the stored TaskRun: {stored_error} (as sent: {})",
                if *sent_ok {
                    "accepted"
                } else {
                    sent_error.as_str()
                }
            ));
        }
    }
    let accepted_after_only: Vec<String> = validate
        .iter()
        .enumerate()
        .filter(|(k, _)| results[2 * k].0 && !results[2 * k + 1].0)
        .map(|(k, (i, _))| format!("{} (as sent: {})", all[*i].name, results[2 * k + 1].1))
        .collect();

    // Back to the example policies for the scenarios after this one.
    kubectl
        .run(&["delete", "-f", "-"], Some(cases::POLICIES.as_bytes()))
        .expect_ok("delete the security policies");
    for task in &tasks {
        let ns = task["metadata"]["namespace"].as_str().unwrap_or("");
        let name = task["metadata"]["name"].as_str().unwrap_or("");
        kubectl.ok(&["delete", "task", "-n", ns, name], "delete a Task");
    }
    for ns in NAMESPACES {
        kubectl.ok(
            &["delete", "taskruns", "--all", "-n", ns],
            "delete the cases' TaskRuns",
        );
    }
    kubectl.ok(&["apply", "-f", &examples], "apply examples/policies");
    poll_until(
        kubectl,
        "the example policies back",
        &probe(
            "team-a",
            json!({"taskSpec": {"steps": [cases::build_step()]}}),
        ),
        |out| has_steps(out, &["bookend-credentials"]) && !has_steps(out, &["bookend-creds"]),
    );

    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
    format!(
        "{} TaskRuns sent in {:.1}s: {denied} denied by bookend with the expected text, \
         {injected} injected and {unchanged} unchanged, all keeping the invariant, {schema} \
         refused by the apiserver's schema; Tekton accepts every stored TaskRun but {} it \
         refuses as sent too ({}); accepted by Tekton only after bookend: {:?}",
        all.len(),
        send_took.as_secs_f64(),
        refused_both.len(),
        refused_both.join("; "),
        accepted_after_only
    )
}
