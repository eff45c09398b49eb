//! The two OpenAPI 3.1 documents, generated from the code: `/openapi.json` (v1 and every
//! route outside `/v2`) and `/openapi-v2.json` (v2). `docs/openapi.json` and
//! `docs/openapi-v2.json` are this module's output (`keygate openapi v1|v2`; a test fails
//! when they differ).
//!
//! Each handler room describes its own operations: `#[utoipa::path]` on the handlers,
//! `ToSchema` on the request and answer types, and an `openapi()` function that lists its
//! paths and says what the derive cannot (which of two fields is required). This module
//! holds only the frame: the documents' header, the error answers and components every
//! room shares, the string kinds the rooms name, and the server-wide rule of
//! `http::body` (NUL is refused in every string and object key of a request).

use crate::handlers::{analytics, apis, audit, gateway, keys, overrides, permissions, ratelimit, system, v2};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema, ToSchema};

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

/// Both documents, each rendered once, when first asked for.
#[derive(Debug, Default)]
pub struct Documents {
    v1: std::sync::OnceLock<String>,
    v2: std::sync::OnceLock<String>,
}

impl Documents {
    /// The rendered document.
    pub fn get(&self, api: Api) -> &str {
        let cell = match api {
            Api::V1 => &self.v1,
            Api::V2 => &self.v2,
        };
        cell.get_or_init(|| render(api))
    }
}

/// The document, as JSON text (pretty, ending with a newline): what the server serves and
/// what `docs/` holds.
pub fn render(api: Api) -> String {
    // A document of plain JSON values serializes without fail.
    let mut out = serde_json::to_string_pretty(&document(api)).unwrap_or_default();
    out.push('\n');
    out
}

/// The document as a JSON value.
pub fn document(api: Api) -> Value {
    let rooms = match api {
        Api::V1 => vec![
            ratelimit::openapi(),
            apis::openapi(),
            analytics::openapi(),
            permissions::openapi(),
            overrides::openapi(),
            audit::openapi(),
            gateway::openapi(),
            system::openapi_paths(),
        ],
        Api::V2 => vec![
            v2::ratelimit::openapi(),
            v2::apis::openapi(),
            v2::analytics::openapi(),
            v2::ratelimit_analytics::openapi(),
            v2::credits::openapi(),
            v2::identities::openapi(),
            v2::permissions::openapi(),
            v2::overrides::openapi(),
            v2::openapi(),
        ],
    };
    let mut doc = frame(api);
    for room in rooms.into_iter().chain(keys::openapi(api)) {
        merge(&mut doc, room);
    }
    refuse_nul_in_requests(&mut doc);
    doc
}

/// The header, security schemes and shared components of a document.
fn frame(api: Api) -> Value {
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
    use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApiBuilder, Paths};
    let (title, description) = match api {
        Api::V1 => (
            "keygate",
            "API-key access control and rate limiting; wire-compatible with Unkey's v1 API for \
             these endpoints. Every response carries Unkey-Request-Id. See docs/api.md for the rules.",
        ),
        Api::V2 => (
            "keygate v2",
            "keygate's v2 API, wire-compatible with Unkey's v2 API for these operations \
             (docs/api-v2.md). Every response carries Unkey-Request-Id equal to meta.requestId. \
             Any other /v2 path answers 404 not_supported.",
        ),
    };
    let root_key = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("A root key")).build();
    let mut components = ComponentsBuilder::new()
        .schema("NoNul", NoNul::schema())
        .security_scheme("rootKey", SecurityScheme::Http(root_key))
        .responses_from_iter(error_responses(api));
    match api {
        Api::V1 => {
            components = components
                .schema("ErrorBody", crate::error::ErrorBody::schema())
                .security_scheme("gatewayRootKey", gateway::security_scheme());
        }
        Api::V2 => {
            for (name, schema) in v2::shared_schemas() {
                components = components.schema(name, schema);
            }
        }
    }
    let doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new().title(title).version(env!("CARGO_PKG_VERSION")).description(Some(description)),
        )
        .paths(Paths::new())
        .components(Some(components.build()))
        .security(Some([SecurityRequirement::new("rootKey", Vec::<String>::new())]))
        .build();
    serde_json::to_value(doc).unwrap_or(Value::Null)
}

/// A schema built in code, as JSON.
pub(crate) fn schema_json_of(schema: impl serde::Serialize) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// A room's part of a document: the paths and schemas of a `#[derive(utoipa::OpenApi)]`.
pub(crate) fn room<D: utoipa::OpenApi>() -> Value {
    serde_json::to_value(D::openapi()).unwrap_or(Value::Null)
}

/// Adds a room's paths and schemas to the document. Two rooms may share a schema (the
/// same type); two different schemas of one name are a bug, caught by the tests.
fn merge(doc: &mut Value, room: Value) {
    if let Some(paths) = room["paths"].as_object() {
        for (path, item) in paths {
            let entry = &mut doc["paths"][path];
            match (entry.as_object_mut(), item.as_object()) {
                (Some(ops), Some(new)) => ops.extend(new.clone()),
                _ => *entry = item.clone(),
            }
        }
    }
    if let Some(schemas) = room["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            let existing = &doc["components"]["schemas"][name];
            assert!(
                existing.is_null() || existing == schema,
                "two different schemas are named {name} in one OpenAPI document"
            );
            doc["components"]["schemas"][name] = schema.clone();
        }
    }
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
pub(crate) const DISPLAY_NAME: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";

