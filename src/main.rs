//! The `bookend` binary: parse the command line and hand over to the library.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    bookend::cli::main()
}
