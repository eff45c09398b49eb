//! The v2 API (API-v2.md): a second set of thin handlers over the same services,
//! extractors and error mapping as v1, one file per resource. What differs is the wire:
//! the `{meta, data}` envelope written here, the problem-style errors (rendered from the
//! same `ApiError` by the request-id middleware for every `/v2` path), plain-string
//! references and cursor pagination.

pub mod analytics;
pub mod apis;
pub mod credits;
pub mod identities;
pub mod namespaces;
pub mod overrides;
pub mod permissions;
pub mod portal;
pub mod ratelimit;
pub mod ratelimit_analytics;
pub mod root_keys;
pub mod sql;
pub mod webhooks;

use crate::error::{ApiError, problems};
use actix_web::HttpResponse;
use keygate_domain::{AllowedIps, IdPrefix, Patch, ValidationError, check_len, new_id};
use keygate_rbac::Page;
use serde::Serialize;
use serde_json::{Number, Value};
use utoipa::ToSchema;

/// `meta` of every answer: the request id, equal to the `Unkey-Request-Id` header.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta<'a> {
    request_id: &'a str,
}

/// `pagination` of a list: whether there is more, and the cursor of the next page.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pagination<'a> {
    has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    cursor: Option<&'a str>,
}

/// The answer of an operation: `{meta, data}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Envelope<'a, T> {
    meta: Meta<'a>,
    data: T,
}

/// The answer of a list operation: `{meta, data: [...], pagination}`.
#[derive(Serialize, ToSchema)]
pub(crate) struct PageEnvelope<'a, T> {
    meta: Meta<'a>,
    data: Vec<T>,
    pagination: Pagination<'a>,
}

/// `data` of an operation that answers nothing: `{}`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(max_properties = 0)]
pub(crate) struct Empty {}

/// `data` of `liveness`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Liveness {
    /// `OK`.
    message: &'static str,
}

/// `GET /v2/liveness`: no authentication; 200 while the process serves.
#[utoipa::path(get, path = "/v2/liveness", operation_id = "liveness", tag = "system", security(()),
    responses((status = 200, description = "OK", body = Envelope<Liveness>)))]
pub async fn liveness() -> HttpResponse {
    ok(Liveness { message: "OK" })
}

/// 200 `{"meta":{"requestId"},"data":...}` with the same id in `Unkey-Request-Id`.
pub(crate) fn ok<T: Serialize>(data: T) -> HttpResponse {
    let id = new_id(IdPrefix::Request);
    let body = Envelope { meta: Meta { request_id: &id }, data };
    super::ok_json(&id, body)
}

