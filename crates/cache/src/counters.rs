//! Change counters: how a cached verification knows it is still current (issue 18).
//!
//! Every write that can change what a verification answers bumps a counter in its own
//! database transaction (`keygate_rbac::store::CounterTx`): one per key for one key's changes,
//! one per workspace for changes that reach many keys (a role's permissions, a deleted
//! permission or role), and one per shard of key hashes for key creation (so that a cached
//! "not found" ends when the key appears). A cached answer is tagged with the counters read
//! *before* it was loaded, and used only while they are unchanged: a write that commits
//! after that read bumps a counter the next check sees, whichever side of the load it
//! committed on.
//!
//! Where the current values are read ([`CounterSource`]):
//! - `Local`: a fixed array of counter slots in memory, bumped after each commit made
//!   through this process, and by a poll of the database's counters for commits made by
//!   other processes (the admin CLI on the same SQLite file). A check is a few atomic loads.
//!   Two scopes may share a slot: that only causes a needless reload.
//! - `Store`: the database's counters, one indexed read per check (PostgreSQL without
//!   Redis: several instances share nothing else).
//! - `Shared`: a shared store (Redis) holding the database's values, pushed there by the
//!   writer after its commit and before it answers; when it cannot be reached, the
//!   database's counters are read instead.

use keygate_domain::StorageError;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

/// Shards of key hashes for the key-creation counter: a creation ends the cached "not
/// found" answers of one shard only.
pub const CREATION_SHARDS: u8 = 64;

/// What a counter counts changes of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope<'a> {
    /// One key: its links, its deletion.
    Key(&'a str),
    /// Everything in a workspace that reaches many keys: a role's permissions, a deleted
    /// permission or role.
    Workspace(&'a str),
    /// Keys created whose hash falls in this shard ([`creation_shard`]).
    KeysCreated(u8),
    /// One root key: its revocation.
    RootKey(&'a str),
    /// Root keys created.
    RootKeysCreated,
}

impl Scope<'_> {
    /// The counter's name in the database and in a shared store.
    pub fn name(&self) -> String {
        let mut name = String::new();
        self.write_name(&mut name);
        name
    }

    /// [`Self::name`], appended to `out` (no allocation of its own).
    pub fn write_name(&self, out: &mut String) {
        let (kind, id) = match self {
            Scope::Key(id) => ("key:", *id),
            Scope::Workspace(id) => ("ws:", *id),
            Scope::KeysCreated(shard) => {
                // (Writing into a String cannot fail.)
                let _ = fmt::Write::write_fmt(out, format_args!("created:{shard}"));
                return;
            }
            Scope::RootKey(id) => ("rk:", *id),
            Scope::RootKeysCreated => ("rk-created", ""),
        };
        out.push_str(kind);
        out.push_str(id);
    }
}

/// The creation shard of a key's SHA-256 digest.
pub fn creation_shard(digest: &[u8; 32]) -> u8 {
    digest[0] % CREATION_SHARDS
}

/// The counters a cached answer was loaded under: where they were read, and their values
/// (at most two scopes per answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// [`SOURCE_LOCAL`], [`SOURCE_STORE`], or the shared store's epoch (a random number
    /// it holds; a new one after it lost its data).
    pub source: u64,
    pub values: [u64; 2],
}

pub const SOURCE_LOCAL: u64 = 0;
pub const SOURCE_STORE: u64 = 1;

/// A shared store of counters (Redis), implemented outside this crate.
pub trait SharedCounters: Send + Sync + fmt::Debug {
    /// The values of the named counters (0 for an absent one) and the store's epoch, in one
    /// round trip.
    fn read(&self, names: &[String]) -> Result<(u64, Vec<u64>), StorageError>;
    /// Raises each named counter to at least its value (never lowers one).
    fn publish(&self, changes: &[(String, u64)]) -> Result<(), StorageError>;
    /// Whether the counters `check` names still hold its values under its epoch, read
    /// after this call, together with the confirmations of other callers (one round trip
    /// serves many), on the caller's tokio runtime. `None`: this store cannot (no runtime,
    /// or it reads one caller at a time: [`Self::read`]). An absent epoch (the store lost
    /// its data) confirms nothing.
    fn confirm(&self, check: Box<dyn Confirm>) -> Option<Confirming> {
        drop(check);
        None
    }
}

