//! Class 1: a `taskRef` whose form (apiVersion, kind, bundle, an empty resolver) made bookend
//! take it for something other than what Tekton's reconciler runs. Tekton fetches a named Task
//! locally unless a resolver is set, whatever kind and apiVersion say (`GetTaskFunc`), so every
//! such form is a local Task: inlined and injected, or refused where the policy says Deny.

use serde_json::{Value, json};

use crate::cases::{Case, Expect, with_spec};

fn in_namespace(mut taskrun: Value, namespace: &str) -> Value {
    taskrun["metadata"]["namespace"] = json!(namespace);
    taskrun
}

/// The local forms: all name the Task `build`.
pub fn local_forms() -> Vec<(&'static str, Value)> {
    vec![
        ("plain", json!({"name": "build"})),
        (
            "kind Task, apiVersion v1",
            json!({"name": "build", "kind": "Task", "apiVersion": "tekton.dev/v1"}),
        ),
        (
            "a custom-task look-alike",
            json!({"name": "build", "kind": "Wait", "apiVersion": "example.dev/v1"}),
        ),
        (
            "kind ClusterTask",
            json!({"name": "build", "kind": "ClusterTask"}),
        ),
        (
            "an empty resolver",
            json!({"name": "build", "resolver": ""}),
        ),
        (
            "apiVersion alone",
            json!({"name": "build", "apiVersion": "tekton.dev/v1beta1"}),
        ),
    ]
}

pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (what, task_ref) in local_forms() {
        let name: &'static str =
            Box::leak(format!("taskref/{what}: inlined and injected").into_boxed_str());
        cases.push(Case {
            name,
            namespace: "team-a",
            taskrun: with_spec(json!({"taskRef": task_ref.clone()})),
            expect: Expect::Injected,
        });
        let name: &'static str =
            Box::leak(format!("taskref/{what}: taskRef: Deny holds").into_boxed_str());
        cases.push(Case {
            name,
            namespace: "strict",
            taskrun: in_namespace(with_spec(json!({"taskRef": task_ref})), "strict"),
            expect: Expect::Denied("taskRef: Deny"),
        });
    }
    for (what, task_ref) in [
        (
            "git resolver",
            json!({"resolver": "git", "params": [{"name": "url", "value": "https://x"}]}),
        ),
        (
            "the cluster's default resolver",
            json!({"params": [{"name": "url", "value": "https://x"}]}),
        ),
        (
            "custom-task fields without a name",
            json!({"kind": "Wait", "apiVersion": "example.dev/v1"}),
        ),
    ] {
        let name: &'static str = Box::leak(
            format!("taskref/remote, {what}: remoteTaskRef: Deny holds").into_boxed_str(),
        );
        cases.push(Case {
            name,
            namespace: "strict",
            taskrun: in_namespace(with_spec(json!({"taskRef": task_ref})), "strict"),
            expect: Expect::Denied("remoteTaskRef: Deny"),
        });
    }
    cases.push(Case {
        name: "taskref/a signature the Task's author wrote does not switch injection off",
        namespace: "team-a",
        taskrun: with_spec(json!({"taskRef": {"name": "signed", "kind": "Task"}})),
        expect: Expect::Denied("trusted-resources signature"),
    });
    let mut bundle =
        with_spec(json!({"taskRef": {"name": "build", "bundle": "registry.example/t:1"}}));
    bundle["apiVersion"] = json!("tekton.dev/v1beta1");
    cases.push(Case {
        name: "taskref/a v1beta1 bundle, which Tekton refuses on create (its conversion would run the local Task)",
        namespace: "team-a",
        taskrun: bundle,
        expect: Expect::Denied("spec.taskRef.bundle"),
    });
    cases.push(Case {
        name: "taskref/both taskRef and taskSpec",
        namespace: "team-a",
        taskrun: with_spec(json!({"taskRef": {"name": "build"}, "taskSpec": {"steps": [{"name": "x", "image": "y"}]}})),
        expect: Expect::Denied("expected exactly one, got both"),
    });
    cases.push(Case {
        name: "taskref/neither",
        namespace: "team-a",
        taskrun: with_spec(json!({"taskRef": "build"})),
        expect: Expect::Denied("neither an inline spec.taskSpec nor a spec.taskRef"),
    });
    cases.push(Case {
        name: "taskref/a policy that skips references leaves them (its author's choice)",
        namespace: "skip",
        taskrun: in_namespace(with_spec(json!({"taskRef": {"name": "build", "kind": "Task", "apiVersion": "tekton.dev/v1"}})), "skip"),
        expect: Expect::Unchanged,
    });
    cases
}
