//! The cap on open client connections: what it is (the setting, bounded by the open-file
//! limit) and a count of the open ones, with a log line when the cap is reached.
//!
//! actix-web enforces the cap per worker (`max_connections`); at the cap a worker stops
//! accepting and new connections wait in the kernel's listen backlog until one closes. A
//! client that holds connections open (a stalled body) is closed by the time limits, so
//! the cap, not the process's file descriptors, is what such a client can exhaust, and
//! the server keeps its own descriptors (database, Redis, files) whatever clients do.

use crate::throttle::{Throttle, suppressed_note};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// File descriptors kept for the server itself: the database and Redis pools, the
/// listener, log files, and a margin.
const RESERVED_FDS: u64 = 128;

/// The connection cap to apply: `wanted`, lowered to what the open-file limit allows
/// (after raising the soft limit to the hard one). The second value says why it was
/// lowered, for the startup log.
pub fn effective_cap(wanted: usize, pools: u64) -> (usize, Option<String>) {
    let nofile = rlimit::increase_nofile_limit(u64::MAX).ok();
    cap_for(wanted, nofile, pools)
}

fn cap_for(wanted: usize, nofile: Option<u64>, pools: u64) -> (usize, Option<String>) {
    let Some(nofile) = nofile else { return (wanted, None) };
    let room = nofile.saturating_sub(RESERVED_FDS + pools).max(16);
    let room = usize::try_from(room).unwrap_or(usize::MAX);
    if room < wanted {
        let why = format!(
            "KEYGATE_MAX_CONNECTIONS={wanted} lowered to {room}: the open-file limit is {nofile} \
             (raise it with ulimit -n or LimitNOFILE=)"
        );
        (room, Some(why))
    } else {
        (wanted, None)
    }
}

/// The per-worker share of a total cap (actix-web counts per worker): rounded down, at
/// least 1, so the workers together never exceed the total.
pub fn per_worker(total: usize, workers: usize) -> usize {
    (total / workers.max(1)).max(1)
}

/// Open client connections, counted by a guard that lives as long as the connection.
#[derive(Debug)]
pub struct Connections {
    open: AtomicUsize,
    cap: usize,
    full: Throttle,
}

impl Connections {
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { open: AtomicUsize::new(0), cap, full: Throttle::new(1, 10_000) })
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Counts a new connection until the guard is dropped (the connection closed).
    pub fn opened(self: &Arc<Self>, now_ms: u64) -> ConnectionGuard {
        let n = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.cap
            && let Some(suppressed) = self.full.admit(now_ms)
        {
            log::warn!(
                "open connections reached the cap of {} (KEYGATE_MAX_CONNECTIONS); new connections \
                 wait until one closes{}",
                self.cap,
                suppressed_note(suppressed)
            );
        }
        ConnectionGuard(self.clone())
    }
}

/// Held in a connection's extensions: dropped when the connection closes.
#[derive(Debug)]
pub struct ConnectionGuard(Arc<Connections>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_the_servers_own_files() {
        assert_eq!(cap_for(4_096, Some(1_048_576), 40), (4_096, None));
        let (cap, why) = cap_for(4_096, Some(1_024), 40);
        assert_eq!(cap, 1_024 - 128 - 40);
        assert!(why.is_some_and(|w| w.contains("1024")));
        assert_eq!(cap_for(4_096, None, 40), (4_096, None), "no limit known: the setting");
        assert_eq!(per_worker(4_096, 3), 1_365);
        assert_eq!(per_worker(2, 4), 1);
    }

    #[test]
    fn guards_count_open_connections() {
        let c = Connections::new(2);
        let a = c.opened(0);
        let b = c.opened(0);
        assert_eq!(c.open(), 2);
        drop(a);
        assert_eq!(c.open(), 1);
        drop(b);
        assert_eq!(c.open(), 0);
    }
}
