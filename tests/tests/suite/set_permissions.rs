//! `POST /v1/keys.setPermissions`, contract §3, rule by rule.
#![allow(clippy::unwrap_used)]

use keygate_tests::{TestServer, set_body};
use serde_json::json;

const PATH: &str = "/v1/keys.setPermissions";

#[test]
fn rule1_replaces_the_direct_set_and_empty_detaches_all() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &set_body(&key, json!([{"name": "b.read"}, {"name": "a.write"}, {"name": "c.x"}])));
    assert_eq!(r.names(), ["a.write", "b.read", "c.x"]);
    let r = s.post(PATH, &set_body(&key, json!([{"name": "c.x"}, {"name": "d.y"}])));
    assert_eq!(r.names(), ["c.x", "d.y"]);
    assert_eq!(s.key_permissions(&key), ["c.x", "d.y"]);
    // Detached permissions still exist in the workspace.
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["a.write", "b.read", "c.x", "d.y"]);
    let r = s.post(PATH, &set_body(&key, json!([])));
    assert_eq!(r.status, 200);
    assert_eq!(r.json, json!([]));
    assert!(s.key_permissions(&key).is_empty());
}

#[test]
fn rule2_entries_need_an_id_or_a_name_and_both_must_agree() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &set_body(&key, json!([{"name": "ok"}, {"name": "ok2"}, {"create": true}])));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "permissions.2: an entry needs an id or a name");
    let created = s.post(PATH, &set_body(&key, json!([{"name": "p.one"}, {"name": "p.two"}])));
    let one = created.json[0]["id"].as_str().unwrap().to_string();
    let r = s.post(PATH, &set_body(&key, json!([{"id": one, "name": "p.one"}])));
    assert_eq!(r.names(), ["p.one"]);
    let r = s.post(PATH, &set_body(&key, json!([{"id": one, "name": "p.two"}])));
    let msg = r.assert_error(400, "BAD_REQUEST");
    assert!(msg.starts_with("permissions.0: ") && msg.contains(&one), "{msg}");
    assert_eq!(s.key_permissions(&key), ["p.one"], "failed call changed nothing");
    // Different create flags for one name.
    let r = s.post(PATH, &set_body(&key, json!([{"name": "n.x"}, {"name": "n.x", "create": false}])));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("permissions.1: "));
}

#[test]
fn slug_is_an_alias_of_name_and_wins() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(
        PATH,
        &set_body(&key, json!([{"slug": "from.slug", "name": "from.name"}, {"slug": "only.slug"}])),
    );
    assert_eq!(r.names(), ["from.slug", "only.slug"]);
    let r = s.post(PATH, &set_body(&key, json!([{"slug": "bad slug"}])));
    assert!(r.assert_error(400, "BAD_REQUEST").starts_with("permissions.0.slug: "));
}

