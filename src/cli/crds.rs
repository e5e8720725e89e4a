//! `bookend crds`: print the CRDs generated from the policy types.

use std::io::Write;

use super::exit;

pub(super) fn run() -> u8 {
    let yaml = crate::policy::api::crds_yaml();
    // A closed pipe (`bookend crds | head`) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(yaml.as_bytes());
    exit::OK
}
