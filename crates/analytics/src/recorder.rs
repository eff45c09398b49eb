//! Verification analytics, recorded off the request path (API-v2.md §14): every
//! verification's outcome adds one to an in-memory count per series (workspace, API, key,
//! identity, outcome code, tag set, minute), and a background task writes them to the
//! database in batches ([`Recorder::drain`]), adding to what is there so that flushes and
//! instances add up.
//!
//! Recording is the in-process rate-limit store's pattern: a fixed number of shards, each a
//! hash table behind its own `parking_lot` lock, chosen by the series' hash (its high bits:
//! the table takes its first slot from the low ones, so the shard must not); a series
//! already counted this minute is found by its borrowed parts, so the common case
//! allocates nothing and takes one uncontended lock. The parts are hashed once per count
//! and the hash is kept with the series: a table growing, or a lookup meeting another
//! series, reads no series' text.
//!
//! A series stays held for its minute (and until what it counted is written), whether or
//! not its counts were taken: a key verified again finds its series, whatever the number of
//! keys, and a series is written when its oldest count not yet written is due
//! ([`Recorder::drain`]: a number of drains after it came), not at every flush. So the rows a flush writes grow
//! with the series that received counts in the last few seconds, each carrying every count
//! since its last write. A series is one allocation (its parts, length-prefixed, in one
//! buffer). Memory is bounded: at most `max_series` series are held; beyond that a new
//! series' counts are dropped and counted ([`Recorder::dropped`]), never delaying the
//! verification.

mod tally;

use hashbrown::{HashMap, HashTable};
use keygate_rbac::{Snapshot, VerifyCode};
use parking_lot::Mutex;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// One verification, as it is counted: borrowed from the request and the key's snapshot.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    pub workspace_id: &'a str,
    pub api_id: Option<&'a str>,
    /// Empty for a secret that matched no key.
    pub key_id: &'a str,
    pub identity_id: Option<&'a str>,
    pub code: VerifyCode,
    /// The request's tags, in any order, repeats allowed (counted as a sorted set).
    pub tags: &'a [String],
    /// When (Unix ms).
    pub at_ms: u64,
    /// The credits the verification was charged (API-v2.md §22: its cost, once, however
    /// many budgets it was taken from; 0 when nothing was charged).
    pub spent_credits: u64,
}

/// A series: what one count is kept for. Its text parts (workspace, API, key, identity,
/// then the tags, sorted, each once) sit in one buffer, each after its length; an absent
/// API or identity is an empty part, as the database stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    parts: Box<[u8]>,
    pub code: VerifyCode,
    /// The minute's start (Unix ms).
    pub minute: u64,
    /// The recorder's hash of the parts, code and minute.
    hash: u64,
}

/// A series and its count, drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesCount {
    pub series: Series,
    pub count: u64,
    pub spent_credits: u64,
}

const MINUTE_MS: u64 = 60_000;
/// The parts before the tags: workspace, API, key, identity.
const FIXED_PARTS: usize = 4;

impl Series {
    /// The text parts in order: workspace, API, key, identity, then the tags.
    fn parts(&self) -> Parts<'_> {
        Parts(RawParts(&self.parts))
    }

    fn part(&self, i: usize) -> &str {
        self.parts().nth(i).unwrap_or("")
    }

    pub fn workspace_id(&self) -> &str {
        self.part(0)
    }

    /// Empty when the verification named none.
    pub fn api_id(&self) -> &str {
        self.part(1)
    }

    /// Empty for a secret that matched no key.
    pub fn key_id(&self) -> &str {
        self.part(2)
    }

    /// Empty when the key has none.
    pub fn identity_id(&self) -> &str {
        self.part(3)
    }

    /// The tag set, sorted.
    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.parts().skip(FIXED_PARTS)
    }

    /// What the series holds on the heap besides the map's slot (for the docs' sizes).
    pub fn heap_bytes(&self) -> usize {
        self.parts.len()
    }
}

/// A length as the series buffer writes it: one byte under 255, else 255 and four bytes.
fn put_len(buf: &mut Vec<u8>, n: usize) {
    match u8::try_from(n) {
        Ok(b) if b < u8::MAX => buf.push(b),
        _ => {
            buf.push(u8::MAX);
            buf.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
        }
    }
}

/// The parts of a series buffer, in order, as bytes.
struct RawParts<'a>(&'a [u8]);

