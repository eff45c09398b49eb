//! A key's credit counter in the memory ledger ([`super::memory`]): its value under a lock,
//! what the database holds of it, and what the journal's next fold writes.

use keygate_rbac::Tag;

/// A key's credit counter. `repr(C)`: the fields a spend touches (`state`, `stale`,
/// `folding`) first, in the struct's first lines, which [`Self::prefetch`] brings in.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counter {
    pub(super) state: parking_lot::Mutex<CounterState>,
    /// A write of this counter failed or conflicted: its value is not what the database
    /// holds.
    pub(super) stale: std::sync::atomic::AtomicBool,
    /// What the credit journal's next fold writes to the row, if journaled since the last.
    pub(super) folding: parking_lot::Mutex<Option<Folding>>,
    /// What the database holds, as far as this process knows (read, or last written):
    /// the writer's condition (apart from `state`, which
    /// [`super::memory::MemoryLedger::hold`] keeps locked while it waits for the writer).
    pub(super) stored: parking_lot::Mutex<Option<CounterValue>>,
    pub(super) key_id: Box<str>,
}

impl Counter {
    pub(super) fn new(key_id: &str) -> Self {
        Self {
            state: Default::default(),
            stale: Default::default(),
            folding: Default::default(),
            stored: Default::default(),
            key_id: key_id.into(),
        }
    }

    /// Asks the CPU to bring the counter into its cache: called as a verification finds
    /// the key's counter, before the rate-limit decision that comes ahead of the spend, so
    /// that the two wait for memory at once rather than one after the other (a spend's
    /// first touch of a counter, among 1,000 keys in rotation, missed the cache).
    pub(crate) fn prefetch(&self) {
        let start: *const Counter = self;
        keygate_domain::prefetch::lines(start.cast(), std::mem::size_of::<Counter>());
    }
}

#[derive(Debug, Default)]
pub(super) struct CounterState {
    /// `None`: not read from the database yet (or again).
    pub(super) value: Option<Option<CounterValue>>,
    /// The change counters of the key when it was read.
    pub(super) tag: Option<Tag>,
    /// The sequence number of this counter's last queued write.
    pub(super) pending: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CounterValue {
    pub(super) remaining: u64,
    pub(super) last_refill_at: Option<i64>,
}

/// What a counter waiting to be folded folds: its value before its first journaled spend
/// since the last fold, and after its last (the sequence number of that one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Folding {
    pub(super) before: CounterValue,
    pub(super) after: CounterValue,
    pub(super) seq: u64,
}
