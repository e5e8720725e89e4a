//! Minimal RFC 6902 patches: the difference between the TaskRun as it came and as bookend wants
//! it, as `add`/`remove`/`replace` operations on the smallest subtrees that changed.
//!
//! Arrays of named objects (steps, volumes) are aligned by name, so inserting a step is one `add`
//! at its index instead of a rewrite of every later step.
//!
//! A member bookend changes in many places at once (a TaskRun's steps under `postStepsRun:
//! Always`: helpers inserted, `onError` and `when` set on each step) is instead written as one
//! `replace` of the whole member when that is no longer than the minimal operations
//! ([`diff_member_fewest`]): fewer operations for the API server to apply (each costs it
//! decoding and encoding again the step it touches), no more bytes for anyone to write, send
//! and read (docs/apiserver-benchmark.md, "A cheaper patch").

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

/// One JSON Patch operation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Operation {
    Add { path: String, value: Value },
    Remove { path: String },
    Replace { path: String, value: Value },
}

impl Operation {
    pub fn path(&self) -> &str {
        match self {
            Self::Add { path, .. } | Self::Remove { path } | Self::Replace { path, .. } => path,
        }
    }
}

/// The operations that turn `old` into `new` (empty when they are equal).
pub fn diff(old: &Value, new: &Value) -> Vec<Operation> {
    diff_owned(old, new.clone())
}

/// [`diff`] that consumes `new`: added and replaced values move into the operations instead of
/// being copied (the webhook discards the admitted object once it has the patch).
pub fn diff_owned(old: &Value, new: Value) -> Vec<Operation> {
    let mut ops = Vec::new();
    diff_into(&mut String::new(), old, new, &mut ops);
    ops
}

/// Appends one JSON Pointer reference token to `path`, escaping `~` and `/`.
pub fn push_token(path: &mut String, token: &str) {
    path.push('/');
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// A JSON Pointer to the member `tokens` (object keys, outermost first) names.
pub fn pointer(tokens: &[&str]) -> String {
    let mut path = String::new();
    for token in tokens {
        push_token(&mut path, token);
    }
    path
}

/// Appends the operations that make the member `tokens` names equal `new` (`None`: absent) in
/// `document`, as a diff of the whole documents lists them: a missing parent is added, and a
/// parent that is not an object is replaced, by objects that hold just that member.
pub fn set_at(document: &Value, tokens: &[&str], new: Option<Value>, ops: &mut Vec<Operation>) {
    let mut path = String::new();
    let mut current = document;
    for (depth, token) in tokens.iter().enumerate() {
        let Value::Object(members) = current else {
            if let Some(value) = new {
                let value = nested(&tokens[depth..], value);
                ops.push(Operation::Replace { path, value });
            }
            return;
        };
        push_token(&mut path, token);
        match (members.get(*token), depth + 1 == tokens.len()) {
            (Some(child), false) => current = child,
            (Some(old), true) => {
                match new {
                    None => ops.push(Operation::Remove { path }),
                    Some(value) if *old != value => ops.push(Operation::Replace { path, value }),
                    Some(_) => {}
                }
                return;
            }
            (None, _) => {
                if let Some(value) = new {
                    let value = nested(&tokens[depth + 1..], value);
                    ops.push(Operation::Add { path, value });
                }
                return;
            }
        }
    }
}

/// `value` inside objects with one member each, keyed by `tokens` (outermost first).
fn nested(tokens: &[&str], value: Value) -> Value {
    tokens.iter().rev().fold(value, |inner, token| {
        Value::Object(serde_json::Map::from_iter([((*token).to_owned(), inner)]))
    })
}

/// Appends to `ops` the operations that turn `old` into `new`, both at `path` (a JSON Pointer,
/// empty for the document root).
pub fn diff_into(path: &mut String, old: &Value, new: Value, ops: &mut Vec<Operation>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            // Maps keep their keys sorted (serde_json without `preserve_order`; a test holds
            // that), so one walk over both key sequences pairs the members, without lookups.
            let mut old_members = a.iter().peekable();
            for (key, new_value) in b {
                while let Some((gone, _)) = old_members.next_if(|(k, _)| k.as_str() < key.as_str())
                {
                    remove_member(path, gone, ops);
                }
                let old_value = old_members.next_if(|(k, _)| **k == key).map(|(_, v)| v);
                diff_member(path, &key, old_value, new_value, ops);
            }
            for (gone, _) in old_members {
                remove_member(path, gone, ops);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if *a != b {
                diff_array(path, a, b, ops);
            }
        }
        (_, new) => {
            if *old != new {
                ops.push(Operation::Replace {
                    path: path.clone(),
                    value: new,
                });
            }
        }
    }
}

