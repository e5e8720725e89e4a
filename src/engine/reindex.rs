//! Step-index references that shift when steps are inserted before a user step:
//! `/tekton/steps/<i>/…`, `/tekton/run/<i>/…` and `step-unnamed-<i>` (as in
//! `$(steps.step-unnamed-<i>.exitCode.path)`). Named references are unaffected.

use serde_json::Value;

const PATTERNS: [&str; 3] = ["/tekton/steps/", "/tekton/run/", "step-unnamed-"];

/// Rewrites every index reference in the strings of `value` through `map` (indexes it does not
/// map stay as they are). Returns whether anything changed.
pub fn rewrite(value: &mut Value, map: &dyn Fn(usize) -> Option<usize>) -> bool {
    match value {
        Value::String(s) => match rewrite_str(s, map) {
            Some(new) => {
                *s = new;
                true
            }
            None => false,
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| rewrite(v, map) | changed),
        Value::Object(obj) => obj
            .values_mut()
            .fold(false, |changed, v| rewrite(v, map) | changed),
        _ => false,
    }
}

/// Whether `value` holds any index reference at all.
pub fn has_index_reference(value: &Value) -> bool {
    match value {
        Value::String(s) => PATTERNS.iter().any(|p| {
            s.match_indices(p)
                .any(|(i, _)| s[i + p.len()..].starts_with(|c: char| c.is_ascii_digit()))
        }),
        Value::Array(items) => items.iter().any(has_index_reference),
        Value::Object(obj) => obj.values().any(has_index_reference),
        _ => false,
    }
}

fn rewrite_str(s: &str, map: &dyn Fn(usize) -> Option<usize>) -> Option<String> {
    // The shortest reference is `/tekton/run/0`; two of the patterns start `/tekton/`, so most
    // strings are ruled out by two scans.
    let tekton = || s.contains("/tekton/") && PATTERNS[..2].iter().any(|p| s.contains(p));
    if s.len() < 13 || !(tekton() || s.contains(PATTERNS[2])) {
        return None;
    }
    let mut out = String::with_capacity(s.len() + 4);
    let mut changed = false;
    let mut rest = s;
    'scan: while !rest.is_empty() {
        for pattern in PATTERNS {
            if let Some(after) = rest.strip_prefix(pattern) {
                let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                // A word character right after the digits means this is not an index
                // (`/tekton/steps/0abc`); `step-unnamed-` needs a non-word character before it.
                let boundary_after =
                    !after[digits..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                let boundary_before = pattern.starts_with('/')
                    || !out.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if digits > 0 && boundary_after && boundary_before {
                    out.push_str(pattern);
                    let index: Option<usize> = after[..digits].parse().ok();
                    match index.and_then(map) {
                        Some(new) => {
                            changed |= Some(new) != index;
                            out.push_str(&new.to_string());
                        }
                        None => out.push_str(&after[..digits]),
                    }
                    rest = &after[digits..];
                    continue 'scan;
                }
            }
        }
        let c = rest.chars().next().expect("rest is not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shift(by: usize) -> impl Fn(usize) -> Option<usize> {
        move |i| Some(i + by)
    }

    #[test]
    fn rewrites_the_three_reference_forms() {
        let mut step = json!({
            "script": "cat /tekton/steps/0/exitCode; ls /tekton/run/1/out; echo $(steps.step-unnamed-0.exitCode.path)",
            "args": ["/tekton/steps/step-unnamed-2/exitCode", "/tekton/steps/12"],
            "env": [{"name": "X", "value": "/tekton/run/3/status"}]
        });
        assert!(rewrite(&mut step, &shift(2)));
        assert_eq!(
            step["script"],
            "cat /tekton/steps/2/exitCode; ls /tekton/run/3/out; echo $(steps.step-unnamed-2.exitCode.path)"
        );
        assert_eq!(step["args"][0], "/tekton/steps/step-unnamed-4/exitCode");
        assert_eq!(step["args"][1], "/tekton/steps/14");
        assert_eq!(step["env"][0]["value"], "/tekton/run/5/status");
    }

    #[test]
    fn leaves_lookalikes_and_unmapped_indexes_alone() {
        let mut step = json!({"script": "/tekton/steps/step-build/exitCode my-step-unnamed-0 /tekton/steps/0abc /tekton/results/x /tekton/steps/7/x"});
        let before = step.clone();
        assert!(!rewrite(&mut step, &|i| (i != 7).then_some(i + 1)));
        assert_eq!(step, before);
    }

    #[test]
    fn reverse_mapping_undoes_the_shift() {
        let original =
            json!({"script": "cat /tekton/steps/0/exitCode /tekton/run/1/out step-unnamed-1"});
        let mut step = original.clone();
        rewrite(&mut step, &shift(3));
        rewrite(&mut step, &|i| i.checked_sub(3));
        assert_eq!(step, original);
    }

    #[test]
    fn detects_references() {
        assert!(has_index_reference(
            &json!({"a": ["x /tekton/steps/0/exitCode"]})
        ));
        assert!(!has_index_reference(
            &json!({"a": "/tekton/steps/step-x/exitCode"})
        ));
    }
}
