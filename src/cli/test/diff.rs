//! A semantic difference between two JSON documents, for people: object keys in any order
//! (they are sorted maps), arrays of named objects (steps, volumes, params) aligned by name, and
//! one line per difference with the path of the field.

use serde_json::Value;

/// The differences between `expected` and `got`, one line each (empty when equal).
pub fn diff(expected: &Value, got: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk("", expected, got, &mut out);
    out
}

fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key:?}]"),
    }
}

/// A value on one line, cut to a readable length.
pub fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 100 {
        return text;
    }
    let cut: String = text.chars().take(97).collect();
    format!("{cut}...")
}

fn walk(path: &str, expected: &Value, got: &Value, out: &mut Vec<String>) {
    if expected == got {
        return;
    }
    let at = if path.is_empty() { "(root)" } else { path };
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            for (key, ev) in e {
                match g.get(key) {
                    Some(gv) => walk(&child(path, key), ev, gv, out),
                    None => out.push(format!(
                        "{}: missing (expected {})",
                        child(path, key),
                        short(ev)
                    )),
                }
            }
            for (key, gv) in g {
                if !e.contains_key(key) {
                    out.push(format!("{}: unexpected {}", child(path, key), short(gv)));
                }
            }
        }
        (Value::Array(e), Value::Array(g)) => match (names(e), names(g)) {
            (Some(en), Some(gn)) => {
                if en != gn {
                    out.push(format!("{at}: names expected {en:?}, got {gn:?}"));
                }
                for (ev, name) in e.iter().zip(&en) {
                    if let Some(gv) = g.iter().zip(&gn).find(|(_, n)| *n == name).map(|(v, _)| v) {
                        walk(&format!("{path}[{name}]"), ev, gv, out);
                    }
                }
            }
            _ => {
                if e.len() != g.len() {
                    out.push(format!("{at}: expected {} items, got {}", e.len(), g.len()));
                }
                for (i, (ev, gv)) in e.iter().zip(g).enumerate() {
                    walk(&format!("{path}[{i}]"), ev, gv, out);
                }
                for (i, ev) in e.iter().enumerate().skip(g.len()) {
                    out.push(format!("{path}[{i}]: missing (expected {})", short(ev)));
                }
                for (i, gv) in g.iter().enumerate().skip(e.len()) {
                    out.push(format!("{path}[{i}]: unexpected {}", short(gv)));
                }
            }
        },
        _ => out.push(format!(
            "{at}: expected {}, got {}",
            short(expected),
            short(got)
        )),
    }
}

/// The `name`s of an array of objects that all have a distinct string name.
fn names(items: &[Value]) -> Option<Vec<&str>> {
    if items.is_empty() {
        return None;
    }
    let names: Vec<&str> = items
        .iter()
        .map(|v| v.get("name").and_then(Value::as_str))
        .collect::<Option<_>>()?;
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == names.len()).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_documents_in_any_key_order_have_no_difference() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": "s", "y": [1, 2]}, "b": 1}"#).unwrap();
        assert!(diff(&a, &b).is_empty());
    }

    #[test]
    fn fields_missing_unexpected_and_changed() {
        let expected = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"n": 1}});
        let got = json!({"metadata": {"labels": {"a": "1", "c": "3"}}, "spec": {"n": "1"}});
        assert_eq!(
            diff(&expected, &got),
            [
                "metadata.labels.b: missing (expected \"2\")",
                "metadata.labels.c: unexpected \"3\"",
                "spec.n: expected 1, got \"1\"",
            ]
        );
        assert_eq!(
            diff(&json!({"a/b": 1}), &json!({"a/b": 2})),
            ["[\"a/b\"]: expected 1, got 2"]
        );
    }

    #[test]
    fn named_items_are_aligned_by_name() {
        // An inserted step is one line about the names, not a difference in every later step.
        let expected = json!({"steps": [
            {"name": "bookend-a", "image": "x"},
            {"name": "build", "image": "go"},
            {"name": "test", "image": "go"},
        ]});
        let got = json!({"steps": [
            {"name": "build", "image": "go"},
            {"name": "test", "image": "golang"},
        ]});
        assert_eq!(
            diff(&expected, &got),
            [
                "steps: names expected [\"bookend-a\", \"build\", \"test\"], got [\"build\", \"test\"]",
                "steps[test].image: expected \"go\", got \"golang\"",
            ]
        );
    }

    #[test]
    fn plain_arrays_by_index() {
        assert_eq!(
            diff(
                &json!({"args": ["a", "b"]}),
                &json!({"args": ["a", "c", "d"]})
            ),
            [
                "args: expected 2 items, got 3",
                "args[1]: expected \"b\", got \"c\"",
                "args[2]: unexpected \"d\"",
            ]
        );
        let long = json!("x".repeat(300));
        assert!(diff(&json!(1), &long)[0].ends_with("..."));
    }
}
