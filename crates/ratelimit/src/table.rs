//! The table behind each shard of the in-process store: open addressing with linear probing,
//! the value stored in the slot itself. The store's values are 32 bytes aligned to 32, so two
//! slots share each cache line and none spans two.
//!
//! Why not `hashbrown`: its probe reads a control byte first and only then the entry the byte
//! points to, two dependent loads; on a table larger than the cache both miss, one after the
//! other. Here the first slot a lookup reads is computed from the hash alone, so a decision on
//! an existing budget usually costs one miss: its own line, which also holds the next slot of
//! its probe sequence. The price is that a lookup also reads the neighbours in its cluster,
//! which the caller's `eq` rejects cheaply.
//!
//! Deletion leaves a tombstone; tombstones are reused by inserts and dropped whenever the
//! table is rebuilt (on growth, and by [`LineTable::retain`] once they outnumber the values).

/// Values per slot count before the table grows: at most `MAX_LOAD_NUM / MAX_LOAD_DEN` of
/// the slots hold a value or a tombstone. 7/8 (hashbrown's limit too) keeps memory at
/// 37-73 bytes per 32-byte value; a successful lookup reads 1.3-4.5 slots, adjacent slots
/// of one page, two per line. A lower limit (3/4, 1/2) measured slower with 64-byte values:
/// the table doubles sooner, and its footprint costs more than the extra probes.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 8;
const MIN_SLOTS: usize = 8;

#[derive(Debug)]
enum State<T> {
    Empty,
    Deleted,
    Full(T),
}

/// One slot: the value, or a marker that fits in the value's niche (the store's entries
/// have one), so a slot is exactly as large and as aligned as the value.
#[derive(Debug)]
struct Slot<T>(State<T>);

/// The size of the slot that holds a `T`.
#[cfg(test)]
pub(crate) fn slot_size<T>() -> usize {
    std::mem::size_of::<Slot<T>>()
}

fn empty_slots<T>(n: usize) -> Box<[Slot<T>]> {
    (0..n).map(|_| Slot(State::Empty)).collect()
}

fn max_load(slots: usize) -> usize {
    slots / MAX_LOAD_DEN * MAX_LOAD_NUM
}

/// The number of slots (a power of two) that holds `n` values within the maximum load.
fn slots_for(n: usize) -> usize {
    let mut slots = MIN_SLOTS;
    while max_load(slots) < n {
        slots *= 2;
    }
    slots
}

#[derive(Debug)]
pub(crate) struct LineTable<T> {
    /// Empty, or a power of two (>= `MIN_SLOTS`) of slots.
    slots: Box<[Slot<T>]>,
    len: usize,
    deleted: usize,
}

impl<T> Default for LineTable<T> {
    fn default() -> Self {
        Self { slots: empty_slots(0), len: 0, deleted: 0 }
    }
}

impl<T> LineTable<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many values fit before the table must grow.
    pub fn capacity(&self) -> usize {
        max_load(self.slots.len())
    }

    /// The slot holding a value for which `eq` is true. Probing stops at the first empty
    /// slot; the load limit guarantees there is one.
    #[inline]
    fn position(&self, hash: u64, mut eq: impl FnMut(&T) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            match &self.slots[i].0 {
                State::Empty => return None,
                State::Full(v) if eq(v) => return Some(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        match &self.slots[self.position(hash, eq)?].0 {
            State::Full(v) => Some(v),
            _ => None,
        }
    }

    #[inline]
    pub fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let i = self.position(hash, eq)?;
        match &mut self.slots[i].0 {
            State::Full(v) => Some(v),
            _ => None,
        }
    }

    /// Every value.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|slot| match &slot.0 {
            State::Full(v) => Some(v),
            _ => None,
        })
    }

    /// Every value, to change in ways that keep its hash.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|slot| match &mut slot.0 {
            State::Full(v) => Some(v),
            _ => None,
        })
    }

    /// Inserts a value the caller has checked is absent.
    pub fn insert_unique(&mut self, hash: u64, value: T, hasher: impl Fn(&T) -> u64) {
        if self.len + self.deleted + 1 > max_load(self.slots.len()) {
            // Tombstones alone over the limit: rebuild at the same size; else double.
            let slots = if self.len < max_load(self.slots.len()) / 2 {
                self.slots.len().max(MIN_SLOTS)
            } else {
                slots_for(self.len + 1).max(self.slots.len() * 2)
            };
            self.rebuild(slots, &hasher);
        }
        let reused = place(&mut self.slots, hash, value);
        self.len += 1;
        if reused {
            self.deleted -= 1;
        }
    }

    /// Keeps the values for which `keep` is true; the table keeps its size.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool, hasher: impl Fn(&T) -> u64) {
        for slot in self.slots.iter_mut() {
            if let State::Full(v) = &slot.0
                && !keep(v)
            {
                slot.0 = State::Deleted;
                self.len -= 1;
                self.deleted += 1;
            }
        }
        if self.deleted > self.len {
            // More tombstones than values: clear them at the same size (the caller decides
            // when a table shrinks: [`Self::shrink_to`]); an emptied table in place.
            if self.len == 0 {
                self.slots.iter_mut().for_each(|slot| slot.0 = State::Empty);
                self.deleted = 0;
            } else {
                self.rebuild(self.slots.len(), &hasher);
            }
        }
    }

    /// Shrinks the table to the size that holds `max(len, min_len)` values, if smaller.
    pub fn shrink_to(&mut self, min_len: usize, hasher: impl Fn(&T) -> u64) {
        let slots = slots_for(self.len.max(min_len));
        if slots < self.slots.len() {
            self.rebuild(slots, &hasher);
        }
    }

    fn rebuild(&mut self, slots: usize, hasher: &impl Fn(&T) -> u64) {
        let old = std::mem::replace(&mut self.slots, empty_slots(slots));
        for slot in old {
            if let State::Full(v) = slot.0 {
                place(&mut self.slots, hasher(&v), v);
            }
        }
        self.deleted = 0;
    }
}

