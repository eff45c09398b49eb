//! SQLite's change number (`PRAGMA data_version`) as the RBAC service's [`ChangeProbe`]:
//! one dedicated connection that never writes, so its number moves with every commit of
//! any other connection, in this process or another.

use crate::tx::db_err;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use keygate_rbac::{ChangeProbe, StorageError};

/// The probe of one SQLite file.
pub struct SqliteProbe {
    conn: parking_lot::Mutex<diesel::SqliteConnection>,
}

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
        conn.batch_execute("PRAGMA busy_timeout = 1000;")
            .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
        Ok(Self { conn: parking_lot::Mutex::new(conn) })
    }
}

impl ChangeProbe for SqliteProbe {
    fn version(&self) -> Result<u64, StorageError> {
        let v: DataVersion =
            diesel::sql_query("PRAGMA data_version").get_result(&mut *self.conn.lock()).map_err(db_err)?;
        Ok(v.data_version as u64)
    }
}
