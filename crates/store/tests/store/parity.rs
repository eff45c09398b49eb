//! The two backends have the same schema: same migration versions, and after migrating,
//! the same tables with the same columns (name, type, nullability); up -> down -> up works.
//! The PostgreSQL half needs `KEYGATE_TEST_POSTGRES_URL` (`.ci/run` sets it).

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use keygate_store::{PoolSettings, SqlStore};
use keygate_test_support::TestDb;
use std::collections::BTreeSet;
use std::path::Path;

fn versions(dir: &str) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations").join(dir);
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&root).expect("migrations dir") {
        let entry = entry.expect("entry");
        if entry.path().is_dir() {
            for file in ["up.sql", "down.sql"] {
                assert!(entry.path().join(file).is_file(), "{}/{file} exists", entry.path().display());
            }
            out.insert(entry.file_name().to_string_lossy().into_owned());
        }
    }
    out
}

#[test]
fn both_migration_folders_list_the_same_versions() {
    let sqlite = versions("sqlite");
    assert!(!sqlite.is_empty());
    assert_eq!(sqlite, versions("postgres"));
}

#[derive(QueryableByName, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Column {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    column_name: String,
    #[diesel(sql_type = Text)]
    data_type: String,
    #[diesel(sql_type = BigInt)]
    not_null: i64,
}

// Bytes are `BLOB` in SQLite, `bytea` in PostgreSQL: one name for both here.
const SQLITE_COLUMNS: &str = "SELECT m.name AS table_name, p.name AS column_name, \
     CASE lower(p.type) WHEN 'blob' THEN 'bytea' ELSE lower(p.type) END AS data_type, \
     CAST(p.\"notnull\" AS BIGINT) AS not_null FROM sqlite_master m JOIN pragma_table_info(m.name) p \
     WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name <> '__diesel_schema_migrations'";
const POSTGRES_COLUMNS: &str = "SELECT table_name::text AS table_name, column_name::text AS column_name, \
     data_type::text AS data_type, CAST(CASE WHEN is_nullable = 'NO' THEN 1 ELSE 0 END AS BIGINT) AS not_null \
     FROM information_schema.columns WHERE table_schema = current_schema() \
     AND table_name <> '__diesel_schema_migrations'";

fn columns(store: &SqlStore, postgres: bool) -> BTreeSet<(String, String, String, i64)> {
    let sql = if postgres { POSTGRES_COLUMNS } else { SQLITE_COLUMNS };
    let rows: Vec<Column> = store.with_conn(|c| diesel::sql_query(sql).load(c)).expect("columns");
    rows.into_iter().map(|c| (c.table_name, c.column_name, c.data_type, c.not_null)).collect()
}

fn up_down_up(store: &SqlStore, postgres: bool) -> BTreeSet<(String, String, String, i64)> {
    let first = columns(store, postgres);
    store.revert_all_migrations().expect("down");
    assert!(columns(store, postgres).is_empty(), "down removes every table");
    store.migrate().expect("up again");
    let again = columns(store, postgres);
    assert_eq!(first, again, "up -> down -> up gives the same schema");
    again
}

/// SQLite's migrations: up, down, up again, and the tables they make.
fn sqlite_columns() -> BTreeSet<(String, String, String, i64)> {
    let sqlite_db = TestDb::sqlite();
    let sqlite = SqlStore::open(&sqlite_db.url, PoolSettings::default()).expect("sqlite");
    let sqlite_cols = up_down_up(&sqlite, false);
    let tables: BTreeSet<&str> = sqlite_cols.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(tables.len(), keygate_store::copy::TABLES.len(), "{tables:?}");
    sqlite_cols
}

#[test]
fn sqlite_migrations_go_up_down_and_up_again() {
    sqlite_columns();
}

#[test]
#[ignore = "needs PostgreSQL: set KEYGATE_TEST_POSTGRES_URL and run with --include-ignored (.ci/run does)"]
fn both_backends_have_the_same_tables_and_columns() {
    let sqlite_cols = sqlite_columns();
    let base = TestDb::postgres_url()
        .expect("KEYGATE_TEST_POSTGRES_URL must be set for this (ignored by default) test");
    let pg_db = TestDb::postgres(&base);
    let pg = SqlStore::open(&pg_db.url, PoolSettings::default()).expect("postgres");
    let pg_cols = up_down_up(&pg, true);
    assert_eq!(sqlite_cols, pg_cols);
}