/// What a confirmation names ([`SharedCounters::confirm`]): the shared store's epoch, and
/// counters with the values they must still hold. The store writes the names out when it
/// sends the read, so asking allocates none.
pub trait Confirm: Send + Sync + 'static {
    /// The shared store's epoch the values were read under.
    fn epoch(&self) -> u64;
    /// How many counters it names.
    fn counters(&self) -> usize;
    /// The `i`-th counter's name, appended to `out`, and the value it must hold.
    fn counter(&self, i: usize, out: &mut String) -> u64;
}

/// A confirmation to come: `true` when every counter still holds its value.
pub type Confirming =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, StorageError>> + Send + 'static>>;

/// A cheap sign that the database changed: a number that moves whenever another
/// connection commits (SQLite's `PRAGMA data_version`), implemented outside this crate.
/// With local counters it lets a process see another process's writes at its next
/// verification instead of at its next poll ([`Probe`]).
pub trait ChangeProbe: Send + Sync + fmt::Debug {
    /// The database's change number now.
    fn version(&self) -> Result<u64, StorageError>;
}

/// A [`ChangeProbe`] and when it was last asked: the probe is asked at most once per
/// `every`, and never for a verification that follows a look within `every`. A write made
/// elsewhere is then seen by every verification that starts `every` after it, and by the
/// first that follows a quiet spell of `every` (as a request after a write through an API
/// always does); the poll stays the backstop.
#[derive(Debug)]
pub struct Probe {
    probe: std::sync::Arc<dyn ChangeProbe>,
    every_ns: u64,
    base: std::time::Instant,
    /// The version the local counters were last brought up to ([`u64::MAX`]: not yet).
    seen: AtomicU64,
    /// When (ns after `base`) the version was last found unchanged or caught up with.
    looked: AtomicU64,
    /// A caller is asking the probe in [`Self::current`]: the others do not ask too.
    asking: std::sync::atomic::AtomicBool,
    /// Held while catching up: callers that need it together read the version once.
    catching_up: parking_lot::Mutex<()>,
}

impl Probe {
    pub fn new(probe: std::sync::Arc<dyn ChangeProbe>, every: std::time::Duration) -> Self {
        Self {
            probe,
            every_ns: every.as_nanos().try_into().unwrap_or(u64::MAX),
            base: std::time::Instant::now(),
            seen: AtomicU64::new(u64::MAX),
            looked: AtomicU64::new(0),
            asking: Default::default(),
            catching_up: parking_lot::Mutex::new(()),
        }
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos().try_into().unwrap_or(u64::MAX)
    }

    /// Whether the local counters may be trusted without catching up: looked at within
    /// `every`, or the version unchanged since (a failing probe: not trusted). Single
    /// flight: while one caller asks the probe, the others are told "not current" and
    /// catch up, which waits for a look that began after them ([`Self::catch_up`]).
    pub fn current(&self) -> bool {
        let now = self.now_ns();
        let looked = self.looked.load(Ordering::Acquire);
        if looked != 0 && now.saturating_sub(looked) < self.every_ns {
            return true;
        }
        if self.asking.swap(true, Ordering::Acquire) {
            return false;
        }
        let current = match self.probe.version() {
            Ok(v) if v == self.seen.load(Ordering::Acquire) => {
                self.looked.fetch_max(now.max(1), Ordering::AcqRel);
                true
            }
            _ => false,
        };
        self.asking.store(false, Ordering::Release);
        current
    }

    /// Brings the local counters up to the database when it changed: `poll` reads the
    /// counters bumped elsewhere. The version is read before the poll, so a commit that
    /// lands during it is caught by the next look. Single flight: callers that catch up
    /// together take turns, and one whose turn comes after a look that began after it
    /// needs nothing more (that look saw every commit made before it began).
    pub fn catch_up<E>(&self, poll: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let began = self.now_ns();
        let _turn = self.catching_up.lock();
        if self.looked.load(Ordering::Acquire) > began {
            return Ok(());
        }
        let now = self.now_ns();
        match self.probe.version() {
            Ok(v) => {
                if v != self.seen.load(Ordering::Acquire) {
                    poll()?;
                    self.seen.store(v, Ordering::Release);
                }
                self.looked.fetch_max(now.max(1), Ordering::AcqRel);
                Ok(())
            }
            // No version: poll all the same, and keep asking.
            Err(e) => {
                log::debug!("change probe: {e}; polling the counters instead");
                poll()
            }
        }
    }
}

