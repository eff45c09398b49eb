//! SQLite's change number as the RBAC service's [`ChangeProbe`]: a number that moves with
//! every commit of any connection, in this process or another.
//!
//! Read from the WAL index (the `-shm` file every connection in WAL mode maps): the
//! header's change counter (`iChange`, raised by each write transaction's commit) and the
//! WAL's salt (new at each WAL restart), 48 bytes with one `pread`: no SQL to parse, no
//! lock to take, where `PRAGMA data_version` (the fallback, on a connection of the probe's
//! own that never writes) parsed its statement and took and released SQLite's file locks
//! (`fcntl`) at every look, several times a millisecond under load. The header is written
//! by SQLite with plain stores; a read that races one sees the old header (the commit is
//! not visible yet either) or a mixed one (it reads as a change: one poll too many, never a
//! change missed). The layout is SQLite's documented WAL-index format, shared by every
//! SQLite version that opens the file; a process opening it with `locking_mode=EXCLUSIVE`
//! keeps its index in private memory, which no other process can probe (keygate's own
//! processes never do).

use crate::tx::db_err;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use keygate_rbac::{ChangeProbe, StorageError};

/// The probe of one SQLite file.
pub struct SqliteProbe {
    /// Keeps the database open, so its WAL index stays; and asks `PRAGMA data_version`
    /// where the index cannot be read.
    conn: parking_lot::Mutex<diesel::SqliteConnection>,
    /// The WAL index (`<file>-shm`), when it could be opened.
    index: Option<std::fs::File>,
}

/// The WAL index header's first copy: `iChange` at byte 8, the salts at 32..40.
const INDEX_HEADER_BYTES: usize = 48;

impl std::fmt::Debug for SqliteProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteProbe")
    }
}

#[derive(QueryableByName)]
struct DataVersion {
    #[diesel(sql_type = BigInt)]
    data_version: i64,
}

impl SqliteProbe {
    /// A connection of its own to the file at `path` (WAL mode: it never waits for a
    /// writer).
    pub(crate) fn open(path: &str) -> Result<Self, diesel::ConnectionError> {
        let mut conn = diesel::SqliteConnection::establish(path)?;
        conn.batch_execute("PRAGMA busy_timeout = 1000; PRAGMA journal_mode = WAL;")
            .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
        // A read makes the connection open the WAL index.
        let _ = diesel::sql_query("PRAGMA data_version").get_result::<DataVersion>(&mut conn);
        let index = std::fs::File::open(format!("{path}-shm")).ok();
        Ok(Self { conn: parking_lot::Mutex::new(conn), index })
    }

    /// The WAL index's change counter and salt, as one number; `None` when it cannot be
    /// read (then `PRAGMA data_version` answers).
    #[cfg(unix)]
    fn index_version(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut header = [0u8; INDEX_HEADER_BYTES];
        self.index.as_ref()?.read_exact_at(&mut header, 0).ok()?;
        let word =
            |at: usize| u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
        // Not initialised yet (`isInit`): ask SQLite.
        if header[12] == 0 {
            return None;
        }
        Some(u64::from(word(8)) | (u64::from(word(32) ^ word(36)) << 32))
    }

    #[cfg(not(unix))]
    fn index_version(&self) -> Option<u64> {
        None
    }
}

impl ChangeProbe for SqliteProbe {
    fn version(&self) -> Result<u64, StorageError> {
        if let Some(v) = self.index_version() {
            return Ok(v);
        }
        let v: DataVersion =
            diesel::sql_query("PRAGMA data_version").get_result(&mut *self.conn.lock()).map_err(db_err)?;
        Ok(v.data_version as u64)
    }
}
