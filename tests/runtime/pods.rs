//! The "Pod is the truth" issue by execution: Pods Tekton's real controller builds from TaskRuns
//! that bookend's TaskRun webhooks never saw (the mutation skipped, the TaskRun backstop off)
//! are refused, container and field named, when an org step is not as its policy defines it;
//! an org container's image cannot be changed on a running Pod; and a Pod labelled as a
//! TaskRun's by anyone but Tekton's controller is refused.

use std::time::Duration;

use serde_json::{Value, json};

use crate::kube::{cluster_policy, poll};
use crate::runs::{Checks, Env, Finished, step, taskrun};
use crate::scenarios::Ctx;

/// A namespace with one policy: a pre-step and a post-step.
pub const TAMPER: &str = "rt-tamper";
/// A namespace whose policy's pre-step has a volume of its own (the org's credentials).
pub const STEAL: &str = "rt-steal";
pub const NAMESPACES: [&str; 2] = [TAMPER, STEAL];

fn pre() -> Value {
    step("bookend-tamper-pre", "")
}

fn post() -> Value {
    step("bookend-tamper-post", "")
}

pub fn policies() -> Vec<Value> {
    let mut creds = step("bookend-steal-creds", "echo secret > /creds/token");
    creds["volumeMounts"] = json!([{"name": "bookend-steal-creds", "mountPath": "/creds"}]);
    vec![
        cluster_policy(
            "rt-tamper",
            json!({"match": {"namespaces": [TAMPER]}, "preSteps": [pre()], "postSteps": [post()]}),
        ),
        cluster_policy(
            "rt-steal",
            json!({"match": {"namespaces": [STEAL]}, "preSteps": [creds],
                   "volumes": [{"name": "bookend-steal-creds", "emptyDir": {}}]}),
        ),
    ]
}

