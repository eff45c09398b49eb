//! v2 `permissions.*` (API-v2.md §4, §1.3, §1.4): permissions and roles by slug, name or
//! id, pages that visit every item once, and one data model with v1.
#![allow(clippy::unwrap_used)]

use keygate_tests::TestServer;
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn id_of(r: &keygate_tests::Resp, field: &str) -> String {
    r.data()[field].as_str().unwrap().to_string()
}

#[test]
fn permissions_are_created_read_by_slug_or_id_and_deleted_through_either_api() {
    let s = TestServer::start();
    let created = s.v2(
        "permissions.createPermission",
        &json!({"name": "Read documents", "slug": "documents.read", "description": "read"}),
    );
    let id = id_of(&created, "permissionId");
    let expected =
        json!({"id": id, "name": "Read documents", "slug": "documents.read", "description": "read"});
    assert_eq!(s.v2("permissions.getPermission", &json!({"permission": "documents.read"})).data(), &expected);
    assert_eq!(s.v2("permissions.getPermission", &json!({"permission": id})).data(), &expected);
    // v1 sees the slug as the name.
    let v1 = s.request(
        s.client
            .get(s.url("/v1/permissions.getPermission"))
            .query(&[("permissionId", &id)])
            .bearer_auth(&s.root_key),
    );
    assert_eq!(v1.json["name"], "documents.read");
    // A taken slug is 409; names may repeat.
    s.v2("permissions.createPermission", &json!({"name": "x", "slug": "documents.read"}))
        .assert_problem(409, "unkey/data/permission_already_exists");
    s.v2("permissions.createPermission", &json!({"name": "Read documents", "slug": "documents.read2"}))
        .data();
    for (body, location) in [
        (json!({"name": "", "slug": "a"}), "body.name"),
        (json!({"name": "a", "slug": "bad slug"}), "body.slug"),
        (json!({"name": "a", "slug": "a", "description": "d".repeat(513)}), "body.description"),
        (json!({"slug": "a"}), "body.name"),
    ] {
        let r = s.v2("permissions.createPermission", &body);
        r.assert_problem(400, "unkey/application/invalid_input");
        assert_eq!(r.json["error"]["errors"][0]["location"], location, "{}", r.text);
    }
    // A v1 permission reads through v2, its name defaulting to the slug.
    s.post("/v1/permissions.createPermission", &json!({"name": "from.v1"}));
    let p = s.v2("permissions.getPermission", &json!({"permission": "from.v1"}));
    assert_eq!((&p.data()["name"], &p.data()["slug"]), (&json!("from.v1"), &json!("from.v1")));
    assert!(p.data().get("description").is_none());

    assert_eq!(
        s.v2("permissions.deletePermission", &json!({"permission": "documents.read"})).data(),
        &json!({})
    );
    s.v2("permissions.getPermission", &json!({"permission": id}))
        .assert_problem(404, "unkey/data/permission_not_found");
    s.v2("permissions.deletePermission", &json!({"permission": id}))
        .assert_problem(404, "unkey/data/permission_not_found");
    let v1 = s.request(
        s.client
            .get(s.url("/v1/permissions.getPermission"))
            .query(&[("permissionId", &id)])
            .bearer_auth(&s.root_key),
    );
    v1.assert_error(404, "NOT_FOUND");
}

