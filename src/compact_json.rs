//! Compact JSON text of `serde_json` values, byte for byte what `serde_json::to_vec` writes, but
//! scanning strings eight bytes at a time for the characters that need escaping. The webhook
//! writes every patch this way: it is mostly step scripts and commands, long runs of text where
//! serde_json's byte-at-a-time escape loop was a tenth of a review's instructions.

use serde_json::Value;

use crate::patch::Operation;

/// `value` appended to `out` as compact JSON.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // Rare in a patch; serde_json's own number formatting keeps the output identical.
        Value::Number(n) => {
            serde_json::to_writer(&mut *out, n).expect("writing to a Vec cannot fail");
        }
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            out.push(b'{');
            for (i, (key, member)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_value(out, member);
            }
            out.push(b'}');
        }
    }
}

/// A JSON Patch document (`[{"op":…,"path":…,"value":…},…]`), as serde_json writes
/// `Vec<Operation>`.
pub fn patch_to_vec(ops: &[Operation]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    out.push(b'[');
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let (name, path, value) = match op {
            Operation::Add { path, value } => ("add", path, Some(value)),
            Operation::Remove { path } => ("remove", path, None),
            Operation::Replace { path, value } => ("replace", path, Some(value)),
        };
        out.extend_from_slice(b"{\"op\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"path\":");
        write_str(&mut out, path);
        if let Some(value) = value {
            out.extend_from_slice(b",\"value\":");
            write_value(&mut out, value);
        }
        out.push(b'}');
    }
    out.push(b']');
    out
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is a control character, `"` or `\`. Each test is
/// the classic "has a zero byte" / "has a byte less than n" bit trick: a byte can be flagged
/// wrongly only above a rightly flagged one, so the lowest flag is always exact.
fn escape_flags(word: u64) -> u64 {
    let control = word.wrapping_sub(ONES * 0x20) & !word;
    let quote = word ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGH_BITS
}

/// `s` as a JSON string, escaped as serde_json escapes (short forms for `\b \t \n \f \r`,
/// `\u00XX` with lowercase hex for other control characters; nothing else).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut copied_to = 0;
    let mut at = 0;
    while at < bytes.len() {
        match bytes.get(at..at + 8) {
            Some(eight) => {
                let flags = escape_flags(u64::from_le_bytes(eight.try_into().expect("8 bytes")));
                if flags == 0 {
                    at += 8;
                    continue;
                }
                at += flags.trailing_zeros() as usize / 8;
            }
            // Fewer than eight bytes left: one at a time.
            None => match bytes[at..].iter().position(|&b| needs_escape(b)) {
                Some(offset) => at += offset,
                None => break,
            },
        }
        out.extend_from_slice(&bytes[copied_to..at]);
        write_escape(out, bytes[at]);
        at += 1;
        copied_to = at;
    }
    out.extend_from_slice(&bytes[copied_to..]);
    out.push(b'"');
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

fn write_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn text(value: &Value) -> String {
        let mut out = Vec::new();
        write_value(&mut out, value);
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn escapes_exactly_as_serde_json() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        for s in [
            every_ascii.as_str(),
            "",
            "plain text longer than one word of eight bytes",
            "quote \" and backslash \\ after eight bytes",
            "\"\"\"\"\"\"\"\"\"",
            "tab\tnew\nline\rform\u{c}back\u{8}nul\u{0}unit\u{1f}del\u{7f}",
            "ünïcødé — “quotes” 🚀 and \u{2028}",
        ] {
            let value = Value::String(s.to_owned());
            assert_eq!(
                text(&value),
                serde_json::to_string(&value).unwrap(),
                "{s:?}"
            );
        }
    }

    #[test]
    fn writes_a_patch_as_serde_json_does() {
        let ops = vec![
            Operation::Add {
                path: "/spec/taskSpec/steps/0".into(),
                value: json!({"name": "a", "script": "#!/bin/sh\necho \"hi\"", "n": 1.5, "ok": true}),
            },
            Operation::Remove {
                path: "/metadata/annotations/bookend.dev~1x".into(),
            },
            Operation::Replace {
                path: "/spec/x".into(),
                value: json!([null, false, -3, 18446744073709551615u64, {}, []]),
            },
        ];
        assert_eq!(patch_to_vec(&ops), serde_json::to_vec(&ops).unwrap());
        assert_eq!(patch_to_vec(&[]), b"[]");
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[ -~\\t\\n\"\\\\]{0,40}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_value_is_written_as_serde_json_writes_it(value in any_value()) {
            prop_assert_eq!(text(&value), serde_json::to_string(&value).unwrap());
        }
    }
}
