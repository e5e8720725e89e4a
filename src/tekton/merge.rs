//! Tekton's `stepTemplate` merge, on JSON: what a step of a Task with a `stepTemplate` turns
//! into before Tekton builds its container. bookend uses it to write the author's template into
//! the author's own steps, so that the template can be dropped and steps added by bookend inherit
//! nothing from it.
//!
//! Upstream (tektoncd/pipeline v1.15.0, k8s.io/apimachinery v0.36.3, k8s.io/api v0.35.7):
//!
//! * `pkg/apis/pipeline/v1/merge.go` `MergeStepsWithStepTemplate` (v1beta1 has its own copy):
//!   the template and the step are turned into `corev1.Container`s (`ToK8sContainer`) and
//!   marshalled to JSON; `mergeObjWithTemplateBytes` then makes a strategic merge patch from an
//!   empty container to the step with the template as the current object
//!   (`strategicpatch.CreateThreeWayMergePatch`, overwrite) and applies it to the template
//!   (`StrategicMergePatchUsingLookupPatchMeta`), the patch tags being those of
//!   `corev1.Container`. Then `amendConflictingContainerFields`, and the fields only a Step has
//!   are copied from the step (`SetContainerFields` puts the container fields back).
//! * `k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`: `diffMaps`/`diffListsOfMaps`
//!   (the patch, with `IgnoreDeletions` and `SetElementOrder`), `mergeMap`/`mergeSlice`/
//!   `mergePatchIntoOriginal` (applying it), `normalizeElementOrder`/`mergeSortedSlice` (the
//!   order of merged lists), `validatePatchWithSetOrderList` (the one error).
//!
//! The rules, as this module implements them (facts of the code above, re-derived here and
//! checked against Tekton's own function by the differential test `tests/e2e/merge.rs`):
//!
//! 1. Only container fields take part: `name`, `image`, `command`, `args`, `workingDir`,
//!    `envFrom`, `env`, `computeResources` (v1beta1 `resources`), `volumeMounts`,
//!    `volumeDevices`, `imagePullPolicy`, `securityContext`; in v1beta1 also the deprecated
//!    `ports`, `livenessProbe`, `readinessProbe`, `startupProbe`, `lifecycle`,
//!    `terminationMessagePath`, `terminationMessagePolicy`, `stdin`, `stdinOnce`, `tty` (and the
//!    template's deprecated `name`, which never wins: the step's `name` is always in the patch).
//!    The v1beta1 deprecated fields never reach a Pod (the conversion to v1 moves them into an
//!    annotation); this module merges them as Tekton's v1beta1 function does, so nothing the
//!    author wrote is lost and the v1beta1 result is Tekton's for every container field.
//! 2. Both sides are first put in the form Go's JSON gives them (`go_form`): with `omitempty`
//!    a zero value (`""`, `false`, `0`, `[]`, `{}` maps) is as good as absent, so the step's
//!    empty values never override the template (`image: ""`, `args: []`, an env `value: ""`,
//!    `readOnly: false`); a pointer set to its zero value (`privileged: false`, `runAsUser: 0`)
//!    is present and overrides. A field without `omitempty` is always there: a step that
//!    leaves out `secretKeyRef.key`, a volume mount's `name`, `resourceFieldRef.divisor`
//!    (`"0"`), a probe's `port` or a seccomp profile's `type` overrides the template's with the
//!    zero value; `grpc.service` (a pointer without `omitempty`) even removes it.
//! 3. Lists without a patch strategy (`command`, `args`, `envFrom`, capabilities `add`/`drop`,
//!    resource `claims`, probe commands and headers) are replaced whole by a non-empty step list.
//! 4. Maps and structs (`securityContext` recursively, `computeResources` `limits`/`requests`,
//!    an env entry's `valueFrom`) are merged key by key, the step's keys winning. Resource
//!    quantities are compared as Go's canonical form would compare them (same value, same
//!    format).
//! 5. `env` is merged by `name`, `volumeMounts` by `mountPath`, `volumeDevices` by
//!    `devicePath` (v1beta1 `ports` by `containerPort`), see `merge_keyed`: an entry of the
//!    step is merged into the template's entry with the same key, the step's entries keep the
//!    step's order, and an entry only the template has goes just before the first of the
//!    step's shared entries that follows it in the template, or at the end (template
//!    `[A,B,C,D]` + step `[X,C,Y]` gives `[X,A,B,C,Y,D]`). Duplicate keys follow Go's sort, and
//!    Tekton fails on some ([`MergeError`]).
//! 6. `amendConflictingContainerFields`: a merged env entry with both `value` and `valueFrom`
//!    is replaced by the step's own entry of that name (the last one).
//! 7. Every other member of the step is kept as it is: `script`, `timeout`, `onError`,
//!    `results`, `params`, `when`, `workspaces`, `stdoutConfig`, `stderrConfig`, `ref`. Also
//!    `displayName`, which Tekton's function drops whenever there is a template; no Pod or
//!    reconciler code reads it, so keeping it changes nothing that runs. (Tekton's v1beta1
//!    function also drops `results`, `params` and `workspaces`, but it only runs inside v1beta1
//!    validation; Pods are built from the v1 object, where the v1 function keeps them.)
//! 8. A step with a `ref` (a StepAction) is returned unchanged, as Tekton skips it.
//!
//! The result has the version's field names and leaves out the zero values of Go value fields
//! (`name: ""`, `readOnly: false`, `divisor: "0"`, `computeResources: {}`), which Go would have
//! written; `args: []` (Tekton's "reset nil args to empty") is never written either, as it
//! is not in Go's JSON. Quantities keep the spelling of the side that won, not Go's canonical
//! text. Members of the template that are not the version's container fields are ignored (Go's
//! strict decoding in Tekton's webhook rejects them anyway); members the schema below does not
//! know inside container fields (a newer Kubernetes field) are kept and merged like the known
//! maps and values.

use serde_json::{Map, Value};

use super::ApiVersion;

