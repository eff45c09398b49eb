//! `POST /v1/keys.createKey` and `POST /v1/keys.deleteKey` (contract §6), read back through
//! `keys.getKey`.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};

const CREATE: &str = "/v1/keys.createKey";
const DELETE: &str = "/v1/keys.deleteKey";

fn key_id(r: &keygate_tests::Resp) -> String {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["keyId"].as_str().unwrap().to_string()
}

#[test]
fn create_returns_the_id_and_the_secret_once_and_stores_the_fields() {
    let s = TestServer::start();
    let r = s.post(
        CREATE,
        &json!({"apiId": "api_123", "name": "checkout", "prefix": "sk_live", "meta": {"team": "pay", "tier": 2},
                "expires": T0 + 86_400_000, "enabled": false, "byteLength": 32, "ownerId": "u1",
                "ratelimit": {"type": "fast", "limit": 10, "duration": 1000}}),
    );
    assert_eq!(r.json.as_object().unwrap().len(), 2, "exactly keyId and key: {}", r.text);
    let id = key_id(&r);
    assert!(id.starts_with("key_"));
    let secret = r.json["key"].as_str().unwrap();
    assert!(secret.starts_with("sk_live_") && secret.len() >= "sk_live_".len() + 22, "{secret}");

    let got = s.get_key(&id);
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json["id"], id);
    assert_eq!(got.json["name"], "checkout");
    assert_eq!(got.json["meta"], json!({"team": "pay", "tier": 2}));
    assert_eq!(got.json["enabled"], false);
    assert_eq!(got.json["expires"], T0 + 86_400_000);
    assert_eq!(got.json["permissions"], json!([]));
    assert!(!got.text.contains(secret), "the secret is never shown again");
    // Stored hashed: the secret appears nowhere in the database.
    assert_eq!(s.count("keys", &format!("hash = '{secret}' OR prefix = '{secret}'")), 0);
    assert_eq!(s.count("audit_events", &format!("action = 'key.create' AND key_id = '{id}'")), 1);

    // Defaults: enabled, no name, no meta, no expiry, prefix kg.
    let r = s.post(CREATE, &json!({"apiId": "api_123"}));
    let id = key_id(&r);
    assert!(r.json["key"].as_str().unwrap().starts_with("kg_"));
    let got = s.get_key(&id);
    assert_eq!(
        (&got.json["enabled"], &got.json["name"], &got.json["meta"], &got.json["expires"]),
        (&json!(true), &Value::Null, &Value::Null, &Value::Null)
    );
    // `null` means absent; the body may omit apiId.
    let r = s.post(CREATE, &json!({"name": null, "meta": null, "enabled": null, "permissions": null}));
    assert_eq!(s.get_key(&key_id(&r)).json["enabled"], true);
}

#[test]
fn create_with_permissions_creates_missing_names_and_roles_must_exist() {
    let s = TestServer::start();
    // Roles exist only once created (here through addRoles on another key).
    let other = s.create_key();
    let r =
        s.post("/v1/keys.addRoles", &json!({"keyId": other, "roles": [{"name": "viewer", "create": true}]}));
    assert_eq!(r.status, 200, "{}", r.text);

    let r = s
        .post(CREATE, &json!({"permissions": ["docs.read", "docs.write", "docs.read"], "roles": ["viewer"]}));
    let id = key_id(&r);
    assert_eq!(s.key_permissions(&id), ["docs.read", "docs.write"]);
    assert_eq!(s.key_roles(&id), ["viewer"]);
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["docs.read", "docs.write"]);
    assert_eq!(s.count("audit_events", &format!("action = 'key.attach_permission' AND key_id = '{id}'")), 2);
    assert_eq!(s.count("audit_events", "action = 'permission.create'"), 2);

    // An unknown role: 404, and nothing is created: no key, no permission, no event.
    let (keys, audit) = (s.count("keys", "1 = 1"), s.count("audit_events", "1 = 1"));
    let r = s.post(CREATE, &json!({"permissions": ["billing.read"], "roles": ["viewer", "admin"]}));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role admin not found");
    assert_eq!(s.count("keys", "1 = 1"), keys);
    assert_eq!(s.count("audit_events", "1 = 1"), audit);
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["docs.read", "docs.write"]);
}

