//! PipelineRuns among `render` and `test` inputs: each becomes the TaskRuns Tekton's controller
//! would create for it ([`crate::tekton::pipeline`]), which then take the TaskRun path as any
//! other TaskRun. Each TaskRun carries its identity in its labels (`tekton.dev/pipelineRun`,
//! `tekton.dev/pipelineTask`), as the controller writes them.

use serde_json::Value;

use crate::engine::Catalog;
use crate::tekton::TaskRunView;
use crate::tekton::cluster::Version;
use crate::tekton::pipeline::{self, Child, PIPELINE_RUN_LABEL, PIPELINE_TASK_LABEL, Run, When};

/// Whether a document is a PipelineRun.
pub fn is_pipeline_run(doc: &Value) -> bool {
    doc.get("kind").and_then(Value::as_str) == Some("PipelineRun")
        && doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("tekton.dev/"))
}

/// `docs` with every PipelineRun replaced by the TaskRuns its controller would create, in the
/// Pipeline's order (`tasks`, then `finally`); what each PipelineTask gives is said in `notes`,
/// one line each. A PipelineRun that cannot be expanded is an error naming it. `namespace`,
/// when given, is where the PipelineRuns are created (`render --namespace`), whatever their
/// metadata says; otherwise theirs, else `default_namespace`. The TaskRuns are those the
/// controller of Tekton `version` creates (`--tekton-version`; the newest by default).
pub fn expand(
    docs: Vec<Value>,
    catalog: &Catalog,
    default_namespace: &str,
    namespace: Option<&str>,
    version: Version,
    notes: &mut Vec<String>,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(docs.len());
    for mut doc in docs {
        if !is_pipeline_run(&doc) {
            out.push(doc);
            continue;
        }
        if let (Some(ns), Some(meta)) = (
            namespace,
            doc.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("namespace".into(), ns.into());
        }
        let find = |ns: &str, name: &str| {
            catalog
                .pipelines
                .get(&(ns.to_owned(), name.to_owned()))
                .cloned()
        };
        let label = format!(
            "PipelineRun {}/{}",
            doc.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(default_namespace),
            doc.pointer("/metadata/name")
                .or_else(|| doc.pointer("/metadata/generateName"))
                .and_then(Value::as_str)
                .unwrap_or("")
        );
        let preview = pipeline::preview_for(&doc, default_namespace, &find, version)
            .map_err(|e| format!("{label}: {e}"))?;
        for note in &preview.notes {
            notes.push(format!("{label}: {note}"));
        }
        for child in preview.children {
            notes.push(format!("{label}: {}", describe(&child)));
            if let (Run::TaskRun(task_run), false) =
                (child.run, matches!(child.when, When::Skipped(_)))
            {
                out.push(task_run);
            }
        }
    }
    Ok(out)
}

/// One line on what the controller does for a PipelineTask.
fn describe(child: &Child) -> String {
    let mut line = format!(
        "{} {}",
        if child.finally {
            "finally task"
        } else {
            "task"
        },
        child.pipeline_task
    );
    if let Some((i, n)) = child.matrix {
        line.push_str(&format!(" (matrix {}/{n})", i + 1));
    }
    match (&child.run, &child.when) {
        (_, When::Skipped(why)) => {
            line.push_str(&format!(": skipped, when {why}: no run is created"));
            return line;
        }
        (Run::Other(what), _) => line.push_str(&format!(": {what}; bookend does not see it")),
        (Run::TaskRun(_), _) => {
            line.push_str(&format!(": TaskRun {}", child.name().unwrap_or_default()))
        }
    }
    if let When::OnlyIf(conditions) = &child.when {
        line.push_str(&format!("; runs only if {}", conditions.join(" and ")));
    }
    if !child.unresolved.is_empty() {
        line.push_str(&format!(
            "; params left for run time (results of other tasks): {}",
            child.unresolved.join(", ")
        ));
    }
    line
}

/// ` (PipelineRun x, task y)` for a TaskRun a PipelineRun creates, else nothing: for the lines
/// `render` prints about a TaskRun.
pub fn identity(view: &TaskRunView<'_>) -> String {
    let label = |k: &str| view.labels().and_then(|l| l.get(k)).and_then(Value::as_str);
    match (label(PIPELINE_RUN_LABEL), label(PIPELINE_TASK_LABEL)) {
        (Some(run), Some(task)) => format!(" (PipelineRun {run}, task {task})"),
        _ => String::new(),
    }
}