/// Any JSON value without a NUL character in a string or an object key: what a request
/// may hold where the API takes any value (`meta`), or in a field keygate ignores.
#[derive(Debug)]
pub(crate) struct NoNul;

impl PartialSchema for NoNul {
    fn schema() -> RefOr<Schema> {
        let no_nul_string = || ObjectBuilder::new().schema_type(Type::String).pattern(Some(NO_NUL));
        let schema = utoipa::openapi::schema::AnyOfBuilder::new()
            .description(Some(
                "Any JSON value without a NUL character in a string or a key (NUL is refused in \
                 every string: docs/api.md)",
            ))
            .item(ObjectBuilder::new().schema_type(SchemaType::from_iter([
                Type::Null,
                Type::Boolean,
                Type::Number,
            ])))
            .item(no_nul_string())
            .item(ArrayBuilder::new().items(Ref::from_schema_name("NoNul")))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .property_names(Some(no_nul_string()))
                    .additional_properties(Some(Ref::from_schema_name("NoNul"))),
            );
        RefOr::T(Schema::AnyOf(schema.build()))
    }
}

impl ToSchema for NoNul {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("NoNul")
    }
}

/// The server-wide rule of `http::body` in every request schema (bodies and parameters,
/// and the component schemas they use): a string with no pattern of its own holds no
/// NUL, and an object's keys hold none and its other properties are any [`NoNul`] value
/// (unknown fields are ignored, but NUL is refused in them too).
fn refuse_nul_in_requests(doc: &mut Value) {
    let mut used = Vec::new();
    let mut in_requests = Vec::new();
    if let Some(paths) = doc["paths"].as_object_mut() {
        for item in paths.values_mut() {
            for op in item.as_object_mut().into_iter().flat_map(|ops| ops.values_mut()) {
                if let Some(body) = op.get_mut("requestBody") {
                    refs(body, &mut in_requests);
                    refuse_nul(body, true);
                }
                if let Some(params) = op.get_mut("parameters") {
                    refs(params, &mut in_requests);
                    refuse_nul(params, false);
                }
            }
        }
    }
    // The components request schemas use, and those they use in turn.
    while let Some(name) = in_requests.pop() {
        if name == "NoNul" || used.contains(&name) {
            continue;
        }
        let schema = &mut doc["components"]["schemas"][&name];
        refs(schema, &mut in_requests);
        refuse_nul(schema, true);
        used.push(name);
    }
}

/// The component names a value's `$ref`s point at.
fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        out.extend(r.strip_prefix("#/components/schemas/").map(str::to_string))
                    }
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// Applies the NUL rule to every schema within `v`; in a JSON body (`json`), optional
/// fields take `null` too (a query string has no null).
fn refuse_nul(v: &mut Value, json: bool) {
    match v {
        Value::Object(m) => {
            let types = match m.get("type") {
                Some(Value::String(t)) => vec![t.clone()],
                Some(Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
                _ => Vec::new(),
            };
            if types.iter().any(|t| t == "string") && !m.contains_key("pattern") && !m.contains_key("enum") {
                m.insert("pattern".into(), NO_NUL.into());
            }
            if types.iter().any(|t| t == "object") {
                m.entry("propertyNames").or_insert_with(|| json!({ "pattern": NO_NUL }));
                m.entry("additionalProperties")
                    .or_insert_with(|| json!({ "$ref": "#/components/schemas/NoNul" }));
                if json {
                    optional_takes_null(m);
                }
            }
            // A query string or a header has no null: an optional parameter is absent.
            if !json && let Some(Value::Array(ts)) = m.get_mut("type") {
                ts.retain(|t| t != "null");
                if let [only] = ts.as_slice() {
                    let only = only.clone();
                    m.insert("type".into(), only);
                }
            }
            // An object's `anyOf`/`oneOf` of `required` alternatives (`require_one_of`)
            // restates its own properties' types: their patterns are the properties'.
            let alternatives_of_own = m.contains_key("properties");
            for (k, v) in m.iter_mut() {
                // Examples are data, not schemas.
                let data = matches!(k.as_str(), "example" | "examples" | "enum" | "default");
                let restated = alternatives_of_own && matches!(k.as_str(), "anyOf" | "oneOf");
                if !data && !restated {
                    refuse_nul(v, json);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| refuse_nul(v, json)),
        _ => {}
    }
}

/// An optional field of a request may be `null`, which means absent (serde's `Option`):
/// the properties not `required` take `null` besides their type.
fn optional_takes_null(object: &mut Map<String, Value>) {
    let required: Vec<String> = match object.get("required") {
        Some(Value::Array(r)) => r.iter().filter_map(|f| f.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    let Some(Value::Object(properties)) = object.get_mut("properties") else { return };
    for (name, schema) in properties.iter_mut() {
        if required.contains(name) {
            continue;
        }
        match schema.get("type").cloned() {
            Some(Value::String(t)) if t != "null" => schema["type"] = json!([t, "null"]),
            Some(Value::Array(mut ts)) if !ts.contains(&json!("null")) => {
                ts.push(json!("null"));
                schema["type"] = Value::Array(ts);
            }
            _ => {}
        }
    }
}

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
    ("412", "PreconditionFailed", "Not possible: keys are stored hashed"),
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

/// v2's 412: not possible, keys are stored hashed (`recoverable`, `decrypt`).
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
