//! The GitHub Actions workflows (`.github/workflows/`): `actionlint` (built from its Go module by
//! tests/e2e/build-tools.sh; it also runs shellcheck on the `run:` scripts when shellcheck is on
//! the PATH) finds nothing, and it does find a planted mistake; every action is pinned by commit;
//! no job gets more than it asks for; the release publishes the image the chart and deploy/ name,
//! and docs/install.md verifies it with the identity the release workflow signs with.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use bookend::policy::load::yaml_documents;
use serde_json::Value;

const IMAGE: &str = "ghcr.io/bookend-dev/bookend";
const CHARTS: &str = "oci://ghcr.io/bookend-dev/charts";
const IDENTITY: &str =
    "https://github.com/bookend-dev/bookend/.github/workflows/release.yml@refs/tags/";
const ISSUER: &str = "https://token.actions.githubusercontent.com";

fn workflows() -> Vec<PathBuf> {
    let dir = common::root().join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    files
}

fn workflow(name: &str) -> Value {
    let path = common::root().join(".github/workflows").join(name);
    yaml_documents(&std::fs::read_to_string(path).unwrap())
        .unwrap()
        .remove(0)
}

fn actionlint(files: &[PathBuf], dir: &Path) -> (bool, String) {
    let out = Command::new(common::e2e_tool("actionlint"))
        .arg("-no-color")
        .args(files)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn actionlint_finds_nothing_and_catches_a_planted_mistake() {
    let files = workflows();
    let names: BTreeSet<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["ci.yml".to_owned(), "release.yml".to_owned()].into()
    );
    let (ok, out) = actionlint(&files, &common::root());
    assert!(ok, "actionlint .github/workflows:\n{out}");

    // The same check on a copy with an undefined job output and a bad runner label must fail,
    // so a pass above means something.
    let dir = tempfile::tempdir().unwrap();
    let broken = std::fs::read_to_string(&files[1])
        .unwrap()
        .replace(
            "needs.version.outputs.version }}",
            "needs.version.outputs.versoin }}",
        )
        .replace("runner: ubuntu-24.04-arm", "runner: ubuntu-24.04-armm");
    std::fs::create_dir_all(dir.path().join(".github/workflows")).unwrap();
    let path = dir.path().join(".github/workflows/release.yml");
    std::fs::write(&path, broken).unwrap();
    let (ok, out) = actionlint(&[path], dir.path());
    assert!(!ok, "actionlint accepted a broken workflow:\n{out}");
    assert!(out.contains("versoin"), "{out}");
}

/// Every `uses:` of every step, with its line's comment.
fn uses(file: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let rest = l
                .trim_start()
                .trim_start_matches("- ")
                .strip_prefix("uses: ")?;
            let (action, comment) = rest.split_once('#').unwrap_or((rest, ""));
            Some((action.trim().to_owned(), comment.trim().to_owned()))
        })
        .collect()
}

#[test]
fn every_action_is_pinned_by_commit_with_its_version() {
    let mut pinned = BTreeSet::new();
    for file in workflows() {
        let all = uses(&file);
        assert!(!all.is_empty(), "{}", file.display());
        for (action, comment) in all {
            let (name, rev) = action
                .split_once('@')
                .unwrap_or_else(|| panic!("{}: {action} has no @ref", file.display()));
            assert!(
                rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()),
                "{}: {name} must be pinned by a full commit SHA, not {rev:?}",
                file.display()
            );
            assert!(
                comment.starts_with('v'),
                "{}: {name}@{rev} needs a `# vX.Y.Z` comment",
                file.display()
            );
            // One action, one commit, everywhere.
            pinned.insert((name.to_owned(), rev.to_owned()));
        }
    }
    let names: Vec<&String> = pinned.iter().map(|(n, _)| n).collect();
    let unique: BTreeSet<&&String> = names.iter().collect();
    assert_eq!(
        names.len(),
        unique.len(),
        "an action pinned at two commits: {pinned:?}"
    );
}

