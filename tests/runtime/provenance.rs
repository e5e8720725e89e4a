//! Scenario 19: an org post-step that feeds provenance. The policy declares the Task results
//! Tekton Chains reads as type hints (IMAGE_URL, IMAGE_DIGEST, and the object ARTIFACT_OUTPUTS);
//! bookend adds them to the TaskSpec and resets their files before the policy's post-steps run.
//! The TaskRun's own step writes forged values to the same files; Tekton's status.results must
//! carry what the org step wrote, whether the user step succeeded or failed.
//!
//! Then Tekton Chains' own formatters (tests/runtime/chains, Chains v0.22.0) format each finished
//! TaskRun in every format and buildType Chains has, and the scenario asserts which of bookend's
//! marks reach each: the record annotation, the org results as subjects, the injected steps.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::kube::cluster_policy;
use crate::runs::{Finished, assert_condition, step, taskrun};
use crate::scenarios::Ctx;
use crate::tools;

pub const PROVENANCE: &str = "rt-provenance";
pub const NAMESPACES: [&str; 1] = [PROVENANCE];

const ORG_URL: &str = "registry.example/org/app";
const ORG_DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const FORGED_DIGEST: &str =
    "sha256:6666666666666666666666666666666666666666666666666666666666666666";

pub fn policies() -> Vec<Value> {
    // Publishes only when the user's steps left something to publish (/tekton/home/built);
    // otherwise it writes no result, and the reset step's empty values must stand.
    let publish = step(
        "bookend-publish",
        &format!(
            "[ -f /tekton/home/built ] || exit 0; \
             printf {ORG_URL} > $(results.IMAGE_URL.path); \
             printf {ORG_DIGEST} > $(results.IMAGE_DIGEST.path); \
             printf '{{\"uri\":\"oci://{ORG_URL}\",\"digest\":\"{ORG_DIGEST}\",\"isBuildArtifact\":\"true\"}}' \
             > $(results.ARTIFACT_OUTPUTS.path)"
        ),
    );
    vec![cluster_policy(
        "rt-provenance",
        json!({"match": {"namespaces": [PROVENANCE]}, "postStepsRun": "Always",
               "postSteps": [publish],
               "results": [
                   {"name": "IMAGE_URL", "type": "string"},
                   {"name": "IMAGE_DIGEST", "type": "string"},
                   {"name": "ARTIFACT_OUTPUTS", "type": "object",
                    "properties": {"uri": {"type": "string"}, "digest": {"type": "string"},
                                   "isBuildArtifact": {"type": "string"}}}]}),
    )]
}

/// The user's step: forges every declared result (and its own), leaves something to publish
/// when `built`, then exits with `exit`.
fn forger(built: bool, exit: i32) -> Value {
    let touch = if built {
        "touch /tekton/home/built; "
    } else {
        ""
    };
    step(
        "build",
        &format!(
            "{touch}printf evil.example/app > /tekton/results/IMAGE_URL; \
             printf {FORGED_DIGEST} > /tekton/results/IMAGE_DIGEST; \
             printf '{{\"uri\":\"oci://evil.example/app\",\"digest\":\"{FORGED_DIGEST}\",\"isBuildArtifact\":\"true\"}}' \
             > /tekton/results/ARTIFACT_OUTPUTS; \
             printf mine > $(results.own.path); exit {exit}"
        ),
    )
}

/// A TaskRun param its Task does not declare, to show where a spec-level mark would land: Tekton
/// ignores it and Chains records it in the SLSA v1.0 `runSpec.params` (docs/provenance.md).
const UNDECLARED_PARAM: &str = "undeclared-probe";

/// The author's own `bookend-injected` param: a record that names the author's step as the
/// policy's, under a hash of the author's choosing. bookend must replace it.
const FORGED_RECORD: &str = r#"{"policies":[{"policy":"ClusterStepPolicy/rt-provenance","hash":"f0f0f0f0f0f0","steps":["build"]}]}"#;

