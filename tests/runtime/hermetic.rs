//! Scenario 19: hermetic user steps (`userSteps.network: None`) under Tekton's own entrypoint.
//! An HTTP server of the test's own on the node's loopback (the TaskRuns carry the stand-in's
//! annotation that runs their Pods in the node's network namespace, as hostNetwork would; else
//! each container has an empty one): the org pre-step fetches from it, the TaskRun's step tries it
//! and another address, the org post-step publishes to it. The server's log is the proof of
//! who reached it. The same TaskRun under a policy that leaves the network on reaches it; a
//! non-root step under the hermetic policy is tried too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use crate::kube::cluster_policy;
use crate::runs::{Checks, Env, Finished, TRACE, script_step, step, taskrun};
use crate::scenarios::Ctx;

pub const HERMETIC: &str = "rt-hermetic";
pub const NETWORKED: &str = "rt-networked";
pub const NAMESPACES: [&str; 2] = [HERMETIC, NETWORKED];
const ALWAYS_LABEL: &str = "bookend.test/hermetic-always";
/// The kubelet stand-in's annotation for a node that refuses user namespaces.
const NO_USER_NAMESPACES: &str = "kubelet-standin.bookend.test/no-user-namespaces";

/// What the server was asked: `METHOD path body`, in order.
static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The server's port (started on first use, for the life of the test process).
fn port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the test's HTTP server");
        let port = listener.local_addr().expect("local address").port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(&stream);
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    continue;
                }
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length.min(4096)];
                let _ = reader.read_exact(&mut body);
                let mut words = request.split_whitespace();
                let line = format!(
                    "{} {} {}",
                    words.next().unwrap_or(""),
                    words.next().unwrap_or(""),
                    String::from_utf8_lossy(&body)
                );
                SEEN.lock()
                    .expect("the server's log")
                    .push(line.trim().to_owned());
                let _ = (&stream).write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
            }
        });
        port
    })
}

fn seen() -> Vec<String> {
    SEEN.lock().expect("the server's log").clone()
}

/// An address of the node other than loopback (no packet is sent to learn it), else one of
/// TEST-NET-1.
fn other_address() -> String {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "192.0.2.1".to_owned())
}

pub fn policies() -> Vec<Value> {
    let port = port();
    let org = |kind: &str| {
        (
            step(
                &format!("bookend-{kind}-fetch"),
                &format!(
                    "wget -q -O /workspace/deps http://127.0.0.1:{port}/deps/$(context.taskRun.name) && echo \"org-netns $(readlink /proc/self/ns/net)\" >> {TRACE}"
                ),
            ),
            step(
                &format!("bookend-{kind}-publish"),
                &format!(
                    "wget -q -O /dev/null --post-data published http://127.0.0.1:{port}/publish/$(context.taskRun.name)"
                ),
            ),
        )
    };
    let (hermetic_pre, hermetic_post) = org("h");
    let (networked_pre, networked_post) = org("n");
    vec![
        cluster_policy(
            "rt-hermetic",
            json!({"match": {"namespaces": [HERMETIC]}, "userSteps": {"network": "None"},
                   "preSteps": [hermetic_pre], "postSteps": [hermetic_post]}),
        ),
        // With an Always policy beside it the TaskRun's steps get `onError: continue`, which
        // tells a step that could not start from one that failed (scenario 20's node without
        // user namespaces).
        cluster_policy(
            "rt-hermetic-always",
            json!({"priority": 20, "postStepsRun": "Always",
                   "match": {"namespaces": [HERMETIC],
                             "selector": {"matchLabels": {ALWAYS_LABEL: "true"}}},
                   "postSteps": [step("bookend-ha-report", "")]}),
        ),
        cluster_policy(
            "rt-networked",
            json!({"match": {"namespaces": [NETWORKED]},
                   "preSteps": [networked_pre], "postSteps": [networked_post]}),
        ),
    ]
}

