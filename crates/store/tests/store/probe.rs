//! SQLite's change probe (`SqlStore::change_probe`): the number stands while nothing is
//! committed and moves with every commit, of this store's connections or another
//! process's, across checkpoints and WAL restarts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use diesel::connection::SimpleConnection;
use keygate_store::{DbConn, PoolSettings, SqlStore};
use keygate_test_support::TestDb;

fn write(store: &SqlStore, n: i64) {
    store
        .with_conn(|c| match c {
            DbConn::Sqlite(c) => c.batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS probe_test (n INTEGER); INSERT INTO probe_test VALUES ({n});"
            )),
            #[allow(unreachable_patterns)]
            _ => unreachable!("a SQLite test"),
        })
        .unwrap();
}

#[test]
fn the_change_probe_moves_with_every_commit_and_only_then() {
    let db = TestDb::sqlite();
    let store = SqlStore::open(&db.url, PoolSettings::default()).unwrap();
    let other = SqlStore::open(&db.url, PoolSettings::default()).unwrap();
    let probe = store.change_probe().unwrap().expect("SQLite has a change probe");
    let mut seen = probe.version().unwrap();
    assert_eq!(probe.version().unwrap(), seen, "nothing committed");
    for round in 0..20 {
        // Ours, another store's (as another process), and after a checkpoint (the next
        // commit restarts the WAL from its start).
        let writer = if round % 2 == 0 { &store } else { &other };
        write(writer, round);
        let now = probe.version().unwrap();
        assert_ne!(now, seen, "round {round}: a commit moves it");
        assert_eq!(probe.version().unwrap(), now, "round {round}: and it stands after");
        seen = now;
        if round % 5 == 4 {
            store.checkpoint().unwrap();
            assert_eq!(probe.version().unwrap(), seen, "round {round}: a checkpoint commits nothing");
        }
    }
}
