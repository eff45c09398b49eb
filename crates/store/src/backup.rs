//! Online backups of a SQLite database (docs/operations.md, *Backups*): `VACUUM INTO`, which
//! writes a consistent snapshot of the database (every transaction committed before it
//! began, nothing after) into a new file while other connections keep reading and writing.
//! The copy is a plain SQLite database, compacted, which a server starts on as it is.
//! PostgreSQL is backed up with its own tools (`pg_dump`).

use crate::{Backend, SqlStore};
use keygate_rbac::StorageError;
use std::path::{Path, PathBuf};

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub path: PathBuf,
    pub bytes: u64,
}

impl SqlStore {
    /// Writes a consistent copy of the (SQLite) database to `path`, which must not exist:
    /// first into a temporary file beside it, renamed into place once complete, so `path`
    /// never holds half a backup. PostgreSQL: refused (use `pg_dump`).
    pub fn backup_to(&self, path: &Path) -> Result<Backup, StorageError> {
        if !matches!(self.backend(), Backend::Sqlite(_)) {
            return Err(StorageError::Internal(
                "keygate backs up SQLite only; back PostgreSQL up with pg_dump (docs/operations.md)".into(),
            ));
        }
        if path.exists() {
            return Err(StorageError::Conflict(format!(
                "{} exists: a backup never overwrites",
                path.display()
            )));
        }
        let temporary = temporary_beside(path);
        let _ = std::fs::remove_file(&temporary);
        let written = self.vacuum_into(&temporary).and_then(|()| {
            std::fs::rename(&temporary, path)
                .map_err(|e| StorageError::Internal(format!("renaming the backup into place: {e}")))
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Ok(Backup { path: path.to_path_buf(), bytes })
    }

    #[cfg(feature = "sqlite")]
    fn vacuum_into(&self, target: &Path) -> Result<(), StorageError> {
        use diesel::RunQueryDsl;
        use diesel::sql_types::Text;
        let target = target.to_str().ok_or_else(|| {
            StorageError::Internal(format!("{}: the backup's path must be UTF-8", target.display()))
        })?;
        self.with_conn(|c| match c {
            crate::DbConn::Sqlite(c) => {
                diesel::sql_query("VACUUM INTO ?").bind::<Text, _>(target).execute(c).map(drop)
            }
            #[allow(unreachable_patterns)]
            _ => Ok(()),
        })
    }

    #[cfg(not(feature = "sqlite"))]
    fn vacuum_into(&self, _target: &Path) -> Result<(), StorageError> {
        Err(StorageError::Internal("this build has no SQLite".into()))
    }
}

/// `<dir>/.<name>.partial`: where a backup is written before it is complete.
fn temporary_beside(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.partial"))
}
