//! Verification analytics, recorded off the request path (API-v2.md §14): every
//! verification's outcome adds one to an in-memory count per series (workspace, API, key,
//! identity, outcome code, tag set, minute), and a background task drains them to the
//! database every few seconds in one batch ([`Recorder::drain`]), adding to what is there
//! so that flushes and instances add up.
//!
//! Recording is the in-process rate-limit store's pattern: a fixed number of shards, each a
//! hash map behind its own `parking_lot` lock, chosen by the series' hash; a series already
//! counted this minute is found by its borrowed parts ([`hashbrown::Equivalent`]), so the
//! common case allocates nothing and takes one uncontended lock. Memory is bounded: at most
//! `max_series` series wait to be drained; beyond that a new series' counts are dropped
//! and counted ([`Recorder::dropped`]), never delaying the verification.

use hashbrown::{Equivalent, HashMap};
use keygate_rbac::VerifyCode;
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
}

/// A series: what one count is kept for. `tags` are sorted, each once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Series {
    pub workspace_id: Box<str>,
    pub api_id: Option<Box<str>>,
    pub key_id: Box<str>,
    pub identity_id: Option<Box<str>>,
    pub code: VerifyCode,
    pub tags: Box<[Box<str>]>,
    /// The minute's start (Unix ms).
    pub minute: u64,
}

/// A series and its count, drained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesCount {
    pub series: Series,
    pub count: u64,
}

const MINUTE_MS: u64 = 60_000;

/// An [`Outcome`] seen as a series (tags already a sorted set), hashed as a [`Series`] is.
struct SeriesRef<'a, 'b> {
    outcome: &'b Outcome<'a>,
    tags: &'b [&'a str],
    minute: u64,
}

impl Hash for SeriesRef<'_, '_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // As `Series`'s derived `Hash`: field by field, in order.
        let o = self.outcome;
        o.workspace_id.hash(h);
        o.api_id.hash(h);
        o.key_id.hash(h);
        o.identity_id.hash(h);
        o.code.hash(h);
        self.tags.len().hash(h);
        for t in self.tags {
            t.hash(h);
        }
        self.minute.hash(h);
    }
}

impl Equivalent<Series> for SeriesRef<'_, '_> {
    fn equivalent(&self, s: &Series) -> bool {
        let o = self.outcome;
        *s.workspace_id == *o.workspace_id
            && s.api_id.as_deref() == o.api_id
            && *s.key_id == *o.key_id
            && s.identity_id.as_deref() == o.identity_id
            && s.code == o.code
            && s.minute == self.minute
            && s.tags.len() == self.tags.len()
            && s.tags.iter().zip(self.tags).all(|(a, b)| **a == **b)
    }
}

/// Keys and the latest minute each has a series in.
type KeyMinutes = HashMap<Box<str>, u64, foldhash::fast::FixedState>;

