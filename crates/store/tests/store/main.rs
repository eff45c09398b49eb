//! keygate-store's integration tests, one test binary: a module per area
//! (`cargo test -p keygate-store --test store -- <area>::`).

mod copy;
mod migrations;
mod parity;
mod probe;
mod redis;
mod redis_credits;
