//! One file per attack class of the "Sealed" issue (docs/security.md, the threat table).

pub mod cost;
pub mod lookalike;
pub mod merged;
pub mod names;
pub mod record;
pub mod taskref;
pub mod tenants;