/// Where the current counters are read; see the module docs.
#[derive(Debug)]
pub enum CounterSource {
    Local(LocalCounters),
    Store,
    Shared(std::sync::Arc<dyn SharedCounters>),
}

impl CounterSource {
    /// Whether the counters are in this process's memory.
    pub fn is_local(&self) -> bool {
        matches!(self, CounterSource::Local(_))
    }
}

/// Counter slots in memory: scopes hash to one of a fixed number of slots.
pub struct LocalCounters {
    slots: Box<[AtomicU64]>,
    /// Bumps so far, each counted before its slots move ([`Self::generation`]).
    generation: AtomicU64,
    hasher: foldhash::fast::FixedState,
}

impl fmt::Debug for LocalCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalCounters({} slots)", self.slots.len())
    }
}

/// 64k slots (512 KiB): few scopes share one.
const LOCAL_SLOTS: usize = 1 << 16;

impl Default for LocalCounters {
    fn default() -> Self {
        Self {
            slots: (0..LOCAL_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            generation: AtomicU64::new(0),
            hasher: foldhash::fast::FixedState::with_seed(0x6b67_636f_756e_7473),
        }
    }
}

impl LocalCounters {
    fn slot(&self, scope: &Scope<'_>) -> &AtomicU64 {
        &self.slots[self.hasher.hash_one(scope) as usize % self.slots.len()]
    }

    /// A slot's value by the counter's name (as the database's poll reports it).
    fn slot_by_name(&self, name: &str) -> Option<&AtomicU64> {
        let (kind, rest) = name.split_once(':').unwrap_or((name, ""));
        let scope = match kind {
            "key" => Scope::Key(rest),
            "ws" => Scope::Workspace(rest),
            "created" => Scope::KeysCreated(rest.parse().ok()?),
            "rk" => Scope::RootKey(rest),
            "rk-created" => Scope::RootKeysCreated,
            _ => return None,
        };
        Some(self.slot(&scope))
    }

