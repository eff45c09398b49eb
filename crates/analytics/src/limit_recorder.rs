//! Rate-limit analytics, recorded off the request path (API-v2.md §14.1): every decision
//! adds one to its namespace's count of the minute (passed or denied), and to its
//! identifier's count in the namespace's heavy-hitters sketch of the hour. A background
//! task drains both to the database every few seconds ([`LimitRecorder::drain`]), as the
//! verification recorder's counts are ([`crate::recorder`]).
//!
//! Recording takes one lock: the shard of the decision's identifier, one of a fixed number,
//! each a pair of hash tables behind a `parking_lot` mutex. It hashes two strings, once
//! each: the identifier (which picks the shard and finds the identifier in its sketch) and
//! the namespace id (whose minute and hour are found by that hash mixed with the bucket's
//! start); each entry keeps its hash, so a table that grows hashes no string again. Counts
//! already held are found by borrowed parts, so the common case allocates nothing.
//!
//! **The sketch.** Identifiers are partitioned over the shards by hash, and each shard
//! keeps at most [`SKETCH_CAPACITY`] identifiers per namespace-hour. When a new identifier
//! finds its sketch full, the lighter half is evicted at once and the sketch's `floor`
//! becomes the heaviest count evicted; a newcomer is ranked as if it had `floor` already
//! (Lossy Counting's rule), so it is not evicted before it could have overtaken. The counts
//! written are only what each identifier was seen doing while held: never more than the
//! truth, and exact for every identifier held since its first decision of the hour, which
//! is every identifier when a shard sees at most [`SKETCH_CAPACITY`] of them. An evicted
//! identifier loses what it had, at most the median rank, which in the worst case (a
//! stream of distinct identifiers) grows by about one per `capacity/2` newcomers.
//! With 16 shards of 256, a namespace-hour keeps up to 4,096 identifiers; the top 100 of
//! them by total and by denials are kept when the hour closes (`trim` in the service).
//!
//! Memory is bounded: at most `max_entries` counts (namespace-minutes and identifiers)
//! wait here; beyond that a new namespace-minute's decisions are dropped and counted in
//! [`LimitRecorder::dropped`] and `keygate_analytics_dropped_total`, and a new identifier
//! makes room in its sketch (or, its sketch empty, goes uncounted per identifier).

mod name;

use hashbrown::{HashMap, HashTable};
use name::Name;
use parking_lot::Mutex;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;
/// Shards of the recorder (and so partitions of a namespace's identifiers).
pub const SHARDS: usize = 16;
/// Identifiers one shard's sketch holds per namespace-hour.
pub const SKETCH_CAPACITY: usize = 256;

/// One rate-limit decision, as it is counted.
#[derive(Debug, Clone, Copy)]
pub struct LimitDecision<'a> {
    pub workspace_id: &'a str,
    /// A namespace's id, or `verify:<name>` for the limits of keys and identities.
    pub namespace_id: &'a str,
    pub identifier: &'a str,
    pub passed: bool,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// A namespace's decisions in one minute, drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceMinute {
    pub workspace_id: Box<str>,
    pub namespace_id: Box<str>,
    /// The minute's start (Unix ms).
    pub minute: u64,
    pub passed: u64,
    pub denied: u64,
}

/// What an identifier did in a namespace-hour since the last drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifierHour {
    pub workspace_id: Box<str>,
    pub namespace_id: Box<str>,
    /// The hour's start (Unix ms).
    pub hour: u64,
    pub identifier: Box<str>,
    pub passed: u64,
    pub denied: u64,
}

/// What one drain took.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drained {
    pub minutes: Vec<NamespaceMinute>,
    pub identifiers: Vec<IdentifierHour>,
}

impl Drained {
    pub fn is_empty(&self) -> bool {
        self.minutes.is_empty() && self.identifiers.is_empty()
    }
}

/// A namespace and a bucket start: the key of both tables of a shard, with its hash
/// ([`slot_hash`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Slot {
    namespace_id: Box<str>,
    start: u64,
}

/// The hash of a namespace's bucket: the namespace id's hash mixed with the bucket's start
/// (a multiply spreads the start over the bits the table indexes and tags by).
fn slot_hash(namespace_hash: u64, start: u64) -> u64 {
    namespace_hash ^ start.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29)
}

