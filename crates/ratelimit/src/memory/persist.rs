//! A persistent in-process store: its shards' journals ([`super::journal`]) opened,
//! replayed, written and rewritten.

use super::journal::{self, Record, ShardJournal};
use super::{MemoryStore, Shard, key_hash};
use crate::{BudgetKey, WindowState};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

impl MemoryStore {
    /// A store whose budgets survive the process (a `kill -9` included): kept in `dir`
    /// (created if missing), whose journals are replayed now. `None` when another process
    /// holds `dir` (this one should then decide in memory alone). An error when the
    /// directory or its files cannot be read or written.
    pub fn persistent(dir: &Path, now_ms: u64) -> std::io::Result<Option<Self>> {
        let Some(lock) = journal::lock(dir)? else { return Ok(None) };
        let store = Self::default();
        let old = journal::files(dir)?;
        // Each (epoch, shard)'s file of the higher generation, epochs in order.
        let mut newest: BTreeMap<(u64, usize), (u64, Vec<u8>)> = BTreeMap::new();
        for found in &old {
            let bytes = std::fs::read(&found.path)?;
            let Some(generation) = journal::generation(&bytes) else { continue };
            let slot = newest.entry((found.epoch, found.shard)).or_insert((0, Vec::new()));
            if generation > slot.0 {
                *slot = (generation, bytes);
            }
        }
        let mut names: HashMap<String, Arc<String>> = HashMap::new();
        for (_, bytes) in newest.values() {
            journal::decode(bytes, |r| store.restore(&mut names, r, now_ms));
        }
        drop(newest);
        let epoch = old.iter().map(|f| f.epoch).max().unwrap_or(0) + 1;
        for (i, shard) in store.shards.iter().enumerate() {
            let mut shard = shard.lock();
            shard.journal = Some(ShardJournal::create(dir, epoch, i)?);
            shard.write_journal(now_ms)?;
        }
        // Only once every shard's budgets are in the new epoch's files.
        for found in old.iter().filter(|f| f.epoch < epoch) {
            std::fs::remove_file(&found.path)?;
        }
        let mut store = store;
        store._lock = Some(lock);
        Ok(Some(store))
    }

    /// Sets a budget's state as a journal's record gives it (the last record of a budget
    /// is its state).
    fn restore(&self, names: &mut HashMap<String, Arc<String>>, r: Record<'_>, now_ms: u64) {
        let Ok(identifier) = std::str::from_utf8(r.identifier) else { return };
        let namespace_id = match names.get(r.namespace_id) {
            Some(ns) => ns.clone(),
            None => {
                let ns = Arc::new(r.namespace_id.to_string());
                names.insert(r.namespace_id.to_string(), ns.clone());
                ns
            }
        };
        let key = BudgetKey {
            namespace_id: &namespace_id,
            identifier,
            duration: r.duration,
            algorithm: r.algorithm,
        };
        let hash = key_hash(&self.hasher, identifier.as_bytes());
        let mut shard = self.shard(hash).lock();
        self.update_in(&mut shard, key, r.parity, hash, now_ms, |_| (r.state, ()));
    }

    /// The bytes of records the shards' journals hold (0 for a volatile store).
    pub fn journal_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().journal.as_ref().map_or(0, |j| j.len())).sum()
    }
}

impl Shard {
    /// Appends a budget's new state (in the table already) to the shard's journal; a
    /// journal that is full is rewritten with the shard's live budgets, this one's state
    /// among them.
    #[inline(never)]
    pub(super) fn journal_state(&mut self, key: &BudgetKey<'_>, parity: u8, state: WindowState, now_ms: u64) {
        let Some(j) = &mut self.journal else { return };
        let record = Record {
            namespace_id: key.namespace_id,
            duration: key.duration,
            algorithm: key.algorithm,
            parity,
            identifier: key.identifier.as_bytes(),
            state,
        };
        if j.push(&record) {
            return;
        }
        if let Err(e) = self.write_journal(now_ms) {
            // The decisions go on in memory; only a restart would forget them.
            log::error!(
                "rate-limit store: cannot rewrite a shard's journal: {e}; its budgets are kept in memory only until a restart"
            );
            self.journal = None;
        }
    }

