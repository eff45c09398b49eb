//! `POST /v2/keygate.getRatelimits` (API-v2.md §14.1): a namespace's rate-limit decisions
//! per time slice, or its heaviest identifiers, in the v2 envelope.

use super::{Envelope, ok};
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json};
use actix_web::HttpResponse;
use keygate_analytics::{LimitSlice, RatelimitsQuery, RatelimitsRow};
use keygate_domain::ValidationError;
use serde::{Deserialize, Serialize};
use serde_json::Number;
use utoipa::ToSchema;

/// The time slices of `groupBy`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RatelimitGroupBy {
    Minute,
    Hour,
    Day,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GetRatelimitsBody {
    /// The namespace's name or id, or `verify:<name>` for the limits named `name` of keys
    /// and identities.
    #[schema(min_length = 1, max_length = 512)]
    namespace: String,
    /// Unix ms (truncated to the start of its time slice); default: everything retained.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    start: Option<Number>,
    /// Unix ms; default now.
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    end: Option<Number>,
    /// The time slice of each row (default `hour`).
    #[schema(value_type = Option<RatelimitGroupBy>)]
    group_by: Option<String>,
    /// `true`: the heaviest identifiers of the range instead of time slices.
    identifiers: Option<bool>,
}

/// A time slice's or an identifier's decisions.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RatelimitsRowObject {
    /// The slice's start (Unix ms); time rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    time: Option<i64>,
    /// Identifier rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    identifier: Option<String>,
    passed: u64,
    denied: u64,
    total: u64,
}

impl From<RatelimitsRow> for RatelimitsRowObject {
    fn from(r: RatelimitsRow) -> Self {
        Self {
            time: r.time,
            identifier: r.identifier,
            passed: r.passed,
            denied: r.denied,
            total: r.passed + r.denied,
        }
    }
}

/// An optional integer of the body (`1.0` is 1, as JSON Schema says).
fn integer(name: &str, n: Option<Number>) -> Result<Option<i64>, ApiError> {
    Ok(n.map(|n| crate::plumbing::integer(name, &n, 0)).transpose()?.map(|v| v as i64))
}

/// Rate-limit decisions of a namespace, over time or by identifier
///
/// `[{time, passed, denied, total}]` per minute, hour (default) or day, empty slices
/// left out; with `identifiers: true`, `[{identifier, passed, denied, total}]`: the range's
/// 100 heaviest identifiers by total and any of its 100 heaviest by denials besides,
/// heaviest first. The root key needs `ratelimit.*.read_analytics` or
/// `ratelimit.<namespaceId>.read_analytics`.
#[utoipa::path(post, path = "/v2/keygate.getRatelimits", operation_id = "keygate.getRatelimits",
    tag = "analytics", request_body = GetRatelimitsBody,
    responses((status = 200, description = "OK", body = Envelope<Vec<RatelimitsRowObject>>), V2Errors))]
pub async fn get_ratelimits(call: Authed<Json<GetRatelimitsBody>>) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Json(b), state } = call;
    let slice = match b.group_by.as_deref() {
        None => LimitSlice::default(),
        Some(s) => LimitSlice::parse(s)
            .ok_or_else(|| ValidationError::new("groupBy", "must be one of minute, hour, day"))?,
    };
    let q = RatelimitsQuery {
        namespace: b.namespace,
        start: integer("start", b.start)?,
        end: integer("end", b.end)?,
        slice,
        identifiers: b.identifiers.unwrap_or(false),
    };
    let rows =
        Authed { principal, input: q, state }.run(|kg, p, q| kg.analytics.get_ratelimits(p, &q)).await?;
    Ok(ok(rows.into_iter().map(RatelimitsRowObject::from).collect::<Vec<_>>()))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_ratelimits), components(schemas(RatelimitGroupBy)))]
struct Doc;

/// This room's part of the v2 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
