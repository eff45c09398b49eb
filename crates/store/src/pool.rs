use crate::backend::{Backend, BackendError};
use crate::conn::DbConn;
use crate::tx::{DieselTx, db_err};
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::prelude::*;
use diesel::r2d2::{self, ManageConnection, Pool, PooledConnection, R2D2Connection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};
use std::time::Duration;

#[cfg(feature = "sqlite")]
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
#[cfg(feature = "postgres")]
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");

/// Key of the PostgreSQL advisory lock held while migrating, so that several instances
/// starting at once migrate one after the other.
#[cfg(feature = "postgres")]
pub const MIGRATION_LOCK_KEY: i64 = 0x6b65_7967_6174_6501;

/// How long migrating may wait for another instance's migration and run its statements
/// (ms): PostgreSQL's statement timeout and SQLite's busy timeout while migrating, in
/// place of the per-request ones, which a loaded server or a large table may exceed.
pub const MIGRATION_TIMEOUT_MS: u64 = 3_600_000;

/// SQLite: the WAL's size (pages) at which a committing connection of ours checkpoints it
/// itself, copying the WAL into the database file and syncing it inside that commit. The
/// runtime's upkeep checkpoints in the background every 100 ms ([`SqlStore::checkpoint`]),
/// so this is only the backstop of a process without it (64 MiB of 4 KiB pages); at
/// SQLite's default of 1,000 pages a busy server checkpointed on its request path every
/// few tens of milliseconds, stalling every answer behind that commit.
pub const WAL_AUTOCHECKPOINT_PAGES: u32 = 16_384;

/// SQLite: the size (bytes) the WAL file is cut back to after it was reset. Under a steady
/// load of readers the WAL grows past the checkpoints before one finds it free to restart
/// from its start; without a limit the file then keeps that high-water mark for good (the
/// soak saw 100 MB). 64 MiB: [`WAL_AUTOCHECKPOINT_PAGES`] pages of 4 KiB.
#[cfg(feature = "sqlite")]
pub const WAL_SIZE_LIMIT_BYTES: u64 = 64 << 20;

/// Pool and connection settings.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_size: u32,
    /// How long a request waits for a connection (and a new connection to open).
    pub connect_timeout: Duration,
    /// PostgreSQL `statement_timeout`; SQLite `busy_timeout`.
    pub statement_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            max_size: 8,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreOpenError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("cannot open the database: {0}")]
    Connect(String),
    #[error("migrations failed: {0}")]
    Migrate(String),
}

/// Opens connections of the configured backend, with the per-connection settings that
/// production and tests share (SQLite: foreign keys, WAL, busy timeout).
#[derive(Debug)]
pub(crate) struct Manager {
    backend: Backend,
    settings: PoolSettings,
}

impl ManageConnection for Manager {
    type Connection = DbConn;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<DbConn, r2d2::Error> {
        let timeout_ms = self.settings.statement_timeout.as_millis();
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(path) => {
                let mut c =
                    diesel::SqliteConnection::establish(path).map_err(r2d2::Error::ConnectionError)?;
                c.batch_execute(&format!(
                    "PRAGMA busy_timeout = {timeout_ms}; PRAGMA journal_mode = WAL; \
                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
                     PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}; \
                     PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES};"
                ))
                .map_err(r2d2::Error::QueryError)?;
                Ok(DbConn::Sqlite(c))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(url) => {
                let mut c = diesel::PgConnection::establish(&with_connect_timeout(
                    url,
                    self.settings.connect_timeout,
                ))
                .map_err(r2d2::Error::ConnectionError)?;
                c.batch_execute(&format!("SET statement_timeout = {timeout_ms}"))
                    .map_err(r2d2::Error::QueryError)?;
                // No client-side prepared-statement cache: a cached statement gets a generic
                // plan, and the generic plan of `workspace_id = $1 AND name = ANY($2)`
                // degrades to a sequential scan while a workspace grows (seen: 10 ms instead
                // of 0.1 ms at 10k permissions). Unnamed statements are planned with their
                // real parameters. (`plan_cache_mode = force_custom_plan` would do the same
                // but also re-plan every foreign-key check, which costs more.)
                c.set_prepared_statement_cache_size(diesel::connection::CacheSize::Disabled);
                Ok(DbConn::Pg(c))
            }
            // Refused by `Backend::from_url` before a pool is built.
            #[allow(unreachable_patterns)]
            other => Err(r2d2::Error::ConnectionError(diesel::ConnectionError::BadConnection(format!(
                "this build has no {} backend",
                other.kind()
            )))),
        }
    }

    fn is_valid(&self, conn: &mut DbConn) -> Result<(), r2d2::Error> {
        match conn {
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => c.ping(),
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => c.ping(),
        }
        .map_err(r2d2::Error::QueryError)
    }

    /// Cheap, no query: diesel's own notion of a broken connection (a transaction left
    /// open or failed, a lost PostgreSQL connection). A discarded connection is replaced.
    fn has_broken(&self, conn: &mut DbConn) -> bool {
        std::thread::panicking()
            || match conn {
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => c.is_broken(),
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => c.is_broken(),
            }
    }
}

