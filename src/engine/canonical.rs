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

/// Whether `canonical(a) == canonical(b)`, without building either form: the comparison bookend
/// makes for every injected step and volume it finds again (re-invocation, the validating
/// backstop). Only the few members with a special form (`timeout`, resource quantities, result
/// types) are built; everything else is compared in place.
pub fn equivalent(a: &Value, b: &Value) -> bool {
    values_eq(a, b, None)
}

/// [`equivalent`] of two objects without their member `skip` (what is not an object compares
/// as with [`equivalent`]): a fixed form compared with an object whose `skip` member is known
/// to be right, without building the object the fixed form would be with it.
pub fn equivalent_except(a: &Value, b: &Value, skip: &str) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => objects_eq(x, y, None, &[skip]),
        _ => equivalent(a, b),
    }
}

/// Whether `{key: a}` and `{key: b}` are [`equivalent`], without building either object.
pub fn members_equivalent(key: &str, a: &Value, b: &Value) -> bool {
    members_eq(key, a, b, None)
}

/// Whether `{key: value}` is canonically empty (a zero value Go's round trip drops), without
/// building it.
pub fn member_dropped(key: &str, value: &Value) -> bool {
    member_is_zero(key, value, None)
}

/// `canon(a, key) == canon(b, key)`.
fn values_eq(a: &Value, b: &Value, key: Option<&str>) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => objects_eq(x, y, key, &[]),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| values_eq(p, q, key))
        }
        // Scalars are kept as they are; an object or array never equals anything else.
        _ => a == b,
    }
}

fn objects_eq(
    x: &Map<String, Value>,
    y: &Map<String, Value>,
    parent: Option<&str>,
    skip: &[&str],
) -> bool {
    // Maps are sorted (serde_json without preserve_order), so one walk pairs the keys.
    let kept = |(k, _): &(&String, &Value)| !skip.contains(&k.as_str());
    let (mut xs, mut ys) = (
        x.iter().filter(kept).peekable(),
        y.iter().filter(kept).peekable(),
    );
    loop {
        let ordering = match (xs.peek(), ys.peek()) {
            (None, None) => return true,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((kx, _)), Some((ky, _))) => kx.as_str().cmp(ky.as_str()),
        };
        let same = match ordering {
            std::cmp::Ordering::Less => {
                let (k, v) = xs.next().expect("peeked");
                member_is_zero(k, v, parent)
            }
            std::cmp::Ordering::Greater => {
                let (k, v) = ys.next().expect("peeked");
                member_is_zero(k, v, parent)
            }
            std::cmp::Ordering::Equal => {
                let (k, p) = xs.next().expect("peeked");
                let (_, q) = ys.next().expect("peeked");
                members_eq(k, p, q, parent)
            }
        };
        if !same {
            return false;
        }
    }
}

/// Whether member `key` of an object under `parent` has a form of its own (see [`member`]).
fn is_special(key: &str, value: &Value, parent: Option<&str>) -> bool {
    match (key, value) {
        ("timeout", Value::String(_)) | ("results", Value::Array(_)) => true,
        ("limits" | "requests", Value::Object(_)) => {
            matches!(parent, Some("computeResources" | "resources"))
        }
        _ => false,
    }
}

/// Two members of the same name: equal, or both dropped as zero.
fn members_eq(key: &str, p: &Value, q: &Value, parent: Option<&str>) -> bool {
    if is_special(key, p, parent) || is_special(key, q, parent) {
        let (cp, cq) = (member(key, p, parent), member(key, q, parent));
        return (is_zero(&cp, Some(key)) && is_zero(&cq, Some(key))) || cp == cq;
    }
    match (is_zero_canon(p, Some(key)), is_zero_canon(q, Some(key))) {
        (true, true) => true,
        (false, false) => values_eq(p, q, Some(key)),
        _ => false,
    }
}

fn member_is_zero(key: &str, value: &Value, parent: Option<&str>) -> bool {
    if is_special(key, value, parent) {
        return is_zero(&member(key, value, parent), Some(key));
    }
    is_zero_canon(value, Some(key))
}