/// An entry of a shard's table: its slot, the slot's hash and what it counts.
#[derive(Debug)]
struct Entry<T> {
    slot: Slot,
    hash: u64,
    value: T,
}

/// The entry of `(namespace_id, start)` in `table`, found by its hash.
fn find<'t, T>(
    table: &'t mut HashTable<Entry<T>>,
    hash: u64,
    namespace_id: &str,
    start: u64,
) -> Option<&'t mut T> {
    table
        .find_mut(hash, |e| e.hash == hash && e.slot.start == start && *e.slot.namespace_id == *namespace_id)
        .map(|e| &mut e.value)
}

/// Inserts `value` under `(namespace_id, start)`, known absent: the new entry's value.
fn insert<'t, T>(
    table: &'t mut HashTable<Entry<T>>,
    hash: u64,
    namespace_id: &str,
    start: u64,
    value: T,
) -> &'t mut T {
    let slot = Slot { namespace_id: namespace_id.into(), start };
    &mut table.insert_unique(hash, Entry { slot, hash, value }, |e| e.hash).into_mut().value
}

#[derive(Debug)]
struct MinuteCount {
    workspace_id: Box<str>,
    passed: u64,
    denied: u64,
}

/// An identifier held by a sketch: what it was seen doing while held, what of that was
/// drained already, and the rank it entered with.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    passed: u64,
    denied: u64,
    drained_passed: u64,
    drained_denied: u64,
    floor: u64,
}

impl Held {
    fn rank(&self) -> u64 {
        self.floor + self.passed + self.denied
    }
}

/// An identifier held by a sketch, with its hash.
#[derive(Debug)]
struct HeldId {
    identifier: Name,
    hash: u64,
    held: Held,
}

#[derive(Debug)]
struct Sketch {
    workspace_id: Box<str>,
    floor: u64,
    held: HashTable<HeldId>,
}

impl Sketch {
    /// Evicts the lighter half (at least one): how many went.
    fn evict_lighter_half(&mut self) -> usize {
        let mut ranks: Vec<u64> = self.held.iter().map(|h| h.held.rank()).collect();
        if ranks.is_empty() {
            return 0;
        }
        let mid = (ranks.len() - 1) / 2;
        let (_, cut, _) = ranks.select_nth_unstable(mid);
        let cut = *cut;
        let before = self.held.len();
        let mut evicted_max = self.floor;
        self.held.retain(|h| {
            let keep = h.held.rank() > cut;
            if !keep {
                evicted_max = evicted_max.max(h.held.rank());
            }
            keep
        });
        self.floor = evicted_max;
        before - self.held.len()
    }
}

#[derive(Default)]
struct Shard {
    minutes: HashTable<Entry<MinuteCount>>,
    hours: HashTable<Entry<Sketch>>,
}

/// The in-memory counts; see the module docs.
pub struct LimitRecorder {
    shards: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::FixedState,
    max_entries: usize,
    entries: AtomicUsize,
    dropped: AtomicU64,
}

