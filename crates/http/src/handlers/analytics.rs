//! Verification analytics (API-v2.md §14): v1 `GET /v1/analytics.getVerifications` (Unkey
//! v1's query: repeated `keyId`, `tag` and `groupBy` parameters), and the row both it and
//! v2's `keygate.getVerifications` answer.

use crate::error::ApiError;
use crate::openapi::V1QueryErrors;
use crate::plumbing::{Authed, Query};
use actix_web::HttpResponse;
use keygate_analytics::{KeyOrOwner, OrderField, TimeSlice, VerificationsQuery, VerificationsRow};
use keygate_domain::{ValidationError, check_len};
use keygate_rbac::VerifyCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::Schema;

/// The query parameters (documentation: the handler reads the pairs, as `keyId`, `tag` and
/// `groupBy` may repeat).
#[derive(Debug, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct VerificationsParams {
    /// The API whose keys' verifications are counted.
    #[param(min_length = 1, max_length = 255)]
    apiId: String,
    /// Only the keys of the identity with this externalId.
    #[param(min_length = 1, max_length = 255)]
    externalId: Option<String>,
    /// Only these keys (repeat the parameter for several, or separate them by commas).
    #[param(schema_with = key_id_list)]
    keyId: Option<Vec<String>>,
    /// Only verifications carrying all these tags (repeat for several).
    #[param(schema_with = tag_list)]
    tag: Option<Vec<String>>,
    /// Unix ms; truncated to the start of its time slice (an hour unless grouped by day or
    /// month). Default: everything retained.
    #[param(minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    start: Option<i64>,
    /// Unix ms; default now.
    #[param(minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    end: Option<i64>,
    /// What rows are grouped by (repeat for several; not `tag` with `tags`).
    groupBy: Option<Vec<GroupBy>>,
    #[param(minimum = 1, maximum = 10_000)]
    limit: Option<u64>,
    /// `time`, `total` or an outcome's field.
    orderBy: Option<OrderBy>,
    /// `asc` (default) or `desc`.
    order: Option<Order>,
}

/// A `groupBy` value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum GroupBy {
    Key,
    Identity,
    Tags,
    Tag,
    Hour,
    Day,
    Month,
}

/// An `orderBy` value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) enum OrderBy {
    Time,
    Valid,
    NotFound,
    Forbidden,
    UsageExceeded,
    RateLimited,
    Unauthorized,
    Disabled,
    InsufficientPermissions,
    Expired,
    Total,
}

/// An `order` value.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum Order {
    Asc,
    Desc,
}

/// At most [`MAX_LISTED`] strings of 1 to `max` characters.
fn list_of(max: usize) -> utoipa::openapi::Array {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(max)))
        .max_items(Some(MAX_LISTED))
        .build()
}

pub(crate) fn key_id_list() -> utoipa::openapi::Array {
    list_of(MAX_KEY_ID_CHARS)
}

pub(crate) fn tag_list() -> utoipa::openapi::Array {
    list_of(MAX_TAG_CHARS)
}

/// One string of 1 to `max` characters, or a list of them (v2's body).
fn one_or_many(max: usize) -> Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String).min_length(Some(1)).max_length(Some(max)))
            .item(list_of(max))
            .build(),
    )
}

pub(crate) fn key_id_one_or_many() -> Schema {
    one_or_many(MAX_KEY_ID_CHARS)
}

pub(crate) fn tag_one_or_many() -> Schema {
    one_or_many(MAX_TAG_CHARS)
}

/// A `groupBy` value, or a list of them (v2's body).
pub(crate) fn group_by_one_or_many() -> Schema {
    use utoipa::PartialSchema;
    use utoipa::openapi::schema::{ArrayBuilder, OneOfBuilder};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(GroupBy::schema())
            .item(ArrayBuilder::new().items(GroupBy::schema()))
            .build(),
    )
}

