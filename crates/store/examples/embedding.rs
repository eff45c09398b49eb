//! keygate's crates inside another Rust service, without the HTTP server: the RBAC
//! service over the SQL store, and the in-process rate limiter. docs/embedding.md walks
//! through it; `cargo run -p keygate-store --example embedding` runs it.

use keygate_domain::SystemClock;
use keygate_ratelimit::{BudgetKey, LimitRequest, MemoryStore};
use keygate_rbac::{EntityRef, PermissionQuery, Principal, RbacService, VerifyCode, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use std::sync::Arc;

fn main() -> anyhow::Result<()> {
    // The store: a SQLite file (or `postgres://...`); migrations run on open.
    let dir = std::env::temp_dir().join(format!("keygate-embedding-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = SqlStore::open(&format!("sqlite://{}", dir.join("k.db").display()), PoolSettings::default())?;
    let rbac = RbacService::new(store, Arc::new(SystemClock));

    // A workspace and a key; the service acts for a principal (here one holding "*").
    let ws = rbac.create_workspace("acme")?;
    let admin = Principal::new("embedding".into(), ws.id.clone(), ["*".to_string()]);
    let (key, secret) = rbac.create_key(&ws.id, Some("checkout".into()))?;
    rbac.set_permissions(&admin, &key.id, &[EntityRef::by_name("documents.read")])?;

    // Is this key valid, and may it read documents? Scoped to the workspace. (This is
    // rbac's check; what a key spends, credits and its own rate limits, is keygate-usage's
    // `UsageService::verify`.)
    let query = PermissionQuery::Permission("documents.read".into());
    let scope = VerifyScope {
        workspace_id: Some(&ws.id),
        api_id: None,
        access: None,
        root_key: None,
        ip: None,
        migration: None,
    };
    let verification = rbac.check_key(secret.expose(), &scope, Some(&query))?;
    assert_eq!(verification.code, VerifyCode::Valid);
    println!("key {} verifies {:?} with {:?}", key.id, verification.code, verification.permissions());

    // May this caller make one more request? 2 per minute for "user_42".
    let limiter = MemoryStore::new();
    let namespace = Arc::new("api".to_string());
    let budget = BudgetKey {
        namespace_id: &namespace,
        identifier: "user_42",
        duration: 60_000,
        algorithm: Default::default(),
    };
    let request = LimitRequest { limit: 2, duration: 60_000, cost: 1 };
    let now = keygate_domain::Clock::now_ms(&SystemClock);
    let passed: Vec<bool> = (0..3).map(|_| limiter.check(budget, request, now).success).collect();
    assert_eq!(passed, [true, true, false]);
    println!("user_42: {passed:?}");

    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
