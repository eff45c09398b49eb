//! The keygate process: configuration (flags, environment, TOML), logging and telemetry,
//! the listeners and workers, the background upkeep and the admin subcommands, around
//! keygate's HTTP layer ([`keygate_http`]) and runtime ([`keygate_runtime`]). Exposed as a
//! library so that black-box tests can start the real server in-process with an injected
//! clock.
//!
//! Error policy: `anyhow` at this edge (startup, CLI); request handling is
//! [`keygate_http`]'s, with typed errors turned into HTTP in one place.

pub mod admin;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
pub mod listen;
pub mod logging;
pub mod server;
pub mod telemetry;

pub use config::{Cli, Command, HttpLimits, ServeArgs, ServerConfig};
pub use keygate_http::{AppState, error, metrics, openapi, routes};
pub use server::{RunningServer, start};
