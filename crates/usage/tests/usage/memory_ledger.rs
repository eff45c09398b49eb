//! The memory ledger's group commit over the real SQL store (a temp SQLite file).

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use keygate_domain::ManualClock;
use keygate_ratelimit::MemoryStore;
use keygate_rbac::{Principal, RbacService, VerifyScope};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use keygate_usage::UsageService;
use std::sync::Arc;

struct Fixture {
    usage: Arc<UsageService<SqlStore>>,
    rbac: Arc<RbacService<SqlStore>>,
    admin: Principal,
    ws: String,
    _db: TestDb,
}

fn fixture() -> Fixture {
    fixture_on(TestDb::fresh())
}

/// On a SQLite file, the embedded default, whatever database the run's other tests use:
/// the credit journal is written beside it.
fn sqlite_fixture() -> Fixture {
    fixture_on(TestDb::sqlite())
}

fn fixture_on(db: TestDb) -> Fixture {
    let store =
        SqlStore::open(&db.url, PoolSettings { max_size: 8, ..PoolSettings::default() }).expect("open");
    let rbac = RbacService::new(store, Arc::new(ManualClock::new(1_700_000_000_000)));
    let (rbac, usage) = UsageService::wire(rbac, Arc::new(MemoryStore::new()), None);
    let (ws, rk, _) = rbac.bootstrap(None).expect("bootstrap").expect("fresh db");
    let admin = Principal::new(rk.id, ws.id.clone(), ["*".to_string()]);
    Fixture { usage: Arc::new(usage), rbac, admin, ws: ws.id, _db: db }
}

fn count(store: &SqlStore, sql: &str) -> i64 {
    #[derive(QueryableByName)]
    struct C {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    store.with_conn(|c| diesel::sql_query(sql).get_result::<C>(c)).expect("count").n
}

/// `n` keys named `<name><i>` with `credits` each: (key id, secret).
fn paid_keys(f: &Fixture, name: &str, n: usize, credits: u64) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let (key, secret) = f.rbac.create_key(&f.ws, Some(format!("{name}{i}"))).expect("key");
            let op = keygate_usage::CreditOp::Set;
            f.usage.update_credits(&f.admin, &key.id, op, Some(credits)).expect("credits");
            (key.id, secret.expose().to_string())
        })
        .collect()
}

/// The embedded group commit, used from the library: verifications awaited on a
/// multi-threaded runtime (each leads a commit or waits for another's, and a leader passes
/// the lead on when spends are left after its batch) and blocking ones at the same time
/// spend exactly the keys' credits, and the rows hold what is left.
#[test]
fn credit_spends_awaited_and_blocking_at_once_are_exact() {
    // A spend left without a leader would hang: that fails here instead.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        spend_awaited_and_blocking_at_once();
        let _ = done.send(());
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("every spend answered, and exactly (see the thread's panic otherwise)");
}

