//! Build metadata for `bookend version`: the commit and its date, from git when the source is a
//! git checkout ("unknown" otherwise, e.g. a source tarball). The commit date, not the build
//! time, so that two builds of one commit print the same.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// The environment wins (a container build has no .git: the Dockerfile passes them as build
/// arguments), then git.
fn given(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn main() {
    let commit = given("BOOKEND_COMMIT").or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    let date = given("BOOKEND_COMMIT_DATE").or_else(|| git(&["log", "-1", "--format=%cs"]));
    println!(
        "cargo:rustc-env=BOOKEND_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!(
        "cargo:rustc-env=BOOKEND_COMMIT_DATE={}",
        date.as_deref().unwrap_or("unknown")
    );
    // Rebuild when HEAD moves (a commit, a checkout); without git, never for this.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for file in ["HEAD", "logs/HEAD"] {
            let path = std::path::Path::new(&dir).join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
