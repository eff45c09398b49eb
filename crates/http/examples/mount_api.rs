//! A service of its own that mounts keygate's API beside its own routes, in one actix-web
//! `App` and one process: keygate's v1 and v2 API under `/v1` and `/v2`, the service's own
//! pages at `/` and `/hello/{name}`. What docs/embedding.md shows, and a test runs
//! (tests/tests/suite/embedding.rs).
//!
//! `LISTEN=127.0.0.1:8080 DATABASE_URL=sqlite://service.db cargo run -p keygate-http --example mount_api`
//!
//! On a new database it creates workspace `default` and a root key (`KEYGATE_ROOT_KEY`
//! when set, else one printed once), as the keygate server does.

use actix_web::{App, HttpResponse, HttpServer, web};
use keygate_domain::{Secret, SystemClock};
use keygate_http::{HttpSettings, Keygate};
use keygate_runtime::{Runtime, RuntimeSettings};
use std::sync::Arc;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let database_url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite://service.db".into());
    let root_key = std::env::var("KEYGATE_ROOT_KEY").ok();

    // keygate's runtime: the database (migrated), the caches, the rate-limit store.
    let runtime = Runtime::open(&RuntimeSettings::new(database_url), Arc::new(SystemClock))?;
    if let Some((_, root, secret)) = runtime.rbac.bootstrap(root_key.clone().map(Secret::new))? {
        match root_key {
            Some(_) => println!("created root key {} (the one in KEYGATE_ROOT_KEY)", root.id),
            None => println!("created root key {}: {}", root.id, secret.expose()),
        }
    }
    runtime.sync_counters()?;
    let keygate = Keygate::new(runtime, HttpSettings::default());
    // Its background work (counters, analytics, credits written behind), stopped on drop.
    let _upkeep = keygate_runtime::spawn_upkeep(Arc::downgrade(&keygate.state().clone().into_inner()));

    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            App::new()
                .configure(keygate.api())
                .route("/", web::get().to(index))
                .route("/hello/{name}", web::get().to(hello))
        })
        .workers(2)
        .bind(&listen)?;
        for addr in server.addrs() {
            println!("listening on http://{addr}");
        }
        server.run().await
    })?;
    Ok(())
}

async fn index() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("the service's own page")
}

async fn hello(name: web::Path<String>) -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body(format!("hello, {name}"))
}
