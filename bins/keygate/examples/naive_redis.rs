//! The baseline of the Redis benchmark (bins/keygate/bench/redis-limit.sh): the limiter a
//! team would write in an afternoon. One actix-web worker reads and parses the same
//! `ratelimits.limit` body and makes one `EVALSHA` per request (a fixed window counter,
//! the same rule as keygate's) over one multiplexed asynchronous connection.
//!
//! `cargo run --release -p keygate --example naive_redis -- 127.0.0.1:8082 redis://127.0.0.1:6379`

use actix_web::{App, HttpResponse, HttpServer, web};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct LimitBody {
    identifier: String,
    limit: u64,
    duration: u64,
    namespace: Option<String>,
    cost: Option<u64>,
}

const SCRIPT: &str = r"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
if cost <= limit - used then
  used = redis.call('INCRBY', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, used}
end
return {0, used}
";

/// One per worker (made in the app factory, on the worker's thread): the connection, and
/// its driver task, live on the worker's runtime.
struct Naive {
    client: redis::Client,
    conn: tokio::sync::OnceCell<redis::aio::MultiplexedConnection>,
    script: redis::Script,
}

async fn limit(naive: web::Data<Naive>, body: web::Bytes) -> HttpResponse {
    let b: LimitBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => return HttpResponse::BadRequest().body(e.to_string()),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let start = now - now % b.duration.max(1);
    let key = format!("naive:{}:{}:{start}", b.namespace.as_deref().unwrap_or("default"), b.identifier);
    let conn = naive.conn.get_or_try_init(|| naive.client.get_multiplexed_async_connection()).await;
    let mut conn = match conn {
        Ok(c) => c.clone(),
        Err(e) => return HttpResponse::ServiceUnavailable().body(e.to_string()),
    };
    let answer: redis::RedisResult<(u8, u64)> = naive
        .script
        .key(key)
        .arg(b.limit)
        .arg(b.cost.unwrap_or(1))
        .arg(b.duration + 60_000)
        .invoke_async(&mut conn)
        .await;
    match answer {
        Ok((ok, used)) => HttpResponse::Ok().content_type("application/json").body(format!(
            r#"{{"success":{},"limit":{},"remaining":{},"reset":{}}}"#,
            ok == 1,
            b.limit,
            b.limit.saturating_sub(used),
            start + b.duration
        )),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8082".to_string());
    let url = args.next().unwrap_or_else(|| "redis://127.0.0.1:6379".to_string());
    actix_web::rt::System::new().block_on(async move {
        let client = redis::Client::open(url).map_err(std::io::Error::other)?;
        HttpServer::new(move || {
            let naive = Naive {
                client: client.clone(),
                conn: tokio::sync::OnceCell::new(),
                script: redis::Script::new(SCRIPT),
            };
            App::new().app_data(web::Data::new(naive)).route("/v1/ratelimits.limit", web::post().to(limit))
        })
        .workers(1)
        .bind(addr)?
        .run()
        .await
    })
}