#[test]
fn roles_come_with_their_permissions_and_set_role_permissions_reaches_keys_at_once() {
    let s = TestServer::start();
    let r = s.v2(
        "permissions.createRole",
        &json!({"name": "editor", "description": "edits", "permissions": ["w", "r"]}),
    );
    let role_id = id_of(&r, "roleId");
    assert_eq!(s.count("permissions", "name IN ('r', 'w')"), 2, "missing slugs are created");
    let got = s.v2("permissions.getRole", &json!({"role": "editor"}));
    let role = got.data();
    assert_eq!(
        (&role["id"], &role["name"], &role["description"]),
        (&json!(role_id), &json!("editor"), &json!("edits"))
    );
    let slugs: Vec<&str> =
        role["permissions"].as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap()).collect();
    assert_eq!(slugs, ["r", "w"]);
    assert_eq!(s.v2("permissions.getRole", &json!({"role": role_id})).data()["name"], "editor");
    s.v2("permissions.createRole", &json!({"name": "editor"}))
        .assert_problem(409, "unkey/data/role_already_exists");

    let key = s.v2("keys.createKey", &json!({"apiId": "api_1", "roles": ["editor"]}));
    let secret = key.data()["key"].as_str().unwrap().to_string();
    let verify =
        |q: &str| s.v2("keys.verifyKey", &json!({"key": secret, "permissions": q})).data()["code"].clone();
    assert_eq!(verify("r AND w"), "VALID");
    // setRolePermissions: SDK 3.2.2 sends `role`, 2.5.1 `roleId`; both take a name or an id.
    let set = s.v2("permissions.setRolePermissions", &json!({"role": "editor", "permissions": ["admin"]}));
    let answer: Vec<&str> =
        set.data().as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap()).collect();
    assert_eq!(answer, ["admin"]);
    assert_eq!(verify("admin"), "VALID", "the next verification sees the change");
    assert_eq!(verify("r"), "INSUFFICIENT_PERMISSIONS");
    s.v2("permissions.setRolePermissions", &json!({"roleId": role_id, "permissions": ["r"]})).data();
    assert_eq!(verify("r"), "VALID");
    s.v2("permissions.setRolePermissions", &json!({"role": "editor", "roleId": role_id, "permissions": []}))
        .data();
    assert_eq!(verify("r"), "INSUFFICIENT_PERMISSIONS");
    s.v2("permissions.createRole", &json!({"name": "other"})).data();
    s.v2("permissions.setRolePermissions", &json!({"role": "editor", "roleId": "other", "permissions": []}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("permissions.setRolePermissions", &json!({"permissions": []}))
        .assert_problem(400, "unkey/application/invalid_input");
    s.v2("permissions.setRolePermissions", &json!({"role": "ghost", "permissions": []}))
        .assert_problem(404, "unkey/data/role_not_found");

    assert_eq!(s.v2("permissions.deleteRole", &json!({"role": "editor"})).data(), &json!({}));
    s.v2("permissions.getRole", &json!({"role": role_id})).assert_problem(404, "unkey/data/role_not_found");
    let v1 = s.request(
        s.client
            .get(s.url("/v1/permissions.getRole"))
            .query(&[("roleId", &role_id)])
            .bearer_auth(&s.root_key),
    );
    v1.assert_error(404, "NOT_FOUND");
}

/// Every page of a list walk, following the cursors.
fn walk(s: &TestServer, op: &str, limit: u64, between_pages: &mut dyn FnMut(usize)) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let mut body = json!({"limit": limit});
        if let Some(c) = &cursor {
            body["cursor"] = json!(c);
        }
        let r = s.v2(op, &body);
        let items = r.data().as_array().unwrap();
        assert!(items.len() as u64 <= limit);
        out.extend(items.iter().cloned());
        let pagination = &r.json["pagination"];
        let more = pagination["hasMore"].as_bool().unwrap();
        assert_eq!(pagination.get("cursor").is_some(), more, "a cursor exactly when more follow: {}", r.text);
        if !more {
            break;
        }
        cursor = Some(pagination["cursor"].as_str().unwrap().to_string());
        between_pages(page);
    }
    out
}

#[test]
fn pages_visit_every_item_once_while_items_are_added() {
    let s = TestServer::start();
    for i in 0..25 {
        s.v2(
            "permissions.createPermission",
            &json!({"name": format!("Title-{i}"), "slug": format!("p{i:02}")}),
        )
        .data();
        s.v2("permissions.createRole", &json!({"name": format!("role{i:02}")})).data();
    }
    let mut added = 0;
    let seen = walk(&s, "permissions.listPermissions", 7, &mut |page| {
        // New items before and after the walk's position while it runs.
        for slug in [format!("a-new{page}"), format!("z-new{page}")] {
            s.v2("permissions.createPermission", &json!({"name": slug, "slug": slug})).data();
            added += 1;
        }
    });
    let slugs: Vec<&str> = seen.iter().map(|p| p["slug"].as_str().unwrap()).collect();
    let unique: BTreeSet<&str> = slugs.iter().copied().collect();
    assert_eq!(unique.len(), slugs.len(), "no item twice: {slugs:?}");
    for i in 0..25 {
        assert!(unique.contains(format!("p{i:02}").as_str()), "p{i:02} was visited");
    }
    let mut sorted = slugs.clone();
    sorted.sort();
    assert_eq!(slugs, sorted, "by slug");
    assert!(added > 0);
    let roles = walk(&s, "permissions.listRoles", 10, &mut |_| {});
    assert_eq!(roles.len(), 25);
    assert!(roles.iter().all(|r| r["permissions"].is_array()));
    // Defaults, bounds, search and bad cursors.
    let all = s.v2("permissions.listPermissions", &json!({}));
    assert_eq!(all.data().as_array().unwrap().len(), 25 + added.min(75));
    // (`-` never appears in an id, which search also reads.)
    let found = s.v2("permissions.listPermissions", &json!({"search": "tITLE-1"}));
    let hits: Vec<&str> =
        found.data().as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap()).collect();
    assert_eq!(hits.len(), 11, "Title-1 and Title-10 to 19, case-insensitively: {hits:?}");
    for bad in
        [json!({"limit": 0}), json!({"limit": 101}), json!({"cursor": "not-ours"}), json!({"cursor": ""})]
    {
        s.v2("permissions.listPermissions", &bad).assert_problem(400, "unkey/application/invalid_input");
    }
}