#[test]
fn jobs_get_only_the_permissions_they_ask_for() {
    for name in ["ci.yml", "release.yml"] {
        let w = workflow(name);
        assert_eq!(
            w["permissions"],
            serde_json::json!({}),
            "{name}: no permissions at the top"
        );
        for (job, spec) in w["jobs"].as_object().unwrap() {
            let permissions = spec["permissions"]
                .as_object()
                .unwrap_or_else(|| panic!("{name}: job {job} declares no permissions"));
            for (scope, level) in permissions {
                assert!(
                    matches!(level.as_str(), Some("read" | "write" | "none")),
                    "{name}/{job}: {scope}: {level}"
                );
            }
            let text = serde_json::to_string(spec).unwrap();
            let signs = text.contains("cosign ") || text.contains("attest-build-provenance");
            assert_eq!(
                permissions.get("id-token").and_then(Value::as_str) == Some("write"),
                signs,
                "{name}/{job}: id-token: write exactly where something is signed or attested"
            );
            let pushes = text.contains("push=true")
                || text.contains("helm push")
                || text.contains("imagetools create")
                || (text.contains("cosign ") && !text.contains("sign-blob"));
            assert_eq!(
                permissions.get("packages").and_then(Value::as_str) == Some("write"),
                pushes,
                "{name}/{job}: packages: write exactly where something goes to ghcr.io"
            );
            if permissions.get("contents").and_then(Value::as_str) == Some("write") {
                assert_eq!(
                    job, "release",
                    "{name}: only the release job writes contents"
                );
            }
        }
    }
    let ci = workflow("ci.yml");
    let steps = serde_json::to_string(&ci["jobs"]["ci-run"]["steps"]).unwrap();
    assert!(steps.contains("bash .ci/run"), "CI runs .ci/run");
    let release = workflow("release.yml");
    assert_eq!(
        release["on"]["push"]["tags"],
        serde_json::json!(["v[0-9]+.[0-9]+.[0-9]+"]),
        "the release runs on version tags only"
    );
}

#[test]
fn the_release_publishes_what_the_chart_and_deploy_install_and_the_docs_verify() {
    let release = workflow("release.yml");
    assert_eq!(release["env"]["IMAGE"], IMAGE);
    assert_eq!(release["env"]["CHARTS"], CHARTS);
    let root = common::root();
    let values =
        yaml_documents(&std::fs::read_to_string(root.join("charts/bookend/values.yaml")).unwrap())
            .unwrap()
            .remove(0);
    assert_eq!(values["image"]["repository"], IMAGE, "the chart's image");
    let kustomization = yaml_documents(
        &std::fs::read_to_string(root.join("deploy/base/kustomization.yaml")).unwrap(),
    )
    .unwrap()
    .remove(0);
    assert_eq!(kustomization["images"][0]["name"], IMAGE, "deploy/'s image");
    let chart =
        yaml_documents(&std::fs::read_to_string(root.join("charts/bookend/Chart.yaml")).unwrap())
            .unwrap()
            .remove(0);
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let crate_version = cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap();
    assert_eq!(
        chart["appVersion"], crate_version,
        "appVersion is the crate's version"
    );
    assert_eq!(
        kustomization["images"][0]["newTag"], crate_version,
        "deploy/ pins the same tag"
    );
    // Both platforms, from the Dockerfile.
    let image_job = serde_json::to_string(&release["jobs"]["image"]).unwrap();
    for platform in ["linux/amd64", "linux/arm64"] {
        assert!(image_job.contains(platform), "{platform}");
    }
    let binaries = serde_json::to_string(&release["jobs"]["binaries"]).unwrap();
    for target in [
        "x86_64-unknown-linux-musl",
        "aarch64-unknown-linux-musl",
        "aarch64-apple-darwin",
        "x86_64-apple-darwin",
    ] {
        assert!(binaries.contains(target), "{target}");
    }
    // docs/install.md tells how to verify, with the identity this workflow signs as.
    let install = std::fs::read_to_string(root.join("docs/install.md")).unwrap();
    for needle in [
        "cosign verify ",
        "cosign verify-attestation",
        "cosign verify-blob",
        "gh attestation verify",
        IDENTITY,
        ISSUER,
        "--type spdxjson",
        "sha256sum",
        CHARTS,
    ] {
        assert!(
            install.contains(needle),
            "docs/install.md does not mention {needle:?}"
        );
    }
}