#[test]
fn create_needs_create_key_and_the_link_permissions() {
    let s = TestServer::start();
    let none = s.root_key_with(&["api.*.read_key"]);
    let r = s.post_as(&none, CREATE, &json!({"name": "x"}));
    assert_eq!(
        r.assert_error(403, "INSUFFICIENT_PERMISSIONS"),
        "the root key lacks the permission api.*.create_key"
    );
    // `api.<apiId>.create_key` is enough for that apiId only.
    let scoped = s.root_key_with(&["api.api_1.create_key"]);
    assert_eq!(s.post_as(&scoped, CREATE, &json!({"apiId": "api_1"})).status, 200);
    s.post_as(&scoped, CREATE, &json!({"apiId": "api_2"})).assert_error(403, "INSUFFICIENT_PERMISSIONS");

    let keys = s.count("keys", "1 = 1");
    let create_only = s.root_key_with(&["api.*.create_key"]);
    let msg = s
        .post_as(&create_only, CREATE, &json!({"permissions": ["a.b"], "roles": ["r"]}))
        .assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("rbac.*.add_permission_to_key") && msg.contains("rbac.*.add_role_to_key"), "{msg}");
    // Attaching existing permissions needs no create_permission; a new name does.
    let linker = s.root_key_with(&["api.*.create_key", "rbac.*.add_permission_to_key"]);
    let msg = s
        .post_as(&linker, CREATE, &json!({"permissions": ["brand.new"]}))
        .assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("rbac.*.create_permission"), "{msg}");
    assert_eq!(s.count("keys", "1 = 1"), keys, "no key was created by a refused call");
    assert!(s.workspace_names("permissions", &s.workspace_id).is_empty());
    let r = s.post(CREATE, &json!({"permissions": ["brand.new"]}));
    assert_eq!(r.status, 200);
    let r = s.post_as(&linker, CREATE, &json!({"permissions": ["brand.new"]}));
    assert_eq!(s.key_permissions(&key_id(&r)), ["brand.new"]);
    // Unauthenticated: 401 whatever the body.
    let r = s.post_as("kg_wrong", CREATE, &json!({"prefix": "!!"}));
    r.assert_error(401, "UNAUTHORIZED");
}

#[test]
fn create_rejects_bad_input_with_a_located_400() {
    let s = TestServer::start();
    let cases = [
        (json!({"name": ""}), "name: must not be empty"),
        (json!({"name": "a\u{0001}"}), "name: must not contain control characters"),
        (json!({"prefix": "toolongprefix"}), "prefix: must be at most 8 characters"),
        (json!({"prefix": "a-b"}), "prefix: use only A-Z a-z 0-9 and _"),
        (json!({"prefix": ""}), "prefix: must not be empty"),
        (json!({"expires": 1.5}), "expires: must be an integer"),
        (json!({"expires": -1}), "expires: must be >= 0"),
        (json!({"expires": 18_446_744_073_709_551_615u64}), "expires: must be <= 9007199254740991"),
        (
            json!({"permissions": ["ok", "bad name"]}),
            "permissions.1: invalid character ' '; permission names use A-Z a-z 0-9 . _ - : *",
        ),
        (json!({"roles": [""]}), "roles.0: must not be empty"),
        (json!({"permissions": "a.b"}), "permissions: invalid type: string \"a.b\", expected a sequence"),
        (json!({"roles": [1]}), "roles.0: invalid type: integer `1`, expected a string"),
        (json!({"meta": [1]}), "meta: invalid type: sequence, expected a map"),
        (json!({"enabled": "yes"}), "enabled: invalid type: string \"yes\", expected a boolean"),
    ];
    for (body, expected) in cases {
        let r = s.post(CREATE, &body);
        assert_eq!(r.assert_error(400, "BAD_REQUEST"), expected, "for {body}");
    }
    let big = "x".repeat(70 * 1024);
    let r = s.post(CREATE, &json!({"meta": {"blob": big}}));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("meta: must be at most 65536 bytes"));
    let plain = s.client.post(s.url(CREATE)).bearer_auth(&s.root_key).header("content-type", "text/plain");
    let r = s.request(plain.body("{}"));
    r.assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    let hostile = [
        String::new(),
        "[]".into(),
        "null".into(),
        "{\"name\": \"a\",}".into(),
        "{\"expires\": 18446744073709551616}".into(),
        "{\"expires\": 1e400}".into(),
        "{\"name\": \"\\ud800\"}".into(),
        format!("{{\"meta\": {}1{}}}", "{\"a\":".repeat(5_000), "}".repeat(5_000)),
        format!("{{\"permissions\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000)),
    ];
    for body in hostile {
        s.post_raw(CREATE, Some(&s.root_key), body).assert_error(400, "BAD_REQUEST");
    }
    assert_eq!(s.count("keys", "1 = 1"), 0, "no bad request created a key");
}

