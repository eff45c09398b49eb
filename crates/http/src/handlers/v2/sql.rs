//! `POST /v2/analytics.getVerifications` and `POST /v2/analytics.getRatelimits` (API-v2.md
//! §18): one read-only `SELECT` in ClickHouse's dialect over Unkey's public tables,
//! answered from keygate's counts (`keygate_analytics::sql`).

use super::ok;
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_analytics::sql::{Family, MAX_QUERY_CHARS};
use serde::Deserialize;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueryBody {
    /// One `SELECT` (with `WITH`, subqueries, `UNION [ALL]`, `EXCEPT`) over the method's
    /// tables; see docs/analytics-sql.md.
    #[schema(
        min_length = 1,
        max_length = 10_000,
        example = "SELECT toStartOfDay(time) AS day, outcome, sum(count) AS total FROM key_verifications_per_day_v1 WHERE time >= now() - INTERVAL 7 DAY GROUP BY day, outcome ORDER BY day"
    )]
    query: String,
}

/// The answer: one object per row, the query's columns in its order (times are Unix ms).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct Rows {
    #[schema(value_type = Vec<Object>)]
    data: (),
}

async fn answer(call: Authed<Json<QueryBody>>, family: Family) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Json(b), state } = call;
    if b.query.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::bad_request(format!("query: must be at most {MAX_QUERY_CHARS} characters"))
            .at_field("query"));
    }
    let rows = Authed { principal, input: b.query, state }
        .run(move |kg, p, q| kg.analytics.query_sql(p, family, &q))
        .await?;
    Ok(ok(rows))
}

/// Query key verifications in SQL
///
/// One `SELECT` over `key_verifications_per_minute_v1`, `…_per_hour_v1`, `…_per_day_v1` and
/// `…_per_month_v1` (columns `time`, `workspace_id`, `key_space_id`, `identity_id`,
/// `external_id`, `key_id`, `outcome`, `tags`, `count`; `apiId` and `externalId` filter),
/// reading only the caller's workspace and the APIs its root key may read
/// (`api.*.read_analytics` or `api.<apiId>.read_analytics`). At most 10,000 rows; a query
/// running past 5 s answers 400 `keygate/analytics/query_too_expensive`.
#[utoipa::path(post, path = "/v2/analytics.getVerifications", operation_id = "analytics.getVerifications",
    tag = "analytics", request_body = QueryBody,
    responses((status = 200, description = "OK", body = Rows), V2Errors))]
pub async fn get_verifications(call: Authed<Json<QueryBody>>) -> Result<HttpResponse, ApiError> {
    answer(call, Family::Verifications).await
}

/// Query rate-limit decisions in SQL
///
/// One `SELECT` over `ratelimits_per_minute_v1`, `…_per_hour_v1`, `…_per_day_v1` and
/// `…_per_month_v1` (columns `time`, `workspace_id`, `namespace_id`, `namespace_name`,
/// `passed`, `total`), reading only the caller's workspace and the namespaces its root key
/// may read (`ratelimit.*.read_analytics` or `ratelimit.<namespaceId>.read_analytics`).
#[utoipa::path(post, path = "/v2/analytics.getRatelimits", operation_id = "analytics.getRatelimits",
    tag = "analytics", request_body = QueryBody,
    responses((status = 200, description = "OK", body = Rows), V2Errors))]
pub async fn get_ratelimits(call: Authed<Json<QueryBody>>) -> Result<HttpResponse, ApiError> {
    answer(call, Family::Ratelimits).await
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_verifications, get_ratelimits))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
