//! The two OpenAPI 3.1 documents, generated from the code: `/openapi.json` (v1 and every
//! route outside `/v2`) and `/openapi-v2.json` (v2). `docs/openapi.json` and
//! `docs/openapi-v2.json` are this module's output (`keygate openapi v1|v2`; a test fails
//! when they differ).
//!
//! Each handler room describes its own operations: `#[utoipa::path]` on the handlers,
//! `ToSchema` on the request and answer types, and an `openapi()` function that lists its
//! paths and says what the derive cannot (which of two fields is required). This module
//! holds what the rooms share: the error answers, the string kinds they name, and helpers
//! to refine a room's part; [`document`] assembles the rooms' parts in the documents' frame,
//! and `requests` adds the server-wide rule of `http::body` to every request schema (NUL
//! is refused in every string and object key of a request, and an optional field takes
//! `null`).

pub mod document;
mod requests;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use utoipa::IntoResponses;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// Which document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `/openapi.json`: v1 and every route outside `/v2`.
    V1,
    /// `/openapi-v2.json`: the v2 API.
    V2,
}

impl Api {
    /// Parses `v1` or `v2` (the CLI's argument).
    pub fn parse(s: &str) -> Option<Api> {
        match s {
            "v1" => Some(Api::V1),
            "v2" => Some(Api::V2),
            _ => None,
        }
    }

    /// Where the document is committed, from the workspace root.
    pub fn committed_path(self) -> &'static str {
        match self {
            Api::V1 => "docs/openapi.json",
            Api::V2 => "docs/openapi-v2.json",
        }
    }
}

/// Both documents, each rendered once, when first asked for (by the renderer the server
/// gives: [`document::render`]).
#[derive(Debug)]
pub struct Documents {
    render: fn(Api) -> String,
    v1: std::sync::OnceLock<String>,
    v2: std::sync::OnceLock<String>,
}

impl Documents {
    pub fn new(render: fn(Api) -> String) -> Self {
        Self { render, v1: Default::default(), v2: Default::default() }
    }

    /// The rendered document.
    pub fn get(&self, api: Api) -> &str {
        let cell = match api {
            Api::V1 => &self.v1,
            Api::V2 => &self.v2,
        };
        cell.get_or_init(|| (self.render)(api))
    }
}

/// A schema built in code, as JSON.
pub(crate) fn schema_json_of(schema: impl serde::Serialize) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// A room's part of a document: the paths and schemas of a `#[derive(utoipa::OpenApi)]`.
pub(crate) fn room<D: utoipa::OpenApi>() -> Value {
    serde_json::to_value(D::openapi()).unwrap_or(Value::Null)
}

/// A room's component schema, to refine (panics when the room has no such schema: the
/// documents are built by a test).
pub(crate) fn schema_mut<'a>(doc: &'a mut Value, name: &str) -> &'a mut Value {
    let schema = &mut doc["components"]["schemas"][name];
    assert!(schema.is_object(), "no schema {name} in this room's document");
    schema
}

/// A room's operation, to refine (panics when there is none).
pub(crate) fn operation_mut<'a>(doc: &'a mut Value, path: &str, method: &str) -> &'a mut Value {
    let op = &mut doc["paths"][path][method];
    assert!(op.is_object(), "no operation {method} {path} in this room's document");
    op
}

/// The object schema of an optional field: the alternative that is not `null` when the
/// derive wrote `oneOf: [object, null]`, else the schema itself.
pub(crate) fn object_of(schema: &mut Value) -> &mut Value {
    let has_object =
        schema["oneOf"].as_array().is_some_and(|alts| alts.iter().any(|a| a["type"] == "object"));
    if !has_object {
        return schema;
    }
    match schema["oneOf"].as_array_mut().and_then(|alts| alts.iter_mut().find(|a| a["type"] == "object")) {
        Some(object) => object,
        None => unreachable!("checked above"),
    }
}

/// "At least one of these fields" (`exclusive`: exactly one), for a body whose fields are
/// each optional but which needs one of them: a JSON Schema `anyOf` (`oneOf`) of
/// `required` alternatives, each a non-null string.
pub(crate) fn require_one_of(schema: &mut Value, fields: &[&str], exclusive: bool) {
    let alternatives: Vec<Value> = fields
        .iter()
        .map(|f| json!({ "required": [f], "properties": { *f: { "type": "string" } } }))
        .collect();
    schema[if exclusive { "oneOf" } else { "anyOf" }] = Value::Array(alternatives);
}

