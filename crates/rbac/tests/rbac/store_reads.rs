//! What the caches save: how often the service reads the store (root keys, overrides, a
//! verification's miss), counted by a store that wraps the real one.

use keygate_domain::{ErrorCode, ManualClock};
use keygate_rbac::{Principal, RbacService, RbacStore, VerifyCode, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

/// The real store, counting the reads outside transactions (root-key and override loads)
/// and the snapshots (a verification's miss).
#[derive(Debug)]
struct CountingStore {
    inner: SqlStore,
    reads: AtomicUsize,
    snapshots: AtomicUsize,
    failing: std::sync::atomic::AtomicBool,
}

impl RbacStore for CountingStore {
    fn transaction<T, F>(&self, f: F) -> Result<T, keygate_rbac::RbacError>
    where
        F: FnOnce(&mut dyn keygate_rbac::RbacTx) -> Result<T, keygate_rbac::RbacError>,
    {
        self.inner.transaction(f)
    }

    fn read<T, F>(&self, f: F) -> Result<T, keygate_rbac::RbacError>
    where
        F: FnOnce(&mut dyn keygate_rbac::RbacTx) -> Result<T, keygate_rbac::RbacError>,
    {
        self.reads.fetch_add(1, SeqCst);
        if self.failing.load(SeqCst) {
            return Err(keygate_rbac::StorageError::Unavailable("the database is down (test)".into()).into());
        }
        self.inner.read(f)
    }

    fn snapshot<T, F>(&self, f: F) -> Result<T, keygate_rbac::RbacError>
    where
        F: FnOnce(&mut dyn keygate_rbac::RbacTx) -> Result<T, keygate_rbac::RbacError>,
    {
        self.snapshots.fetch_add(1, SeqCst);
        self.inner.snapshot(f)
    }

    /// The real store's own (on PostgreSQL one statement), counted as a snapshot.
    fn verification_read(
        &self,
        hash: &str,
        counters: &keygate_rbac::store::CounterNames<'_>,
    ) -> Result<(Option<keygate_rbac::KeySummary>, Vec<u64>), keygate_rbac::RbacError> {
        self.snapshots.fetch_add(1, SeqCst);
        self.inner.verification_read(hash, counters)
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn ping(&self) -> Result<(), keygate_rbac::StorageError> {
        self.inner.ping()
    }
}

struct Counted {
    svc: RbacService<CountingStore>,
    clock: Arc<ManualClock>,
    admin: Principal,
    ws: String,
    _db: TestDb,
}

impl Counted {
    fn new() -> Self {
        Self::with_counters(None)
    }

    /// With the change counters read from `counters` (default: in memory).
    fn with_counters(counters: Option<keygate_rbac::counters::CounterSource>) -> Self {
        let db = TestDb::fresh();
        let inner =
            SqlStore::open(&db.url, PoolSettings { max_size: 8, ..PoolSettings::default() }).expect("open");
        let store = CountingStore {
            inner,
            reads: Default::default(),
            snapshots: Default::default(),
            failing: Default::default(),
        };
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let svc = RbacService::new(store, clock.clone());
        let svc = match counters {
            Some(source) => svc.with_counter_source(source),
            None => svc,
        };
        let (ws, rk, _) = svc.bootstrap(None).expect("bootstrap").expect("fresh db");
        let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
        Counted { svc, clock, admin, ws: ws.id, _db: db }
    }

    /// Reads since the last call.
    fn reads(&self) -> usize {
        self.svc.store().reads.swap(0, SeqCst)
    }

    /// Reads and snapshots since the last call.
    fn uses(&self) -> (usize, usize) {
        (self.reads(), self.svc.store().snapshots.swap(0, SeqCst))
    }

    /// A new root key (no permissions), authenticated once so that it is cached: its id
    /// and its token.
    fn cached_root_key(&self) -> (String, String) {
        let (rk, secret) = self.svc.create_root_key(&self.ws, &[]).expect("rk");
        self.svc.authenticate(secret.expose()).expect("auth");
        (rk.id, secret.expose().to_string())
    }

    fn set_failing(&self, failing: bool) {
        self.svc.store().failing.store(failing, SeqCst);
    }
}

/// `n` threads released together, each running `f`.
fn all_at_once(n: usize, f: impl Fn() + Sync) {
    let start = std::sync::Barrier::new(n);
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| {
                start.wait();
                f();
            });
        }
    });
}