/// The third run: nothing to publish, a param its Task does not declare, and the author's own
/// record param.
fn unpublished_with_param() -> Value {
    let mut run = taskrun(
        PROVENANCE,
        "forge-unpublished",
        json!({"results": [{"name": "own"}], "steps": [forger(false, 0)]}),
    );
    run["spec"]["params"] = json!([
        {"name": RECORD_PARAM, "value": FORGED_RECORD},
        {"name": UNDECLARED_PARAM, "value": "{\"a\":\"json text\"}"}
    ]);
    run
}

/// bookend's record param (`bookend.dev/injected` again, in `spec.params`).
const RECORD_PARAM: &str = "bookend-injected";

/// Asserts that `recorded` (the record as a provenance format carries it) is bookend's record
/// of the TaskRun (`record_text`, its annotation) and names exactly the org steps of the spec:
/// the policy's steps (its reset step carrying the policy's hash) and bookend's helpers, and
/// none of the author's steps.
fn assert_names_the_org_steps(
    label: &str,
    recorded: Option<&str>,
    record_text: &str,
    spec_steps: &[&str],
) {
    assert_eq!(recorded, Some(record_text), "{label}: bookend's record");
    let record: Value = serde_json::from_str(record_text).expect("the record parses");
    let entry = &record["policies"][0];
    assert_eq!(
        record["policies"].as_array().map(Vec::len),
        Some(1),
        "{label}: {record}"
    );
    assert_eq!(
        entry["policy"], "ClusterStepPolicy/rt-provenance",
        "{label}"
    );
    let hash = entry["hash"].as_str().expect("the policy's hash");
    let mut named: Vec<&str> = entry["steps"]
        .as_array()
        .into_iter()
        .chain(record["helpers"].as_array())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    named.sort_unstable();
    let mut org: Vec<&str> = spec_steps
        .iter()
        .copied()
        .filter(|s| s.starts_with("bookend-"))
        .collect();
    org.sort_unstable();
    assert_eq!(
        named, org,
        "{label}: the record names exactly the org steps of the spec"
    );
    assert!(
        spec_steps.contains(&format!("bookend-results-{hash}").as_str()),
        "{label}: the policy version {hash} is the reset step's: {spec_steps:?}"
    );
}

fn result<'a>(object: &'a Value, name: &str) -> Option<&'a Value> {
    object["status"]["results"]
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)
        .map(|r| &r["value"])
}