impl<'a> Iterator for RawParts<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (&first, rest) = self.0.split_first()?;
        let (n, rest) = match first {
            u8::MAX => {
                let (len, rest) = rest.split_at_checked(4)?;
                (u32::from_le_bytes(len.try_into().ok()?) as usize, rest)
            }
            b => (usize::from(b), rest),
        };
        let (part, rest) = rest.split_at_checked(n)?;
        self.0 = rest;
        Some(part)
    }
}

/// The parts of a series buffer, in order (written from `&str`s only, cut at their
/// lengths, so each is UTF-8).
struct Parts<'a>(RawParts<'a>);

impl<'a> Iterator for Parts<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        self.0.next().map(|p| std::str::from_utf8(p).unwrap_or(""))
    }
}

/// An [`Outcome`] seen as a series (tags already a sorted set), hashed as a [`Series`] is.
struct SeriesRef<'a, 'b> {
    outcome: &'b Outcome<'a>,
    tags: &'b [&'a str],
    minute: u64,
}

impl SeriesRef<'_, '_> {
    fn parts(&self) -> impl Iterator<Item = &str> {
        let o = self.outcome;
        [o.workspace_id, o.api_id.unwrap_or(""), o.key_id, o.identity_id.unwrap_or("")]
            .into_iter()
            .chain(self.tags.iter().copied())
    }
}

impl SeriesRef<'_, '_> {
    /// The hash of the series' parts, code and minute (kept with the [`Series`] made from
    /// it).
    fn hash(&self, hasher: &foldhash::fast::FixedState) -> u64 {
        let mut h = hasher.build_hasher();
        for p in self.parts() {
            p.hash(&mut h);
        }
        self.outcome.code.hash(&mut h);
        self.minute.hash(&mut h);
        h.finish()
    }
}

impl SeriesRef<'_, '_> {
    /// Whether `s` is this series (its hash first: a series met on the way is passed over
    /// without reading its text; then bytes against bytes, no UTF-8 read again).
    fn is(&self, hash: u64, s: &Series) -> bool {
        s.hash == hash
            && s.code == self.outcome.code
            && s.minute == self.minute
            && RawParts(&s.parts).eq(self.parts().map(str::as_bytes))
    }
}

/// A held series' counts: those not yet taken, and when the first of them came.
#[derive(Debug, Clone, Copy)]
struct Held {
    pending: u64,
    /// The credits spent by the counts not yet taken.
    spent: u64,
    /// The drains made before the first count not yet taken came (meaningless while
    /// `pending` is 0).
    since: u64,
}

/// Keys and the latest minute each has a series in.
type KeyMinutes = HashMap<Box<str>, u64, foldhash::fast::FixedState>;

/// A series held, and its counts.
struct Entry {
    series: Series,
    held: Held,
}