/// Why a step cannot be merged here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// Tekton's own merge fails on this step: the step lists a key twice in `field` with
    /// another changed entry between the two (`validatePatchWithSetOrderList`: "The order in
    /// patch list ... doesn't match $setElementOrder list"). Tekton's validation then rejects
    /// the Task or TaskRun ("error merging step template and steps").
    #[error(
        "Tekton's stepTemplate merge fails on the step's `{field}` (a repeated key around another entry)"
    )]
    ElementOrder { field: &'static str },
    /// A list of more than 12 entries in `field` repeats a key: Go sorts it with an unstable
    /// sort (`sort.Sort`, pdqsort beyond 12 items), so which entries pair up is not reproduced.
    #[error(
        "`{field}` has more than 12 entries and repeats a key: Tekton's result is not reproduced"
    )]
    Unreproducible { field: &'static str },
}

/// The step Tekton's `MergeStepsWithStepTemplate` makes of `step` with `template` (a v1 or
/// v1beta1 `stepTemplate`, in `version`'s field names). `template` null (or not an object)
/// and steps with a `ref` give the step unchanged.
pub fn merge_step_template(
    template: &Value,
    step: &Value,
    version: ApiVersion,
) -> Result<Value, MergeError> {
    let (Some(template), Some(step_obj)) = (template.as_object(), step.as_object()) else {
        return Ok(step.clone());
    };
    if step_obj.get("ref").is_some_and(|r| !r.is_null()) {
        return Ok(step.clone());
    }
    let members = container_members(version);
    let t = object_go_form(&pick(template, members), members);
    let s = object_go_form(&pick(step_obj, members), members);
    let mut merged = merge_container(&t, &s, members)?;
    amend_conflicting_env(&mut merged, &s);

    let mut out = step_obj.clone();
    for (name, _) in members {
        out.remove(*name);
    }
    for (name, value) in merged {
        if let Some(v) = tidy(&value, member(members, &name)) {
            out.insert(name, v);
        }
    }
    Ok(Value::Object(out))
}

