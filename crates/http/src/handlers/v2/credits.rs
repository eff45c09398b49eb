//! v2 credits (API-v2.md §12.1, §12.4): the `credits` of createKey and the Key object, and
//! `keys.updateCredits` on a key's counter.

use super::{Envelope, ok};
use crate::error::ApiError;
use crate::openapi::V2Errors;
use crate::plumbing::{Authed, Json, Obj, integer};
use actix_web::HttpResponse;
use keygate_domain::{MAX_SAFE_INTEGER, Patch, ValidationError};
use keygate_rbac::{Credits, Refill, RefillInterval, RefillSpec, credit_setting};
use keygate_usage::CreditOp;
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// A refill as a request gives it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RefillRequest {
    /// `daily` (00:00 UTC) or `monthly` (on `refillDay`).
    #[schema(schema_with = intervals)]
    interval: String,
    /// What `remaining` becomes at each refill.
    #[schema(value_type = u64, minimum = 1, maximum = 9_007_199_254_740_991_u64, example = 1000)]
    amount: Number,
    /// Monthly only: the day of the month (default 1; a shorter month refills on its last day).
    #[schema(value_type = Option<u64>, minimum = 1, maximum = 31)]
    refill_day: Option<Number>,
}

fn intervals() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some([RefillInterval::Daily.as_str(), RefillInterval::Monthly.as_str()]))
        .build()
}

/// Reads a refill (`path`: the field).
pub(crate) fn refill_spec(path: &str, r: RefillRequest) -> Result<RefillSpec, ApiError> {
    let interval = RefillInterval::parse(&r.interval)
        .ok_or_else(|| ValidationError::new(format!("{path}.interval"), "must be daily or monthly"))?;
    let amount = integer(&format!("{path}.amount"), &r.amount, 1)?;
    let day = r.refill_day.as_ref().map(|d| integer(&format!("{path}.refillDay"), d, 1)).transpose()?;
    Ok(RefillSpec { interval, amount, day })
}

/// `credits` of createKey: `remaining` (null or absent: unlimited, which takes no refill).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreditsRequest {
    /// Uses left; null: unlimited.
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64, example = 100)]
    remaining: Option<Number>,
    #[schema(inline, value_type = Option<RefillRequest>)]
    refill: Option<Obj<RefillRequest>>,
}

/// The credit setting of a createKey (`credits`; `None` when absent or unlimited).
pub(crate) fn new_credits(path: &str, c: Option<Obj<CreditsRequest>>) -> Result<Option<Credits>, ApiError> {
    let Some(Obj(c)) = c else { return Ok(None) };
    let remaining = c.remaining.as_ref().map(|n| integer(&format!("{path}.remaining"), n, 0)).transpose()?;
    let refill = c.refill.map(|Obj(r)| refill_spec(&format!("{path}.refill"), r)).transpose()?;
    Ok(credit_setting(path, remaining, refill)?)
}

/// A key's credits as answers show them.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = KeyCredits)]
pub(crate) struct CreditsObject {
    /// Uses left; null: unlimited.
    remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(inline, nullable = false)]
    refill: Option<RefillObject>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RefillObject {
    #[schema(schema_with = intervals)]
    interval: &'static str,
    amount: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    refill_day: Option<u8>,
    /// When the last refill happened (Unix ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    last_refill_at: Option<i64>,
}

impl From<Refill> for RefillObject {
    fn from(r: Refill) -> Self {
        Self {
            interval: r.interval.as_str(),
            amount: r.amount,
            refill_day: r.day,
            last_refill_at: r.last_refill_at,
        }
    }
}

impl CreditsObject {
    /// A key's credits; `None` (unlimited) shows as `remaining: null`.
    pub(crate) fn of(c: Option<Credits>) -> Self {
        match c {
            Some(c) => Self { remaining: Some(c.remaining), refill: c.refill.map(RefillObject::from) },
            None => Self { remaining: None, refill: None },
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateCreditsBody {
    #[schema(min_length = 3, max_length = 255)]
    key_id: String,
    /// `set`, `increment` or `decrement` (floors at 0).
    #[schema(schema_with = operations)]
    operation: String,
    /// The amount; `set` null: unlimited (the refill is cleared). `increment` and
    /// `decrement` need one, and a key with credits.
    #[serde(default)]
    #[schema(value_type = Option<u64>, minimum = 0, maximum = 9_007_199_254_740_991_u64)]
    value: Patch<Number>,
}

fn operations() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .enum_values(Some(["set", "increment", "decrement"]))
        .build()
}

/// Change a key's credits
///
/// On the key's counter, in one statement: concurrent changes never lose one. Answers the
/// credits after.
#[utoipa::path(post, path = "/v2/keys.updateCredits", operation_id = "keys.updateCredits", tag = "keys",
    request_body = UpdateCreditsBody,
    responses((status = 200, description = "OK", body = Envelope<CreditsObject>), V2Errors))]
pub async fn update_credits(call: Authed<Json<UpdateCreditsBody>>) -> Result<HttpResponse, ApiError> {
    let b = &call.input.0;
    super::check_key_id(&b.key_id)?;
    let op = match b.operation.as_str() {
        "set" => CreditOp::Set,
        "increment" => CreditOp::Increment,
        "decrement" => CreditOp::Decrement,
        _ => return Err(ValidationError::new("operation", "must be set, increment or decrement").into()),
    };
    let value = match &b.value {
        Patch::Set(n) => Some(integer("value", n, 0)?),
        Patch::Absent | Patch::Clear => None,
    };
    if value.is_some_and(|v| v > MAX_SAFE_INTEGER) {
        return Err(ValidationError::new("value", format!("must be <= {MAX_SAFE_INTEGER}")).into());
    }
    if op == CreditOp::Set && !b.value.is_given() {
        return Err(ValidationError::new("value", "is required (null: unlimited)").into());
    }
    let after = call.run(move |kg, p, Json(b)| kg.usage.update_credits(p, &b.key_id, op, value)).await?;
    Ok(ok(CreditsObject::of(after)))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(update_credits))]
struct Doc;

/// This room's part of the v2 document: `increment` and `decrement` need a value, `set`
/// takes one or null.
pub(crate) fn openapi() -> Value {
    let mut doc = crate::openapi::room::<Doc>();
    let body = crate::openapi::schema_mut(&mut doc, "UpdateCreditsBody");
    body["required"] = serde_json::json!(["keyId", "operation", "value"]);
    body["anyOf"] = serde_json::json!([
        { "properties": { "operation": { "const": "set" } } },
        { "properties": { "value": { "type": "integer" } } },
    ]);
    doc
}

/// The schema of `credits` (createKey): a refill needs a number of credits, and
/// `refillDay` is for monthly refills (null or absent when daily).
pub(crate) fn credits_rules(credits: &mut Value) {
    let credits = crate::openapi::object_of(credits);
    credits["anyOf"] = serde_json::json!([
        { "required": ["remaining"], "properties": { "remaining": { "type": "integer" } } },
        { "properties": { "refill": { "type": "null" } } },
    ]);
    refill_rule(crate::openapi::object_of(&mut credits["properties"]["refill"]));
}

/// The schema of a refill: `refillDay` is for monthly refills (null or absent when daily).
pub(crate) fn refill_rule(refill: &mut Value) {
    refill["anyOf"] = serde_json::json!([
        { "properties": { "interval": { "const": "monthly" } } },
        { "properties": { "refillDay": { "type": "null" } } },
    ]);
}