/// One row: the counts of one group (and time slice, when grouped by time).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = VerificationsRow)]
pub(crate) struct RowObject {
    /// The slice's start (Unix ms), when grouped by time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    time: Option<i64>,
    valid: u64,
    not_found: u64,
    forbidden: u64,
    usage_exceeded: u64,
    rate_limited: u64,
    /// Always 0 (keygate answers no such code).
    unauthorized: u64,
    disabled: u64,
    insufficient_permissions: u64,
    expired: u64,
    total: u64,
    /// The credits charged in the group (API-v2.md §22).
    spent_credits: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    key_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, inline)]
    identity: Option<IdentityRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    tags: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    tag: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IdentityRef {
    id: String,
    external_id: String,
}

impl From<VerificationsRow> for RowObject {
    fn from(r: VerificationsRow) -> Self {
        Self {
            time: r.time,
            valid: r.count(VerifyCode::Valid),
            not_found: r.count(VerifyCode::NotFound),
            forbidden: r.count(VerifyCode::Forbidden),
            usage_exceeded: r.count(VerifyCode::UsageExceeded),
            rate_limited: r.count(VerifyCode::RateLimited),
            unauthorized: 0,
            disabled: r.count(VerifyCode::Disabled),
            insufficient_permissions: r.count(VerifyCode::InsufficientPermissions),
            expired: r.count(VerifyCode::Expired),
            total: r.total(),
            spent_credits: r.spent_credits,
            key_id: r.key_id,
            identity: r.identity.map(|(id, external_id)| IdentityRef { id, external_id }),
            tags: r.tags,
            tag: r.tag,
        }
    }
}

/// The fields of a query, each as one or several strings (v1: repeated parameters; v2:
/// a string or an array): read and checked into the service's query.
#[derive(Debug, Default)]
pub(crate) struct QueryFields {
    pub api_id: Option<String>,
    pub external_id: Option<String>,
    pub key_ids: Vec<String>,
    pub tags: Vec<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub group_by: Vec<String>,
    pub limit: Option<u64>,
    pub order_by: Option<String>,
    pub order: Option<String>,
}

/// The most keys or tags one query names, and their lengths.
const MAX_LISTED: usize = 100;
const MAX_KEY_ID_CHARS: usize = 255;
const MAX_TAG_CHARS: usize = 512;

impl QueryFields {
    pub(crate) fn into_query(self) -> Result<VerificationsQuery, ApiError> {
        let api_id = self.api_id.ok_or_else(|| ValidationError::new("apiId", "is required"))?;
        check_len("apiId", &api_id, 255)?;
        if let Some(e) = &self.external_id {
            check_len("externalId", e, 255)?;
        }
        for (field, list) in [("keyId", &self.key_ids), ("tag", &self.tags)] {
            if list.len() > MAX_LISTED {
                return Err(ValidationError::new(field, format!("at most {MAX_LISTED}")).into());
            }
            for v in list {
                check_len(field, v, if field == "tag" { MAX_TAG_CHARS } else { MAX_KEY_ID_CHARS })?;
            }
        }
        for (field, v) in [("start", self.start), ("end", self.end)] {
            if let Some(v) = v
                && !(0..=9_007_199_254_740_991).contains(&v)
            {
                return Err(ValidationError::new(field, "must be a Unix time in ms (0 to 2^53-1)").into());
            }
        }
        if let (Some(s), Some(e)) = (self.start, self.end)
            && s >= e
        {
            return Err(ValidationError::new("start", "must be before end").into());
        }
        let mut q = VerificationsQuery {
            api_id,
            external_id: self.external_id,
            key_ids: self.key_ids,
            tags: self.tags,
            start: self.start,
            end: self.end,
            ..VerificationsQuery::default()
        };
        for g in &self.group_by {
            match g.as_str() {
                "key" => q.by_key = true,
                "identity" => q.by_identity = true,
                "tags" => q.by_tags = true,
                "tag" => q.by_tag = true,
                "hour" | "day" | "month" => {
                    let slice = match g.as_str() {
                        "hour" => TimeSlice::Hour,
                        "day" => TimeSlice::Day,
                        _ => TimeSlice::Month,
                    };
                    // The coarsest named wins (as Unkey: month, then day, then hour).
                    q.time = Some(match (q.time, slice) {
                        (Some(TimeSlice::Month), _) | (_, TimeSlice::Month) => TimeSlice::Month,
                        (Some(TimeSlice::Day), _) | (_, TimeSlice::Day) => TimeSlice::Day,
                        _ => TimeSlice::Hour,
                    });
                }
                _ => {
                    return Err(ValidationError::new(
                        "groupBy",
                        "must be key, identity, tags, tag, hour, day or month",
                    )
                    .into());
                }
            }
        }
        if q.by_tag && q.by_tags {
            return Err(ValidationError::new("groupBy", "cannot group by tag and tags at once").into());
        }
        if let Some(l) = self.limit {
            if !(1..=10_000).contains(&l) {
                return Err(ValidationError::new("limit", "must be 1 to 10000").into());
            }
            q.limit = Some(l as usize);
        }
        let desc = match self.order.as_deref() {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(_) => return Err(ValidationError::new("order", "must be asc or desc").into()),
        };
        if let Some(o) = &self.order_by {
            let field = OrderField::parse(o).ok_or_else(|| {
                ValidationError::new(
                    "orderBy",
                    "must be time, total or an outcome's field (valid, notFound, ...)",
                )
            })?;
            q.order_by = Some((field, desc));
        }
        Ok(q)
    }
}

