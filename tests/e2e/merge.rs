//! bookend's port of Tekton's stepTemplate merge (`bookend::tekton::merge`) against Tekton's
//! own `MergeStepsWithStepTemplate` (`tekton-validate --merge`, Tekton v1.15.0): thousands of
//! (template, step) pairs from a grammar of container fields, all through one `tekton-validate`
//! process, compared after normalising the Go round trip (zero values left out, quantities in
//! canonical form). Needs only `tekton-validate`, no cluster:
//!
//! ```text
//! cargo test --test e2e merge -- --nocapture
//! BOOKEND_MERGE_CASES=20000 BOOKEND_MERGE_SEED=7 cargo test --test e2e merge -- --nocapture
//! ```
//!
//! A mismatch is shrunk (each candidate asked of the same process) and printed as one JSON
//! line; keep it in [`REGRESSIONS`] once fixed.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use bookend::tekton::ApiVersion;
use bookend::tekton::merge::{MergeError, merge_step_template};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

/// Cases that once told the port and Tekton apart (or nearly did), as `tekton-validate --merge`
/// input lines. Checked before the generated cases.
const REGRESSIONS: &[&str] = &[
    // the ordering examples of docs/tekton-notes.md
    r#"{"version":"v1","template":{"env":[{"name":"A","value":"1"},{"name":"B","value":"2"},{"name":"C","value":"3"},{"name":"D","value":"4"}]},"step":{"name":"s","env":[{"name":"X","value":"x"},{"name":"C","value":"c"},{"name":"Y","value":"y"}]}}"#,
    r#"{"version":"v1","template":{"env":[{"name":"A","value":"1"},{"name":"B","value":"2"},{"name":"C","value":"3"}]},"step":{"name":"s","env":[{"name":"C","value":"x"},{"name":"D","value":"d"},{"name":"A","value":"y"}]}}"#,
    // repeated keys: Go's sort reverses them; Tekton fails on the second
    r#"{"version":"v1","template":{"env":[{"name":"A","value":"t1"},{"name":"A","value":"t2","valueFrom":{"fieldRef":{"fieldPath":"x"}}}]},"step":{"name":"s","env":[{"name":"A","valueFrom":{"secretKeyRef":{"key":"k"}}}]}}"#,
    r#"{"version":"v1","template":{"env":[{"name":"A","value":"1"}]},"step":{"name":"s","env":[{"name":"B","value":"1"},{"name":"C","value":"2"},{"name":"B","value":"3"}]}}"#,
    // fields without omitempty override with their zero value
    r#"{"version":"v1","template":{"env":[{"name":"A","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1m"}}}]},"step":{"name":"s","env":[{"name":"A","valueFrom":{"resourceFieldRef":{"resource":"limits.memory"}}}]}}"#,
    r#"{"version":"v1beta1","template":{"livenessProbe":{"grpc":{"port":1,"service":"svc"}}},"step":{"name":"s","livenessProbe":{"grpc":{"port":2}}}}"#,
    // quantities compare as Go's canonical text: "1" = "1000m" and "1Gi" = "1024Mi" (no patch
    // entry for B, no error), "1Gi" != "1073741824" (a patch entry for B between the step's two
    // A entries: Tekton's set-element-order error)
    r#"{"version":"v1","template":{"env":[{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1"}}}]},"step":{"name":"s","env":[{"name":"A","value":"1"},{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"1000m"}}},{"name":"A","value":"2"}]}}"#,
    r#"{"version":"v1","template":{"env":[{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Gi"}}}]},"step":{"name":"s","env":[{"name":"A","value":"1"},{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1073741824"}}},{"name":"A","value":"2"}]}}"#,
    r#"{"version":"v1","template":{"env":[{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Gi"}}}]},"step":{"name":"s","env":[{"name":"A","value":"1"},{"name":"B","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1024Mi"}}},{"name":"A","value":"2"}]}}"#,
    // a value and a valueFrom on one step entry: the step's last entry of that name replaces it
    r#"{"version":"v1","template":{},"step":{"env":[{"name":"B","value":"1","valueFrom":{}},{"name":"B"}]}}"#,
];

// ---------------------------------------------------------------------------------------------
// Tekton's side: one `tekton-validate --merge` process, asked line by line.

