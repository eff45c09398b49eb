//! The in-process store: a fixed number of shards, each a `hashbrown::HashTable` behind a
//! spin lock. The key's hash is computed once per call and picks both the shard
//! (from its middle bits) and the bucket (its low and top bits, as hashbrown uses them).
//!
//! # Memory
//! One live budget costs one [`Entry`] of 64 bytes (the namespace as a shared `Arc<str>`,
//! the identifier inline when it has at most 24 bytes, duration, window, used) plus one
//! control byte, times the table's spare capacity (load factor <= 7/8, growth doubles):
//! 74-150 bytes, about 100 on average, per live `(namespace, identifier, duration)`. An
//! identifier longer than 24 bytes adds one heap allocation of its length. 1M live budgets
//! with short identifiers take about 100 MB.
//!
//! # Hot path
//! One hash of the key (foldhash), one uncontended lock, one probe. Equality checks the
//! duration, the namespace by pointer (every entry of a namespace shares the caller's
//! `Arc<str>`; bytes are compared only when pointers differ) and the identifier, inline for
//! short ones: a decision on an existing budget touches one 64-byte entry.
//!
//! # Reclaiming
//! A budget whose window has ended is equivalent to a missing one, so it can be dropped at
//! any time. Each shard sweeps itself (drops every ended window) when an insert finds it at
//! twice the size it had after its previous sweep, which keeps the cost amortised O(1) per
//! insert and the size within 2x of the live set. [`RateLimitStore::sweep`] sweeps all
//! shards; the server calls it periodically so that idle shards shrink too.

use crate::{BudgetKey, Decision, LimitRequest, RateLimitStore, StoreError, WindowState, decide};
use compact_str::CompactString;
use hashbrown::HashTable;
use std::cell::Cell;
use std::hash::BuildHasher;
use std::sync::Arc;

const MIN_SWEEP_LEN: usize = 1024;

/// How a waiter waits for a shard: it spins, and yields its CPU every 64th spin so that a
/// preempted lock holder gets to run. Critical sections are short: a probe and a few
/// comparisons; the longest is the sweep of one shard (microseconds).
#[derive(Debug)]
struct SpinThenYield;

impl spin::RelaxStrategy for SpinThenYield {
    fn relax() {
        thread_local!(static SPINS: Cell<u32> = const { Cell::new(0) });
        let n = SPINS.with(|c| {
            let n = c.get().wrapping_add(1);
            c.set(n);
            n
        });
        if n.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A shard's lock: a spin lock, whose release is a plain store, so an uncontended
/// decision costs one atomic read-modify-write where `parking_lot` (and `std`) need two
/// (their release is an atomic exchange, to find parked waiters): ~3 ns of ~20.
type Mutex<T> = spin::mutex::SpinMutex<T, SpinThenYield>;

/// Where in the hash the shard index is taken from (see [`MemoryStore::shard`]).
const SHARD_BITS_AT: u32 = 32;
const MAX_SHARDS: usize = 1 << 16;

#[derive(Debug)]
struct Entry {
    namespace_id: Arc<str>,
    identifier: CompactString,
    duration: u64,
    state: WindowState,
}

impl Entry {
    fn matches(&self, key: &BudgetKey<'_>) -> bool {
        self.duration == key.duration
            && self.identifier.as_str() == key.identifier
            && (Arc::ptr_eq(&self.namespace_id, key.namespace_id) || *self.namespace_id == **key.namespace_id)
    }
}

#[derive(Debug)]
struct Shard {
    table: HashTable<Entry>,
    sweep_at_len: usize,
}

type Hasher = foldhash::fast::RandomState;

fn hash_parts(hasher: &Hasher, namespace_id: &str, identifier: &str, duration: u64) -> u64 {
    hasher.hash_one((namespace_id, identifier, duration))
}

fn hash_entry(hasher: &Hasher, e: &Entry) -> u64 {
    hash_parts(hasher, &e.namespace_id, &e.identifier, e.duration)
}

impl Shard {
    fn sweep(&mut self, now_ms: u64, hasher: &Hasher) {
        self.table.retain(|e| !e.state.is_expired(e.duration, now_ms));
        self.sweep_at_len = (self.table.len() * 2).max(MIN_SWEEP_LEN);
        if self.table.capacity() > 4 * self.sweep_at_len {
            self.table.shrink_to(self.sweep_at_len, |e| hash_entry(hasher, e));
        }
    }
}

/// Counts for observability and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreStats {
    pub entries: usize,
    pub shards: usize,
}

/// The in-process rate-limit store. Exact under any concurrency: every decision on one
/// budget happens under its shard's lock.
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    /// `shards.len() - 1` (a power of two minus one).
    mask: usize,
    hasher: Hasher,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_shards(64)
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// `shards` is rounded up to a power of two, between 1 and 2^16 (the shard index is
    /// taken from hash bits 32-47, clear of the bits hashbrown uses inside a shard).
    pub fn with_shards(shards: usize) -> Self {
        let n = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let shards = (0..n)
            .map(|_| Mutex::new(Shard { table: HashTable::new(), sweep_at_len: MIN_SWEEP_LEN }))
            .collect();
        Self { shards, mask: n - 1, hasher: foldhash::fast::RandomState::default() }
    }

