//! keygate for Rust services: a typed client of keygate's v2 API, a [`Verifier`] that
//! verifies keys through a keygate server or in this process, and middleware that protects
//! tower/axum and actix-web services with it.
//!
//! # Quick start: protect an axum service
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use keygate_client::{Client, Guard, Verifier, VerifiedKey, tower::KeygateLayer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // A keygate server and a root key holding `api.*.verify_key`.
//!     let client = Client::new("http://127.0.0.1:8080", std::env::var("KEYGATE_ROOT_KEY")?)?;
//!     let guard = Guard::new(Verifier::remote(client));
//!     let app = Router::new()
//!         .route("/hello", get(|key: VerifiedKey| async move { format!("hello, {}", key.key_id()) }))
//!         // Every route above needs a key holding `greetings.read` (else 401 or 403).
//!         .route_layer(KeygateLayer::new(guard.require("greetings.read")));
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! A request then carries `Authorization: Bearer <key>`; a missing or unknown key answers
//! 401, a key without the permission 403, a key over its rate limit or out of credits 429
//! (with `Retry-After` and `RateLimit-*` headers for rate limits), and keygate unreachable
//! 503 (the guard fails closed). See [`Guard`] for the key's place, rate limits, credit
//! costs and the refusals' format.
//!
//! # The client
//!
//! [`Client`] has one method per operation of keygate's v2 API, named after it
//! (`keys.createKey` is [`Client::create_key`]), each taking the operation's request type
//! and answering a [`Response`] of its data; errors are [`Error::Api`] with keygate's
//! problem details as [`ApiError`]. Calls reuse connections, time out (10 s by default) and
//! retry transient failures (503, connection refused) with backoff. The same client works
//! against Unkey's v2 service where the two APIs overlap.
//!
//! ```no_run
//! # async fn run() -> Result<(), keygate_client::Error> {
//! use keygate_client::{Client, keys::{CreateKeyRequest, VerifyKeyRequest}};
//! let client = Client::new("http://127.0.0.1:8080", "kg_root_...")?;
//! let created = client
//!     .create_key(&CreateKeyRequest { api_id: "api_1".into(), ..Default::default() })
//!     .await?;
//! let verified = client
//!     .verify_key(&VerifyKeyRequest { key: created.key.clone(), ..Default::default() })
//!     .await?;
//! assert!(verified.valid);
//! # Ok(()) }
//! ```
//!
//! # Remote or embedded
//!
//! [`Verifier::remote`] asks a keygate server over HTTP. [`Verifier::embedded`] (feature
//! `embedded`) runs keygate's own service in this process on the server's database (and
//! Redis), with the server's verification cache and change counters: no network hop per
//! request, and every change made through the server's API is seen here too.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `tower` | [`tower::KeygateLayer`], and [`VerifiedKey`] as an axum extractor |
//! | `actix` | [`actix::KeygateMiddleware`], and [`VerifiedKey`] as an actix-web extractor |
//! | `embedded` | [`embedded::Embedded`] and [`Verifier::embedded`] (keygate's crates, SQLite compiled in, PostgreSQL and Redis) |
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod analytics;
pub mod apis;
mod client;
#[cfg(feature = "embedded")]
#[cfg_attr(docsrs, doc(cfg(feature = "embedded")))]
pub mod embedded;
mod error;
mod guard;
pub mod identities;
pub mod keys;
pub mod permissions;
pub mod ratelimit;
mod system;
mod verifier;

#[cfg(feature = "actix")]
#[cfg_attr(docsrs, doc(cfg(feature = "actix")))]
pub mod actix;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use client::{Client, ClientBuilder, Empty, Pagination, Response};
pub use error::{ApiError, Error, FieldError};
pub use guard::{
    ClientAddr, ErrorFormat, Guard, KeySource, MAX_KEY_CHARS, Rejection, RenderRejection, VerifiedKey,
};
pub use system::Liveness;
pub use verifier::Verifier;
