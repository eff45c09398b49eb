//! The baseline of the HTTP benchmark (bins/keygate/bench/http-limit.sh): a bare actix-web
//! handler that reads and parses the same `ratelimits.limit` JSON body and returns a
//! constant answer. keygate's own throughput is reported as a ratio of this one's.
//!
//! `cargo run --release -p keygate --example bare -- 127.0.0.1:8081`

use actix_web::{App, HttpResponse, HttpServer, web};
use serde::Deserialize;

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

async fn limit(body: web::Bytes) -> HttpResponse {
    match serde_json::from_slice::<LimitBody>(&body) {
        Ok(_) => HttpResponse::Ok()
            .content_type("application/json")
            .body(r#"{"success":true,"limit":100,"remaining":99,"reset":1795316280000}"#),
        Err(e) => HttpResponse::BadRequest().body(e.to_string()),
    }
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8081".to_string());
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(|| App::new().route("/v1/ratelimits.limit", web::post().to(limit)))
            .workers(1)
            .bind(addr)?
            .run()
            .await
    })
}