/// The in-memory counts; see the module docs.
pub struct Recorder {
    shards: Box<[Mutex<HashMap<Series, u64, foldhash::fast::FixedState>>]>,
    /// The latest minute of each key with a series held (`lastUsed` before a flush): set
    /// when a series is created, cleared when its minute is drained; sharded by key.
    last_minutes: Box<[Mutex<KeyMinutes>]>,
    hasher: foldhash::fast::FixedState,
    max_series: usize,
    series: AtomicUsize,
    dropped: AtomicU64,
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

impl Recorder {
    /// A recorder holding at most `max_series` series between drains.
    pub fn new(max_series: usize) -> Self {
        let hasher = foldhash::fast::FixedState::with_seed(0x616e_616c_7974_6963);
        Self {
            shards: (0..64).map(|_| Mutex::new(HashMap::with_hasher(hasher))).collect(),
            last_minutes: (0..16).map(|_| Mutex::new(HashMap::with_hasher(hasher))).collect(),
            hasher,
            max_series,
            series: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
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
        let hash = self.hasher.hash_one(&key);
        let mut shard = self.shards[hash as usize % self.shards.len()].lock();
        if let Some(count) = shard.get_mut(&key) {
            *count += 1;
            return;
        }
        // A new series: within the bound, or dropped.
        if self.series.fetch_add(1, Ordering::AcqRel) >= self.max_series {
            self.series.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("keygate_analytics_dropped_total").increment(1);
            return;
        }
        shard.insert(owned(&key), 1);
        drop(shard);
        self.note_minute(outcome.key_id, key.minute);
    }

    fn last_minutes_of(&self, key_id: &str) -> &Mutex<KeyMinutes> {
        &self.last_minutes[self.hasher.hash_one(key_id) as usize % self.last_minutes.len()]
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

    /// Takes the counts of the minutes that started before `before_ms` (every count, with
    /// `None`: at shutdown). What is taken is no longer held.
    pub fn drain(&self, before_ms: Option<u64>) -> Vec<SeriesCount> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let taken: Vec<Series> = shard
                .keys()
                .filter(|s| before_ms.is_none_or(|b| s.minute + MINUTE_MS <= b))
                .cloned()
                .collect();
            for series in taken {
                if let Some(count) = shard.remove(&series) {
                    out.push(SeriesCount { series, count });
                }
            }
        }
        self.series.fetch_sub(out.len(), Ordering::AcqRel);
        // What was drained is the database's to tell now; a later minute stays noted.
        for c in &out {
            let mut last = self.last_minutes_of(&c.series.key_id).lock();
            if last.get(&*c.series.key_id).is_some_and(|m| *m <= c.series.minute) {
                last.remove(&*c.series.key_id);
            }
        }
        out
    }

    /// The latest minute each of `key_ids` has a count in (held here, not yet drained):
    /// a lookup per key, whatever the number of series held.
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

fn owned(k: &SeriesRef<'_, '_>) -> Series {
    let o = k.outcome;
    Series {
        workspace_id: o.workspace_id.into(),
        api_id: o.api_id.map(Into::into),
        key_id: o.key_id.into(),
        identity_id: o.identity_id.map(Into::into),
        code: o.code,
        tags: k.tags.iter().map(|t| (*t).into()).collect(),
        minute: k.minute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome<'a>(key_id: &'a str, code: VerifyCode, tags: &'a [String], at_ms: u64) -> Outcome<'a> {
        Outcome { workspace_id: "ws", api_id: Some("api"), key_id, identity_id: None, code, tags, at_ms }
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
        drained.sort_by(|a, b| (&a.series.key_id, a.series.minute).cmp(&(&b.series.key_id, b.series.minute)));
        let summary: Vec<(&str, u64, usize, u64)> = drained
            .iter()
            .map(|c| (&*c.series.key_id, c.series.minute, c.series.tags.len(), c.count))
            .collect();
        assert_eq!(summary.len(), 5, "{summary:?}");
        let with_tags = drained.iter().find(|c| c.series.tags.len() == 2).unwrap();
        assert_eq!(with_tags.count, 3, "a,b in any order and with repeats is one series");
        assert_eq!(&*with_tags.series.tags[0], "a");
        assert!(drained.iter().any(|c| &*c.series.key_id == "key_2" && c.series.minute == 60_000));
        assert!(drained.iter().any(|c| &*c.series.key_id == "key_2" && c.series.minute == 120_000));
        assert_eq!(r.series(), 0);
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
        // Drained minutes are the database's; a later one held stays.
        r.drain(Some(120_000));
        assert_eq!(r.last_minutes(&["key_1", "key_2"]), [("key_1".to_string(), 120_000)]);
        r.drain(None);
        assert!(r.last_minutes(&["key_1"]).is_empty());
    }

    #[test]
    fn drains_only_closed_minutes() {
        let r = Recorder::new(100);
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 60_000));
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 120_000));
        let closed = r.drain(Some(125_000));
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].series.minute, 60_000);
        assert_eq!(r.series(), 1);
        r.record(&outcome("key_1", VerifyCode::Valid, &[], 121_000));
        let rest = r.drain(Some(180_000));
        assert_eq!((rest.len(), rest[0].count), (1, 2));
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
        assert_eq!(drained[0].series.tags.len(), 2);
    }
}
