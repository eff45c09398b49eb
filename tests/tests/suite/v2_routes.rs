//! Every v2 route (API-v2.md §1): unknown paths, methods, authentication and the
//! permission each one needs, in the order of §1, with v2's problem bodies.
#![allow(clippy::unwrap_used)]

use keygate::routes::ROUTES;
use keygate_tests::TestServer;
use serde_json::{Value, json};

/// The permissions a root key needs for each authenticated v2 route (all of them; the
/// test takes each away in turn), and a body that otherwise succeeds. Earlier cases set
/// up what later ones use: the route table's order.
fn needs(
    path: &str,
    key: &str,
    spare: &str,
    apis: &[String; 2],
    root: &str,
) -> Option<(&'static [&'static str], Value)> {
    const UPDATE: &str = "api.*.update_key";
    Some(match path {
        "/v2/apis.createApi" => (&["api.*.create_api"][..], json!({"name": "routes"})),
        "/v2/apis.getApi" => (&["api.*.read_api"][..], json!({"apiId": apis[0]})),
        "/v2/apis.listKeys" => (&["api.*.read_api", "api.*.read_key"][..], json!({"apiId": apis[0]})),
        "/v2/apis.deleteApi" => (&["api.*.delete_api"][..], json!({"apiId": apis[1]})),
        "/v2/keygate.getVerifications" => (&["api.*.read_analytics"][..], json!({"apiId": apis[0]})),
        "/v2/keygate.getRatelimits" => (&["ratelimit.*.read_analytics"][..], json!({"namespace": "n"})),
        "/v2/analytics.getVerifications" => {
            (&["api.*.read_analytics"][..], json!({"query": "SELECT 1 AS x"}))
        }
        "/v2/analytics.getRatelimits" => {
            (&["ratelimit.*.read_analytics"][..], json!({"query": "SELECT 1 AS x"}))
        }
        "/v2/identities.createIdentity" => {
            (&["identity.*.create_identity"][..], json!({"externalId": "routes"}))
        }
        "/v2/identities.getIdentity" => (&["identity.*.read_identity"][..], json!({"identity": "routes"})),
        "/v2/identities.listIdentities" => (&["identity.*.read_identity"][..], json!({})),
        "/v2/identities.updateIdentity" => {
            (&["identity.*.update_identity"][..], json!({"identity": "routes", "meta": {"plan": "pro"}}))
        }
        "/v2/identities.deleteIdentity" => {
            (&["identity.*.delete_identity"][..], json!({"identity": "routes"}))
        }
        "/v2/ratelimit.limit" => (
            &["ratelimit.*.limit"][..],
            json!({"namespace": "n", "identifier": "i", "limit": 1, "duration": 1000}),
        ),
        "/v2/keys.verifyKey" => (&["api.*.verify_key"][..], json!({"key": "unknown"})),
        "/v2/ratelimit.multiLimit" => (
            &["ratelimit.*.limit"][..],
            json!([{"namespace": "n", "identifier": "j", "limit": 1, "duration": 1000}]),
        ),
        "/v2/ratelimit.setOverride" => (
            &["ratelimit.*.set_override"][..],
            json!({"namespace": "n", "identifier": "x", "limit": 1, "duration": 1000}),
        ),
        "/v2/ratelimit.getOverride" => {
            (&["ratelimit.*.read_override"][..], json!({"namespace": "n", "identifier": "x"}))
        }
        "/v2/ratelimit.listOverrides" => (&["ratelimit.*.read_override"][..], json!({"namespace": "n"})),
        "/v2/ratelimit.getNamespace" => (&["ratelimit.*.read_namespace"][..], json!({"namespace": "n"})),
        "/v2/ratelimit.listNamespaces" => (&["ratelimit.*.read_namespace"][..], json!({})),
        "/v2/ratelimit.updateNamespace" => {
            (&["ratelimit.*.update_namespace"][..], json!({"namespace": "n", "algorithm": "fixed"}))
        }
        "/v2/ratelimit.deleteOverride" => {
            (&["ratelimit.*.delete_override"][..], json!({"namespace": "n", "identifier": "x"}))
        }
        "/v2/keys.createKey" => (&["api.*.create_key"][..], json!({"apiId": "api_1"})),
        "/v2/keys.migrateKeys" => (
            &["api.*.create_key"][..],
            json!({"migrationId": "sha256_hex", "apiId": apis[0], "keys": [{"hash": "ab".repeat(32)}]}),
        ),
        "/v2/keys.getKey" => (&["api.*.read_key"][..], json!({"keyId": key})),
        "/v2/keys.whoami" => (&["api.*.read_key"][..], json!({"key": "unknown-secret"})),
        "/v2/keys.deleteKey" => (&["api.*.delete_key"][..], json!({"keyId": spare})),
        "/v2/keys.updateCredits" => (&[UPDATE][..], json!({"keyId": key, "operation": "set", "value": 10})),
        "/v2/keys.updateKey" => (&[UPDATE][..], json!({"keyId": key, "name": "renamed"})),
        "/v2/keys.rerollKey" => {
            (&["api.*.create_key", UPDATE][..], json!({"keyId": key, "expiration": null}))
        }
        "/v2/keys.setPermissions" => (
            &[UPDATE, "rbac.*.add_permission_to_key", "rbac.*.remove_permission_from_key"][..],
            json!({"keyId": key, "permissions": ["p"]}),
        ),
        "/v2/keys.addPermissions" => {
            (&[UPDATE, "rbac.*.add_permission_to_key"][..], json!({"keyId": key, "permissions": ["p"]}))
        }
        "/v2/keys.removePermissions" => {
            (&[UPDATE, "rbac.*.remove_permission_from_key"][..], json!({"keyId": key, "permissions": ["p"]}))
        }
        "/v2/keys.setRoles" => (
            &[UPDATE, "rbac.*.add_role_to_key", "rbac.*.remove_role_from_key"][..],
            json!({"keyId": key, "roles": ["r"]}),
        ),
        "/v2/keys.addRoles" => {
            (&[UPDATE, "rbac.*.add_role_to_key"][..], json!({"keyId": key, "roles": ["r"]}))
        }
        "/v2/keys.removeRoles" => {
            (&[UPDATE, "rbac.*.remove_role_from_key"][..], json!({"keyId": key, "roles": ["r"]}))
        }
        "/v2/permissions.createPermission" => {
            (&["rbac.*.create_permission"][..], json!({"name": "P", "slug": "p.new"}))
        }
        "/v2/permissions.getPermission" => (&["rbac.*.read_permission"][..], json!({"permission": "p"})),
        "/v2/permissions.listPermissions" => (&["rbac.*.read_permission"][..], json!({})),
        "/v2/permissions.deletePermission" => {
            (&["rbac.*.delete_permission"][..], json!({"permission": "p.new"}))
        }
        "/v2/permissions.createRole" => (&["rbac.*.create_role"][..], json!({"name": "role.new"})),
        "/v2/permissions.getRole" => (&["rbac.*.read_role"][..], json!({"role": "r"})),
        "/v2/permissions.listRoles" => (&["rbac.*.read_role"][..], json!({})),
        "/v2/permissions.deleteRole" => (&["rbac.*.delete_role"][..], json!({"role": "role.new"})),
        "/v2/permissions.setRolePermissions" => (
            &["rbac.*.add_permission_to_role", "rbac.*.remove_permission_from_role"][..],
            json!({"role": "r", "permissions": ["p"]}),
        ),
        "/v2/rootKeys.createKey" => {
            (&["rootkey.*.create_key"][..], json!({"permissions": ["api.*.read_key"]}))
        }
        "/v2/rootKeys.listKeys" => (&["rootkey.*.read_key"][..], json!({})),
        "/v2/rootKeys.updateKey" => (&["rootkey.*.update_key"][..], json!({"keyId": root, "name": "x"})),
        "/v2/rootKeys.rerollKey" => (
            &["rootkey.*.create_key", "rootkey.*.update_key"][..],
            json!({"keyId": root, "expiration": null}),
        ),
        "/v2/rootKeys.deleteKey" => (&["rootkey.*.delete_key"][..], json!({"keyId": root})),
        "/v2/webhooks.createEndpoint" => (
            &["webhook.*.create_endpoint"][..],
            json!({"url": "https://93.184.216.34/hook", "events": ["key.created"]}),
        ),
        "/v2/webhooks.getEndpoint" => (&["webhook.*.read_endpoint"][..], json!({"endpointId": "whep_x"})),
        "/v2/webhooks.listEndpoints" => (&["webhook.*.read_endpoint"][..], json!({})),
        "/v2/webhooks.updateEndpoint" => {
            (&["webhook.*.update_endpoint"][..], json!({"endpointId": "whep_x", "enabled": false}))
        }
        "/v2/webhooks.deleteEndpoint" => {
            (&["webhook.*.delete_endpoint"][..], json!({"endpointId": "whep_x"}))
        }
        "/v2/webhooks.rotateSecret" => (&["webhook.*.update_endpoint"][..], json!({"endpointId": "whep_x"})),
        "/v2/webhooks.listDeliveries" => (&["webhook.*.read_endpoint"][..], json!({"endpointId": "whep_x"})),
        "/v2/webhooks.replayDelivery" => {
            (&["webhook.*.update_endpoint"][..], json!({"deliveryId": "whdl_x"}))
        }
        _ => return None,
    })
}

