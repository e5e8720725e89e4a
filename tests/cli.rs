//! The command line as a user runs it: exit codes, output formats, and golden before/after
//! files (regenerate with `BOOKEND_BLESS=1 cargo test --test cli`, then review the diff).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn bookend(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(args)
        .current_dir(common::root())
        .output()
        .unwrap()
}

fn bookend_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bookend"))
        .args(args)
        .current_dir(common::root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn validate_accepts_the_examples() {
    let out = bookend(&["validate", "--policies", "examples/policies"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "valid: 5 policies\n");
}

#[test]
fn validate_reports_file_policy_path_and_message() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: bad}\nspec:\n  preSteps:\n  - {name: creds, image: alpine, onError: ignore}\n",
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let out = bookend(&["validate", "--policies", path]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    let file = dir.path().join("bad.yaml");
    let prefix = format!(
        "{}: ClusterStepPolicy/bad: spec.preSteps[0].",
        file.display()
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with(&format!(
            "{prefix}name: step name \"creds\" must start with"
        )),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with(&format!("{prefix}onError: invalid value")),
        "{stdout}"
    );
}

/// A wrong path in CI must not go green: a missing path, a directory without policy files and
/// a file without a policy are usage errors (exit 2), each named.
#[test]
fn validate_without_policies_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = bookend(&["validate", "--policies", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("missing: cannot read"),
        "{}",
        text(&out.stderr)
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("README.md"), "not a policy\n").unwrap();
    let out = bookend(&["validate", "--policies", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("no policy files (*.yaml, *.yml, *.json) under"),
        "{}",
        text(&out.stderr)
    );

    let blank = dir.path().join("blank.yaml");
    std::fs::write(&blank, "# nothing yet\n").unwrap();
    let out = bookend(&["validate", "--policies", blank.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("no policies in"),
        "{}",
        text(&out.stderr)
    );
}

/// A GitOps directory as it is: the kustomization and other tools' objects beside the policies
/// are skipped with a note; a typo in a policy's kind is still an error.
#[test]
fn validate_skips_what_is_not_a_policy_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [policy.yaml, task.yaml]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("task.yaml"),
        "apiVersion: tekton.dev/v1\nkind: Task\nmetadata: {name: t}\nspec: {steps: [{name: s, image: alpine}]}\n",
    )
    .unwrap();
    std::fs::copy(
        common::root().join("examples/policies/10-credentials.yaml"),
        dir.path().join("policy.yaml"),
    )
    .unwrap();
    let path = dir.path().to_str().unwrap();
    let out = bookend(&["validate", "--policies", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "valid: 1 policy\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kustomization.yaml: -: -: skipped: a kustomization, not a policy file"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "task.yaml: document 1: kind: skipped: Task (tekton.dev/v1) is not a bookend policy"
        ),
        "{stderr}"
    );

    std::fs::write(
        dir.path().join("typo.yaml"),
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicyy\nmetadata: {name: x}\n",
    )
    .unwrap();
    let out = bookend(&["validate", "--policies", path]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("is not a bookend policy"));

    // Only other tools' objects: no policy at all is a usage error.
    let only = dir.path().join("only");
    std::fs::create_dir(&only).unwrap();
    std::fs::copy(dir.path().join("task.yaml"), only.join("task.yaml")).unwrap();
    let out = bookend(&["validate", "--policies", only.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
}

/// Issue 14's reproduction: a team's StepPolicy that reuses an org volume name (and sorts
/// first by priority and name) is the one refused; the org policy stays and keeps injecting.
#[test]
fn a_team_policy_that_clashes_with_an_org_policy_is_the_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let org = dir.path().join("org.yaml");
    let team = dir.path().join("team.yaml");
    std::fs::write(
        &org,
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: org-audit}\nspec:\n  priority: 100\n  preSteps: [{name: bookend-audit, image: alpine, command: [\"true\"], volumeMounts: [{name: bookend-cache, mountPath: /cache}]}]\n  volumes: [{name: bookend-cache, emptyDir: {}}]\n",
    )
    .unwrap();
    std::fs::write(
        &team,
        "apiVersion: bookend.dev/v1alpha1\nkind: StepPolicy\nmetadata: {name: aaa-team, namespace: team-a}\nspec:\n  priority: 0\n  preSteps: [{name: bookend-team, image: alpine, command: [\"true\"]}]\n  volumes: [{name: bookend-cache, emptyDir: {}}]\n",
    )
    .unwrap();
    let (org, team) = (org.to_str().unwrap(), team.to_str().unwrap());
    for order in [[org, team], [team, org]] {
        let out = bookend(&["validate", "--policies", order[0], "--policies", order[1]]);
        assert_eq!(out.status.code(), Some(1));
        let stdout = text(&out.stdout);
        assert_eq!(
            stdout.trim(),
            format!(
                "{team}: StepPolicy/team-a/aaa-team: spec.volumes[0].name: volume name \"bookend-cache\" is already used by ClusterStepPolicy/org-audit; injected volume names must be unique among the policies that can apply to one TaskRun (rename one of them)"
            )
        );
    }
}

/// `render --disable-inline-spec taskrun` (Tekton's feature flag): a TaskRun bookend would
/// inline is refused, naming the flag; a feature-flags ConfigMap among --tasks does the same.
#[test]
fn render_knows_tekton_refuses_inline_specs() {
    let dir = tempfile::tempdir().unwrap();
    let flags = dir.path().join("feature-flags.yaml");
    std::fs::write(
        &flags,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: feature-flags, namespace: tekton-pipelines}\ndata: {disable-inline-spec: \"pipelinerun,taskrun\"}\n",
    )
    .unwrap();
    let base = [
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/taskref.yaml",
    ];
    let out = bookend(&base);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for extra in [
        vec!["--disable-inline-spec", "taskrun"],
        vec!["--tasks", flags.to_str().unwrap()],
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.clone()).collect();
        let out = bookend(&args);
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        assert!(
            text(&out.stderr).contains("disable-inline-spec lists taskrun"),
            "{extra:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `render --tasks` with Tekton's config-defaults ConfigMap: the platform's default pod template
/// is known, so the TaskRun's podTemplate may restate it but not replace it (even with zero
/// values, which Tekton's defaulting keeps over the platform's).
#[test]
fn render_knows_the_platforms_default_pod_template() {
    let dir = tempfile::tempdir().unwrap();
    let defaults = dir.path().join("config-defaults.yaml");
    std::fs::write(
        &defaults,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-defaults, namespace: tekton-pipelines}\ndata:\n  default-pod-template: |\n    dnsPolicy: None\n    dnsConfig: {nameservers: [10.96.0.53]}\n",
    )
    .unwrap();
    let taskrun = |pod_template: &str| {
        let path = dir.path().join("taskrun.yaml");
        std::fs::write(
            &path,
            format!("apiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {{name: r, namespace: team-a}}\nspec:\n  podTemplate: {pod_template}\n  taskSpec:\n    steps: [{{name: build, image: alpine, script: make}}]\n"),
        )
        .unwrap();
        path
    };
    let render = |path: &std::path::Path| {
        bookend(&[
            "render",
            "--policies",
            "examples/policies",
            "-f",
            path.to_str().unwrap(),
            "--tasks",
            defaults.to_str().unwrap(),
        ])
    };
    let restated = render(&taskrun(
        "{dnsPolicy: None, dnsConfig: {nameservers: [10.96.0.53]}}",
    ));
    assert_eq!(
        restated.status.code(),
        Some(0),
        "{}",
        text(&restated.stderr)
    );
    let replaced = render(&taskrun("{dnsPolicy: \"\"}"));
    assert_eq!(replaced.status.code(), Some(1));
    assert!(
        text(&replaced.stderr).contains("spec.podTemplate.dnsPolicy"),
        "{}",
        text(&replaced.stderr)
    );
}

#[test]
fn render_exit_codes() {
    let ok = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/build.yaml",
    ]);
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));

    let denied = bookend_stdin(
        &[
            "render",
            "--policies",
            "examples/policies",
            "-f",
            "-",
            "--namespace",
            "team-a",
        ],
        "apiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {name: x}\nspec:\n  taskSpec:\n    steps:\n    - {name: bookend-mine, image: alpine}\n",
    );
    assert_eq!(denied.status.code(), Some(1));
    let err = text(&denied.stderr);
    assert!(
        err.contains("denied: TaskRun team-a/x: bookend: spec.taskSpec.steps[0].name"),
        "{err}"
    );

    let missing = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "nope.yaml",
    ]);
    assert_eq!(missing.status.code(), Some(2));
    let bad_yaml = bookend_stdin(
        &["render", "--policies", "examples/policies", "-f", "-"],
        "a: [",
    );
    assert_eq!(bad_yaml.status.code(), Some(2));
    let no_taskrun = bookend_stdin(
        &["render", "--policies", "examples/policies", "-f", "-"],
        "kind: Pod\n",
    );
    assert_eq!(no_taskrun.status.code(), Some(2));
    assert!(text(&no_taskrun.stderr).contains("no TaskRun found"));
    let usage = bookend(&["render", "--bogus"]);
    assert_eq!(usage.status.code(), Some(2));
    let bad_policies = bookend(&[
        "render",
        "--policies",
        "Cargo.toml",
        "-f",
        "examples/taskruns/build.yaml",
    ]);
    assert_eq!(bad_policies.status.code(), Some(2));
}