impl std::fmt::Debug for LimitRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitRecorder")
            .field("entries", &self.entries)
            .field("max_entries", &self.max_entries)
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl LimitRecorder {
    /// A recorder holding at most `max_entries` counts between drains.
    pub fn new(max_entries: usize) -> Self {
        let hasher = foldhash::fast::FixedState::with_seed(0x726c_5f61_6e61_6c79);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher,
            max_entries,
            entries: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Takes room for one more count: false when full.
    fn take(&self) -> bool {
        if self.entries.fetch_add(1, Ordering::AcqRel) >= self.max_entries {
            self.entries.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    fn drop_counts(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("keygate_analytics_dropped_total").increment(n);
    }

    /// The shard of an identifier of that hash: picked by bits the tables do not index by
    /// (their low bits) nor tag by (their top seven), so a shard's identifiers spread over
    /// its tables as well as anyone's.
    fn shard_of(&self, identifier_hash: u64) -> &Mutex<Shard> {
        &self.shards[(identifier_hash >> 40) as usize % self.shards.len()]
    }

    /// Counts one decision; see the module docs for what is dropped when full.
    pub fn record(&self, d: &LimitDecision<'_>) {
        let id_hash = self.hasher.hash_one(d.identifier);
        let ns_hash = self.hasher.hash_one(d.namespace_id);
        let mut guard = self.shard_of(id_hash).lock();
        let shard = &mut *guard;
        let start = d.at_ms - d.at_ms % MINUTE_MS;
        let hash = slot_hash(ns_hash, start);
        match find(&mut shard.minutes, hash, d.namespace_id, start) {
            Some(c) => add(&mut c.passed, &mut c.denied, d.passed, 1),
            None => {
                if !self.take() {
                    self.drop_counts(1);
                    return;
                }
                let mut c = MinuteCount { workspace_id: d.workspace_id.into(), passed: 0, denied: 0 };
                add(&mut c.passed, &mut c.denied, d.passed, 1);
                insert(&mut shard.minutes, hash, d.namespace_id, start, c);
            }
        }
        let start = d.at_ms - d.at_ms % HOUR_MS;
        let hash = slot_hash(ns_hash, start);
        let sketch = match find(&mut shard.hours, hash, d.namespace_id, start) {
            Some(sketch) => sketch,
            None => {
                if !self.take() {
                    self.drop_counts(1);
                    return;
                }
                let sketch = Sketch { workspace_id: d.workspace_id.into(), floor: 0, held: HashTable::new() };
                insert(&mut shard.hours, hash, d.namespace_id, start, sketch)
            }
        };
        let same = |h: &HeldId| h.hash == id_hash && h.identifier.as_bytes() == d.identifier.as_bytes();
        if let Some(h) = sketch.held.find_mut(id_hash, same) {
            add(&mut h.held.passed, &mut h.held.denied, d.passed, 1);
            return;
        }
        if !self.hold(sketch, d, id_hash) {
            self.drop_counts(1);
        }
    }

    /// Adds the decision's identifier, not held yet, to its sketch (made room for, when
    /// full), counting the decision: false when there is no room at all.
    fn hold(&self, sketch: &mut Sketch, d: &LimitDecision<'_>, id_hash: u64) -> bool {
        if sketch.held.len() >= SKETCH_CAPACITY {
            let evicted = sketch.evict_lighter_half();
            self.entries.fetch_sub(evicted, Ordering::AcqRel);
        }
        if !self.take() {
            // Full: this sketch makes room, if it has any to make.
            let evicted = sketch.evict_lighter_half();
            self.entries.fetch_sub(evicted, Ordering::AcqRel);
            if evicted == 0 || !self.take() {
                return false;
            }
        }
        let mut held = Held { floor: sketch.floor, ..Held::default() };
        add(&mut held.passed, &mut held.denied, d.passed, 1);
        let entry = HeldId { identifier: Name::new(d.identifier), hash: id_hash, held };
        sketch.held.insert_unique(id_hash, entry, |h| h.hash);
        true
    }

    /// Takes every namespace-minute held (one count per namespace and minute) and what
    /// each identifier did since the last drain (of those that did more while held than
    /// the sketch's floor: under pressure, the light ones wait, and are lost if evicted);
    /// forgets the sketches of hours that ended
    /// by `now_ms` (every sketch, with `None`: at shutdown).
    pub fn drain(&self, now_ms: Option<u64>) -> Drained {
        let mut out = Drained::default();
        let mut minutes: HashMap<Slot, MinuteCount> = HashMap::new();
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            freed += shard.minutes.len();
            for Entry { slot, value: c, .. } in shard.minutes.drain() {
                match minutes.get_mut(&slot) {
                    Some(m) => {
                        m.passed += c.passed;
                        m.denied += c.denied;
                    }
                    None => drop(minutes.insert(slot, c)),
                }
            }
            let mut freed_here = 0;
            shard.hours.retain(|Entry { slot, value: sketch, .. }| {
                for HeldId { identifier, held: h, .. } in sketch.held.iter_mut() {
                    let (passed, denied) = (h.passed - h.drained_passed, h.denied - h.drained_denied);
                    // Only identifiers that have done more while held than anyone evicted
                    // (everyone, while nothing was): others cannot be among the heaviest
                    // yet, and writing them would cost a row each.
                    if passed + denied > 0 && h.passed + h.denied > sketch.floor {
                        out.identifiers.push(IdentifierHour {
                            workspace_id: sketch.workspace_id.clone(),
                            namespace_id: slot.namespace_id.clone(),
                            hour: slot.start,
                            identifier: identifier.to_boxed(),
                            passed,
                            denied,
                        });
                        (h.drained_passed, h.drained_denied) = (h.passed, h.denied);
                    }
                }
                let closed = now_ms.is_none_or(|now| slot.start + HOUR_MS <= now);
                if closed {
                    freed_here += 1 + sketch.held.len();
                }
                !closed
            });
            freed += freed_here;
        }
        self.entries.fetch_sub(freed, Ordering::AcqRel);
        out.minutes = minutes
            .into_iter()
            .map(|(slot, c)| NamespaceMinute {
                workspace_id: c.workspace_id,
                namespace_id: slot.namespace_id,
                minute: slot.start,
                passed: c.passed,
                denied: c.denied,
            })
            .collect();
        out
    }

    /// Counts dropped so far because the bound was reached.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Counts held now (namespace-minutes and identifiers).
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }
}

fn add(passed: &mut u64, denied: &mut u64, was_passed: bool, n: u64) {
    match was_passed {
        true => *passed += n,
        false => *denied += n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(ns: &str, identifier: &str, passed: bool, at_ms: u64) -> LimitDecision<'static> {
        let (ns, identifier) = (ns.to_string().leak(), identifier.to_string().leak());
        LimitDecision { workspace_id: "ws", namespace_id: ns, identifier, passed, at_ms }
    }

    fn by_identifier(d: &Drained) -> std::collections::BTreeMap<(String, u64, String), (u64, u64)> {
        let mut out = std::collections::BTreeMap::new();
        for i in &d.identifiers {
            let e =
                out.entry((i.namespace_id.to_string(), i.hour, i.identifier.to_string())).or_insert((0, 0));
            e.0 += i.passed;
            e.1 += i.denied;
        }
        out
    }

    #[test]
    fn counts_per_namespace_minute_and_identifier_hour() {
        let r = LimitRecorder::new(1_000);
        for i in 0..50 {
            r.record(&decision("ns_a", &format!("user_{}", i % 5), i % 2 == 0, 60_000 + i));
        }
        r.record(&decision("ns_a", "user_0", false, 120_000));
        r.record(&decision("ns_b", "user_0", true, 60_000));
        let d = r.drain(Some(130_000));
        let mut minutes: Vec<(String, u64, u64, u64)> =
            d.minutes.iter().map(|m| (m.namespace_id.to_string(), m.minute, m.passed, m.denied)).collect();
        minutes.sort();
        // One row per namespace-minute, whatever the shards.
        assert_eq!(
            minutes,
            vec![
                ("ns_a".into(), 60_000, 25, 25),
                ("ns_a".into(), 120_000, 0, 1),
                ("ns_b".into(), 60_000, 1, 0)
            ]
        );
        let ids = by_identifier(&d);
        assert_eq!(ids[&("ns_a".into(), 0, "user_0".into())], (5, 6));
        assert_eq!(ids[&("ns_a".into(), 0, "user_1".into())], (5, 5));
        assert_eq!(ids.len(), 6);
        // The hour is still open: its sketch stays, and the next drain has only what is new.
        r.record(&decision("ns_a", "user_1", true, 140_000));
        let d = r.drain(Some(150_000));
        assert_eq!(
            by_identifier(&d).into_iter().collect::<Vec<_>>(),
            vec![(("ns_a".into(), 0, "user_1".into()), (1, 0))]
        );
        // Closed hours are forgotten: nothing held after.
        let d = r.drain(Some(HOUR_MS));
        assert!(d.is_empty());
        assert_eq!(r.entries(), 0);
    }

    /// Identifiers held in the entry and behind a pointer are counted apart and given back
    /// whole: either side of the inline bound, prefixes of one another, empty, multi-byte.
    #[test]
    fn identifiers_short_and_long_are_told_apart_and_given_back_whole() {
        let r = LimitRecorder::new(1_000);
        let at = "é".repeat(15) + "x"; // 31 bytes: the longest held inline
        let long = at.clone() + "y"; // 32 bytes: behind a pointer
        let ids = ["", "a", "ab", at.as_str(), long.as_str(), &"k".repeat(300), &"k".repeat(301)];
        for (n, id) in ids.iter().enumerate() {
            for _ in 0..=n {
                r.record(&decision("ns", id, true, 60_000));
            }
        }
        let got = by_identifier(&r.drain(None));
        let want: std::collections::BTreeMap<_, _> = ids
            .iter()
            .enumerate()
            .map(|(n, id)| (("ns".to_string(), 0, id.to_string()), (n as u64 + 1, 0)))
            .collect();
        assert_eq!(got, want);
    }
    #[test]
    fn heavy_identifiers_are_exact_among_many_light_ones() {
        let r = LimitRecorder::new(1_000_000);
        let mut truth = std::collections::HashMap::<String, u64>::new();
        // 200,000 decisions: 3 heavy identifiers (2% each), interleaved with 100,000
        // identifiers seen once or twice: far more than the sketches hold.
        for i in 0..200_000u64 {
            let id = match i % 50 {
                0 => "heavy_a".to_string(),
                1 => "heavy_b".to_string(),
                2 => "heavy_c".to_string(),
                _ => format!("light_{}", i % 100_000),
            };
            r.record(&decision("ns", &id, i % 7 != 0, 1_000));
            *truth.entry(id).or_default() += 1;
        }
        let ids = by_identifier(&r.drain(None));
        for heavy in ["heavy_a", "heavy_b", "heavy_c"] {
            let (p, d) = ids[&("ns".into(), 0, heavy.into())];
            assert_eq!(p + d, truth[heavy], "{heavy}");
        }
        // Never more than the truth for anyone; bounded memory.
        for ((_, _, id), (p, d)) in &ids {
            assert!(p + d <= truth[id], "{id}");
        }
        assert!(ids.len() <= SHARDS * SKETCH_CAPACITY, "{}", ids.len());
        assert_eq!(r.entries(), 0);
    }

    #[test]
    fn beyond_the_bound_counts_are_dropped_and_counted() {
        let r = LimitRecorder::new(3);
        // A namespace-minute, its hour's sketch and an identifier fill it.
        r.record(&decision("ns_a", "x", true, 0));
        assert_eq!((r.entries(), r.dropped()), (3, 0));
        // A new namespace-minute: dropped; what is held still counts.
        r.record(&decision("ns_b", "x", true, 0));
        assert_eq!(r.dropped(), 1);
        r.record(&decision("ns_a", "x", false, 0));
        let d = r.drain(None);
        let total: u64 = d.minutes.iter().map(|m| m.passed + m.denied).sum();
        assert_eq!(total, 2);
        assert_eq!(r.entries(), 0);
        // Room again after a drain.
        r.record(&decision("ns_b", "x", true, 0));
        assert_eq!((r.entries(), r.dropped()), (3, 1));
    }

    #[test]
    fn a_full_sketch_makes_room_for_a_newcomer() {
        // Identifiers of one shard: found by trying.
        let r = LimitRecorder::new(1_000_000);
        let shard = |id: &str| r.shard_of(r.hasher.hash_one(id)) as *const _;
        let same: Vec<String> = (0..100_000)
            .map(|i| format!("id_{i}"))
            .filter(|id| shard(id) == shard("id_0"))
            .take(400)
            .collect();
        for (n, id) in same.iter().enumerate() {
            // The first ten are heavy (and written: nothing was evicted yet).
            for _ in 0..if n < 10 { 50 } else { 1 } {
                r.record(&decision("ns", id, true, 0));
            }
        }
        let ids = by_identifier(&r.drain(Some(1_000)));
        assert!(ids.len() <= SKETCH_CAPACITY, "{}", ids.len());
        for id in &same[..10] {
            assert_eq!(ids[&("ns".into(), 0, id.clone())], (50, 0));
        }
        assert!(!ids.contains_key(&("ns".into(), 0, same[399].clone())), "light: not written yet");
        // The newest is held: written once it did more than anyone evicted.
        r.record(&decision("ns", &same[399], true, 0));
        r.record(&decision("ns", &same[399], true, 0));
        let ids = by_identifier(&r.drain(None));
        assert_eq!(ids[&("ns".into(), 0, same[399].clone())], (3, 0));
    }

    #[test]
    fn threads_add_up() {
        let r = LimitRecorder::new(100_000);
        std::thread::scope(|s| {
            for t in 0..4 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..10_000u64 {
                        r.record(&decision("ns", &format!("id_{}", (i + t) % 10), i % 3 == 0, i));
                    }
                });
            }
        });
        let d = r.drain(None);
        let total: u64 = d.minutes.iter().map(|m| m.passed + m.denied).sum();
        assert_eq!(total, 40_000);
        let per_id: u64 = d.identifiers.iter().map(|i| i.passed + i.denied).sum();
        assert_eq!(per_id, 40_000);
    }
}