/// The in-memory counts; see the module docs.
pub struct Recorder {
    shards: Box<[Mutex<HashTable<Entry>>]>,
    /// The latest minute of each key with a series held (`lastUsed` before a flush): set
    /// when a series is created, cleared when its minute's series is let go; sharded by key.
    last_minutes: Box<[Mutex<KeyMinutes>]>,
    hasher: foldhash::fast::FixedState,
    max_series: usize,
    series: AtomicUsize,
    dropped: AtomicU64,
    /// Drains made so far.
    drains: AtomicU64,
    /// Found keys whose tallies (counts kept beside their cache entries: [`Self::record_beside`])
    /// hold counts not yet taken, in shards picked by the entry's address.
    queued: Box<[Mutex<Vec<Snapshot>>]>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("series", &self.series)
            .field("max_series", &self.max_series)
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

/// Tags beyond this many are not sorted on the stack (a rare request pays an allocation).
const INLINE_TAGS: usize = 16;
/// The shards of series (picked by a hash's top 6 bits), and of keys' latest minutes (top 4).
const SHARDS: usize = 64;
/// Every how many drains the latest minutes noted for tallies are swept.
const SWEEP_EVERY_DRAINS: u64 = 60;
const KEY_SHARDS: usize = 16;

/// The shard of a hash: from its high bits, clear of the low ones a table starts from.
fn shard_of(hash: u64, shards: usize) -> usize {
    (hash >> 58) as usize % shards
}

impl Recorder {
    /// A recorder holding at most `max_series` series at once.
    pub fn new(max_series: usize) -> Self {
        let hasher = foldhash::fast::FixedState::with_seed(0x616e_616c_7974_6963);
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            // Their own seed: a key's slot in its shard's map must not follow the shard.
            last_minutes: (0..KEY_SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x6b65_7973))))
                .collect(),
            hasher,
            max_series,
            series: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            drains: AtomicU64::new(0),
            queued: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    /// Counts one verification (dropped, and counted as such, when the bound is reached
    /// and its series is new).
    pub fn record(&self, outcome: &Outcome<'_>) {
        let mut inline: [&str; INLINE_TAGS] = [""; INLINE_TAGS];
        let mut heap: Vec<&str>;
        let tags: &mut [&str] = if outcome.tags.len() <= INLINE_TAGS {
            for (slot, t) in inline.iter_mut().zip(outcome.tags) {
                *slot = t;
            }
            &mut inline[..outcome.tags.len()]
        } else {
            heap = outcome.tags.iter().map(String::as_str).collect();
            &mut heap
        };
        tags.sort_unstable();
        let n = dedup(tags);
        let key = SeriesRef { outcome, tags: &tags[..n], minute: outcome.at_ms - outcome.at_ms % MINUTE_MS };
        let hash = key.hash(&self.hasher);
        let mut shard = self.shards[shard_of(hash, SHARDS)].lock();
        if let Some(Entry { held, .. }) = shard.find_mut(hash, |e| key.is(hash, &e.series)) {
            if held.pending == 0 {
                held.since = self.drains.load(Ordering::Relaxed);
            }
            held.pending += 1;
            held.spent = held.spent.saturating_add(outcome.spent_credits);
            return;
        }
        // A new series: within the bound, or dropped.
        if self.series.fetch_add(1, Ordering::AcqRel) >= self.max_series {
            self.series.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("keygate_analytics_dropped_total").increment(1);
            return;
        }
        let held =
            Held { pending: 1, spent: outcome.spent_credits, since: self.drains.load(Ordering::Relaxed) };
        shard.insert_unique(hash, Entry { series: owned(&key, hash), held }, |e| e.series.hash);
        drop(shard);
        self.note_minute(outcome.key_id, key.minute);
    }

    fn last_minutes_of(&self, key_id: &str) -> &Mutex<KeyMinutes> {
        &self.last_minutes[shard_of(self.hasher.hash_one(key_id), KEY_SHARDS)]
    }

    /// `key_id` has a series in `minute` (a new series: a key's first of its kind in a
    /// minute, so this is off the common path).
    fn note_minute(&self, key_id: &str, minute: u64) {
        let mut last = self.last_minutes_of(key_id).lock();
        match last.get_mut(key_id) {
            Some(m) => *m = (*m).max(minute),
            None => drop(last.insert(key_id.into(), minute)),
        }
    }

    /// Takes the counts of every series whose first count not yet taken came at least
    /// `wait.0` drains ago (before the drain `wait.0` before this one), and lets go of the
    /// series whose minute had closed by `wait.1` (Unix ms) with nothing left to take
    /// (`None`: every count, and every series, as at shutdown). A series taken and still
    /// open stays held, so its next count finds it. Counted in drains, not in time: with a
    /// drain every second, `wait.0` of 2 writes a count 2 to 3 s after it came, whatever
    /// the clock says.
    pub fn drain(&self, wait: Option<(u64, u64)>) -> Vec<SeriesCount> {
        let drain = self.drains.fetch_add(1, Ordering::AcqRel);
        let mut out = Vec::new();
        let mut gone: Vec<(Box<str>, u64)> = Vec::new();
        for shard in self.shards.iter() {
            shard.lock().retain(|Entry { series, held }| {
                if held.pending > 0 && wait.is_none_or(|(rounds, _)| held.since + rounds <= drain) {
                    out.push(SeriesCount {
                        series: series.clone(),
                        count: held.pending,
                        spent_credits: held.spent,
                    });
                    (held.pending, held.spent) = (0, 0);
                }
                let closed = wait.is_none_or(|(_, now_ms)| series.minute + MINUTE_MS <= now_ms);
                let keep = held.pending > 0 || !closed;
                if !keep {
                    gone.push((series.key_id().into(), series.minute));
                }
                keep
            });
        }
        self.drain_tallies(drain, wait.map(|(rounds, _)| rounds), &mut out);
        if let Some((_, now_ms)) = wait
            && drain.is_multiple_of(SWEEP_EVERY_DRAINS)
        {
            self.sweep_minutes(now_ms);
        }
        self.series.fetch_sub(gone.len(), Ordering::AcqRel);
        // A minute let go is the database's to tell now; a later one held stays noted.
        for (key_id, minute) in gone {
            let mut last = self.last_minutes_of(&key_id).lock();
            if last.get(&*key_id).is_some_and(|m| *m <= minute) {
                last.remove(&*key_id);
            }
        }
        out
    }

    /// The latest minute each of `key_ids` has a count in (held here): a lookup per key,
    /// whatever the number of series held.
    pub fn last_minutes(&self, key_ids: &[&str]) -> Vec<(String, u64)> {
        key_ids
            .iter()
            .filter_map(|id| self.last_minutes_of(id).lock().get(*id).map(|m| (id.to_string(), *m)))
            .collect()
    }

    /// Counts dropped so far because the bound was reached.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Series held now.
    pub fn series(&self) -> usize {
        self.series.load(Ordering::Relaxed)
    }
}