#[test]
fn delete_removes_the_key_and_its_links_in_its_workspace_only() {
    let s = TestServer::start();
    let id = key_id(&s.post(CREATE, &json!({"permissions": ["a.read"]})));
    let other_ws = s.create_workspace("other");
    let outsider = s.root_key_in(&other_ws, &["*"]);
    let r = s.post_as(&outsider, DELETE, &json!({"keyId": id}));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), format!("key {id} not found"));
    let reader = s.root_key_with(&["api.*.read_key"]);
    let r = s.post_as(&reader, DELETE, &json!({"keyId": id}));
    assert_eq!(
        r.assert_error(403, "INSUFFICIENT_PERMISSIONS"),
        "the root key lacks the permission api.*.delete_key"
    );
    assert_eq!(s.get_key(&id).status, 200, "refused deletes change nothing");

    let r = s.post(DELETE, &json!({"keyId": id, "permanent": true}));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    s.get_key(&id).assert_error(404, "NOT_FOUND");
    assert_eq!(s.count("keys_permissions", &format!("key_id = '{id}'")), 0, "links go with the key");
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["a.read"], "permissions stay");
    assert_eq!(s.count("audit_events", &format!("action = 'key.delete' AND key_id = '{id}'")), 1);
    // Deleting again, or a key that never existed: 404.
    s.post(DELETE, &json!({"keyId": id})).assert_error(404, "NOT_FOUND");
    s.post(DELETE, &json!({"keyId": "perm_123"})).assert_error(404, "NOT_FOUND");
    let r = s.post(DELETE, &json!({}));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "keyId: is required");
    // Other calls on the deleted key: 404.
    let r = s.post("/v1/keys.setPermissions", &json!({"keyId": id, "permissions": []}));
    r.assert_error(404, "NOT_FOUND");
}

#[test]
fn concurrent_creates_share_one_new_permission() {
    let s = TestServer::start();
    let ids: Vec<String> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..10)
            .map(|_| scope.spawn(|| key_id(&s.post(CREATE, &json!({"permissions": ["shared.new"]})))))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["shared.new"]);
    for id in &ids {
        assert_eq!(s.key_permissions(id), ["shared.new"]);
    }
    assert_eq!(s.count("audit_events", "action = 'permission.create'"), 1);
}

const VERIFY: &str = "/v1/keys.verifyKey";

/// keys.verifyKey without any Authorization header: the key's secret is the credential.
fn verify(s: &TestServer, body: Value) -> keygate_tests::Resp {
    s.request(s.client.post(s.url(VERIFY)).json(&body))
}