pub fn scenario_provenance(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    let runs = env.run_all(&[
        taskrun(
            PROVENANCE,
            "forge-ok",
            json!({"results": [{"name": "own"}], "steps": [forger(true, 0)]}),
        ),
        taskrun(
            PROVENANCE,
            "forge-fail",
            json!({"results": [{"name": "own"}], "steps": [forger(true, 3)]}),
        ),
        unpublished_with_param(),
    ]);
    let expected_artifact = json!({"uri": format!("oci://{ORG_URL}"), "digest": ORG_DIGEST,
                                   "isBuildArtifact": "true"});
    for run in &runs[..2] {
        let declared: Vec<&str> = run.object["spec"]["taskSpec"]["results"]
            .as_array()
            .expect("taskSpec.results")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(
            declared,
            ["own", "IMAGE_URL", "IMAGE_DIGEST", "ARTIFACT_OUTPUTS"],
            "the Task's own result first, then the policy's: {}",
            run.describe(env)
        );
        assert_eq!(
            result(&run.object, "IMAGE_URL"),
            Some(&json!(ORG_URL)),
            "{}",
            run.describe(env)
        );
        assert_eq!(
            result(&run.object, "IMAGE_DIGEST"),
            Some(&json!(ORG_DIGEST)),
            "{}",
            run.describe(env)
        );
        assert_eq!(
            result(&run.object, "ARTIFACT_OUTPUTS"),
            Some(&expected_artifact),
            "{}",
            run.describe(env)
        );
        assert_eq!(
            result(&run.object, "own"),
            Some(&json!("mine")),
            "the Task's own result is the user's"
        );
        let record: Value = serde_json::from_str(
            run.object["metadata"]["annotations"]["bookend.dev/injected"]
                .as_str()
                .expect("the record"),
        )
        .expect("the record parses");
        assert_eq!(
            record["policies"][0]["results"],
            json!(["IMAGE_URL", "IMAGE_DIGEST", "ARTIFACT_OUTPUTS"]),
            "the record names the results the platform declared"
        );
    }
    let (ok, failed) = (&runs[0], &runs[1]);
    assert_condition(
        env,
        ok,
        "True",
        "Succeeded",
        "All Steps have completed executing",
    );
    assert_eq!(
        failed.condition().0,
        "False",
        "the user step's exit 3 fails the TaskRun: {}",
        failed.describe(env)
    );
    // The org step published nothing: no forged value may stand; every result is the reset
    // step's empty value (Tekton v1.15 takes the object's `{}` although it lacks the declared
    // properties, and the TaskRun succeeds).
    let unpublished = &runs[2];
    for name in ["IMAGE_URL", "IMAGE_DIGEST", "ARTIFACT_OUTPUTS"] {
        let value = result(&unpublished.object, name);
        let text = value.map(Value::to_string).unwrap_or_default();
        assert!(
            !text.contains("evil") && !text.contains(FORGED_DIGEST),
            "{name}: a forged value stands: {text}\n{}",
            unpublished.describe(env)
        );
    }
    for (name, empty) in [
        ("IMAGE_URL", json!("")),
        ("IMAGE_DIGEST", json!("")),
        ("ARTIFACT_OUTPUTS", json!({})),
    ] {
        assert_eq!(
            result(&unpublished.object, name),
            Some(&empty),
            "{name}: the reset step's empty value: {}",
            unpublished.describe(env)
        );
    }
    let names = ok.step_names();
    assert!(
        names.iter().any(|n| n.starts_with("bookend-results-")),
        "the reset step runs: {names:?}"
    );
    assert_condition(
        env,
        unpublished,
        "True",
        "Succeeded",
        "All Steps have completed executing",
    );
    let chains = chains_marks(ctx, &runs);
    format!(
        "org post-step's IMAGE_URL, IMAGE_DIGEST and object ARTIFACT_OUTPUTS reach status.results \
         over a user step's forged values, with the user step succeeding and failing; when the org \
         step writes none, the reset's empty values (\"\", {{}}) stand and the TaskRun succeeds; \
         {chains}"
    )
}

/// SLSA v1.0 buildTypes of Chains (`builddefinition.buildtype`); the first is Chains' default.
const SLSA_BUILD_TYPE: &str = "https://tekton.dev/chains/v2/slsa";
const SLSA_TEKTON_BUILD_TYPE: &str = "https://tekton.dev/chains/v2/slsa-tekton";

/// Every TaskRun format of Chains v0.22.0 (`artifacts.taskrun.format`) with each buildType it
/// reads (the SLSA v0.2 formats have none).
const CHAINS_FORMATS: [(&str, Option<&str>); 6] = [
    ("in-toto", None),
    ("slsa/v1", None),
    ("slsa/v2alpha3", Some(SLSA_BUILD_TYPE)),
    ("slsa/v2alpha3", Some(SLSA_TEKTON_BUILD_TYPE)),
    ("slsa/v2alpha4", Some(SLSA_BUILD_TYPE)),
    ("slsa/v2alpha4", Some(SLSA_TEKTON_BUILD_TYPE)),
];