/// Removes bookend's TaskRun webhook entries (the mutation and the backstop), runs `check`, and
/// registers the configurations again whatever happened, waiting until bookend injects again.
fn without_taskrun_webhooks<T>(ctx: &Ctx, check: impl FnOnce() -> T) -> T {
    let env = &ctx.env;
    let probe = taskrun(TAMPER, "probe", json!({"steps": [step("build", "")]}));
    let injected = |env: &Env| -> Result<bool, String> {
        let out = env
            .kubectl
            .with_object(&["create", "--dry-run=server"], &probe);
        let object = out.try_json()?;
        Ok(object["spec"]["taskSpec"]["steps"][0]["name"] == "bookend-tamper-pre")
    };
    for (kind, entry) in [
        (
            "MutatingWebhookConfiguration",
            "taskruns.mutate.bookend.dev",
        ),
        (
            "ValidatingWebhookConfiguration",
            "taskruns.validate.bookend.dev",
        ),
    ] {
        let config = ctx
            .webhooks
            .iter()
            .find(|c| c["kind"] == kind)
            .unwrap_or_else(|| panic!("bookend's {kind}"));
        let index = config["webhooks"]
            .as_array()
            .and_then(|hooks| hooks.iter().position(|h| h["name"] == entry))
            .unwrap_or_else(|| panic!("{entry}"));
        let patch = json!([
            {"op": "test", "path": format!("/webhooks/{index}/name"), "value": entry},
            {"op": "remove", "path": format!("/webhooks/{index}")},
        ]);
        env.kubectl.ok(
            &[
                "patch",
                &kind.to_lowercase(),
                config["metadata"]["name"].as_str().expect("name"),
                "--type",
                "json",
                "-p",
                &patch.to_string(),
            ],
            &format!("remove {entry}"),
        );
    }
    poll(
        "the API server to stop calling bookend for TaskRuns",
        Duration::from_secs(60),
        || match injected(env)? {
            true => Err("still injected".to_owned()),
            false => Ok(()),
        },
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check));
    for config in &ctx.webhooks {
        env.kubectl.apply(config);
    }
    poll(
        "the API server to call bookend for TaskRuns again",
        Duration::from_secs(60),
        || match injected(env)? {
            true => Ok(()),
            false => Err("not injected".to_owned()),
        },
    );
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Scenario 16.
pub fn scenario_tampered_pods(ctx: &mut Ctx) -> String {
    // What bookend would write, and the same under a stepTemplate it never saw (Tekton merges it
    // into the org steps when it builds the Pod), and with the org step's image forged.
    let sealed = json!({"steps": [pre(), step("build", ""), post()]});
    let mut templated = sealed.clone();
    templated["stepTemplate"] = json!({"env": [{"name": "EVIL", "value": "1"}]});
    let mut forged = sealed.clone();
    forged["steps"][0]["image"] = json!("docker.io/library/alpine:3.20");
    // The forged step again, the TaskRun labelled tekton.dev/taskRunUID by its author: Tekton
    // v0.62 copies the label onto the Pod and writes none of its own (breaker round 34); the
    // Pod is judged by its ownerReference all the same.
    let mut forged_uid = taskrun(TAMPER, "forged-uid", forged.clone());
    forged_uid["metadata"]["labels"] = json!({"tekton.dev/taskRunUID": "forged"});
    let runs = without_taskrun_webhooks(ctx, || {
        ctx.env.run_all(&[
            taskrun(TAMPER, "sealed", sealed),
            taskrun(TAMPER, "templated", templated),
            taskrun(TAMPER, "forged", forged),
            forged_uid,
        ])
    });
    let env = &ctx.env;
    let [sealed, templated, forged, forged_uid] = &runs[..] else {
        unreachable!()
    };
    let mut checks = Checks::default();
    checks.check("exactly what bookend writes: runs", || {
        let (s, r, m) = sealed.condition();
        assert_eq!((s.as_str(), r.as_str()), ("True", "Succeeded"), "{m}");
    });
    let refused = |run: &Finished, says: &[&str]| {
        let (s, r, m) = run.condition();
        assert_eq!(
            (s.as_str(), r.as_str()),
            ("False", "PodCreationFailed"),
            "{m}"
        );
        assert!(
            m.contains("admission webhook \"pods.validate.bookend.dev\" denied"),
            "{m}"
        );
        for part in says {
            assert!(m.contains(part), "{part}: {m}");
        }
    };
    checks.check(
        "a stepTemplate Tekton merges into the org steps: the Pod is refused",
        || {
            refused(
                templated,
                &["container step-bookend-tamper-pre (ClusterStepPolicy/rt-tamper) env[0]"],
            )
        },
    );
    checks.check("a forged org step: the Pod is refused", || {
        refused(forged, &["the TaskRun's steps are not what bookend writes"])
    });
    checks.check(
        "a forged org step under the author's tekton.dev/taskRunUID label: the Pod is refused",
        || {
            refused(
                forged_uid,
                &["the TaskRun's steps are not what bookend writes"],
            )
        },
    );

    // The author's StepAction mounts the org's volume: the mount name is a param Tekton
    // substitutes when it resolves the StepAction, after admission; the Pod shows it.
    env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1beta1",
        "kind": "StepAction",
        "metadata": {"name": "steal", "namespace": STEAL},
        "spec": {
            "image": crate::node::BUSYBOX,
            "params": [{"name": "vol", "type": "string"}],
            "command": ["/bin/sh", "-c"],
            "args": ["cat /steal/token"],
            "volumeMounts": [{"name": "$(params.vol)", "mountPath": "/steal"}],
        },
    }));
    let stealing = env.run_one(&taskrun(
        STEAL,
        "stepaction",
        json!({"steps": [{"name": "build", "ref": {"name": "steal"},
                          "params": [{"name": "vol", "value": "bookend-steal-creds"}]}]}),
    ));
    checks.check(
        "the author's StepAction mounts the org's volume: the Pod is refused",
        || {
            refused(
                &stealing,
                &["container step-build mounts \"bookend-steal-creds\""],
            )
        },
    );

    // A running Pod: its org post-step's image cannot be changed before it starts.
    let (name, _) = env.start(&taskrun(
        TAMPER,
        "running",
        json!({"steps": [step("build", "sleep 20")]}),
    ));
    let pod = poll("the Pod to exist", Duration::from_secs(60), || {
        let pods = env.kubectl.get(&[
            "pods",
            "-n",
            TAMPER,
            "-l",
            &format!("tekton.dev/taskRun={name}"),
        ])?;
        pods["items"]
            .get(0)
            .cloned()
            .ok_or_else(|| "no Pod yet".to_owned())
    });
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let index = pod["spec"]["containers"]
        .as_array()
        .and_then(|c| {
            c.iter()
                .position(|c| c["name"] == "step-bookend-tamper-post")
        })
        .expect("the post-step's container");
    let patch = json!([{"op": "replace", "path": format!("/spec/containers/{index}/image"),
                        "value": "docker.io/library/alpine:3.20"}]);
    let swapped = env.kubectl.run(
        &[
            "patch",
            "pod",
            "-n",
            TAMPER,
            &pod_name,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    checks.check(
        "an org container's image changed on the Pod: refused",
        || {
            assert!(!swapped.ok(), "patched: {}", swapped.stdout);
            assert!(
                swapped
                    .stderr
                    .contains("the image of container step-bookend-tamper-post"),
                "{}",
                swapped.stderr
            );
        },
    );
    let finished = env.wait("taskrun", TAMPER, &name);
    checks.check("and the TaskRun runs its org steps as defined", || {
        let (s, r, m) = crate::runs::condition(&finished);
        assert_eq!((s.as_str(), r.as_str()), ("True", "Succeeded"), "{m}");
    });

    // A Pod labelled as that TaskRun's, created by someone else (the admin here).
    let mut impostor = pod.clone();
    impostor["metadata"] = json!({"generateName": format!("{name}-impostor-"), "namespace": TAMPER,
        "labels": {"tekton.dev/taskRun": name}});
    impostor.as_object_mut().map(|o| o.remove("status"));
    let created = env.kubectl.with_object(&["create"], &impostor);
    checks.check(
        "a TaskRun's Pod created by anyone but Tekton: refused",
        || {
            assert!(!created.ok(), "created: {}", created.stdout);
            assert!(
                created.stderr.contains("only Tekton's controller"),
                "{}",
                created.stderr
            );
        },
    );
    checks.finish();
    format!(
        "unsealed TaskRuns' Pods refused: {}; {}; image swap refused; impostor Pod refused",
        templated
            .condition()
            .2
            .chars()
            .take(160)
            .collect::<String>(),
        forged.condition().2.chars().take(160).collect::<String>()
    )
}
