//! docs/getting-started.md, executed: every `console` block's `$ ` commands run in order, from
//! the repository root, against a cluster of their own (etcd + kube-apiserver + Tekton's CRDs,
//! the chart installed as in the main e2e test, bookend beside the API server), and their output
//! (stdout and stderr, as a terminal shows them) must equal what the page shows, `…` standing
//! for any text. A block the test cannot run must be preceded by a `<!-- not run by the doc
//! test: why -->` comment; any other `sh` block fails the test, so the page cannot grow a
//! command that nobody runs.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::kube::{Cluster, free_port, poll, run};
use crate::tools::tools;

use super::bookend::Bookend;
use super::certificates::Certs;
use super::helm::{helm_install, service_account_kubeconfig};

const PAGE: &str = "docs/getting-started.md";
const SKIP_MARKER: &str = "<!-- not run by the doc test:";

/// One `$ command` and the output the page shows for it.
#[derive(Debug, PartialEq)]
struct Step {
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// The commands of the page's `console` blocks, in order; an error names a block that is
/// neither run nor marked as not run.
fn steps(page: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut lines = page.lines().enumerate().peekable();
    let mut skip_next = false;
    while let Some((i, line)) = lines.next() {
        if line.starts_with(SKIP_MARKER) {
            skip_next = true;
            continue;
        }
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<(usize, &str)> = lines.by_ref().take_while(|(_, l)| *l != "```").collect();
        let skipped = std::mem::take(&mut skip_next);
        match info {
            "console" if !skipped => {
                for (j, text) in body {
                    if let Some(command) = text.strip_prefix("$ ") {
                        steps.push(Step {
                            line: j + 1,
                            command: command.to_owned(),
                            expected: Vec::new(),
                        });
                    } else if let Some(step) = steps.last_mut() {
                        step.expected.push(text.to_owned());
                    } else {
                        return Err(format!("{PAGE}:{}: output before any `$ ` command", j + 1));
                    }
                }
            }
            "sh" | "bash" | "shell" | "console" if !skipped => {
                return Err(format!(
                    "{PAGE}:{}: a {info} block the doc test does not run: make it a `console` \
                     block with `$ ` commands and their output, or say why not with {SKIP_MARKER} …-->",
                    i + 1
                ));
            }
            _ => {}
        }
    }
    Ok(steps)
}

/// Whether `actual` is what the page shows: line by line, `…` matching any text.
fn shows(expected: &[String], actual: &str) -> bool {
    let actual: Vec<&str> = actual.trim_end().lines().map(str::trim_end).collect();
    actual.len() == expected.len()
        && expected
            .iter()
            .zip(&actual)
            .all(|(want, got)| line_matches(want.trim_end(), got))
}

fn line_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (k, part) in parts.iter().enumerate() {
        if k == parts.len() - 1 {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

#[test]
fn getting_started_runs_as_written() {
    let root = crate::root();
    let page = std::fs::read_to_string(root.join(PAGE)).expect(PAGE);
    let steps = steps(&page).unwrap_or_else(|e| panic!("{e}"));
    assert!(steps.len() >= 10, "{PAGE}: only {} commands", steps.len());

    tools();
    let tmp = tempfile::Builder::new()
        .prefix("bookend-getting-started-")
        .tempdir()
        .expect("tempdir");
    let work = tmp.path().to_owned();
    let cluster = Cluster::start(work.join("cluster"));
    // Step 2 of the page, as the main e2e test does it: the chart, with the webhooks pointed at
    // a bookend on this machine.
    let certs = Certs::create(work.join("certs"));
    let port = free_port();
    helm_install(&cluster, port, &certs.ca_bundle_b64(), &[]).expect_ok("helm install");
    poll("the chart's CRDs served", Duration::from_secs(60), || {
        cluster
            .kubectl(&["get", "clustersteppolicies.v1alpha1.bookend.dev"])
            .succeeded()
    });
    let kubeconfig = service_account_kubeconfig(&cluster, &work.join("bookend.kubeconfig"));
    let mut bookend = Bookend::start(
        &work,
        port,
        &certs.live("tls.crt"),
        &certs.live("tls.key"),
        &kubeconfig,
    );
    bookend.wait_ready(Duration::from_secs(60));

    let bookend_dir = Path::new(env!("CARGO_BIN_EXE_bookend"))
        .parent()
        .expect("bookend's directory")
        .to_owned();
    let kubectl_dir = tools()
        .path("kubectl")
        .parent()
        .expect("kubectl")
        .to_owned();
    let path = std::env::join_paths([bookend_dir, kubectl_dir].into_iter().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    for step in &steps {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("{} 2>&1", step.command))
            .current_dir(&root)
            .env("PATH", &path)
            .env("KUBECONFIG", &cluster.kubectl.kubeconfig);
        let out = run(cmd, None);
        assert!(
            out.ok() && shows(&step.expected, &out.stdout),
            "{PAGE}:{}: `{}` exited {} and printed\n{}\nwhere the page shows\n{}\n--- bookend log (tail)\n{}",
            step.line,
            step.command,
            out.status,
            out.stdout,
            step.expected.join("\n"),
            crate::kube::tail(&bookend.log, 20),
        );
    }
    println!("{PAGE}: {} commands ran as written", steps.len());
    drop(bookend);
    drop(cluster);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_parser_and_matcher() {
        let page = "text\n```console\n$ echo a\na\n$ true\n```\n<!-- not run by the doc test: no -->\n```sh\nrm -rf /\n```\n```yaml\nk: v\n```\n";
        let found = steps(page).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].command, "echo a");
        assert_eq!(found[0].expected, ["a"]);
        assert!(found[1].expected.is_empty());
        assert!(steps("```sh\nls\n```\n").is_err());
        assert!(line_matches(
            "taskrun/build-… created",
            "taskrun/build-x7k2p created"
        ));
        assert!(!line_matches(
            "taskrun/build-… created",
            "taskrun/build-x7k2p deleted"
        ));
        assert!(line_matches("a…b…c", "a1b2c"));
        assert!(!line_matches("a…b…c", "a1c"));
        assert!(line_matches("exact", "exact"));
        assert!(!line_matches("exact", "exactly"));
        assert!(shows(&["x".into(), "y".into()], "x\ny  \n\n"));
        assert!(!shows(&["x".into()], "x\ny\n"));
    }
}