/// `is_zero(&canon(value, key))`.
fn is_zero_canon(value: &Value, key: Option<&str>) -> bool {
    match value {
        Value::Object(map) => map.iter().all(|(k, v)| member_is_zero(k, v, key)),
        other => is_zero(other, key),
    }
}

fn canon(value: &Value, key: Option<&str>) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let c = member(k, v, key);
                if !is_zero(&c, Some(k)) {
                    out.insert(k.clone(), c);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| canon(v, key)).collect()),
        other => other.clone(),
    }
}

/// The comparable form of member `key` of an object that is itself member `parent`.
fn member(key: &str, value: &Value, parent: Option<&str>) -> Value {
    match (key, value) {
        ("timeout", Value::String(s)) => match parse_go_duration(s) {
            Ok(secs) => Value::String(format!("{secs}s")),
            Err(_) => value.clone(),
        },
        ("limits" | "requests", Value::Object(q))
            if matches!(parent, Some("computeResources" | "resources")) =>
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
        _ => canon(value, Some(key)),
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

/// Members that are plain `bool`s with `omitempty` in Tekton's and Kubernetes' Go types: Go's
/// JSON leaves `false` out, so `false` and absent are one value. Every other `false` is a
/// pointer Go keeps (`securityContext.allowPrivilegeEscalation: false` is not its absence, which
/// means true), so it counts.
const OMITTED_FALSE: &[&str] = &["readOnly", "stdin", "stdinOnce", "tty"];

/// Whether `v`, as member `key` (`None` for a list item or the root), is a zero value Go's JSON
/// leaves out.
fn is_zero(v: &Value, key: Option<&str>) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(false) => key.is_some_and(|k| OMITTED_FALSE.contains(&k)),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(_) => false,
    }
}

/// A resource quantity in nano-units, exactly, as Go's `resource.Quantity` holds it (`500m` and
/// `0.5` are the same CPU; a value finer than a nano-unit is rounded up, as
/// `resource.ParseQuantity` does, so `0.010000000000000001` is not `10m`).
fn canonical_quantity(q: &Value) -> Value {
    let text = match q {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return other.clone(),
    };
    match nano_quantity(&text) {
        Some((negative, nanos)) => Value::String(format!(
            "{}{nanos}n",
            if negative && nanos > 0 { "-" } else { "" }
        )),
        None => q.clone(),
    }
}

