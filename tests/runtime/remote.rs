//! Remote Tasks: a TaskRun whose Task comes through Tekton's `cluster` resolver, run by Tekton's
//! controller and resolvers. bookend cannot inject at TaskRun CREATE (there are no steps yet);
//! it injects when the controller dry-run-creates the resolved Task
//! (`tasks-dryrun.mutate.bookend.dev`), and its Pod backstop (`pods.validate.bookend.dev`)
//! refuses the TaskRun's Pod when that did not happen (docs/install.md, "Remote Tasks" and
//! "The Pod backstop"). After the run bookend verifies such a TaskRun from the Task that ran
//! (`status.taskSpec`): its admission wrote the record and label at CREATE
//! (docs/operations.md, "After the run: did the org steps run?").

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{cluster_policy, names, poll};
use crate::node::CONTROLLER_SA;
use crate::runs::{
    Checks, Env, Finished, TRACE, assert_condition, assert_steps, assert_trace, step,
};
use crate::scenarios::{ALWAYS, Ctx};
use crate::verification::{ALWAYS_POLICY, NOTIFY_POLICY, event, mark};

/// Where the shared Task lives; the cluster resolver may read only this namespace.
pub const CATALOG: &str = "rt-catalog";
/// The TaskRuns' namespace, covered by the policies below.
pub const REMOTE: &str = "rt-remote";
const TASK: &str = "rt-remote-build";
const LABEL: &str = "bookend.test/remote";
const DRY_RUN_ENTRY: &str = "tasks-dryrun.mutate.bookend.dev";

/// `rt-remote` has only namespace-level criteria, so the dry-run path injects it;
/// `rt-remote-labelled` also selects TaskRuns by label, which a dry-run Task does not carry, so
/// it cannot apply to a remote Task (nor does the Pod backstop require its step): its verdict
/// on the labelled TaskRuns is `skip`.
pub fn policies() -> Vec<Value> {
    vec![
        cluster_policy(
            "rt-remote",
            json!({"match": {"namespaces": [REMOTE]},
                   "preSteps": [step("bookend-remote-pre", "")],
                   "postSteps": [step("bookend-remote-post", &format!("cat {TRACE}"))]}),
        ),
        cluster_policy(
            "rt-remote-labelled",
            json!({"match": {"namespaces": [REMOTE],
                             "selector": {"matchLabels": {LABEL: "true"}}},
                   "preSteps": [step("bookend-remote-labelled", "")]}),
        ),
    ]
}

/// The Task in the catalog namespace.
fn task() -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": TASK, "namespace": CATALOG},
        "spec": {"steps": [step("remote-build", ""), step("remote-test", "")]},
    })
}

/// A Task in the catalog namespace whose `build` step times out (its own `timeout`).
const SLOW_TASK: &str = "rt-remote-slow";

fn slow_task() -> Value {
    let mut build = step("build", "sleep 60");
    build["timeout"] = json!("1s");
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": SLOW_TASK, "namespace": CATALOG},
        "spec": {"steps": [build, step("test", "")]},
    })
}

/// A TaskRun in the covered namespace that runs the catalog's Task through the cluster resolver.
fn remote_taskrun(name: &str) -> Value {
    remote_taskrun_of(REMOTE, name, TASK)
}

/// A TaskRun in `namespace` that runs the catalog's Task `task` through the cluster resolver.
fn remote_taskrun_of(namespace: &str, name: &str, task: &str) -> Value {
    json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {"generateName": format!("{name}-"), "namespace": namespace,
                     "labels": {LABEL: "true"}},
        "spec": {"taskRef": {"resolver": "cluster", "params": [
            {"name": "kind", "value": "task"},
            {"name": "name", "value": task},
            {"name": "namespace", "value": CATALOG},
        ]}},
    })
}

