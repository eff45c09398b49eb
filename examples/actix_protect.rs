//! An actix-web service whose routes need a keygate key, verified by a keygate server.
//!
//! ```text
//! KEYGATE_URL=http://127.0.0.1:8080 KEYGATE_ROOT_KEY=kg_root_... \
//!   cargo run --example actix_protect
//! curl -H "Authorization: Bearer <a key holding documents.read>" http://127.0.0.1:3000/documents
//! ```
//!
//! `GET /` is public; `GET /documents` needs `documents.read`, `POST /documents` needs
//! `documents.write`. `LISTEN` (default `127.0.0.1:3000`) is where it serves.

use actix_web::{App, HttpResponse, HttpServer, web};
use keygate_client::actix::KeygateMiddleware;
use keygate_client::{Client, Guard, VerifiedKey, Verifier};

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("KEYGATE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
    let root_key = std::env::var("KEYGATE_ROOT_KEY").map_err(|_| "set KEYGATE_ROOT_KEY")?;
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let guard = Guard::new(Verifier::remote(Client::new(url, root_key)?));

    let server = HttpServer::new(move || {
        App::new().route("/", web::get().to(|| async { "public\n" })).service(
            web::resource("/documents")
                .route(web::get().to(list).wrap(KeygateMiddleware::new(guard.require("documents.read"))))
                .route(web::post().to(create).wrap(KeygateMiddleware::new(guard.require("documents.write")))),
        )
    })
    .workers(1)
    .bind(&listen)?;
    println!("listening on {}", server.addrs()[0]);
    server.run().await?;
    Ok(())
}

/// Reads the verification the middleware put into the request.
async fn list(key: VerifiedKey) -> String {
    let owner = key.external_id().unwrap_or("nobody");
    format!("documents of {owner}, read with key {}\n", key.key_id())
}

async fn create(key: VerifiedKey) -> HttpResponse {
    HttpResponse::Created().body(format!("created by key {}\n", key.key_id()))
}
