//! `GET /openapi.json` (contract §6) and `GET /openapi-v2.json` describe exactly the routes
//! the server has.
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

/// Checks one OpenAPI document: it lists exactly the served routes under `prefix`, with
/// their methods; every operation has an id and a 200; every `$ref` resolves.
fn check_document(path: &str, prefix: &str) {
    let s = TestServer::start();
    let r = s.request(s.client.get(s.url(path)));
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("application/json"));
    assert!(r.header("unkey-request-id").is_some());
    let doc = &r.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();

    // The gateway's forward auth is a protocol of headers, not a JSON API: docs/gateways.md.
    let api: Vec<_> =
        ROUTES.iter().filter(|(p, _)| p.starts_with(prefix) && !p.starts_with("/v1/gateway.")).collect();
    for (path, methods) in &api {
        let ops = paths.get(*path).unwrap_or_else(|| panic!("{path} is missing from the document"));
        let documented: BTreeSet<String> = ops.as_object().unwrap().keys().cloned().collect();
        let served: BTreeSet<String> = methods.iter().map(|m| m.to_lowercase()).collect();
        assert_eq!(documented, served, "methods of {path}");
    }
    let served: BTreeSet<&str> = api.iter().map(|(p, _)| *p).collect();
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
        let name = r.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("unexpected $ref {r}"));
        assert!(doc["components"]["schemas"][name].is_object(), "$ref {r} has no schema");
    }
}

#[test]
fn the_document_lists_every_api_route_with_its_methods_and_nothing_else() {
    check_document("/openapi.json", "/v1/");
}

#[test]
fn the_v2_document_lists_every_v2_route_with_its_methods_and_nothing_else() {
    check_document("/openapi-v2.json", "/v2/");
}
