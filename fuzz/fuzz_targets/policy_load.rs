//! Arbitrary text → `policy::load::parse_policies` → `PolicySet::build`: no panic, every issue
//! names a path and a message; a set that builds is then used on sample TaskRuns with the
//! engine's properties checked (patch applies, second pass is a no-op).
#![no_main]

use bookend::policy::load::parse_policies;
use bookend::policy::{PolicySet, Settings};
use bookend_fuzz::check_decision;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (docs, issues) = parse_policies("fuzz.yaml", text);
    for issue in &issues {
        assert!(!issue.message.is_empty(), "{issue:?}");
    }
    if docs.is_empty() {
        return;
    }
    let (set, issues) = PolicySet::build(docs, Settings::default());
    for issue in &issues {
        assert!(!issue.message.is_empty(), "{issue:?}");
    }
    let samples = [
        json!({"apiVersion": "tekton.dev/v1", "kind": "TaskRun",
               "metadata": {"generateName": "r-", "labels": {"source": "git"}},
               "spec": {"taskSpec": {"steps": [{"name": "build", "image": "golang"}],
                                     "volumes": [{"name": "src", "emptyDir": {}}]}}}),
        json!({"apiVersion": "tekton.dev/v1beta1", "kind": "TaskRun",
               "metadata": {"name": "r", "ownerReferences": [{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "p", "uid": "u"}]},
               "spec": {"taskSpec": {"steps": [{"name": "a", "image": "x"}, {"name": "b", "image": "y", "onError": "continue"}]}}}),
    ];
    for ns in ["team-a", "prod", "default"] {
        for sample in &samples {
            check_decision(sample, ns, false, &set);
        }
    }
});