#[test]
fn every_v2_route_checks_method_authentication_and_its_permissions_in_order() {
    let s = TestServer::start();
    let (key, spare) = (s.create_key(), s.create_key());
    s.v2("permissions.createRole", &json!({"name": "r"})).data();
    s.v2("permissions.createPermission", &json!({"name": "p", "slug": "p"})).data();
    let api = |name: &str| {
        s.v2("apis.createApi", &json!({"name": name})).data()["apiId"].as_str().unwrap().to_string()
    };
    let apis = [api("kept"), api("deleted")];
    let root = s.state.rbac.create_root_key("default", &["api.*.read_key".to_string()]).unwrap().0.id;
    let all: Vec<&str> = ROUTES
        .iter()
        .filter_map(|(p, _)| needs(p, &key, &spare, &apis, &root))
        .flat_map(|(perms, _)| perms.iter().copied())
        .chain(["ratelimit.*.create_namespace", "rbac.*.create_permission"])
        .collect();
    let mut checked = 0;
    for (path, allowed) in ROUTES.iter().filter(|(p, _)| p.starts_with("/v2/")) {
        let allow = allowed.join(", ").replace("GET", "GET, HEAD");
        for m in ["GET", "PUT", "DELETE", "PATCH", "POST"].iter().filter(|m| !allow.contains(*m)) {
            let r = s.request(s.client.request(m.parse().unwrap(), s.url(path)));
            r.assert_problem(405, "keygate/application/method_not_allowed");
            assert_eq!(r.header("allow"), Some(allow.as_str()), "{m} {path}");
        }
        // The portal's routes answer 404 without their permissions, or take a session
        // cookie or no credential (API-v2.md §17): tests/tests/suite/portal.rs.
        if path.starts_with("/v2/portal.") {
            continue;
        }
        let Some((perms, body)) = needs(path, &key, &spare, &apis, &root) else {
            assert_eq!(*path, "/v2/liveness", "{path} needs a case here");
            let r = s.request(s.client.get(s.url(path)));
            assert_eq!(r.data(), &json!({"message": "OK"}));
            continue;
        };
        // Authentication before the body, whatever the body.
        s.post_raw(path, None, "not json").assert_problem(400, "unkey/authentication/missing");
        let basic = s.request(s.client.post(s.url(path)).header("authorization", "Basic abc").body("{}"));
        basic.assert_problem(400, "unkey/authentication/malformed");
        s.post_raw(path, Some("kg_unknown_root_key"), "not json")
            .assert_problem(401, "unkey/authentication/key_not_found");
        // Then the body, then the permissions.
        s.post_raw(path, Some(&s.root_key), "{nope")
            .assert_problem(400, "user/bad_request/request_body_unreadable");
        for missing in perms.iter() {
            let others: Vec<&str> = all.iter().copied().filter(|p| p != missing).collect();
            let r = s.post_as(&s.root_key_with(&others), path, &body);
            let detail = r.assert_problem(403, "unkey/authorization/insufficient_permissions");
            assert!(detail.contains(missing), "{path}: {detail}");
            for other in others.iter().filter(|o| !perms.contains(o)) {
                assert!(!detail.contains(other), "{path} names only what is missing: {detail}");
            }
        }
        let r = s.post_as(&s.root_key_with(&all), path, &body);
        assert!(r.status == 200 || r.status == 404, "{path}: {}", r.text);
        if r.status == 404 {
            // (The webhook operations name an endpoint or delivery that does not exist.)
            let named = path.starts_with("/v2/webhooks.")
                && !path.ends_with("Endpoints")
                && !path.ends_with("createEndpoint");
            assert!(matches!(*path, "/v2/keys.whoami") || named, "{path}: {}", r.text);
        }
        checked += 1;
    }
    assert_eq!(checked, 59, "every authenticated v2 route but the portal's was checked");
}

