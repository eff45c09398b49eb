//! A restart without a cold cache (issue 82): the verification cache's keys written to a
//! file when the process stops ([`Runtime::save_verify_cache`]) and read back when the next
//! starts ([`Runtime::load_verify_cache`]), each key used only if nothing it depends on
//! changed in between, so that a restarted instance answers from memory within a second
//! or two instead of loading each key on its first verification.
//!
//! Freshness. A key is cached under the change counters of its scopes (the key, its
//! workspace); the file records where the database's counters stood when it was written
//! (the highest change number `S`, and which counter carried it). Written: `S` read first,
//! then the counters polled, then only the keys whose counters still hold their tags kept:
//! every change numbered up to `S` was seen by that poll, so a kept key is current as of
//! `S`. Read: each key's tag read first from the counters in memory, then the scopes
//! changed after `S` read from the database, and a key whose key or workspace scope is
//! among them dropped; the others are cached under the tags read before, so a change that
//! commits after that read moves their counters past the tag, as for any load. The file is
//! used only by the database and schema that wrote it: the same latest migration, and the
//! counter that carried `S` still carrying it (another database's history, a restored
//! backup, or a history that moved past the mark since: the file is ignored). Change
//! numbers are exact where writers hold the database's write lock (SQLite): the snapshot is
//! written and read with the in-memory counters of the embedded default only.

use crate::Runtime;
use keygate_rbac::counters::{CounterSource, Scope};
use keygate_rbac::snapshot::{FORMAT, SnapshotError, SnapshotHeader, SnapshotReader, write_snapshot};
use keygate_rbac::{CachedKey, RbacError, RbacStore, StorageError};
use std::collections::HashSet;
use std::path::Path;

/// Why the verification cache's snapshot was not written or read.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("the snapshot file: {0}")]
    File(#[from] SnapshotError),
    #[error("the database: {0}")]
    Store(#[from] StorageError),
    #[error("the database: {0}")]
    Rbac(#[from] RbacError),
}

/// What a read of the snapshot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Warmed {
    /// Keys in the file.
    pub read: usize,
    /// Of those, cached (the others changed since).
    pub cached: usize,
}

impl Runtime {
    /// Writes the verification cache's current keys to `path` (through a file beside it,
    /// renamed into place): how many. Nothing (0) unless the counters are in memory (the
    /// embedded default).
    pub fn save_verify_cache(&self, path: &Path) -> Result<usize, WarmError> {
        let CounterSource::Local(local) = self.rbac.counter_source() else { return Ok(0) };
        let store = self.rbac.store();
        let Some((seq, scope, value, at)) = store.counter_mark(None)? else { return Ok(0) };
        let schema = store.latest_migration()?;
        // Every change numbered up to `seq` is in the counters after this poll.
        self.rbac.poll_changes()?;
        let cached = self.rbac.cached_keys();
        let current: Vec<(keygate_rbac::Digest, &CachedKey)> = cached
            .iter()
            .filter(|(_, s)| {
                local.read(&[Scope::Key(s.key().id()), Scope::Workspace(s.key().workspace_id())]) == s.tag()
            })
            .map(|(d, s)| (*d, s.key()))
            .collect();
        let header = SnapshotHeader {
            format: FORMAT,
            schema,
            seq,
            mark: Some((scope, value, at)),
            written_at: self.rbac.clock().now_ms() as i64,
        };
        let tmp = path.with_extension("partial");
        let file = std::fs::File::create(&tmp).map_err(SnapshotError::from)?;
        write_snapshot(std::io::BufWriter::new(file), &header, &current)?;
        std::fs::rename(&tmp, path).map_err(SnapshotError::from)?;
        Ok(current.len())
    }

    /// Reads the snapshot at `path` into the verification cache, the keys still current
    /// (see the module docs), and removes the file (it is read once: a later start finds
    /// none, rather than an older one). No file: nothing. A file of another database or
    /// schema, or a damaged one, is removed and nothing is cached.
    pub fn load_verify_cache(&self, path: &Path) -> Result<Warmed, WarmError> {
        let CounterSource::Local(local) = self.rbac.counter_source() else { return Ok(Warmed::default()) };
        let file = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Warmed::default()),
            Err(e) => return Err(SnapshotError::from(e).into()),
        };
        let reader = SnapshotReader::read(std::io::BufReader::new(file));
        std::fs::remove_file(path).map_err(SnapshotError::from)?;
        let reader = reader?;
        let header = reader.header().clone();
        let store = self.rbac.store();
        let now = store.counter_mark(Some(header.seq))?;
        let same_history = header.mark.as_ref().is_some_and(
            |(scope, value, at)| matches!(&now, Some((_, s, v, a)) if (s, v, a) == (scope, value, at)),
        );
        if header.schema != store.latest_migration()? || !same_history {
            log::info!(
                "verification cache: the snapshot at {} is of another database or schema: not used \
                 (change {} was {:?}, is {:?})",
                path.display(),
                header.seq,
                header.mark,
                now,
            );
            return Ok(Warmed::default());
        }
        let keys = reader.keys(self.rbac.cache_interner())?;
        // The tags first, then what changed since the snapshot.
        let tags: Vec<_> = keys
            .iter()
            .map(|(_, k)| local.read(&[Scope::Key(k.id()), Scope::Workspace(k.workspace_id())]))
            .collect();
        let (changed, _) = store_read_changes(self, header.seq)?;
        let mut cached = 0;
        let read = keys.len();
        for ((digest, key), tag) in keys.into_iter().zip(tags) {
            let (k, w) = (Scope::Key(key.id()).name(), Scope::Workspace(key.workspace_id()).name());
            if !changed.contains(&k) && !changed.contains(&w) {
                self.rbac.cache_key(digest, tag, key);
                cached += 1;
            }
        }
        Ok(Warmed { read, cached })
    }
}

/// The scopes whose counters changed after change number `seq`.
fn store_read_changes(rt: &Runtime, seq: i64) -> Result<(HashSet<String>, i64), RbacError> {
    let (changed, last) = rt.rbac.store().read(|tx| Ok(tx.counters_since(seq)?))?;
    Ok((changed.into_iter().map(|(name, _)| name).collect(), last))
}
