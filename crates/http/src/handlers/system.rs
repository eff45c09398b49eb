//! Liveness, the error docs page, the OpenAPI document, and the 404/405 answers.

use crate::error::ApiError;
use crate::openapi::Api;
use crate::plumbing::blocking;
use crate::settings::MetricsAccess;
use crate::state::AppState;
use actix_web::{HttpRequest, HttpResponse, web};
use keygate_domain::ErrorCode;
use keygate_rbac::RbacStore;
use serde::Serialize;
use utoipa::ToSchema;

/// The state of the stores (`liveness`, `readiness`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` when every store answers, else `degraded`.
    #[schema(schema_with = health_status)]
    status: &'static str,
    services: Services,
}

#[derive(Debug, Serialize, ToSchema)]
struct Services {
    #[schema(inline)]
    database: Store,
    #[schema(inline)]
    ratelimit: Store,
}

#[derive(Debug, Serialize, ToSchema)]
struct Store {
    /// The kind of store (`sqlite`, `postgres`, `memory`, `redis`, ...).
    kind: &'static str,
    /// `ok` or `unavailable`.
    status: &'static str,
}

fn health_status() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["ok", "degraded"]))
        .build()
}

/// Liveness and the state of each store
///
/// No authentication; 200 while the process serves, with the state of each store.
#[utoipa::path(get, path = "/v1/liveness", operation_id = "liveness", tag = "system", security(()),
    responses((status = 200, description = "OK", body = Health)))]
pub async fn liveness(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (_, body) = stores(&state).await?;
    Ok(HttpResponse::Ok().json(body))
}

/// Readiness: 200 when every store answers, else 503
///
/// No authentication; 200 when every store this instance needs answers, else 503 (a load
/// balancer then sends its traffic elsewhere), with the same body as liveness.
#[utoipa::path(get, path = "/v1/readiness", operation_id = "readiness", tag = "system", security(()),
    responses((status = 200, description = "Every store answers", body = Health),
        (status = 503, description = "A store does not answer", body = Health)))]
pub async fn readiness(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let (ready, body) = stores(&state).await?;
    let mut res = if ready { HttpResponse::Ok() } else { HttpResponse::ServiceUnavailable() };
    Ok(res.json(body))
}

/// Whether every store answers now, and `{status, services: {database, ratelimit}}`.
async fn stores(state: &web::Data<AppState>) -> Result<(bool, Health), ApiError> {
    let st = state.clone();
    let db = blocking(st.metrics.queued(), move || Ok(st.rbac.store().ping())).await?;
    if let Err(e) = &db {
        log::warn!("health: database: {e}");
    }
    let st = state.clone();
    let rl = blocking(st.metrics.queued(), move || Ok(st.limiter.ping())).await?;
    if let Err(e) = &rl {
        log::warn!("health: rate-limit store: {e}");
    }
    let status = |ok: bool| if ok { "ok" } else { "unavailable" };
    let ready = db.is_ok() && rl.is_ok();
    let body = Health {
        status: if ready { "ok" } else { "degraded" },
        services: Services {
            database: Store { kind: state.rbac.store().kind(), status: status(db.is_ok()) },
            ratelimit: Store { kind: state.limiter.kind(), status: status(rl.is_ok()) },
        },
    };
    Ok((ready, body))
}

/// Prometheus metrics in the text exposition format
///
/// Served as `KEYGATE_METRICS` says: to anyone (`on`), to a root key holding
/// `metrics.read` (`root-key`), or not (`off`: 404); docs/operations.md.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "system", security((), ("rootKey" = [])),
    responses((status = 200, description = "The metrics", content_type = "text/plain", body = String),
        (status = 401, description = "KEYGATE_METRICS=root-key and no valid root key", body = crate::error::ErrorBody),
        (status = 403, description = "KEYGATE_METRICS=root-key and the root key lacks metrics.read", body = crate::error::ErrorBody),
        (status = 404, description = "KEYGATE_METRICS=off, or /metrics served on its own address", body = crate::error::ErrorBody)))]
pub async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // On its own listener the access comes with that server; on the main one, the state's.
    let access = req.app_data::<MetricsAccess>().copied().unwrap_or(state.metrics_access);
    match access {
        MetricsAccess::NotHere => return not_found(req).await,
        MetricsAccess::RootKey => {
            let principal = crate::plumbing::authenticate(&req, &state).await?;
            if !principal.holds(PERM_READ_METRICS) {
                return Err(keygate_rbac::RbacError::missing(&[PERM_READ_METRICS]).into());
            }
        }
        MetricsAccess::Open => {}
    }
    let st = state.clone();
    let text = blocking(st.metrics.queued(), move || {
        let kept = crate::metrics::Kept {
            caches: st.rbac.cache_hit_counts(),
            db_pool: st.rbac.store().pool_state(),
            redis_batches: st.redis.as_ref().map(|r| {
                let b = r.batch_stats();
                [
                    b.script_calls,
                    b.decisions,
                    b.counter_reads,
                    b.confirmations,
                    b.pushed_changes,
                    b.pushed_stale,
                ]
            }),
            root_key_next_expiry: st.rbac.next_root_key_expiry().ok(),
            analytics_held: st
                .analytics
                .recorder()
                .zip(st.analytics.limit_recorder())
                .map(|(v, l)| (v.series(), l.entries())),
            verify_cache: st.rbac.verify_cache_keys(),
            legacy_checks: st.rbac.legacy_checks(),
        };
        Ok(st.metrics.render(&kept))
    })
    .await?;
    Ok(HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(text))
}

/// The root-key permission that reads `/metrics` when `KEYGATE_METRICS=root-key`.
pub const PERM_READ_METRICS: &str = "metrics.read";

/// Every error code and what to do about it (docs/errors.md), as Markdown
///
/// The page error bodies link to.
#[utoipa::path(get, path = "/docs/errors", operation_id = "docs.errors", tag = "system", security(()),
    responses((status = 200, description = "docs/errors.md", content_type = "text/markdown", body = String)))]
pub async fn error_docs() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/markdown; charset=utf-8")
        .body(include_str!("../../../../docs/errors.md"))
}

/// The v1 document: the v1 API and every other route except /v2
///
/// OpenAPI 3.1, generated from the code (`keygate openapi v1`; docs/openapi.json).
#[utoipa::path(get, path = "/openapi.json", operation_id = "openapi", tag = "system", security(()),
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub async fn openapi(state: web::Data<AppState>) -> HttpResponse {
    document(&state, Api::V1)
}

/// The v2 document: the v2 API
///
/// OpenAPI 3.1, generated from the code (`keygate openapi v2`; docs/openapi-v2.json).
#[utoipa::path(get, path = "/openapi-v2.json", operation_id = "openapi.v2", tag = "system", security(()),
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub async fn openapi_v2(state: web::Data<AppState>) -> HttpResponse {
    document(&state, Api::V2)
}

fn document(state: &AppState, api: Api) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(state.openapi.get(api).to_string())
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(liveness, readiness, metrics, error_docs, openapi, openapi_v2))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi_paths() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}

/// Any path not served: 404 (for a `/v2` path, v2's `not_supported`, API-v2.md §8).
pub async fn not_found(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    if crate::plumbing::is_v2(req.path()) {
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