/// The TaskRun's own step: it needs what the pre-step fetched, then tries the server and
/// another address, and records what happened in the trace.
fn build_step() -> Value {
    let port = port();
    let other = other_address();
    script_step(
        "build",
        &format!(
            "test -s /workspace/deps || exit 3\n\
             echo \"user-netns $(readlink /proc/self/ns/net)\" >> {TRACE}\n\
             for url in http://127.0.0.1:{port}/user/$(context.taskRun.name) http://{other}:{port}/user-other/$(context.taskRun.name); do\n\
               if wget -q -O /dev/null \"$url\" 2>/tmp/err; then echo \"user reached\" >> {TRACE}; else echo \"user unreachable: $(cat /tmp/err)\" >> {TRACE}; fi\n\
             done"
        ),
    )
}

/// A TaskRun of the scenario: its Pod runs in the node's network namespace (the stand-in's
/// annotation, which Tekton copies to the Pod).
fn networked_taskrun(namespace: &str, name: &str, steps: Value) -> Value {
    let mut run = taskrun(namespace, name, json!({"steps": steps}));
    run["metadata"]["annotations"] = json!({"kubelet-standin.bookend.test/node-network": "true"});
    run
}

fn lines_with<'t>(trace: &'t [String], prefix: &str) -> Vec<&'t str> {
    trace
        .iter()
        .filter(|l| l.starts_with(prefix))
        .map(String::as_str)
        .collect()
}

fn asked_for(run: &Finished, what: &str) -> bool {
    let suffix = format!("/{}", run.name());
    seen().iter().any(|l| {
        l.starts_with(what)
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.ends_with(&suffix))
    })
}

pub fn scenario_hermetic(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    let runs = env.run_all(&[
        networked_taskrun(HERMETIC, "jailed", json!([build_step()])),
        networked_taskrun(NETWORKED, "networked", json!([build_step()])),
    ]);
    let (jailed, networked) = (&runs[0], &runs[1]);
    for run in &runs {
        assert_eq!(run.condition().0, "True", "{}", run.describe(env));
    }
    // bookend's jail check ran `:` in the jail right before the TaskRun's step.
    assert_eq!(
        jailed.steps(),
        [
            ("bookend-h-fetch".to_owned(), "Completed".to_owned(), 0),
            ("bookend-jail-check".to_owned(), "Completed".to_owned(), 0),
            ("build".to_owned(), "Completed".to_owned(), 0),
            ("bookend-h-publish".to_owned(), "Completed".to_owned(), 0),
        ]
    );

    // Under the policy: the org steps reached the server, the TaskRun's step reached nothing
    // and ran in a network namespace of its own.
    let trace = jailed.trace(env);
    assert!(
        asked_for(jailed, "GET /deps"),
        "pre-step fetch: {:?}",
        seen()
    );
    assert!(
        asked_for(jailed, "POST /publish"),
        "post-step publish: {:?}",
        seen()
    );
    assert!(
        !asked_for(jailed, "GET /user"),
        "the jailed step reached the server: {:?}",
        seen()
    );
    let unreachable = lines_with(&trace, "user unreachable");
    assert_eq!(unreachable.len(), 2, "{trace:?}");
    // Refused by the kernel, not failing for another reason.
    assert!(
        unreachable
            .iter()
            .all(|l| l.contains("Network is unreachable")),
        "{trace:?}"
    );
    assert!(lines_with(&trace, "user reached").is_empty(), "{trace:?}");
    let org_netns = lines_with(&trace, "org-netns");
    let user_netns = lines_with(&trace, "user-netns");
    assert_eq!((org_netns.len(), user_netns.len()), (1, 1), "{trace:?}");
    assert_ne!(
        org_netns[0].trim_start_matches("org-netns "),
        user_netns[0].trim_start_matches("user-netns "),
        "the user step's network namespace is its own"
    );

    // Without it: the same step reaches the server, in the org steps' namespace.
    let trace = networked.trace(env);
    assert!(asked_for(networked, "GET /user"), "{:?} {trace:?}", seen());
    assert!(!lines_with(&trace, "user reached").is_empty(), "{trace:?}");
    assert_eq!(
        lines_with(&trace, "org-netns")[0].trim_start_matches("org-netns "),
        lines_with(&trace, "user-netns")[0].trim_start_matches("user-netns ")
    );

    // A non-root step under the policy: Tekton's entrypoint cannot map the ids into the new
    // user namespace, so the step could never start (measured before bookend refused it: it
    // failed as `"step-build" exited with code 1`, never networked). bookend refuses it at
    // admission, naming the field.
    let mut non_root = build_step();
    non_root["securityContext"] = json!({"runAsUser": 1000, "runAsGroup": 1000});
    let out = env.kubectl.with_object(
        &["create"],
        &networked_taskrun(HERMETIC, "non-root", json!([non_root])),
    );
    assert!(
        !out.ok(),
        "a non-root hermetic step was admitted: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("denied the request")
            && out
                .stderr
                .contains("spec.taskSpec.steps[0].securityContext.runAsUser")
            && out.stderr.contains("user namespace"),
        "{}",
        out.stderr
    );
    let non_root_outcome = out
        .stderr
        .lines()
        .find(|l| l.contains("denied"))
        .unwrap_or_default()
        .chars()
        .take(160)
        .collect::<String>();

    let no_userns = no_user_namespaces(ctx);

    format!(
        "jailed {}: {:?}; networked {}; the same TaskRun took {:.1} s hermetic, {:.1} s networked; non-root step under the policy: {non_root_outcome}; {no_userns}",
        jailed.name(),
        unreachable,
        networked.name(),
        jailed.took.as_secs_f64(),
        networked.took.as_secs_f64(),
    )
}

