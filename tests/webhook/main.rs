//! The webhook as a server: the real HTTPS server (`bookend::server`) on port 0, reached by real
//! clients, and `bookend serve` as a process. One binary (`cargo test --test webhook`), one
//! module per concern, sharing `support` (a CA, the server in a Secret-like directory, clients).
//!
//! | module | what it covers |
//! |---|---|
//! | `admission` | mutate, validate, dry-run and policy objects over HTTP/2 and HTTP/1.1, panics, mutual TLS, the admin endpoints |
//! | `cli` | `bookend serve` and `bookend certs` as processes: first run, SIGTERM, startup errors |
//! | `corpus` | every upstream Tekton TaskRun example through the server equals `bookend render` |
//! | `lifecycle` | certificate rotation under load, policy reload, graceful shutdown, slow clients |
//! | `robustness` | every node of a review replaced or removed: never a 5xx; TLS versions |
//! | `matrix` | the bad-input matrix of docs/reliability.md, one test per row |
//! | `anchors` | the complaints against other injectors that bookend answers (docs/reliability.md) |
//! | `security` | TLS versions and ciphers, the admin port, no secrets in logs, no opt-out (docs/security.md) |

#[path = "../common/mod.rs"]
mod common;
mod support;

mod admission;
mod anchors;
mod cli;
mod corpus;
mod lifecycle;
mod matrix;
mod robustness;
mod security;