/// The pattern of a string holding no NUL character (`http::body` refuses NUL in every
/// string of a request: PostgreSQL's text cannot hold it).
pub(crate) const NO_NUL: &str = "^[^\\u0000]*$";
/// A permission name (`keygate_domain::validate_permission_name`).
pub(crate) const PERMISSION_NAME: &str = "^[A-Za-z0-9._:*-]+$";
/// A display name: no control character (`keygate_domain::validate_display_name`).
/// The forms of an IPv6 address as alternatives: eight groups, or fewer around one `::`.
macro_rules! ipv6_forms {
    () => {
        concat!(
            "([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|([0-9A-Fa-f]{1,4}:){1,7}:|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}|",
            "([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}|",
            "([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}|",
            "[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}|:((:[0-9A-Fa-f]{1,4}){1,7}|:)"
        )
    };
}
pub(crate) const DISPLAY_NAME: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";
/// An IPv4 address (dotted quad, no leading zeros) or an IPv6 address (any `::` form but
/// the embedded-IPv4 ones, which the server takes too): a request's `ip`.
pub(crate) const IP_ADDRESS: &str = concat!(
    "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}|",
    ipv6_forms!(),
    ")$"
);
/// An address of [`IP_ADDRESS`] or a CIDR range of one: an `allowedIps` entry.
pub(crate) const IP_RANGE: &str = concat!(
    "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}(/(3[0-2]|[12]?[0-9]))?|(",
    ipv6_forms!(),
    ")(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$"
);

/// The error answers of a document, by status: (status, component name, description).
/// Operations refer to them (`#/components/responses/...`) through the `IntoResponses`
/// types below.
const V1_ERRORS: &[(&str, &str, &str)] = &[
    ("400", "BadRequest", "Bad request"),
    ("401", "Unauthorized", "Unauthorized"),
    ("403", "Forbidden", "Forbidden or insufficient permissions"),
    ("404", "NotFound", "Not found"),
    ("408", "RequestTimeout", "The body did not arrive in time"),
    ("409", "Conflict", "The name is taken"),
    (
        "412",
        "PreconditionFailed",
        "Recoverable keys: no encryption keyring, or a ciphertext that does not open",
    ),
    ("413", "PayloadTooLarge", "Body over 1 MiB"),
    ("415", "UnsupportedMediaType", "Not application/json"),
    ("500", "InternalError", "Internal error"),
    ("503", "Unavailable", "Storage unavailable"),
];

const V2_ERRORS: &[(&str, &str, &str)] = &[
    (
        "400",
        "BadRequest",
        "Bad request (invalid input, missing or malformed Authorization, query syntax, unsupported field)",
    ),
    ("401", "Unauthorized", "Unknown root key"),
    ("403", "Forbidden", "Insufficient permissions"),
    ("404", "NotFound", "Not found"),
    ("409", "Conflict", "The name is taken"),
    (
        "412",
        "PreconditionFailed",
        "Recoverable keys: no encryption keyring, or a ciphertext that does not open",
    ),
    ("413", "PayloadTooLarge", "Body over 1 MiB"),
    ("415", "UnsupportedMediaType", "Not application/json"),
    ("500", "InternalError", "Internal error"),
    ("503", "Unavailable", "A store is unavailable"),
];

/// The error answers of a document, as its `components.responses`: v1's carry an
/// [`crate::error::ErrorBody`]; v2's a `Problem`, as `application/json` or, when the
/// client accepts it, `application/problem+json`.
fn error_responses(api: Api) -> Vec<(String, RefOr<Response>)> {
    let (table, schema, types): (_, _, &[&str]) = match api {
        Api::V1 => (V1_ERRORS, "ErrorBody", &["application/json"]),
        Api::V2 => (V2_ERRORS, "Problem", &["application/json", "application/problem+json"]),
    };
    table
        .iter()
        .map(|(_, name, description)| {
            let mut response = ResponseBuilder::new().description(*description);
            for content_type in types {
                let content = ContentBuilder::new().schema(Some(Ref::from_schema_name(schema))).build();
                response = response.content(*content_type, content);
            }
            (name.to_string(), RefOr::T(response.build()))
        })
        .collect()
}

/// References to the error answers of these statuses.
fn refer(table: &[(&str, &str, &str)], statuses: &[&str]) -> BTreeMap<String, RefOr<Response>> {
    table
        .iter()
        .filter(|(status, _, _)| statuses.contains(status))
        .map(|(status, name, _)| (status.to_string(), RefOr::Ref(Ref::from_response_name(*name))))
        .collect()
}

/// The error answers every operation may give, but 408.
const COMMON: &[&str] = &["400", "401", "403", "404", "413", "415", "500", "503"];

/// v1's error answers of an operation reading a query string.
#[derive(Debug)]
pub(crate) struct V1QueryErrors;

impl IntoResponses for V1QueryErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V1_ERRORS, COMMON)
    }
}

/// v1's error answers of an operation reading a JSON body (a body that does not arrive in
/// time is a 408 too).
#[derive(Debug)]
pub(crate) struct V1BodyErrors;

impl IntoResponses for V1BodyErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut all = refer(V1_ERRORS, COMMON);
        all.extend(refer(V1_ERRORS, &["408"]));
        all
    }
}

/// v1's 409: the name is taken.
#[derive(Debug)]
pub(crate) struct V1Conflict;

impl IntoResponses for V1Conflict {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V1_ERRORS, &["409"])
    }
}

/// v2's error answers of every operation.
#[derive(Debug)]
pub(crate) struct V2Errors;

impl IntoResponses for V2Errors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V2_ERRORS, COMMON)
    }
}

/// v2's 409: the slug or name is taken.
#[derive(Debug)]
pub(crate) struct V2Conflict;