/// The steps the API server returns for a dry-run Task CREATE as Tekton's controller (kubectl
/// impersonates its user): what the controller will run. Only to learn what the API server
/// does at the moment; the scenarios' runs are the controller's own requests.
fn controller_dry_run(env: &Env) -> Result<Vec<String>, String> {
    Ok(names(&controller_dry_run_task(env)?["spec"]["steps"]))
}

/// The catalog's Task as the controller's dry-run CREATE in the covered namespace returns it.
fn controller_dry_run_task(env: &Env) -> Result<Value, String> {
    let (namespace, name) = CONTROLLER_SA;
    let user = format!("--as=system:serviceaccount:{namespace}:{name}");
    let mut probe = task();
    probe["metadata"] = json!({"generateName": "probe-", "namespace": REMOTE});
    env.kubectl
        .with_object(&["create", "--dry-run=server", &user], &probe)
        .try_json()
}

/// The catalog's Task with rt-remote's steps around it: what the dry-run returns and runs.
const INJECTED: [&str; 4] = [
    "bookend-remote-pre",
    "remote-build",
    "remote-test",
    "bookend-remote-post",
];

/// The outcome of every Pod review bookend logged for `pod` (`admitted`, `mutated`, `denied`, ...).
fn pod_reviews(ctx: &Ctx, pod: &str) -> Vec<String> {
    let log = std::fs::read_to_string(&ctx.bookend_log).unwrap_or_default();
    let name = format!("object_name=\"{pod}\"");
    // The CREATE (Tekton's later UPDATEs, such as its readiness annotation, are reviewed too).
    log.lines()
        .filter(|l| l.contains("endpoint=\"validate-pods\"") && l.contains(&name))
        .filter(|l| !l.contains("operation=\"UPDATE\""))
        .filter_map(|l| l.split("outcome=\"").nth(1)?.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Runs the catalog's Task through the cluster resolver in `namespace` (the Task created first
/// if missing), for scenarios whose policies cover another namespace.
pub fn run_catalog_task(env: &Env, namespace: &str, name: &str) -> Finished {
    ensure_task(env);
    env.run_one(&remote_taskrun_of(namespace, name, TASK))
}

/// A Task in the catalog namespace that carries rt-remote's org steps exactly as bookend's
/// dry-run writes them, and a workspace over `/bin`: what an author's Task gives Tekton when the
/// dry-run mutation did not run (issue 26). Tekton mounts the workspace into every step, the
/// org's included.
const COPIES_TASK: &str = "rt-remote-copies";

fn copies_task(env: &Env) -> Value {
    let injected =
        controller_dry_run_task(env).expect("the controller's dry-run of the catalog's Task");
    let mut spec = injected["spec"].clone();
    assert_eq!(names(&spec["steps"]), INJECTED, "{spec}");
    spec["workspaces"] = json!([{"name": "tools", "mountPath": "/bin"}]);
    json!({"apiVersion": "tekton.dev/v1", "kind": "Task",
           "metadata": {"name": COPIES_TASK, "namespace": CATALOG}, "spec": spec})
}

/// Creates the catalog's Tasks (or leaves them as they are).
fn ensure_task(env: &Env) {
    env.kubectl.apply(&task());
    env.kubectl.apply(&slow_task());
}

pub fn scenario_remote(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    ensure_task(env);
    let created = env.kubectl.create(&remote_taskrun("remote"));
    let name = created["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let object = env.wait("taskrun", REMOTE, &name);
    let run = Finished {
        object,
        took: Duration::ZERO,
    };
    // Under rt-always (Always) and rt-notify (OnSuccess), both namespace-level: a remote Task
    // whose user step times out, so the Always post-step cannot run.
    // This Tekton's defaults refuse an Always policy's steps (`when`): bookend denies the
    // TaskRun there (scenario 21 checks that), so the case runs where Always runs.
    let slow = (!ctx.always_degraded)
        .then(|| env.run_one(&remote_taskrun_of(ALWAYS, "remote-slow", SLOW_TASK)));
    let (s, r, m) = ("True", "Succeeded", "All Steps have completed executing");
    let mut checks = Checks::default();
    checks.check("admitted with bookend's record and label only", || {
        assert!(
            created["spec"]["taskSpec"].is_null(),
            "a remote TaskRun gets no steps at CREATE: {}",
            created["spec"]
        );
        assert_eq!(created["spec"]["taskRef"]["resolver"], "cluster");
        assert_eq!(created["metadata"]["labels"]["bookend.dev/verify"], "true");
        let record: Value = serde_json::from_str(
            created["metadata"]["annotations"]["bookend.dev/injected"]
                .as_str()
                .unwrap_or_default(),
        )
        .expect("bookend's record");
        assert_eq!(record["resolved"], true, "{record}");
        let recorded: Vec<&Value> = record["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| &p["policy"])
            .collect();
        assert_eq!(recorded, ["ClusterStepPolicy/rt-remote"], "{record}");
    });
    checks.check("the resolved Task ran inside the policy's steps", || {
        assert_condition(env, &run, s, r, m);
        let completed: Vec<(&str, &str, i64)> =
            INJECTED.iter().map(|n| (*n, "Completed", 0)).collect();
        assert_steps(env, &run, &completed);
        assert_trace(env, &run, &INJECTED);
        assert_eq!(
            run.log(env, "bookend-remote-post")
                .lines()
                .collect::<Vec<_>>(),
            INJECTED,
            "what bookend-remote-post printed"
        );
    });
    checks.check("the steps are in status.taskSpec, and only there", || {
        assert_eq!(
            names(&run.object["status"]["taskSpec"]["steps"]),
            INJECTED,
            "the Task Tekton ran (the dry-run's result)"
        );
        assert!(run.object["spec"]["taskSpec"].is_null());
        // The resolver read the stored Task; bookend changed only the controller's dry-run copy.
        let stored = env
            .kubectl
            .get(&["task", "-n", CATALOG, TASK])
            .expect("get the catalog's Task");
        assert_eq!(
            names(&stored["spec"]["steps"]),
            ["remote-build", "remote-test"],
            "the catalog's Task is unchanged"
        );
        let pod = run.pod(env);
        let containers: Vec<String> = names(&pod["spec"]["containers"]);
        assert_eq!(
            containers,
            INJECTED.map(|n| format!("step-{n}")),
            "the Pod's step containers"
        );
        // The controller's Pod CREATE reached bookend's Pod backstop (its matchConditions: the
        // tekton.dev/taskRun label), which admitted it.
        let pod_name = run.object["status"]["podName"].as_str().unwrap_or("");
        assert_eq!(
            pod_reviews(ctx, pod_name),
            ["admitted"],
            "bookend's reviews of {pod_name}"
        );
    });
    checks.check("verified after the run: pass, and skip for the label-selected policy", || {
        // The label-selected policy never reaches a resolved Task: its steps were not
        // injected, and its verdict says so (`skip`), not silence.
        assert_eq!(
            mark(env, &run),
            json!({"ClusterStepPolicy/rt-remote": "pass", "ClusterStepPolicy/rt-remote-labelled": "skip"})
        );
        let said = event(env, &run, "OrgStepsNotVerified");
        assert!(
            said.starts_with("ClusterStepPolicy/rt-remote-labelled: not verified: org steps bookend-remote-labelled were not injected")
                && said.contains("ClusterStepPolicy/rt-remote: bookend-remote-pre, bookend-remote-post"),
            "{said}"
        );
    });
    if let Some(slow) = &slow {
        checks.check(
            "verified after the run: a user step timeout under an Always policy fails",
            || {
                assert_eq!(slow.condition().0, "False");
                let why = event(env, slow, "OrgStepsDidNotRun");
                let status = || {
                    format!(
                        "{why}\nstatus.taskSpec: {}\nstatus.steps: {}",
                        slow.object["status"]["taskSpec"],
                        serde_json::to_string_pretty(&slow.object["status"]["steps"]).unwrap()
                    )
                };
                // The OnSuccess policy's post-step was rightly not run after the failure.
                assert_eq!(
                    mark(env, slow),
                    json!({ALWAYS_POLICY: "fail", NOTIFY_POLICY: "pass"}),
                    "{}",
                    status()
                );
                assert!(
                    why.contains(
                        "ClusterStepPolicy/rt-always: org post-step bookend-report did not run: step build timed out"
                    ),
                    "{}",
                    status()
                );
            },
        );
    }
    checks.finish();
    let slow = slow.map_or_else(
        || "an Always policy's TaskRun: not on this Tekton's defaults".to_owned(),
        |slow| format!("{}: user step timeout under Always: fail", slow.name()),
    );
    format!(
        "{name}: cluster resolver, dry-run mutation: ran {:?}; the label-selected policy's step \
         not injected nor required; verified: pass, the label-selected policy skip; {slow}",
        run.trace(env),
    )
}

/// Removes `tasks-dryrun.mutate.bookend.dev` from bookend's mutating configuration (as an outage
/// of that one call would), runs `check`, and registers the configuration again whatever
/// happened, waiting until the API server injects again.
fn without_dry_run_entry<T>(ctx: &Ctx, check: impl FnOnce() -> T) -> T {
    let env = &ctx.env;
    let mutating = ctx
        .webhooks
        .iter()
        .find(|c| c["kind"] == "MutatingWebhookConfiguration")
        .expect("bookend's MutatingWebhookConfiguration");
    let index = mutating["webhooks"]
        .as_array()
        .and_then(|hooks| hooks.iter().position(|h| h["name"] == DRY_RUN_ENTRY))
        .unwrap_or_else(|| panic!("{DRY_RUN_ENTRY} in deploy/'s configuration"));
    let patch = json!([
        {"op": "test", "path": format!("/webhooks/{index}/name"), "value": DRY_RUN_ENTRY},
        {"op": "remove", "path": format!("/webhooks/{index}")},
    ]);
    let name = mutating["metadata"]["name"].as_str().expect("name");
    env.kubectl.ok(
        &[
            "patch",
            "mutatingwebhookconfiguration",
            name,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ],
        &format!("remove {DRY_RUN_ENTRY}"),
    );
    // The API server picks configurations up through an informer.
    poll(
        "the API server to stop sending the dry-run to bookend",
        Duration::from_secs(60),
        || match controller_dry_run(env)? {
            steps if steps.iter().any(|s| s.starts_with("bookend-")) => {
                Err(format!("still injected: {steps:?}"))
            }
            _ => Ok(()),
        },
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
    env.kubectl.apply(mutating);
    poll(
        "the API server to send the dry-run to bookend again",
        Duration::from_secs(60),
        || match controller_dry_run(env)? {
            steps if steps == INJECTED => Ok(()),
            steps => Err(format!("not injected: {steps:?}")),
        },
    );
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

pub fn scenario_remote_backstop(ctx: &mut Ctx) -> String {
    ensure_task(&ctx.env);
    ctx.env.kubectl.apply(&copies_task(&ctx.env));
    let (run, copies) = without_dry_run_entry(ctx, || {
        let (name, _) = ctx.env.start(&remote_taskrun("remote-bare"));
        let mut with_copies = remote_taskrun_of(REMOTE, "remote-copies", COPIES_TASK);
        with_copies["spec"]["workspaces"] = json!([{"name": "tools", "emptyDir": {}}]);
        let (copies, _) = ctx.env.start(&with_copies);
        let finished = |name: &str| Finished {
            object: ctx.env.wait("taskrun", REMOTE, name),
            took: Duration::ZERO,
        };
        (finished(&name), finished(&copies))
    });
    let env = &ctx.env;
    let name = run.name().to_owned();
    let (status, reason, message) = run.condition();
    let mut checks = Checks::default();
    checks.check(
        "the TaskRun failed with bookend's refusal of its Pod",
        || {
            assert_eq!(
                (status.as_str(), reason.as_str()),
                ("False", "PodCreationFailed"),
                "{message}"
            );
            let refusal = format!(
                "failed to create task run pod \"{name}\": admission webhook \
             \"pods.validate.bookend.dev\" denied the request: bookend: the Pod of TaskRun \
             {REMOTE}/{name} lacks the step(s) bookend-remote-post (ClusterStepPolicy/rt-remote), \
             bookend-remote-pre (ClusterStepPolicy/rt-remote): its Task came through the cluster \
             resolver, and bookend injects these steps when Tekton's controller dry-run-creates \
             the resolved Task; that mutation did not happen"
            );
            assert!(
                message.starts_with(&refusal),
                "the condition's message:\n  {message}\nstarts with:\n  {refusal}"
            );
            assert!(
                !message.contains("bookend-remote-labelled"),
                "a policy the dry-run cannot apply is not required: {message}"
            );
        },
    );
    checks.check(
        "a Task with copies of the org steps and a workspace over /bin: its Pod refused",
        || {
            let (status, reason, message) = copies.condition();
            assert_eq!(
                (status.as_str(), reason.as_str()),
                ("False", "PodCreationFailed"),
                "{message}"
            );
            for says in [
                "admission webhook \"pods.validate.bookend.dev\" denied the request",
                "container step-bookend-remote-pre (ClusterStepPolicy/rt-remote) volumeMounts[",
                "at \"/bin\", a workspace or a volume of the Task's",
                "allows workspaces only under /workspace",
            ] {
                assert!(message.contains(says), "{says:?} in {message}");
            }
        },
    );
    checks.check("nothing ran", || {
        assert_eq!(run.object["status"]["podName"].as_str().unwrap_or(""), "");
        let pods = env
            .kubectl
            .get(&[
                "pods",
                "-n",
                REMOTE,
                "-l",
                &format!("tekton.dev/taskRun={name}"),
            ])
            .expect("list Pods");
        assert_eq!(pods["items"], json!([]), "no Pod of {name}");
        // What Tekton prepared to run (status.taskSpec and the step states it initialises
        // before creating the Pod): the Task as resolved, without the policy's steps. No step
        // has a state: none ran.
        let unmutated = ["remote-build", "remote-test"];
        assert_eq!(
            names(&run.object["status"]["taskSpec"]["steps"]),
            unmutated,
            "status.taskSpec"
        );
        // Tekton v1.x initialises them before creating the Pod; v0.62 leaves them unset.
        let states = &run.object["status"]["steps"];
        if !states.is_null() {
            assert_eq!(names(states), unmutated, "status.steps: {states}");
        }
        for state in states.as_array().into_iter().flatten() {
            for key in ["terminated", "running", "waiting"] {
                assert!(state.get(key).is_none(), "a step state: {state}");
            }
        }
    });
    checks.check(
        "verified after the run: fail, the resolved Task lacked the org steps",
        || {
            assert_eq!(
                mark(env, &run),
                json!({"ClusterStepPolicy/rt-remote": "fail", "ClusterStepPolicy/rt-remote-labelled": "skip"})
            );
            let why = event(env, &run, "OrgStepsDidNotRun");
            assert!(
                why.contains(
                    "ClusterStepPolicy/rt-remote: org step bookend-remote-pre did not run: the Task that ran (status.taskSpec) does not carry it"
                ),
                "{why}"
            );
        },
    );
    // With the entry back, the same TaskRun created again runs with the steps (what bookend's
    // message tells the user to do).
    let again = ctx.env.run_one(&remote_taskrun("remote-again"));
    checks.check("created again once the entry is back, it runs", || {
        assert_condition(
            env,
            &again,
            "True",
            "Succeeded",
            "All Steps have completed executing",
        );
        assert_trace(env, &again, &INJECTED);
    });
    checks.finish();
    let (_, _, refused_copies) = copies.condition();
    format!(
        "{status}/{reason}: {message}; with copies of the org steps and a workspace over /bin: {refused_copies}"
    )
}
