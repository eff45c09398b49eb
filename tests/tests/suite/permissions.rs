//! `permissions.*` (contract §6): create, get, list and delete permissions and roles.
#![allow(clippy::unwrap_used)]

use keygate_tests::{Resp, TestServer, roles_body, set_body};
use serde_json::json;

fn get(s: &TestServer, path: &str, query: &[(&str, &str)]) -> Resp {
    s.request(s.client.get(s.url(path)).query(query).bearer_auth(&s.root_key))
}

#[test]
fn permissions_are_created_once_read_listed_and_deleted_everywhere() {
    let s = TestServer::start();
    let r =
        s.post("/v1/permissions.createPermission", &json!({"name": "docs.read", "description": "Read docs"}));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json.as_object().unwrap().len(), 1);
    let id = r.json["permissionId"].as_str().unwrap().to_string();
    assert!(id.starts_with("perm_"));
    let r = s.post("/v1/permissions.createPermission", &json!({"name": "docs.read"}));
    assert_eq!(r.assert_error(409, "CONFLICT"), "permission docs.read already exists");
    s.post("/v1/permissions.createPermission", &json!({"name": "B.write"}));

    let r = get(&s, "/v1/permissions.getPermission", &[("permissionId", &id)]);
    assert_eq!(r.json, json!({"id": id, "name": "docs.read", "description": "Read docs"}));
    let r = get(&s, "/v1/permissions.listPermissions", &[]);
    let names: Vec<&str> = r.json.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["B.write", "docs.read"], "sorted by bytes");
    assert!(r.json[0].get("description").is_none(), "no description: field absent");

    // Attached to a key and to a role; deleting detaches it from both, in one go.
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"id": id}, {"name": "B.write"}])));
    let role = s.post("/v1/permissions.createRole", &json!({"name": "reader"})).json["roleId"]
        .as_str()
        .unwrap()
        .to_string();
    attach_to_role(&s, &role, &id);
    assert_eq!(
        get(&s, "/v1/permissions.getRole", &[("roleId", &role)]).json["permissions"][0]["name"],
        "docs.read"
    );
    let r = s.post("/v1/permissions.deletePermission", &json!({"permissionId": id}));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    assert_eq!(s.key_permissions(&key), ["B.write"]);
    assert_eq!(get(&s, "/v1/permissions.getRole", &[("roleId", &role)]).json["permissions"], json!([]));
    get(&s, "/v1/permissions.getPermission", &[("permissionId", &id)]).assert_error(404, "NOT_FOUND");
    let r = s.post("/v1/permissions.deletePermission", &json!({"permissionId": id}));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), format!("permission {id} not found"));
    assert_eq!(s.count("audit_events", &format!("action = 'permission.delete' AND resource_id = '{id}'")), 1);
    assert_eq!(s.count("audit_events", "action = 'permission.create'"), 2);
    // The name is free again.
    assert_eq!(s.post("/v1/permissions.createPermission", &json!({"name": "docs.read"})).status, 200);
}

fn attach_to_role(s: &TestServer, role: &str, permission: &str) {
    let r = s.post(
        "/v1/permissions.addPermissionsToRole",
        &json!({"roleId": role, "permissions": [{"id": permission}]}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn roles_are_created_read_with_their_permissions_and_deleted_from_keys() {
    let s = TestServer::start();
    let r = s.post("/v1/permissions.createRole", &json!({"name": "Admin Team", "description": "all"}));
    let admin = r.json["roleId"].as_str().unwrap().to_string();
    assert!(admin.starts_with("role_"));
    let r = s.post("/v1/permissions.createRole", &json!({"name": "Admin Team"}));
    assert_eq!(r.assert_error(409, "CONFLICT"), "role Admin Team already exists");
    let viewer = s.post("/v1/permissions.createRole", &json!({"name": "viewer"})).json["roleId"]
        .as_str()
        .unwrap()
        .to_string();
    let key = s.create_key();
    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "z.last"}, {"name": "a.first"}])));
    let perms = s.get_key(&key).json["permissions"].clone();
    for p in perms.as_array().unwrap() {
        attach_to_role(&s, &admin, p["id"].as_str().unwrap());
    }
    let r = get(&s, "/v1/permissions.getRole", &[("roleId", &admin)]);
    assert_eq!(
        r.json,
        json!({"id": admin, "name": "Admin Team", "description": "all", "permissions": [
            {"id": perms[0]["id"], "name": "a.first"}, {"id": perms[1]["id"], "name": "z.last"}]})
    );
    let r = get(&s, "/v1/permissions.listRoles", &[]);
    let names: Vec<&str> = r.json.as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Admin Team", "viewer"]);
    assert_eq!(r.json[0]["permissions"].as_array().unwrap().len(), 2);
    assert_eq!(r.json[1]["permissions"], json!([]));

    s.post("/v1/keys.addRoles", &roles_body(&key, json!([{"id": admin}, {"id": viewer}])));
    let r = s.post("/v1/permissions.deleteRole", &json!({"roleId": admin}));
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    assert_eq!(s.key_roles(&key), ["viewer"]);
    assert_eq!(s.key_permissions(&key), ["a.first", "z.last"], "the permissions stay");
    get(&s, "/v1/permissions.getRole", &[("roleId", &admin)]).assert_error(404, "NOT_FOUND");
    assert_eq!(s.count("audit_events", "action = 'role.delete'"), 1);
}

