//! The bounds on old-hash checks (API-v2.md §25): a few at once in the whole process,
//! taken in turn, one at a time per lookup value, and after a check that failed, none for
//! that lookup value for [`cool_down`]'s while (four times the check's time, a second at
//! least: so wrong secrets for one lookup value, however many and however sent, keep at
//! most a quarter of one core busy).
//!
//! A check for a lookup value that is being checked (or waits its turn) already is refused
//! at once: the verification answers NOT_FOUND, not remembered, so the key's holder can try
//! again. So a flood of wrong secrets for one lookup value holds one place at a time, and a
//! check for another lookup waits at most behind the ones queued before it (in order, up to
//! [`MAX_WAIT`], then refused too), instead of finding every place taken by the flood.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// The longest a check waits for its turn.
pub const MAX_WAIT: Duration = Duration::from_secs(2);
/// The most lookup values cooling down at once (beyond, the expired ones are dropped
/// first; a lookup that still finds no room is not cooled).
const MAX_COOLING: usize = 100_000;

/// How long a lookup value gets no check after one that took `took` failed.
pub fn cool_down(took: Duration) -> Duration {
    (took * 4).max(Duration::from_secs(1))
}

/// The checks allowed at once, and the lookup values being checked or waiting.
#[derive(Debug)]
pub struct Gate {
    permits: usize,
    state: Mutex<State>,
    turn: Condvar,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// Tickets waiting, in the order they came.
    queue: VecDeque<u64>,
    next: u64,
    lookups: HashSet<String>,
    /// Lookup values after a failed check, until when they get none.
    cooling: HashMap<String, Instant>,
}

/// One check let through: frees its place when dropped.
#[derive(Debug)]
pub struct Pass<'g> {
    gate: &'g Gate,
    lookup: String,
}

impl Gate {
    /// At most `permits` checks at once (at least one).
    pub fn new(permits: usize) -> Self {
        Self { permits: permits.max(1), state: Mutex::new(State::default()), turn: Condvar::new() }
    }

    /// Half the machine's cores (at least one): the other half keeps answering.
    pub fn for_this_machine() -> Self {
        Self::new(std::thread::available_parallelism().map_or(1, |n| n.get() / 2))
    }

    /// A place for a check of `lookup`, in turn (waiting up to `wait`), unless a check of
    /// `lookup` runs or waits already.
    pub fn enter(&self, lookup: &str, wait: Duration) -> Option<Pass<'_>> {
        let mut st = self.state.lock();
        if st.cooling.get(lookup).is_some_and(|until| *until > Instant::now()) {
            return None;
        }
        if !st.lookups.insert(lookup.to_string()) {
            return None;
        }
        let ticket = st.next;
        st.next += 1;
        st.queue.push_back(ticket);
        let deadline = Instant::now() + wait;
        loop {
            if st.running < self.permits && st.queue.front() == Some(&ticket) {
                st.queue.pop_front();
                st.running += 1;
                // The next in line may have a place too.
                self.turn.notify_all();
                return Some(Pass { gate: self, lookup: lookup.to_string() });
            }
            if self.turn.wait_until(&mut st, deadline).timed_out() {
                st.queue.retain(|t| *t != ticket);
                st.lookups.remove(lookup);
                self.turn.notify_all();
                return None;
            }
        }
    }
}

impl Pass<'_> {
    /// The check failed after `took`: its lookup value gets none for [`cool_down`]`(took)`.
    pub fn failed(&self, took: Duration) {
        let mut st = self.gate.state.lock();
        let now = Instant::now();
        if st.cooling.len() >= MAX_COOLING {
            st.cooling.retain(|_, until| *until > now);
        }
        if st.cooling.len() < MAX_COOLING {
            st.cooling.insert(self.lookup.clone(), now + cool_down(took));
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut st = self.gate.state.lock();
        st.running -= 1;
        st.lookups.remove(&self.lookup);
        self.gate.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Duration = Duration::ZERO;

    #[test]
    fn one_check_per_lookup_and_no_more_than_the_permits() {
        let gate = Gate::new(2);
        let a = gate.enter("a", NOW).unwrap();
        assert!(gate.enter("a", NOW).is_none(), "one at a time per lookup");
        let b = gate.enter("b", NOW).unwrap();
        assert!(gate.enter("c", NOW).is_none(), "two permits, and no time to wait");
        drop(a);
        assert!(gate.enter("a", NOW).is_some(), "freed when the check ends");
        drop(b);
    }

    #[test]
    fn a_failed_check_cools_its_lookup_down() {
        let gate = Gate::new(1);
        gate.enter("a", NOW).unwrap().failed(Duration::from_millis(1));
        assert!(gate.enter("a", NOW).is_none(), "cooling down");
        assert!(gate.enter("b", NOW).is_some(), "other lookups are not");
        assert_eq!(cool_down(Duration::from_millis(500)), Duration::from_secs(2));
        gate.state.lock().cooling.insert("a".into(), Instant::now());
        assert!(gate.enter("a", NOW).is_some(), "and checked again once it has passed");
    }

    #[test]
    fn a_check_waits_its_turn_behind_a_running_one() {
        let gate = Gate::new(1);
        std::thread::scope(|s| {
            let flood = gate.enter("flooded", NOW).unwrap();
            let waiter = s.spawn(|| gate.enter("other", MAX_WAIT).is_some());
            // Refused at once while its own lookup runs, whatever the wait.
            while gate.state.lock().queue.is_empty() {
                std::thread::yield_now();
            }
            assert!(gate.enter("flooded", MAX_WAIT).is_none());
            drop(flood);
            assert!(waiter.join().unwrap(), "the other lookup got its turn");
        });
    }
}