#[test]
fn render_patch_and_json_outputs_agree() {
    let args = [
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/build.yaml",
    ];
    let yaml_out = bookend(&args);
    let json_out = bookend(&[&args[..], &["-o", "json"]].concat());
    let patch_out = bookend(&[&args[..], &["-o", "patch"]].concat());
    let from_yaml: Value = serde_yaml_ng::from_slice(&yaml_out.stdout).unwrap();
    let from_json: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(from_yaml, from_json);
    let input: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(common::root().join("examples/taskruns/build.yaml")).unwrap(),
    )
    .unwrap();
    let lines: Vec<&str> = std::str::from_utf8(&patch_out.stdout)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(lines.len(), 1, "one patch per TaskRun");
    let patch: json_patch::Patch = serde_json::from_str(lines[0]).unwrap();
    let mut patched = input;
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched, from_json);
}

/// docs/policy.md shows `render --explain` for build.yaml: the sample is what the binary prints.
#[test]
fn the_explain_sample_in_the_policy_reference_is_what_render_prints() {
    let doc = std::fs::read_to_string(common::root().join("docs/policy.md")).unwrap();
    let start = doc
        .find("TaskRun team-a/build-<generated>:")
        .expect("the explain sample in docs/policy.md");
    let end = start + doc[start..].find("\n```").unwrap();
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/build.yaml",
        "--explain",
        "-o",
        "patch",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr).trim_end(), &doc[start..end]);
}

