//! The `bookend` binary: parse the command line and hand over to the library.

#![forbid(unsafe_code)]

use std::process::ExitCode;

// mimalloc: glibc malloc/free were ~40% of the instructions per admission (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    bookend::cli::main()
}