struct Tekton {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Tekton {
    fn start() -> Self {
        let mut child = Command::new(crate::tools::only("tekton-validate"))
            .arg("--merge")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("tekton-validate --merge starts");
        let stdin = BufWriter::new(child.stdin.take().expect("piped stdin"));
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Tekton's merged step, or its error message.
    fn merge(&mut self, case: &Case) -> Result<Value, String> {
        self.merge_all(std::slice::from_ref(case))
            .pop()
            .expect("one answer")
    }

    /// [`Tekton::merge`] for many cases: all lines written by one thread while this one reads
    /// the answers.
    fn merge_all(&mut self, cases: &[Case]) -> Vec<Result<Value, String>> {
        let lines: Vec<String> = cases
            .iter()
            .map(|c| serde_json::to_string(&c.line()).expect("serialisable"))
            .collect();
        let (stdin, stdout) = (&mut self.stdin, &mut self.stdout);
        // Nothing in the scope panics, so the writer is never left blocked on a full pipe.
        let answers: Vec<std::io::Result<String>> = std::thread::scope(|scope| {
            let writer = scope.spawn(|| -> std::io::Result<()> {
                for line in &lines {
                    writeln!(stdin, "{line}")?;
                }
                stdin.flush()
            });
            let answers = lines
                .iter()
                .map(|_| {
                    let mut answer = String::new();
                    match stdout.read_line(&mut answer) {
                        Ok(0) => Err(std::io::ErrorKind::UnexpectedEof.into()),
                        Ok(_) => Ok(answer),
                        Err(e) => Err(e),
                    }
                })
                .collect();
            let written = writer.join();
            answers_with(answers, written)
        });
        answers
            .into_iter()
            .zip(&lines)
            .map(|(answer, line)| parse_answer(answer, line))
            .collect()
    }
}

/// The answers, or the writer's error in place of each when writing failed.
fn answers_with(
    answers: Vec<std::io::Result<String>>,
    written: std::thread::Result<std::io::Result<()>>,
) -> Vec<std::io::Result<String>> {
    match written {
        Ok(Ok(())) => answers,
        Ok(Err(e)) => answers
            .into_iter()
            .map(|a| a.and(Err(std::io::Error::new(e.kind(), e.to_string()))))
            .collect(),
        Err(_) => answers
            .into_iter()
            .map(|_| Err(std::io::Error::other("the writer thread panicked")))
            .collect(),
    }
}

fn parse_answer(answer: std::io::Result<String>, line: &str) -> Result<Value, String> {
    let answer = answer.unwrap_or_else(|e| panic!("tekton-validate --merge: {e} (at {line})"));
    let answer: Value = serde_json::from_str(&answer)
        .unwrap_or_else(|e| panic!("tekton-validate answered {answer:?} ({e}) to {line}"));
    match (
        answer.get("step"),
        answer.get("error").and_then(Value::as_str),
    ) {
        (Some(step), None) => Ok(step.clone()),
        (None, Some(error)) => {
            assert!(
                !error.starts_with("decode"),
                "the grammar made an input Tekton does not decode ({error}): {line}"
            );
            Err(error.to_owned())
        }
        _ => panic!("unexpected answer {answer} to {line}"),
    }
}

impl Drop for Tekton {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// Cases and their comparison.

#[derive(Clone, Debug)]
struct Case {
    version: ApiVersion,
    template: Value,
    step: Value,
}

impl Case {
    fn line(&self) -> Value {
        json!({"version": self.version.version(), "template": self.template, "step": self.step})
    }