fn spend_awaited_and_blocking_at_once() {
    use keygate_rbac::VerifyCode;
    use keygate_usage::Usage;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let f = fixture();
    let keys = paid_keys(&f, "paid", 50, 20);
    let valid = AtomicUsize::new(0);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().expect("runtime");
    std::thread::scope(|scope| {
        // Blocking callers on the first 10 keys (they wait by leading, blocking).
        for t in 0..2 {
            let (f, keys, valid) = (&f, &keys, &valid);
            scope.spawn(move || {
                for i in 0..100 {
                    let secret = &keys[(i + t) % 10].1;
                    let v = f.usage.verify_key(secret, &VerifyScope::default(), None).expect("verify");
                    if v.code == VerifyCode::Valid {
                        valid.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        runtime.block_on(async {
            let tasks: Vec<_> = (0..1_300)
                .map(|i| {
                    let (svc, secret) = (f.usage.clone(), keys[i % keys.len()].1.clone());
                    tokio::spawn(async move {
                        let (scope, usage) = (VerifyScope::default(), Usage::default());
                        let pending = match svc.verify_cached(&secret, &scope, None, &usage) {
                            Some(p) => p,
                            None => svc.verify(&secret, &scope, None, &usage),
                        };
                        pending.expect("verify").settle().await.expect("settle").code == VerifyCode::Valid
                    })
                })
                .collect();
            for t in tasks {
                if t.await.expect("task") {
                    valid.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    });
    assert_eq!(valid.load(Ordering::Relaxed), 50 * 20);
    for (id, _) in &keys {
        assert_eq!(folded(&f, id, 0), 0, "{id}");
    }
}

/// The key's remaining credits in its row once it holds `left` (the journaled spends are
/// folded in behind, every 200 ms), or what it holds after 5 s.
fn folded(f: &Fixture, key_id: &str, left: i64) -> i64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let now =
            count(f.rbac.store(), &format!("SELECT credits_remaining AS n FROM keys WHERE id = '{key_id}'"));
        if now == left || std::time::Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Two processes spending one key's credits on one SQLite file (here two services on two
/// stores of it): the one that owns the credit journal steps aside when the other asks,
/// and both commit their spends to the row from then on: exactly the key's credits are
/// spent, none twice.
#[test]
fn two_processes_on_one_file_spend_exactly() {
    use keygate_rbac::VerifyCode;
    use keygate_usage::CreditOp;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let f = sqlite_fixture();
    let (key, secret) = f.rbac.create_key(&f.ws, Some("shared".into())).expect("key");
    let secret = secret.expose().to_string();
    f.usage.update_credits(&f.admin, &key.id, CreditOp::Set, Some(400)).expect("credits");
    // The owner spends first: its counter is in memory, its spends in the journal.
    let scope = VerifyScope::default();
    for _ in 0..100 {
        assert_eq!(f.usage.verify_key(&secret, &scope, None).expect("verify").code, VerifyCode::Valid);
    }
    let journal = std::fs::read(f._db.dir().join("keygate.db-credits")).expect("journal");
    assert!(journal.iter().any(|b| *b != 0), "the spends are in the journal");
    let other = {
        let store = SqlStore::open(&f._db.url, PoolSettings::default()).expect("open");
        let rbac = RbacService::new(store, Arc::new(ManualClock::new(1_700_000_000_000)));
        UsageService::wire(rbac, Arc::new(MemoryStore::new()), None).1
    };
    // Its first spend asks the owner to step aside.
    assert_eq!(other.verify_key(&secret, &scope, None).expect("verify").code, VerifyCode::Valid);
    let valid = AtomicUsize::new(101);
    std::thread::scope(|scope| {
        for usage in [&*f.usage, &other, &*f.usage, &other] {
            let (valid, secret) = (&valid, &secret);
            scope.spawn(move || {
                loop {
                    // From the verification cache, as the server verifies.
                    let (scope, u) = (VerifyScope::default(), keygate_usage::Usage::default());
                    let pending = match usage.verify_cached(secret, &scope, None, &u) {
                        Some(p) => p,
                        None => usage.verify(secret, &scope, None, &u),
                    };
                    let v = pending.expect("verify").wait().expect("wait");
                    match v.code {
                        VerifyCode::Valid => valid.fetch_add(1, Ordering::Relaxed),
                        VerifyCode::UsageExceeded => break,
                        other => panic!("{other:?}"),
                    };
                }
            });
        }
    });
    assert_eq!(valid.load(Ordering::Relaxed), 400, "every credit spent once");
    assert_eq!(folded(&f, &key.id, 0), 0);
}

/// A ledger that stops (its service dropped, as at a graceful stop) folds its journaled
/// spends into the rows and empties the journal; the next service on the file starts from
/// the rows.
#[test]
fn a_stopped_ledger_leaves_its_spends_in_the_rows_and_an_empty_journal() {
    use keygate_rbac::VerifyCode;
    use keygate_usage::CreditOp;
    let f = sqlite_fixture();
    let (key, secret) = f.rbac.create_key(&f.ws, Some("stopped".into())).expect("key");
    let secret = secret.expose().to_string();
    f.usage.update_credits(&f.admin, &key.id, CreditOp::Set, Some(50)).expect("credits");
    for _ in 0..30 {
        let v = f.usage.verify_key(&secret, &VerifyScope::default(), None).expect("verify");
        assert_eq!(v.code, VerifyCode::Valid);
    }
    let Fixture { usage, rbac, _db: db, .. } = f;
    let journal = db.dir().join("keygate.db-credits");
    assert!(std::fs::read(&journal).expect("journal").iter().any(|b| *b != 0), "journaled");
    drop((usage, rbac));
    assert_eq!(journal.metadata().expect("journal").len(), 0, "emptied at the stop");
    let store = SqlStore::open(&db.url, PoolSettings::default()).expect("open");
    let left = count(&store, &format!("SELECT credits_remaining AS n FROM keys WHERE id = '{}'", key.id));
    assert_eq!(left, 20);
}

/// Another process writes a key's credits while this one holds spends in its journal (an
/// admin command on the file): the fold applies this process's spends to what the row
/// holds then, and the counter goes on from there.
#[test]
fn a_row_written_by_another_process_between_folds_keeps_both() {
    use keygate_rbac::VerifyCode;
    use keygate_usage::CreditOp;
    let f = sqlite_fixture();
    let (key, secret) = f.rbac.create_key(&f.ws, Some("written".into())).expect("key");
    let secret = secret.expose().to_string();
    f.usage.update_credits(&f.admin, &key.id, CreditOp::Set, Some(100)).expect("credits");
    let spend = |n: usize| {
        for _ in 0..n {
            let (scope, u) = (VerifyScope::default(), keygate_usage::Usage::default());
            let pending = match f.usage.verify_cached(&secret, &scope, None, &u) {
                Some(p) => p,
                None => f.usage.verify(&secret, &scope, None, &u),
            };
            assert_eq!(pending.expect("verify").wait().expect("wait").code, VerifyCode::Valid);
        }
    };
    spend(1);
    assert_eq!(folded(&f, &key.id, 99), 99);
    let other = SqlStore::open(&f._db.url, PoolSettings::default()).expect("open");
    // Another process sets the row (not through this process's service) while the 10
    // spends wait to be folded: the row still holds 99 (else a fold came between, which
    // a few tries get past).
    let mut written = false;
    let mut left = 99;
    for _ in 0..5 {
        spend(10);
        let set = format!(
            "UPDATE keys SET credits_remaining = 50 WHERE id = '{}' AND credits_remaining = {left}",
            key.id
        );
        written = other.with_conn(|c| diesel::sql_query(set).execute(c)).expect("update") == 1;
        if written {
            break;
        }
        left -= 10;
        assert_eq!(folded(&f, &key.id, left), left);
    }
    assert!(written, "no fold-free window in five tries");
    assert_eq!(folded(&f, &key.id, 40), 40, "the 10 spends applied to the 50 written");
    spend(1);
    assert_eq!(folded(&f, &key.id, 39), 39, "the counter read again after the conflict");
}

/// Folds that fail (here the rows' table is away for a while) keep what they took: the
/// spends answered meanwhile (before a failed fold, after it, on a key spent only after
/// it), all reach the rows once a fold goes through, none lost and none twice.
#[test]
fn spends_journaled_while_folds_fail_reach_the_rows_after() {
    use keygate_rbac::VerifyCode;
    let f = sqlite_fixture();
    let keys = paid_keys(&f, "away", 3, 100);
    let spend = |secret: &str, n: usize| {
        for _ in 0..n {
            let v = f.usage.verify_key(secret, &VerifyScope::default(), None).expect("verify");
            assert_eq!(v.code, VerifyCode::Valid);
        }
    };
    // Each key's counter read from its row (a first spend needs the rows), journaled
    // and folded.
    spend(&keys[0].1, 5);
    spend(&keys[1].1, 5);
    spend(&keys[2].1, 1);
    assert_eq!(folded(&f, &keys[0].0, 95), 95);
    assert_eq!(folded(&f, &keys[1].0, 95), 95);
    assert_eq!(folded(&f, &keys[2].0, 99), 99);
    let other = SqlStore::open(&f._db.url, PoolSettings::default()).expect("open");
    let sql = |s: &str| other.with_conn(|c| diesel::sql_query(s).execute(c)).expect(s);
    sql("ALTER TABLE keys RENAME TO keys_away");
    // Spends before a failed fold, and after it (the counter's entry taken by the failed
    // fold and put back, with the newer spends on top).
    spend(&keys[0].1, 10);
    spend(&keys[2].1, 7);
    std::thread::sleep(std::time::Duration::from_millis(450));
    spend(&keys[0].1, 10);
    spend(&keys[1].1, 3);
    std::thread::sleep(std::time::Duration::from_millis(450));
    sql("ALTER TABLE keys_away RENAME TO keys");
    assert_eq!(folded(&f, &keys[0].0, 75), 75);
    assert_eq!(folded(&f, &keys[1].0, 92), 92);
    assert_eq!(folded(&f, &keys[2].0, 92), 92);
    // The counters go on from the rows they folded into.
    spend(&keys[2].1, 1);
    assert_eq!(folded(&f, &keys[2].0, 91), 91);
}