#[test]
fn unknown_v2_paths_are_not_supported_before_authentication() {
    let s = TestServer::start();
    for path in ["/v2/analytics.getGatewayRequests", "/v2/permissions.updateRole", "/v2", "/v2/nope"] {
        let r = s.post_raw(path, None, "x");
        let detail = r.assert_problem(404, "keygate/application/not_supported");
        assert!(detail.contains(path), "{detail}");
    }
}

#[test]
fn errors_are_problem_json_when_the_client_accepts_it() {
    let s = TestServer::start();
    // (The test client sends `Accept: */*` when told nothing, as curl does.)
    let send = |accept: &str| {
        let req = s.client.post(s.url("/v2/keys.getKey")).header("content-type", "application/json");
        s.request(req.header("accept", accept).body("{}"))
    };
    for (accept, expected) in [
        ("application/json", "application/json"),
        ("text/html", "application/json"),
        ("application/problem+json", "application/problem+json"),
        ("text/html, application/*;q=0.8", "application/problem+json"),
        ("*/*", "application/problem+json"),
    ] {
        let r = send(accept);
        r.assert_problem(400, "unkey/authentication/missing");
        assert_eq!(r.header("content-type"), Some(expected), "{accept:?}");
    }
}

#[test]
fn hostile_bodies_on_every_v2_route_get_a_4xx_problem_and_change_nothing() {
    let s = TestServer::start();
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    // Deep nesting in a field every route reads or requires another field beside.
    let deep_obj = format!("{{\"limit\":{}1{}}}", "{\"a\":".repeat(50_000), "}".repeat(50_000));
    let huge = format!("{{\"name\":\"{}\"}}", "x".repeat(2 << 20));
    let bodies: Vec<(String, u16)> = vec![
        ("".into(), 400),
        ("{".into(), 400),
        ("null".into(), 400),
        ("\"str\"".into(), 400),
        ("[1,2".into(), 400),
        ("{\"keyId\":\"a\\u0000b\",\"key\":\"a\\u0000\",\"namespace\":\"n\\u0000\",\"permission\":\"\\u0000\"}".into(), 400),
        ("{\"limit\":1e999999,\"identifier\":1}".into(), 400),
        ("{\"limit\":18446744073709551616123,\"keyId\":[]}".into(), 400),
        ("{\"keyId\":{},\"permissions\":\"a\",\"roles\":7,\"apiId\":null,\"name\":[],\"cursor\":5}".into(), 400),
        (deep.clone(), 400),
        (deep_obj, 400),
        (huge, 413),
    ];
    // A portal session too, for the portal's end-user routes (its cookie goes everywhere).
    let api = s.v2("apis.createApi", &json!({"name": "hostile"})).data()["apiId"].clone();
    s.v2("portal.createPortal", &json!({"slug": "hostile", "displayName": "h", "keyspaceId": api})).data();
    let scopes = json!(["keys:read", "keys:reroll", "analytics:read"]);
    let r = s.v2("portal.createSession", &json!({"portal": "hostile", "externalId": "u", "scopes": scopes}));
    let code = r.data()["url"].as_str().unwrap().split_once("code=").unwrap().1.to_string();
    let r = s.post_raw("/v2/portal.exchangeCode", None, json!({"code": code}).to_string());
    let cookie = format!("portal_session={}", r.data()["accessToken"].as_str().unwrap());
    let before = (s.count("keys", "1 = 1"), s.count("permissions", "1 = 1"), s.count("roles", "1 = 1"));
    for (path, _) in ROUTES.iter().filter(|(p, m)| p.starts_with("/v2/") && m.contains(&"POST")) {
        for (body, status) in &bodies {
            let req = s.client.post(s.url(path)).header("content-type", "application/json");
            let req = req.bearer_auth(&s.root_key).header("cookie", &cookie);
            let r = s.request(req.body(body.clone()));
            assert!((400..500).contains(&r.status), "{path} {}: {}", &body[..body.len().min(40)], r.text);
            // Some bodies are valid JSON of the wrong shape for one route and malformed for
            // none: a 400 or 404 (a well-formed reference to nothing) either way; sizes 413.
            if *status == 413 {
                r.assert_problem(413, "user/bad_request/request_body_too_large");
            } else if r.status == 400 {
                let kind = r.json["error"]["type"].as_str().unwrap().to_string();
                let ok = [
                    "unkey/application/invalid_input",
                    "user/bad_request/request_body_unreadable",
                    "permissions_query_syntax_error",
                ];
                assert!(ok.iter().any(|k| kind.ends_with(k)), "{path}: {}", r.text);
                r.assert_problem(400, kind.split("/errors/").nth(1).unwrap());
            }
        }
        // No Content-Type: 415.
        let req = s.client.post(s.url(path)).bearer_auth(&s.root_key).header("cookie", &cookie);
        let r = s.request(req.body("{}"));
        r.assert_problem(415, "keygate/application/unsupported_media_type");
    }
    let after = (s.count("keys", "1 = 1"), s.count("permissions", "1 = 1"), s.count("roles", "1 = 1"));
    assert_eq!(before, after, "no hostile body wrote anything");
}
