//! The in-process store: a fixed number of shards, each a [`LineTable`] (open addressing,
//! one cache line per slot) behind a spin lock. The key's hash is computed once per call
//! and picks both the shard (from its middle bits) and the first slot probed (its low bits).
//!
//! # Memory
//! One live budget costs one [`Entry`] of 64 bytes, one cache line (its hash, the namespace
//! as a thin shared pointer, the identifier inline when it has at most 24 bytes, duration,
//! window, used), times the table's spare capacity (load <= 7/8, growth doubles): 73-146
//! bytes, about 100 on average, per live `(namespace, identifier, duration)`. An identifier
//! longer than 24 bytes adds one heap allocation of its length. 1M live budgets with short
//! identifiers take about 100 MB.
//!
//! # Hot path
//! One hash of the key (foldhash), one uncontended lock, one probe that starts at a slot
//! computed from the hash: on a table larger than the cache, a decision on an existing
//! budget usually costs one miss, its own line (neighbours in a cluster are adjacent lines
//! of the same page). Equality checks the stored hash first (so a neighbour is rejected
//! without reading its heap-allocated identifier, if any), then the duration, the namespace
//! by pointer (every entry of a namespace shares the caller's `Arc`; bytes are compared only
//! when pointers differ) and the identifier.
//!
//! # Reclaiming
//! A budget whose window has ended is equivalent to a missing one, so it can be dropped at
//! any time. Each shard sweeps itself (drops every ended window) when an insert finds it at
//! twice the size it had after its previous sweep, which keeps the cost amortised O(1) per
//! insert and the size within 2x of the live set. [`RateLimitStore::sweep`] sweeps all
//! shards; the server calls it periodically so that idle shards shrink too.

use crate::table::LineTable;
use crate::{BudgetKey, Decision, LimitRequest, RateLimitStore, StoreError, WindowState, decide};
use compact_str::CompactString;
use std::cell::Cell;
use std::hash::{BuildHasher, Hasher as _};
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
    /// The hash of the key, kept so that probes and rebuilds need not recompute it.
    hash: u64,
    namespace_id: Arc<String>,
    identifier: CompactString,
    duration: u64,
    state: WindowState,
}

impl Entry {
    fn matches(&self, hash: u64, key: &BudgetKey<'_>) -> bool {
        self.hash == hash
            && self.duration == key.duration
            && (Arc::ptr_eq(&self.namespace_id, key.namespace_id) || self.namespace_id == *key.namespace_id)
            && self.identifier.as_str() == key.identifier
    }
}

#[derive(Debug)]
struct Shard {
    table: LineTable<Entry>,
    sweep_at_len: usize,
}

type Hasher = foldhash::fast::RandomState;

fn entry_hash(e: &Entry) -> u64 {
    e.hash
}

impl Shard {
    fn sweep(&mut self, now_ms: u64) {
        self.table.retain(|e| !e.state.is_expired(e.duration, now_ms), entry_hash);
        self.sweep_at_len = (self.table.len() * 2).max(MIN_SWEEP_LEN);
        if self.table.capacity() > 4 * self.sweep_at_len {
            self.table.shrink_to(self.sweep_at_len, entry_hash);
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
    /// taken from hash bits 32-47, clear of the low bits that pick the first slot probed).
    pub fn with_shards(shards: usize) -> Self {
        let n = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        let shards = (0..n)
            .map(|_| Mutex::new(Shard { table: LineTable::default(), sweep_at_len: MIN_SWEEP_LEN }))
            .collect();
        Self { shards, mask: n - 1, hasher: foldhash::fast::RandomState::default() }
    }

    #[inline]
    fn hash(&self, key: &BudgetKey<'_>) -> u64 {
        // foldhash mixes each write's length in, so ("ab", "c") and ("a", "bc") differ.
        let mut h = self.hasher.build_hasher();
        h.write(key.namespace_id.as_bytes());
        h.write(key.identifier.as_bytes());
        h.write_u64(key.duration);
        h.finish()
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // Bits 32.. pick the shard. Inside a shard the table uses the low bits (the first
        // slot probed): the shard index must not take those, or every entry of a shard
        // would start its probe in the same few slots and clusters would grow long.
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
        if let Some(entry) = shard.table.find_mut(hash, |e| e.matches(hash, &key)) {
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
            shard.sweep(now_ms);
        }
        let entry = Entry {
            hash,
            namespace_id: key.namespace_id.clone(),
            identifier: CompactString::from(key.identifier),
            duration: key.duration,
            state,
        };
        shard.table.insert_unique(hash, entry, entry_hash);
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
            shard.lock().sweep(now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn ns(name: &str) -> Arc<String> {
        Arc::new(name.to_string())
    }

    fn key<'a>(ns: &'a Arc<String>, id: &'a str) -> BudgetKey<'a> {
        BudgetKey { namespace_id: ns, identifier: id, duration: 1_000 }
    }

    /// How many full slots a lookup of `key` reads (compares) before it finds it.
    fn entries_read(s: &MemoryStore, key: &BudgetKey<'_>) -> usize {
        let hash = s.hash(key);
        let mut reads = 0;
        let shard = s.shard(hash).lock();
        let found = shard.table.find(hash, |e| {
            reads += 1;
            e.matches(hash, key)
        });
        assert!(found.is_some());
        reads
    }

    #[test]
    fn lookups_read_as_few_slots_as_linear_probing_predicts() {
        // 50k budgets in 64 shards of 1024 slots: load 0.76, for which linear probing with
        // independent hash bits reads (1 + 1/(1 - 0.76)) / 2 = 2.6 slots per successful
        // lookup. If the shard index took bits the table uses for the first slot, entries
        // of a shard would start in a fraction of its slots and clusters would run long.
        let s = MemoryStore::new();
        let n = ns("n");
        let ids: Vec<String> = (0..50_000).map(|i| format!("user_{i}")).collect();
        for id in &ids {
            s.check(key(&n, id), R, 0);
        }
        let reads: usize = ids.iter().map(|id| entries_read(&s, &key(&n, id))).sum();
        let per_lookup = reads as f64 / ids.len() as f64;
        assert!(per_lookup < 3.0, "{per_lookup} slots read per lookup");
    }

    #[test]
    fn entries_are_one_cache_line() {
        assert_eq!(std::mem::size_of::<Entry>(), 64);
        // A slot holding an entry (or nothing, or a tombstone) is still one line.
        assert_eq!(crate::table::slot_size::<Entry>(), 64);
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
