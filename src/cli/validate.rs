//! `bookend validate`: check policies, print one line per problem.

use std::path::PathBuf;

use clap::Args;

use super::{EngineArgs, exit, plural};
use crate::source::walk::policy_set;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Policy file or directory (repeatable).
    #[arg(long, required = true)]
    pub policies: Vec<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Exit 0 when every policy is valid, 1 with `file: policy: field.path: message` lines when not.
pub(super) fn run(args: &ValidateArgs) -> u8 {
    let loaded = policy_set(&args.policies, args.engine.settings());
    let (set, issues) = (loaded.set, loaded.issues);
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
