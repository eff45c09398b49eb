//! The one harness of keygate's test crates (`keygate-store`'s tests, `keygate`'s process
//! tests, the black-box HTTP tests in `tests/`), so that none of them defines its own:
//!
//! * [`db`]: a fresh database per test ([`TestDb`]: a SQLite file in a temp directory, or a
//!   PostgreSQL schema when `KEYGATE_TEST_POSTGRES_URL` is set), and the tests' Redis.
//! * [`process`]: free ports, child processes killed on drop with their output collected,
//!   keygate started as a process and waited for until it listens.
//! * [`bench`]: p50/p99 reports of the benchmarks that time whole operations.
//! * [`http`]: one raw HTTP/1.1 exchange over a fresh connection (for processes the tests
//!   start, and for requests no client library would send).
//! * [`receiver`]: a webhook receiver on loopback that records what it gets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod bench;
pub mod db;
pub mod dns;
pub mod http;
pub mod process;
pub mod receiver;

pub use db::*;
pub use http::{Response, http, http_unix, request, try_http, v2_post};
pub use process::{Proc, free_port, keygate_command, start_keygate, wait_for_port};
