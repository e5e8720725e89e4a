//! Class 6: cost. See `invariant.rs` for sizes; this file holds the linear-work checks.