/// [`merge_step_template`] over a list of steps (the first error ends it).
pub fn merge_all(
    template: &Value,
    steps: &[Value],
    version: ApiVersion,
) -> Result<Vec<Value>, MergeError> {
    steps
        .iter()
        .map(|s| merge_step_template(template, s, version))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The schema: how Go's encoding/json writes each member of corev1.Container (k8s.io/api
// v0.35.7, core/v1/types.go) and which lists strategic merge merges by key.

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A string, bool or number with `omitempty`: its zero value is not in Go's JSON.
    Omitted,
    /// A string or number without `omitempty`: always in Go's JSON, as its zero value if unset.
    Always(Zero),
    /// A pointer to a scalar (`omitempty`): present unless null, even as `false`, `0`, `""`.
    Pointer,
    /// A pointer without `omitempty`: Go writes `null` when it is unset.
    PointerOrNull,
    /// A pointer to a struct: present unless null.
    Object(&'static [Member]),
    /// A struct value: always present (`{}` when empty).
    Struct(&'static [Member]),
    /// A list of strings (`omitempty`), replaced whole.
    Strings,
    /// A list of structs (`omitempty`), replaced whole.
    List(&'static [Member]),
    /// A list of structs (`omitempty`) strategic merge merges by the given key.
    Keyed(&'static [Member], &'static str),
    /// A map of resource quantities (`omitempty`).
    Quantities,
}

/// The zero value of a `Kind::Always` member.
#[derive(Clone, Copy, Debug)]
enum Zero {
    Str,
    Int,
    /// `resource.Quantity`, a struct Go always writes (`"0"` when zero).
    Quantity,
}

type Member = (&'static str, Kind);

use Kind::*;

const ENV_VAR: &[Member] = &[
    ("name", Always(Zero::Str)),
    ("value", Omitted),
    ("valueFrom", Object(ENV_VAR_SOURCE)),
];
const ENV_VAR_SOURCE: &[Member] = &[
    ("fieldRef", Object(FIELD_REF)),
    ("resourceFieldRef", Object(RESOURCE_FIELD_REF)),
    ("configMapKeyRef", Object(KEY_SELECTOR)),
    ("secretKeyRef", Object(KEY_SELECTOR)),
    ("fileKeyRef", Object(FILE_KEY_SELECTOR)),
];
const FIELD_REF: &[Member] = &[("apiVersion", Omitted), ("fieldPath", Always(Zero::Str))];
const RESOURCE_FIELD_REF: &[Member] = &[
    ("containerName", Omitted),
    ("resource", Always(Zero::Str)),
    ("divisor", Always(Zero::Quantity)),
];
const KEY_SELECTOR: &[Member] = &[
    ("name", Omitted),
    ("key", Always(Zero::Str)),
    ("optional", Pointer),
];
const FILE_KEY_SELECTOR: &[Member] = &[
    ("volumeName", Always(Zero::Str)),
    ("path", Always(Zero::Str)),
    ("key", Always(Zero::Str)),
    ("optional", Pointer),
];
const ENV_FROM: &[Member] = &[
    ("prefix", Omitted),
    ("configMapRef", Object(ENV_SOURCE)),
    ("secretRef", Object(ENV_SOURCE)),
];
const ENV_SOURCE: &[Member] = &[("name", Omitted), ("optional", Pointer)];
const RESOURCES: &[Member] = &[
    ("limits", Quantities),
    ("requests", Quantities),
    ("claims", List(CLAIM)),
];
const CLAIM: &[Member] = &[("name", Always(Zero::Str)), ("request", Omitted)];
const VOLUME_MOUNT: &[Member] = &[
    ("name", Always(Zero::Str)),
    ("readOnly", Omitted),
    ("recursiveReadOnly", Pointer),
    ("mountPath", Always(Zero::Str)),
    ("subPath", Omitted),
    ("mountPropagation", Pointer),
    ("subPathExpr", Omitted),
];
const VOLUME_DEVICE: &[Member] = &[
    ("name", Always(Zero::Str)),
    ("devicePath", Always(Zero::Str)),
];
const SECURITY_CONTEXT: &[Member] = &[
    ("capabilities", Object(CAPABILITIES)),
    ("privileged", Pointer),
    ("seLinuxOptions", Object(SE_LINUX)),
    ("windowsOptions", Object(WINDOWS)),
    ("runAsUser", Pointer),
    ("runAsGroup", Pointer),
    ("runAsNonRoot", Pointer),
    ("readOnlyRootFilesystem", Pointer),
    ("allowPrivilegeEscalation", Pointer),
    ("procMount", Pointer),
    ("seccompProfile", Object(PROFILE)),
    ("appArmorProfile", Object(PROFILE)),
];
const CAPABILITIES: &[Member] = &[("add", Strings), ("drop", Strings)];
const SE_LINUX: &[Member] = &[
    ("user", Omitted),
    ("role", Omitted),
    ("type", Omitted),
    ("level", Omitted),
];
const WINDOWS: &[Member] = &[
    ("gmsaCredentialSpecName", Pointer),
    ("gmsaCredentialSpec", Pointer),
    ("runAsUserName", Pointer),
    ("hostProcess", Pointer),
];
const PROFILE: &[Member] = &[("type", Always(Zero::Str)), ("localhostProfile", Pointer)];
const CONTAINER_PORT: &[Member] = &[
    ("name", Omitted),
    ("hostPort", Omitted),
    ("containerPort", Always(Zero::Int)),
    ("protocol", Omitted),
    ("hostIP", Omitted),
];
const PROBE: &[Member] = &[
    ("exec", Object(EXEC)),
    ("httpGet", Object(HTTP_GET)),
    ("tcpSocket", Object(TCP_SOCKET)),
    ("grpc", Object(GRPC)),
    ("initialDelaySeconds", Omitted),
    ("timeoutSeconds", Omitted),
    ("periodSeconds", Omitted),
    ("successThreshold", Omitted),
    ("failureThreshold", Omitted),
    ("terminationGracePeriodSeconds", Pointer),
];
const EXEC: &[Member] = &[("command", Strings)];
const HTTP_GET: &[Member] = &[
    ("path", Omitted),
    // intstr.IntOrString: a number or a string, 0 when unset.
    ("port", Always(Zero::Int)),
    ("host", Omitted),
    ("scheme", Omitted),
    ("httpHeaders", List(HTTP_HEADER)),
];
const HTTP_HEADER: &[Member] = &[("name", Always(Zero::Str)), ("value", Always(Zero::Str))];
const TCP_SOCKET: &[Member] = &[("port", Always(Zero::Int)), ("host", Omitted)];
const GRPC: &[Member] = &[("port", Always(Zero::Int)), ("service", PointerOrNull)];
const LIFECYCLE: &[Member] = &[
    ("postStart", Object(HANDLER)),
    ("preStop", Object(HANDLER)),
    ("stopSignal", Pointer),
];
const HANDLER: &[Member] = &[
    ("exec", Object(EXEC)),
    ("httpGet", Object(HTTP_GET)),
    ("tcpSocket", Object(TCP_SOCKET)),
    ("sleep", Object(SLEEP)),
];
const SLEEP: &[Member] = &[("seconds", Always(Zero::Int))];

/// The members of a v1 Step/StepTemplate that are container fields.
const V1_CONTAINER: &[Member] = &[
    ("name", Always(Zero::Str)),
    ("image", Omitted),
    ("command", Strings),
    ("args", Strings),
    ("workingDir", Omitted),
    ("envFrom", List(ENV_FROM)),
    ("env", Keyed(ENV_VAR, "name")),
    ("computeResources", Struct(RESOURCES)),
    ("volumeMounts", Keyed(VOLUME_MOUNT, "mountPath")),
    ("volumeDevices", Keyed(VOLUME_DEVICE, "devicePath")),
    ("imagePullPolicy", Omitted),
    ("securityContext", Object(SECURITY_CONTEXT)),
];

/// The members of a v1beta1 Step/StepTemplate that are container fields (deprecated ones
/// included).
const V1BETA1_CONTAINER: &[Member] = &[
    ("name", Always(Zero::Str)),
    ("image", Omitted),
    ("command", Strings),
    ("args", Strings),
    ("workingDir", Omitted),
    ("ports", Keyed(CONTAINER_PORT, "containerPort")),
    ("envFrom", List(ENV_FROM)),
    ("env", Keyed(ENV_VAR, "name")),
    ("resources", Struct(RESOURCES)),
    ("volumeMounts", Keyed(VOLUME_MOUNT, "mountPath")),
    ("volumeDevices", Keyed(VOLUME_DEVICE, "devicePath")),
    ("livenessProbe", Object(PROBE)),
    ("readinessProbe", Object(PROBE)),
    ("startupProbe", Object(PROBE)),
    ("lifecycle", Object(LIFECYCLE)),
    ("terminationMessagePath", Omitted),
    ("terminationMessagePolicy", Omitted),
    ("imagePullPolicy", Omitted),
    ("securityContext", Object(SECURITY_CONTEXT)),
    ("stdin", Omitted),
    ("stdinOnce", Omitted),
    ("tty", Omitted),
];

fn container_members(version: ApiVersion) -> &'static [Member] {
    match version {
        ApiVersion::V1 => V1_CONTAINER,
        ApiVersion::V1beta1 => V1BETA1_CONTAINER,
    }
}

fn member(members: &[Member], name: &str) -> Option<Kind> {
    members.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
}

/// The kind of member `name` of a value of kind `parent`.
fn child(parent: Option<Kind>, name: &str) -> Option<Kind> {
    match parent? {
        Object(m) | Struct(m) => member(m, name),
        Quantities => Some(Always(Zero::Quantity)),
        _ => None,
    }
}

/// The container members of a step or template.
fn pick(obj: &Map<String, Value>, members: &[Member]) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| member(members, k).is_some())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Go's JSON form and back.

fn is_zero_scalar(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn zero(z: Zero) -> Value {
    match z {
        Zero::Str => Value::String(String::new()),
        Zero::Int => Value::from(0),
        Zero::Quantity => Value::String("0".to_owned()),
    }
}

/// What Go's JSON has for a member of kind `kind` decoded from `v` (`None`: absent or null);
/// `None` when Go leaves the member out.
fn go_form(v: Option<&Value>, kind: Kind) -> Option<Value> {
    match kind {
        Omitted => v.filter(|x| !is_zero_scalar(x)).cloned(),
        Always(z) => Some(v.cloned().unwrap_or_else(|| zero(z))),
        Pointer => v.cloned(),
        PointerOrNull => Some(v.cloned().unwrap_or(Value::Null)),
        Object(m) => v.map(|x| element_go_form(x, m)),
        Struct(m) => Some(element_go_form(v.unwrap_or(&Value::Object(Map::new())), m)),
        Strings | List(_) | Keyed(..) => match v {
            Some(Value::Array(items)) if items.is_empty() => None,
            Some(Value::Array(items)) => Some(Value::Array(match kind {
                List(m) | Keyed(m, _) => items.iter().map(|i| element_go_form(i, m)).collect(),
                _ => items.clone(),
            })),
            other => other.cloned(),
        },
        Quantities => match v {
            Some(Value::Object(q)) if q.is_empty() => None,
            other => other.cloned(),
        },
    }
}

fn element_go_form(v: &Value, members: &[Member]) -> Value {
    match v {
        Value::Object(obj) => Value::Object(object_go_form(obj, members)),
        other => other.clone(),
    }
}

/// An object as Go's JSON writes it: known members through [`go_form`], unknown ones kept
/// unless null.
fn object_go_form(obj: &Map<String, Value>, members: &[Member]) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, kind) in members {
        let v = obj.get(*name).filter(|v| !v.is_null());
        if let Some(x) = go_form(v, *kind) {
            out.insert((*name).to_owned(), x);
        }
    }
    for (k, v) in obj {
        if member(members, k).is_none() && !v.is_null() {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// The output form: nulls and the zero values of Go value members left out.
fn tidy(v: &Value, kind: Option<Kind>) -> Option<Value> {
    if v.is_null() {
        return None;
    }
    match kind {
        Some(Omitted | Always(Zero::Str | Zero::Int)) if is_zero_scalar(v) => None,
        Some(Always(Zero::Quantity)) if v.as_str() == Some("0") => None,
        Some(Object(m)) => Some(tidy_element(v, m)),
        Some(Struct(m)) => Some(tidy_element(v, m)).filter(|t| t.as_object() != Some(&Map::new())),
        Some(Strings | List(_) | Keyed(..) | Quantities) => match v {
            Value::Array(items) if items.is_empty() => None,
            Value::Object(q) if q.is_empty() => None,
            Value::Array(items) => Some(Value::Array(match kind {
                Some(List(m) | Keyed(m, _)) => items.iter().map(|i| tidy_element(i, m)).collect(),
                _ => items.clone(),
            })),
            other => Some(other.clone()),
        },
        _ => Some(v.clone()),
    }
}

fn tidy_element(v: &Value, members: &[Member]) -> Value {
    match v {
        Value::Object(obj) => Value::Object(
            obj.iter()
                .filter_map(|(k, x)| Some((k.clone(), tidy(x, member(members, k))?)))
                .collect(),
        ),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// The patch and its application.

/// Equality as Go's `reflect.DeepEqual` on decoded JSON (numbers are float64), quantities as
/// Go's canonical text would compare.
fn go_eq(a: &Value, b: &Value, kind: Option<Kind>) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), Value::String(y)) if matches!(kind, Some(Always(Zero::Quantity))) => {
            same_quantity(x, y)
        }
        (Value::Array(x), Value::Array(y)) => {
            let elem = match kind {
                Some(List(m) | Keyed(m, _)) => Some(Struct(m)),
                _ => None,
            };
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| go_eq(p, q, elem))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter().all(|(k, p)| {
                    y.get(k)
                        .is_some_and(|q| go_eq(p, q, child(kind, k).or(Some(Omitted))))
                })
        }
        _ => a == b,
    }
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The patch from `t` to `s` without deletions (`diffMaps` with `IgnoreDeletions`): `None`
/// when `s` changes nothing. Not for keyed lists (see [`merge_keyed`]).
fn diff(t: &Value, s: &Value, kind: Option<Kind>) -> Option<Value> {
    match (t, s) {
        (Value::Object(tm), Value::Object(sm)) => {
            let mut d = Map::new();
            for (k, sv) in sm {
                match tm.get(k) {
                    None => {
                        d.insert(k.clone(), sv.clone());
                    }
                    Some(tv) => {
                        if let Some(x) = diff(tv, sv, child(kind, k)) {
                            d.insert(k.clone(), x);
                        }
                    }
                }
            }
            (!d.is_empty()).then_some(Value::Object(d))
        }
        _ if same_type(t, s) && go_eq(t, s, kind) => None,
        _ => Some(s.clone()),
    }
}

/// `v` without null members (what `discardNullValuesFromPatch` leaves of a new value).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), without_nulls(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Applies patch `p` to `t` (`mergeMap` without keyed lists): maps merged member by member,
/// a null member deletes, anything else replaces.
fn apply(t: &mut Value, p: &Value) {
    let (Value::Object(tm), Value::Object(pm)) = (&mut *t, p) else {
        *t = without_nulls(p);
        return;
    };
    for (k, pv) in pm {
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        match tm.get_mut(k) {
            Some(tv) if tv.is_object() && pv.is_object() => apply(tv, pv),
            Some(tv) if same_type(tv, pv) => *tv = pv.clone(),
            _ => {
                tm.insert(k.clone(), without_nulls(pv));
            }
        }
    }
}

fn merge_container(
    t: &Map<String, Value>,
    s: &Map<String, Value>,
    members: &'static [Member],
) -> Result<Map<String, Value>, MergeError> {
    let mut out = t.clone();
    for (name, sv) in s {
        let kind = member(members, name);
        match (out.get_mut(name), kind, sv) {
            (Some(Value::Array(tl)), Some(Keyed(m, key)), Value::Array(sl)) => {
                let field = members
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(n, _)| *n)
                    .unwrap_or("list");
                *tl = merge_keyed(field, key, m, tl, sl)?;
            }
            (Some(tv), _, _) => {
                if let Some(p) = diff(tv, sv, kind) {
                    apply(tv, &p);
                }
            }
            (None, _, _) => {
                out.insert(name.clone(), without_nulls(sv));
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Keyed lists.

fn key_of<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key)
}

fn same_key(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => go_eq(x, y, None),
        (None, None) => true,
        _ => false,
    }
}

/// Index of the first entry of `list` with the key of `v`.
fn position(list: &[Value], v: &Value, key: &str) -> Option<usize> {
    list.iter()
        .position(|x| same_key(key_of(x, key), key_of(v, key)))
}

/// Go sorts at most 12 items with an insertion sort (stable; with strategic merge's
/// "less or equal" comparison it reverses entries with the same key), longer lists with
/// pdqsort, which is not stable.
const GO_INSERTION_SORT_MAX: usize = 12;

fn repeats_a_key(list: &[Value], key: &str) -> bool {
    list.iter()
        .enumerate()
        .any(|(i, v)| position(list, v, key) != Some(i))
}

/// Merges the template's list `t` and the step's list `s` (both non-empty), keyed by `key`:
///
/// 1. The patch (`diffListsOfMaps`): for each key, in the order of its first appearance in the
///    step, the template's and the step's entries with that key are paired from the last one
///    backwards (Go's sort reverses equal keys). A pair gives the pair's difference when there
///    is one; step entries left over give themselves, the last first.
/// 2. Nothing in the patch and the same keys in the same order: the template's list.
/// 3. The patch must follow the step's order of keys (`validatePatchWithSetOrderList`), which
///    fails when a key repeated in the step has a patched entry between its occurrences.
/// 4. Each patch entry is merged into the first entry with its key (appended when there is
///    none), then the list is put in order twice ([`interleave`]): by the patch's order of
///    keys (`mergeSlice`), then by the step's (`$setElementOrder`).
fn merge_keyed(
    field: &'static str,
    key: &str,
    members: &'static [Member],
    t: &[Value],
    s: &[Value],
) -> Result<Vec<Value>, MergeError> {
    if (t.len() > GO_INSERTION_SORT_MAX && repeats_a_key(t, key))
        || (s.len() > GO_INSERTION_SORT_MAX && repeats_a_key(s, key))
    {
        return Err(MergeError::Unreproducible { field });
    }

    let mut patch = Vec::new();
    for (i, first) in s.iter().enumerate() {
        if position(s, first, key) != Some(i) {
            continue; // not the key's first appearance
        }
        let k = key_of(first, key);
        let tk: Vec<&Value> = t.iter().filter(|v| same_key(key_of(v, key), k)).collect();
        let sk: Vec<&Value> = s.iter().filter(|v| same_key(key_of(v, key), k)).collect();
        let (m, n) = (tk.len(), sk.len());
        for j in 0..m.min(n) {
            let (tv, sv) = (tk[m - 1 - j], sk[n - 1 - j]);
            match diff(tv, sv, Some(Struct(members))) {
                Some(Value::Object(mut d)) => {
                    if let Some(kv) = k {
                        d.insert(key.to_owned(), kv.clone());
                    }
                    patch.push(Value::Object(d));
                }
                Some(other) => patch.push(other),
                None => {}
            }
        }
        for j in (0..n.saturating_sub(m)).rev() {
            patch.push(sk[j].clone());
        }
    }

    let same_order = t.len() == s.len()
        && t.iter()
            .zip(s)
            .all(|(a, b)| same_key(key_of(a, key), key_of(b, key)));
    if patch.is_empty() && same_order {
        return Ok(t.to_vec());
    }

    let mut next = 0;
    for p in &patch {
        loop {
            let Some(sv) = s.get(next) else {
                return Err(MergeError::ElementOrder { field });
            };
            next += 1;
            if same_key(key_of(sv, key), key_of(p, key)) {
                break;
            }
        }
    }

    let mut list = t.to_vec();
    if !patch.is_empty() {
        for p in &patch {
            match position(&list, p, key) {
                Some(i) => apply(&mut list[i], p),
                None => list.push(p.clone()),
            }
        }
        list = interleave(list, &patch, t, key);
    }
    Ok(interleave(list, s, t, key))
}

/// Puts `items` in order (`normalizeElementOrder` + `mergeSortedSlice`): the entries whose key
/// is in `order` keep `order`'s order of keys and lead; each other entry (in `base`'s order)
/// goes just before the first leading entry that comes after it in `base`, or at the end.
fn interleave(items: Vec<Value>, order: &[Value], base: &[Value], key: &str) -> Vec<Value> {
    let (mut lead, mut rest): (Vec<Value>, Vec<Value>) = items
        .into_iter()
        .partition(|v| position(order, v, key).is_some());
    lead.sort_by_key(|v| position(order, v, key));
    rest.sort_by_key(|v| position(base, v, key).unwrap_or(usize::MAX));
    let mut out = Vec::with_capacity(lead.len() + rest.len());
    let (mut lead, mut rest) = (lead.into_iter().peekable(), rest.into_iter().peekable());
    while let (Some(l), Some(r)) = (lead.peek(), rest.peek()) {
        let earlier = match (position(base, r, key), position(base, l, key)) {
            (Some(ri), Some(li)) => ri < li,
            _ => false,
        };
        out.push(if earlier { rest.next() } else { lead.next() }.expect("peeked"));
    }
    out.extend(lead);
    out.extend(rest);
    out
}

/// `amendConflictingContainerFields`: a merged env entry with both `value` and `valueFrom` is
/// replaced by the step's own entry of that name (the last one), if the step has one.
fn amend_conflicting_env(merged: &mut Map<String, Value>, step: &Map<String, Value>) {
    let Some(Value::Array(step_env)) = step.get("env") else {
        return;
    };
    let Some(Value::Array(env)) = merged.get_mut("env") else {
        return;
    };
    for entry in env.iter_mut() {
        let conflicting = entry.get("valueFrom").is_some_and(|v| !v.is_null())
            && entry
                .get("value")
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty());
        if !conflicting {
            continue;
        }
        if let Some(own) = step_env
            .iter()
            .rev()
            .find(|e| e.get("name") == entry.get("name"))
        {
            *entry = own.clone();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Resource quantities, compared as Go's canonical text compares them.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuantityFormat {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A quantity's value as `sign * m * 2^p2 * 5^p5` with `m` prime to 10 (zero: `m == 0`).
#[derive(Debug, PartialEq, Eq)]
struct Exact {
    negative: bool,
    m: u128,
    p2: i64,
    p5: i64,
}

fn parse_quantity(s: &str) -> Option<(Exact, QuantityFormat)> {
    let (negative, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') {
        return None;
    }
    let (exp10, exp2, format) = match suffix {
        "" => (0, 0, QuantityFormat::DecimalSi),
        "n" => (-9, 0, QuantityFormat::DecimalSi),
        "u" => (-6, 0, QuantityFormat::DecimalSi),
        "m" => (-3, 0, QuantityFormat::DecimalSi),
        "k" => (3, 0, QuantityFormat::DecimalSi),
        "M" => (6, 0, QuantityFormat::DecimalSi),
        "G" => (9, 0, QuantityFormat::DecimalSi),
        "T" => (12, 0, QuantityFormat::DecimalSi),
        "P" => (15, 0, QuantityFormat::DecimalSi),
        "E" => (18, 0, QuantityFormat::DecimalSi),
        "Ki" => (0, 10, QuantityFormat::BinarySi),
        "Mi" => (0, 20, QuantityFormat::BinarySi),
        "Gi" => (0, 30, QuantityFormat::BinarySi),
        "Ti" => (0, 40, QuantityFormat::BinarySi),
        "Pi" => (0, 50, QuantityFormat::BinarySi),
        "Ei" => (0, 60, QuantityFormat::BinarySi),
        e if e.starts_with(['e', 'E']) => {
            (e[1..].parse().ok()?, 0, QuantityFormat::DecimalExponent)
        }
        _ => return None,
    };
    let digits = format!("{int}{frac}");
    let mut m: u128 = digits.trim_start_matches('0').parse().unwrap_or(0);
    if digits.trim_start_matches('0').len() > 38 {
        return None;
    }
    let exp10: i64 = exp10 - frac.len() as i64;
    let (mut p2, mut p5) = (exp10 + exp2, exp10);
    if m != 0 {
        while m.is_multiple_of(2) {
            m /= 2;
            p2 += 1;
        }
        while m.is_multiple_of(5) {
            m /= 5;
            p5 += 1;
        }
    } else {
        (p2, p5) = (0, 0);
    }
    Some((
        Exact {
            negative: negative && m != 0,
            m,
            p2,
            p5,
        },
        format,
    ))
}

/// Whether Go writes the two quantities the same (`Quantity.CanonicalizeBytes`): zero is
/// always `0`; otherwise the same value in the same format, a binary-SI quantity counting as
/// decimal when it is below 1024 in magnitude or not a whole number.
fn same_quantity(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (Some((x, fx)), Some((y, fy))) = (parse_quantity(a), parse_quantity(b)) else {
        return false;
    };
    if x.m == 0 || y.m == 0 {
        return x.m == y.m;
    }
    let effective = |q: &Exact, f: QuantityFormat| {
        if f != QuantityFormat::BinarySi {
            return f;
        }
        let whole = q.p2 >= 0 && q.p5 >= 0;
        let magnitude = q.m as f64 * 2f64.powi(q.p2 as i32) * 5f64.powi(q.p5 as i32);
        if whole && magnitude >= 1024.0 {
            f
        } else {
            QuantityFormat::DecimalSi
        }
    };
    x == y && effective(&x, fx) == effective(&y, fy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merge(template: Value, step: Value) -> Value {
        merge_step_template(&template, &step, ApiVersion::V1).unwrap()
    }

    fn env(names: &[&str], value: &str) -> Value {
        Value::Array(
            names
                .iter()
                .map(|n| json!({"name": n, "value": format!("{value}{n}")}))
                .collect(),
        )
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn env_order_follows_strategic_merge() {
        for (template, step, want) in [
            (
                &["T1", "T2"][..],
                &["S1", "S2"][..],
                &["S1", "S2", "T1", "T2"][..],
            ),
            (
                &["A", "B", "C", "D"],
                &["X", "C", "Y"],
                &["X", "A", "B", "C", "Y", "D"],
            ),
            (&["A", "B", "C"], &["C", "D", "A"], &["B", "C", "D", "A"]),
            // Tekton's TestMergeStepsWithStepTemplate/merge-and-overwrite-slice
            (
                &["KEEP_THIS", "SOME_KEY"],
                &["NEW_KEY", "SOME_KEY"],
                &["NEW_KEY", "KEEP_THIS", "SOME_KEY"],
            ),
            (&["A", "B"], &["A", "B"], &["A", "B"]),
            (&["A", "B"], &["B", "A"], &["B", "A"]),
        ] {
            let out = merge(
                json!({"env": env(template, "t")}),
                json!({"name": "s", "env": env(step, "s")}),
            );
            assert_eq!(
                names(&out["env"]),
                want,
                "template {template:?} + step {step:?}"
            );
            // shared names take the step's value, the others keep their own
            for e in out["env"].as_array().unwrap() {
                let n = e["name"].as_str().unwrap();
                let from = if step.contains(&n) { "s" } else { "t" };
                assert_eq!(e["value"], format!("{from}{n}"));
            }
        }
    }

    #[test]
    fn one_side_without_a_list_gives_the_other_side_as_it_is() {
        let out = merge(json!({}), json!({"env": env(&["B", "A"], "s")}));
        assert_eq!(names(&out["env"]), ["B", "A"]);
        let out = merge(json!({"env": env(&["B", "A"], "t")}), json!({"env": []}));
        assert_eq!(names(&out["env"]), ["B", "A"]);
    }

    #[test]
    fn volume_mounts_merge_by_mount_path_and_keep_unset_template_fields() {
        let out = merge(
            json!({"volumeMounts": [{"name": "t", "mountPath": "/a", "readOnly": true, "subPath": "x"},
                                    {"name": "u", "mountPath": "/b"}]}),
            json!({"volumeMounts": [{"name": "s", "mountPath": "/a", "readOnly": false},
                                    {"name": "c", "mountPath": "/c"}]}),
        );
        assert_eq!(
            out["volumeMounts"],
            json!([{"name": "s", "mountPath": "/a", "readOnly": true, "subPath": "x"},
                   {"name": "c", "mountPath": "/c"}, {"name": "u", "mountPath": "/b"}])
        );
        // `name` has no omitempty: a step mount without one clears the template's
        let out = merge(
            json!({"volumeMounts": [{"name": "t", "mountPath": "/a"}]}),
            json!({"volumeMounts": [{"mountPath": "/a"}]}),
        );
        assert_eq!(out["volumeMounts"], json!([{"mountPath": "/a"}]));
    }

    #[test]
    fn volume_devices_merge_by_device_path() {
        let out = merge(
            json!({"volumeDevices": [{"name": "t", "devicePath": "/dev/a"}, {"name": "u", "devicePath": "/dev/b"}]}),
            json!({"volumeDevices": [{"name": "s", "devicePath": "/dev/b"}]}),
        );
        assert_eq!(
            out["volumeDevices"],
            json!([{"name": "t", "devicePath": "/dev/a"}, {"name": "s", "devicePath": "/dev/b"}])
        );
    }

    #[test]
    fn empty_step_values_never_override() {
        let template = json!({"image": "t", "workingDir": "/t", "command": ["tc"], "args": ["ta"],
            "imagePullPolicy": "Always", "env": [{"name": "A", "value": "1"}],
            "envFrom": [{"configMapRef": {"name": "cm"}}]});
        let out = merge(
            template.clone(),
            json!({"name": "s", "image": "", "workingDir": "", "command": [], "args": [],
                   "imagePullPolicy": null, "env": [{"name": "A", "value": ""}], "envFrom": []}),
        );
        let mut want = template.as_object().unwrap().clone();
        want.insert("name".into(), json!("s"));
        assert_eq!(out, Value::Object(want));
    }

    #[test]
    fn non_empty_lists_replace_whole() {
        let out = merge(
            json!({"command": ["tc", "x"], "args": ["ta1", "ta2"],
                   "envFrom": [{"configMapRef": {"name": "cm"}}]}),
            json!({"command": ["sc"], "args": ["sa"], "envFrom": [{"secretRef": {"name": "s"}}]}),
        );
        assert_eq!(out["command"], json!(["sc"]));
        assert_eq!(out["args"], json!(["sa"]));
        assert_eq!(out["envFrom"], json!([{"secretRef": {"name": "s"}}]));
    }

    #[test]
    fn maps_merge_key_by_key_and_capability_lists_are_replaced() {
        let out = merge(
            json!({"computeResources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m"}},
                   "securityContext": {"runAsUser": 1000, "privileged": true,
                       "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                       "seccompProfile": {"type": "RuntimeDefault"}}}),
            json!({"computeResources": {"limits": {"cpu": "2"}},
                   "securityContext": {"privileged": false, "runAsNonRoot": true,
                       "capabilities": {"drop": ["NET_RAW"]}}}),
        );
        assert_eq!(
            out["computeResources"],
            json!({"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "100m"}})
        );
        assert_eq!(
            out["securityContext"],
            json!({"runAsUser": 1000, "privileged": false, "runAsNonRoot": true,
                   "capabilities": {"add": ["NET_ADMIN"], "drop": ["NET_RAW"]},
                   "seccompProfile": {"type": "RuntimeDefault"}})
        );
    }

    #[test]
    fn fields_without_omitempty_override_with_their_zero_value() {
        // secretKeyRef.key
        let out = merge(
            json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "n", "key": "k"}}}]}),
            json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "m"}}}]}),
        );
        assert_eq!(
            out["env"],
            json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "m"}}}])
        );
        // resourceFieldRef.divisor is a struct: Go writes "0"
        let out = merge(
            json!({"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}]}),
            json!({"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]}),
        );
        assert_eq!(
            out["env"][0]["valueFrom"],
            json!({"resourceFieldRef": {"resource": "limits.memory"}})
        );
        // seccompProfile.type
        let out = merge(
            json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}}),
            json!({"securityContext": {"seccompProfile": {"localhostProfile": "q"}}}),
        );
        assert_eq!(
            out["securityContext"],
            json!({"seccompProfile": {"localhostProfile": "q"}})
        );
    }

    #[test]
    fn different_value_sources_pile_up() {
        let out = merge(
            json!({"env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}),
            json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}),
        );
        assert_eq!(
            out["env"][0]["valueFrom"],
            json!({"configMapKeyRef": {"name": "c", "key": "k"}, "secretKeyRef": {"name": "s", "key": "k"}})
        );
    }

    #[test]
    fn value_and_value_from_after_merge_take_the_steps_entry() {
        let step_entry =
            json!({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}});
        let out = merge(
            json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}),
            json!({"env": [step_entry.clone()]}),
        );
        assert_eq!(out["env"], json!([step_entry, {"name": "B", "value": "2"}]));
        // the other way round too
        let out = merge(
            json!({"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}),
            json!({"env": [{"name": "A", "value": "v"}]}),
        );
        assert_eq!(out["env"], json!([{"name": "A", "value": "v"}]));
    }

    #[test]
    fn repeated_keys_follow_gos_sort() {
        // the step's repeats collapse into the template's entry, the first one last
        let out = merge(
            json!({"env": [{"name": "A", "value": "1"}]}),
            json!({"env": [{"name": "A", "value": "2"}, {"name": "A", "value": "3"}]}),
        );
        assert_eq!(out["env"], json!([{"name": "A", "value": "2"}]));
        // the template's last entry pairs with the step's, the diff lands on the first
        let out = merge(
            json!({"env": [{"name": "A", "value": "t1"}, {"name": "A", "value": "t2", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}),
            json!({"env": [{"name": "A", "valueFrom": {"secretKeyRef": {"key": "k"}}}]}),
        );
        let own = json!({"name": "A", "valueFrom": {"secretKeyRef": {"key": "k"}}});
        assert_eq!(out["env"], json!([own, own]));
        // no template list: the step's list as it is
        let out = merge(
            json!({"image": "i"}),
            json!({"env": [{"name": "A", "value": "2"}, {"name": "A", "value": "3"}]}),
        );
        assert_eq!(names(&out["env"]), ["A", "A"]);
    }

    #[test]
    fn a_key_repeated_around_another_patched_entry_fails_as_in_tekton() {
        let err = merge_step_template(
            &json!({"env": [{"name": "A", "value": "1"}]}),
            &json!({"env": [{"name": "B", "value": "1"}, {"name": "C", "value": "2"}, {"name": "B", "value": "3"}]}),
            ApiVersion::V1,
        );
        assert_eq!(err, Err(MergeError::ElementOrder { field: "env" }));
        // the same list without a template list merges fine
        assert!(
            merge_step_template(
                &json!({"image": "i"}),
                &json!({"env": [{"name": "B"}, {"name": "C"}, {"name": "B"}]}),
                ApiVersion::V1
            )
            .is_ok()
        );
    }

    #[test]
    fn long_lists_with_repeated_keys_are_not_guessed() {
        let mut step_env: Vec<Value> = (0..12).map(|i| json!({"name": format!("E{i}")})).collect();
        step_env.push(json!({"name": "E0", "value": "again"}));
        let err = merge_step_template(
            &json!({"env": [{"name": "T", "value": "1"}]}),
            &json!({"env": step_env}),
            ApiVersion::V1,
        );
        assert_eq!(err, Err(MergeError::Unreproducible { field: "env" }));
    }

    #[test]
    fn step_only_fields_and_display_name_are_kept() {
        let step = json!({"name": "s", "displayName": "Build it", "script": "echo", "timeout": "1m",
            "onError": "continue", "results": [{"name": "r"}], "params": [{"name": "p", "value": "v"}],
            "when": [{"input": "a", "operator": "in", "values": ["a"]}], "workspaces": [{"name": "w"}],
            "stdoutConfig": {"path": "/o"}, "stderrConfig": {"path": "/e"}, "somethingNew": 1});
        let out = merge(json!({"image": "alpine"}), step.clone());
        let mut want = step.as_object().unwrap().clone();
        want.insert("image".into(), json!("alpine"));
        assert_eq!(out, Value::Object(want));
    }

    #[test]
    fn steps_with_a_ref_and_no_template_are_unchanged() {
        let step = json!({"name": "s", "ref": {"name": "action"}, "image": ""});
        assert_eq!(merge(json!({"image": "alpine"}), step.clone()), step);
        let step = json!({"name": "s", "image": "", "env": []});
        assert_eq!(
            merge_step_template(&Value::Null, &step, ApiVersion::V1).unwrap(),
            step
        );
    }

    #[test]
    fn explicit_zero_pointers_override() {
        let out = merge(
            json!({"securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": true,
                   "windowsOptions": {"runAsUserName": "t"}}}),
            json!({"securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false,
                   "windowsOptions": {"runAsUserName": ""}}}),
        );
        assert_eq!(
            out["securityContext"],
            json!({"runAsUser": 0, "allowPrivilegeEscalation": false, "windowsOptions": {"runAsUserName": ""}})
        );
    }

    #[test]
    fn v1beta1_uses_resources_and_merges_the_deprecated_fields() {
        let out = merge_step_template(
            &json!({"name": "template-name", "resources": {"limits": {"cpu": "1"}},
                    "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81}],
                    "livenessProbe": {"grpc": {"port": 1, "service": "svc"}, "periodSeconds": 5},
                    "tty": true, "computeResources": {"limits": {"cpu": "9"}}}),
            &json!({"name": "s", "resources": {"requests": {"cpu": "1"}},
                    "ports": [{"containerPort": 81, "protocol": "UDP"}],
                    "livenessProbe": {"grpc": {"port": 2}, "periodSeconds": 0}}),
            ApiVersion::V1beta1,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"name": "s", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}},
                   "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 81, "protocol": "UDP"}],
                   // grpc.service has no omitempty: the step's unset one removes the template's
                   "livenessProbe": {"grpc": {"port": 2}, "periodSeconds": 5},
                   "tty": true})
        );
    }

    #[test]
    fn quantities_compare_like_gos_canonical_text() {
        assert!(same_quantity("0.5", "500m"));
        assert!(same_quantity("1000m", "1"));
        assert!(same_quantity("1024Mi", "1Gi"));
        assert!(same_quantity("0", "0m"));
        assert!(!same_quantity("1Gi", "1073741824")); // 1Gi vs 1073741824: formats differ
        assert!(same_quantity("0.5Ki", "512")); // below 1024: decimal
        assert!(!same_quantity("1e3", "1k"));
        assert!(!same_quantity("1", "2"));
        assert!(!same_quantity("x", "1"));
    }

    #[test]
    fn merge_all_merges_every_step() {
        let out = merge_all(
            &json!({"image": "alpine"}),
            &[
                json!({"name": "a"}),
                json!({"name": "b", "image": "busybox"}),
            ],
            ApiVersion::V1,
        )
        .unwrap();
        assert_eq!(
            out,
            [
                json!({"name": "a", "image": "alpine"}),
                json!({"name": "b", "image": "busybox"})
            ]
        );
    }
}
