//! Everything keygate stores, copied from one database to another (SQLite to PostgreSQL
//! and back: `keygate store copy`, docs/operations.md, *Moving to PostgreSQL*), and two
//! databases compared table by table (`keygate store verify`).
//!
//! The copy reads one consistent snapshot of the source (a server may keep writing to it)
//! and writes the target, migrated first, in one transaction, in batches of rows: a copy
//! that fails leaves the target as it was. It then reads the target back and compares each
//! table's row count and [`Checksum`] with the snapshot's, and reads the source again to
//! report the tables written to after the snapshot (those writes are not in the copy).

mod checksum;
mod rows;
mod tables;

pub use checksum::Checksum;
pub use tables::TABLES;

use crate::{Backend, DbConn, SqlStore};
use keygate_rbac::StorageError;
use rows::Transaction;
use tables::Column;

/// Rows per insert statement, and the most bytes of rows one carries.
const BATCH_ROWS: usize = 1_000;
const BATCH_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The target holds rows and `replace` was not asked for.
    #[error(
        "the target's table {table} holds {rows} rows: copy into an empty database, or pass \
         --replace to empty it first (its data is lost)"
    )]
    TargetNotEmpty { table: String, rows: u64 },
    #[error("the source and the target are the same database")]
    SameDatabase,
    /// The two databases' schemas differ from each other or from this build's.
    #[error("{0}")]
    Schema(String),
    /// A table whose rows differ between the two sides.
    #[error(
        "table {table} differs: {source_rows} rows, checksum {source_checksum} in the source; \
         {target_rows} rows, checksum {target_checksum} in the target"
    )]
    Mismatch {
        table: String,
        source_rows: u64,
        source_checksum: String,
        target_rows: u64,
        target_checksum: String,
    },
    #[error("the {side}: {message}")]
    Database { side: &'static str, message: String },
}

impl CopyError {
    fn database(side: &str, e: impl std::fmt::Display) -> Self {
        let side = if side == "source" { "source" } else { "target" };
        Self::Database { side, message: e.to_string() }
    }
}

impl From<(&'static str, StorageError)> for CopyError {
    fn from((side, e): (&'static str, StorageError)) -> Self {
        Self::Database { side, message: e.to_string() }
    }
}

/// What is happening, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Rows read from the source's snapshot and written to the target.
    Copy,
    /// The target read back.
    Verify,
    /// The source read again, for what changed after the snapshot.
    Recheck,
}

#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub phase: Phase,
    pub table: &'a str,
    /// Rows done in this phase, all tables so far.
    pub rows_done: u64,
    /// Rows this phase goes through (the snapshot's count).
    pub rows_total: u64,
}

/// One table as copied: its rows and checksum (the same on both sides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub table: &'static str,
    pub rows: u64,
    pub checksum: String,
}

/// A table of the source that changed after the snapshot (not copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub table: &'static str,
    pub rows_at_snapshot: u64,
    pub rows_now: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: Vec<TableSummary>,
    pub rows: u64,
    pub changed_after_snapshot: Vec<Changed>,
}

/// Copies `source` (at this build's schema) into `target` (migrated), then verifies the
/// target against the snapshot. `replace`: empty a target that holds rows first (else it
/// is refused, naming a table that has rows).
pub fn copy(
    source: &SqlStore,
    target: &SqlStore,
    replace: bool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<CopyReport, CopyError> {
    if same_database(source.backend(), target.backend()) {
        return Err(CopyError::SameDatabase);
    }
    source.schema_is_current().map_err(|e| CopyError::Schema(format!("the source: {e}")))?;
    target.schema_is_current().map_err(|e| CopyError::Schema(format!("the target: {e}")))?;
    let mut src = source.conn().map_err(|e| CopyError::from(("source", e)))?;
    let mut dst = target.conn().map_err(|e| CopyError::from(("target", e)))?;
    tables::check_tables(&mut src, "source")?;
    tables::check_tables(&mut dst, "target")?;

    let mut snapshot = Transaction::snapshot(&mut src, "source")?;
    let mut counts = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        counts.push(tables::count(snapshot.conn(), "source", table)?);
    }
    let total: u64 = counts.iter().sum();

    let mut write = Transaction::write(&mut dst, "target")?;
    for table in TABLES {
        let rows = tables::count(write.conn(), "target", table)?;
        if rows > 0 && !replace {
            return Err(CopyError::TargetNotEmpty { table: table.to_string(), rows });
        }
    }
    if replace {
        for table in TABLES.iter().rev() {
            rows::delete_all(write.conn(), table)?;
        }
    }
    let mut sums = Vec::with_capacity(TABLES.len());
    let mut done = 0;
    for table in TABLES {
        let columns = shared_columns(snapshot.conn(), write.conn(), table)?;
        let mut sum = Checksum::default();
        let mut batch = Batch::default();
        let target = write.conn();
        rows::for_each_row(snapshot.conn(), "source", table, &columns, |row| {
            sum.add(row).map_err(|e| CopyError::database("source", format!("table {table}: {e}")))?;
            if batch.push(row) {
                done += batch.rows as u64;
                rows::insert_batch(target, table, &columns, &batch.take())?;
                progress(Progress { phase: Phase::Copy, table, rows_done: done, rows_total: total });
            }
            Ok(())
        })?;
        if batch.rows > 0 {
            done += batch.rows as u64;
            rows::insert_batch(target, table, &columns, &batch.take())?;
        }
        progress(Progress { phase: Phase::Copy, table, rows_done: done, rows_total: total });
        sums.push(sum);
    }
    write.commit()?;
    drop(snapshot);
    drop((src, dst));

    let copied: Vec<TableSummary> = TABLES
        .iter()
        .zip(&sums)
        .map(|(table, sum)| TableSummary { table, rows: sum.rows(), checksum: sum.hex() })
        .collect();
    let in_target = summaries(target, "target", Phase::Verify, total, progress)?;
    if let Some((s, t)) = copied.iter().zip(&in_target).find(|(s, t)| s != t) {
        return Err(mismatch(s, t));
    }
    let now = summaries(source, "source", Phase::Recheck, total, progress)?;
    let changed_after_snapshot = copied
        .iter()
        .zip(&now)
        .filter(|(then, now)| then != now)
        .map(|(then, now)| Changed { table: then.table, rows_at_snapshot: then.rows, rows_now: now.rows })
        .collect();
    Ok(CopyReport { rows: copied.iter().map(|t| t.rows).sum(), tables: copied, changed_after_snapshot })
}

