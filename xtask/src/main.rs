//! `cargo xtask`: the one entry point to what the project runs besides `cargo build` — the test
//! suite with the set-up it needs, the end-to-end and runtime suites, benchmarks, fuzzing, fault
//! injection, the soak and the release checks. `cargo xtask` alone lists the tasks, one line each.
//!
//! A task runs the script or cargo command it names (scripts/, tests/e2e/), from the repository
//! root, passing its arguments and the environment on; the scripts keep their own usage text
//! and environment variables. Only the set-up of `test` is written here (`setup.rs`).

#[path = "../../tests/common/host.rs"]
mod host;
mod matrix;
mod setup;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// Why a task failed; the exit code is the failed command's when it had one.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 1,
        }
    }
}

type Run = fn(&[String]) -> Result<(), Failure>;

struct Task {
    /// What follows `cargo xtask`, subcommand words included.
    name: &'static str,
    /// The arguments, as in a usage line.
    args: &'static str,
    /// One line: what it does and what it runs.
    about: &'static str,
    run: Run,
}

const TASKS: &[Task] = &[
    Task {
        name: "test",
        args: "[ARGS...]",
        about: "`setup`, then `cargo test --workspace ARGS`: the whole suite (the README's test command); the runtime suite on the newest and the oldest Tekton",
        run: |args| {
            setup::prepare(setup::Scope::Everything)?;
            // The runtime suite on the newest and the oldest line (CI), unless the caller chose.
            let lines =
                std::env::var("BOOKEND_TEKTON_VERSIONS").unwrap_or_else(|_| matrix::ci_lines());
            setup::tekton_tools(&matrix::older_versions(&lines))?;
            phase("cargo test --workspace", || {
                run(cargo()
                    .args(["test", "--workspace"])
                    .args(args)
                    .env("BOOKEND_TEKTON_VERSIONS", &lines))
            })
        },
    },
    Task {
        name: "setup",
        args: "",
        about: "installs runc, busybox-static, openssl, curl when missing; builds the Go tools",
        run: |args| {
            no_args("setup", args)?;
            setup::prepare(setup::Scope::Everything)
        },
    },
    Task {
        name: "lint",
        args: "",
        about: "cargo fmt --all --check; cargo clippy --workspace --all-targets -- -D warnings",
        run: |args| {
            no_args("lint", args)?;
            run(cargo().args(["fmt", "--all", "--check"]))?;
            run(cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))
        },
    },
    Task {
        name: "ci",
        args: "",
        about: ".ci/run: lint, `cargo xtask test`, cargo deny, fuzz, each phase timed",
        run: |args| {
            no_args("ci", args)?;
            run(&mut bash(".ci/run"))
        },
    },
    Task {
        name: "deny",
        args: "[CHECK...]",
        about: "cargo deny check (deny.toml): advisories, licences, bans, sources",
        run: |args| {
            let installed = cargo()
                .args(["deny", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !installed {
                return Err(Failure::new(
                    "cargo-deny is not installed; run: cargo install cargo-deny --locked",
                ));
            }
            run(cargo().args(["deny", "check"]).args(args))
        },
    },
    Task {
        name: "e2e",
        args: "[ARGS...]",
        about: "`setup`, then `cargo test --test e2e`: Tekton's validation, a real kube-apiserver",
        run: |args| {
            setup::prepare(setup::Scope::EndToEnd)?;
            run(cargo().args(["test", "--test", "e2e"]).args(args))
        },
    },
    Task {
        name: "runtime",
        args: "[ARGS...]",
        about: "`setup`, then `cargo test --test runtime`: TaskRuns under Tekton's controller",
        run: |args| {
            setup::prepare(setup::Scope::Everything)?;
            run(cargo().args(["test", "--test", "runtime"]).args(args))
        },
    },
    Task {
        name: "tekton-matrix",
        args: "[ARGS...]",
        about: "the runtime suite on every Tekton line (BOOKEND_TEKTON_VERSIONS); writes the table into docs/compatibility.md",
        run: matrix::tekton_matrix,
    },
    Task {
        name: "chart-pod",
        args: "[ARGS...]",
        about: "`setup`, then `cargo test --test chart_pod`: the chart's Pod from the image's contents",
        run: |args| {
            setup::prepare(setup::Scope::Everything)?;
            run(cargo().args(["test", "--test", "chart_pod"]).args(args))
        },
    },
    Task {
        name: "tools",
        args: "[TOOL...]",
        about: "tests/e2e/build-tools.sh: the Go tools of the tests, all or those named; cached",
        run: |args| {
            let mut cmd = bash("tests/e2e/build-tools.sh");
            if !args.is_empty() {
                cmd.env("ONLY", args.join(" "));
            }
            run(&mut cmd)
        },
    },
    Task {
        name: "cluster start",
        args: "[DIR]",
        about: "tests/e2e/start-cluster.sh: a throw-away etcd + kube-apiserver, Tekton's CRDs",
        run: |args| run(bash("tests/e2e/start-cluster.sh").args(args)),
    },
    Task {
        name: "cluster stop",
        args: "[DIR] [--clean]",
        about: "tests/e2e/stop-cluster.sh: stops what `cluster start` started",
        run: |args| run(bash("tests/e2e/stop-cluster.sh").args(args)),
    },
    Task {
        name: "k8s-gomod",
        args: "[VERSION]",
        about: "tests/e2e/k8sbins/gen-gomod.sh: the tools' go.mod for another Kubernetes",
        run: |args| run(bash("tests/e2e/k8sbins/gen-gomod.sh").args(args)),
    },
    Task {
        name: "fuzz",
        args: "[SECONDS] [TARGET...]",
        about: "scripts/fuzz.sh: each cargo-fuzz target for a bounded time (fuzz/)",
        run: |args| run(bash("scripts/fuzz.sh").args(args)),
    },
    Task {
        name: "bench engine",
        args: "[LABEL] [FILTER]",
        about: "scripts/bench-engine.sh: engine benchmarks -> docs/bench/engine-LABEL.csv",
        run: |args| run(bash("scripts/bench-engine.sh").args(args)),
    },
    Task {
        name: "bench scaling",
        args: "",
        about: "scripts/bench-scaling.sh: latency and memory scaling curves -> docs/bench/",
        run: |args| run(bash("scripts/bench-scaling.sh").args(args)),
    },
    Task {
        name: "bench plot",
        args: "[DIR]",
        about: "scripts/plot-scaling.py: the scaling plots again from DIR's CSVs",
        run: |args| run(python("scripts/plot-scaling.py").args(args)),
    },
    Task {
        name: "bench memory",
        args: "[POLICIES] [TASKS]",
        about: "cargo bench --bench memory: peak memory, N policies and M cached Tasks",
        run: |args| {
            run(cargo()
                .args(["bench", "--bench", "memory", "--"])
                .args(args))
        },
    },
    Task {
        name: "bench profile",
        args: "CASE [ARGS...]",
        about: "scripts/bench-profile.sh: instructions per iteration under callgrind",
        run: |args| run(bash("scripts/bench-profile.sh").args(args)),
    },
    Task {
        name: "bench load",
        args: "",
        about: "scripts/bench-load.sh: h2load over TLS, bookend against the null webhook",
        run: |args| run(bash("scripts/bench-load.sh").args(args)),
    },
    Task {
        name: "bench apiserver",
        args: "[--quick|...]",
        about: "scripts/bench-apiserver.sh: TaskRun CREATEs through a real kube-apiserver",
        run: |args| run(bash("scripts/bench-apiserver.sh").args(args)),
    },
    Task {
        name: "bench report",
        args: "RESULTS.jsonl OUTDIR",
        about: "scripts/apiserver-report.py: a `bench apiserver` run's tables and plots again",
        run: |args| {
            run(python("scripts/apiserver-report.py")
                .arg("report")
                .args(args))
        },
    },
    Task {
        name: "faults",
        args: "[SCENARIO...]",
        about: "scripts/faults.sh: rotation, reload, sigterm, slow, watch under a steady load",
        run: |args| run(bash("scripts/faults.sh").args(args)),
    },
    Task {
        name: "soak",
        args: "[MINUTES] [RATE]",
        about: "scripts/soak.sh: minutes of mixed load, RSS and open files watched",
        run: |args| run(bash("scripts/soak.sh").args(args)),
    },
    Task {
        name: "verify-memory",
        args: "[N]",
        about: "scripts/verify-memory.sh: bookend's memory with N TaskRuns watched, then verified, then counted into the policy's status (release build)",
        run: |args| {
            run(cargo().args(["build", "--release", "--bin", "bookend"]))?;
            run(bash("scripts/verify-memory.sh").args(args))
        },
    },
    Task {
        name: "release-check",
        args: "[vX.Y.Z]",
        about: "before a tag: tag = crate version, workflows/deploy/chart tests, release build",
        run: release_check,
    },
];

/// Scripts no task runs directly, and who runs them.
#[cfg(test)]
const HELPERS: &[(&str, &str)] = &[
    (
        "scripts/bench-apiserver-kyverno.sh",
        "scripts/bench-apiserver.sh",
    ),
    ("scripts/bench-collect.sh", "scripts/bench-engine.sh"),
    (
        "scripts/apiserver-fixtures.py",
        "scripts/bench-apiserver.sh",
    ),
    ("scripts/loadgen.py", "scripts/faults.sh"),
    ("scripts/svgplot.py", "scripts/plot-scaling.py"),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || matches!(args[0].as_str(), "help" | "-h" | "--help") {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    let Some((task, rest)) = find(&args) else {
        eprint!("unknown task `{}`\n\n{}", args.join(" "), usage());
        return ExitCode::from(2);
    };
    match (task.run)(rest) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("xtask {}: {}", task.name, failure.message);
            ExitCode::from(failure.code.max(1))
        }
    }
}

