//! An axum service whose routes need a keygate key, verified by a keygate server.
//!
//! ```text
//! KEYGATE_URL=http://127.0.0.1:8080 KEYGATE_ROOT_KEY=kg_root_... \
//!   cargo run --example axum_protect
//! curl -H "Authorization: Bearer <a key holding documents.read>" http://127.0.0.1:3000/documents
//! ```
//!
//! `GET /` is public; `GET /documents` needs `documents.read`, `POST /documents` needs
//! `documents.write`; every protected request counts against an ad-hoc limit of the key
//! (`KEYGATE_EXAMPLE_LIMIT` per minute, default 100), so a busy key gets 429.
//! `LISTEN` (default `127.0.0.1:3000`) is where it serves; it prints `listening on <addr>`.

use axum::Router;
use axum::routing::get;
use keygate_client::keys::VerifyRatelimit;
use keygate_client::tower::KeygateLayer;
use keygate_client::{Client, Guard, VerifiedKey, Verifier};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("KEYGATE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let root_key = std::env::var("KEYGATE_ROOT_KEY").map_err(|_| "set KEYGATE_ROOT_KEY")?;
    let per_minute = std::env::var("KEYGATE_EXAMPLE_LIMIT").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());

    let guard = Guard::new(Verifier::remote(Client::new(url, root_key)?)).ratelimit(VerifyRatelimit {
        name: "example_requests".into(),
        limit: Some(per_minute),
        duration: Some(60_000),
        cost: None,
    });
    let app = Router::new()
        .route("/documents", get(list).route_layer(KeygateLayer::new(guard.require("documents.read"))))
        .route(
            "/documents",
            axum::routing::post(create).route_layer(KeygateLayer::new(guard.require("documents.write"))),
        )
        .route("/", get(|| async { "public\n" }));

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// Reads the verification the layer put into the request.
async fn list(key: VerifiedKey) -> String {
    let owner = key.external_id().unwrap_or("nobody");
    format!("documents of {owner}, read with key {}\n", key.key_id())
}

async fn create(key: VerifiedKey) -> (axum::http::StatusCode, String) {
    (axum::http::StatusCode::CREATED, format!("created by key {}\n", key.key_id()))
}