    /// Writes the shard's live budgets (windows not ended, buckets not full) into its
    /// journal's other file, which it then uses.
    pub(super) fn write_journal(&mut self, now_ms: u64) -> std::io::Result<()> {
        fn live(class: &super::Class, now_ms: u64) -> impl Iterator<Item = &super::Entry> {
            let (duration, algorithm) = (class.duration, class.algorithm);
            class
                .table
                .values()
                .filter(move |e| !crate::algorithm::is_spent(algorithm, &e.state, duration, now_ms))
        }
        let Shard { classes, journal, .. } = self;
        let Some(journal) = journal else { return Ok(()) };
        let bytes: usize = classes
            .iter()
            .flat_map(|c| {
                live(c, now_ms).map(move |e| journal::record_len(&c.namespace_id, e.id.bytes(&c.arena)))
            })
            .sum();
        let records = classes.iter().flat_map(|class| {
            live(class, now_ms).map(move |e| Record {
                namespace_id: &class.namespace_id,
                duration: class.duration,
                algorithm: class.algorithm,
                parity: class.parity,
                identifier: e.id.bytes(&class.arena),
                state: e.state,
            })
        });
        journal.rewrite(records, bytes)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Algorithm, BudgetKey, LimitRequest, MemoryStore};
    use std::sync::Arc;

    fn limit(s: &MemoryStore, ns: &Arc<String>, id: &str, alg: Algorithm, limit: u64, now: u64) -> bool {
        let key = BudgetKey { namespace_id: ns, identifier: id, duration: 60_000, algorithm: alg };
        s.check(key, LimitRequest { limit, duration: 60_000, cost: 1 }, now).success
    }

    #[test]
    fn budgets_survive_a_reopen_under_every_algorithm() {
        let dir = tempfile::tempdir().expect("dir");
        let ns = Arc::new("rlns_1".to_string());
        let now = 1_000_000_000_020;
        for alg in Algorithm::ALL {
            let long = format!("{}-an-identifier-longer-than-fifteen-bytes", alg.as_str());
            let s = MemoryStore::persistent(dir.path(), now).expect("open").expect("owner");
            for id in [alg.as_str(), long.as_str()] {
                let passed = (0..60).filter(|_| limit(&s, &ns, id, alg, 100, now)).count();
                assert_eq!(passed, 60);
            }
            drop(s);
            let s = MemoryStore::persistent(dir.path(), now + 1).expect("reopen").expect("owner");
            for id in [alg.as_str(), long.as_str()] {
                let passed = (0..100).filter(|_| limit(&s, &ns, id, alg, 100, now + 1)).count();
                assert_eq!(passed, 40, "{alg:?} {id}: what is left of the budget, no more");
            }
        }
    }

    #[test]
    fn a_second_process_is_refused_the_directory() {
        let dir = tempfile::tempdir().expect("dir");
        let first = MemoryStore::persistent(dir.path(), 0).expect("open");
        assert!(first.is_some());
        assert!(MemoryStore::persistent(dir.path(), 0).expect("open").is_none());
        drop(first);
        assert!(MemoryStore::persistent(dir.path(), 0).expect("open").is_some());
    }

    #[test]
    fn journals_stay_within_a_small_factor_of_the_live_budgets() {
        let dir = tempfile::tempdir().expect("dir");
        let ns = Arc::new("rlns_1".to_string());
        let s = MemoryStore::persistent(dir.path(), 0).expect("open").expect("owner");
        // 20 windows of 2,000 identifiers, 10 decisions each: 400,000 records of ~60 bytes.
        for w in 0..20u64 {
            let now = w * 60_000;
            for i in 0..2_000 {
                for _ in 0..10 {
                    limit(&s, &ns, &format!("user-{i}"), Algorithm::Fixed, 1_000, now);
                }
            }
        }
        // Written without a rewrite, the records would take 22 MB; each shard's two files
        // hold at most their minimum size or twice the live budgets' records.
        let live = 2_000 * super::journal::record_len("rlns_1", b"user-1000");
        let bound = 2 * 64 * super::journal::MIN_CAPACITY + 8 * live;
        assert!(s.journal_bytes() <= bound, "{} bytes of records for {live} live", s.journal_bytes());
        let files: usize = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").metadata().expect("meta").len() as usize)
            .sum();
        assert!(files <= bound, "{files} bytes of files");
        drop(s);
        let s = MemoryStore::persistent(dir.path(), 19 * 60_000).expect("open").expect("owner");
        assert_eq!(s.stats().entries, 2_000, "only the last window's budgets come back");
    }
}
