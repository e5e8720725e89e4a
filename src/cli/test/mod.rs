//! `bookend test`: declarative policy tests. Each test file names the policies, the resources
//! (TaskRuns, and the Tasks, StepActions and Namespaces they need) and, per TaskRun, what the
//! engine must decide; `bookend test` runs them through the engine `render` and the webhook
//! use, prints a table, a readable diff for every failure, and optionally JUnit XML.

mod diff;
mod junit;
pub(crate) mod suite;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{EngineArgs, exit, plural};
use suite::{CaseResult, Suite};

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Test files, or directories searched recursively for `bookend-test.yaml` and
    /// `*.bookend-test.yaml`.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Exit 0 when every case passes, 1 when one fails, 2 on bad input (an unreadable or invalid
/// test file, invalid policies, a TaskRun that is not in the resources).
pub(super) fn run(args: &TestArgs) -> u8 {
    let settings = match args.engine.settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let suites: Result<Vec<Suite>, suite::BadInput> =
        suite::test_files(&args.paths).and_then(|files| {
            if files.is_empty() {
                return Err(suite::BadInput {
                    file: args
                        .paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    message: format!(
                        "no test file found (named {} or *.{})",
                        suite::FILE_NAME,
                        suite::FILE_NAME
                    ),
                });
            }
            let mut all = Vec::new();
            for file in files {
                all.extend(suite::load(&file, &settings)?);
            }
            Ok(all)
        });
    let suites = match suites {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let results: Vec<Vec<CaseResult>> = suites.iter().map(Suite::run).collect();
    let report = report(&suites, &results);
    let _ = std::io::stdout().lock().write_all(report.as_bytes());
    if let Some(path) = &args.junit {
        let junit: Vec<junit::SuiteResults<'_>> = suites
            .iter()
            .zip(&results)
            .map(|(s, r)| (s.file.as_str(), s.name.as_str(), r.as_slice()))
            .collect();
        let written = junit::render(&junit)
            .map_err(|e| e.to_string())
            .and_then(|xml| std::fs::write(path, xml).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("error: --junit {}: cannot write: {e}", path.display());
            return exit::USAGE;
        }
    }
    if results.iter().flatten().all(CaseResult::passed) {
        exit::OK
    } else {
        exit::DENIED
    }
}

/// The table of cases, the details of every failure and a summary line.
fn report(suites: &[Suite], results: &[Vec<CaseResult>]) -> String {
    let mut rows = vec![[
        "RESULT".to_owned(),
        "TEST".to_owned(),
        "CASE".to_owned(),
        "OUTCOME".to_owned(),
    ]];
    for (suite, cases) in suites.iter().zip(results) {
        for case in cases {
            let outcome = if case.injected.is_empty() {
                case.outcome.to_string()
            } else {
                format!("{}: {}", case.outcome, case.injected.join(", "))
            };
            rows.push([
                if case.passed() { "pass" } else { "FAIL" }.to_owned(),
                suite.name.clone(),
                case.name.clone(),
                outcome,
            ]);
        }
    }
    let widths: Vec<usize> = (0..3)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (c, width) in widths.iter().enumerate() {
            out.push_str(&format!("{:<width$}  ", row[c], width = *width));
        }
        out.push_str(&row[3]);
        out.push('\n');
    }
    for (suite, cases) in suites.iter().zip(results) {
        for case in cases.iter().filter(|c| !c.passed()) {
            out.push_str(&format!(
                "\n--- FAIL: {} / {} ({})\n",
                suite.name, case.name, suite.file
            ));
            for line in &case.failures {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    let total: usize = suites.iter().map(Suite::len).sum();
    let failed = results.iter().flatten().filter(|c| !c.passed()).count();
    out.push_str(&format!(
        "\n{} passed, {failed} failed ({total} {} in {} {})\n",
        total - failed,
        plural(total, "case", "cases"),
        suites.len(),
        plural(suites.len(), "test", "tests")
    ));
    out
}
