//! `POST /v2/keygate.getVerifications` (API-v2.md §14): v1's analytics query as a JSON body,
//! the same rows in the v2 envelope.

use super::{Envelope, ok};
use crate::error::ApiError;
use crate::handlers::analytics::{QueryFields, RowObject};
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use serde::Deserialize;
use serde_json::Number;
use utoipa::ToSchema;

/// One string, or several.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn list(v: Option<Self>) -> Vec<String> {
        match v {
            None => Vec::new(),
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(v)) => v,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GetVerificationsBody {
    #[schema(min_length = 1, max_length = 255)]
    api_id: String,
    #[schema(min_length = 1, max_length = 255)]
    external_id: Option<String>,
    /// Only these keys.
    #[schema(schema_with = crate::handlers::analytics::key_id_one_or_many)]
    key_id: Option<OneOrMany>,
    /// Only verifications carrying all these tags.
    #[schema(schema_with = crate::handlers::analytics::tag_one_or_many)]
    tag: Option<OneOrMany>,
    /// Unix ms (truncated to the start of its time slice).
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    start: Option<Number>,
    /// Unix ms; default now.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    end: Option<Number>,
    /// What rows are grouped by (not `tag` with `tags`).
    #[schema(schema_with = crate::handlers::analytics::group_by_one_or_many)]
    group_by: Option<OneOrMany>,
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 10_000)]
    limit: Option<Number>,
    #[schema(value_type = Option<crate::handlers::analytics::OrderBy>)]
    order_by: Option<String>,
    #[schema(value_type = Option<crate::handlers::analytics::Order>)]
    order: Option<String>,
}

/// An optional integer of the body (`1.0` is 1, as JSON Schema says).
fn integer(name: &str, n: Option<Number>) -> Result<Option<i64>, ApiError> {
    Ok(n.map(|n| crate::plumbing::integer(name, &n, 0)).transpose()?.map(|v| v as i64))
}

/// Verification counts of an API's keys, grouped
///
/// keygate's v2 form of v1's `analytics.getVerifications`. The root key needs
/// `api.*.read_analytics` or `api.<apiId>.read_analytics`.
#[utoipa::path(post, path = "/v2/keygate.getVerifications", operation_id = "keygate.getVerifications",
    tag = "analytics", request_body = GetVerificationsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<RowObject>>), V2Errors))]
pub async fn get_verifications(call: Authed<Json<GetVerificationsBody>>) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Json(b), state } = call;
    let fields = QueryFields {
        api_id: Some(b.api_id),
        external_id: b.external_id,
        key_ids: OneOrMany::list(b.key_id),
        tags: OneOrMany::list(b.tag),
        start: integer("start", b.start)?,
        end: integer("end", b.end)?,
        group_by: OneOrMany::list(b.group_by),
        limit: integer("limit", b.limit)?.map(|l| l.max(0) as u64),
        order_by: b.order_by,
        order: b.order,
    };
    let q = fields.into_query()?;
    let rows =
        Authed { principal, input: q, state }.run(|kg, p, q| kg.analytics.get_verifications(p, &q)).await?;
    Ok(ok(rows.into_iter().map(RowObject::from).collect::<Vec<_>>()))
}

#[derive(utoipa::OpenApi)]
#[openapi(
    paths(get_verifications),
    components(schemas(
        crate::handlers::analytics::GroupBy,
        crate::handlers::analytics::OrderBy,
        crate::handlers::analytics::Order
    ))
)]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