/// A node that refuses user namespaces (the stand-in's seccomp filter refusing
/// `CLONE_NEWUSER`, as a runtime's default profile does without `CAP_SYS_ADMIN`): Tekton's
/// entrypoint cannot build the jail, bookend's jail check fails, the TaskRun's step does not
/// run (fail closed), and under every policy kind bookend's verdict says why.
fn no_user_namespaces(ctx: &Ctx) -> String {
    let env = &ctx.env;
    let on_such_a_node = |name: &str, labels: Value, build: Value| {
        let mut run = networked_taskrun(HERMETIC, name, json!([build]));
        run["metadata"]["annotations"][NO_USER_NAMESPACES] = json!("true");
        run["metadata"]["labels"] = labels;
        run
    };
    // OnSuccess only, and the same TaskRun whose step exits 1 on a node that allows them.
    let before = jail_failures(ctx);
    let runs = env.run_all(&[
        on_such_a_node("no-userns", json!({}), build_step()),
        networked_taskrun(HERMETIC, "exits-1", json!([step("build", "exit 1")])),
    ]);
    let (refused, exits_1) = (&runs[0], &runs[1]);
    // v1.15: StepFailed, `"step-S" exited with code 1: Error`; v0.62: Failed, without the
    // container's reason.
    let failed_at = |run: &Finished, step: &str| {
        let (status, _, message) = run.condition();
        assert_eq!(status, "False", "{}", run.describe(env));
        assert!(
            message.starts_with(&format!("\"step-{step}\" exited with code 1")),
            "{message}"
        );
    };
    let mut checks = Checks::default();
    checks.check(
        "no user namespaces: the jail check fails, the TaskRun's step does not start, fail closed",
        || {
            // The TaskRun's own answer names bookend's jail check, not the author's step.
            failed_at(refused, "bookend-jail-check");
            assert_eq!(
                refused.steps(),
                [
                    ("bookend-h-fetch".to_owned(), "Completed".to_owned(), 0),
                    ("bookend-jail-check".to_owned(), "Error".to_owned(), 1),
                    ("build".to_owned(), "Skipped".to_owned(), 1),
                    ("bookend-h-publish".to_owned(), "Skipped".to_owned(), 1),
                ]
            );
            let log = refused.log(env, "bookend-jail-check");
            assert!(
                log.contains("Error executing command: fork/exec /bin/sh")
                    && log.contains("operation not permitted"),
                "{log}"
            );
            let trace = refused.trace(env);
            assert!(lines_with(&trace, "user").is_empty(), "{trace:?}");
            assert!(!asked_for(refused, "GET /user"), "{:?}", seen());
            assert!(!asked_for(refused, "POST /publish"), "{:?}", seen());
        },
    );
    checks.check(
        "no user namespaces, OnSuccess: told apart from a step exiting 1, its own verdict reason",
        || {
            failed_at(exits_1, "build");
            assert_ne!(exits_1.condition(), refused.condition());
            // A step that ran and exited 1: the OnSuccess post-step rightly skipped.
            assert_eq!(
                crate::verification::mark(env, exits_1),
                json!({"ClusterStepPolicy/rt-hermetic": "pass"})
            );
            assert_eq!(
                crate::verification::mark(env, refused),
                json!({"ClusterStepPolicy/rt-hermetic": "fail"})
            );
            jail_check_named(env, refused);
            assert_one_more_jail_failure(ctx, before);
        },
    );
    let mut always_outcome = String::from("Always: not run on this Tekton");
    if !ctx.always_degraded {
        let before = jail_failures(ctx);
        let run = env.run_one(&on_such_a_node(
            "no-userns-always",
            json!({ALWAYS_LABEL: "true"}),
            build_step(),
        ));
        checks.check("no user namespaces, Always: its own verdict reason", || {
            failed_at(&run, "bookend-jail-check");
            // Tekton's entrypoint skips every step after one it could not start, whatever
            // `onError` says: the Always post-step too.
            assert_eq!(
                run.steps()
                    .into_iter()
                    .filter(|(_, reason, _)| reason == "Skipped")
                    .map(|(name, _, _)| name)
                    .collect::<Vec<_>>(),
                [
                    "build",
                    "bookend-gate-2",
                    "bookend-h-publish",
                    "bookend-ha-report",
                    "bookend-verdict"
                ]
            );
            assert_eq!(
                crate::verification::mark(env, &run),
                json!({"ClusterStepPolicy/rt-hermetic": "fail",
                       "ClusterStepPolicy/rt-hermetic-always": "fail"})
            );
            let why = jail_check_named(env, &run);
            assert!(
                why.contains(
                    "ClusterStepPolicy/rt-hermetic-always: org post-step bookend-ha-report did not run: the hermetic jail could not be set up (step bookend-jail-check could not start)"
                ),
                "{why}"
            );
            assert_one_more_jail_failure(ctx, before);
        });
        always_outcome = format!("Always: {:?}", run.condition());
    }
    checks.finish();
    format!(
        "no user namespaces: {:?}, not started; {always_outcome}",
        refused.condition()
    )
}

