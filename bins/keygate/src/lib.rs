//! The keygate server: actix-web composition of the RBAC service, the rate-limit engine
//! and the SQL store, plus the admin subcommands. Exposed as a library so that black-box
//! tests can start the real server in-process with an injected clock.
//!
//! Error policy: request handling uses typed errors end to end and turns them into HTTP in
//! one place ([`error::ApiError`]); `anyhow` appears only at the edges (startup, CLI).

pub mod admin;
pub mod config;
mod connections;
pub mod dashboard;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handlers;
mod http;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod openapi;
mod portal;
pub mod routes;
pub mod server;
mod state;
pub mod telemetry;

pub use config::{Cli, Command, HttpLimits, ServeArgs, ServerConfig};
pub use server::{RunningServer, start};
pub use state::AppState;
