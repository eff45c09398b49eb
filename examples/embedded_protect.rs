//! An axum service verifying keys in process: keygate's own service on the database a
//! keygate server uses (no network hop per request). Keys, permissions and limits are
//! managed through that server (its API, CLI or dashboard); every change is seen here at
//! the next request (SQLite: within 50 ms).
//!
//! ```text
//! DATABASE_URL=sqlite://keygate.db cargo run --example embedded_protect
//! curl -H "Authorization: Bearer <a key holding documents.read>" http://127.0.0.1:3000/documents
//! ```
//!
//! `REDIS_URL` as for the server, when the server uses Redis. `LISTEN` (default
//! `127.0.0.1:3000`) is where it serves.

use axum::Router;
use axum::routing::get;
use keygate_client::embedded::Embedded;
use keygate_client::tower::KeygateLayer;
use keygate_client::{Guard, VerifiedKey, Verifier};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let database_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://keygate.db".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let mut embedded = Embedded::builder(database_url);
    if let Ok(redis) = std::env::var("REDIS_URL") {
        embedded = embedded.redis_url(redis);
    }
    let guard = Guard::new(Verifier::embedded(embedded.open()?));

    let app = Router::new()
        .route("/documents", get(list))
        .route_layer(KeygateLayer::new(guard.require("documents.read")))
        .route("/", get(|| async { "public\n" }));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn list(key: VerifiedKey) -> String {
    format!("documents, read with key {} ({:?})\n", key.key_id(), key.permissions)
}