#[test]
fn a_burst_of_misses_reads_a_root_key_once() {
    let c = Counted::new();
    let (_, secret) = c.svc.create_root_key(&c.ws, &["ratelimit.*.limit".to_string()]).expect("rk");
    c.reads();
    all_at_once(16, || {
        let p = c.svc.authenticate(secret.expose()).expect("auth");
        assert!(p.holds("ratelimit.*.limit"));
    });
    assert_eq!(c.reads(), 1, "16 callers that missed together read the store once");
    // An unknown token is cached as unknown the same way.
    all_at_once(16, || {
        assert_eq!(c.svc.authenticate("kg_nope").expect_err("unknown").code(), ErrorCode::Unauthorized);
    });
    assert_eq!(c.reads(), 1);
}

#[test]
fn a_burst_of_override_misses_reads_the_store_once() {
    let c = Counted::new();
    let ns = c.svc.resolve_namespace(&c.admin, "api").expect("namespace");
    let ns_ref = keygate_rbac::NamespaceRef { id: Some(ns.to_string()), name: None };
    c.svc.set_override(&c.admin, &ns_ref, "user_*", 5, 60_000, false).expect("override");
    c.reads();
    all_at_once(16, || {
        let set = c.svc.load_overrides(&ns, 0).expect("load");
        assert_eq!(set.find("user_1").map(|e| e.limit), Some(5));
    });
    assert_eq!(c.reads(), 1, "16 callers that missed together read the store once");
    // A caller holding a newer epoch (the shared store saw a change) reads again.
    c.svc.load_overrides(&ns, 1).expect("load");
    assert_eq!(c.reads(), 1);
}

#[test]
fn a_root_key_is_renewed_before_it_expires_and_a_refresh_sees_a_revocation() {
    let c = Counted::new();
    let (rk_id, token) = c.cached_root_key();
    let token = token.as_str();
    c.reads();
    let hit = |c: &Counted| c.svc.authenticate_cached(token).map(|h| (h.value.is_ok(), h.refresh));
    c.clock.advance(4_999);
    assert_eq!(hit(&c), Some((true, false)));
    c.clock.advance(1);
    assert_eq!(hit(&c), Some((true, true)), "half its lifetime: this caller refreshes");
    assert_eq!(hit(&c), Some((true, false)), "one refresh at a time");
    c.svc.refresh_root_key(token).expect("refresh");
    assert_eq!(c.reads(), 1);
    c.clock.advance(5_500);
    assert_eq!(hit(&c), Some((true, true)), "renewed: still served 10.5 s after the first read");
    // Revoked behind this instance's back (the CLI, another instance): the refresh sees it.
    c.svc.store().transaction(|tx| Ok(tx.revoke_root_key(&rk_id, 0)?)).expect("revoke");
    c.svc.refresh_root_key(token).expect("refresh");
    let after = c.svc.authenticate_cached(token).expect("cached as unknown");
    assert_eq!(after.value.expect_err("revoked").code(), ErrorCode::Unauthorized);
}

#[test]
fn a_failed_refresh_leaves_the_entry_to_expire_and_is_not_served_past_its_lifetime() {
    let c = Counted::new();
    let (_, token) = c.cached_root_key();
    let token = token.as_str();
    c.clock.advance(5_000);
    assert!(c.svc.authenticate_cached(token).expect("hit").refresh);
    c.set_failing(true);
    assert_eq!(c.svc.refresh_root_key(token).expect_err("down").code(), ErrorCode::ServiceUnavailable);
    c.clock.advance(4_999);
    assert!(c.svc.authenticate_cached(token).is_some_and(|h| h.value.is_ok()), "served until its end");
    c.clock.advance(1);
    assert!(c.svc.authenticate_cached(token).is_none(), "never past 10 s");
    assert_eq!(c.svc.authenticate(token).expect_err("down").code(), ErrorCode::ServiceUnavailable);
    c.set_failing(false);
    assert!(c.svc.authenticate(token).is_ok());
}

