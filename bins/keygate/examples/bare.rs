//! The baseline of the HTTP benchmark (bins/keygate/bench/http-limit.sh): a bare actix-web
//! handler that reads and parses the same `ratelimits.limit` JSON body and makes the same
//! in-memory decision (keygate-ratelimit's `MemoryStore`, one namespace), with no
//! authentication, namespace lookup, analytics, metrics or request id; with `constant` as
//! its second argument it answers a constant instead of deciding (the stricter baseline of
//! the earlier figures). keygate's own throughput is reported as a ratio of this one's.
//!
//! `cargo run --release -p keygate --example bare -- 127.0.0.1:8081 [constant]`

use actix_web::{App, HttpResponse, HttpServer, web};
use keygate_ratelimit::{BudgetKey, LimitRequest, MemoryStore};
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct LimitBody {
    identifier: String,
    limit: serde_json::Number,
    duration: serde_json::Number,
    namespace: Option<String>,
    cost: Option<serde_json::Number>,
    #[serde(rename = "async")]
    is_async: Option<bool>,
    meta: Option<serde_json::Map<String, serde_json::Value>>,
}

struct Bare {
    store: MemoryStore,
    namespace: Arc<String>,
    constant: bool,
}

async fn limit(bare: web::Data<Bare>, body: web::Bytes) -> HttpResponse {
    let body = match serde_json::from_slice::<LimitBody>(&body) {
        Ok(body) => body,
        Err(e) => return HttpResponse::BadRequest().body(e.to_string()),
    };
    if bare.constant {
        return HttpResponse::Ok()
            .content_type("application/json")
            .body(r#"{"success":true,"limit":100,"remaining":99,"reset":1795316280000}"#);
    }
    let number = |n: &serde_json::Number| n.as_u64().unwrap_or(0);
    let req = LimitRequest {
        limit: number(&body.limit),
        duration: number(&body.duration).max(1),
        cost: body.cost.as_ref().map_or(1, number),
    };
    let key = BudgetKey {
        namespace_id: &bare.namespace,
        identifier: &body.identifier,
        duration: req.duration,
        algorithm: Default::default(),
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let d = bare.store.check(key, req, now_ms);
    HttpResponse::Ok().content_type("application/json").body(format!(
        r#"{{"success":{},"limit":{},"remaining":{},"reset":{}}}"#,
        d.success, d.limit, d.remaining, d.reset
    ))
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8081".to_string());
    let constant = std::env::args().nth(2).as_deref() == Some("constant");
    let bare =
        web::Data::new(Bare { store: MemoryStore::new(), namespace: Arc::new("ns_bench".into()), constant });
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(move || {
            App::new().app_data(bare.clone()).route("/v1/ratelimits.limit", web::post().to(limit))
        })
        .workers(1)
        .bind(addr)?
        .run()
        .await
    })
}