/// Removes repeats from a sorted slice, in place: the length kept.
fn dedup(tags: &mut [&str]) -> usize {
    let mut n = 0;
    for i in 0..tags.len() {
        if n == 0 || tags[i] != tags[n - 1] {
            tags[n] = tags[i];
            n += 1;
        }
    }
    n
}

fn owned(k: &SeriesRef<'_, '_>, hash: u64) -> Series {
    let mut buf = Vec::with_capacity(k.parts().map(|p| p.len() + 1).sum());
    for p in k.parts() {
        put_len(&mut buf, p.len());
        buf.extend_from_slice(p.as_bytes());
    }
    Series { parts: buf.into_boxed_slice(), code: k.outcome.code, minute: k.minute, hash }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome<'a>(key_id: &'a str, code: VerifyCode, tags: &'a [String], at_ms: u64) -> Outcome<'a> {
        Outcome {
            workspace_id: "ws",
            api_id: Some("api"),
            key_id,
            identity_id: None,
            code,
            tags,
            at_ms,
            spent_credits: 0,
        }
    }

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn counts_per_series_with_tags_as_a_sorted_set() {
        let r = Recorder::new(100);
        let (ab, ba, aab) = (tags(&["a", "b"]), tags(&["b", "a"]), tags(&["a", "a", "b"]));
        for t in [&ab, &ba, &aab] {
            r.record(&outcome("key_1", VerifyCode::Valid, t, 60_000));
        }
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 60_001));
        r.record(&outcome("key_1", VerifyCode::RateLimited, &[], 60_002));
        r.record(&outcome("key_2", VerifyCode::Valid, &[], 119_999));
        r.record(&outcome("key_2", VerifyCode::Valid, &[], 120_000));
        let mut drained = r.drain(None);
        drained
            .sort_by(|a, b| (a.series.key_id(), a.series.minute).cmp(&(b.series.key_id(), b.series.minute)));
        let summary: Vec<(&str, u64, usize, u64)> = drained
            .iter()
            .map(|c| (c.series.key_id(), c.series.minute, c.series.tags().count(), c.count))
            .collect();
        assert_eq!(summary.len(), 5, "{summary:?}");
        let with_tags = drained.iter().find(|c| c.series.tags().count() == 2).unwrap();
        assert_eq!(with_tags.count, 3, "a,b in any order and with repeats is one series");
        assert_eq!(with_tags.series.tags().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(
            (with_tags.series.workspace_id(), with_tags.series.api_id(), with_tags.series.identity_id()),
            ("ws", "api", "")
        );
        assert!(drained.iter().any(|c| c.series.key_id() == "key_2" && c.series.minute == 60_000));
        assert!(drained.iter().any(|c| c.series.key_id() == "key_2" && c.series.minute == 120_000));
        assert_eq!(r.series(), 0);
    }

    #[test]
    fn long_parts_keep_their_lengths() {
        let r = Recorder::new(100);
        let long = "k".repeat(300);
        let tag = vec!["t".repeat(70_000), String::new()];
        r.record(&Outcome {
            workspace_id: "ws",
            api_id: None,
            key_id: &long,
            identity_id: Some("id_1"),
            code: VerifyCode::Valid,
            tags: &tag,
            at_ms: 5,
            spent_credits: 0,
        });
        let drained = r.drain(None);
        let s = &drained[0].series;
        assert_eq!((s.workspace_id(), s.api_id(), s.key_id(), s.identity_id()), ("ws", "", &*long, "id_1"));
        assert_eq!(s.tags().collect::<Vec<_>>(), ["", &*tag[0]]);
    }

    #[test]
    fn last_minutes_are_those_held() {
        let r = Recorder::new(100);
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 60_000));
        r.record(&outcome("key_1", VerifyCode::Disabled, &[], 125_000));
        r.record(&outcome("key_2", VerifyCode::Valid, &[], 60_500));
        let mut last = r.last_minutes(&["key_1", "key_2", "key_3"]);
        last.sort();
        assert_eq!(last, [("key_1".to_string(), 120_000), ("key_2".to_string(), 60_000)]);
        // Minutes let go are the database's; a later one held stays.
        r.drain(Some((0, 120_000)));
        assert_eq!(r.last_minutes(&["key_1", "key_2"]), [("key_1".to_string(), 120_000)]);
        r.drain(None);
        assert!(r.last_minutes(&["key_1"]).is_empty());
    }

    #[test]
    fn takes_what_is_due_and_holds_open_series_for_their_next_counts() {
        let r = Recorder::new(100);
        let wait = |now_ms| Some((2, now_ms));
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 60_000));
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 61_000));
        assert!(r.drain(wait(62_000)).is_empty(), "drain 0: nothing has waited two drains");
        r.record(&outcome("key_2", VerifyCode::Valid, &[], 62_500));
        assert!(r.drain(wait(63_000)).is_empty(), "drain 1");
        // Drain 2: key_1's two counts (they came before drain 0), not key_2's.
        let taken = r.drain(wait(64_000));
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].series.key_id(), taken[0].count), ("key_1", 2));
        assert_eq!(r.series(), 2, "an open minute's series stays held once taken");
        // Its next count finds it; it is due two drains after its own arrival.
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 64_500));
        let next = r.drain(wait(65_000));
        assert!(next.iter().all(|c| c.series.key_id() == "key_2"), "drain 3: key_2 only");
        assert!(r.drain(wait(66_000)).is_empty(), "drain 4");
        let later = r.drain(wait(67_000));
        assert_eq!((later.len(), later[0].count), (1, 1), "drain 5: key_1's third count");
        // Once its minute has closed and nothing is left, a series is let go.
        assert_eq!(r.series(), 2);
        assert!(r.drain(wait(120_000)).is_empty());
        assert_eq!(r.series(), 0);
        // A closed minute's counts not yet due stay until they are.
        r.record(&outcome("key_3", VerifyCode::Valid, &[], 119_000));
        assert!(r.drain(wait(121_000)).is_empty());
        assert_eq!(r.series(), 1);
        assert!(r.drain(wait(122_000)).is_empty());
        assert_eq!(r.drain(wait(123_000)).len(), 1);
        assert_eq!(r.series(), 0);
    }

    #[test]
    fn beyond_the_bound_new_series_are_dropped_and_counted() {
        let r = Recorder::new(2);
        for key in ["key_1", "key_2", "key_3", "key_4"] {
            r.record(&outcome(key, VerifyCode::Valid, &[], 0));
        }
        // Existing series still count.
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 1));
        assert_eq!(r.dropped(), 2);
        let drained = r.drain(None);
        assert_eq!(drained.iter().map(|c| c.count).sum::<u64>(), 3);
        // Room again after a drain.
        r.record(&outcome("key_3", VerifyCode::Valid, &[], 0));
        assert_eq!(r.series(), 1);
    }

    #[test]
    fn many_tags_and_threads_add_up() {
        let r = Recorder::new(10_000);
        let many = tags(&(0..40).map(|i| if i % 2 == 0 { "x" } else { "y" }).collect::<Vec<_>>());
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (r, many) = (&r, &many);
                s.spawn(move || {
                    for i in 0..1_000u64 {
                        r.record(&outcome("key_1", VerifyCode::Valid, many, i));
                    }
                });
            }
        });
        let drained = r.drain(None);
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].count, 4_000);
        assert_eq!(drained[0].series.tags().count(), 2);
    }
}