/// The `OrgStepsDidNotRun` Event of `run`, which names the jail check's failure in its Pod for
/// the hermetic policy.
fn jail_check_named(env: &Env, run: &Finished) -> String {
    let pod = run.object["status"]["podName"].as_str().unwrap_or_default();
    let why = crate::verification::event(env, run, "OrgStepsDidNotRun");
    assert!(
        why.contains(&format!(
            "ClusterStepPolicy/rt-hermetic: the hermetic jail (userSteps.network: None) could not be set up in Pod {pod}: bookend's step bookend-jail-check"
        )),
        "{why}"
    );
    why
}

/// bookend counted one more `hermetic_jail_failed` verdict for the hermetic policy than `before`.
fn assert_one_more_jail_failure(ctx: &Ctx, before: f64) {
    let after = crate::kube::poll(
        "the jail failure counted",
        std::time::Duration::from_secs(30),
        || {
            let after = jail_failures(ctx);
            (after > before)
                .then_some(after)
                .ok_or_else(|| "not yet".to_owned())
        },
    );
    assert_eq!(after, before + 1.0);
}

/// bookend's count of `hermetic_jail_failed` verdicts for the hermetic policy.
fn jail_failures(ctx: &Ctx) -> f64 {
    crate::verification::counter(
        &ctx.bookend.metrics().expect("bookend's metrics"),
        "bookend_run_verdicts_total",
        &[
            "policy=\"ClusterStepPolicy/rt-hermetic\"",
            "cause=\"hermetic_jail_failed\"",
        ],
    )
}