/// Adds `connect_timeout` (seconds) to a libpq URL unless it names one.
#[cfg(feature = "postgres")]
fn with_connect_timeout(url: &str, timeout: Duration) -> String {
    if url.contains("connect_timeout=") {
        return url.to_string();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}connect_timeout={}", timeout.as_secs().max(1))
}

/// The SQL store: an r2d2 pool of [`DbConn`] implementing [`RbacStore`].
#[derive(Clone)]
pub struct SqlStore {
    pool: Pool<Manager>,
    backend: Backend,
    /// SQLite: this process's writers, one at a time (see [`Self::write_tx`]).
    writer: std::sync::Arc<parking_lot::Mutex<()>>,
    /// How long a writer waits for the others (SQLite's busy timeout); PostgreSQL's
    /// statement timeout.
    write_wait: Duration,
}

impl std::fmt::Debug for SqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SqlStore({}: {})", self.backend.kind(), self.backend.display_location())
    }
}

impl SqlStore {
    /// Opens the pool and runs pending migrations.
    pub fn open(url: &str, settings: PoolSettings) -> Result<Self, StoreOpenError> {
        let store = Self::open_as_is(url, settings)?;
        store.migrate()?;
        Ok(store)
    }

    /// Opens the pool without migrating (a database another version may be serving: see
    /// [`Self::schema_is_current`]).
    pub fn open_as_is(url: &str, settings: PoolSettings) -> Result<Self, StoreOpenError> {
        let backend = Backend::from_url(url)?;
        let manager = Manager { backend: backend.clone(), settings: settings.clone() };
        let pool = Pool::builder()
            .max_size(settings.max_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(settings.connect_timeout)
            .test_on_check_out(false)
            // A failed connection attempt is reported once, by the caller that waited for it
            // (its error carries the last attempt's reason), not logged again per retry.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build(manager)
            .map_err(|e| StoreOpenError::Connect(e.to_string()))?;
        Ok(Self { pool, backend, writer: Default::default(), write_wait: settings.statement_timeout })
    }

    /// A file beside the SQLite database's (`<database file><suffix>`); none for
    /// PostgreSQL.
    pub fn beside_database(&self, suffix: &str) -> Option<std::path::PathBuf> {
        match &self.backend {
            Backend::Sqlite(path) => Some(format!("{path}{suffix}").into()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The latest migration applied to the database (its version).
    pub fn latest_migration(&self) -> Result<String, StorageError> {
        let mut conn = self.conn()?;
        let applied = match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => c.applied_migrations().map(|v| v.iter().map(|m| m.to_string()).max()),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => c.applied_migrations().map(|v| v.iter().map(|m| m.to_string()).max()),
        };
        applied.map(Option::unwrap_or_default).map_err(|e| StorageError::Internal(e.to_string()))
    }

    /// Whether the database's applied migrations are exactly this build's: `Ok(())`, or
    /// why not (some pending: an older schema; some unknown: a newer keygate's).
    pub fn schema_is_current(&self) -> Result<(), StoreOpenError> {
        let mut conn = self.conn().map_err(|e| StoreOpenError::Connect(e.to_string()))?;
        let fail = |e: &dyn std::fmt::Display| StoreOpenError::Migrate(e.to_string());
        macro_rules! compare {
            ($c:expr, $migrations:expr, $db:ty) => {{
                let applied: Vec<String> =
                    $c.applied_migrations().map_err(|e| fail(&e))?.iter().map(|v| v.to_string()).collect();
                let known: Vec<String> = diesel::migration::MigrationSource::<$db>::migrations(&$migrations)
                    .map_err(|e| fail(&e))?
                    .iter()
                    .map(|m| m.name().version().to_string())
                    .collect();
                (applied, known)
            }};
        }
        let (applied, known) = match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => compare!(c, SQLITE_MIGRATIONS, diesel::sqlite::Sqlite),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => compare!(c, POSTGRES_MIGRATIONS, diesel::pg::Pg),
        };
        if let Some(pending) = known.iter().find(|v| !applied.contains(v)) {
            return Err(StoreOpenError::Migrate(format!(
                "its schema is older than this keygate's (migration {pending} not applied): start \
                 this version's server on it once"
            )));
        }
        if let Some(unknown) = applied.iter().find(|v| !known.contains(v)) {
            return Err(StoreOpenError::Migrate(format!(
                "its schema is newer than this keygate's (migration {unknown} unknown): use the \
                 keygate that serves it"
            )));
        }
        Ok(())
    }

    /// SQLite: a [`keygate_rbac::ChangeProbe`] of this file (its own connection), for a
    /// process sharing the file with others ([`keygate_rbac::RbacService::with_change_probe`]);
    /// `None` for PostgreSQL (its instances read shared counters instead).
    pub fn change_probe(
        &self,
    ) -> Result<Option<std::sync::Arc<dyn keygate_rbac::ChangeProbe>>, StoreOpenError> {
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(path) => {
                let probe = crate::probe::SqliteProbe::open(path)
                    .map_err(|e| StoreOpenError::Connect(e.to_string()))?;
                Ok(Some(std::sync::Arc::new(probe)))
            }
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// SQLite: copies what the WAL holds into the database file where no reader still
    /// needs it (`PRAGMA wal_checkpoint(PASSIVE)`: it waits for no writer or reader), off
    /// the request path; nothing for PostgreSQL. See [`WAL_AUTOCHECKPOINT_PAGES`].
    pub fn checkpoint(&self) -> Result<(), StorageError> {
        match &self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => {
                let mut conn = self.conn()?;
                match &mut *conn {
                    DbConn::Sqlite(c) => {
                        c.batch_execute("PRAGMA wal_checkpoint(PASSIVE);").map_err(crate::tx::db_err)
                    }
                    #[allow(unreachable_patterns)]
                    _ => Ok(()),
                }
            }
            #[allow(unreachable_patterns)]
            _ => Ok(()),
        }
    }

    pub(crate) fn conn(&self) -> Result<PooledConnection<Manager>, StorageError> {
        self.pool.get().map_err(|e| crate::tx::unavailable(format!("no database connection: {e}")))
    }

    /// The pool now: (connections open, of which idle).
    pub fn pool_state(&self) -> (u32, u32) {
        let state = self.pool.state();
        (state.connections, state.idle_connections)
    }

    /// Runs the pending migrations of this backend's folder.
    pub fn migrate(&self) -> Result<(), StoreOpenError> {
        let mut conn = self.conn().map_err(|e| StoreOpenError::Connect(e.to_string()))?;
        let fail = |e: &dyn std::fmt::Display| StoreOpenError::Migrate(e.to_string());
        match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => {
                // Under the write lock: instances starting together migrate one at a time,
                // and each sees what the previous one did.
                c.batch_execute(&format!("PRAGMA busy_timeout = {MIGRATION_TIMEOUT_MS}"))
                    .map_err(|e| fail(&e))?;
                let result = c
                    .immediate_transaction(|c| {
                        c.run_pending_migrations(SQLITE_MIGRATIONS)
                            .map(drop)
                            .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
                    })
                    .map_err(|e| fail(&e));
                let restore =
                    c.batch_execute(&format!("PRAGMA busy_timeout = {}", self.write_wait.as_millis()));
                result?;
                restore.map_err(|e| fail(&e))?;
            }
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                // The pooled connection gets the per-request timeout back after.
                c.batch_execute(&format!(
                    "SET statement_timeout = {MIGRATION_TIMEOUT_MS}; \
                     SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"
                ))
                .map_err(|e| fail(&e))?;
                let result = c.run_pending_migrations(POSTGRES_MIGRATIONS).map(|_| ()).map_err(|e| fail(&e));
                let unlock = c.batch_execute(&format!(
                    "SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY}); SET statement_timeout = {}",
                    self.write_wait.as_millis()
                ));
                result?;
                unlock.map_err(|e| fail(&e))?;
            }
        }
        Ok(())
    }