#[test]
fn cache_lifetimes_are_measured_on_the_monotonic_clock() {
    use keygate_domain::Clock;
    let c = Counted::new();
    let (_, token) = c.cached_root_key();
    c.reads();
    // The wall clock steps back an hour (NTP): the entry is neither "from the future"
    // (a miss, a store read per request) nor kept longer than its lifetime.
    c.clock.set(c.clock.now_ms() - 3_600_000);
    c.svc.authenticate(&token).expect("auth");
    assert_eq!(c.reads(), 0, "still cached");
    c.clock.advance(keygate_rbac::AUTH_CACHE_TTL_MS);
    c.svc.authenticate(&token).expect("auth");
    assert_eq!(c.reads(), 1, "expired after its lifetime of monotonic time");
}

/// A verification's miss reads the store once, in one transaction: a key with its
/// permissions, roles, identity and limits, and a secret that is no key; the next
/// verification is a hit. Then a change to the key: one transaction again, and its answer
/// is the new one. With the counters in memory and with the database's (read in the
/// miss's snapshot; a hit reads them once). On SQLite and, with
/// `KEYGATE_TEST_POSTGRES_URL`, PostgreSQL.
#[test]
fn a_miss_reads_the_store_in_one_transaction() {
    use keygate_rbac::counters::CounterSource;
    a_miss_in_one_transaction(Counted::new(), 0);
    a_miss_in_one_transaction(Counted::with_counters(Some(CounterSource::Store)), 1);
}

/// [`a_miss_reads_the_store_in_one_transaction`] on `c`, whose hits read the store
/// `hit_reads` times.
fn a_miss_in_one_transaction(c: Counted, hit_reads: usize) {
    use keygate_rbac::{EntityKind, EntityRef, KeyUpdate, NewEntity, NewKey, NewRateLimit};
    let entity = |name: &str| NewEntity { name: name.into(), name_field: "name", ..NewEntity::default() };
    c.svc.create_entity(&c.admin, EntityKind::Permission, entity("doc.read")).expect("permission");
    let role = c.svc.create_entity(&c.admin, EntityKind::Role, entity("reader")).expect("role");
    c.svc.add_role_permissions(&c.admin, &role.id, &[EntityRef::by_name("doc.read")]).expect("role perm");
    let limit = NewRateLimit {
        name: "requests".into(),
        limit: 10,
        duration: 60_000,
        auto_apply: true,
        algorithm: keygate_domain::Algorithm::Sliding,
    };
    c.svc
        .create_identity(&c.admin, "customer_1", None, std::slice::from_ref(&limit), None)
        .expect("identity");
    let new = NewKey {
        external_id: Some("customer_1".into()),
        ratelimits: vec![limit],
        enabled: true,
        roles: vec!["reader".into()],
        ..NewKey::default()
    };
    let (key, secret) = c.svc.create_key_as(&c.admin, new).expect("key");
    let any = VerifyScope::default();
    c.uses();
    let v = c.svc.check_key(secret.expose(), &any, None).expect("verify");
    assert_eq!((v.code, v.permissions()), (VerifyCode::Valid, &["doc.read".into()][..]));
    assert_eq!(v.identity().map(|i| i.ratelimits.len()), Some(1), "{v:?}");
    assert_eq!(c.uses(), (0, 1), "a miss: one transaction, no read outside it");
    c.svc.check_key(secret.expose(), &any, None).expect("verify");
    assert_eq!(c.uses(), (hit_reads, 0), "then a hit");
    assert_eq!(c.svc.check_key("kg_no_such_key", &any, None).expect("verify").code, VerifyCode::NotFound);
    assert_eq!(c.uses(), (0, 1), "no such key: one transaction");
    c.svc.check_key("kg_no_such_key", &any, None).expect("verify");
    assert_eq!(c.uses(), (hit_reads, 0), "then a hit");
    let disable = KeyUpdate { enabled: Some(false), ..KeyUpdate::default() };
    c.svc.update_key(&c.admin, &key.id, disable).expect("disable");
    c.uses();
    assert_eq!(c.svc.check_key(secret.expose(), &any, None).expect("verify").code, VerifyCode::Disabled);
    assert_eq!(c.uses(), (hit_reads, 1), "changed: one transaction, and the change seen");
}