#[test]
fn bad_input_wrong_ids_and_other_workspaces_are_refused() {
    let s = TestServer::start();
    let cases = [
        (json!({}), "name: is required"),
        (json!({"name": ""}), "name: must not be empty"),
        (
            json!({"name": "bad name"}),
            "name: invalid character ' '; permission names use A-Z a-z 0-9 . _ - : *",
        ),
        (
            json!({"name": "ok", "description": "d".repeat(1025)}),
            "description: must be at most 1024 characters",
        ),
        (json!({"name": 5}), "name: invalid type: integer `5`, expected a string"),
    ];
    for (body, expected) in cases {
        let r = s.post("/v1/permissions.createPermission", &body);
        assert_eq!(r.assert_error(400, "BAD_REQUEST"), expected, "for {body}");
    }
    let r = s.post("/v1/permissions.createRole", &json!({"name": "a\u{0007}"}));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "name: must not contain control characters");
    let r = get(&s, "/v1/permissions.getPermission", &[]);
    assert_eq!(
        r.assert_error(400, "BAD_REQUEST"),
        "permissionId: is required (query parameter ?permissionId=...)"
    );
    let r = get(&s, "/v1/permissions.getRole", &[("roleId", "role_a"), ("roleId", "role_b")]);
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roleId: given more than once in the query");
    let r = get(&s, "/v1/permissions.getRole", &[("roleId", "")]);
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roleId: must not be empty");
    get(&s, "/v1/permissions.getRole", &[("roleId", "perm_x")]).assert_error(404, "NOT_FOUND");
    let r = s.post("/v1/permissions.deleteRole", &json!({"permissionId": "x"}));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roleId: is required");
    assert_eq!(s.count("permissions", "1 = 1") + s.count("roles", "1 = 1"), 0, "nothing was created");

    // Another workspace sees none of it, and cannot delete it.
    let id = s.post("/v1/permissions.createPermission", &json!({"name": "mine"})).json["permissionId"]
        .as_str()
        .unwrap()
        .to_string();
    let ws = s.create_workspace("other");
    let outsider = s.root_key_in(&ws, &["*"]);
    let r = s.request(
        s.client
            .get(s.url("/v1/permissions.getPermission"))
            .query(&[("permissionId", &id)])
            .bearer_auth(&outsider),
    );
    r.assert_error(404, "NOT_FOUND");
    let r = s.request(s.client.get(s.url("/v1/permissions.listPermissions")).bearer_auth(&outsider));
    assert_eq!(r.json, json!([]));
    s.post_as(&outsider, "/v1/permissions.deletePermission", &json!({"permissionId": id}))
        .assert_error(404, "NOT_FOUND");
    // The same name is free in the other workspace.
    let r = s.post_as(&outsider, "/v1/permissions.createPermission", &json!({"name": "mine"}));
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn concurrent_creation_of_one_name_succeeds_once() {
    let s = TestServer::start();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..10)
            .map(|_| {
                scope.spawn(|| s.post("/v1/permissions.createPermission", &json!({"name": "race"})).status)
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert_eq!(statuses.iter().filter(|&&c| c == 200).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&c| c == 409).count(), 9, "{statuses:?}");
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["race"]);
}