#[test]
fn pages_visit_every_item_once_while_items_are_inserted_and_deleted() {
    let s = TestServer::start();
    let create = |slug: &str| {
        s.v2("permissions.createPermission", &json!({"name": slug, "slug": slug})).data();
    };
    let delete = |slug: &str| {
        s.v2("permissions.deletePermission", &json!({"permission": slug})).data();
    };
    // Byte order: upper case sorts before lower case, whatever the database's collation.
    let originals: Vec<String> =
        (0..30).map(|i| format!("{}{i:02}", if i % 2 == 0 { "P" } else { "p" })).collect();
    originals.iter().for_each(|p| create(p));
    let mut sorted = originals.clone();
    sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let (mut deleted_ahead, mut inserted_ahead) = (Vec::new(), Vec::new());
    let seen = walk(&s, "permissions.listPermissions", 4, &mut |page| {
        // Behind the cursor: a new item and a visited one deleted; ahead: a new item, and
        // an item not visited yet deleted.
        // (Page k has visited 4(k + 1) items: sorted[k] is behind; the last ones are ahead
        // for the first 4 pages.)
        create(&format!("A-behind{page}"));
        delete(&sorted[page]);
        let ahead = format!("q-ahead{page:02}");
        create(&ahead);
        inserted_ahead.push(ahead);
        if page < 4 {
            let gone = &sorted[sorted.len() - 1 - page];
            delete(gone);
            deleted_ahead.push(gone.clone());
        }
    });
    let slugs: Vec<&str> = seen.iter().map(|p| p["slug"].as_str().unwrap()).collect();
    let unique: BTreeSet<&str> = slugs.iter().copied().collect();
    assert_eq!(unique.len(), slugs.len(), "no item twice: {slugs:?}");
    let mut by_bytes = slugs.clone();
    by_bytes.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(slugs, by_bytes, "in byte order");
    for p in &originals {
        assert_eq!(
            unique.contains(p.as_str()),
            !deleted_ahead.contains(p),
            "{p}: visited unless deleted before its page"
        );
    }
    for p in &inserted_ahead {
        assert!(unique.contains(p.as_str()), "{p}, inserted ahead of the cursor, was visited");
    }
    assert!(
        !slugs.iter().any(|p| p.starts_with("A-behind")),
        "items inserted behind the cursor are not visited"
    );
}

#[test]
fn search_takes_like_wildcards_literally_and_pages_through_the_hits() {
    let s = TestServer::start();
    // Search reads ids too (`perm_` and base-62 characters): `k_1` cannot occur in one.
    for slug in ["k_1x", "ka1x", "kz1", "K_1Y", "xk_1z"] {
        s.v2("permissions.createPermission", &json!({"name": slug, "slug": slug})).data();
    }
    let sale = json!({"name": "sale", "slug": "sale", "description": "100% off"});
    s.v2("permissions.createPermission", &sale).data();
    let search = |q: &str, limit: u64, cursor: Option<&str>| {
        let mut body = json!({"search": q, "limit": limit});
        if let Some(c) = cursor {
            body["cursor"] = json!(c);
        }
        let r = s.v2("permissions.listPermissions", &body);
        let hits: Vec<String> =
            r.data().as_array().unwrap().iter().map(|p| p["slug"].as_str().unwrap().to_string()).collect();
        (hits, r.json["pagination"]["cursor"].as_str().map(str::to_string))
    };
    assert_eq!(search("k_1", 100, None).0, ["K_1Y", "k_1x", "xk_1z"], "`_` is no wildcard, case ignored");
    assert_eq!(search("%", 100, None).0, ["sale"], "nor is `%` (in a description)");
    assert_eq!(search("0% O", 100, None).0, ["sale"]);
    let (first, cursor) = search("k_1", 2, None);
    assert_eq!(first, ["K_1Y", "k_1x"]);
    let (rest, cursor) = search("k_1", 2, cursor.as_deref());
    assert_eq!((rest, cursor), (vec!["xk_1z".to_string()], None));
}