    fn from_line(line: &str) -> Self {
        let v: Value = serde_json::from_str(line).expect("regression case is JSON");
        Self {
            version: ApiVersion::parse(&format!("tekton.dev/{}", v["version"].as_str().unwrap()))
                .expect("v1 or v1beta1"),
            template: v["template"].clone(),
            step: v["step"].clone(),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Verdict {
    Same,
    /// Both fail (Tekton with its set-element-order error).
    BothFail,
    /// The port declines (more than 12 entries with a repeated key).
    Declined,
}

/// Members of a Go value type whose zero value Go leaves out (or writes) and bookend leaves
/// out: compared as absent.
const ZERO_FALSE: &[&str] = &["readOnly", "stdin", "stdinOnce", "tty"];
const ZERO_INT: &[&str] = &[
    "port",
    "seconds",
    "containerPort",
    "hostPort",
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
];

/// Go's canonical text of the quantities the grammar uses (Tekton answers in it).
fn canonical_quantity(q: &str) -> &str {
    match q {
        "0.5" | "500m" => "500m",
        "1" | "1000m" => "1",
        "1Gi" | "1024Mi" => "1Gi",
        "1073741824" => "1073741824",
        "0" | "0m" => "0",
        "2" | "100Mi" | "250m" | "1m" | "1Mi" => q,
        other => panic!("quantity {other:?} is not in the test's table"),
    }
}

/// The comparable form: nulls, empty strings/lists/objects and the zero values of Go value
/// members left out, quantities canonical.
fn comparable(v: &Value, key: Option<&str>, parent: Option<&str>) -> Option<Value> {
    let quantity = key == Some("divisor") || matches!(parent, Some("limits" | "requests"));
    match v {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) if quantity => {
            let c = canonical_quantity(s);
            (c != "0" || key != Some("divisor")).then(|| Value::String(c.to_owned()))
        }
        Value::Bool(false) if key.is_some_and(|k| ZERO_FALSE.contains(&k)) => None,
        Value::Number(n)
            if n.as_f64() == Some(0.0) && key.is_some_and(|k| ZERO_INT.contains(&k)) =>
        {
            None
        }
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => Some(Value::Array(
            items
                .iter()
                .map(|i| comparable(i, None, key).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(map) => {
            let out: Map<String, Value> = map
                .iter()
                .filter_map(|(k, x)| Some((k.clone(), comparable(x, Some(k), key)?)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

/// Compares the port with Tekton's answer for one case.
fn check(case: &Case, tekton: &Result<Value, String>) -> Result<Verdict, String> {
    let ours = merge_step_template(&case.template, &case.step, case.version);
    let mut ours = match (ours, tekton) {
        (Err(MergeError::Unreproducible { .. }), _) => return Ok(Verdict::Declined),
        (Err(MergeError::ElementOrder { .. }), Err(e)) if e.contains("$setElementOrder") => {
            return Ok(Verdict::BothFail);
        }
        (Ok(ours), Ok(_)) => ours,
        (ours, tekton) => return Err(format!("bookend {ours:?}\ntekton  {tekton:?}")),
    };
    let tekton = tekton.as_ref().expect("matched Ok above");

    // What Tekton's function drops and bookend keeps (module doc of tekton::merge, rule 7):
    // nothing when it leaves the step alone (no template, a `ref`).
    let untouched = case.template.is_null() || case.step.get("ref").is_some_and(|r| !r.is_null());
    if !untouched {
        let dropped: &[&str] = match case.version {
            ApiVersion::V1 => &["displayName"],
            ApiVersion::V1beta1 => &["displayName", "results", "params", "workspaces"],
        };
        let obj = ours.as_object_mut().expect("a step");
        for key in dropped {
            if obj.remove(*key).as_ref() != case.step.get(*key) {
                return Err(format!("bookend did not keep the step's {key}"));
            }
        }
    }
    let (a, b) = (
        comparable(&ours, None, None),
        comparable(tekton, None, None),
    );
    if a == b {
        Ok(Verdict::Same)
    } else {
        Err(format!(
            "bookend {}\ntekton  {}",
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The grammar.

fn one_of(values: Vec<Value>) -> BoxedStrategy<Value> {
    proptest::sample::select(values).boxed()
}

fn maybe(s: BoxedStrategy<Value>, p: f64) -> BoxedStrategy<Option<Value>> {
    proptest::option::weighted(p, s).boxed()
}

fn strings(values: &[&str]) -> BoxedStrategy<Value> {
    one_of(values.iter().map(|s| json!(s)).collect())
}

type Fields = Vec<(&'static str, BoxedStrategy<Option<Value>>)>;

/// An object whose members are drawn independently (absent when the strategy gives `None`).
fn object(fields: Fields) -> BoxedStrategy<Value> {
    let (names, strategies): (Vec<&'static str>, Vec<_>) = fields.into_iter().unzip();
    strategies
        .prop_map(move |values| {
            Value::Object(
                names
                    .iter()
                    .zip(values)
                    .filter_map(|(n, v)| Some(((*n).to_owned(), v?)))
                    .collect(),
            )
        })
        .boxed()
}

fn list(element: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    proptest::collection::vec(element, 0..=max)
        .prop_map(Value::Array)
        .boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    any::<bool>().prop_map(Value::Bool).boxed()
}

fn quantity() -> BoxedStrategy<Value> {
    strings(&[
        "500m", "0.5", "1", "1000m", "1Gi", "1024Mi", "2", "100Mi", "250m",
    ])
}

fn key_selector() -> BoxedStrategy<Value> {
    object(vec![
        ("name", maybe(strings(&["n1", "n2", ""]), 0.7)),
        ("key", maybe(strings(&["k1", "k2", ""]), 0.7)),
        ("optional", maybe(boolean(), 0.3)),
    ])
}

fn value_from() -> BoxedStrategy<Value> {
    object(vec![
        ("secretKeyRef", maybe(key_selector(), 0.35)),
        ("configMapKeyRef", maybe(key_selector(), 0.35)),
        (
            "fieldRef",
            maybe(
                object(vec![
                    (
                        "fieldPath",
                        maybe(strings(&["metadata.name", "metadata.uid"]), 0.8),
                    ),
                    ("apiVersion", maybe(strings(&["v1", ""]), 0.3)),
                ]),
                0.3,
            ),
        ),
        (
            "resourceFieldRef",
            maybe(
                object(vec![
                    (
                        "resource",
                        maybe(strings(&["limits.cpu", "requests.memory"]), 0.8),
                    ),
                    (
                        "divisor",
                        maybe(strings(&["1m", "1", "1000m", "1Mi", "0"]), 0.5),
                    ),
                    ("containerName", maybe(strings(&["c"]), 0.2)),
                ]),
                0.25,
            ),
        ),
        (
            "fileKeyRef",
            maybe(
                object(vec![
                    ("volumeName", maybe(strings(&["vol"]), 0.8)),
                    ("path", maybe(strings(&["env.txt"]), 0.8)),
                    ("key", maybe(strings(&["k1", "k2"]), 0.8)),
                    ("optional", maybe(boolean(), 0.3)),
                ]),
                0.1,
            ),
        ),
    ])
}

/// A long env list (up to 16 entries, more than Go's insertion sort takes) without repeated
/// names.
fn long_env() -> BoxedStrategy<Value> {
    let names: Vec<String> = (0..20).map(|i| format!("E{i}")).collect();
    (
        proptest::sample::subsequence(names, 0..=16).prop_shuffle(),
        any::<bool>(),
    )
        .prop_map(|(names, odd)| {
            Value::Array(
                names
                    .into_iter()
                    .map(|n| json!({"name": n, "value": if odd { "1" } else { "2" }}))
                    .collect(),
            )
        })
        .boxed()
}

fn env_var() -> BoxedStrategy<Value> {
    object(vec![
        ("name", maybe(strings(&["A", "B", "C", "D", "E", ""]), 0.95)),
        ("value", maybe(strings(&["1", "2", "x", ""]), 0.6)),
        ("valueFrom", maybe(value_from(), 0.35)),
    ])
}

fn env_from() -> BoxedStrategy<Value> {
    let source = || {
        object(vec![
            ("name", maybe(strings(&["cm1", "cm2", ""]), 0.8)),
            ("optional", maybe(boolean(), 0.3)),
        ])
    };
    object(vec![
        ("prefix", maybe(strings(&["P_", ""]), 0.3)),
        ("configMapRef", maybe(source(), 0.5)),
        ("secretRef", maybe(source(), 0.5)),
    ])
}

fn volume_mount() -> BoxedStrategy<Value> {
    object(vec![
        ("mountPath", maybe(strings(&["/a", "/b", "/c", "/d"]), 0.97)),
        ("name", maybe(strings(&["v1", "v2", ""]), 0.85)),
        ("readOnly", maybe(boolean(), 0.5)),
        ("subPath", maybe(strings(&["x", "y", ""]), 0.3)),
        (
            "mountPropagation",
            maybe(strings(&["None", "HostToContainer"]), 0.15),
        ),
        ("subPathExpr", maybe(strings(&["$(E)"]), 0.1)),
        (
            "recursiveReadOnly",
            maybe(strings(&["Disabled", "IfPossible"]), 0.1),
        ),
    ])
}

fn volume_device() -> BoxedStrategy<Value> {
    object(vec![
        (
            "devicePath",
            maybe(strings(&["/dev/a", "/dev/b", "/dev/c"]), 0.97),
        ),
        ("name", maybe(strings(&["d1", "d2", ""]), 0.85)),
    ])
}

fn args() -> BoxedStrategy<Value> {
    one_of(vec![
        json!([]),
        json!(["x"]),
        json!(["y", "z"]),
        json!([""]),
    ])
}

fn resources() -> BoxedStrategy<Value> {
    let quantities = || {
        proptest::collection::btree_map(
            proptest::sample::select(vec!["cpu", "memory", "ephemeral-storage"]),
            quantity(),
            0..=3,
        )
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
        .boxed()
    };
    object(vec![
        ("limits", maybe(quantities(), 0.6)),
        ("requests", maybe(quantities(), 0.6)),
        (
            "claims",
            maybe(
                list(
                    object(vec![
                        ("name", maybe(strings(&["gpu", "fpga"]), 0.9)),
                        ("request", maybe(strings(&["r"]), 0.3)),
                    ]),
                    2,
                ),
                0.1,
            ),
        ),
    ])
}

fn security_context() -> BoxedStrategy<Value> {
    let caps = || strings(&["NET_ADMIN", "NET_RAW", "ALL", "SYS_TIME"]);
    object(vec![
        ("privileged", maybe(boolean(), 0.35)),
        (
            "runAsUser",
            maybe(one_of(vec![json!(0), json!(1000), json!(65532)]), 0.35),
        ),
        (
            "runAsGroup",
            maybe(one_of(vec![json!(0), json!(3000)]), 0.2),
        ),
        ("runAsNonRoot", maybe(boolean(), 0.35)),
        ("readOnlyRootFilesystem", maybe(boolean(), 0.25)),
        ("allowPrivilegeEscalation", maybe(boolean(), 0.35)),
        ("procMount", maybe(strings(&["Default"]), 0.05)),
        (
            "appArmorProfile",
            maybe(
                object(vec![
                    (
                        "type",
                        maybe(strings(&["RuntimeDefault", "Localhost"]), 0.7),
                    ),
                    ("localhostProfile", maybe(strings(&["k8s-apparmor"]), 0.3)),
                ]),
                0.1,
            ),
        ),
        (
            "capabilities",
            maybe(
                object(vec![
                    ("add", maybe(list(caps(), 2), 0.5)),
                    ("drop", maybe(list(caps(), 2), 0.5)),
                ]),
                0.4,
            ),
        ),
        (
            "seccompProfile",
            maybe(
                object(vec![
                    (
                        "type",
                        maybe(strings(&["RuntimeDefault", "Localhost", "Unconfined"]), 0.7),
                    ),
                    ("localhostProfile", maybe(strings(&["p.json", ""]), 0.3)),
                ]),
                0.3,
            ),
        ),
        (
            "seLinuxOptions",
            maybe(
                object(vec![
                    ("user", maybe(strings(&["u", ""]), 0.5)),
                    ("level", maybe(strings(&["s0:c1", "s0:c2"]), 0.5)),
                ]),
                0.15,
            ),
        ),
        (
            "windowsOptions",
            maybe(
                object(vec![
                    ("runAsUserName", maybe(strings(&["ContainerUser", ""]), 0.6)),
                    ("hostProcess", maybe(boolean(), 0.4)),
                ]),
                0.1,
            ),
        ),
    ])
}

fn probe() -> BoxedStrategy<Value> {
    let port = || one_of(vec![json!(8080), json!(8081), json!("http")]);
    object(vec![
        (
            "exec",
            maybe(object(vec![("command", maybe(args(), 0.8))]), 0.3),
        ),
        (
            "httpGet",
            maybe(
                object(vec![
                    ("path", maybe(strings(&["/healthz", "/ready", ""]), 0.6)),
                    ("port", maybe(port(), 0.7)),
                    ("scheme", maybe(strings(&["HTTP", "HTTPS"]), 0.3)),
                    (
                        "httpHeaders",
                        maybe(
                            list(
                                object(vec![
                                    ("name", maybe(strings(&["X-A", "X-B"]), 0.9)),
                                    ("value", maybe(strings(&["1", ""]), 0.7)),
                                ]),
                                2,
                            ),
                            0.3,
                        ),
                    ),
                ]),
                0.3,
            ),
        ),
        (
            "grpc",
            maybe(
                object(vec![
                    ("port", maybe(one_of(vec![json!(9000), json!(9001)]), 0.8)),
                    ("service", maybe(strings(&["svc", ""]), 0.5)),
                ]),
                0.25,
            ),
        ),
        (
            "periodSeconds",
            maybe(one_of(vec![json!(0), json!(5), json!(10)]), 0.4),
        ),
        (
            "failureThreshold",
            maybe(one_of(vec![json!(0), json!(3)]), 0.3),
        ),
        (
            "terminationGracePeriodSeconds",
            maybe(one_of(vec![json!(0), json!(30)]), 0.2),
        ),
    ])
}

fn lifecycle() -> BoxedStrategy<Value> {
    let handler = || {
        object(vec![
            (
                "exec",
                maybe(object(vec![("command", maybe(args(), 0.8))]), 0.5),
            ),
            (
                "sleep",
                maybe(
                    object(vec![(
                        "seconds",
                        maybe(one_of(vec![json!(0), json!(5)]), 0.8),
                    )]),
                    0.4,
                ),
            ),
        ])
    };
    object(vec![
        ("preStop", maybe(handler(), 0.6)),
        ("postStart", maybe(handler(), 0.4)),
        ("stopSignal", maybe(strings(&["SIGTERM", "SIGUSR1"]), 0.1)),
    ])
}

fn container_port() -> BoxedStrategy<Value> {
    object(vec![
        (
            "containerPort",
            maybe(one_of(vec![json!(80), json!(81), json!(82)]), 0.97),
        ),
        ("name", maybe(strings(&["http", "metrics", ""]), 0.5)),
        ("protocol", maybe(strings(&["TCP", "UDP"]), 0.4)),
        ("hostPort", maybe(one_of(vec![json!(0), json!(8080)]), 0.2)),
    ])
}

/// The container fields of a step or template in `version`'s names.
fn container_fields(version: ApiVersion) -> Fields {
    let mut fields: Fields = vec![
        ("image", maybe(strings(&["img1", "img2", ""]), 0.5)),
        ("command", maybe(args(), 0.4)),
        ("args", maybe(args(), 0.4)),
        ("workingDir", maybe(strings(&["/w1", "/w2", ""]), 0.3)),
        (
            "imagePullPolicy",
            maybe(strings(&["Always", "IfNotPresent", ""]), 0.3),
        ),
        (
            "env",
            maybe(
                prop_oneof![9 => list(env_var(), 5), 1 => long_env()].boxed(),
                0.7,
            ),
        ),
        ("envFrom", maybe(list(env_from(), 2), 0.25)),
        ("volumeMounts", maybe(list(volume_mount(), 4), 0.5)),
        ("volumeDevices", maybe(list(volume_device(), 3), 0.25)),
        ("securityContext", maybe(security_context(), 0.45)),
        (version.resources_key(), maybe(resources(), 0.45)),
    ];
    if version == ApiVersion::V1beta1 {
        fields.extend([
            ("ports", maybe(list(container_port(), 3), 0.3)),
            ("livenessProbe", maybe(probe(), 0.25)),
            ("readinessProbe", maybe(probe(), 0.15)),
            ("startupProbe", maybe(probe(), 0.1)),
            ("lifecycle", maybe(lifecycle(), 0.2)),
            (
                "terminationMessagePath",
                maybe(strings(&["/dev/log", ""]), 0.2),
            ),
            (
                "terminationMessagePolicy",
                maybe(strings(&["File", "FallbackToLogsOnError"]), 0.2),
            ),
            ("stdin", maybe(boolean(), 0.15)),
            ("stdinOnce", maybe(boolean(), 0.1)),
            ("tty", maybe(boolean(), 0.15)),
        ]);
    }
    fields
}

fn template(version: ApiVersion) -> BoxedStrategy<Value> {
    let mut fields = container_fields(version);
    if version == ApiVersion::V1beta1 {
        fields.push(("name", maybe(strings(&["template-name", ""]), 0.3)));
    }
    prop_oneof![1 => Just(Value::Null), 12 => object(fields)].boxed()
}

fn step(version: ApiVersion) -> BoxedStrategy<Value> {
    let mut fields = container_fields(version);
    fields.extend([
        ("name", maybe(strings(&["s", "build", ""]), 0.85)),
        ("displayName", maybe(strings(&["Build it"]), 0.2)),
        ("script", maybe(strings(&["echo hi", ""]), 0.3)),
        ("timeout", maybe(strings(&["1m0s"]), 0.15)),
        (
            "onError",
            maybe(strings(&["continue", "stopAndFail"]), 0.15),
        ),
        ("results", maybe(one_of(vec![json!([{"name": "r"}])]), 0.15)),
        (
            "params",
            maybe(one_of(vec![json!([{"name": "p", "value": "v"}])]), 0.1),
        ),
        (
            "when",
            maybe(
                one_of(vec![
                    json!([{"input": "a", "operator": "in", "values": ["a"]}]),
                ]),
                0.1,
            ),
        ),
        (
            "workspaces",
            maybe(one_of(vec![json!([{"name": "w", "mountPath": "/w"}])]), 0.1),
        ),
        (
            "stdoutConfig",
            maybe(one_of(vec![json!({"path": "/o"})]), 0.1),
        ),
        ("ref", maybe(one_of(vec![json!({"name": "action"})]), 0.04)),
    ]);
    object(fields)
}

fn case() -> BoxedStrategy<Case> {
    prop_oneof![
        3 => (template(ApiVersion::V1), step(ApiVersion::V1)).prop_map(|(template, step)| Case {
            version: ApiVersion::V1,
            template,
            step
        }),
        2 => (template(ApiVersion::V1beta1), step(ApiVersion::V1beta1)).prop_map(
            |(template, step)| Case {
                version: ApiVersion::V1beta1,
                template,
                step
            }
        ),
    ]
    .boxed()
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// Shrinks a failing case, asking Tekton for every candidate; returns the smallest failure.
fn shrink(tree: &mut impl ValueTree<Value = Case>, tekton: &mut Tekton) -> (Case, String) {
    let fails = |case: &Case, tekton: &mut Tekton| check(case, &tekton.merge(case)).err();
    let mut smallest = (
        tree.current(),
        fails(&tree.current(), tekton).expect("the case failed"),
    );
    for _ in 0..5000 {
        let current = tree.current();
        match fails(&current, tekton) {
            Some(why) => {
                smallest = (current, why);
                if !tree.simplify() {
                    break;
                }
            }
            None => {
                if !tree.complicate() {
                    break;
                }
            }
        }
    }
    smallest
}

#[test]
fn merge_matches_tektons_merge_steps_with_step_template() {
    let mut tekton = Tekton::start();
    let mut tally = std::collections::BTreeMap::<String, usize>::new();

    for line in REGRESSIONS {
        let case = Case::from_line(line);
        let answer = tekton.merge(&case);
        if let Err(why) = check(&case, &answer) {
            panic!("regression case differs:\n{line}\n{why}");
        }
    }

    let cases = env_u64("BOOKEND_MERGE_CASES").map_or(3000, |n| n as usize);
    let seed = env_u64("BOOKEND_MERGE_SEED").unwrap_or(20_261_201);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let strategy = case();
    let started = std::time::Instant::now();
    let mut trees: Vec<_> = (0..cases)
        .map(|_| strategy.new_tree(&mut runner).expect("a case"))
        .collect();
    let generated: Vec<Case> = trees.iter().map(ValueTree::current).collect();
    let answers = tekton.merge_all(&generated);
    for ((case, answer), tree) in generated.iter().zip(&answers).zip(&mut trees) {
        match check(case, answer) {
            Ok(verdict) => {
                let key = format!("{} {verdict:?}", case.version.version());
                *tally.entry(key).or_default() += 1;
            }
            Err(_) => {
                let (small, why) = shrink(tree, &mut tekton);
                panic!(
                    "bookend's merge differs from Tekton's (seed {seed}); smallest case, keep it in \
                     REGRESSIONS once fixed:\n{}\n{why}",
                    serde_json::to_string(&small.line()).unwrap()
                );
            }
        }
    }
    println!(
        "merge: {cases} generated cases + {} regressions agree with Tekton v1.15.0 in {:.1}s (seed {seed}): {tally:?}",
        REGRESSIONS.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        tally
            .iter()
            .filter(|(k, _)| k.ends_with("Declined"))
            .map(|(_, n)| n)
            .sum::<usize>()
            <= cases / 100,
        "the grammar should rarely make lists the port declines"
    );
}