#[test]
fn verify_answers_valid_with_the_effective_permissions_and_roles() {
    let s = TestServer::start();
    let other = s.create_key();
    let r =
        s.post("/v1/keys.addRoles", &json!({"keyId": other, "roles": [{"name": "editor", "create": true}]}));
    let editor = r.json[0]["id"].as_str().unwrap().to_string();
    let r = s.post(
        CREATE,
        &json!({"apiId": "api_x", "name": "svc", "meta": {"a": 1}, "permissions": ["docs.read", "B.x"], "roles": ["editor"]}),
    );
    let (id, secret) = (key_id(&r), r.json["key"].as_str().unwrap().to_string());
    // A permission the key holds only through its role.
    let r = s.post(
        "/v1/permissions.addPermissionsToRole",
        &json!({"roleId": editor, "permissions": [{"name": "docs.write"}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);

    let r = verify(&s, json!({"key": secret, "apiId": "api_x"}));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["valid"], true);
    assert_eq!(r.json["code"], "VALID");
    assert_eq!(r.json["keyId"], id);
    assert_eq!(r.json["apiId"], "api_x");
    assert_eq!(r.json["name"], "svc");
    assert_eq!(r.json["meta"], json!({"a": 1}));
    assert_eq!(r.json["enabled"], true);
    assert_eq!(
        r.json["permissions"],
        json!(["B.x", "docs.read", "docs.write"]),
        "sorted by bytes, roles included"
    );
    assert_eq!(r.json["roles"], json!(["editor"]));

    let check = |q: Value| {
        let r = verify(&s, json!({"key": secret, "authorization": {"permissions": q}}));
        assert_eq!(r.status, 200, "{}", r.text);
        (r.json["valid"].as_bool().unwrap(), r.json["code"].as_str().unwrap().to_string())
    };
    assert_eq!(check(json!("docs.read")), (true, "VALID".into()));
    assert_eq!(check(json!("docs.write")), (true, "VALID".into()), "through the role");
    assert_eq!(check(json!("docs.delete")), (false, "INSUFFICIENT_PERMISSIONS".into()));
    assert_eq!(check(json!({"and": ["docs.read", "docs.write"]})), (true, "VALID".into()));
    assert!(!check(json!({"and": ["docs.read", "docs.delete"]})).0);
    assert_eq!(check(json!({"or": ["docs.delete", {"and": ["B.x", "docs.read"]}]})), (true, "VALID".into()));
    assert!(!check(json!({"or": ["docs.delete", "b.x"]})).0, "case-sensitive");
    assert!(!check(json!("docs.*")).0, "compared literally, no patterns");

    // A change is visible to the next verification.
    s.post("/v1/keys.setPermissions", &json!({"keyId": id, "permissions": []}));
    assert!(!check(json!("docs.read")).0);
    assert_eq!(check(json!("docs.write")), (true, "VALID".into()), "the role's permission stays");
    s.post(DELETE, &json!({"keyId": id}));
    let r = verify(&s, json!({"key": secret}));
    let request_id = r.header("unkey-request-id").unwrap();
    assert!(request_id.starts_with("req_"));
    assert_eq!(
        r.json,
        json!({"requestId": request_id, "valid": false, "code": "NOT_FOUND", "permissions": [], "roles": []})
    );
}

#[test]
fn verify_says_not_found_disabled_and_expired() {
    let s = TestServer::start();
    let r = verify(&s, json!({"key": "kg_never_issued"}));
    assert_eq!((r.status, &r.json["valid"], &r.json["code"]), (200, &json!(false), &json!("NOT_FOUND")));
    assert!(r.json.get("keyId").is_none());
    // A root key is not a key.
    assert_eq!(verify(&s, json!({"key": s.root_key})).json["code"], "NOT_FOUND");
    assert_eq!(verify(&s, json!({"key": ""})).json["code"], "NOT_FOUND");

    let disabled = s.post(CREATE, &json!({"enabled": false}));
    let r = verify(&s, json!({"key": disabled.json["key"]}));
    assert_eq!((&r.json["valid"], &r.json["code"]), (&json!(false), &json!("DISABLED")));
    assert_eq!(r.json["keyId"], disabled.json["keyId"]);

    let expiring = s.post(CREATE, &json!({"expires": T0 + 60_000}));
    let secret = expiring.json["key"].clone();
    assert_eq!(verify(&s, json!({"key": secret})).json["code"], "VALID");
    s.clock.set(T0 + 60_000);
    let r = verify(&s, json!({"key": secret}));
    assert_eq!(
        (&r.json["valid"], &r.json["code"], &r.json["expires"]),
        (&json!(false), &json!("EXPIRED"), &json!(T0 + 60_000))
    );
    // A past expiry is accepted (as in Unkey's v2 API): the key is expired from the start.
    let past = s.post(CREATE, &json!({"expires": 1_000}));
    assert_eq!(past.status, 200, "{}", past.text);
    assert_eq!(verify(&s, json!({"key": past.json["key"]})).json["code"], "EXPIRED");
}

#[test]
fn verify_rejects_malformed_queries_with_a_located_400() {
    let s = TestServer::start();
    let q = |permissions: Value| json!({"key": "kg_x", "authorization": {"permissions": permissions}});
    let deep = (0..200).fold(json!("a.b"), |q, _| json!({"and": [q]}));
    let wide: Vec<Value> = (0..1001).map(|i| json!(format!("p{i}"))).collect();
    let cases = [
        (json!({}), "key: is required"),
        (json!({"key": 5}), "key: invalid type: integer `5`, expected a string"),
        (
            q(json!("bad name")),
            "authorization.permissions: invalid character ' '; permission names use A-Z a-z 0-9 . _ - : *",
        ),
        (q(json!("")), "authorization.permissions: must not be empty"),
        (
            q(json!(5)),
            "authorization.permissions: must be a permission name or an object with one \"and\" or \"or\" list",
        ),
        (
            q(json!({"and": ["a"], "or": ["b"]})),
            "authorization.permissions: must be a permission name or an object with one \"and\" or \"or\" list",
        ),
        (
            q(json!({"xor": ["a"]})),
            "authorization.permissions: must be a permission name or an object with one \"and\" or \"or\" list",
        ),
        (q(json!({"and": []})), "authorization.permissions.and: must not be empty"),
        (q(json!({"or": "a"})), "authorization.permissions.or: must be a list"),
        (
            q(json!({"or": ["a", {"and": ["b", 7]}]})),
            "authorization.permissions.or.1.and.1: must be a permission name or an object with one \"and\" or \"or\" list",
        ),
        (q(json!({"or": wide})), "authorization.permissions.or.999: a query holds at most 1000 entries"),
    ];
    for (body, expected) in cases {
        let r = verify(&s, body.clone());
        assert_eq!(r.assert_error(400, "BAD_REQUEST"), expected, "for {body}");
    }
    // Nesting deeper than the JSON parser's limit: still a 400, never a crash.
    verify(&s, q(deep)).assert_error(400, "BAD_REQUEST");
    let r = s.request(s.client.post(s.url(VERIFY)).header("content-type", "text/plain").body("{}"));
    r.assert_error(415, "UNSUPPORTED_MEDIA_TYPE");
    // No permissions asked: just the key's state.
    let r = verify(&s, json!({"key": "kg_x", "authorization": {}}));
    assert_eq!(r.json["code"], "NOT_FOUND");
}