impl IntoResponses for V2Conflict {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V2_ERRORS, &["409"])
    }
}

/// v1's 412 (`recoverable`, `decrypt`): no encryption keyring is configured, or a stored
/// ciphertext does not open.
#[derive(Debug)]
pub(crate) struct V1Precondition;

impl IntoResponses for V1Precondition {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V1_ERRORS, &["412"])
    }
}

/// v2's 412 (`recoverable`, `decrypt`): no encryption keyring is configured, or a stored
/// ciphertext does not open.
#[derive(Debug)]
pub(crate) struct V2Precondition;

impl IntoResponses for V2Precondition {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        refer(V2_ERRORS, &["412"])
    }
}

/// Schemas of the strings and lists the API takes, for `#[schema(schema_with = ...)]`
/// where a field's schema is more than its attributes say (a list's items).
pub(crate) mod kinds {
    use super::{DISPLAY_NAME, PERMISSION_NAME};
    use keygate_domain::MAX_NAME_CHARS;
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, SchemaType, Type};
    use utoipa::openapi::{Array, Object};

    fn string(min: usize, max: usize, pattern: &str) -> ObjectBuilder {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(min))
            .max_length(Some(max))
            .pattern(Some(pattern))
    }

    fn list(items: ObjectBuilder, min: usize, max: usize, nullable: bool) -> Array {
        let mut list = ArrayBuilder::new().items(items).max_items(Some(max));
        if min > 0 {
            list = list.min_items(Some(min));
        }
        if nullable {
            list = list.schema_type(SchemaType::from_iter([Type::Array, Type::Null]));
        }
        list.build()
    }

    /// 1–10 integers in `min..=max`, or null.
    fn integers_or_null(min: i64, max: i64) -> Array {
        let item = ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(min)).maximum(Some(max));
        list(item, 1, 10, true)
    }

    /// A webhook endpoint's `creditsLow`: percents 1–99.
    pub(crate) fn credits_low_percents() -> Array {
        integers_or_null(1, 99)
    }

    /// A webhook endpoint's `expiringDays`: days 1–365.
    pub(crate) fn expiring_days() -> Array {
        integers_or_null(1, 365)
    }

    /// A permission name (`keygate_domain::validate_permission_name`).
    pub(crate) fn permission_name() -> Object {
        string(1, MAX_NAME_CHARS, PERMISSION_NAME).examples(["documents.read"]).build()
    }

    /// A role name (`keygate_domain::validate_display_name`).
    pub(crate) fn role_name() -> Object {
        string(1, MAX_NAME_CHARS, DISPLAY_NAME).examples(["admin"]).build()
    }

    /// Up to 1000 permission names, or null.
    pub(crate) fn permission_names_or_null() -> Array {
        list(string(1, MAX_NAME_CHARS, PERMISSION_NAME).examples(["documents.read"]), 0, 1000, true)
    }

    /// Up to 1000 permission names.
    pub(crate) fn permission_names() -> Array {
        list(string(1, MAX_NAME_CHARS, PERMISSION_NAME).examples(["documents.read"]), 0, 1000, false)
    }

    /// Up to 1000 role names, or null (v1).
    pub(crate) fn role_names_or_null() -> Array {
        list(string(1, MAX_NAME_CHARS, DISPLAY_NAME).examples(["admin"]), 0, 1000, true)
    }

    /// `allowedIps`: up to 100 addresses or CIDR ranges, or null.
    pub(crate) fn allowed_ips_or_null() -> Array {
        list(string(2, 64, super::IP_RANGE).examples(["10.0.0.0/8"]), 0, 100, true)
    }

    /// A request's `ip`: an IPv4 or IPv6 address.
    pub(crate) fn ip_address() -> Object {
        string(2, 64, super::IP_ADDRESS).examples(["203.0.113.7"]).build()
    }

    /// Up to 100 role names, or null (v2).
    pub(crate) fn role_names_100_or_null() -> Array {
        list(string(1, MAX_NAME_CHARS, DISPLAY_NAME).examples(["admin"]), 0, 100, true)
    }

    /// Up to 100 role names (v2).
    pub(crate) fn role_names_100() -> Array {
        list(string(1, MAX_NAME_CHARS, DISPLAY_NAME).examples(["admin"]), 0, 100, false)
    }
}

/// Inlines the component an operation's JSON body refers to, so that `refine` can change
/// it for this operation alone (`addPermissions` takes at least one where
/// `setPermissions`, with the same body, takes none).
pub(crate) fn refine_body(doc: &mut Value, path: &str, method: &str, refine: impl FnOnce(&mut Value)) {
    let schema_ptr = "/requestBody/content/application~1json/schema";
    let reference = operation_mut(doc, path, method)
        .pointer(schema_ptr)
        .and_then(|s| s["$ref"].as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .map(str::to_string);
    let mut schema = match reference {
        Some(name) => schema_mut(doc, &name).clone(),
        None => operation_mut(doc, path, method).pointer(schema_ptr).cloned().unwrap_or_default(),
    };
    refine(&mut schema);
    if let Some(slot) = operation_mut(doc, path, method).pointer_mut(schema_ptr) {
        *slot = schema;
    }
}
