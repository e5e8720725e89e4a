//! The repository stands alone: no tracked file reads or names a path outside it (a folder
//! beside the clone, or an absolute home or work directory of the machine it was written on).
//! A clone with nothing next to it must build, test and read the same.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::root;

/// Files under version control; without git (an unpacked archive), every file but build output.
fn tracked_files() -> Vec<PathBuf> {
    let root = root();
    if let Ok(out) = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(&root)
        .output()
        && out.status.success()
        && !out.stdout.is_empty()
    {
        return out
            .stdout
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
            .collect();
    }
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    files
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let relative = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if [
            ".git",
            "target",
            "fuzz/target",
            "tests/e2e/bin",
            "tests/e2e/.work",
        ]
        .iter()
        .any(|skip| relative == *skip)
        {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, out);
        } else {
            out.push(path);
        }
    }
}

/// What a path outside the repository looks like. Assembled from pieces so that this file does
/// not match itself.
fn forbidden() -> Vec<(String, bool)> {
    let shared = format!("{}{}", "../", "shared");
    let mut patterns: Vec<(String, bool)> = vec![(shared, false)];
    for folder in ["samples", "corpus", "research", "hooks"] {
        patterns.push((format!("shared/{folder}/"), false));
    }
    for note in [
        "tekton",
        "anchors",
        "aesthetics",
        "runtime-e2e",
        "kyverno-peer",
    ] {
        patterns.push((format!("research/{note}.md"), false));
    }
    // Absolute directories of a machine: they must start a path (`/tekton/home/` is a path
    // inside a container, not a home directory).
    for dir in ["work", "root", "home", "Users"] {
        patterns.push((format!("/{dir}/"), true));
    }
    patterns
}

/// Whether `line` holds `pattern`; with `at_path_start`, only where no path component precedes it.
fn holds(line: &str, pattern: &str, at_path_start: bool) -> bool {
    line.match_indices(pattern).any(|(at, _)| {
        !at_path_start
            || line[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || "_.-/~$}".contains(c)))
    })
}

#[test]
fn no_tracked_file_names_a_path_outside_the_repository() {
    let root = root();
    // Upstream Tekton examples, copied byte for byte: the home directories in their scripts
    // are paths inside containers, not of this machine.
    let upstream = common::tekton_fixtures();
    let patterns = forbidden();
    let files = tracked_files();
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut hits = Vec::new();
    for file in &files {
        if file.starts_with(&upstream) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue; // binary, or deleted in the working tree
        };
        for (n, line) in text.lines().enumerate() {
            for (pattern, at_path_start) in &patterns {
                if holds(line, pattern, *at_path_start) {
                    hits.push(format!(
                        "{}:{}: {pattern}",
                        file.strip_prefix(&root).unwrap().display(),
                        n + 1
                    ));
                }
            }
        }
    }
    assert!(
        hits.is_empty(),
        "tracked files name paths outside the repository (vendor what they need into it):\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_matcher_finds_what_it_must_and_spares_container_paths() {
    let patterns = forbidden();
    let flagged = |line: &str| patterns.iter().any(|(p, s)| holds(line, p, *s));
    let sample = ["/wo", "rk/sha", "red/samp", "les/x.json"].concat();
    assert!(flagged(&sample));
    assert!(flagged(&format!("read {}{}", "../sha", "red/corpus")));
    assert!(flagged(&format!("cd {}{}", "/ro", "ot/.cargo")));
    assert!(flagged(&format!("\"{}{}", "/ho", "me/dev/bookend\"")));
    assert!(flagged(&format!("see {}{}", "research/", "tekton.md §3")));
    assert!(!flagged("mountPath: /tekton/home/.cache"));
    assert!(!flagged("dir:/workspace/source"));
    assert!(!flagged("$HOME/.cargo and ~/go/pkg"));
}
