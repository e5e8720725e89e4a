//! Scenario 17: `bookend render` of a PipelineRun against what Tekton's own PipelineRun
//! controller creates for it. The same PipelineRun (a `pipelineRef` to a Pipeline with params,
//! a matrix, a result passed on, `when` guards, a `finally` task, a name long enough for
//! `kmeta.ChildName` to hash) runs in the cluster; bookend renders it from the objects as the
//! cluster stores them, told the line's Tekton (`--tekton-version`, its flags); every TaskRun the controller created must equal its preview, after
//! bookend's mutation, field by field: name, namespace, labels, annotations, ownerReferences
//! and the whole spec (params, taskSpec with the injected steps, timeout, service account).

use std::process::Command;

use serde_json::{Value, json};

use crate::kube::run;
use crate::runs::{Checks, Finished, TRACE, assert_steps, condition, step};
use crate::scenarios::{Ctx, PIPELINE, policies};

const TASK: &str = "rt-preview-echo";
const PIPELINE_NAME: &str = "rt-preview";

pub fn scenario_preview(ctx: &mut Ctx) -> String {
    let env = &ctx.env;
    env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Task",
        "metadata": {"name": TASK, "namespace": PIPELINE},
        "spec": {
            "params": [{"name": "from"}, {"name": "arch", "default": "none"},
                       {"name": "os", "default": "none"}],
            "steps": [step("echo", "echo $(params.from) $(params.arch) $(params.os)")],
        },
    }));
    let echo = |name: &str, from: &str| {
        json!({"name": name, "taskRef": {"name": TASK},
               "params": [{"name": "from", "value": from}]})
    };
    let mut fan = echo("fan", "$(tasks.produce.results.out)");
    fan["runAfter"] = json!(["produce"]);
    fan["matrix"] = json!({"params": [
        {"name": "arch", "value": ["$(params.arch[*])"]},
        {"name": "os", "value": ["linux", "plan9"]},
    ]});
    let mut guarded = echo("guarded", "guarded");
    guarded["when"] =
        json!([{"input": "$(params.greeting)", "operator": "in", "values": ["hello"]}]);
    let mut skipped = echo("skipped", "skipped");
    skipped["when"] =
        json!([{"input": "$(params.greeting)", "operator": "notin", "values": ["hello"]}]);
    env.kubectl.apply(&json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "Pipeline",
        "metadata": {"name": PIPELINE_NAME, "namespace": PIPELINE,
                     "labels": {"preview.bookend.test/from": "pipeline"},
                     "annotations": {"preview.bookend.test/note": "pipeline"}},
        "spec": {
            "params": [{"name": "greeting", "default": "hello"},
                       {"name": "arch", "type": "array"}],
            "tasks": [
                {"name": "produce",
                 "params": [{"name": "text",
                             "value": "$(params.greeting)-$(context.pipelineRun.name)"}],
                 "taskSpec": {
                     "params": [{"name": "text"}],
                     "results": [{"name": "out"}],
                     "steps": [step("produce", "printf %s \"$(params.text)\" > $(results.out.path)")],
                 }},
                fan, guarded, skipped,
            ],
            "finally": [{"name": "report", "timeout": "10m",
                         "taskSpec": {"steps": [step("report", &format!("cat {TRACE}"))]}}],
        },
    }));
    // 58 characters: `<name>-produce` is longer than 63, so kmeta.ChildName hashes it.
    let run_name = format!("preview-long-name-{}", "n".repeat(40));
    let (name, _) = env.start(&json!({
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": run_name, "namespace": PIPELINE,
                     "labels": {"preview.bookend.test/run": "yes"},
                     "annotations": {"preview.bookend.test/note": "run"}},
        "spec": {
            "pipelineRef": {"name": PIPELINE_NAME},
            "params": [{"name": "arch", "value": ["amd64", "arm64"]}],
            "timeouts": {"pipeline": "2h", "finally": "20m"},
            "taskRunSpecs": [{"pipelineTaskName": "guarded",
                              "metadata": {"labels": {"preview.bookend.test/spec": "guarded"}}}],
        },
    }));
    let done = env.wait("pipelinerun", PIPELINE, &name);

    // The preview, from the objects as the cluster stores them (the PipelineRun's uid, the
    // Task's resourceVersion in bookend's record).
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |file: &str, value: &Value| {
        let path = dir.path().join(file);
        std::fs::write(&path, serde_json::to_vec_pretty(value).expect("json")).expect("write");
        path
    };
    let get = |what: &[&str]| env.kubectl.get(what).expect("get");
    let policy: Vec<Value> = policies()
        .into_iter()
        .filter(|p| p["metadata"]["name"] == "rt-pipeline")
        .collect();
    let policy_file = write("policy.json", &policy[0]);
    let run_file = write("run.json", &get(&["pipelinerun", "-n", PIPELINE, &name]));
    let task_file = write("task.json", &get(&["task", "-n", PIPELINE, TASK]));
    let pipeline_file = write(
        "pipeline.json",
        &get(&["pipeline", "-n", PIPELINE, PIPELINE_NAME]),
    );
    let mut render = Command::new(crate::bookend_bin());
    render
        .args(["render", "-o", "json"])
        .args(&ctx.tekton_args)
        .arg("--policies")
        .arg(&policy_file)
        .arg("-f")
        .arg(&run_file)
        .arg("--tasks")
        .arg(&task_file)
        .arg("--tasks")
        .arg(&pipeline_file);
    let rendered = run(render, None).expect_ok("bookend render of the PipelineRun");
    let notes = rendered.stderr.clone();
    let preview = rendered.json();
    let previews: Vec<Value> = match preview.get("items") {
        Some(items) => items.as_array().expect("items").clone(),
        None => vec![preview],
    };

    let created = get(&[
        "taskruns",
        "-n",
        PIPELINE,
        "-l",
        &format!("tekton.dev/pipelineRun={name}"),
    ]);
    let created = created["items"].as_array().expect("items").clone();
    let name_of = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let mut checks = Checks::default();
    checks.check(
        "the PipelineRun succeeded, the when-false task skipped",
        || {
            assert_eq!(
                condition(&done),
                (
                    "True".to_owned(),
                    "Completed".to_owned(),
                    "Tasks Completed: 4 (Failed: 0, Cancelled 0), Skipped: 1".to_owned()
                ),
            );
            assert!(
                notes.contains("task skipped: skipped, when \"hello\" notin [\"hello\"] is false"),
                "render states the skipped task: {notes}"
            );
        },
    );
    checks.check(
        "the controller created exactly the previewed TaskRuns",
        || {
            let mut want: Vec<String> = previews.iter().map(name_of).collect();
            let mut got: Vec<String> = created.iter().map(name_of).collect();
            want.sort();
            got.sort();
            assert_eq!(got, want, "TaskRun names (render notes: {notes})");
            assert_eq!(got.len(), 7, "produce, 4 fan, guarded, report");
            assert!(
                got.iter().all(|n| n.len() <= 63) && !got.contains(&format!("{name}-produce")),
                "names hashed by kmeta.ChildName: {got:?}"
            );
        },
    );
    // The result the `fan` params read, known only after `produce` ran.
    let produced = created
        .iter()
        .find(|o| o["metadata"]["labels"]["tekton.dev/pipelineTask"] == "produce")
        .and_then(|o| {
            o["status"]["results"]
                .as_array()?
                .iter()
                .find(|r| r["name"] == "out")?["value"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    checks.check("the produce result is the substituted params", || {
        assert_eq!(produced, format!("hello-{name}"));
    });
    for real in &created {
        let task_run = name_of(real);
        let Some(mut want) = previews.iter().find(|p| name_of(p) == task_run).cloned() else {
            continue;
        };
        // A result reference is substituted by the controller when the task it reads has run.
        replace_strings(&mut want, "$(tasks.produce.results.out)", &produced);
        // After the CREATE, Tekton's TaskRun reconciler (`updateLabelsAndAnnotations`) adds its
        // release annotation and TaskRun.SetDefaults' managed-by label, and writes the object
        // back from Go structs (`computeResources: {}` on every step): what it adds is left out
        // and both sides are compared without empty members (`tekton::normalized`). After the
        // run, bookend's post-run verification marks the TaskRun (`bookend.dev/verified`): not
        // part of what the controller creates either.
        let mut real = real.clone();
        if let Some(labels) = real["metadata"]["labels"].as_object_mut() {
            labels.remove("app.kubernetes.io/managed-by");
        }
        if let Some(annotations) = real["metadata"]["annotations"].as_object_mut() {
            annotations.remove("pipeline.tekton.dev/release");
            annotations.remove("bookend.dev/verified");
        }
        let real = bookend::tekton::normalized(&real);
        let want = bookend::tekton::normalized(&want);
        checks.check(&format!("TaskRun {task_run} equals its preview"), || {
            let differing: Vec<String> = [
                "/metadata/name",
                "/metadata/namespace",
                "/metadata/labels",
                "/metadata/annotations",
                "/metadata/ownerReferences",
                "/spec",
            ]
            .into_iter()
            .filter(|field| real.pointer(field) != want.pointer(field))
            .map(|field| {
                format!(
                    "{field}:\n  created:   {}\n  previewed: {}",
                    real.pointer(field).unwrap_or(&Value::Null),
                    want.pointer(field).unwrap_or(&Value::Null)
                )
            })
            .collect();
            assert!(
                differing.is_empty(),
                "TaskRun {task_run} differs from its preview in\n{}",
                differing.join("\n")
            );
            let run = Finished {
                object: real.clone(),
                took: std::time::Duration::ZERO,
            };
            let steps: Vec<String> = run.step_names();
            assert_eq!(
                steps.first().map(String::as_str),
                Some("bookend-pipeline-pre")
            );
            assert_steps(
                env,
                &run,
                &steps
                    .iter()
                    .map(|s| (s.as_str(), "Completed", 0))
                    .collect::<Vec<_>>(),
            );
        });
    }
    checks.finish();
    format!(
        "7 TaskRuns created by Tekton's controller equal bookend's preview field by field \
         (matrix of 4, finally, when-skipped task stated); names hashed: {}",
        created
            .iter()
            .map(name_of)
            .find(|n| n.ends_with("-produce"))
            .unwrap_or_default()
    )
}

fn replace_strings(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_strings(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_strings(v, from, to)),
        _ => {}
    }
}