/// The task whose name's words begin `args`, and the rest of `args`.
fn find(args: &[String]) -> Option<(&'static Task, &[String])> {
    TASKS.iter().find_map(|task| {
        let words: Vec<&str> = task.name.split(' ').collect();
        let matches = args.len() >= words.len() && words.iter().zip(args).all(|(w, a)| w == a);
        matches.then(|| (task, &args[words.len()..]))
    })
}

fn usage() -> String {
    let heads: Vec<String> = TASKS
        .iter()
        .map(|t| format!("{} {}", t.name, t.args).trim_end().to_owned())
        .collect();
    let width = heads.iter().map(|h| h.chars().count()).max().unwrap_or(0);
    let mut out = String::from(
        "Usage: cargo xtask <task> [args]   (xtask/src/main.rs; the scripts also read the \
         environment: see each one's header)\n\n",
    );
    for (head, task) in heads.iter().zip(TASKS) {
        out += &format!("  {head:width$}  {}\n", task.about);
    }
    out
}

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ is inside the repository")
        .to_owned()
}

/// The cargo that runs this task (`CARGO`), in the repository root.
pub fn cargo() -> Command {
    let mut cmd =
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")));
    cmd.current_dir(root());
    cmd
}

/// `bash SCRIPT`, in the repository root.
pub fn bash(script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(script).current_dir(root());
    cmd
}