    /// Reverts every migration (tests of the migrations themselves).
    pub fn revert_all_migrations(&self) -> Result<(), StoreOpenError> {
        let mut conn = self.conn().map_err(|e| StoreOpenError::Connect(e.to_string()))?;
        let fail = |e: &dyn std::fmt::Display| StoreOpenError::Migrate(e.to_string());
        match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => c.revert_all_migrations(SQLITE_MIGRATIONS).map(|_| ()).map_err(|e| fail(&e)),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => c.revert_all_migrations(POSTGRES_MIGRATIONS).map(|_| ()).map_err(|e| fail(&e)),
        }
    }

    /// Reverts every migration after `version` (its folder name's leading date and number,
    /// `2026-11-25-000008`): tests of an upgrade write the data of that release, then
    /// [`Self::migrate`].
    pub fn revert_migrations_after(&self, version: &str) -> Result<(), StoreOpenError> {
        let mut conn = self.conn().map_err(|e| StoreOpenError::Connect(e.to_string()))?;
        let fail = |e: &dyn std::fmt::Display| StoreOpenError::Migrate(e.to_string());
        // diesel writes versions without the dashes.
        let version: String = version.chars().filter(char::is_ascii_digit).collect();
        macro_rules! revert {
            ($c:expr, $migrations:expr) => {
                loop {
                    let applied = $c.applied_migrations().map_err(|e| fail(&e))?;
                    let latest = applied.iter().map(|v| v.to_string()).max().unwrap_or_default();
                    if latest.as_str() <= version.as_str() {
                        break Ok(());
                    }
                    $c.revert_last_migration($migrations).map_err(|e| fail(&e))?;
                }
            };
        }
        match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => revert!(c, SQLITE_MIGRATIONS),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => revert!(c, POSTGRES_MIGRATIONS),
        }
    }

    /// Runs `f` on a pooled connection (tests and tools that need raw SQL).
    pub fn with_conn<T>(&self, f: impl FnOnce(&mut DbConn) -> QueryResult<T>) -> Result<T, StorageError> {
        let mut conn = self.conn()?;
        f(&mut conn).map_err(db_err)
    }
}

