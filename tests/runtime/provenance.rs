//! Scenario 19: an org post-step that feeds provenance. The policy declares the Task results
//! Tekton Chains reads as type hints (IMAGE_URL, IMAGE_DIGEST, and the object ARTIFACT_OUTPUTS);
//! bookend adds them to the TaskSpec and resets their files before the policy's post-steps run.
//! The TaskRun's own step writes forged values to the same files; Tekton's status.results must
//! carry what the org step wrote, whether the user step succeeded or failed.

use serde_json::{Value, json};

use crate::kube::cluster_policy;
use crate::runs::{assert_condition, step, taskrun};
use crate::scenarios::Ctx;

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
        taskrun(
            PROVENANCE,
            "forge-unpublished",
            json!({"results": [{"name": "own"}], "steps": [forger(false, 0)]}),
        ),
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
    "org post-step's IMAGE_URL, IMAGE_DIGEST and object ARTIFACT_OUTPUTS reach status.results \
     over a user step's forged values, with the user step succeeding and failing; when the org \
     step writes none, the reset's empty values (\"\", {}) stand and the TaskRun succeeds"
        .to_owned()
}