/// `python3 SCRIPT`, in the repository root.
fn python(script: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(script).current_dir(root());
    cmd
}

/// Runs `cmd` (printing it first); a failure carries its exit code.
pub fn run(cmd: &mut Command) -> Result<(), Failure> {
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("+ {shown}");
    let status = cmd
        .status()
        .map_err(|e| Failure::new(format!("cannot run `{shown}`: {e}")))?;
    if status.success() {
        return Ok(());
    }
    Err(Failure {
        message: format!("`{shown}` failed ({status})"),
        code: status
            .code()
            .and_then(|c| u8::try_from(c).ok())
            .unwrap_or(1),
    })
}

/// Runs `f` between two lines that name it, the second with the time it took.
pub fn phase(what: &str, f: impl FnOnce() -> Result<(), Failure>) -> Result<(), Failure> {
    eprintln!("=== {what}");
    let started = Instant::now();
    let result = f();
    let verdict = if result.is_ok() { "done" } else { "FAILED" };
    eprintln!("=== {what}: {verdict} in {} s", started.elapsed().as_secs());
    result
}

fn no_args(task: &str, args: &[String]) -> Result<(), Failure> {
    if args.is_empty() {
        return Ok(());
    }
    Err(Failure {
        message: format!("`{task}` takes no arguments (got {})", args.join(" ")),
        code: 2,
    })
}

