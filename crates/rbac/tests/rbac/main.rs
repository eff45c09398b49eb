//! keygate-rbac's integration tests, one test binary: a module per area
//! (`cargo test -p keygate-rbac --test rbac -- <area>::`).

mod service;
mod store_reads;
mod verify_cache;