/// Reads v1's query pairs: single parameters once, `keyId`, `tag` and `groupBy` any number
/// of times; any other name is refused.
fn fields(pairs: Vec<(String, String)>) -> Result<QueryFields, ApiError> {
    let mut f = QueryFields::default();
    let once = |slot: &mut Option<String>, name: &str, v: String| match slot {
        Some(_) => Err(ApiError::bad_request(format!("{name}: given more than once in the query"))),
        None => {
            *slot = Some(v);
            Ok(())
        }
    };
    let (mut start, mut end, mut limit) = (None, None, None);
    for (name, v) in pairs {
        match name.as_str() {
            "apiId" => once(&mut f.api_id, "apiId", v)?,
            "externalId" => once(&mut f.external_id, "externalId", v)?,
            "orderBy" => once(&mut f.order_by, "orderBy", v)?,
            "order" => once(&mut f.order, "order", v)?,
            "start" => once(&mut start, "start", v)?,
            "end" => once(&mut end, "end", v)?,
            "limit" => once(&mut limit, "limit", v)?,
            // Repeated, or (as Unkey's v1 SDK sends a list) separated by commas; a tag may
            // hold a comma, so tags repeat only.
            "keyId" => f.key_ids.extend(v.split(',').filter(|k| !k.is_empty()).map(str::to_owned)),
            "tag" => f.tags.push(v),
            "groupBy" => f.group_by.extend(v.split(',').filter(|g| !g.is_empty()).map(str::to_owned)),
            other => {
                return Err(ApiError::bad_request(format!(
                    "{}: not a parameter of this endpoint",
                    other.escape_default()
                )));
            }
        }
    }
    let int = |name: &str, v: Option<String>| -> Result<Option<i64>, ApiError> {
        v.map(|s| {
            s.parse::<i64>().map_err(|_| ApiError::from(ValidationError::new(name, "must be an integer")))
        })
        .transpose()
    };
    f.start = int("start", start)?;
    f.end = int("end", end)?;
    f.limit = int("limit", limit)?.map(|l| l.max(0) as u64);
    Ok(f)
}

/// Verification counts of an API's keys, grouped
///
/// Counts per outcome, grouped by time slice (`hour`, `day`, `month`), `key`, `identity`,
/// `tags` or `tag`; rows in ascending time, empty slices omitted. Counts reach this within
/// a few seconds of the verification's minute. The root key needs `api.*.read_analytics`
/// or `api.<apiId>.read_analytics`.
#[utoipa::path(get, path = "/v1/analytics.getVerifications", operation_id = "analytics.getVerifications",
    tag = "analytics", params(VerificationsParams),
    responses((status = 200, description = "OK", body = Vec<RowObject>), V1QueryErrors))]
