//! Comparing steps the way they look after Tekton's defaulting webhook round-tripped them
//! through Go structs: zero values dropped, result types defaulted, durations and resource
//! quantities rewritten in Go's canonical form. bookend must recognise its own steps in such an
//! object (re-invocation, the validating backstop), or it would deny its own output.

use serde_json::{Map, Value};

use crate::policy::validate::parse_go_duration;

/// The comparable form of a step (or volume).
pub fn canonical(step: &Value) -> Value {
    canon(step, None)
}

fn canon(value: &Value, key: Option<&str>) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let c = match (k.as_str(), v) {
                    ("timeout", Value::String(s)) => match parse_go_duration(s) {
                        Ok(secs) => Value::String(format!("{secs}s")),
                        Err(_) => v.clone(),
                    },
                    ("limits" | "requests", Value::Object(q))
                        if matches!(key, Some("computeResources" | "resources")) =>
                    {
                        Value::Object(
                            q.iter()
                                .map(|(name, qty)| (name.clone(), canonical_quantity(qty)))
                                .collect(),
                        )
                    }
                    ("results", Value::Array(results)) => {
                        Value::Array(results.iter().map(default_result_type).collect())
                    }
                    _ => canon(v, Some(k)),
                };
                if !is_zero(&c) {
                    out.insert(k.clone(), c);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| canon(v, key)).collect()),
        other => other.clone(),
    }
}

fn default_result_type(result: &Value) -> Value {
    let mut r = canon(result, None);
    if let Value::Object(obj) = &mut r
        && !obj.contains_key("type")
    {
        let t = if obj.contains_key("properties") {
            "object"
        } else {
            "string"
        };
        obj.insert("type".to_owned(), Value::String(t.to_owned()));
    }
    r
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// A resource quantity as a plain number string (`500m` and `0.5` are the same CPU).
fn canonical_quantity(q: &Value) -> Value {
    let text = match q {
        Value::String(s) => s.as_str(),
        Value::Number(n) => return Value::String(n.to_string()),
        other => return other.clone(),
    };
    match parse_quantity(text) {
        Some(n) => Value::String(format!("{n}")),
        None => q.clone(),
    }
}

fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_round_trip_forms_compare_equal() {
        let policy = json!({
            "name": "bookend-x", "image": "alpine", "timeout": "5m",
            "computeResources": {"limits": {"cpu": "0.5", "memory": "1Gi"}},
            "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": false}],
            "results": [{"name": "ok"}]
        });
        let defaulted = json!({
            "name": "bookend-x", "image": "alpine", "timeout": "5m0s",
            "computeResources": {"limits": {"cpu": "500m", "memory": "1073741824"}},
            "volumeMounts": [{"name": "v", "mountPath": "/v"}],
            "results": [{"name": "ok", "type": "string"}],
            "securityContext": {}
        });
        assert_eq!(canonical(&policy), canonical(&defaulted));
    }

    #[test]
    fn real_differences_remain() {
        let a = json!({"name": "x", "image": "alpine", "timeout": "5m"});
        assert_ne!(
            canonical(&a),
            canonical(&json!({"name": "x", "image": "alpine", "timeout": "6m"}))
        );
        assert_ne!(
            canonical(&a),
            canonical(&json!({"name": "x", "image": "evil", "timeout": "5m"}))
        );
        let r = json!({"computeResources": {"limits": {"cpu": "1"}}});
        assert_ne!(
            canonical(&r),
            canonical(&json!({"computeResources": {"limits": {"cpu": "2"}}}))
        );
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("100m"), Some(0.1));
        assert_eq!(parse_quantity("2Ki"), Some(2048.0));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("lots"), None);
    }
}
