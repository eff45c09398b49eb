//! Liveness, the error docs page, the OpenAPI document, and the 404/405 answers.

use crate::error::ApiError;
use crate::http::blocking;
use crate::state::{AppState, MetricsAccess};
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::ErrorCode;
use keygate_rbac::RbacStore;

/// `GET /v1/liveness`: no authentication; 200 while the process serves, with the state of
/// each store.
pub async fn liveness(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (_, body) = stores(&state).await?;
    Ok(HttpResponse::Ok().json(body))
}

/// `GET /v1/readiness`: no authentication; 200 when every store this instance needs
/// answers, else 503 (a load balancer then sends its traffic elsewhere), with the same
/// body as liveness.
pub async fn readiness(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (ready, body) = stores(&state).await?;
    let mut res = if ready { HttpResponse::Ok() } else { HttpResponse::ServiceUnavailable() };
    Ok(res.json(body))
}

/// Whether every store answers now, and `{status, services: {database, ratelimit}}`.
async fn stores(state: &web::Data<AppState>) -> Result<(bool, serde_json::Value), ApiError> {
    let db_kind = state.rbac.store().kind();
    let st = state.clone();
    let db = blocking(move || Ok(st.rbac.store().ping())).await?;
    let db_status = match &db {
        Ok(()) => "ok".to_string(),
        Err(e) => {
            log::warn!("health: database: {e}");
            "unavailable".to_string()
        }
    };
    let st = state.clone();
    let rl = blocking(move || Ok(st.limiter.ping())).await?;
    let rl_status = match &rl {
        Ok(()) => "ok".to_string(),
        Err(e) => {
            log::warn!("health: rate-limit store: {e}");
            "unavailable".to_string()
        }
    };
    let ready = db.is_ok() && rl.is_ok();
    let body = serde_json::json!({
        "status": if ready { "ok" } else { "degraded" },
        "services": {
            "database": { "kind": db_kind, "status": db_status },
            "ratelimit": { "kind": state.limiter.kind(), "status": rl_status },
        },
    });
    Ok((ready, body))
}

/// `GET /metrics`: the Prometheus text format (docs/operations.md). Served as
/// `KEYGATE_METRICS` says: to anyone, to a root key holding `metrics.read`, or not (404).
pub async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // On its own listener the access comes with that server; on the main one, the state's.
    let access = req.app_data::<MetricsAccess>().copied().unwrap_or(state.metrics_access);
    match access {
        MetricsAccess::NotHere => return not_found(req).await,
        MetricsAccess::RootKey => {
            let principal = crate::http::authenticate(&req, &state).await?;
            if !principal.holds(PERM_READ_METRICS) {
                return Err(keygate_rbac::RbacError::missing(&[PERM_READ_METRICS]).into());
            }
        }
        MetricsAccess::Open => {}
    }
    let st = state.clone();
    let text = blocking(move || {
        let kept = crate::metrics::Kept {
            caches: st.rbac.cache_hit_counts(),
            db_pool: st.rbac.store().pool_state(),
            redis_batches: st.redis.as_ref().map(|r| {
                let b = r.batch_stats();
                (b.script_calls, b.decisions)
            }),
        };
        Ok(st.metrics.render(&kept))
    })
    .await?;
    Ok(HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(text))
}

/// The root-key permission that reads `/metrics` when `KEYGATE_METRICS=root-key`.
pub const PERM_READ_METRICS: &str = "metrics.read";

/// `GET /docs/errors`: the error reference that error bodies link to.
pub async fn error_docs() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/markdown; charset=utf-8")
        .body(include_str!("../../../../docs/errors.md"))
}

/// `GET /openapi.json`: the OpenAPI 3.1 document of every endpoint (docs/openapi.json).
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(include_str!("../../../../docs/openapi.json"))
}

/// `GET /openapi-v2.json`: the OpenAPI 3.1 document of the v2 API (docs/openapi-v2.json).
pub async fn openapi_v2() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(include_str!("../../../../docs/openapi-v2.json"))
}

/// Any path not served: 404 (for a `/v2` path, v2's `not_supported`, API-v2.md §8).
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if crate::http::is_v2(req.path()) {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("{} {} is not supported by keygate", req.method(), req.path()),
        )
        .with_problem(crate::error::problems::NOT_SUPPORTED));
    }
    Err(ApiError::new(ErrorCode::NotFound, format!("no route {} {}", req.method(), req.path())))
}

/// The 405 of a known path; `allow` lists the methods it takes.
pub fn method_not_allowed(req: &HttpRequest, allow: &str) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("method {} is not allowed on {}; use {allow}", req.method(), req.path()),
    )
    .with_header("allow", allow)
}
