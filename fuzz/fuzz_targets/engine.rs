//! Structured TaskRuns → `engine::decide`: the webhook's `decide_patch` gives the same patch,
//! the patch applied with `json-patch` equals `decision.object`, and a second pass changes
//! nothing.
#![no_main]

use bookend_fuzz::{TaskRunInput, check_decision, policies};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: TaskRunInput| {
    check_decision(&input.object, &input.namespace, input.dry_run, policies());
});