#[test]
fn render_explain_and_namespace_labels() {
    let policy_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        policy_dir.path().join("p.yaml"),
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: gold}\nspec:\n  match: {namespaceSelector: {matchLabels: {tier: gold}}}\n  preSteps: [{name: bookend-gold, image: alpine}]\n",
    )
    .unwrap();
    let p = policy_dir.path().to_str().unwrap();
    let args = [
        "render",
        "--policies",
        p,
        "-f",
        "examples/taskruns/build.yaml",
        "--explain",
        "-o",
        "json",
    ];
    let plain = bookend(&args);
    let err = text(&plain.stderr);
    assert!(
        err.contains(
            "ClusterStepPolicy/gold (Enforce): not matched: namespaceSelector: needs tier=gold"
        ),
        "{err}"
    );
    assert!(err.contains("decision: admitted"), "{err}");
    let gold = bookend(&[&args[..], &["--namespace-labels", "tier=gold"]].concat());
    let err = text(&gold.stderr);
    assert!(
        err.contains("(Enforce): matched: namespaceSelector holds"),
        "{err}"
    );
    let out: Value = serde_json::from_slice(&gold.stdout).unwrap();
    assert_eq!(out["spec"]["taskSpec"]["steps"][0]["name"], "bookend-gold");
}

#[test]
fn render_reads_stdin_like_kubectl_get() {
    let input = std::fs::read_to_string(common::root().join("examples/taskruns/git.yaml")).unwrap();
    let out = bookend_stdin(
        &[
            "render",
            "--policies",
            "examples/policies",
            "-f",
            "-",
            "-o",
            "patch",
        ],
        &input,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("bookend-git-clone"));
}

/// What users have in hand: `kubectl get taskruns -o yaml` (a List), a directory of
/// manifests, several `-f`: every TaskRun is rendered, in the order given.
#[test]
fn render_takes_lists_directories_and_repeated_files() {
    let root = common::root();
    let build = std::fs::read_to_string(root.join("examples/taskruns/build.yaml")).unwrap();
    let git = std::fs::read_to_string(root.join("examples/taskruns/git.yaml")).unwrap();
    let as_json = |text: &str| -> Value { serde_yaml_ng::from_str(text).unwrap() };
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List",
        "items": [as_json(&build), as_json(&git)]});
    let patches = |out: &Output| -> usize {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout).lines().count()
    };
    let from_list = bookend_stdin(
        &[
            "render",
            "--policies",
            "examples/policies",
            "-f",
            "-",
            "-o",
            "patch",
        ],
        &list.to_string(),
    );
    assert_eq!(patches(&from_list), 2);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a-build.yaml"), &build).unwrap();
    std::fs::create_dir(dir.path().join("more")).unwrap();
    std::fs::write(dir.path().join("more/git.yaml"), &git).unwrap();
    let from_dir = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        dir.path().to_str().unwrap(),
        "-o",
        "patch",
    ]);
    assert_eq!(patches(&from_dir), 2);
    assert_eq!(text(&from_dir.stdout), text(&from_list.stdout));

    let repeated = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/git.yaml",
        "-f",
        "examples/taskruns/build.yaml",
        "-o",
        "patch",
    ]);
    let lines: Vec<String> = text(&repeated.stdout).lines().map(str::to_owned).collect();
    let listed: Vec<String> = text(&from_list.stdout).lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        [listed[1].clone(), listed[0].clone()],
        "in the order given"
    );
}