impl SqlStore {
    /// A write transaction. SQLite: BEGIN IMMEDIATE takes the write lock up front, so
    /// concurrent writers wait (busy_timeout) instead of failing on a lock upgrade; and
    /// this process's writers queue on a lock of their own first, woken as soon as the one
    /// before commits: SQLite's busy handler sleeps 1, 2, 5, 10, ... ms between tries, so a
    /// commit that met another of ours (a verification's credit spend meeting the analytics
    /// flush) slept up to ~80 ms, on the worker that serves every request. Other processes
    /// still meet the busy handler. PostgreSQL: a plain BEGIN; writers serialize on the
    /// rows they lock.
    pub(crate) fn write_tx<T>(
        &self,
        f: impl FnOnce(&mut DieselTx<'_>) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let _span = self.span("database write").entered();
        if self.backend.kind() != "sqlite" {
            return self.run_in("BEGIN IMMEDIATE", "BEGIN", f);
        }
        let Some(turn) = self.writer.try_lock_for(self.write_wait) else {
            return Err(
                crate::tx::unavailable("the database is busy: another write took too long".into()).into()
            );
        };
        let out = self.run_in("BEGIN IMMEDIATE", "BEGIN", f);
        // Handed to a waiting writer, if any: a writer of many transactions in a row (the
        // analytics flush's chunks) lets the others in between.
        parking_lot::MutexGuard::unlock_fair(turn);
        out
    }

    /// Reads of one snapshot. SQLite (WAL): a deferred transaction reads one snapshot and
    /// takes no write lock. PostgreSQL: every statement sees the snapshot of the first.
    pub(crate) fn snapshot_tx<T>(
        &self,
        f: impl FnOnce(&mut DieselTx<'_>) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let _span = self.span("database snapshot").entered();
        self.run_in("BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", f)
    }

    /// Reads outside a transaction.
    pub(crate) fn read_tx<T>(
        &self,
        f: impl FnOnce(&mut DieselTx<'_>) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let _span = self.span("database read").entered();
        let mut conn = self.conn()?;
        f(&mut DieselTx::new(&mut conn))
    }

    /// The trace span of one use of the database, `name` (disabled, and free, unless the
    /// program traces: docs/operations.md, "Observability"). It covers the wait for a
    /// pooled connection.
    fn span(&self, name: &'static str) -> tracing::Span {
        let system = match self.backend.kind() {
            "postgres" => "postgresql",
            other => other,
        };
        keygate_domain::trace::child_span(|| {
            tracing::info_span!("database", otel.name = name, otel.kind = "client", db.system.name = system)
        })
    }

    /// Runs `f` in a transaction begun with `sqlite_begin` / `pg_begin`: committed when `f`
    /// succeeds, rolled back when it fails.
    fn run_in<T, F>(&self, sqlite_begin: &str, pg_begin: &str, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut DieselTx<'_>) -> Result<T, RbacError>,
    {
        // Each begin is read only when its backend's feature is built.
        let _ = (sqlite_begin, pg_begin);
        let mut conn = self.conn()?;
        let begun = match &mut *conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => AnsiTransactionManager::begin_transaction_sql(c, sqlite_begin),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => AnsiTransactionManager::begin_transaction_sql(c, pg_begin),
        };
        begun.map_err(db_err)?;
        let result = f(&mut DieselTx::new(&mut conn));
        let end = match (&mut *conn, result.is_ok()) {
            #[cfg(feature = "sqlite")]
            (DbConn::Sqlite(c), true) => AnsiTransactionManager::commit_transaction(c),
            #[cfg(feature = "postgres")]
            (DbConn::Pg(c), true) => AnsiTransactionManager::commit_transaction(c),
            #[cfg(feature = "sqlite")]
            (DbConn::Sqlite(c), false) => AnsiTransactionManager::rollback_transaction(c),
            #[cfg(feature = "postgres")]
            (DbConn::Pg(c), false) => AnsiTransactionManager::rollback_transaction(c),
        };
        match (result, end) {
            (Ok(v), Ok(())) => Ok(v),
            (Ok(_), Err(e)) => Err(db_err(e).into()),
            (Err(e), Ok(())) => Err(e),
            (Err(e), Err(rollback)) => {
                log::warn!("rollback failed: {rollback}");
                Err(e)
            }
        }
    }
}

impl RbacStore for SqlStore {
    fn transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.write_tx(|tx| f(tx))
    }

    fn snapshot<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.snapshot_tx(|tx| f(tx))
    }

    fn read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn RbacTx) -> Result<T, RbacError>,
    {
        self.read_tx(|tx| f(tx))
    }

    /// On PostgreSQL one statement (`tx/keys.rs`), outside a transaction: one statement
    /// sees one snapshot. Elsewhere, or when that statement did not read a counter asked
    /// for, a snapshot of several reads.
    fn verification_read(
        &self,
        hash: &str,
        counters: &keygate_rbac::store::CounterNames<'_>,
    ) -> Result<(Option<keygate_rbac::KeySummary>, Vec<u64>), RbacError> {
        #[cfg(feature = "postgres")]
        if self.backend.kind() == "postgres" {
            let _span = self.span("database read").entered();
            let mut conn = self.conn()?;
            if let DbConn::Pg(c) = &mut *conn
                && let Some(read) = crate::tx::pg_verification_read(c, hash, counters)?
            {
                return Ok(read);
            }
        }
        self.snapshot_tx(|tx| keygate_rbac::verification_read(tx, hash, counters))
    }

    fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    fn ping(&self) -> Result<(), StorageError> {
        self.with_conn(|c| c.batch_execute("SELECT 1"))
    }
}
