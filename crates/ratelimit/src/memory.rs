//! The in-process store: a fixed number of shards, each behind a `parking_lot` lock. A shard holds one
//! [`LineTable`] (open addressing, entries in the slots) per budget class, i.e. per
//! `(namespace, duration)` with budgets in the shard, so that entries need not hold either.
//! The key's hash is computed once per call and picks both the shard (from its middle bits)
//! and the first slot probed (its low bits).
//!
//! # Memory
//! One live budget costs one [`Entry`] of 32 bytes, half a cache line (the identifier inline
//! when it has at most 15 bytes, the window's start, the tokens used), times the table's
//! spare capacity (load <= 7/8, growth doubles): 37-73 bytes, about 50 on average, per live
//! `(namespace, identifier, duration)`. An identifier longer than 15 bytes adds its length
//! in its class's arena (up to twice that until a sweep compacts the arena). Each class
//! present in a shard adds its table's minimum (8 slots, 256 bytes) and ~100 bytes of
//! bookkeeping; with the usual handful of namespaces and durations that is nothing, and at
//! worst (every budget its own class) a budget costs ~400 bytes. 1M live budgets with short
//! identifiers take 64 MiB of tables (2^15 slots in each of 64 shards).
//!
//! # Hot path
//! One short hash (foldhash, of the identifier alone: the class tells namespaces and
//! durations apart), one uncontended lock, the class found by comparing the shard's few
//! classes in turn (duration, then the namespace by pointer; bytes only when pointers
//! differ; a hash index when a shard has more than [`SCAN_CLASSES`]), then one probe that
//! starts at a slot computed from the hash: on a table larger than the cache, a decision on
//! an existing budget usually costs one miss, its own line, which also holds the next slot
//! probed. An inline identifier is compared as its length and two words; a neighbour with a
//! heap identifier is rejected by a 32-bit tag of its hash, without reading its bytes.
//!
//! # Reclaiming
//! A budget whose window has ended is equivalent to a missing one, so it can be dropped at
//! any time. Each shard sweeps itself (drops every ended window, and every class left empty)
//! when an insert finds it at twice the size it had after its previous sweep, which keeps
//! the cost amortised O(1) per insert and the entries within 2x of the live set. A class's
//! table keeps the size it needed in its last one or two epochs (its window's duration,
//! between one and ten minutes): a steady load does not free and regrow it at every window's
//! turn, and a burst's table is given back after two quiet epochs (a class left empty goes
//! then too).
//! [`RateLimitStore::sweep`] sweeps all shards; the server calls it periodically so that
//! idle shards shrink too.

use crate::table::LineTable;
use crate::{
    Algorithm, BudgetKey, Decision, LimitRequest, RateLimitStore, StoreError, WindowState, decide,
    decide_bucket, decide_sliding, window_start,
};
use std::hash::{BuildHasher, Hasher as _};
use std::sync::Arc;

use ident::{Arena, Ident, Inline, MIN_ARENA_COMPACT, Query};

const MIN_SWEEP_LEN: usize = 1024;

/// A shard's lock: `parking_lot`'s, adaptive (it spins briefly, then parks), so a holder
/// that is preempted (the sweeper, or a thread descheduled on an oversubscribed machine)
/// does not leave the other threads spinning. Critical sections are short: a probe and a
/// few comparisons; the longest is the sweep of one shard (microseconds).
type Mutex<T> = parking_lot::Mutex<T>;

/// Where in the hash the shard index is taken from (see [`MemoryStore::shard`]).
const SHARD_BITS_AT: u32 = 32;
const MAX_SHARDS: usize = 1 << 16;

/// One budget of a class: 32 bytes, aligned so that two share a cache line and none spans
/// two.
#[derive(Debug)]
#[repr(align(32))]
struct Entry {
    id: Ident,
    state: WindowState,
}

type Hasher = foldhash::fast::RandomState;

