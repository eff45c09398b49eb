//! The benchmark's service (crates/client/bench/axum.sh): an axum hello-world on one core
//! (a current-thread runtime), behind the keygate layer or not.
//!
//! `MODE` = `none` (no layer), `embedded` (`DATABASE_URL`, and `REDIS_URL` when set) or
//! `remote` (`KEYGATE_URL`, `KEYGATE_ROOT_KEY`); `LISTEN`. The layer requires
//! `documents.read`.

use axum::Router;
use axum::routing::get;
use keygate_client::embedded::Embedded;
use keygate_client::tower::KeygateLayer;
use keygate_client::{Client, Guard, Verifier};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let mode = std::env::var("MODE").unwrap_or_else(|_| "none".into());
    let app = Router::new().route("/", get(|| async { "hello, world" }));
    let verifier = match mode.as_str() {
        "none" => None,
        "embedded" => {
            let mut b = Embedded::builder(std::env::var("DATABASE_URL")?);
            if let Ok(redis) = std::env::var("REDIS_URL") {
                b = b.redis_url(redis);
            }
            if let Ok(prefix) = std::env::var("KEYGATE_REDIS_KEY_PREFIX") {
                b = b.redis_key_prefix(prefix);
            }
            Some(Verifier::embedded(b.open()?))
        }
        "remote" => {
            let client = Client::new(std::env::var("KEYGATE_URL")?, std::env::var("KEYGATE_ROOT_KEY")?)?;
            Some(Verifier::remote(client))
        }
        other => return Err(format!("MODE {other:?}: none, embedded or remote").into()),
    };
    let app = match verifier {
        Some(v) => app.route_layer(KeygateLayer::new(Guard::new(v).permissions("documents.read"))),
        None => app,
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
