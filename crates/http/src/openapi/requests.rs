//! The server-wide rule of `http::body` in every request schema of a document: NUL is
//! refused in every string and object key of a request (PostgreSQL's text cannot hold it),
//! and an optional field of a JSON body takes `null` (serde's `Option`: absent).

use super::NO_NUL;
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

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
pub(super) fn refuse_nul_in_requests(doc: &mut Value) {
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
            // One of several shapes (a value or a list of them): null is one more.
            None => {
                if let Some(Value::Array(alternatives)) = schema.get_mut("oneOf")
                    && !alternatives.iter().any(|a| a.get("type") == Some(&json!("null")))
                {
                    alternatives.push(json!({"type": "null"}));
                }
            }
            _ => {}
        }
    }
}