/// The budgets of one `(namespace, duration, algorithm)` in one shard; a sliding window's
/// budgets are in two classes, by the parity of their window's index (see
/// [`MemoryStore::check`]), so that a budget's current and previous windows are two
/// entries of one shape.
#[derive(Debug)]
struct Class {
    /// The class's hash (of the namespace, the duration, the algorithm and the parity),
    /// for [`Shard::index`].
    hash: u64,
    namespace_id: Arc<String>,
    duration: u64,
    algorithm: Algorithm,
    /// A sliding window class's windows' parity (0 for the other algorithms).
    parity: u8,
    table: LineTable<Entry>,
    /// The identifiers longer than [`ident::INLINE`] bytes of the table's entries.
    arena: Arena,
    /// The most entries the table held in the current epoch and in the one before: a sweep
    /// sizes the table for these, not for what is left after a window's turn (see
    /// [`Class::sweep`]).
    peak: usize,
    previous_peak: usize,
    /// When the current epoch ends (ms; 0: at the first sweep).
    epoch_end: u64,
}

/// A class's epoch, over which [`Class::sweep`] remembers its largest size: its window's
/// duration, at least a minute (so that a short window's table is kept across many turns)
/// and at most ten (so that a burst's table is given back within twenty minutes).
fn epoch_ms(duration: u64) -> u64 {
    duration.clamp(60_000, 600_000)
}

impl Class {
    fn new(hash: u64, key: &BudgetKey<'_>, parity: u8) -> Self {
        Self {
            hash,
            namespace_id: key.namespace_id.clone(),
            duration: key.duration,
            algorithm: key.algorithm,
            parity,
            table: LineTable::default(),
            arena: Arena::default(),
            peak: 0,
            previous_peak: 0,
            epoch_end: 0,
        }
    }

    /// Drops the entries whose window has ended, shrinks a table that stayed mostly empty
    /// for a whole epoch and compacts an arena left mostly unused.
    ///
    /// Every entry of a class with one fixed window ends at the same turn, so sizing the
    /// table for what a sweep finds live would free it at every turn and grow it again by
    /// doubling right after: under a steady load the allocator would see the whole table
    /// churn every window (and keep the pages). Sized for the largest it was in the last
    /// one or two epochs, a steady load keeps its table; a table shrinks (and an empty class
    /// goes) only after a whole epoch well below that.
    fn sweep(&mut self, hasher: &Hasher, now_ms: u64) {
        let (duration, algorithm) = (self.duration, self.algorithm);
        let mut released = 0;
        self.table.retain(
            |e| {
                let keep = !crate::algorithm::is_spent(algorithm, &e.state, duration, now_ms);
                if let (false, Ident::Heap { len, .. }) = (keep, e.id) {
                    released += len as usize;
                }
                keep
            },
            rehash(hasher, &self.arena),
        );
        self.arena.used -= released;
        if now_ms >= self.epoch_end {
            self.previous_peak = self.peak;
            self.peak = self.table.len();
            self.epoch_end = now_ms.saturating_add(epoch_ms(self.duration));
        }
        let keep = (self.recent_peak() * 2).max(MIN_CLASS_KEEP);
        if self.table.capacity() > 4 * keep {
            self.table.shrink_to(keep, rehash(hasher, &self.arena));
        }
        if self.arena.bytes.len() > (2 * self.arena.used).max(MIN_ARENA_COMPACT) {
            self.compact_arena();
        }
    }

    /// The most entries the table held in this epoch or the one before.
    fn recent_peak(&self) -> usize {
        self.peak.max(self.previous_peak).max(self.table.len())
    }

    /// Copies the identifiers still in use into a new arena (hashes do not change).
    fn compact_arena(&mut self) {
        let old = std::mem::take(&mut self.arena);
        self.arena.bytes.reserve_exact(old.used);
        for entry in self.table.values_mut() {
            if let Ident::Heap { tag, at, len } = entry.id
                && let Some((at, len)) = self.arena.push(old.get(at, len))
            {
                entry.id = Ident::Heap { tag, at, len };
            }
        }
    }

    /// Stores a new budget; `false` if its identifier did not fit (see [`Arena::push`]).
    fn insert(&mut self, hasher: &Hasher, hash: u64, query: Query<'_>, state: WindowState) -> bool {
        let id = match query {
            Query::Inline { len, words } => Ident::Inline(Inline::from_words(len, words)),
            Query::Heap(tag, bytes) => {
                let pushed = self.arena.push(bytes).or_else(|| {
                    self.compact_arena();
                    self.arena.push(bytes)
                });
                match pushed {
                    Some((at, len)) => Ident::Heap { tag, at, len },
                    None => return false,
                }
            }
        };
        self.table.insert_unique(hash, Entry { id, state }, rehash(hasher, &self.arena));
        self.peak = self.peak.max(self.table.len());
        true
    }

