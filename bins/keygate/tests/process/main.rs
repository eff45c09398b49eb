//! The keygate binary as a process, one test binary: a module per area, each test starting
//! `target/.../keygate` itself (restarts, signals, kill -9, the CLI, config files, Unix
//! sockets, real gateways in front of it). Run one area with
//! `cargo test -p keygate --test process -- <area>::`.

mod analytics_durability;
mod backup;
mod cli;
mod config_file;
mod credits_durability;
mod deploy;
mod gateways;
mod grpc;
mod hostile;
mod import;
mod processes;
mod prometheus;
mod ratelimit_durability;
mod rls;
mod store_copy;
mod tracing;
mod unix_socket;
mod warm_restart;
mod webhooks_durability;
