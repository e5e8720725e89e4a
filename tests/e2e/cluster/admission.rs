//! Admission basics: the attack classes of tests/security, dry runs, create and rerun,
//! v1beta1 TaskRuns, the reserved prefix.

use serde_json::json;

use super::objects::{create_example, example, first_line, metadata_str, step_names, taskrun};
use super::{Ctx, TEAM_A};

pub(super) fn scenario_attack_classes(ctx: &mut Ctx) -> String {
    crate::attacks::scenario(
        &ctx.cluster.kubectl,
        &example("examples/policies"),
        &ctx.work,
    )
}

pub(super) fn scenario_dry_run(ctx: &mut Ctx) -> String {
    let (out, object) = create_example(&ctx.cluster, &["create", "--dry-run=server"], "build.yaml");
    assert!(
        object["metadata"]["annotations"]["bookend.dev/injected"].is_string(),
        "record annotation: {}",
        object["metadata"]
    );
    let warnings = out.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("bookend: injected") && w.contains("bookend-credentials")),
        "dry-run warnings name the injected steps; stderr: {}",
        out.stderr
    );
    let list = ctx
        .cluster
        .get_json(&["taskruns", "-n", TEAM_A], "kubectl get taskruns");
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(0),
        "dry-run stored nothing"
    );
    ctx.keep("dry-run build.yaml", &object);
    format!(
        "steps {:?}; warnings {:?}; nothing stored",
        step_names(&object),
        warnings
    )
}

pub(super) fn scenario_create_and_rerun(ctx: &mut Ctx) -> String {
    // What create returns is what it persisted: in order, and as bookend render has it.
    let (_, object) = create_example(&ctx.cluster, &["create"], "build.yaml");
    let name = metadata_str(&object, "name");
    let expected = step_names(&object);
    let stored = ctx.cluster.get_json(
        &["taskrun", "-n", TEAM_A, &name],
        "kubectl get the persisted TaskRun",
    );
    assert_eq!(
        stored["spec"], object["spec"],
        "get returns what create returned"
    );
    ctx.keep("created build.yaml", &stored);

    // A rerun: the persisted spec, labels and annotations under a new name.
    let rerun = json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "TaskRun",
        "metadata": {
            "name": format!("{name}-rerun"),
            "namespace": TEAM_A,
            "labels": stored["metadata"]["labels"].clone(),
            "annotations": stored["metadata"]["annotations"].clone(),
        },
        "spec": stored["spec"].clone(),
    });
    let out = ctx.cluster.create(&rerun).expect_ok("create the rerun");
    let again = out.json();
    assert_eq!(
        step_names(&again),
        expected,
        "the rerun has each step once, in order"
    );
    assert_eq!(
        again["spec"], stored["spec"],
        "the rerun's spec is unchanged"
    );
    ctx.keep("rerun", &again);
    format!("{name}: {} steps in order; rerun unchanged", expected.len())
}

pub(super) fn scenario_v1beta1(ctx: &mut Ctx) -> String {
    // Registered for v1 and v1beta1 with matchPolicy: Exact, bookend gets the v1beta1 object as
    // written and patches it with v1beta1 field names. (The test CRDs have conversion: None, so
    // only the dry-run response, in the requested version, is meaningful here.)
    let (_, object) = create_example(
        &ctx.cluster,
        &["create", "--dry-run=server"],
        "v1beta1.yaml",
    );
    assert_eq!(object["apiVersion"], json!("tekton.dev/v1beta1"));
    let credentials = &object["spec"]["taskSpec"]["steps"][0];
    assert_eq!(credentials["name"], json!("bookend-credentials"));
    assert!(
        credentials.get("resources").is_some() && credentials.get("computeResources").is_none(),
        "v1beta1 field names in the injected step: {credentials}"
    );
    ctx.keep("dry-run v1beta1.yaml", &object);
    format!("tekton.dev/v1beta1 steps {:?}", step_names(&object))
}

pub(super) fn scenario_reserved_prefix(ctx: &mut Ctx) -> String {
    let object = taskrun(TEAM_A, "sneaky-", "bookend-whatever");
    let out = ctx.cluster.create(&object);
    assert!(
        !out.ok(),
        "a user step with the reserved prefix is refused: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("denied the request") && out.stderr.contains("reserved prefix"),
        "kubectl shows bookend's message: {}",
        out.stderr
    );
    first_line(&out.stderr)
}
