//! `GET /v1/audit.listEvents` (keygate's own, docs/api.md): every write's events, read back
//! with filters and pages, newest first, within the caller's workspace only.
#![allow(clippy::unwrap_used)]

use keygate_tests::{T0, TestServer};
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn list(s: &TestServer, token: &str, query: &[(&str, &str)]) -> keygate_tests::Resp {
    s.request(s.client.get(s.url("/v1/audit.listEvents")).query(query).bearer_auth(token))
}

fn events(r: &keygate_tests::Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["events"].as_array().unwrap().clone()
}

fn kinds(events: &[Value]) -> BTreeSet<String> {
    events.iter().map(|e| e["event"].as_str().unwrap().to_string()).collect()
}

#[test]
fn every_write_is_read_back_with_filters_and_pages_newest_first() {
    let s = TestServer::start();
    let key =
        s.post("/v1/keys.createKey", &json!({"apiId": "api_a"})).json["keyId"].as_str().unwrap().to_string();
    s.clock.advance(1_000);
    s.post("/v1/keys.setPermissions", &json!({"keyId": key, "permissions": [{"name": "a"}, {"name": "b"}]}));
    s.post("/v1/keys.addRoles", &json!({"keyId": key, "roles": [{"name": "r", "create": true}]}));
    s.clock.advance(1_000);
    s.v2("permissions.createRole", &json!({"name": "editor", "permissions": ["w"]})).data();
    s.v2("keys.setPermissions", &json!({"keyId": key, "permissions": ["b"]})).data();
    s.limit(json!({"namespace": "api", "identifier": "x", "limit": 1, "duration": 60_000}));
    s.v2(
        "ratelimit.setOverride",
        &json!({"namespace": "api", "identifier": "vip", "limit": 9, "duration": 60_000}),
    )
    .data();
    s.v2("ratelimit.deleteOverride", &json!({"namespace": "api", "identifier": "vip"})).data();
    s.clock.advance(1_000);
    s.v2("permissions.deleteRole", &json!({"role": "editor"})).data();
    s.v2("keys.deleteKey", &json!({"keyId": key})).data();

    let auditor = s.root_key_with(&["audit.*.read"]);
    let all = events(&list(&s, &auditor, &[]));
    let expected: BTreeSet<String> = [
        "api.create",
        "key.create",
        "permission.create",
        "key.attach_permission",
        "key.detach_permission",
        "role.create",
        "key.attach_role",
        "role.attach_permission",
        "ratelimit_namespace.create",
        "ratelimit_override.set",
        "ratelimit_override.delete",
        "role.delete",
        "key.delete",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(kinds(&all), expected, "{all:#?}");
    let times: Vec<i64> = all.iter().map(|e| e["time"].as_i64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first: {times:?}");
    // The oldest: the key and the API its apiId named, created with it.
    let oldest: BTreeSet<String> = kinds(&all[all.len() - 2..]);
    assert_eq!(oldest, ["api.create", "key.create"].iter().map(|s| s.to_string()).collect());
    assert_eq!(all.first().unwrap()["time"], T0 + 3_000);
    let bootstrap_actor = all[0]["actorId"].as_str().unwrap().to_string();
    assert!(bootstrap_actor.starts_with("rk_"));
    assert!(
        all.iter().all(|e| e["id"].as_str().unwrap().starts_with("evt_") && e["resourceType"].is_string())
    );

    // Filters: type, actor, resource, time range.
    let deleted = events(&list(&s, &auditor, &[("event", "key.delete")]));
    assert_eq!(deleted.len(), 1);
    assert_eq!((&deleted[0]["resourceId"], &deleted[0]["keyId"]), (&json!(key), &json!(key)));
    let about_key = events(&list(&s, &auditor, &[("resourceId", &key)]));
    assert_eq!(kinds(&about_key), ["key.create", "key.delete"].iter().map(|s| s.to_string()).collect());
    assert_eq!(events(&list(&s, &auditor, &[("actor", &bootstrap_actor)])).len(), all.len());
    assert!(events(&list(&s, &auditor, &[("actor", "rk_someone_else")])).is_empty());
    let (from, until) = ((T0 + 1_000).to_string(), (T0 + 2_000).to_string());
    let second = events(&list(&s, &auditor, &[("since", &from), ("until", &until)]));
    assert!(second.iter().all(|e| e["time"] == T0 + 1_000), "{second:#?}");
    assert_eq!(
        kinds(&second),
        ["key.attach_permission", "key.attach_role", "permission.create", "role.create"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );

    // Pages of 3: every event once, in the same order as the single page.
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = vec![("limit", "3".to_string())];
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let q: Vec<(&str, &str)> = q.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = list(&s, &auditor, &q);
        let page = events(&r);
        assert!(page.len() <= 3);
        walked.extend(page);
        match r.json["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(walked, all);
    for bad in [&[("limit", "0")][..], &[("limit", "101")], &[("cursor", "nope")], &[("since", "x")]] {
        list(&s, &auditor, bad).assert_error(400, "BAD_REQUEST");
    }
}

#[test]
fn another_workspace_sees_none_and_the_permission_is_needed() {
    let s = TestServer::start();
    s.post("/v1/keys.createKey", &json!({"apiId": "api_a"}));
    let other = s.create_workspace("other");
    let foreign = s.root_key_in(&other, &["audit.*.read"]);
    assert!(events(&list(&s, &foreign, &[])).is_empty());
    let without = s.root_key_with(&["api.*.read_key"]);
    let msg = list(&s, &without, &[]).assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("audit.*.read"), "{msg}");
    list(&s, "kg_unknown_root_key_000000000", &[]).assert_error(401, "UNAUTHORIZED");
}

#[test]
fn retention_deletes_old_events_a_bounded_batch_at_a_time() {
    let s = TestServer::start();
    for i in 0..7 {
        s.post("/v1/permissions.createPermission", &json!({"name": format!("p{i}")}));
        s.clock.advance(1_000);
    }
    let auditor = s.root_key_with(&["audit.*.read"]);
    assert_eq!(events(&list(&s, &auditor, &[])).len(), 7);
    let cutoff = i64::try_from(T0 + 5_000).unwrap();
    assert_eq!(s.state.rbac.prune_audit_events(cutoff, 3).unwrap(), 3, "at most the batch");
    assert_eq!(s.state.rbac.prune_audit_events(cutoff, 3).unwrap(), 2, "then the rest before the cutoff");
    assert_eq!(s.state.rbac.prune_audit_events(cutoff, 3).unwrap(), 0);
    let left = events(&list(&s, &auditor, &[]));
    assert!(left.iter().all(|e| e["time"].as_i64().unwrap() >= cutoff), "{left:#?}");
    assert_eq!(left.len(), 2);
}
