//! The two documents assembled: the frame (header, security schemes, shared components),
//! every handler room's part merged in, and the server-wide rule of request bodies applied.

use super::requests::{NoNul, refuse_nul_in_requests};
use super::{Api, error_responses};
use crate::handlers::{
    analytics, apis, audit, gateway, keys, overrides, permissions, ratelimit, scanning, system, v2,
};
use serde_json::Value;
use utoipa::PartialSchema;

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
            scanning::openapi(),
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
            v2::namespaces::openapi(),
            v2::root_keys::openapi(),
            v2::portal::openapi(),
            v2::webhooks::openapi(),
            v2::sql::openapi(),
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
            use utoipa::openapi::security::{ApiKey, ApiKeyValue};
            let portal = ApiKey::Cookie(ApiKeyValue::with_description(
                "portal_session",
                "A portal session's access token (portal.exchangeCode)",
            ));
            components = components.security_scheme("portalSession", SecurityScheme::ApiKey(portal));
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
