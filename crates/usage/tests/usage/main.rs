//! keygate-usage's integration tests, one test binary: a module per area
//! (`cargo test -p keygate-usage --test usage -- <area>::`).

mod memory_ledger;
mod shared_credits;
