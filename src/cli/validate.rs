//! `bookend validate`: check policies, print one line per problem.

use std::path::PathBuf;

use clap::Args;

use super::{EngineArgs, exit, plural};
use crate::policy::{Issue, IssueKind, Support};
use crate::source::walk::{policy_files, policy_set};

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Policy file or directory (repeatable).
    #[arg(long, required = true)]
    pub policies: Vec<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Exit 0 when every policy is valid, 1 with `file: policy: field.path: message` lines when not,
/// 2 when a path cannot be read or holds no policy at all (a wrong path in CI must not pass).
pub(super) fn run(args: &ValidateArgs) -> u8 {
    let files = match policy_files(&args.policies) {
        Ok(files) => files,
        Err(issue) => {
            eprintln!("error: {}: {}", issue.source, issue.message);
            return exit::USAGE;
        }
    };
    let named = || {
        args.policies
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if files.is_empty() {
        eprintln!(
            "error: no policy files (*.yaml, *.yml, *.json) under {}",
            named()
        );
        return exit::USAGE;
    }
    let settings = match args.engine.settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::USAGE;
        }
    };
    let loaded = policy_set(&args.policies, settings);
    for note in &loaded.skipped {
        eprintln!("note: {note}");
    }
    let (set, mut issues) = (loaded.set, loaded.issues);
    if issues.is_empty() && loaded.documents == 0 {
        eprintln!("error: no policies in {}", named());
        return exit::USAGE;
    }
    // A valid policy the target Tekton cannot run would refuse every TaskRun it matches.
    for policy in set.policies() {
        match &policy.tekton {
            Support::Full => {}
            Support::Degraded(_) => eprintln!(
                "note: {}: {}: {}",
                policy.source, policy.id, policy.tekton
            ),
            Support::Unsupported { path, lack } => issues.push(Issue {
                source: policy.source.clone(),
                policy: policy.id.to_string(),
                path: path.clone(),
                message: format!(
                    "{lack} (the TaskRuns this policy matches would be refused; see --tekton-version)"
                ),
                kind: IssueKind::Invalid,
            }),
        }
    }
    if issues.is_empty() {
        println!(
            "valid: {} {}",
            set.len(),
            plural(set.len(), "policy", "policies")
        );
        return exit::OK;
    }
    for issue in &issues {
        println!("{issue}");
    }
    eprintln!(
        "invalid: {} {} in {} {}",
        issues.len(),
        plural(issues.len(), "problem", "problems"),
        loaded.documents,
        plural(loaded.documents, "policy", "policies")
    );
    exit::DENIED
}
