//! v2 `ratelimit.limit` and `ratelimit.multiLimit`: the same budgets as v1's
//! `ratelimits.limit` (one decision path, `handlers::ratelimit::decide`), and several
//! budgets decided all-or-nothing.

use super::Envelope;
use super::ok;
use crate::error::ApiError;
use crate::handlers::ratelimit::{
    STALE_OVERRIDES_RETRIES, ValidLimit, cached_overrides, decide, load_overrides, rate_limit_fields,
    with_override,
};
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, JsonBytes, blocking, integer, parse_json, parse_json_as};
use keygate_domain::{MAX_IDENTIFIER_CHARS, ValidationError, check_len, validate_namespace_name};
use keygate_ratelimit::{AllOrNothing, BudgetKey, Decision, LimitRequest};
use keygate_rbac::Effective;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use std::borrow::Cow;
use std::sync::Arc;
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
        let limit = integer(&path("limit"), &self.limit, 1)?;
        let duration = integer(&path("duration"), &self.duration, 1_000)?;
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

    let names: Vec<String> = entries.iter().map(|e| e.namespace.to_string()).collect();
    let (st, p) = (state.clone(), principal.clone());
    let namespace_ids = blocking(st.metrics.queued(), move || {
        st.rbac.ensure_root_key_current(&p)?;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        Ok(st.rbac.resolve_namespaces(&p, &names)?)
    })
    .await?;

    let mut overrides: Vec<(Option<Effective>, u64)> = Vec::with_capacity(entries.len());
    for (e, ns) in entries.iter().zip(&namespace_ids) {
        overrides.push(cached_overrides(&state, ns, &e.identifier).await?);
    }
    let mut stale = 0;
    let outcome: AllOrNothing = loop {
        let requests: Vec<LimitRequest> =
            entries.iter().zip(&overrides).map(|(e, o)| with_override(e.request, o.0.as_ref())).collect();
        // Overrides changing faster than they can be read: decide with the latest read.
        let epochs: Vec<(String, u64)> = match stale < STALE_OVERRIDES_RETRIES {
            true => namespace_ids.iter().zip(&overrides).map(|(ns, o)| (ns.to_string(), o.1)).collect(),
            false => Vec::new(),
        };
        let keys: Vec<(Arc<String>, String, LimitRequest)> = namespace_ids
            .iter()
            .zip(&entries)
            .zip(&requests)
            .map(|((ns, e), r)| (ns.clone(), e.identifier.to_string(), *r))
            .collect();
        let st = state.clone();
        let decided = blocking(st.metrics.queued(), move || {
            let now = st.clock.now_ms();
            let all: Vec<(BudgetKey<'_>, LimitRequest)> = keys
                .iter()
                .map(|(ns, id, r)| (BudgetKey { namespace_id: ns, identifier: id, duration: r.duration }, *r))
                .collect();
            let epochs: Vec<(&str, u64)> = epochs.iter().map(|(ns, e)| (ns.as_str(), *e)).collect();
            Ok(st.limiter.limit_all(&all, &epochs, now)?)
        })
        .await?;
        match decided {
            Some(outcome) => break outcome,
            None => {
                stale += 1;
                for (i, (e, ns)) in entries.iter().zip(&namespace_ids).enumerate() {
                    let (st, ns, id) = (state.clone(), ns.clone(), e.identifier.to_string());
                    overrides[i] =
                        blocking(state.metrics.queued(), move || load_overrides(&st, &ns, &id)).await?;
                }
            }
        }
    };
    let at = state.clock.now_ms();
    for ((d, e), ns) in outcome.decisions.iter().zip(&entries).zip(&namespace_ids) {
        let passed = d.success && outcome.passed;
        state.metrics.decision(&principal.workspace_id, ns, &e.namespace, passed);
        state.analytics.record_limit(&principal.workspace_id, ns, &e.identifier, passed, at);
    }
    let limits = entries
        .iter()
        .zip(outcome.decisions)
        .zip(overrides)
        .map(|((e, d), (applied, _)): ((&ValidLimit<'_>, Decision), _)| EntryAnswer {
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