    fn matches(&self, key: &BudgetKey<'_>, parity: u8) -> bool {
        self.duration == key.duration
            && self.algorithm == key.algorithm
            && self.parity == parity
            && (Arc::ptr_eq(&self.namespace_id, key.namespace_id) || self.namespace_id == *key.namespace_id)
    }
}

/// Up to this many classes in a shard, a lookup compares them in turn (their duration, then
/// the namespace by pointer): no hash needed. Beyond, it uses [`Shard::index`].
const SCAN_CLASSES: usize = 4;

#[derive(Debug)]
struct Shard {
    classes: Vec<Class>,
    /// Positions in `classes` by class hash, for shards with many classes (many namespaces,
    /// or a caller using many durations).
    index: hashbrown::HashTable<usize>,
    /// Entries in all classes.
    len: usize,
    sweep_at_len: usize,
    /// Where its budgets' changes are written (a persistent store's, see [`journal`]).
    journal: Option<journal::ShardJournal>,
}

impl Shard {
    fn new() -> Self {
        Self {
            classes: Vec::new(),
            index: hashbrown::HashTable::new(),
            len: 0,
            sweep_at_len: MIN_SWEEP_LEN,
            journal: None,
        }
    }

    /// Where the class of `key` (of windows of `parity`, see [`Class`]) is in `classes`.
    #[inline(always)]
    fn position(&self, hasher: &Hasher, key: &BudgetKey<'_>, parity: u8) -> Option<usize> {
        if self.classes.len() <= SCAN_CLASSES {
            self.classes.iter().position(|c| c.matches(key, parity))
        } else {
            self.indexed_position(hasher, key, parity)
        }
    }

    #[inline(never)]
    fn indexed_position(&self, hasher: &Hasher, key: &BudgetKey<'_>, parity: u8) -> Option<usize> {
        self.index.find(class_hash(hasher, key, parity), |&i| self.classes[i].matches(key, parity)).copied()
    }

    /// The class of `key` (windows of `parity`), created if missing.
    fn class_or_insert(&mut self, hasher: &Hasher, key: &BudgetKey<'_>, parity: u8) -> &mut Class {
        let i = match self.position(hasher, key, parity) {
            Some(i) => i,
            None => {
                self.classes.push(Class::new(class_hash(hasher, key, parity), key, parity));
                let i = self.classes.len() - 1;
                let classes = &self.classes;
                self.index.insert_unique(classes[i].hash, i, |&j| classes[j].hash);
                i
            }
        };
        &mut self.classes[i]
    }

    fn sweep(&mut self, hasher: &Hasher, now_ms: u64) {
        for class in &mut self.classes {
            class.sweep(hasher, now_ms);
        }
        self.classes.retain(|c| c.recent_peak() > 0);
        self.index.clear();
        let classes = &self.classes;
        for (i, class) in classes.iter().enumerate() {
            self.index.insert_unique(class.hash, i, |&j| classes[j].hash);
        }
        self.len = self.classes.iter().map(|c| c.table.len()).sum();
        self.sweep_at_len = (self.len * 2).max(MIN_SWEEP_LEN);
    }
}

/// A class's table is shrunk by a sweep only when it could hold four times more values than
/// it keeps room for: twice the most entries it held in its last one or two epochs, at least
/// this.
const MIN_CLASS_KEEP: usize = 64;

/// The hash of a budget: of its identifier alone, since the class tells the namespace and
/// the duration apart. (The same identifier in two classes lands in the same shard.)
#[inline]
fn key_hash(hasher: &Hasher, identifier: &[u8]) -> u64 {
    let mut h = hasher.build_hasher();
    h.write(identifier);
    h.finish()
}

/// The hash of a class, for [`Shard::index`].
fn class_hash(hasher: &Hasher, key: &BudgetKey<'_>, parity: u8) -> u64 {
    // foldhash mixes each write's length in, so ("ab", "c") and ("a", "bc") differ.
    let mut h = hasher.build_hasher();
    h.write(key.namespace_id.as_bytes());
    h.write_u64(key.duration);
    h.write_u8(key.algorithm as u8);
    h.write_u8(parity);
    h.finish()
}