fn remove_member(path: &mut String, key: &str, ops: &mut Vec<Operation>) {
    let len = path.len();
    push_token(path, key);
    ops.push(Operation::Remove { path: path.clone() });
    path.truncate(len);
}

/// Appends the operations that set member `key` of the object at `path` to `new`, where the
/// member was `old` (`None`: absent), as [`diff_into`] does for each member of two objects.
pub fn diff_member(
    path: &mut String,
    key: &str,
    old: Option<&Value>,
    new: Value,
    ops: &mut Vec<Operation>,
) {
    let len = path.len();
    match old {
        Some(old) => {
            if (old.is_object() && new.is_object()) || *old != new {
                push_token(path, key);
                diff_into(path, old, new, ops);
                path.truncate(len);
            }
        }
        None => {
            push_token(path, key);
            ops.push(Operation::Add {
                path: path.clone(),
                value: new,
            });
            path.truncate(len);
        }
    }
}

/// [`diff_member`], or one operation that sets the whole member when the minimal operations are
/// several and no shorter: the same document in fewer operations and no more bytes. For two
/// arrays the minimal operations are estimated first (elements aligned by name, as the diff
/// aligns them), so the whole member is written without computing them, and they are computed
/// only when they are the shorter patch.
pub fn diff_member_fewest(
    path: &mut String,
    key: &str,
    old: Option<&Value>,
    new: Value,
    ops: &mut Vec<Operation>,
) {
    if let (Some(Value::Array(before)), Value::Array(after)) = (old, &new) {
        let len = path.len();
        push_token(path, key);
        if whole_is_shorter(path.len(), before, after) {
            ops.push(Operation::Replace {
                path: path.clone(),
                value: new,
            });
            path.truncate(len);
            return;
        }
        path.truncate(len);
    }
    diff_member(path, key, old, new, ops);
}

/// Whether one `replace` of the array at a path `path_len` long with `new` is no longer than
/// the minimal operations from `old`, and they are more than one. Estimated as the diff aligns
/// elements (by name, unnamed ones by position), in lengths of compact JSON: an element the
/// minimal operations add is in both patches and cancels out; what remains is, on one side,
/// each operation's own text (`op`, `path`) and the members set on kept elements, and on the
/// other the kept elements themselves, which are counted only until they exceed it.
fn whole_is_shorter(path_len: usize, old: &[Value], new: &[Value]) -> bool {
    // An element's own path: the array's, a slash and an index.
    let element_path = path_len + 3;
    fn name(v: &Value) -> Option<&str> {
        v.get("name").and_then(Value::as_str)
    }
    let old_names: Vec<Option<&str>> = old.iter().map(name).collect();
    let mut matched = vec![false; old.len()];
    let mut kept: Vec<(&Value, &Value)> = Vec::new();
    let (mut ops, mut budget) = (0usize, 0usize);
    for (j, item) in new.iter().enumerate() {
        let found = match name(item) {
            Some(n) => old_names.iter().position(|o| *o == Some(n)),
            None => (j < old.len() && old_names[j].is_none()).then_some(j),
        };
        match found {
            Some(i) if !matched[i] => {
                matched[i] = true;
                let before = &old[i];
                match (before, item) {
                    (Value::Object(a), Value::Object(b)) => {
                        for (k, v) in b {
                            if a.get(k) != Some(v) {
                                ops += 1;
                                budget += 33 + element_path + k.len() + json_len(v);
                            }
                        }
                        for k in a.keys().filter(|k| !b.contains_key(*k)) {
                            ops += 1;
                            budget += 28 + element_path + k.len();
                        }
                    }
                    _ if before == item => {}
                    _ => {
                        ops += 1;
                        budget += 32 + element_path;
                    }
                }
                kept.push((before, item));
            }
            _ => {
                ops += 1;
                budget += 32 + element_path;
            }
        }
    }
    let removed = matched.iter().filter(|m| !**m).count();
    ops += removed;
    budget += removed * (27 + element_path);
    if ops < 2 {
        return false;
    }
    // The replace's own text, then the kept elements as they are in the new array.
    let mut whole = 34 + path_len + new.len().saturating_sub(1);
    for (_, item) in kept {
        whole += json_len(item);
        if whole > budget {
            return false;
        }
    }
    true
}