/// `bookend version` names the release, the commit, and the Tekton and Kubernetes versions the
/// suites run: the ones the test tools are built from (their go.mod), so it cannot drift.
#[test]
fn version_names_the_release_commit_and_tested_versions() {
    let out = bookend(&["version"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with(&format!("bookend {}\ncommit: ", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
    let go_mod = |path: &str, module: &str| -> String {
        let text = std::fs::read_to_string(common::root().join(path)).unwrap();
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(&format!("{module} ")))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{module} in {path}"))
            .to_owned()
    };
    let tekton = go_mod(
        "tests/e2e/tektonvalidate/go.mod",
        "github.com/tektoncd/pipeline",
    );
    let kubernetes = go_mod("tests/e2e/k8sbins/go.mod", "k8s.io/kubernetes");
    assert_eq!(bookend::cli::TESTED_TEKTON, tekton);
    assert_eq!(bookend::cli::TESTED_KUBERNETES, kubernetes);
    assert!(
        stdout.contains(&format!("Tekton Pipelines {tekton}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Kubernetes {kubernetes}")),
        "{stdout}"
    );
}

/// Shell completions, and the binary as a kubectl plugin (`kubectl bookend …` runs
/// `kubectl-bookend` from PATH with the rest of the arguments).
#[test]
fn completions_and_the_kubectl_plugin_name() {
    for shell in ["bash", "zsh", "fish"] {
        let out = bookend(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        for word in ["render", "validate", "--policies"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    assert_eq!(bookend(&["completions", "tcsh"]).status.code(), Some(2));

    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-bookend");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_bookend"), &plugin).unwrap();
    let out = Command::new(&plugin)
        .args(["validate", "--policies", "examples/policies"])
        .current_dir(common::root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "valid: 5 policies\n");
}

#[test]
fn crds_print_the_generated_definitions() {
    let out = bookend(&["crds"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), bookend::policy::api::crds_yaml());
    let docs = bookend::policy::load::yaml_documents(&text(&out.stdout)).unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1]["spec"]["names"]["kind"], "ClusterStepPolicy");
    let description = docs[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["postStepsRun"]["description"]
        .as_str()
        .unwrap();
    assert!(
        description.contains("Always"),
        "kubectl explain shows field docs"
    );
}

/// Golden before/after files: tests/golden/<case>.yaml is the input (its first comment line
/// holds extra render arguments), tests/golden/<case>.out.yaml the expected output.
#[test]
fn golden_files() {
    let dir = common::root().join("tests/golden");
    let bless = std::env::var_os("BOOKEND_BLESS").is_some();
    let mut cases = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for input in entries {
        let name = input.file_name().unwrap().to_str().unwrap().to_owned();
        if !name.ends_with(".yaml") || name.ends_with(".out.yaml") {
            continue;
        }
        cases += 1;
        let source = std::fs::read_to_string(&input).unwrap();
        let extra: Vec<&str> = source
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# args:"))
            .map(|a| a.split_whitespace().collect())
            .unwrap_or_default();
        let input_str = input.to_str().unwrap();
        let mut args = vec!["render", "--policies", "examples/policies", "-f", input_str];
        args.extend(extra);
        let out = bookend(&args);
        let rendered = format!(
            "# exit {}\n{}{}",
            out.status.code().unwrap_or(-1),
            text(&out.stderr)
                .lines()
                .map(|l| format!("# {l}\n"))
                .collect::<String>(),
            text(&out.stdout)
        )
        .replace(&common::root().display().to_string(), ".");
        let expected_path = dir.join(name.replace(".yaml", ".out.yaml"));
        if bless {
            std::fs::write(&expected_path, &rendered).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
            panic!(
                "{} missing: run with BOOKEND_BLESS=1",
                expected_path.display()
            )
        });
        assert_eq!(
            rendered, expected,
            "golden {name} changed; review and bless"
        );
    }
    assert!(
        cases >= 5,
        "{cases} golden cases in {}",
        Path::new(&dir).display()
    );
}

/// The example policies ship with their tests, and they pass.
#[test]
fn test_runs_the_example_policy_tests() {
    let out = bookend(&["test", "examples/"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.starts_with("RESULT  TEST"), "{stdout}");
    assert!(
        stdout.contains(
            "pass    example-policies  a team build gets credentials first and the SBOM steps last"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert!(
        stdout.ends_with("21 passed, 0 failed (21 cases in 3 tests)\n"),
        "{stdout}"
    );
}

/// A test file whose expectations are wrong: exit 1, every reason, a field-level diff of the
/// expected TaskRun, and JUnit XML that counts the failures.
#[test]
fn test_failures_are_explained_and_written_as_junit() {
    let dir = tempfile::tempdir().unwrap();
    let root = common::root();
    let mut expected: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("examples/tests/expected/build.yaml")).unwrap(),
    )
    .unwrap();
    // A wrong image in an injected step, and an expected label the admitted TaskRun lacks.
    expected["spec"]["taskSpec"]["steps"][0]["image"] = "docker.io/library/busybox:1.36".into();
    expected["metadata"]["labels"]["team"] = "a".into();
    std::fs::write(
        dir.path().join("expected.yaml"),
        serde_yaml_ng::to_string(&expected).unwrap(),
    )
    .unwrap();
    let test = format!(
        r#"apiVersion: cli.bookend.dev/v1alpha1
kind: Test
metadata: {{name: wrong}}
policies: [{policies}]
resources: [{taskruns}]
results:
  - taskRun: build-
    result: mutated
    patchedTaskRun: expected.yaml
  - taskRun: build-
    namespace: default
    result: mutated
    injected: [bookend-credentials]
  - taskRun: legacy-build
    result: denied
    message: nope
    warnings: [something]
"#,
        policies = root.join("examples/policies").display(),
        taskruns = root.join("examples/taskruns").display(),
    );
    let file = dir.path().join("wrong.bookend-test.yaml");
    std::fs::write(&file, test).unwrap();
    let junit = dir.path().join("junit.xml");
    let out = bookend(&[
        "test",
        dir.path().to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    for needle in [
        "FAIL    wrong  team-a/build-",
        "spec.taskSpec.steps[bookend-credentials].image: expected \"docker.io/library/busybox:1.36\", got \"docker.io/library/busybox:1.37\"",
        "metadata.labels.team: missing (expected \"a\")",
        "result: expected mutated, got admitted",
        "injected: expected [\"bookend-credentials\"], got []",
        "result: expected denied, got mutated",
        "message: expected a denial containing \"nope\", got none",
        "warnings: none contains \"something\"; got []",
        "0 passed, 3 failed (3 cases in 1 test)",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"<testsuites name="bookend test" tests="3""#)
            && xml.contains(r#"failures="3""#),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 3, "{xml}");
}

#[test]
fn test_bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bookend-test.yaml");
    let write = |text: &str| std::fs::write(&file, text).unwrap();
    let run = || bookend(&["test", file.to_str().unwrap()]);
    write(
        "apiVersion: cli.bookend.dev/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [missing]\nresults: []\n",
    );
    let out = run();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read"),
        "{}",
        text(&out.stderr)
    );
    write("apiVersion: v1\nkind: ConfigMap\n");
    let out = run();
    assert_eq!(out.status.code(), Some(2));
    let out = bookend(&["test", "src"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no test file found"));
}

/// `-o decisions`: one identified JSON line per TaskRun, in input order, denied ones included,
/// each carrying the patch that `-o patch` prints.
#[test]
fn render_decisions_identify_every_taskrun_denied_ones_included() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: tekton.dev/v1\n  kind: TaskRun\n  metadata: {name: ok, namespace: team-a}\n  spec:\n    taskSpec:\n      steps: [{name: build, image: alpine}]\n- apiVersion: tekton.dev/v1\n  kind: TaskRun\n  metadata: {name: sneaky, namespace: team-a}\n  spec:\n    taskSpec:\n      steps: [{name: bookend-mine, image: alpine}]\n---\napiVersion: tekton.dev/v1\nkind: TaskRun\nmetadata: {name: elsewhere, namespace: ci}\nspec:\n  taskSpec:\n    steps: [{name: build, image: alpine}]\n";
    let args = ["render", "--policies", "examples/policies", "-f", "-"];
    let out = bookend_stdin(&[&args[..], &["-o", "decisions"]].concat(), list);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let ids: Vec<(String, u64, Option<u64>, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["file"].as_str().unwrap().to_owned(),
                l["document"].as_u64().unwrap(),
                l["item"].as_u64(),
                l["name"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            ("-".into(), 1, Some(1), "ok".into(), "mutated".into()),
            ("-".into(), 1, Some(2), "sneaky".into(), "denied".into()),
            ("-".into(), 2, None, "elsewhere".into(), "admitted".into()),
        ]
    );
    assert!(
        lines[1]["message"]
            .as_str()
            .unwrap()
            .contains("spec.taskSpec.steps[0].name"),
        "{}",
        lines[1]
    );
    assert_eq!(lines[1]["patch"], serde_json::json!([]));
    assert!(lines[0].get("message").is_none());
    let sbom = lines[0]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == "ClusterStepPolicy/org-sbom")
        .expect("org-sbom explained");
    assert_eq!(sbom["verdict"], "matched");
    assert_eq!(sbom["mode"], "Enforce");
    // The same patches as `-o patch`, which leaves the denied TaskRun out.
    let patches = bookend_stdin(&[&args[..], &["-o", "patch"]].concat(), list);
    let patches: Vec<Value> = text(&patches.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        patches,
        [lines[0]["patch"].clone(), lines[2]["patch"].clone()]
    );

    // A PipelineRun's TaskRuns: each line names the PipelineRun and the PipelineTask, and the
    // file the PipelineRun came from.
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/pipelineruns/release.yaml",
        "-o",
        "decisions",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let tasks: Vec<(String, String, String)> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|l| {
            (
                l["pipelineRun"].as_str().unwrap_or("-").to_owned(),
                l["pipelineTask"].as_str().unwrap_or("-").to_owned(),
                l["file"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        tasks.contains(&(
            "release-42".into(),
            "notify".into(),
            "examples/pipelineruns/release.yaml".into()
        )),
        "{tasks:?}"
    );
    assert!(
        tasks.iter().all(|(run, _, _)| run == "release-42"),
        "{tasks:?}"
    );
}

/// A policy with several problems gets one line per problem, not only the first.
#[test]
fn validate_reports_every_problem_of_a_policy() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.yaml"),
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: bad}\nspec:\n  mode: Enforced\n  postStepsRun: Sometimes\n  preSteps:\n  - {name: bookend-a, image: alpine, imagee: x, workingDir: 5}\n",
    )
    .unwrap();
    let out = bookend(&["validate", "--policies", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    for field in [
        "spec.mode: unknown variant `Enforced`",
        "spec.postStepsRun: unknown variant `Sometimes`",
        "spec.preSteps[0].imagee: unknown field",
        "spec.preSteps[0].workingDir: invalid type",
    ] {
        assert!(
            stdout.contains(&format!("ClusterStepPolicy/bad: {field}")),
            "{field} missing in\n{stdout}"
        );
    }
    assert!(
        text(&out.stderr).contains("invalid: 4 problems"),
        "{}",
        text(&out.stderr)
    );
}

/// Every subcommand's help ends with examples and its exit codes.
#[test]
fn every_help_has_examples_and_exit_codes() {
    for command in [
        "serve",
        "render",
        "validate",
        "test",
        "certs",
        "crds",
        "version",
        "completions",
    ] {
        let out = bookend(&[command, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{command}");
        let help = text(&out.stdout);
        let examples = help
            .find("\nExamples:\n  ")
            .unwrap_or_else(|| panic!("{command}: {help}"));
        let codes = help
            .find("\nExit codes: 0")
            .unwrap_or_else(|| panic!("{command}: {help}"));
        assert!(examples < codes, "{command}: {help}");
        // The examples are this command's.
        assert!(
            help[examples..codes].contains(&format!("bookend {command}")),
            "{command}: {help}"
        );
    }
}

/// The cluster's Tekton (`--tekton-version`, `--tekton-feature-flags`, `--tekton-feature-flag`):
/// on v0.62 with default flags the example Always and StepAction policies cannot run, so
/// validate names the flag and render refuses; the flag (or its ConfigMap) restores the newest
/// Tekton's output; `postStepsRunFallback: OnSuccess` injects without gates, with a warning.
#[test]
fn render_validate_and_test_take_the_clusters_tekton() {
    let lts = ["--tekton-version", "v0.62.3"];
    let out = bookend(&[&["validate", "--policies", "examples/policies"][..], &lts].concat());
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("examples/policies/20-sbom.yaml: ClusterStepPolicy/org-sbom: spec.postStepsRun: Tekton v0.62.3 refuses step when unless its feature flag enable-step-actions is \"true\""),
        "{stdout}"
    );
    assert!(
        stdout.contains("ClusterStepPolicy/org-git-clone: spec.preSteps[0].ref: Tekton v0.62.3 refuses StepActions (step ref)"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let flags = dir.path().join("feature-flags.yaml");
    std::fs::write(
        &flags,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: feature-flags, namespace: tekton-pipelines}\ndata: {enable-step-actions: \"true\", enable-api-fields: beta}\n",
    )
    .unwrap();
    let render = [
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/taskruns/build.yaml",
        "-o",
        "json",
    ];
    let newest = bookend(&render);
    assert_eq!(newest.status.code(), Some(0));
    let with_flags = bookend(
        &[
            &render[..],
            &lts,
            &["--tekton-feature-flags", flags.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(
        with_flags.status.code(),
        Some(0),
        "{}",
        text(&with_flags.stderr)
    );
    assert_eq!(with_flags.stdout, newest.stdout);
    let v1 = bookend(&[&render[..], &["--tekton-version", "v1.0.0"]].concat());
    assert_eq!(v1.stdout, newest.stdout);

    // The fallback: post-steps without gates or verdict, and a warning.
    let policy = dir.path().join("report.yaml");
    std::fs::write(
        &policy,
        "apiVersion: bookend.dev/v1alpha1\nkind: ClusterStepPolicy\nmetadata: {name: report}\nspec:\n  postStepsRun: Always\n  postStepsRunFallback: OnSuccess\n  postSteps: [{name: bookend-report, image: alpine}]\n",
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    let out = bookend(&[&["validate", "--policies", p][..], &lts].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("ClusterStepPolicy/report: postStepsRun: Always runs as OnSuccess (postStepsRunFallback: OnSuccess)"),
        "{}",
        text(&out.stderr)
    );
    let out = bookend(
        &[
            &[
                "render",
                "--policies",
                p,
                "-f",
                "examples/taskruns/build.yaml",
                "--dry-run",
                "-o",
                "json",
            ][..],
            &lts,
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let admitted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = admitted["spec"]["taskSpec"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"bookend-report"), "{names:?}");
    assert!(!names.contains(&"bookend-verdict"), "{names:?}");

    // Bad input: exit 2, naming the flag and the fix.
    for (args, says) in [
        (
            vec!["--tekton-version", "v0.59.0"],
            "bookend supports Tekton v0.62.0 and later",
        ),
        (
            vec!["--tekton-version", "latest"],
            "is not a Tekton version",
        ),
        (
            vec!["--tekton-feature-flag", "enable-step-actions"],
            "expected KEY=VALUE",
        ),
        (
            vec!["--tekton-feature-flag", "enable-api-fields=gamma"],
            "is not one of stable, beta, alpha",
        ),
        (
            vec!["--tekton-feature-flag", "enable-stepactions=true"],
            "bookend does not read this flag",
        ),
        (
            vec!["--tekton-feature-flags", "examples/policies/20-sbom.yaml"],
            "expected Tekton's feature-flags ConfigMap",
        ),
    ] {
        let out = bookend(&[&["validate", "--policies", "examples/policies"][..], &args].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = bookend(&["test", "examples/", "--tekton-version", "v0.62.3"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the example tests expect the newest Tekton"
    );
}

/// A PipelineRun renders as the TaskRuns Tekton's controller creates for it, each decided as a
/// TaskRun; its Pipeline comes from the same file or `--tasks`, and a missing one is named.
#[test]
fn render_previews_a_pipelinerun_per_pipeline_task() {
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        "examples/pipelineruns/",
        "-o",
        "json",
        "--explain",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The sample in docs/policy.md ("PipelineRuns") is what render prints.
    let doc = std::fs::read_to_string(common::root().join("docs/policy.md")).unwrap();
    let section = &doc[doc.find("## PipelineRuns").unwrap()..];
    let sample = section.split("```").nth(3).unwrap();
    for line in sample.lines().filter(|l| !l.is_empty() && *l != "…") {
        assert!(
            stderr.contains(line),
            "docs/policy.md sample line {line:?} in\n{stderr}"
        );
    }
    for line in [
        "note: PipelineRun team-a/release-42: task build (matrix 1/2): TaskRun release-42-build-0",
        "note: PipelineRun team-a/release-42: task build (matrix 2/2): TaskRun release-42-build-1",
        "note: PipelineRun team-a/release-42: task publish: TaskRun release-42-publish; runs only if \"./cmd/app\" notin [\"\"] (true)",
        "note: PipelineRun team-a/release-42: finally task notify: TaskRun release-42-notify",
        "TaskRun team-a/release-42-notify (PipelineRun release-42, task notify):",
    ] {
        assert!(stderr.contains(line), "{line:?} in\n{stderr}");
    }
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let task_runs: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "TaskRun")
        .collect();
    let names: Vec<&str> = task_runs
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "release-42-build-0",
            "release-42-build-1",
            "release-42-publish",
            "release-42-notify"
        ]
    );
    // The matrix value, the pipeline's default param and the context, substituted; the org's
    // step first in every TaskRun, the referenced Task inlined; bookend's record last.
    assert_eq!(
        task_runs[1]["spec"]["params"],
        serde_json::json!([{"name": "goos", "value": "darwin"},
                           {"name": "package", "value": "./cmd/app"},
                           {"name": "bookend-injected",
                            "value": task_runs[1]["metadata"]["annotations"]["bookend.dev/injected"]}])
    );
    assert_eq!(
        task_runs[2]["spec"]["params"][0]["value"],
        "built release-42"
    );
    for tr in &task_runs {
        assert_eq!(
            tr["spec"]["taskSpec"]["steps"][0]["name"],
            "bookend-credentials"
        );
        assert_eq!(tr["metadata"]["ownerReferences"][0]["kind"], "PipelineRun");
    }

    // The PipelineRun alone: its Pipeline is missing until --tasks names it.
    let dir = tempfile::tempdir().unwrap();
    let run_only = dir.path().join("run.yaml");
    let source =
        std::fs::read_to_string(common::root().join("examples/pipelineruns/release.yaml")).unwrap();
    let run_doc = source.split("\n---\n").last().unwrap();
    std::fs::write(&run_only, run_doc).unwrap();
    let run_path = run_only.to_str().unwrap();
    let out = bookend(&["render", "--policies", "examples/policies", "-f", run_path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "error: PipelineRun team-a/release-42: spec.pipelineRef: Pipeline team-a/release is not among the objects given; pass its file with --tasks (or -f)"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        run_path,
        "--tasks",
        "examples/pipelineruns",
        "-o",
        "patch",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 4);

    // --namespace: the PipelineRun, so its TaskRuns, are created there (its Pipeline too).
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        run_path,
        "--tasks",
        "examples/pipelineruns",
        "--namespace",
        "elsewhere",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("PipelineRun elsewhere/release-42: spec.pipelineRef: Pipeline elsewhere/release is not among"),
        "{}",
        text(&out.stderr)
    );

    // Through a resolver: stated unresolved; nothing to render is bad input.
    let remote = dir.path().join("remote.yaml");
    std::fs::write(
        &remote,
        "apiVersion: tekton.dev/v1\nkind: PipelineRun\nmetadata: {name: r, namespace: team-a}\nspec:\n  pipelineRef:\n    resolver: git\n    params: [{name: url, value: https://example.dev/p.git}]\n",
    )
    .unwrap();
    let out = bookend(&[
        "render",
        "--policies",
        "examples/policies",
        "-f",
        remote.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("the Pipeline comes through the git resolver when the PipelineRun runs; it is unresolved here"),
        "{}",
        text(&out.stderr)
    );
}

/// `bookend test` names a PipelineRun's TaskRun by pipelineRun and pipelineTask; a task that
/// creates no TaskRun is bad input naming those that do.
#[test]
fn test_takes_pipelineruns_per_pipeline_task() {
    let dir = tempfile::tempdir().unwrap();
    let root = common::root();
    let file = dir.path().join("bookend-test.yaml");
    let write = |results: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: cli.bookend.dev/v1alpha1\nkind: Test\nmetadata: {{name: p}}\npolicies: [{}]\nresources: [{}]\nresults:\n{results}",
                root.join("examples/policies").display(),
                root.join("examples/pipelineruns").display(),
            ),
        )
        .unwrap();
    };
    write(
        "- {pipelineRun: release-42, pipelineTask: build, result: mutated, injected: [bookend-credentials, bookend-sbom, bookend-sbom-upload]}\n- {pipelineRun: release-42, pipelineTask: notify, result: admitted}\n",
    );
    let out = bookend(&["test", file.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("pass    p     team-a/release-42/build [0]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("pass    p     team-a/release-42/build [1]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("result: expected admitted, got mutated"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("2 passed, 1 failed (3 cases in 1 test)\n"),
        "{stdout}"
    );

    write("- {pipelineRun: release-42, pipelineTask: lint, result: mutated}\n");
    let out = bookend(&["test", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains(
            "results: pipelineTask \"lint\" of PipelineRun \"release-42\" creates no TaskRun; those that do: [\"build\", \"notify\", \"publish\"]"
        ),
        "{}",
        text(&out.stderr)
    );
    write("- {pipelineRun: release-42, taskRun: x, result: mutated}\n");
    let out = bookend(&["test", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("results[0]: name the TaskRun under test with taskRun, or with pipelineRun and pipelineTask"),
        "{}",
        text(&out.stderr)
    );
}