#[test]
fn a_roles_permissions_are_added_set_and_removed_and_count_for_its_keys() {
    let s = TestServer::start();
    let role = s.post("/v1/permissions.createRole", &json!({"name": "editor"})).json["roleId"]
        .as_str()
        .unwrap()
        .to_string();
    let body = |perms: serde_json::Value| json!({"roleId": role, "permissions": perms});
    let r = s.post(
        "/v1/permissions.addPermissionsToRole",
        &body(json!([{"name": "docs.read"}, {"slug": "docs.write"}])),
    );
    assert_eq!(r.names(), ["docs.read", "docs.write"], "missing names are created, as for keys");
    let r = s.post("/v1/permissions.addPermissionsToRole", &body(json!([{"name": "docs.list"}])));
    assert_eq!(r.names(), ["docs.list", "docs.read", "docs.write"], "additive");
    let r = s.post("/v1/permissions.addPermissionsToRole", &body(json!([{"name": "x", "create": false}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission x not found");

    // A key holding the role has the role's permissions in verifyKey.
    let created = s.post("/v1/keys.createKey", &json!({"roles": ["editor"]}));
    let secret = created.json["key"].as_str().unwrap().to_string();
    let verify = |q: &str| {
        let r = s.request(
            s.client
                .post(s.url("/v1/keys.verifyKey"))
                .json(&json!({"key": secret, "authorization": {"permissions": q}})),
        );
        r.json["valid"].as_bool().unwrap()
    };
    assert!(verify("docs.write"));

    let r = s.post("/v1/permissions.setRolePermissions", &body(json!([{"name": "docs.read"}])));
    assert_eq!(r.names(), ["docs.read"]);
    assert!(!verify("docs.write"), "a change of the role applies to its keys at once");
    let r = s.post(
        "/v1/permissions.removePermissionsFromRole",
        &body(json!([{"name": "docs.read"}, {"name": "docs.list"}])),
    );
    assert_eq!((r.status, &r.json), (200, &json!({})), "{}", r.text);
    assert!(!verify("docs.read"));
    let role_view = get(&s, "/v1/permissions.getRole", &[("roleId", &role)]);
    assert_eq!(role_view.json["permissions"], json!([]));
    assert_eq!(s.workspace_names("permissions", &s.workspace_id), ["docs.list", "docs.read", "docs.write"]);
    let attached = format!("action = 'role.attach_permission' AND role_id = '{role}' AND key_id IS NULL");
    assert_eq!(s.count("audit_events", &attached), 3);
    assert_eq!(
        s.count("audit_events", &format!("action = 'role.detach_permission' AND role_id = '{role}'")),
        3
    );

    // Refusals change nothing.
    let r = s.post("/v1/permissions.removePermissionsFromRole", &body(json!([{"name": "nope"}])));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "permission nope not found");
    let r =
        s.post("/v1/permissions.setRolePermissions", &json!({"roleId": "role_missing", "permissions": []}));
    assert_eq!(r.assert_error(404, "NOT_FOUND"), "role role_missing not found");
    let r = s.post("/v1/permissions.setRolePermissions", &json!({"roleId": "", "permissions": []}));
    assert_eq!(r.assert_error(400, "BAD_REQUEST"), "roleId: must not be empty");
    let linker = s.root_key_with(&["rbac.*.add_permission_to_role"]);
    let r = s.post_as(&linker, "/v1/permissions.addPermissionsToRole", &body(json!([{"name": "brand.new"}])));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.create_permission"));
    let key_linker = s.root_key_with(&["rbac.*.add_permission_to_key", "rbac.*.create_permission"]);
    let r =
        s.post_as(&key_linker, "/v1/permissions.addPermissionsToRole", &body(json!([{"name": "docs.read"}])));
    assert!(r.assert_error(403, "INSUFFICIENT_PERMISSIONS").contains("rbac.*.add_permission_to_role"));
    let ws = s.create_workspace("other");
    let outsider = s.root_key_in(&ws, &["*"]);
    let r =
        s.post_as(&outsider, "/v1/permissions.addPermissionsToRole", &body(json!([{"name": "docs.read"}])));
    r.assert_error(404, "NOT_FOUND");
    assert_eq!(get(&s, "/v1/permissions.getRole", &[("roleId", &role)]).json["permissions"], json!([]));
}

#[test]
fn deleting_a_permission_while_others_link_it_never_fails_with_a_5xx() {
    let s = TestServer::start();
    let key = s.create_key();
    let role = s.post("/v1/permissions.createRole", &json!({"name": "r"})).json["roleId"]
        .as_str()
        .unwrap()
        .to_string();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let linker = scope.spawn(|| {
            let mut seen = Vec::new();
            for _ in 0..40 {
                seen.push(
                    s.post("/v1/keys.setPermissions", &set_body(&key, json!([{"name": "victim"}]))).status,
                );
                let r = s.post(
                    "/v1/permissions.addPermissionsToRole",
                    &json!({"roleId": role, "permissions": [{"name": "victim"}]}),
                );
                seen.push(r.status);
            }
            seen
        });
        let deleter = scope.spawn(|| {
            let mut seen = Vec::new();
            for _ in 0..40 {
                let all = get(&s, "/v1/permissions.listPermissions", &[]);
                if let Some(p) = all.json.as_array().unwrap().first() {
                    let id = p["id"].as_str().unwrap();
                    seen.push(
                        s.post("/v1/permissions.deletePermission", &json!({"permissionId": id})).status,
                    );
                }
            }
            seen
        });
        let mut all = linker.join().unwrap();
        all.extend(deleter.join().unwrap());
        all
    });
    assert!(statuses.iter().all(|&c| c == 200 || c == 404), "{statuses:?}");
    // Whatever the interleaving, the end state is consistent: every link names a live permission.
    let dangling = "permission_id NOT IN (SELECT id FROM permissions)";
    assert_eq!(s.count("keys_permissions", dangling) + s.count("roles_permissions", dangling), 0);
}
