//! Pushed changes: a fast path for answers a change has already made stale, beside the
//! change counters, never instead of them.
//!
//! A writer publishes its raised change counters (`counters.rs`' PUBLISH script) and, in
//! the same script, announces them on the channel `<prefix>{cc}:changes` (Redis pub/sub;
//! on a cluster a PUBLISH reaches every node): `<epoch> <counter key>=<value> ...`. Each
//! store subscribes on a thread of its own and remembers the highest value announced per
//! counter under its epoch. A cached verification whose counters include one announced
//! above the value its answer was loaded under is known stale without asking Redis: its
//! confirmation (or its queued spend) answers "moved" at once, and the verification takes
//! the blocking path, which reads the counters and loads the key again, as when Redis's
//! answer shows the move. That saves the round trip whose answer is already known.
//!
//! Freshness never rests on a message. Pub/sub delivers at most once and later than the
//! writer's answer may reach a client, so a verification with no announced change still
//! confirms its counters in Redis (`counters.rs`); a lost, late or never-sent message only
//! costs that round trip, as before. An announcement is only ever believed for a move it
//! proves (counters only rise within an epoch, and each announced value was in Redis before
//! it was announced), so it never makes a current answer look stale for long: the blocking
//! path reads a value at least as high and caches the answer under it (a counter deleted
//! from Redis by hand, its epoch kept, would send that key's verifications down the blocking
//! path until the memory starts again: slower, never staler). The memory is
//! bounded ([`MOST`] counters; when full it starts again, which loses nothing but the fast
//! path) and a counter from another epoch is ignored.

use keygate_rbac::Confirm;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Most counters remembered.
pub(super) const MOST: usize = 65_536;

/// How long the subscriber waits for a message before it checks whether its store is gone
/// (and, after a failure, before it connects again).
const TICK: Duration = Duration::from_secs(1);

thread_local! {
    /// A counter's name as [`Pushed::moved`] looks it up (written anew each time, so that
    /// a lookup allocates nothing).
    static NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The counters announced, by counter name (the part after `<prefix>{cc}:`).
#[derive(Default)]
pub(super) struct Pushed {
    /// Name → (epoch, highest value announced).
    seen: RwLock<HashMap<Box<str>, (u64, u64)>>,
    /// Announcements received, and answers found stale by them.
    pub(super) stats: [AtomicU64; 2],
}

/// The channel changes are announced on.
pub(super) fn channel(prefix: &str) -> String {
    format!("{prefix}{{cc}}:changes")
}

impl Pushed {
    /// A store's memory of announcements, fed by a thread subscribed through `client` until
    /// the returned value is dropped.
    pub(super) fn subscribe(client: redis::Client, prefix: &str) -> Arc<Self> {
        let pushed = Arc::new(Self::default());
        let weak = Arc::downgrade(&pushed);
        let (channel, key_prefix) = (channel(prefix), format!("{prefix}{{cc}}:"));
        let spawned = std::thread::Builder::new()
            .name("keygate-pushed".into())
            .spawn(move || listen(&client, &channel, &key_prefix, &weak));
        if let Err(e) = spawned {
            log::warn!("no subscriber for pushed changes (the counters still hold): {e}");
        }
        pushed
    }

    /// Whether an announcement proves that one of `check`'s counters moved past its value.
    pub(super) fn moved(&self, check: &dyn Confirm) -> bool {
        let seen = self.seen.read();
        if seen.is_empty() {
            return false;
        }
        let moved = NAME.with_borrow_mut(|name| {
            (0..check.counters()).any(|i| {
                name.clear();
                let value = check.counter(i, name);
                above(&seen, check.epoch(), name, value)
            })
        });
        self.counted(moved)
    }

    /// [`Self::moved`] of the counters an answer assumed (`(name, value)`, under `epoch`).
    pub(super) fn moved_from(&self, epoch: u64, counters: &[(String, u64)]) -> bool {
        let seen = self.seen.read();
        if seen.is_empty() {
            return false;
        }
        let moved = counters.iter().any(|(name, value)| above(&seen, epoch, name, *value));
        self.counted(moved)
    }

    fn counted(&self, moved: bool) -> bool {
        if moved {
            self.stats[1].fetch_add(1, Ordering::Relaxed);
        }
        moved
    }

    /// Remembers an announcement: `<epoch> <key>=<value> ...`, keys under `key_prefix`.
    fn record(&self, message: &str, key_prefix: &str) {
        let mut parts = message.split(' ');
        let Some(Ok(epoch)) = parts.next().map(str::parse::<u64>) else { return };
        self.stats[0].fetch_add(1, Ordering::Relaxed);
        let mut seen = self.seen.write();
        for part in parts {
            let Some((key, value)) = part.rsplit_once('=') else { continue };
            let (Some(name), Ok(value)) = (key.strip_prefix(key_prefix), value.parse::<u64>()) else {
                continue;
            };
            if seen.len() >= MOST && !seen.contains_key(name) {
                seen.clear();
            }
            let entry = seen.entry(name.into()).or_insert((epoch, value));
            if entry.0 != epoch || entry.1 < value {
                *entry = (epoch, value);
            }
        }
    }
}

/// Whether `name` was announced above `value` under `epoch`.
fn above(seen: &HashMap<Box<str>, (u64, u64)>, epoch: u64, name: &str, value: u64) -> bool {
    matches!(seen.get(name), Some(&(e, v)) if e == epoch && v > value)
}

/// The subscriber's loop: connects, subscribes, records; again after a failure; ends once
/// the store is gone.
fn listen(client: &redis::Client, channel: &str, key_prefix: &str, pushed: &Weak<Pushed>) {
    while pushed.strong_count() > 0 {
        if let Err(e) = listen_once(client, channel, key_prefix, pushed) {
            log::debug!("pushed changes: {e} (connecting again)");
            std::thread::sleep(TICK);
        }
    }
}

fn listen_once(
    client: &redis::Client,
    channel: &str,
    key_prefix: &str,
    pushed: &Weak<Pushed>,
) -> redis::RedisResult<()> {
    let mut conn = client.get_connection_with_timeout(TICK)?;
    let mut sub = conn.as_pubsub();
    sub.subscribe(channel)?;
    sub.set_read_timeout(Some(TICK))?;
    loop {
        match sub.get_message() {
            Ok(msg) => {
                let Some(p) = pushed.upgrade() else { return Ok(()) };
                if let Ok(text) = msg.get_payload::<String>() {
                    p.record(&text, key_prefix);
                }
            }
            Err(e) if e.is_timeout() => {
                if pushed.strong_count() == 0 {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}
