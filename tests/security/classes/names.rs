//! Class 8 (I7): the author's step names of every length up to Tekton's 63 characters, with an
//! `Always` policy whose verdict reads each step's directory under `/tekton/steps` (the runtime
//! suite runs them under Tekton's entrypoint).

use serde_json::json;

use crate::cases::{Case, Expect, inline};

pub fn cases() -> Vec<Case> {
    [57usize, 58, 59, 62, 63]
        .into_iter()
        .map(|len| {
            let name = format!("s{}", "x".repeat(len - 1));
            Case {
                name: Box::leak(format!("names/a {len}-character step name").into_boxed_str()),
                namespace: "team-a",
                taskrun: inline(json!([{"name": name, "image": "golang", "script": "true"}])),
                expect: Expect::Injected,
            }
        })
        .collect()
}