/// About the length of `value` written as compact JSON: exact but for escapes in strings,
/// which it does not look for (a string counts its bytes and two quotes), so it costs one
/// step per node rather than per byte.
pub fn json_len(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(b) => {
            if *b {
                4
            } else {
                5
            }
        }
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => s.len() + 2,
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        Value::Object(members) => {
            2 + members.len().saturating_sub(1)
                + members
                    .iter()
                    .map(|(k, v)| k.len() + 3 + json_len(v))
                    .sum::<usize>()
        }
    }
}

/// Alignment key of an array element: the `name` of a named object, or the ordinal among the
/// unnamed ones (unnamed steps keep their relative order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key<'a> {
    Named(&'a str),
    Unnamed(usize),
}

fn keys(items: &[Value]) -> Option<Vec<Key<'_>>> {
    let mut unnamed = 0;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let obj = item.as_object()?;
        match obj
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => out.push(Key::Named(name)),
            None => {
                out.push(Key::Unnamed(unnamed));
                unnamed += 1;
            }
        }
    }
    Some(out)
}

fn diff_array(path: &mut String, old: &[Value], new: Vec<Value>, ops: &mut Vec<Operation>) {
    let matches = match (keys(old), keys(&new)) {
        (Some(old_keys), Some(new_keys)) if all_distinct(&old_keys) && all_distinct(&new_keys) => {
            Some(keyed_matches(&old_keys, &new_keys))
        }
        _ => None,
    };
    if let Some(matches) = matches {
        return diff_keyed(path, old, new, &matches, ops);
    }
    // Scalars and anonymous objects: shared prefix, then shared suffix, then a positional
    // diff of equal-length middles or a remove/add of the rest.
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let (old_rest, new_rest) = (&old[prefix..], &new[prefix..]);
    let suffix = old_rest
        .iter()
        .rev()
        .zip(new_rest.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let old_mid = &old_rest[..old_rest.len() - suffix];
    let new_mid_len = new_rest.len() - suffix;
    let new_mid = new.into_iter().skip(prefix).take(new_mid_len);
    let len = path.len();
    if old_mid.len() == new_mid_len {
        for (i, (a, b)) in old_mid.iter().zip(new_mid).enumerate() {
            push_token(path, &(prefix + i).to_string());
            diff_into(path, a, b, ops);
            path.truncate(len);
        }
        return;
    }
    for i in (0..old_mid.len()).rev() {
        push_token(path, &(prefix + i).to_string());
        ops.push(Operation::Remove { path: path.clone() });
        path.truncate(len);
    }
    for (i, value) in new_mid.enumerate() {
        push_token(path, &(prefix + i).to_string());
        ops.push(Operation::Add {
            path: path.clone(),
            value,
        });
        path.truncate(len);
    }
}

/// Up to this many elements, arrays are aligned by linear search: cheaper than hashing every
/// key (a typical TaskRun has a handful of steps).
const LINEAR_UP_TO: usize = 32;

fn all_distinct(keys: &[Key<'_>]) -> bool {
    if keys.len() <= LINEAR_UP_TO {
        return keys.iter().enumerate().all(|(i, k)| !keys[..i].contains(k));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.iter().all(|k| seen.insert(k))
}

/// For each new element, the index of the old element with the same key.
fn keyed_matches(old_keys: &[Key<'_>], new_keys: &[Key<'_>]) -> Vec<Option<usize>> {
    if old_keys.len() <= LINEAR_UP_TO {
        return new_keys
            .iter()
            .map(|k| old_keys.iter().position(|o| o == k))
            .collect();
    }
    let old_index: HashMap<&Key<'_>, usize> =
        old_keys.iter().enumerate().map(|(i, k)| (k, i)).collect();
    new_keys.iter().map(|k| old_index.get(k).copied()).collect()
}

fn diff_keyed(
    path: &mut String,
    old: &[Value],
    new: Vec<Value>,
    matches: &[Option<usize>],
    ops: &mut Vec<Operation>,
) {
    // Keep the longest run of matches whose old indexes increase (the rest is removed and
    // added again).
    let kept = longest_increasing(matches);
    let mut keep_old = vec![false; old.len()];
    for &(_, o) in &kept {
        keep_old[o] = true;
    }
    let len = path.len();
    for i in (0..old.len()).rev() {
        if !keep_old[i] {
            push_token(path, &i.to_string());
            ops.push(Operation::Remove { path: path.clone() });
            path.truncate(len);
        }
    }
    // After the removals the array holds the kept elements in order; walking the new array
    // forwards, every earlier position already equals the final one.
    let mut kept_iter = kept.iter().peekable();
    for (j, value) in new.into_iter().enumerate() {
        push_token(path, &j.to_string());
        match kept_iter.peek() {
            Some(&&(n, o)) if n == j => {
                kept_iter.next();
                diff_into(path, &old[o], value, ops);
            }
            _ => ops.push(Operation::Add {
                path: path.clone(),
                value,
            }),
        }
        path.truncate(len);
    }
}

/// Longest subsequence of `(new index, old index)` pairs with increasing old indexes
/// (patience sorting, O(n log n)).
fn longest_increasing(matches: &[Option<usize>]) -> Vec<(usize, usize)> {
    let pairs: Vec<(usize, usize)> = matches
        .iter()
        .enumerate()
        .filter_map(|(n, o)| o.map(|o| (n, o)))
        .collect();
    let mut tails: Vec<usize> = Vec::new(); // index into pairs of the smallest tail per length
    let mut prev: Vec<Option<usize>> = vec![None; pairs.len()];
    for (i, &(_, o)) in pairs.iter().enumerate() {
        let pos = tails.partition_point(|&t| pairs[t].1 < o);
        if pos > 0 {
            prev[i] = Some(tails[pos - 1]);
        }
        if pos == tails.len() {
            tails.push(i);
        } else {
            tails[pos] = i;
        }
    }
    let mut out = Vec::with_capacity(tails.len());
    let mut cursor = tails.last().copied();
    while let Some(i) = cursor {
        out.push(pairs[i]);
        cursor = prev[i];
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn json_len_is_the_serialised_length_without_escapes() {
        for v in [
            json!(null),
            json!(true),
            json!(false),
            json!(-12.5),
            json!("a line é"),
            json!([]),
            json!({}),
            json!({"a": [1, "b", {"c": null}], "de": {"f": false}}),
        ] {
            assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len(), "{v}");
        }
        // Escapes are not counted.
        assert_eq!(json_len(&json!("a\nb")), 5);
    }

    #[test]
    fn many_changes_become_one_replace_and_few_stay_minimal() {
        let old = json!({"steps": [{"name": "a"}, {"name": "b"}]});
        // One insertion: one add, never the whole list again.
        let one = json!([{"name": "x", "image": "i"}, {"name": "a"}, {"name": "b"}]);
        let mut ops = Vec::new();
        diff_member_fewest(
            &mut String::new(),
            "steps",
            old.get("steps"),
            one.clone(),
            &mut ops,
        );
        assert_eq!(ops.len(), 1);
        assert!(matches!(&ops[0], Operation::Add { path, .. } if path == "/steps/0"));
        // Changes all over a short list: one replace.
        let many = json!([
            {"name": "x"}, {"name": "g1"}, {"name": "a", "onError": "continue"},
            {"name": "g2"}, {"name": "b", "onError": "continue"}, {"name": "v"}
        ]);
        let mut ops = Vec::new();
        diff_member_fewest(
            &mut String::new(),
            "steps",
            old.get("steps"),
            many.clone(),
            &mut ops,
        );
        assert_eq!(
            ops,
            [Operation::Replace {
                path: "/steps".into(),
                value: many.clone()
            }]
        );
        // The same changes around large steps: the minimal operations are cheaper.
        let big = "x".repeat(2000);
        let old_big = json!([{"name": "a", "script": big}, {"name": "b", "script": big}]);
        let mut new_big = many.clone();
        new_big[2]["script"] = json!(big);
        new_big[4]["script"] = json!(big);
        let mut ops = Vec::new();
        diff_member_fewest(
            &mut String::new(),
            "steps",
            Some(&old_big),
            new_big.clone(),
            &mut ops,
        );
        assert!(ops.len() > 1, "{ops:?}");
        for (old, new) in [(old.get("steps").unwrap(), many), (&old_big, new_big)] {
            let mut ops = Vec::new();
            diff_member_fewest(
                &mut String::new(),
                "steps",
                Some(old),
                new.clone(),
                &mut ops,
            );
            let doc = apply(&json!({"steps": old}), &ops);
            assert_eq!(doc["steps"], new);
        }
    }

    fn apply(old: &Value, ops: &[Operation]) -> Value {
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::to_value(ops).unwrap()).unwrap();
        let mut doc = old.clone();
        json_patch::patch(&mut doc, &patch).unwrap();
        doc
    }

    /// The object diff (and the engine's patch, which lists `metadata` before `spec`) rely on
    /// serde_json maps keeping their keys sorted. serde_json's `preserve_order` feature would
    /// make them keep insertion order instead, for every crate in the build once any dependency
    /// turns it on (Cargo unifies features): this test fails then.
    #[test]
    fn maps_keep_their_keys_sorted() {
        let mut map = serde_json::Map::new();
        map.insert("spec".into(), json!(1));
        map.insert("metadata".into(), json!(2));
        map.insert("apiVersion".into(), json!(3));
        assert_eq!(
            map.keys().collect::<Vec<_>>(),
            ["apiVersion", "metadata", "spec"]
        );
        let parsed: Value = serde_json::from_str(r#"{"z": 1, "a": 2}"#).unwrap();
        assert_eq!(parsed.as_object().unwrap().keys().next().unwrap(), "a");
    }

    #[test]
    fn equal_documents_give_no_patch() {
        let v = json!({"a": [1, {"b": 2}]});
        assert!(diff(&v, &v).is_empty());
    }

    #[test]
    fn inserting_steps_is_one_add_each() {
        let old = json!({"spec": {"taskSpec": {"steps": [
            {"name": "build", "image": "golang"}, {"image": "unnamed"}, {"name": "test", "image": "golang"}
        ]}}});
        let mut new = old.clone();
        let steps = new["spec"]["taskSpec"]["steps"].as_array_mut().unwrap();
        steps.insert(0, json!({"name": "bookend-pre", "image": "x"}));
        steps.push(json!({"name": "bookend-post", "image": "y"}));
        let ops = diff(&old, &new);
        assert_eq!(
            ops,
            vec![
                Operation::Add {
                    path: "/spec/taskSpec/steps/0".into(),
                    value: json!({"name": "bookend-pre", "image": "x"})
                },
                Operation::Add {
                    path: "/spec/taskSpec/steps/4".into(),
                    value: json!({"name": "bookend-post", "image": "y"})
                },
            ]
        );
        assert_eq!(apply(&old, &ops), new);
    }

    #[test]
    fn keys_are_escaped() {
        let old = json!({"metadata": {"annotations": {}}});
        let new = json!({"metadata": {"annotations": {"bookend.dev/injected": "x", "a~b": "y"}}});
        let ops = diff(&old, &new);
        let mut paths: Vec<&str> = ops.iter().map(Operation::path).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "/metadata/annotations/a~0b",
                "/metadata/annotations/bookend.dev~1injected"
            ]
        );
        assert_eq!(apply(&old, &ops), new);
    }

    #[test]
    fn field_changes_inside_a_kept_step_are_local() {
        let old = json!([{"name": "a", "args": ["x"]}, {"name": "b"}]);
        let new = json!([{"name": "pre"}, {"name": "a", "args": ["x", "y"], "onError": "continue"}, {"name": "b"}]);
        let ops = diff(&old, &new);
        assert_eq!(ops.len(), 3, "{ops:?}");
        assert_eq!(apply(&old, &ops), new);
    }

    #[test]
    fn reordered_named_elements_still_apply() {
        let old = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        let new = json!([{"name": "c"}, {"name": "a"}, {"name": "d"}]);
        assert_eq!(apply(&old, &diff(&old, &new)), new);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0i64..5).prop_map(|n| json!(n)),
            "[a-c~/]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(
                    (prop_oneof![Just("name".to_owned()), "[a-c/~]{1,2}"], inner),
                    0..5
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn applying_the_diff_gives_the_new_document(old in arb_json(), new in arb_json()) {
            let ops = diff(&old, &new);
            prop_assert_eq!(apply(&old, &ops), new);
        }

        #[test]
        fn the_fewest_operations_give_the_new_member(old in arb_json(), new in arb_json()) {
            let doc = json!({"a": 1, "m": old});
            let mut ops = Vec::new();
            diff_member_fewest(&mut String::new(), "m", doc.get("m"), new.clone(), &mut ops);
            prop_assert_eq!(apply(&doc, &ops), json!({"a": 1, "m": new}));
            prop_assert!(ops.len() <= diff(&doc["m"], &new).len().max(1));
        }

        #[test]
        fn step_lists_roundtrip(
            old in prop::collection::vec(prop::option::of("[a-e]"), 0..40),
            new in prop::collection::vec(prop::option::of("[a-e]"), 0..40),
        ) {
            let to_steps = |names: &[Option<String>]| {
                let mut seen = std::collections::HashSet::new();
                Value::Array(names.iter().filter(|n| n.as_ref().is_none_or(|n| seen.insert(n.clone())))
                    .enumerate()
                    .map(|(i, n)| match n { Some(n) => json!({"name": n, "i": i}), None => json!({"image": i}) })
                    .collect())
            };
            let (old, new) = (to_steps(&old), to_steps(&new));
            let ops = diff(&old, &new);
            prop_assert_eq!(apply(&old, &ops), new);
        }
    }
}
