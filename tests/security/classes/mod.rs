//! One file per attack class of the "Sealed" issue (docs/security.md, the threat table) whose
//! cases are TaskRuns with an expected answer (shared with the e2e and runtime suites); the
//! classes about policies and cost are `tenants.rs` and `cost.rs` beside them.

pub mod lookalike;
pub mod merged;
pub mod names;
pub mod record;
pub mod taskref;
