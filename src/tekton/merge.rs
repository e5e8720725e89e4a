//! Placeholder until the port of Tekton's stepTemplate merge lands (branch `merge`).

use serde_json::Value;

use super::ApiVersion;

/// The step Tekton's `MergeStepsWithStepTemplate` makes of `step` under `template`.
pub fn merge_step_template(template: &Value, step: &Value, _version: ApiVersion) -> Value {
    let (Some(t), Some(s)) = (template.as_object(), step.as_object()) else {
        return step.clone();
    };
    if s.get("ref").is_some_and(|r| !r.is_null()) {
        return step.clone();
    }
    let mut merged = t.clone();
    merged.remove("name");
    for (k, v) in s {
        merged.insert(k.clone(), v.clone());
    }
    Value::Object(merged)
}