/// The in-toto statement Chains' formatter makes of `taskrun` in `format` (and `build_type`).
fn chains_statement(tool: &Path, taskrun: &Value, format: &str, build_type: Option<&str>) -> Value {
    let mut cmd = Command::new(tool);
    cmd.arg(format!("artifacts.taskrun.format={format}"));
    if let Some(build_type) = build_type {
        cmd.arg(format!("builddefinition.buildtype={build_type}"));
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", tool.display()));
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(taskrun.to_string().as_bytes())
            .expect("write the TaskRun");
    }
    let out = child.wait_with_output().expect("chains-provenance runs");
    assert!(
        out.status.success(),
        "chains-provenance {format} {build_type:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("chains-provenance prints JSON")
}

/// The statement's subjects as `name@sha256:digest`.
fn subjects(statement: &Value) -> Vec<String> {
    statement["subject"]
        .as_array()
        .map(|subjects| {
            subjects
                .iter()
                .map(|s| {
                    format!(
                        "{}@sha256:{}",
                        s["name"].as_str().unwrap_or("?"),
                        s["digest"]["sha256"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs Chains' formatters on the scenario's finished TaskRuns and asserts which of bookend's
/// marks reach each format. Writes the TaskRuns and statements to `<work>/chains/` (kept with
/// BOOKEND_RUNTIME_KEEP=1), the source of docs/provenance.md's excerpts.
fn chains_marks(ctx: &Ctx, runs: &[Finished]) -> String {
    let tool = tools::only("chains-provenance");
    let out_dir = ctx
        .env
        .kubelet_dir
        .parent()
        .expect("the kubelet directory is in the work directory")
        .join("chains");
    std::fs::create_dir_all(&out_dir).expect("mkdir chains");
    let org_subject = format!("{ORG_URL}@{ORG_DIGEST}");
    for run in runs {
        let name = run.name();
        let tr = &run.object;
        std::fs::write(
            out_dir.join(format!("{name}.taskrun.json")),
            serde_json::to_string_pretty(tr).expect("JSON"),
        )
        .expect("write the TaskRun");
        let record_text = tr["metadata"]["annotations"]["bookend.dev/injected"]
            .as_str()
            .expect("the record");
        let spec_steps: Vec<&str> = tr["spec"]["taskSpec"]["steps"]
            .as_array()
            .expect("spec.taskSpec.steps")
            .iter()
            .filter_map(|s| s["name"].as_str())
            .collect();
        assert!(
            spec_steps.iter().any(|s| s.starts_with("bookend-results-"))
                && spec_steps.contains(&"bookend-publish"),
            "{name}: the org steps are in the spec: {spec_steps:?}"
        );
        let published = !name.starts_with("forge-unpublished-");
        // The admitted TaskRun carries exactly one record param, bookend's: the author's
        // (forge-unpublished) was replaced at admission.
        let record_params: Vec<&Value> = tr["spec"]["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["name"] == RECORD_PARAM)
            .collect();
        assert_eq!(
            record_params,
            [&json!({"name": RECORD_PARAM, "value": record_text})],
            "{name}: bookend's record param"
        );
        let mut slsa_v02 = None;
        for (format, build_type) in CHAINS_FORMATS {
            let statement = chains_statement(&tool, tr, format, build_type);
            let label = format!(
                "{name} {format}{}",
                build_type.map(|b| format!(" {b}")).unwrap_or_default()
            );
            let file = label.replace([' ', '/', ':'], "_");
            std::fs::write(
                out_dir.join(format!("{file}.json")),
                serde_json::to_string_pretty(&statement).expect("JSON"),
            )
            .expect("write the statement");
            let text = statement.to_string();
            let p = &statement["predicate"];
            assert!(
                !text.contains("f0f0f0f0f0f0"),
                "{label}: the author's forged record reaches the provenance"
            );

            // Subjects: exactly the org's artifact (IMAGE_URL/IMAGE_DIGEST and ARTIFACT_OUTPUTS)
            // when it published one, none otherwise: never the author's forged values.
            let mut subjects = subjects(&statement);
            subjects.sort();
            let expected: Vec<String> = if published {
                vec![format!("oci://{org_subject}"), org_subject.clone()]
            } else {
                Vec::new()
            };
            assert_eq!(subjects, expected, "{label}: the subjects");

            match build_type {
                None => {
                    // SLSA v0.2: the annotations are recorded, and every step that ran, by
                    // container, with the reset and publish steps among them.
                    assert_eq!(
                        p["invocation"]["environment"]["annotations"]["bookend.dev/injected"]
                            .as_str(),
                        Some(record_text),
                        "{label}: the record at invocation.environment.annotations"
                    );
                    let containers: Vec<&str> = p["buildConfig"]["steps"]
                        .as_array()
                        .expect("buildConfig.steps")
                        .iter()
                        .filter_map(|s| s["environment"]["container"].as_str())
                        .collect();
                    assert_eq!(
                        containers, spec_steps,
                        "{label}: buildConfig.steps are the TaskRun's steps, org steps included"
                    );
                    let parameters = &p["invocation"]["parameters"];
                    assert_names_the_org_steps(
                        &format!("{label} invocation.parameters"),
                        parameters[RECORD_PARAM].as_str(),
                        record_text,
                        &spec_steps,
                    );
                    let expected = if published { 1 } else { 2 };
                    assert_eq!(
                        parameters.as_object().map(|p| p.len()),
                        Some(expected),
                        "{label}: the TaskRun's params at invocation.parameters: {parameters}"
                    );
                    if !published {
                        assert_eq!(
                            parameters[UNDECLARED_PARAM],
                            json!("{\"a\":\"json text\"}"),
                            "{label}: the TaskRun's params at invocation.parameters"
                        );
                    }
                    // in-toto and slsa/v1 are one formatter under two names.
                    match &slsa_v02 {
                        None => slsa_v02 = Some(statement.clone()),
                        Some(first) => {
                            assert_eq!(first, &statement, "{label}: in-toto and slsa/v1 agree")
                        }
                    }
                }
                Some(build_type) => {
                    let definition = &p["buildDefinition"];
                    assert_eq!(definition["buildType"], json!(build_type), "{label}");
                    let run_spec_steps: Vec<&str> =
                        definition["externalParameters"]["runSpec"]["taskSpec"]["steps"]
                            .as_array()
                            .expect("externalParameters.runSpec.taskSpec.steps")
                            .iter()
                            .filter_map(|s| s["name"].as_str())
                            .collect();
                    assert_eq!(
                        run_spec_steps, spec_steps,
                        "{label}: runSpec carries the TaskRun's steps, org steps included"
                    );
                    let params = &definition["externalParameters"]["runSpec"]["params"];
                    assert_eq!(
                        params, &tr["spec"]["params"],
                        "{label}: runSpec.params are the TaskRun's params, undeclared ones included"
                    );
                    // The record, in every buildType (the default's only carrier of it).
                    let carried: Vec<&str> = params
                        .as_array()
                        .expect("runSpec.params")
                        .iter()
                        .filter(|p| p["name"] == RECORD_PARAM)
                        .filter_map(|p| p["value"].as_str())
                        .collect();
                    assert_eq!(carried.len(), 1, "{label}: one record param: {params}");
                    assert_names_the_org_steps(
                        &format!("{label} externalParameters.runSpec.params"),
                        carried.first().copied(),
                        record_text,
                        &spec_steps,
                    );
                    // Byproducts: every result in v2alpha3; v2alpha4 leaves out the image type
                    // hints (by name) and the build artifacts (an ARTIFACT_OUTPUTS with
                    // isBuildArtifact "true"; the reset's `{}` is none).
                    let mut byproducts: Vec<&str> = p["runDetails"]["byproducts"]
                        .as_array()
                        .expect("runDetails.byproducts")
                        .iter()
                        .filter_map(|b| b["name"].as_str())
                        .collect();
                    byproducts.sort_unstable();
                    let expected: &[&str] = if format == "slsa/v2alpha3" {
                        &[
                            "taskRunResults/ARTIFACT_OUTPUTS",
                            "taskRunResults/IMAGE_DIGEST",
                            "taskRunResults/IMAGE_URL",
                            "taskRunResults/own",
                        ]
                    } else if published {
                        &["taskRunResults/own"]
                    } else {
                        &["taskRunResults/ARTIFACT_OUTPUTS", "taskRunResults/own"]
                    };
                    assert_eq!(byproducts, expected, "{label}: the byproducts");
                    let recorded =
                        definition["internalParameters"]["annotations"]["bookend.dev/injected"]
                            .as_str();
                    if build_type == SLSA_TEKTON_BUILD_TYPE {
                        assert_eq!(
                            recorded,
                            Some(record_text),
                            "{label}: the record at internalParameters.annotations"
                        );
                    } else {
                        assert!(
                            !text.contains("bookend.dev/injected"),
                            "{label}: the default buildType records no annotation: {text}"
                        );
                    }
                }
            }
        }
    }
    format!(
        "Chains v0.22.0's formatters: the record reaches every format and buildType as the param \
         bookend-injected (SLSA v1.0 runSpec.params, v0.2 invocation.parameters; the author's own \
         replaced), and in-toto/slsa/v1 and slsa-tekton as the annotation too; the org subject \
         and steps reach every format ({})",
        out_dir.display()
    )
}
