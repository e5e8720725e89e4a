//! Walking the files and directories named on the command line (`--policies`, `--tasks`, the
//! files of `bookend test`): the only filesystem reads under the loaders. They live here, in
//! `source`, so that `policy` and `engine` below stay pure (text and JSON values in, nothing
//! read), and so every file-backed caller (`--source files`, `render`, `validate`, `test`) lists
//! and reads files the same way.

use std::path::{Path, PathBuf};

use crate::policy::load::{LoadedSet, parse_policy_stream};
use crate::policy::{Issue, IssueKind, PolicyDoc, Settings};

/// Lists the policy files under `paths`: files as given, directories recursively (`.yaml`,
/// `.yml`, `.json`; hidden entries skipped), sorted for a stable order.
pub fn policy_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Issue> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, &mut files).map_err(|e| Issue {
            source: path.display().to_string(),
            policy: "-".to_owned(),
            path: "-".to_owned(),
            message: e,
            kind: IssueKind::Invalid,
        })?;
    }
    Ok(files)
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if meta.is_file() {
        files.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| format!("cannot list directory: {e}"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, files)?;
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(entry);
        }
    }
    Ok(())
}

/// Loads, validates and builds the policies in the files and directories `paths`.
pub fn policy_set(paths: &[PathBuf], settings: Settings) -> LoadedSet {
    let (docs, issues, skipped) = load_paths(paths);
    let mut loaded = LoadedSet::build(docs, issues, settings);
    loaded.skipped = skipped;
    loaded
}

/// Kustomize's own file, which sits beside the manifests it lists.
fn is_kustomization(file: &Path) -> bool {
    matches!(
        file.file_name().and_then(|n| n.to_str()),
        Some("kustomization.yaml" | "kustomization.yml" | "Kustomization")
    )
}

/// Reads every policy under `paths`: what parsed, every problem found, and what was skipped.
fn load_paths(paths: &[PathBuf]) -> (Vec<PolicyDoc>, Vec<Issue>, Vec<Issue>) {
    let files = match policy_files(paths) {
        Ok(f) => f,
        Err(issue) => return (Vec::new(), vec![issue], Vec::new()),
    };
    let mut docs = Vec::new();
    let mut issues = Vec::new();
    let mut skipped = Vec::new();
    for file in files {
        let source = file.display().to_string();
        if is_kustomization(&file) {
            skipped.push(Issue {
                source,
                policy: "-".to_owned(),
                path: "-".to_owned(),
                message: "skipped: a kustomization, not a policy file".to_owned(),
                kind: IssueKind::Invalid,
            });
            continue;
        }
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let parsed = parse_policy_stream(&source, &text);
                docs.extend(parsed.docs);
                issues.extend(parsed.issues);
                skipped.extend(parsed.skipped);
            }
            Err(e) => issues.push(Issue {
                source,
                policy: "-".to_owned(),
                path: "-".to_owned(),
                message: format!("cannot read: {e}"),
                kind: IssueKind::Invalid,
            }),
        }
    }
    (docs, issues, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_read_recursively_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let policy = |name: &str| {
            format!(
                "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {{name: {name}}}\n"
            )
        };
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), policy("b")).unwrap();
        std::fs::write(dir.path().join("a.yml"), policy("a")).unwrap();
        std::fs::write(dir.path().join("sub/c.json"), r#"{"apiVersion":"bookend.dev/v1alpha1","kind":"ClusterStepPolicy","metadata":{"name":"c"}}"#).unwrap();
        std::fs::write(dir.path().join("README.md"), "not yaml").unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), "broken: [").unwrap();
        let (docs, issues, _) = load_paths(&[dir.path().to_owned()]);
        assert!(issues.is_empty(), "{issues:?}");
        let names: Vec<_> = docs.iter().map(|d| d.id.name().to_owned()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let (_, issues, _) = load_paths(&[dir.path().join("missing")]);
        assert!(issues[0].message.starts_with("cannot read"));
    }
}