    pub fn read(&self, scopes: &[Scope<'_>]) -> Tag {
        let mut values = [0; 2];
        for (v, s) in values.iter_mut().zip(scopes) {
            *v = self.slot(s).load(Ordering::SeqCst);
        }
        Tag { source: SOURCE_LOCAL, values }
    }

    /// Counters bumped (by name, as the database and the service's writes name them).
    pub fn bump_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        for name in names {
            if let Some(slot) = self.slot_by_name(name) {
                slot.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// How many bumps have begun. A reader that finds it the same before a database
    /// snapshot and after reading slots once the snapshot was taken knows no bump moved a
    /// slot in between: the slots it read are the ones before the snapshot, so a snapshot
    /// tagged with them is as safe as one read after them (the miss in one transaction).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct FakeProbe {
        version: AtomicU64,
        asked: AtomicU64,
    }

    impl ChangeProbe for FakeProbe {
        fn version(&self) -> Result<u64, StorageError> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            Ok(self.version.load(Ordering::Relaxed))
        }
    }

    /// A probe whose first answer waits until it is let go.
    #[derive(Debug)]
    struct SlowProbe {
        asked: AtomicU64,
        go: parking_lot::Mutex<bool>,
        went: parking_lot::Condvar,
    }

    impl ChangeProbe for SlowProbe {
        fn version(&self) -> Result<u64, StorageError> {
            self.asked.fetch_add(1, Ordering::Relaxed);
            let mut go = self.go.lock();
            while !*go {
                self.went.wait(&mut go);
            }
            Ok(1)
        }
    }

    #[test]
    fn callers_that_catch_up_together_ask_the_probe_once_more_not_once_each() {
        let slow = std::sync::Arc::new(SlowProbe {
            asked: AtomicU64::new(0),
            go: parking_lot::Mutex::new(false),
            went: parking_lot::Condvar::new(),
        });
        let probe = std::sync::Arc::new(Probe::new(slow.clone(), std::time::Duration::from_secs(60)));
        let polls = std::sync::Arc::new(AtomicU64::new(0));
        let catch_up = |probe: std::sync::Arc<Probe>, polls: std::sync::Arc<AtomicU64>| {
            std::thread::spawn(move || {
                probe
                    .catch_up(|| -> Result<(), ()> {
                        polls.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    })
                    .unwrap()
            })
        };
        // One caller is asking (its answer held back); eight more arrive meanwhile.
        let first = catch_up(probe.clone(), polls.clone());
        while slow.asked.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let waiting: Vec<_> = (0..8).map(|_| catch_up(probe.clone(), polls.clone())).collect();
        std::thread::sleep(std::time::Duration::from_millis(100));
        *slow.go.lock() = true;
        slow.went.notify_all();
        first.join().unwrap();
        for t in waiting {
            t.join().unwrap();
        }
        // The first look began before the others arrived, so one more look is needed: it
        // began after all of them, and serves them all.
        assert_eq!(slow.asked.load(Ordering::Relaxed), 2, "asked once for the first, once for the rest");
        assert_eq!(polls.load(Ordering::Relaxed), 1, "the moved version is polled once");
        assert!(probe.current(), "caught up");
    }

    #[test]
    fn a_probe_is_asked_after_a_quiet_spell_and_a_moved_version_means_catching_up() {
        let fake = std::sync::Arc::new(FakeProbe::default());
        let probe = Probe::new(fake.clone(), std::time::Duration::from_millis(20));
        assert!(!probe.current(), "never caught up: not current");
        let polls = AtomicU64::new(0);
        let poll = || -> Result<(), ()> {
            polls.fetch_add(1, Ordering::Relaxed);
            Ok(())
        };
        probe.catch_up(poll).unwrap();
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        let asked = fake.asked.load(Ordering::Relaxed);
        assert!(probe.current(), "just looked");
        assert_eq!(fake.asked.load(Ordering::Relaxed), asked, "within `every`: not asked again");
        fake.version.store(7, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(25));
        assert!(!probe.current(), "after a quiet spell the probe is asked and the version moved");
        probe.catch_up(poll).unwrap();
        assert_eq!(polls.load(Ordering::Relaxed), 2, "a moved version polls");
        probe.catch_up(poll).unwrap();
        assert_eq!(polls.load(Ordering::Relaxed), 2, "an unchanged one does not");
        std::thread::sleep(std::time::Duration::from_millis(25));
        assert!(probe.current(), "unchanged after a quiet spell: current");
    }

    #[test]
    fn names_are_the_database_s() {
        assert_eq!(Scope::Key("key_1").name(), "key:key_1");
        assert_eq!(Scope::Workspace("ws_1").name(), "ws:ws_1");
        for shard in [0, 7, 10, 63, 255] {
            assert_eq!(Scope::KeysCreated(shard).name(), format!("created:{shard}"));
        }
        assert_eq!(Scope::RootKey("rk_1").name(), "rk:rk_1");
        assert_eq!(Scope::RootKeysCreated.name(), "rk-created");
        let mut out = "x".to_string();
        Scope::Workspace("w").write_name(&mut out);
        assert_eq!(out, "xws:w");
    }

    #[test]
    fn a_bump_changes_the_tag_of_its_scope_and_names_map_to_the_same_slot() {
        let c = LocalCounters::default();
        let scopes = [Scope::Key("key_1"), Scope::Workspace("ws_1")];
        let before = c.read(&scopes);
        c.bump_names(["key:key_1"]);
        let after = c.read(&scopes);
        assert_ne!(before, after);
        assert_eq!(before.values[1], after.values[1]);
        for s in [
            Scope::Key("k"),
            Scope::Workspace("w"),
            Scope::KeysCreated(7),
            Scope::RootKey("r"),
            Scope::RootKeysCreated,
        ] {
            let before = c.read(&[s]);
            c.bump_names([s.name().as_str()]);
            assert_ne!(c.read(&[s]), before, "{s:?}");
        }
    }

    #[test]
    fn every_bump_moves_the_generation_even_of_names_it_does_not_know() {
        let c = LocalCounters::default();
        let g = c.generation();
        c.bump_names(["key:key_1"]);
        assert_eq!(c.generation(), g + 1);
        c.bump_names(["key:key_1", "ws:ws_1"]);
        assert_eq!(c.generation(), g + 2, "one per bump, however many names");
        c.bump_names(["nonsense"]);
        assert_eq!(c.generation(), g + 3, "a reader cannot tell what a bump names: it retries");
        c.read(&[Scope::Key("key_1")]);
        assert_eq!(c.generation(), g + 3, "reads move nothing");
    }
}
