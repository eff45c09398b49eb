//! v2 `ratelimit.limit` and `ratelimit.multiLimit`: the same budgets as v1's
//! `ratelimits.limit` (one decision path, `Runtime::limit`), and several budgets decided
//! all-or-nothing (`Runtime::limit_all`).

use super::Envelope;
use super::ok;
use crate::error::ApiError;
use crate::handlers::ratelimit::{ValidLimit, decide, rate_limit_fields};
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, JsonBytes, integer, parse_json, parse_json_as};
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_ratelimit::{LimitRequest, MIN_DURATION_MS, MIN_LIMIT};
use keygate_runtime::Limited;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use std::borrow::Cow;
use utoipa::ToSchema;

/// The longest window v2 takes: 30 days.
const MAX_DURATION_MS: u64 = 2_592_000_000;
/// The most entries of one `multiLimit` call.
const MAX_ENTRIES: usize = 100;

/// A v2 limit request; v1's `async`, `meta` and `resources` are unknown fields here.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = LimitRequest)]
pub(crate) struct LimitBody<'a> {
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 512, example = "api.requests")]
    namespace: Cow<'a, str>,
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 512, example = "user_123")]
    identifier: Cow<'a, str>,
    #[schema(value_type = u64, minimum = 1, maximum = 9_007_199_254_740_991_u64, example = 100)]
    limit: Number,
    /// The window in ms (at most 30 days).
    #[schema(value_type = u64, minimum = 1000, maximum = 2_592_000_000_u64, example = 60000)]
    duration: Number,
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    cost: Option<Number>,
}

impl<'a> LimitBody<'a> {
    /// The checks of API-v2.md §5.1; `at` prefixes the paths (`3.` in a multiLimit).
    pub(crate) fn validate(self, at: &str) -> Result<ValidLimit<'a>, ValidationError> {
        let path = |field: &str| format!("{at}{field}");
        validate_namespace_name(&path("namespace"), &self.namespace)?;
        check_len(&path("identifier"), &self.identifier, MAX_IDENTIFIER_CHARS)?;
        let limit = integer(&path("limit"), &self.limit, MIN_LIMIT)?;
        let duration = integer(&path("duration"), &self.duration, MIN_DURATION_MS)?;
        if duration > MAX_DURATION_MS {
            return Err(ValidationError::new(path("duration"), format!("must be <= {MAX_DURATION_MS}")));
        }
        let cost = match &self.cost {
            Some(c) => integer(&path("cost"), c, 0)?,
            None => 1,
        };
        Ok(ValidLimit {
            identifier: self.identifier,
            namespace: self.namespace,
            request: LimitRequest { limit, duration, cost },
            is_async: false,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = LimitResult)]
struct LimitAnswer {
    success: bool,
    limit: u64,
    remaining: u64,
    /// Unix ms when the window ends.
    reset: u64,
    /// The override that applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    override_id: Option<String>,
}

/// Check and consume a budget
///
/// `{success, limit, remaining, reset, overrideId?}`; a denial is a 200.
#[utoipa::path(post, path = "/v2/ratelimit.limit", operation_id = "ratelimit.limit", tag = "ratelimit",
    request_body = LimitBody, responses((status = 200, description = "OK", body = Envelope<LimitAnswer>), V2Errors))]
pub async fn limit(call: Authed<JsonBytes>) -> Result<actix_web::HttpResponse, ApiError> {
    let Authed { principal, input: JsonBytes(bytes), state } = call;
    let v = parse_json::<LimitBody<'_>>(&bytes)?.validate("")?;
    let (d, applied) = decide(&state, &principal, &v).await?;
    let duration = applied.as_ref().map_or(v.request.duration, |o| o.duration);
    let override_id = applied.map(|o| o.id.to_string());
    let mut res = ok(LimitAnswer {
        success: d.success,
        limit: d.limit,
        remaining: d.remaining,
        reset: d.reset,
        override_id,
    });
    if state.ratelimit_headers {
        for (name, value) in rate_limit_fields(&v.namespace, duration, &d, state.clock.now_ms()) {
            let value = actix_web::http::header::HeaderValue::from_str(&value).map_err(ApiError::internal)?;
            res.headers_mut().insert(actix_web::http::header::HeaderName::from_static(name), value);
        }
    }
    Ok(res)
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EntryAnswer<'a> {
    namespace: &'a str,
    identifier: &'a str,
    limit: u64,
    remaining: u64,
    reset: u64,
    passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    override_id: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = MultiLimitResult)]
struct MultiAnswer<'a> {
    /// Whether every entry fit (and so was consumed).
    passed: bool,
    #[schema(inline)]
    limits: Vec<EntryAnswer<'a>>,
}

/// Several budgets, all or nothing
///
/// An array of limit requests decided all-or-nothing (API-v2.md §5.2): every entry
/// consumed if all fit, else none. New namespaces are created (given `create_namespace`)
/// even when the limits fail; a 4xx creates none.
#[utoipa::path(post, path = "/v2/ratelimit.multiLimit", operation_id = "ratelimit.multiLimit", tag = "ratelimit",
    request_body(content = Vec<LimitBody>),
    responses((status = 200, description = "OK", body = Envelope<MultiAnswer>), V2Errors))]
pub async fn multi_limit(call: Authed<JsonBytes>) -> Result<actix_web::HttpResponse, ApiError> {
    let Authed { principal, input: JsonBytes(bytes), state } = call;
    let bodies = parse_json_as::<Vec<LimitBody<'_>>>(&bytes, b'[')?;
    if bodies.is_empty() || bodies.len() > MAX_ENTRIES {
        return Err(ValidationError::new("body", format!("must hold 1 to {MAX_ENTRIES} entries")).into());
    }
    let entries: Vec<ValidLimit<'_>> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, b)| b.validate(&format!("{i}.")))
        .collect::<Result<_, _>>()?;

    let asks: Vec<_> = entries.iter().map(ValidLimit::ask).collect();
    let outcome = state.runtime.limit_all(state.get_ref(), &principal, &asks).await?;
    for (limited, e) in outcome.entries.iter().zip(&entries) {
        let passed = limited.decision.success && outcome.passed;
        state.metrics.decision(&principal.workspace_id, &limited.namespace_id, &e.namespace, passed);
    }
    let limits = entries
        .iter()
        .zip(outcome.entries)
        .map(|(e, Limited { decision: d, applied, .. })| EntryAnswer {
            namespace: &e.namespace,
            identifier: &e.identifier,
            limit: d.limit,
            remaining: d.remaining,
            reset: d.reset,
            passed: d.success,
            override_id: applied.map(|o| o.id.to_string()),
        })
        .collect();
    Ok(ok(MultiAnswer { passed: outcome.passed, limits }))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(limit, multi_limit))]
struct Doc;

/// This room's part of the v2 document: a multiLimit holds 1 to 100 entries.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    crate::openapi::refine_body(&mut doc, "/v2/ratelimit.multiLimit", "post", |body| {
        body["minItems"] = 1.into();
        body["maxItems"] = MAX_ENTRIES.into();
    });
    doc
}