/// The `version` of the `[package]` in Cargo.toml.
fn crate_version(cargo_toml: &str) -> Option<&str> {
    let package = cargo_toml.split("[package]").nth(1)?;
    package
        .lines()
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"'))
}

fn release_check(args: &[String]) -> Result<(), Failure> {
    let cargo_toml = std::fs::read_to_string(root().join("Cargo.toml"))
        .map_err(|e| Failure::new(format!("Cargo.toml: {e}")))?;
    let version = crate_version(&cargo_toml)
        .ok_or_else(|| Failure::new("no version in Cargo.toml's [package]"))?;
    match args {
        [] => eprintln!("crate version {version} (give the tag, vX.Y.Z, to check it too)"),
        [tag] if tag.strip_prefix('v') == Some(version) => {
            eprintln!("tag {tag} is the crate's version")
        }
        [tag] => {
            return Err(Failure::new(format!(
                "the tag {tag} is not v{version}, Cargo.toml's version: change one"
            )));
        }
        _ => return Err(Failure::new("release-check takes at most one tag")),
    }
    // The chart's appVersion and deploy/'s image tag equal the crate's version, the image name
    // and the workflows' pins agree (tests/workflows.rs); the manifests and the chart hold.
    phase("the release's tests: workflows, deploy, chart", || {
        run(cargo().args([
            "test",
            "--test",
            "workflows",
            "--test",
            "deploy",
            "--test",
            "chart",
        ]))
    })?;
    phase("the release build", || {
        run(cargo().args(["build", "--release", "--locked", "--bin", "bookend"]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_names_are_unique_and_each_line_is_one_line() {
        let mut names: Vec<_> = TASKS.iter().map(|t| t.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), TASKS.len());
        assert_eq!(usage().lines().count(), TASKS.len() + 2);
    }

    #[test]
    fn tasks_are_found_by_their_words() {
        let args = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let a = args("bench engine after ^review/");
        let (task, rest) = find(&a).unwrap();
        assert_eq!((task.name, rest.len()), ("bench engine", 2));
        let a = args("test --test webhook");
        assert_eq!(find(&a).unwrap().0.name, "test");
        assert!(find(&args("bench")).is_none());
        assert!(find(&args("nonsense")).is_none());
    }

    /// Every script in scripts/ and tests/e2e/ is run by a task or, as a helper, by a script
    /// that one runs: `cargo xtask` is the one entry.
    #[test]
    fn every_script_has_a_task() {
        let source = std::fs::read_to_string(root().join("xtask/src/main.rs")).unwrap();
        let tasks_part = source.split("const HELPERS").next().unwrap();
        let mut scripts = Vec::new();
        for dir in ["scripts", "tests/e2e", "tests/e2e/k8sbins", ".ci"] {
            for entry in std::fs::read_dir(root().join(dir)).unwrap() {
                let name = entry.unwrap().file_name().into_string().unwrap();
                if name.ends_with(".sh") || name.ends_with(".py") || name == "run" {
                    scripts.push(format!("{dir}/{name}"));
                }
            }
        }
        assert!(scripts.len() > 10, "{scripts:?}");
        for script in scripts {
            if let Some((_, caller)) = HELPERS.iter().find(|(h, _)| *h == script) {
                let text = std::fs::read_to_string(root().join(caller)).unwrap();
                let stem = Path::new(&script).file_stem().unwrap().to_str().unwrap();
                assert!(text.contains(stem), "{caller} does not run {script}");
            } else {
                assert!(
                    tasks_part.contains(&format!("\"{script}\"")),
                    "no task runs {script}: add one to TASKS (or to HELPERS, with its caller)"
                );
            }
        }
    }

    #[test]
    fn the_crate_version_is_the_packages() {
        let toml =
            "[package]\nname = \"x\"\nversion = \"1.2.3\"\n\n[dependencies]\nversion = \"9\"\n";
        assert_eq!(crate_version(toml), Some("1.2.3"));
        let real = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
        assert!(crate_version(&real).is_some());
    }
}