/// The parity of the window starting at `start` (a sliding window's class, see [`Class`]).
#[inline]
fn parity(start: u64, duration: u64) -> u8 {
    (start / duration.max(1) % 2) as u8
}

/// How a class's table finds an entry's hash again when it is rebuilt.
fn rehash<'a>(hasher: &'a Hasher, arena: &'a Arena) -> impl Fn(&Entry) -> u64 + 'a {
    move |e| key_hash(hasher, e.id.bytes(arena))
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
    /// A persistent store's hold on its directory ([`Self::persistent`]).
    _lock: Option<std::fs::File>,
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
        let shards = (0..n).map(|_| Mutex::new(Shard::new())).collect();
        Self { shards, mask: n - 1, hasher: Hasher::default(), _lock: None }
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[self.shard_index(hash)]
    }

    fn shard_index(&self, hash: u64) -> usize {
        // Bits 32.. pick the shard. Inside a shard the table uses the low bits (the first
        // slot probed): the shard index must not take those, or every entry of a shard
        // would start its probe in the same few slots and clusters would grow long.
        (hash >> SHARD_BITS_AT) as usize & self.mask
    }

    pub fn stats(&self) -> MemoryStoreStats {
        MemoryStoreStats {
            entries: self.shards.iter().map(|s| s.lock().len).sum(),
            shards: self.shards.len(),
        }
    }

    /// The decision under the key's algorithm; infallible for the in-process store.
    pub fn check(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Decision {
        match key.algorithm {
            Algorithm::Fixed => self.update(key, now_ms, |state| decide(state, req, now_ms)),
            Algorithm::TokenBucket => self.update(key, now_ms, |state| decide_bucket(state, req, now_ms)),
            Algorithm::Sliding => {
                let hash = key_hash(&self.hasher, key.identifier.as_bytes());
                let mut shard = self.shard(hash).lock();
                let (current, previous) = self.sliding_in(&shard, &key, hash, now_ms);
                let (state, decision) = decide_sliding(current, previous, req, now_ms);
                let at = parity(state.start, key.duration);
                self.update_in(&mut shard, key, at, hash, now_ms, |_| (state, ()));
                decision
            }
        }
    }

    /// A sliding budget's current and previous windows' states: the entries of its two
    /// classes, the current one the window holding `now_ms` (or a later one, when the
    /// clock stepped back: the decision then counts in that window, failing closed).
    fn sliding_in(
        &self,
        shard: &Shard,
        key: &BudgetKey<'_>,
        hash: u64,
        now_ms: u64,
    ) -> (Option<WindowState>, Option<WindowState>) {
        let here = parity(window_start(now_ms, key.duration.max(1)), key.duration);
        let this = self.read_in(shard, key, here, hash);
        let other = self.read_in(shard, key, 1 - here, hash);
        match other {
            Some(o) if o.start > now_ms => (other, this),
            _ => (this, other),
        }
    }

    /// Records what a shared store reported for a budget: `used` tokens in the window
    /// starting at `start`. Within a window a count only grows, so the larger report is
    /// kept; a later window replaces an earlier one. (The Redis store keeps the counts of
    /// exhausted budgets this way, to deny without a round trip: see
    /// [`crate::deny_from_known`].)
    pub fn observe(&self, key: BudgetKey<'_>, start: u64, used: u64) {
        debug_assert_eq!(key.algorithm, Algorithm::Fixed, "only fixed windows' counts only grow");
        self.update(key, start, |state| {
            let next = match state {
                Some(s) if s.start > start || (s.start == start && s.used >= used) => s,
                _ => WindowState { start, used },
            };
            (next, ())
        });
    }

    /// The budget's state, if its window has not ended at `now_ms` (a sliding budget's:
    /// its current window's; a bucket's: while it is not full).
    pub fn known(&self, key: BudgetKey<'_>, now_ms: u64) -> Option<WindowState> {
        let hash = key_hash(&self.hasher, key.identifier.as_bytes());
        let at = match key.algorithm {
            Algorithm::Sliding => parity(window_start(now_ms, key.duration.max(1)), key.duration),
            _ => 0,
        };
        let state = self.read_in(&self.shard(hash).lock(), &key, at, hash)?;
        let ended = match key.algorithm {
            Algorithm::TokenBucket => {
                crate::algorithm::is_spent(Algorithm::TokenBucket, &state, key.duration, now_ms)
            }
            _ => state.is_expired(key.duration.max(1), now_ms),
        };
        (!ended).then_some(state)
    }

    /// The budget's stored state (ended or not) in its class of windows of `parity`, in its
    /// shard, locked by the caller.
    fn read_in(&self, shard: &Shard, key: &BudgetKey<'_>, parity: u8, hash: u64) -> Option<WindowState> {
        let query = Query::new(key.identifier, hash);
        let class = &shard.classes[shard.position(&self.hasher, key, parity)?];
        class.table.find(hash, |e| e.id.matches(&query, &class.arena)).map(|e| e.state)
    }

    /// Replaces the budget's state by what `f` makes of it (`None`: no entry) under its
    /// shard's lock. A new state with nothing used is not stored for a budget that has no
    /// entry (an untouched budget needs none).
    #[inline]
    fn update<R>(
        &self,
        key: BudgetKey<'_>,
        now_ms: u64,
        f: impl FnOnce(Option<WindowState>) -> (WindowState, R),
    ) -> R {
        let hash = key_hash(&self.hasher, key.identifier.as_bytes());
        let mut guard = self.shard(hash).lock();
        self.update_in(&mut guard, key, 0, hash, now_ms, f)
    }

    /// [`Self::update`] in the budget's class of windows of `parity` (0 but for sliding
    /// windows), in its shard, locked by the caller (`hash`: the key's).
    #[inline(always)]
    fn update_in<R>(
        &self,
        shard: &mut Shard,
        key: BudgetKey<'_>,
        parity: u8,
        hash: u64,
        now_ms: u64,
        f: impl FnOnce(Option<WindowState>) -> (WindowState, R),
    ) -> R {
        let query = Query::new(key.identifier, hash);
        if let Some(i) = shard.position(&self.hasher, &key, parity) {
            let class = &mut shard.classes[i];
            if let Some(entry) = class.table.find_mut(hash, |e| e.id.matches(&query, &class.arena)) {
                let (state, out) = f(Some(entry.state));
                if state != entry.state {
                    entry.state = state;
                    if shard.journal.is_some() {
                        shard.journal_state(&key, parity, state, now_ms);
                    }
                }
                return out;
            }
        }
        let (state, out) = f(None);
        if state.used == 0 && state.start <= now_ms {
            // Nothing consumed (cost 0, or denied): an untouched budget needs no entry. (A
            // bucket that took tokens holds a remainder or an instant after `now`.)
            return out;
        }
        if shard.len >= shard.sweep_at_len {
            shard.sweep(&self.hasher, now_ms);
        }
        if shard.class_or_insert(&self.hasher, &key, parity).insert(&self.hasher, hash, query, state) {
            shard.len += 1;
            if shard.journal.is_some() {
                shard.journal_state(&key, parity, state, now_ms);
            }
        } else {
            // 4 GiB of live identifiers over 15 bytes in one shard and class: not reachable
            // in practice (that is 256 GiB across the 64 shards).
            log::error!("rate-limit store: no room for identifiers in one shard; budget not recorded");
        }
        out
    }
}

impl RateLimitStore for MemoryStore {
    fn limit(&self, key: BudgetKey<'_>, req: LimitRequest, now_ms: u64) -> Result<Decision, StoreError> {
        Ok(self.check(key, req, now_ms))
    }

    fn kind(&self) -> &'static str {
        "memory"
    }

    /// Under the shards' locks; one instance's store: overrides are never stale here.
    fn limit_all(
        &self,
        entries: &[crate::Entry<'_>],
        _epochs: &[(&str, u64)],
        now_ms: u64,
    ) -> Result<Option<AllOrNothing>, StoreError> {
        Ok(Some(MemoryStore::limit_all(self, entries, now_ms)))
    }

    fn give_back(&self, entries: &[crate::Entry<'_>], now_ms: u64) -> Result<(), StoreError> {
        MemoryStore::give_back(self, entries, now_ms);
        Ok(())
    }

    fn sweep(&self, now_ms: u64) {
        for shard in self.shards.iter() {
            shard.lock().sweep(&self.hasher, now_ms);
        }
    }
}

mod ident;
mod journal;
mod multi;
mod persist;
#[cfg(test)]
mod tests;

pub use multi::AllOrNothing;