/// `(negative, nano-units)` of a quantity; `None` when it is not one (or too large to hold).
fn nano_quantity(s: &str) -> Option<(bool, u128)> {
    let s = s.trim();
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let mut digits: u128 = 0;
    for c in int.chars().chain(frac.chars()) {
        digits = digits
            .checked_mul(10)?
            .checked_add(u128::from(c.to_digit(10)?))?;
    }
    let (multiplier, pow10): (u128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        e if e.starts_with(['e', 'E']) => (1, e[1..].parse().ok()?),
        _ => return None,
    };
    let value = digits.checked_mul(multiplier)?;
    let shift = pow10 + 9 - i32::try_from(frac.len()).ok()?;
    let nanos = if shift >= 0 {
        value.checked_mul(10u128.checked_pow(shift.unsigned_abs())?)?
    } else {
        let divisor = 10u128.checked_pow(shift.unsigned_abs())?;
        value / divisor + u128::from(value % divisor != 0)
    };
    Some((negative, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A policy step as written, and the form Tekton's defaulting and a Go round trip give back.
    fn round_trip_pair() -> (Value, Value) {
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
        (policy, defaulted)
    }

    #[test]
    fn go_round_trip_forms_compare_equal() {
        let (policy, defaulted) = round_trip_pair();
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
    fn a_false_pointer_is_not_its_absence() {
        // Go keeps `allowPrivilegeEscalation: false` (a pointer), and its absence means true:
        // a copy of an org step without it is not the org step.
        let hardened = json!({"name": "x", "securityContext": {"allowPrivilegeEscalation": false}});
        assert!(!equivalent(&hardened, &json!({"name": "x"})));
        assert!(!equivalent(
            &hardened,
            &json!({"name": "x", "securityContext": {}})
        ));
        // A plain `bool` with omitempty is its absence.
        assert!(equivalent(
            &json!({"volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": false}]}),
            &json!({"volumeMounts": [{"name": "v", "mountPath": "/v"}]})
        ));
    }

    #[test]
    fn equivalent_agrees_with_canonical_on_the_round_trip_forms() {
        let (policy, defaulted) = round_trip_pair();
        assert!(equivalent(&policy, &defaulted));
        assert!(!equivalent(
            &policy,
            &json!({"name": "bookend-x", "image": "evil", "timeout": "5m"})
        ));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                Just(json!(false)),
                Just(json!(true)),
                Just(json!("")),
                Just(json!("x")),
                Just(json!("5m")),
                Just(json!("300s")),
                Just(json!("500m")),
                Just(json!("0.5")),
                Just(json!(0)),
                Just(json!(1)),
                Just(json!({})),
                Just(json!([])),
            ]
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("a"),
                Just("b"),
                Just("name"),
                Just("type"),
                Just("timeout"),
                Just("limits"),
                Just("requests"),
                Just("computeResources"),
                Just("resources"),
                Just("results"),
                Just("properties"),
            ]
            .prop_map(str::to_owned)
        }

        fn value() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(4, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                    prop::collection::btree_map(key(), inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #[test]
            fn equivalent_is_canonical_equality(a in value(), b in value()) {
                prop_assert_eq!(equivalent(&a, &b), canonical(&a) == canonical(&b));
                prop_assert!(equivalent(&a, &canonical(&a)));
                prop_assert!(equivalent(&a, &a));
            }

            #[test]
            fn zero_members_do_not_count(a in value(), k in key(), z in leaf()) {
                let mut b = a.clone();
                if let Value::Object(map) = &mut b {
                    map.insert(k, z);
                }
                prop_assert_eq!(equivalent(&a, &b), canonical(&a) == canonical(&b));
            }

            #[test]
            fn one_member_forms_are_the_objects_of_one_member(k in key(), a in value(), b in value()) {
                let (one_a, one_b) = (json!({ k.clone(): a.clone() }), json!({ k.clone(): b.clone() }));
                prop_assert_eq!(members_equivalent(&k, &a, &b), equivalent(&one_a, &one_b));
                prop_assert_eq!(member_dropped(&k, &a), canonical(&one_a) == json!({}));
            }

            /// Skipping a member is comparing the objects without it, whatever either holds
            /// there (the service account token's checks skip the name they matched on).
            #[test]
            fn equivalent_except_is_equivalent_without_the_member(
                a in value(), b in value(), k in key(), x in value(), y in value()
            ) {
                let (mut a, mut b) = (a, b);
                let without = |v: &Value| {
                    let mut v = v.clone();
                    if let Value::Object(map) = &mut v {
                        map.remove(&k);
                    }
                    v
                };
                prop_assert_eq!(equivalent_except(&a, &b, &k), equivalent(&without(&a), &without(&b)));
                for (v, member) in [(&mut a, x), (&mut b, y)] {
                    if let Value::Object(map) = v {
                        map.insert(k.clone(), member);
                    }
                }
                prop_assert_eq!(equivalent_except(&a, &b, &k), equivalent(&without(&a), &without(&b)));
            }
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(nano_quantity("100m"), Some((false, 100_000_000)));
        assert_eq!(nano_quantity("0.1"), nano_quantity("100m"));
        assert_eq!(nano_quantity("2Ki"), Some((false, 2048 * 1_000_000_000)));
        assert_eq!(nano_quantity("1e3"), nano_quantity("1k"));
        assert_eq!(nano_quantity("1073741824"), nano_quantity("1Gi"));
        assert_eq!(nano_quantity("lots"), None);
        assert_eq!(nano_quantity("-1"), Some((true, 1_000_000_000)));
        // Finer than a nano-unit: rounded up, as Go does, so not equal (a reviewer's find).
        assert_ne!(nano_quantity("0.010000000000000001"), nano_quantity("10m"));
        assert_eq!(
            nano_quantity("0.010000000000000001"),
            nano_quantity("10000001n")
        );
        assert_ne!(nano_quantity("33554432.000000001"), nano_quantity("32Mi"));
    }
}