pub async fn get_verifications(call: Authed<Query<Vec<(String, String)>>>) -> Result<HttpResponse, ApiError> {
    let Authed { principal, input: Query(pairs), state } = call;
    let q = fields(pairs)?.into_query()?;
    let rows =
        Authed { principal, input: q, state }.run(|kg, p, q| kg.analytics.get_verifications(p, &q)).await?;
    Ok(HttpResponse::Ok().json(rows.into_iter().map(RowObject::from).collect::<Vec<_>>()))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyVerificationsQuery {
    /// The key (this or `ownerId`).
    #[param(min_length = 1, max_length = 255)]
    key_id: Option<String>,
    /// The keys of the identity with this externalId (this or `keyId`).
    #[param(min_length = 1, max_length = 255)]
    owner_id: Option<String>,
    /// Unix ms (truncated to its day); default: everything retained.
    #[param(minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    start: Option<i64>,
    /// Unix ms; default now.
    #[param(minimum = 0, maximum = 9_007_199_254_740_991_i64)]
    end: Option<i64>,
    /// `day` (the only one).
    #[param(pattern = "^day$")]
    granularity: Option<String>,
}

/// A day's verifications of the key(s).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DayObject {
    /// The day's start (Unix ms).
    time: i64,
    success: u64,
    rate_limited: u64,
    usage_exceeded: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct KeyVerifications {
    verifications: Vec<DayObject>,
}

/// A key's verifications per day
///
/// Unkey v1's form: `keyId`, or `ownerId` (the keys of the identity with that externalId);
/// days ascending, empty ones omitted. The root key needs `api.*.read_analytics` or
/// `api.<apiId>.read_analytics` for the key's API.
#[utoipa::path(get, path = "/v1/keys.getVerifications", operation_id = "keys.getVerifications", tag = "keys",
    params(KeyVerificationsQuery),
    responses((status = 200, description = "OK", body = KeyVerifications), V1QueryErrors))]
pub async fn key_verifications(call: Authed<Query<KeyVerificationsQuery>>) -> Result<HttpResponse, ApiError> {
    let q = &call.input.0;
    if q.key_id.is_some() == q.owner_id.is_some() {
        return Err(ValidationError::new("keyId", "give keyId or ownerId (one of them)").into());
    }
    if q.granularity.as_deref().is_some_and(|g| g != "day") {
        return Err(ValidationError::new("granularity", "must be day").into());
    }
    for (field, v) in [("start", q.start), ("end", q.end)] {
        if v.is_some_and(|v| !(0..=9_007_199_254_740_991).contains(&v)) {
            return Err(ValidationError::new(field, "must be a Unix time in ms (0 to 2^53-1)").into());
        }
    }
    if let (Some(s), Some(e)) = (q.start, q.end)
        && s >= e
    {
        return Err(ValidationError::new("start", "must be before end").into());
    }
    let days = call
        .run(|kg, p, Query(q)| {
            let who = match (&q.key_id, &q.owner_id) {
                (Some(k), _) => KeyOrOwner::Key(k),
                (None, o) => KeyOrOwner::Owner(o.as_deref().unwrap_or_default()),
            };
            kg.analytics.key_verifications(p, who, q.start, q.end)
        })
        .await?;
    let verifications = days
        .into_iter()
        .map(|d| DayObject {
            time: d.time,
            success: d.success,
            rate_limited: d.rate_limited,
            usage_exceeded: d.usage_exceeded,
        })
        .collect();
    Ok(HttpResponse::Ok().json(KeyVerifications { verifications }))
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(get_verifications, key_verifications), components(schemas(GroupBy, OrderBy, Order)))]
struct Doc;

/// This room's part of the v1 document.
pub(crate) fn openapi() -> serde_json::Value {
    crate::openapi::room::<Doc>()
}