    fn hash(&self, key: &BudgetKey<'_>) -> u64 {
        self.hasher.hash_one((key.namespace_id, key.identifier, key.duration))
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // Bits 32.. pick the shard. Inside a shard hashbrown uses the low bits (the bucket)
        // and the top 7 bits (the tag in the control byte that filters candidates before
        // any entry is read): the shard index must not take either, or every entry of a
        // shard would share most of its tag and each probe would read several entries.
        &self.shards[(hash >> SHARD_BITS_AT) as usize & self.mask]
    }

    pub fn stats(&self) -> MemoryStoreStats {
        MemoryStoreStats {
            entries: self.shards.iter().map(|s| s.lock().table.len()).sum(),
            shards: self.shards.len(),
        }
    }

    /// The decision; infallible for the in-process store.
    pub fn check(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Decision {
        let hash = self.hash(&key);
        let mut shard = self.shard(hash).lock();
        if let Some(entry) = shard.table.find_mut(hash, |e| e.matches(&key)) {
            let (state, decision) = decide(Some(entry.state), req, now_ms);
            entry.state = state;
            return decision;
        }
        let (state, decision) = decide(None, req, now_ms);
        if state.used == 0 {
            // Nothing consumed (cost 0, or denied): an untouched budget needs no entry.
            return decision;
        }
        if shard.table.len() >= shard.sweep_at_len {
            shard.sweep(now_ms, &self.hasher);
        }
        let entry = Entry {
            namespace_id: key.namespace_id.clone(),
            identifier: CompactString::from(key.identifier),
            duration: key.duration,
            state,
        };
        shard.table.insert_unique(hash, entry, |e| hash_entry(&self.hasher, e));
        decision
    }
}

impl RateLimitStore for MemoryStore {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        Ok(self.check(key, req, now_ms))
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    fn sweep(&self, now_ms: u64) {
        for shard in self.shards.iter() {
            shard.lock().sweep(now_ms, &self.hasher);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn ns(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    fn key<'a>(ns: &'a Arc<str>, id: &'a str) -> BudgetKey<'a> {
        BudgetKey { namespace_id: ns, identifier: id, duration: 1_000 }
    }

    /// How many entries a lookup of `key` compares (reads) before it finds it.
    fn entries_read(s: &MemoryStore, key: &BudgetKey<'_>) -> usize {
        let hash = s.hash(key);
        let mut reads = 0;
        let shard = s.shard(hash).lock();
        let found = shard.table.find(hash, |e| {
            reads += 1;
            e.matches(key)
        });
        assert!(found.is_some());
        reads
    }

    #[test]
    fn a_lookup_reads_about_one_entry() {
        // The control bytes' tags must filter out almost every other entry of the shard;
        // each entry read is a likely cache miss on a large table.
        let s = MemoryStore::new();
        let n = ns("n");
        let ids: Vec<String> = (0..50_000).map(|i| format!("user_{i}")).collect();
        for id in &ids {
            s.check(key(&n, id), R, 0);
        }
        let reads: usize = ids.iter().map(|id| entries_read(&s, &key(&n, id))).sum();
        let per_lookup = reads as f64 / ids.len() as f64;
        assert!(per_lookup < 1.1, "{per_lookup} entries read per lookup");
    }

    #[test]
    fn entries_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Entry>(), 64);
    }

    #[test]
    fn equal_namespace_strings_in_different_allocations_share_a_budget() {
        let s = MemoryStore::with_shards(1);
        let (a, b) = (ns("rlns_same"), ns("rlns_same"));
        assert!(!Arc::ptr_eq(&a, &b));
        s.check(key(&a, "x"), R, 0);
        s.check(key(&b, "x"), R, 0);
        assert_eq!(s.check(key(&a, "x"), R, 0).remaining, 0);
        assert_eq!(s.stats().entries, 1);
        // Long identifiers (on the heap) work the same.
        let long = "i".repeat(300);
        s.check(key(&a, &long), R, 0);
        assert_eq!(s.check(key(&b, &long), R, 0).remaining, 1);
    }

    const R: LimitRequest = LimitRequest { limit: 3, duration: 1_000, cost: 1 };

    #[test]
    fn budgets_are_separate_per_namespace_identifier_and_duration() {
        let s = MemoryStore::with_shards(4);
        let (ns1, ns2) = (ns("ns1"), ns("ns2"));
        for _ in 0..3 {
            assert!(s.check(key(&ns1, "a"), R, 0).success);
        }
        assert!(!s.check(key(&ns1, "a"), R, 0).success);
        assert!(s.check(key(&ns2, "a"), R, 0).success);
        assert!(s.check(key(&ns1, "b"), R, 0).success);
        let other_duration = BudgetKey { duration: 2_000, ..key(&ns1, "a") };
        assert!(s.check(other_duration, LimitRequest { duration: 2_000, ..R }, 0).success);
        assert_eq!(s.stats().entries, 4);
    }

    #[test]
    fn cost_zero_and_denials_on_unknown_budgets_store_nothing() {
        let s = MemoryStore::new();
        let n = ns("n");
        let d = s.check(key(&n, "x"), LimitRequest { cost: 0, ..R }, 0);
        assert!(d.success && d.remaining == 3);
        let d = s.check(key(&n, "y"), LimitRequest { cost: 4, ..R }, 0);
        assert!(!d.success);
        assert_eq!(s.stats().entries, 0);
    }

    #[test]
    fn sweep_drops_only_ended_windows() {
        let s = MemoryStore::with_shards(2);
        let n = ns("n");
        s.check(key(&n, "old"), R, 500);
        s.check(
            BudgetKey { duration: 60_000, ..key(&n, "long") },
            LimitRequest { duration: 60_000, ..R },
            500,
        );
        RateLimitStore::sweep(&s, 1_000);
        assert_eq!(s.stats().entries, 1);
        // The surviving budget kept its count.
        let d = s.check(
            BudgetKey { duration: 60_000, ..key(&n, "long") },
            LimitRequest { duration: 60_000, ..R },
            1_000,
        );
        assert_eq!(d.remaining, 1);
    }

    #[test]
    fn store_does_not_grow_without_bound() {
        let s = MemoryStore::with_shards(1);
        let n = ns("n");
        // 100 windows of 5_000 distinct identifiers each; only the last window is live.
        for w in 0..100u64 {
            for i in 0..5_000u32 {
                s.check(key(&n, &i.to_string()), R, w * 1_000);
            }
        }
        let n = s.stats().entries;
        assert!(n <= 2 * 5_000 + MIN_SWEEP_LEN, "entries {n}");
    }

    #[test]
    fn exact_under_contention() {
        let s = Arc::new(MemoryStore::with_shards(8));
        let n = ns("n");
        let passed = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (s, passed, n) = (s.clone(), passed.clone(), n.clone());
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        let req = LimitRequest { limit: 1_000, duration: 60_000, cost: 1 };
                        if s.check(
                            BudgetKey { namespace_id: &n, identifier: "hot", duration: 60_000 },
                            req,
                            5,
                        )
                        .success
                        {
                            passed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(passed.load(Ordering::Relaxed), 1_000);
    }
}