/// [`ok`] with `data` written by `write` into the envelope's place for it: an answer of a
/// hot path written directly (`keys.verifyKey`'s), checked against its serde form.
pub(crate) fn ok_with(write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>) -> HttpResponse {
    let id = new_id(IdPrefix::Request);
    super::ok_written(&id, |json| {
        json.extend_from_slice(br#"{"meta":{"requestId":"#);
        serde_json::to_writer(&mut *json, &id)?;
        json.extend_from_slice(br#"},"data":"#);
        write(json)?;
        json.push(b'}');
        Ok(())
    })
}

/// `"data":{}`: an operation that answers nothing.
pub(crate) fn ok_empty() -> HttpResponse {
    ok(Empty {})
}

/// A page of a list: the items, and `pagination` with the cursor of the next page.
pub(crate) fn ok_page<T, U: Serialize>(page: Page<T>, item: impl FnMut(T) -> U) -> HttpResponse {
    let cursor = page.next.as_deref().map(encode_cursor);
    let data: Vec<U> = page.items.into_iter().map(item).collect();
    let id = new_id(IdPrefix::Request);
    let pagination = Pagination { has_more: cursor.is_some(), cursor: cursor.as_deref() };
    let body = PageEnvelope { meta: Meta { request_id: &id }, data, pagination };
    super::ok_json(&id, body)
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(liveness))]
struct Doc;

/// This room's part of the v2 document: liveness.
pub(crate) fn openapi() -> Value {
    crate::openapi::room::<Doc>()
}

/// The components every v2 operation's answers use.
pub(crate) fn shared_schemas() -> Vec<(&'static str, utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>)>
{
    use utoipa::PartialSchema;
    vec![
        ("Problem", crate::error::Problem::schema()),
        ("Meta", Meta::schema()),
        ("Pagination", Pagination::schema()),
        ("Empty", Empty::schema()),
    ]
}

/// Cursors are the sort key of the last item given, after a version tag: opaque to
/// clients, at most 1024 characters (keys are at most 512).
const CURSOR_TAG: &str = "kgc1:";

fn encode_cursor(after: &str) -> String {
    format!("{CURSOR_TAG}{after}")
}

/// The sort key a `cursor` continues after (400 when it is not one of ours).
pub(crate) fn decode_cursor(cursor: Option<&str>) -> Result<Option<String>, ApiError> {
    let Some(c) = cursor else { return Ok(None) };
    let bad = || ApiError::from(ValidationError::new("cursor", "is not a cursor this API gave"));
    check_len("cursor", c, 1024)?;
    match c.strip_prefix(CURSOR_TAG) {
        Some(after) if !after.is_empty() => Ok(Some(after.to_string())),
        _ => Err(bad()),
    }
}

/// `limit` of a list operation: 1–100, `default` when absent.
pub(crate) fn page_limit(limit: &Option<Number>, default: u64) -> Result<usize, ApiError> {
    let n = match limit {
        Some(n) => crate::plumbing::integer("limit", n, 1)?,
        None => default,
    };
    if n > 100 {
        return Err(ValidationError::new("limit", "must be <= 100").into());
    }
    Ok(n as usize)
}

/// 400 `not_supported` for a field of a feature keygate lacks, when it is given (not
/// absent or null).
pub(crate) fn unsupported(fields: &[(&str, &Option<Value>)]) -> Result<(), ApiError> {
    match fields.iter().find(|(_, v)| v.as_ref().is_some_and(|v| !v.is_null())) {
        Some((name, _)) => Err(ApiError::bad_request(format!(
            "{name}: keygate does not support this feature (API-v2.md); leave the field out"
        ))
        .with_problem(problems::NOT_SUPPORTED)
        .at_field(*name)),
        None => Ok(()),
    }
}

/// `1 <= chars <= max` for an optional string.
pub(crate) fn check_opt_len(path: &str, value: &Option<String>, max: usize) -> Result<(), ApiError> {
    match value {
        Some(v) => Ok(check_len(path, v, max)?),
        None => Ok(()),
    }
}

/// v2's `keyId`: 3 to 255 characters.
pub(crate) fn check_key_id(key_id: &str) -> Result<(), ApiError> {
    check_len("keyId", key_id, keygate_domain::MAX_NAME_CHARS)?;
    if key_id.chars().count() < 3 {
        return Err(ValidationError::new("keyId", "must be at least 3 characters").into());
    }
    Ok(())
}

/// At most `max` entries in a list.
pub(crate) fn check_count<T>(path: &str, list: &[T], max: usize) -> Result<(), ApiError> {
    if list.len() > max {
        return Err(ValidationError::new(path, format!("at most {max} entries")).into());
    }
    Ok(())
}

/// An `allowedIps` field (API-v2.md §25): at most 100 addresses or CIDR ranges; absent,
/// null or `[]`: none.
pub(crate) fn allowed_ips(field: &str, entries: Option<Vec<String>>) -> Result<Option<AllowedIps>, ApiError> {
    Ok(match entries {
        Some(e) => AllowedIps::parse(field, &e)?,
        None => None,
    })
}

/// An `allowedIps` field of an update: absent (unchanged), null or `[]` (cleared), or set.
pub(crate) fn allowed_ips_patch(
    field: &str,
    entries: Patch<Vec<String>>,
) -> Result<Patch<AllowedIps>, ApiError> {
    Ok(match entries.try_map(|e| AllowedIps::parse(field, &e))? {
        Patch::Set(None) => Patch::Clear,
        Patch::Set(Some(list)) => Patch::Set(list),
        Patch::Clear => Patch::Clear,
        Patch::Absent => Patch::Absent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::MessageBody;

    #[test]
    fn an_envelope_written_directly_is_the_one_serde_writes() {
        let data =
            serde_json::json!({ "valid": true, "name": "a \"quoted\" \\ ünïcødé \u{1} name", "n": [1, 2] });
        let written = ok_with(|json| serde_json::to_writer(json, &data));
        assert_eq!(written.status(), 200);
        let id = written.headers().get(crate::error::REQUEST_ID_HEADER).and_then(|v| v.to_str().ok());
        let id = id.expect("the request id header").to_owned();
        let body = written.into_body().try_into_bytes().expect("bytes");
        let expected = serde_json::to_vec(&Envelope { meta: Meta { request_id: &id }, data: &data }).unwrap();
        assert_eq!(String::from_utf8_lossy(&body), String::from_utf8_lossy(&expected));
    }

    #[test]
    fn an_answer_that_cannot_be_written_is_a_500_with_the_error_body() {
        let failed = ok_with(|_| Err(serde::ser::Error::custom("not writable")));
        assert_eq!(failed.status(), 500);
        let body = failed.into_body().try_into_bytes().expect("bytes");
        let v: Value = serde_json::from_slice(&body).expect("an error body");
        assert_eq!(v["error"]["code"], "INTERNAL_SERVER_ERROR");
    }
}
