//! `GET /openapi.json` (contract §6) and `GET /openapi-v2.json` describe exactly the routes
//! the server has: every route of the route table is in one of them (v2's under `/v2/`, all
//! others in the first), with its methods, and every documented path is served.
#![allow(clippy::unwrap_used)]

use keygate::routes::ROUTES;
use keygate_tests::TestServer;
use serde_json::Value;
use std::collections::BTreeSet;

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// A route template as OpenAPI writes it: `{original:.*}` is `{original}`.
fn openapi_path(template: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = open + rest[open..].find('}').unwrap();
        let name = rest[open + 1..close].split(':').next().unwrap();
        out.push_str(&rest[..open]);
        out.push_str(&format!("{{{name}}}"));
        rest = &rest[close + 1..];
    }
    out + rest
}

/// Checks one OpenAPI document: it lists exactly the served routes it covers (`v2`: those
/// under `/v2/`; otherwise every other one), with their methods; every operation has an id
/// and a 200; every `$ref` resolves.
fn check_document(path: &str, v2: bool) {
    let s = TestServer::start();
    let r = s.request(s.client.get(s.url(path)));
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("application/json"));
    assert!(r.header("unkey-request-id").is_some());
    let doc = &r.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();

    let api: Vec<(String, &[&str])> = ROUTES
        .iter()
        .filter(|(p, _)| p.starts_with("/v2/") == v2)
        .map(|(p, methods)| (openapi_path(p), *methods))
        .collect();
    for (path, methods) in &api {
        let ops = paths.get(path).unwrap_or_else(|| panic!("{path} is missing from the document"));
        let documented: BTreeSet<String> = ops.as_object().unwrap().keys().cloned().collect();
        let served: BTreeSet<String> = methods.iter().map(|m| m.to_lowercase()).collect();
        assert_eq!(documented, served, "methods of {path}");
    }
    let served: BTreeSet<&str> = api.iter().map(|(p, _)| p.as_str()).collect();
    for path in paths.keys() {
        assert!(served.contains(path.as_str()), "{path} is documented but not served");
    }

    // Every operation has an id and a 200; every $ref points at a schema that exists.
    for (path, ops) in paths {
        for (method, op) in ops.as_object().unwrap() {
            assert!(op["operationId"].is_string(), "{method} {path}");
            assert!(op["responses"]["200"].is_object(), "{method} {path}");
        }
    }
    let mut all = Vec::new();
    refs(doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let target =
            match (r.strip_prefix("#/components/schemas/"), r.strip_prefix("#/components/responses/")) {
                (Some(name), _) => &doc["components"]["schemas"][name],
                (_, Some(name)) => &doc["components"]["responses"][name],
                _ => panic!("unexpected $ref {r}"),
            };
        assert!(target.is_object(), "$ref {r} points at nothing");
    }
}

#[test]
fn the_document_lists_every_route_but_v2_with_its_methods_and_nothing_else() {
    check_document("/openapi.json", false);
}

#[test]
fn the_v2_document_lists_every_v2_route_with_its_methods_and_nothing_else() {
    check_document("/openapi-v2.json", true);
}

#[test]
fn route_templates_become_openapi_paths() {
    assert_eq!(openapi_path("/v1/gateway.authorize/{original:.*}"), "/v1/gateway.authorize/{original}");
    assert_eq!(openapi_path("/v1/keys.getKey"), "/v1/keys.getKey");
    assert_eq!(openapi_path("/a/{x}/{y:[0-9]+}"), "/a/{x}/{y}");
}

/// The committed `docs/openapi*.json` are what the code generates (and what the server
/// serves): a change to a route, a request or an answer type shows up in them.
#[test]
fn the_committed_documents_are_what_the_code_generates() {
    use keygate::openapi::{Api, document::render};
    let s = TestServer::start();
    for (api, served) in [(Api::V1, "/openapi.json"), (Api::V2, "/openapi-v2.json")] {
        let generated = render(api);
        let path = format!("{}/../{}", env!("CARGO_MANIFEST_DIR"), api.committed_path());
        let committed = std::fs::read_to_string(&path).unwrap();
        let which = if api == Api::V1 { "v1" } else { "v2" };
        assert!(
            committed == generated,
            "{} is not what the code generates: run `cargo run -q -p keygate -- openapi {which} > {}`",
            api.committed_path(),
            api.committed_path()
        );
        let r = s.request(s.client.get(s.url(served)));
        assert_eq!(r.status, 200);
        assert_eq!(r.json, serde_json::from_str::<Value>(&generated).unwrap(), "{served}");
    }
}

/// Request schemas say what `http::body` enforces everywhere: no NUL in a string or a key,
/// and `null` for an optional field of a JSON body.
#[test]
fn request_schemas_refuse_nul_and_take_null_for_optional_fields() {
    use keygate::openapi::{Api, document::document};
    let doc = document(Api::V2);
    let body = &doc["components"]["schemas"]["ListBody"];
    assert_eq!(body["propertyNames"]["pattern"], "^[^\\u0000]*$");
    assert_eq!(body["additionalProperties"]["$ref"], "#/components/schemas/NoNul");
    assert_eq!(body["properties"]["search"]["type"], serde_json::json!(["string", "null"]));
    assert_eq!(body["properties"]["search"]["pattern"], "^[^\\u0000]*$");
    // A parameter has no null.
    let doc = document(Api::V1);
    let params = doc["paths"]["/v1/audit.listEvents"]["get"]["parameters"].as_array().unwrap();
    let event = params.iter().find(|p| p["name"] == "event").unwrap();
    assert_eq!(event["schema"]["type"], "string");
    assert_eq!(event["required"], false);
}