#[test]
fn rule3_unknown_names_are_created_unless_create_false() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(
        PATH,
        &set_body(&key, json!([{"name": "new.implicit"}, {"name": "new.explicit", "create": true}])),
    );
    assert_eq!(r.names(), ["new.explicit", "new.implicit"]);
    let r = s
        .post(PATH, &set_body(&key, json!([{"name": "new.implicit"}, {"name": "missing", "create": false}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission missing not found");
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["new.explicit", "new.implicit"]);
    // create:false on an existing name is fine.
    let r = s.post(PATH, &set_body(&key, json!([{"name": "new.implicit", "create": false}])));
    assert_eq!(r.names(), ["new.implicit"]);
}

#[test]
fn rule4_unknown_ids_and_keys_are_404() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &set_body(&key, json!([{"id": "perm_doesnotexist"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission perm_doesnotexist not found");
    let r = s.post(PATH, &set_body(&key, json!([{"id": "role_wrongprefix"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission role_wrongprefix not found");
    let r = s.post(PATH, &set_body("key_nope", json!([])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "key key_nope not found");
    let r = s.post(PATH, &set_body("perm_notakey", json!([])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "key perm_notakey not found");
}

#[test]
fn one_unknown_id_among_valid_names_changes_nothing() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post(PATH, &set_body(&key, json!([{"name": "keep.a"}, {"name": "keep.b"}])));
    let audit_before = s.count("audit_events", "1 = 1");
    let r = s.post(
        PATH,
        &set_body(
            &key,
            json!([{"name": "new.a"}, {"name": "keep.a"}, {"id": "perm_missing0001"}, {"name": "new.b"}]),
        ),
    );
    r.assert_error(404, "NOT_FOUND");
    assert_eq!(s.key_permissions(&key), ["keep.a", "keep.b"]);
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["keep.a", "keep.b"]);
    assert_eq!(s.count("audit_events", "1 = 1"), audit_before, "no audit event for a failed call");
}

#[test]
fn rule5_required_root_key_permissions() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post(PATH, &set_body(&key, json!([{"name": "exists"}])));

    let nothing = s.root_key_with(&[]);
    let r = s.post_as(&nothing, PATH, &set_body(&key, json!([{"name": "exists"}])));
    let msg = r.assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("rbac.*.add_permission_to_key"), "{msg}");
    // The 403 for the always-needed permission comes before resolving references.
    let r = s.post_as(&nothing, PATH, &set_body("key_unknown", json!([])));
    r.assert_error(403, "INSUFFICIENT_PERMISSIONS");

    let link_only = s.root_key_with(&["rbac.*.add_permission_to_key", "api.*.read_key"]);
    let r = s.post_as(&link_only, PATH, &set_body(&key, json!([{"name": "exists"}, {"name": "brand.new"}])));
    let msg = r.assert_error(403, "INSUFFICIENT_PERMISSIONS");
    assert!(msg.contains("rbac.*.create_permission"), "{msg}");
    assert!(!msg.contains("add_permission_to_key"), "names only the missing permission: {msg}");
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["exists"], "nothing created");
    assert_eq!(s.key_permissions(&key), ["exists"]);
    // Existing permissions need only the link permission.
    let r = s.post_as(&link_only, PATH, &set_body(&key, json!([])));
    assert_eq!(r.status, 200);

    let both = s.root_key_with(&["rbac.*.add_permission_to_key", "rbac.*.create_permission"]);
    let r = s.post_as(&both, PATH, &set_body(&key, json!([{"name": "brand.new"}])));
    assert_eq!(r.names(), ["brand.new"]);
}

#[test]
fn rule7_duplicates_merge() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(PATH, &set_body(&key, json!([{"name": "d.x"}, {"name": "d.x"}, {"slug": "d.x"}])));
    assert_eq!(r.names(), ["d.x"]);
    let id = r.json[0]["id"].as_str().unwrap().to_string();
    let r = s.post(PATH, &set_body(&key, json!([{"id": id}, {"name": "d.x"}, {"id": id, "name": "d.x"}])));
    assert_eq!(r.names(), ["d.x"]);
    assert_eq!(s.count("permissions", "name = 'd.x'"), 1);
}

#[test]
fn rule7_concurrent_calls_on_one_key_serialize() {
    let s = TestServer::start();
    let key = s.create_key();
    let sets: Vec<Vec<String>> = (0..20).map(|i| (0..4).map(|j| format!("c{i:02}.p{j}")).collect()).collect();
    std::thread::scope(|scope| {
        for set in &sets {
            let (s, key) = (&s, &key);
            scope.spawn(move || {
                let entries: Vec<_> = set.iter().map(|n| json!({"name": n})).collect();
                let r = s.post(PATH, &set_body(key, json!(entries)));
                assert_eq!(r.names(), *set, "each call answers its own set");
            });
        }
    });
    let final_set = s.key_permissions(&key);
    assert!(sets.contains(&final_set), "final set {final_set:?} is exactly one caller's set");
}

#[test]
fn rule7_concurrent_creation_of_one_name_yields_one_permission() {
    let s = TestServer::start();
    let keys: Vec<String> = (0..20).map(|_| s.create_key()).collect();
    std::thread::scope(|scope| {
        for key in &keys {
            let s = &s;
            scope.spawn(move || {
                let r = s.post(PATH, &set_body(key, json!([{"name": "race.new"}])));
                assert_eq!(r.names(), ["race.new"]);
            });
        }
    });
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["race.new"]);
    assert_eq!(s.count("audit_events", "action = 'permission.create'"), 1);
}

#[test]
fn rule8_response_is_sorted_by_name_bytes() {
    let s = TestServer::start();
    let key = s.create_key();
    let r = s.post(
        PATH,
        &set_body(&key, json!([{"name": "b"}, {"name": "a"}, {"name": "B"}, {"name": "_"}, {"name": "A.z"}])),
    );
    assert_eq!(r.names(), ["A.z", "B", "_", "a", "b"]);
    for p in r.json.as_array().unwrap() {
        assert!(p["id"].as_str().unwrap().starts_with("perm_"));
        assert_eq!(p.as_object().unwrap().len(), 2, "exactly id and name");
    }
}

#[test]
fn rule9_audit_events_for_create_attach_detach() {
    let s = TestServer::start();
    let key = s.create_key();
    s.post(PATH, &set_body(&key, json!([{"name": "a1"}, {"name": "a2"}])));
    s.post(PATH, &set_body(&key, json!([{"name": "a2"}, {"name": "a3"}])));
    let key_cond = |action: &str| format!("action = '{action}' AND key_id = '{key}'");
    assert_eq!(s.count("audit_events", "action = 'permission.create'"), 3);
    assert_eq!(s.count("audit_events", &key_cond("key.attach_permission")), 3);
    assert_eq!(s.count("audit_events", &key_cond("key.detach_permission")), 1);
    let actor = s.state.rbac.authenticate(&s.root_key).unwrap().root_key_id.clone();
    assert_eq!(s.count("audit_events", &format!("actor_id = '{actor}'")), 7);
}