/// The store's verification read (on PostgreSQL its one statement) answers as the reads it
/// stands for, in a snapshot: a key with direct permissions, roles (one granting a
/// permission it also has directly), an identity with limits, limits of its own (named
/// out of order), credits, and counters that were bumped; and a secret that is no key,
/// with its creation shard's counter. On SQLite and, with `KEYGATE_TEST_POSTGRES_URL`,
/// PostgreSQL.
#[test]
fn the_verification_read_answers_as_its_reads_in_a_snapshot() {
    use keygate_domain::hash_secret;
    use keygate_rbac::counters::Scope;
    use keygate_rbac::{Credits, EntityKind, EntityRef, KeyUpdate, NewEntity, NewKey, NewRateLimit};
    let c = Counted::new();
    let entity = |name: &str| NewEntity { name: name.into(), name_field: "name", ..NewEntity::default() };
    for p in ["doc.read", "doc.write", "billing"] {
        c.svc.create_entity(&c.admin, EntityKind::Permission, entity(p)).expect("permission");
    }
    let reader = c.svc.create_entity(&c.admin, EntityKind::Role, entity("reader")).expect("role");
    c.svc.create_entity(&c.admin, EntityKind::Role, entity("admin")).expect("role");
    let grants = [EntityRef::by_name("doc.read"), EntityRef::by_name("billing")];
    c.svc.add_role_permissions(&c.admin, &reader.id, &grants).expect("role perms");
    let limit = |name: &str, limit| NewRateLimit {
        name: name.into(),
        limit,
        duration: 60_000,
        auto_apply: true,
        algorithm: keygate_domain::Algorithm::TokenBucket,
    };
    c.svc
        .create_identity(
            &c.admin,
            "customer_1",
            Some("{\"plan\":\"pro\"}".into()),
            &[limit("b", 5), limit("a", 7)],
            None,
        )
        .expect("identity");
    let new = NewKey {
        external_id: Some("customer_1".into()),
        ratelimits: vec![limit("z-limit", 10), limit("a-limit", 20)],
        credits: Some(Credits { remaining: 42, refill: None }),
        name: Some("the key".into()),
        meta: Some("{\"k\":1}".into()),
        expires: Some(1_800_000_000_000),
        enabled: true,
        permissions: vec!["doc.write".into(), "doc.read".into()],
        roles: vec!["reader".into(), "admin".into()],
        ..NewKey::default()
    };
    let (key, secret) = c.svc.create_key_as(&c.admin, new).expect("key");
    let update = KeyUpdate { name: keygate_domain::Patch::Set("renamed".into()), ..KeyUpdate::default() };
    c.svc.update_key(&c.admin, &key.id, update).expect("bump the key's counter");
    let names = |k: Option<(&str, &str)>| match k {
        Some((id, ws)) => vec![Scope::Key(id).name(), Scope::Workspace(ws).name()],
        None => vec![Scope::KeysCreated(3).name()],
    };
    let store = c.svc.store();
    for hash in [hash_secret(secret.expose()), hash_secret("kg_no_such_key")] {
        let one = store.inner.verification_read(&hash, &names).expect("read");
        let reads =
            store.inner.snapshot(|tx| keygate_rbac::verification_read(tx, &hash, &names)).expect("reads");
        assert_eq!(one, reads);
        let none = store.inner.verification_read(&hash, &|_| Vec::new()).expect("read");
        assert_eq!(none, (one.0.clone(), Vec::new()));
        if let Some(found) = &one.0 {
            assert_eq!(found.permissions, ["billing", "doc.read", "doc.write"]);
            assert_eq!(found.roles, ["admin", "reader"]);
            let limits: Vec<&str> = found.ratelimits.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(limits, ["a-limit", "z-limit"]);
            let identity = found.identity.as_ref().expect("identity");
            let limits: Vec<&str> = identity.ratelimits.iter().map(|l| l.name.as_str()).collect();
            assert_eq!(limits, ["a", "b"]);
            assert_eq!(identity.identity.meta.as_deref(), Some("{\"plan\":\"pro\"}"));
            assert_eq!(
                (found.key.name.as_deref(), found.key.credits.as_ref().map(|c| c.remaining)),
                (Some("renamed"), Some(42))
            );
            assert!(one.1[0] > 0 && one.1[1] > 0, "{:?}", one.1);
        } else {
            assert_eq!(one.1.len(), 1);
        }
    }
}