/// Puts `value` in the first empty or deleted slot of its probe sequence; returns whether
/// that slot held a tombstone.
fn place<T>(slots: &mut [Slot<T>], hash: u64, value: T) -> bool {
    let mask = slots.len() - 1;
    let mut i = hash as usize & mask;
    loop {
        match slots[i].0 {
            State::Full(_) => i = (i + 1) & mask,
            State::Empty => break,
            State::Deleted => {
                slots[i].0 = State::Full(value);
                return true;
            }
        }
    }
    slots[i].0 = State::Full(value);
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(k: u64) -> u64 {
        // Deliberately poor: consecutive keys land in consecutive slots and clusters form.
        k
    }

    fn table_of(keys: impl IntoIterator<Item = u64>) -> LineTable<u64> {
        let mut t = LineTable::default();
        for k in keys {
            assert!(t.find(h(k), |&v| v == k).is_none());
            t.insert_unique(h(k), k, |&v| h(v));
        }
        t
    }

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let t = table_of((0..1000).map(|k| k * 7));
        assert_eq!(t.len(), 1000);
        for k in 0..7000 {
            assert_eq!(t.find(h(k), |&v| v == k).is_some(), k % 7 == 0, "{k}");
        }
        assert!(t.len() <= t.capacity());
    }

    #[test]
    fn colliding_hashes_probe_on() {
        let mut t = LineTable::default();
        for k in 0..100u64 {
            t.insert_unique(42, k, |_| 42);
        }
        for k in 0..100u64 {
            *t.find_mut(42, |&v| v == k).expect("present") += 1000;
        }
        assert!((1000..1100).all(|k| t.find(42, |&v| v == k).is_some()));
    }

    #[test]
    fn retain_keeps_the_rest_reachable_across_tombstones() {
        let mut t = table_of(0..500);
        // Remove every third value: tombstones inside clusters must not cut probes short.
        t.retain(|&v| v % 3 != 0, |&v| h(v));
        assert_eq!(t.len(), 333);
        for k in 0..500 {
            assert_eq!(t.find(h(k), |&v| v == k).is_some(), k % 3 != 0, "{k}");
        }
        // Inserts reuse tombstones and keep everything findable.
        for k in (0..500).filter(|k| k % 3 == 0) {
            t.insert_unique(h(k), k, |&v| h(v));
        }
        assert_eq!(t.len(), 500);
        assert!((0..500).all(|k| t.find(h(k), |&v| v == k).is_some()));
    }

    #[test]
    fn retain_of_most_values_clears_tombstones_and_shrink_releases_slots() {
        let mut t = table_of(0..10_000);
        let big = t.slots.len();
        t.retain(|&v| v < 10, |&v| h(v));
        assert_eq!((t.len(), t.deleted, t.slots.len()), (10, 0, big), "same size, no tombstones");
        t.shrink_to(0, |&v| h(v));
        // Shrunk to the smallest size that holds 10 values; shrinking again changes nothing.
        let small = t.slots.len();
        assert_eq!(small, slots_for(10));
        t.shrink_to(0, |&v| h(v));
        assert_eq!(t.slots.len(), small);
        assert!((0..10).all(|k| t.find(h(k), |&v| v == k).is_some()));
        // Emptied: cleared in place, at the same size, and usable.
        let mut t = table_of(0..1000);
        let slots = t.slots.len();
        t.retain(|_| false, |&v| h(v));
        assert_eq!((t.len(), t.deleted, t.slots.len()), (0, 0, slots));
        assert!(t.slots.iter().all(|s| matches!(s.0, State::Empty)));
        assert!(t.find(h(5), |&v| v == 5).is_none());

        // Fewer tombstones than values: retain keeps the size; shrink_to releases it.
        let mut t = table_of(0..1000);
        let slots = t.slots.len();
        t.retain(|&v| v < 600, |&v| h(v));
        assert_eq!((t.len(), t.deleted, t.slots.len()), (600, 400, slots));
        t.shrink_to(0, |&v| h(v));
        assert_eq!((t.slots.len(), t.deleted), (slots_for(600), 0));
        assert!(t.slots.len() < slots);
        assert!((0..1000).all(|k| t.find(h(k), |&v| v == k).is_some() == (k < 600)));
    }

    #[test]
    fn churn_through_tombstones_never_fills_the_table() {
        // Insert/delete cycles keep len small but would fill every slot with tombstones if
        // inserts did not rebuild: a lookup would then never meet an empty slot.
        let mut t = LineTable::default();
        for round in 0..200u64 {
            for k in 0..20 {
                let k = round * 100 + k;
                t.insert_unique(h(k), k, |&v| h(v));
            }
            t.retain(|&v| v % 100 >= 19, |&v| h(v));
            assert!(t.len() + t.deleted < t.slots.len());
            assert!(t.find(h(u64::MAX), |&v| v == u64::MAX).is_none());
        }
    }

    #[test]
    fn a_slot_of_a_value_with_a_niche_is_the_value() {
        // `char` has unused values for both markers.
        assert_eq!(slot_size::<char>(), std::mem::size_of::<char>());
    }
}
