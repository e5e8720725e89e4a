//! The AdmissionReview on the wire: the request as bookend reads it and the response it writes.
//!
//! Hand-written, declaring only the fields bookend uses, rather than a general AdmissionReview
//! model (such as kube's `admission` types, whose feature bookend does not enable), for two
//! measured reasons (docs/benchmarks.md, "What was changed, and why"):
//!
//! - [`ObjectIn`] builds `request.object` without `metadata.managedFields`, which bookend never
//!   reads or patches and which is a third of the parse of a typical TaskRun (items 4 and 14);
//!   every later copy, comparison and drop of the object is smaller too.
//! - The base64 patch goes into [`ResponseOut`] as a `RawValue` (base64 encoded straight into
//!   one quoted string) rather than a `String` that serde_json escape-scans byte by byte.
//!   Measured from 511,256 instructions per review (item 14): the derived answer with the
//!   `RawValue` patch costs +23.7 k (4.6 %); with the patch as a plain `String`, +69 k (13.5 %).
//!
//! The body is checked as UTF-8 once up front ([`read`]), which spares serde_json the check per
//! string (7 % of the parse, item 4).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Answer;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReviewIn {
    #[serde(default)]
    pub(super) api_version: String,
    #[serde(default)]
    pub(super) kind: String,
    pub(super) request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestIn {
    #[serde(default)]
    pub(super) uid: String,
    #[serde(default)]
    pub(super) kind: GroupVersionKind,
    #[serde(default)]
    pub(super) sub_resource: Option<String>,
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) namespace: Option<String>,
    #[serde(default)]
    pub(super) operation: String,
    #[serde(default)]
    pub(super) object: Option<ObjectIn>,
    /// The object before an UPDATE.
    #[serde(default)]
    pub(super) old_object: Option<ObjectIn>,
    #[serde(default)]
    pub(super) dry_run: Option<bool>,
    #[serde(default)]
    pub(super) user_info: UserInfo,
}

/// `request.object` as a JSON value, without `metadata.managedFields`: bookend never reads or
/// patches them, and they are a large share of a TaskRun (many small objects), so not building
/// them saves a good part of the parse and of every later copy and comparison.
pub(super) struct ObjectIn(pub(super) Value);

impl<'de> Deserialize<'de> for ObjectIn {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(SkipVisitor {
                skip: &["metadata", "managedFields"],
            })
            .map(ObjectIn)
    }
}

/// Builds a `Value` like serde_json's own visitor, leaving out the member at `skip` (a path of
/// object keys).
struct SkipVisitor {
    skip: &'static [&'static str],
}

impl<'de> serde::de::Visitor<'de> for SkipVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.skip.split_first() {
                Some((head, [])) if key == *head => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                Some((head, rest)) if key == *head => {
                    let value = map.next_value_seed(SkipSeed(rest))?;
                    out.insert(key, value);
                }
                _ => {
                    out.insert(key, map.next_value()?);
                }
            }
        }
        Ok(Value::Object(out))
    }

    // Anything that is not an object is kept as it is (and refused later where it matters).
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
}

struct SkipSeed(&'static [&'static str]);

impl<'de> serde::de::DeserializeSeed<'de> for SkipSeed {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(SkipVisitor { skip: self.0 })
    }
}

#[derive(Deserialize, Default)]
pub(super) struct UserInfo {
    #[serde(default)]
    pub(super) username: String,
}

#[derive(Deserialize, Default)]
pub(super) struct GroupVersionKind {
    #[serde(default)]
    pub(super) group: String,
    #[serde(default)]
    pub(super) version: String,
    #[serde(default)]
    pub(super) kind: String,
}

/// The JSON body of a 4xx answer.
#[derive(Serialize)]
struct ErrorOut<'a> {
    error: &'a str,
}

/// Reads a body as an AdmissionReview; the error says why it is not one.
pub(super) fn read(body: &[u8]) -> Result<ReviewIn, String> {
    // Validating UTF-8 once up front lets serde_json skip it for every string.
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// The answering AdmissionReview: `response.uid`, `allowed`, `status` on denial, `patchType`
/// and `patch` (base64 of the JSON patch), `auditAnnotations`, `warnings`; optional fields
/// left out when empty.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Box<serde_json::value::RawValue>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    audit_annotations: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct StatusOut<'a> {
    message: &'a str,
    code: u16,
    reason: &'static str,
}

/// The AdmissionReview answering a request: `answer`, under the request's `apiVersion` and `uid`.
pub(super) fn review_response(api_version: &str, uid: &str, answer: &Answer) -> Vec<u8> {
    let response = ResponseOut {
        uid,
        allowed: answer.message.is_none(),
        // 400 (not the default 403): Tekton's PipelineRun controller treats a BadRequest from
        // TaskRun creation as permanent and fails the PipelineRun with this message.
        status: answer.message.as_deref().map(|message| StatusOut {
            message,
            code: 400,
            reason: "BadRequest",
        }),
        patch_type: answer.patch.as_ref().map(|_| "JSONPatch"),
        // Base64 needs no escaping: as a RawValue, serde_json writes it as it is instead of
        // escape-scanning it byte by byte (the measured gain in the module doc).
        patch: answer.patch.as_ref().map(|p| {
            let mut quoted = String::with_capacity(p.len().div_ceil(3) * 4 + 2);
            quoted.push('"');
            base64::engine::general_purpose::STANDARD.encode_string(p, &mut quoted);
            quoted.push('"');
            serde_json::value::RawValue::from_string(quoted).expect("base64 is a JSON string")
        }),
        audit_annotations: &answer.audit_annotations,
        warnings: &answer.warnings,
    };
    serde_json::to_vec(&ReviewOut {
        api_version,
        kind: "AdmissionReview",
        response,
    })
    .expect("an AdmissionReview serialises")
}

/// The body of an HTTP 400 for a request that is not an AdmissionReview bookend can read.
pub(super) fn error_body(reason: &str) -> Vec<u8> {
    serde_json::to_vec(&ErrorOut { error: reason }).expect("error serialises")
}
