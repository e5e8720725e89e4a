//! Arbitrary text → `policy::load::policy_set_from_yaml`: no panic, every issue
//! names a path and a message; a set that builds is then used on sample TaskRuns with the
//! engine's properties checked (patch applies, second pass is a no-op).
#![no_main]

use bookend::policy::Settings;
use bookend::policy::load::{LoadedSet, policy_set_from_yaml};
use bookend_fuzz::check_decision;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let LoadedSet { set, issues, .. } =
        policy_set_from_yaml("fuzz.yaml", text, Settings::default());
    for issue in &issues {
        assert!(!issue.message.is_empty(), "{issue:?}");
    }
    if set.is_empty() {
        return;
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
