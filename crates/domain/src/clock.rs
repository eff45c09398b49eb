use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Source of "now". Injected everywhere time matters so that tests can move time
/// deterministically instead of sleeping.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Unix milliseconds: what windows, expiries and timestamps are made of. May step back
    /// (NTP).
    fn now_ms(&self) -> u64;

    /// Milliseconds from an arbitrary origin that never go back: what ages and lifetimes
    /// (the caches) are measured in, so that a wall-clock step neither keeps an entry
    /// past its lifetime nor drops it early.
    fn monotonic_ms(&self) -> u64;
}

/// The wall clock, and the process's monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// The monotonic clock's origin: the first time it is read (set once, never changed).
static MONOTONIC_ORIGIN: OnceLock<Instant> = OnceLock::new();

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn monotonic_ms(&self) -> u64 {
        u64::try_from(MONOTONIC_ORIGIN.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to. Clones share the same time. Its monotonic time
/// moves forward with the wall time and stays put when the wall time is set back.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<(AtomicU64, AtomicU64)>);

impl ManualClock {
    pub fn new(start_ms: u64) -> Self {
        Self(Arc::new((AtomicU64::new(start_ms), AtomicU64::new(0))))
    }
    pub fn set(&self, ms: u64) {
        let before = self.0.0.swap(ms, Ordering::SeqCst);
        self.0.1.fetch_add(ms.saturating_sub(before), Ordering::SeqCst);
    }
    pub fn advance(&self, ms: u64) {
        self.0.0.fetch_add(ms, Ordering::SeqCst);
        self.0.1.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.0.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> u64 {
        self.0.1.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::new(1_000);
        let b = a.clone();
        b.advance(500);
        assert_eq!(a.now_ms(), 1_500);
        assert_eq!(a.monotonic_ms(), 500);
        a.set(7);
        assert_eq!(b.now_ms(), 7);
        assert_eq!(b.monotonic_ms(), 500, "a step back does not move the monotonic time");
        a.set(1_007);
        assert_eq!((a.now_ms(), a.monotonic_ms()), (1_007, 1_500));
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }
}