/// Both databases' tables, each read in one snapshot, compared: every table's summary
/// when they hold the same rows, else [`CopyError::Mismatch`] for the first that differs.
pub fn verify(
    source: &SqlStore,
    target: &SqlStore,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<TableSummary>, CopyError> {
    source.schema_is_current().map_err(|e| CopyError::Schema(format!("the source: {e}")))?;
    target.schema_is_current().map_err(|e| CopyError::Schema(format!("the target: {e}")))?;
    let a = summaries(source, "source", Phase::Recheck, 0, progress)?;
    let b = summaries(target, "target", Phase::Verify, 0, progress)?;
    match a.iter().zip(&b).find(|(s, t)| s != t) {
        Some((s, t)) => Err(mismatch(s, t)),
        None => Ok(a),
    }
}

fn mismatch(s: &TableSummary, t: &TableSummary) -> CopyError {
    CopyError::Mismatch {
        table: s.table.to_string(),
        source_rows: s.rows,
        source_checksum: s.checksum.clone(),
        target_rows: t.rows,
        target_checksum: t.checksum.clone(),
    }
}

/// Every table's rows and checksum, read in one snapshot of `store`; `total` is what
/// progress counts against (0: unknown).
fn summaries(
    store: &SqlStore,
    side: &'static str,
    phase: Phase,
    total: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Vec<TableSummary>, CopyError> {
    let mut conn = store.conn().map_err(|e| CopyError::from((side, e)))?;
    tables::check_tables(&mut conn, side)?;
    let mut tx = Transaction::snapshot(&mut conn, side)?;
    let mut out = Vec::with_capacity(TABLES.len());
    let mut done = 0;
    for table in TABLES {
        let mut columns = tables::columns(tx.conn(), side, table)?;
        // One column order on both sides, whatever order their migrations added them in.
        columns.sort_by(|a, b| a.name.cmp(&b.name));
        let mut sum = Checksum::default();
        rows::for_each_row(tx.conn(), side, table, &columns, |row| {
            sum.add(row).map_err(|e| CopyError::database(side, format!("table {table}: {e}")))?;
            done += 1;
            if done % 10_000 == 0 {
                progress(Progress { phase, table, rows_done: done, rows_total: total });
            }
            Ok(())
        })?;
        out.push(TableSummary { table, rows: sum.rows(), checksum: sum.hex() });
    }
    tx.commit()?;
    Ok(out)
}

/// The target's columns of `table` in name order (as [`summaries`] reads them), after
/// checking the source has the same ones.
fn shared_columns(source: &mut DbConn, target: &mut DbConn, table: &str) -> Result<Vec<Column>, CopyError> {
    let mut theirs: Vec<String> =
        tables::columns(source, "source", table)?.into_iter().map(|c| c.name).collect();
    let mut ours = tables::columns(target, "target", table)?;
    theirs.sort();
    ours.sort_by(|a, b| a.name.cmp(&b.name));
    if ours.iter().map(|c| &c.name).ne(theirs.iter()) {
        return Err(CopyError::Schema(format!(
            "table {table} has other columns in the source and the target"
        )));
    }
    Ok(ours)
}

/// Whether two backends name one database (the same SQLite file, the same PostgreSQL URL).
fn same_database(a: &Backend, b: &Backend) -> bool {
    match (a, b) {
        (Backend::Sqlite(x), Backend::Sqlite(y)) => {
            let canonical = |p: &str| std::fs::canonicalize(p).unwrap_or_else(|_| p.into());
            canonical(x) == canonical(y)
        }
        (Backend::Postgres(x), Backend::Postgres(y)) => x == y,
        _ => false,
    }
}

/// Rows gathered into one JSON array for [`rows::insert_batch`].
#[derive(Default)]
struct Batch {
    text: String,
    rows: usize,
}

impl Batch {
    /// Adds a row; `true` when the batch is full.
    fn push(&mut self, row: &str) -> bool {
        self.text.push(if self.rows == 0 { '[' } else { ',' });
        self.text.push_str(row);
        self.rows += 1;
        self.rows >= BATCH_ROWS || self.text.len() >= BATCH_BYTES
    }

    fn take(&mut self) -> String {
        self.text.push(']');
        self.rows = 0;
        std::mem::take(&mut self.text)
    }
}
