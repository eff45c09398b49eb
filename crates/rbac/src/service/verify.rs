//! `keys.verifyKey`, answered from a cache of key snapshots, each used only while the
//! change counters it was loaded under are current ([`crate::counters`]); and the counters'
//! upkeep: bumping them with each write, publishing them after its commit, noticing the
//! writes of other processes.

use super::usage::{KeyLimits, validate_usage};
use super::*;
use crate::Usage;
use crate::counters::{CounterSource, SOURCE_STORE, Scope, Tag, creation_shard};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Bound on the cached keys' snapshots, in bytes (approximate: strings and their headers):
/// about a million keys of a few permissions each. Keys that exist only: their number is
/// the store's, not the caller's.
pub const MAX_CACHED_KEY_BYTES: u64 = 256 << 20;
/// Bound on cached "no such key" answers, apart from the keys: random secrets fill only
/// this cache, so they never evict a real key's entry, and each costs at most one store
/// read until key creation in its shard ends it.
pub const MAX_CACHED_UNKNOWN_KEYS: u64 = 100_000;

/// A cached answer: the key (or none) and the counters it was loaded under.
#[derive(Debug)]
pub(crate) struct VerifyEntry {
    tag: Tag,
    /// What a verification needs of a key: its effective permissions and roles, its
    /// identity and the rate limits of both.
    snapshot: Option<KeySummary>,
    /// The snapshot's limits, worked out once.
    limits: Option<KeyLimits>,
}

impl VerifyEntry {
    fn new(tag: Tag, snapshot: Option<KeySummary>) -> Self {
        let limits = snapshot.as_ref().map(KeyLimits::of);
        Self { tag, snapshot, limits }
    }
}

impl VerifyEntry {
    /// Roughly the bytes it holds, for the cache's bound.
    fn weight(&self) -> u32 {
        let strings = |v: &[String]| v.iter().map(|s| s.len() + 24).sum::<usize>();
        let size = 128
            + self.snapshot.as_ref().map_or(0, |s| {
                let k = &s.key;
                k.id.len()
                    + k.workspace_id.len()
                    + k.start.len()
                    + k.api_id.as_ref().map_or(0, String::len)
                    + k.name.as_ref().map_or(0, String::len)
                    + k.meta.as_ref().map_or(0, String::len)
                    + strings(&s.permissions)
                    + strings(&s.roles)
                    + s.ratelimits
                        .iter()
                        .chain(s.identity.iter().flat_map(|i| &i.ratelimits))
                        .map(|l| 64 + l.id.len() + l.name.len())
                        .sum::<usize>()
                    + self.limits.as_ref().map_or(0, KeyLimits::bytes)
                    + s.identity.as_ref().map_or(0, |i| {
                        64 + i.identity.external_id.len() + i.identity.meta.as_ref().map_or(0, String::len)
                    })
            });
        u32::try_from(size).unwrap_or(u32::MAX)
    }

    /// The scopes whose counters decide whether this entry is current.
    fn scopes<'a>(&'a self, digest: &cache::Digest) -> ([Scope<'a>; 2], usize) {
        match &self.snapshot {
            Some(s) => ([Scope::Key(&s.key.id), Scope::Workspace(&s.key.workspace_id)], 2),
            None => {
                let shard = Scope::KeysCreated(creation_shard(digest));
                ([shard, shard], 1)
            }
        }
    }
}

/// The verification cache: keys and unknown secrets bounded apart (moka: TinyLFU
/// admission, so a burst of one-off secrets does not push out what is used often either).
pub(crate) struct VerifyCache {
    enabled: bool,
    found: moka::sync::Cache<cache::Digest, Arc<VerifyEntry>>,
    unknown: moka::sync::Cache<cache::Digest, Arc<VerifyEntry>>,
    /// Local counters: the last database sequence number applied (-1: not read yet).
    polled_seq: AtomicI64,
    /// Shared counters: whether the shared store holds every change the database does, as
    /// far as this instance knows. False from start until a reconciliation succeeds, and
    /// again after any call to the shared store failed; meanwhile the database's counters
    /// are read.
    shared_current: AtomicBool,
    /// Store and shared counters: the root keys' counters as the last poll found them
    /// (`None`: not polled yet).
    root_keys_seen: parking_lot::Mutex<Option<HashMap<String, u64>>>,
    /// Verifications that read the store (a miss, a stale entry, or the cache off).
    loads: std::sync::atomic::AtomicU64,
    /// Verifications answered from the cache.
    hits: std::sync::atomic::AtomicU64,
    /// Shared counters: the time (ms) the last successful reconciliation started; the next
    /// one publishes what changed since then (less [`RECONCILE_MARGIN_MS`]).
    reconciled_at: AtomicI64,
}

/// How far before the last successful reconciliation the next one reaches back: covers
/// clock differences between instances and transactions that committed late.
pub const RECONCILE_MARGIN_MS: i64 = 10_000;

impl std::fmt::Debug for VerifyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyCache(enabled: {}, keys: {})", self.enabled, self.found.entry_count())
    }
}

impl VerifyCache {
    pub(crate) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            found: moka::sync::Cache::builder()
                .max_capacity(MAX_CACHED_KEY_BYTES)
                .weigher(|_, entry: &Arc<VerifyEntry>| entry.weight())
                .build(),
            unknown: moka::sync::Cache::new(MAX_CACHED_UNKNOWN_KEYS),
            polled_seq: AtomicI64::new(-1),
            shared_current: AtomicBool::new(false),
            loads: Default::default(),
            hits: Default::default(),
            root_keys_seen: parking_lot::Mutex::new(None),
            reconciled_at: AtomicI64::new(-1),
        }
    }

    fn get(&self, digest: &cache::Digest) -> Option<Arc<VerifyEntry>> {
        self.found.get(digest).or_else(|| self.unknown.get(digest))
    }

    fn put(&self, digest: cache::Digest, entry: Arc<VerifyEntry>) {
        match entry.snapshot {
            Some(_) => {
                self.unknown.invalidate(&digest);
                self.found.insert(digest, entry);
            }
            None => {
                self.found.invalidate(&digest);
                self.unknown.insert(digest, entry);
            }
        }
    }
}

/// The counters one write bumps: collected while it runs, bumped in its transaction as its
/// last step, published after its commit ([`RbacService::write`]).
#[derive(Debug, Default)]
pub(super) struct Changes {
    names: Vec<String>,
    values: Vec<u64>,
}

impl Changes {
    pub(super) fn touch(&mut self, scope: Scope<'_>) {
        let name = scope.name();
        if !self.names.contains(&name) {
            self.names.push(name);
        }
    }
}

impl<S: RbacStore> RbacService<S> {
    /// Runs a write transaction; the counters it touched are bumped inside it and published
    /// after its commit, before the caller answers.
    pub(super) fn write<T>(
        &self,
        f: impl FnOnce(&mut dyn RbacTx, &mut Changes) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let mut changes = Changes::default();
        let out = self.store.transaction(|tx| {
            let out = f(tx, &mut changes)?;
            if !changes.names.is_empty() {
                changes.values = tx.bump_counters(&changes.names, self.now())?;
            }
            Ok(out)
        })?;
        self.publish(&changes);
        Ok(out)
    }

    /// After a commit: the counters' new values to where verifications read them.
    fn publish(&self, changes: &Changes) {
        if changes.names.is_empty() {
            return;
        }
        match &self.counters {
            CounterSource::Local(local) => local.bump_names(changes.names.iter().map(String::as_str)),
            CounterSource::Store => {}
            CounterSource::Shared(shared) => {
                let pairs: Vec<(String, u64)> =
                    changes.names.iter().cloned().zip(changes.values.iter().copied()).collect();
                // The database holds them; reconcile_shared_counters brings them over later,
                // and until then this instance reads the database's counters.
                if let Err(e) = shared.publish(&pairs) {
                    self.verify_cache.shared_current.store(false, Ordering::Release);
                    log::warn!("change counters not published to the shared store (reconciled later): {e}");
                }
            }
        }
    }

    /// The current values of `scopes` (at most two), from the configured source.
    pub(super) fn read_counters(&self, scopes: &[Scope<'_>]) -> Result<Tag, RbacError> {
        match &self.counters {
            CounterSource::Local(local) => Ok(local.read(scopes)),
            CounterSource::Store => self.store_counters(scopes),
            CounterSource::Shared(_) if !self.verify_cache.shared_current.load(Ordering::Acquire) => {
                self.store_counters(scopes)
            }
            CounterSource::Shared(shared) => {
                let names: Vec<String> = scopes.iter().map(Scope::name).collect();
                match shared.read(&names) {
                    Ok((epoch, values)) => Ok(Tag { source: epoch, values: first_two(&values) }),
                    Err(e) => {
                        self.verify_cache.shared_current.store(false, Ordering::Release);
                        log::warn!(
                            "change counters: the shared store did not answer, reading the database's: {e}"
                        );
                        self.store_counters(scopes)
                    }
                }
            }
        }
    }

    fn store_counters(&self, scopes: &[Scope<'_>]) -> Result<Tag, RbacError> {
        let names: Vec<String> = scopes.iter().map(Scope::name).collect();
        let values = self.store.read(|tx| Ok(tx.counters(&names)?))?;
        Ok(Tag { source: SOURCE_STORE, values: first_two(&values) })
    }

    /// [`Self::verify`] answered from the cache alone, when that needs no I/O (local
    /// counters, a current entry, an in-process limiter; a credit spend is only queued):
    /// `None` means ask [`Self::verify`] off the request path.
    pub fn verify_cached(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Option<Result<Pending, RbacError>>
    where
        S: 'static,
    {
        let CounterSource::Local(local) = &self.counters else { return None };
        if !self.verify_cache.enabled || secret.is_empty() {
            return None;
        }
        if let Err(e) = validate_usage(usage) {
            return Some(Err(e.into()));
        }
        if self.probe.as_ref().is_some_and(|p| !p.current()) {
            return None;
        }
        let digest = secret_digest(secret);
        let entry = self.verify_cache.get(&digest)?;
        let (scopes, n) = entry.scopes(&digest);
        if local.read(&scopes[..n]) != entry.tag {
            return None;
        }
        let out = self.answer(&entry, scope, query, usage, false)?;
        self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// `keys.verifyKey` with the default usage (cost 1, the auto-applied limits), waiting
    /// for its spend to commit: [`Self::verify`], then [`Pending::wait`].
    pub fn verify_key(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Result<Verification, RbacError>
    where
        S: 'static,
    {
        self.verify(secret, scope, query, &Usage::default())?.wait()
    }

    /// `keys.verifyKey`: whether `secret` is a key that is enabled, not expired and, when
    /// `query` is given, holds the permissions it asks for (directly or through its roles);
    /// then, for such a key, what `usage` spends: its rate limits and its credits
    /// (API-v2.md §13; RATE_LIMITED or USAGE_EXCEEDED when they do not suffice, nothing
    /// spent). Needs no root key: the secret is the credential. A cached answer is used
    /// only while the change counters it was loaded under are current, so a change
    /// (setPermissions, deleteKey, ...) applies to the next verification.
    ///
    /// `scope` narrows which keys can be found: a key outside it answers `NOT_FOUND`,
    /// exactly as a key that does not exist (a gateway of one tenant never sees another
    /// tenant's keys as valid).
    pub fn verify(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
    ) -> Result<Pending, RbacError>
    where
        S: 'static,
    {
        validate_usage(usage)?;
        if secret.is_empty() {
            return Ok(Pending::done(not_found()));
        }
        if let (Some(probe), CounterSource::Local(_)) = (&self.probe, &self.counters) {
            probe.catch_up(|| self.poll_changes().map(drop))?;
        }
        let digest = secret_digest(secret);
        let entry = if !self.verify_cache.enabled {
            self.verify_cache.loads.fetch_add(1, Ordering::Relaxed);
            let hash = digest_hex(&digest);
            let snapshot = self.store.snapshot(|tx| load_snapshot(tx, &hash))?;
            Arc::new(VerifyEntry::new(Tag { source: SOURCE_STORE, values: [0; 2] }, snapshot))
        } else {
            let cached = match self.verify_cache.get(&digest) {
                Some(entry) => {
                    let (scopes, n) = entry.scopes(&digest);
                    (self.read_counters(&scopes[..n])? == entry.tag).then_some(entry)
                }
                None => None,
            };
            match cached {
                Some(entry) => {
                    self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
                    entry
                }
                None => self.load_verify_entry(&digest)?,
            }
        };
        self.answer(&entry, scope, query, usage, true).expect("may wait: always answers")
    }

    /// The verification of a snapshot at `now`, within `scope`, against `query`, then what
    /// it spends (`may_wait`: whether that may do I/O; `None` when it would have to).
    fn answer(
        &self,
        entry: &VerifyEntry,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        usage: &Usage,
        may_wait: bool,
    ) -> Option<Result<Pending, RbacError>>
    where
        S: 'static,
    {
        let Some(s) = entry.snapshot.as_ref().filter(|s| scope.admits(&s.key)) else {
            return Some(Ok(Pending::done(not_found())));
        };
        let holds = |p: &str| s.permissions.binary_search_by(|held| held.as_str().cmp(p)).is_ok();
        let code = if !s.key.enabled {
            VerifyCode::Disabled
        } else if s.key.expires.is_some_and(|e| e <= self.now()) {
            VerifyCode::Expired
        } else if query.is_some_and(|q| !q.satisfied_by(&holds)) {
            VerifyCode::InsufficientPermissions
        } else {
            VerifyCode::Valid
        };
        let v = Verification {
            code,
            key: Some(s.key.clone()),
            permissions: s.permissions.clone(),
            roles: s.roles.clone(),
            identity: s.identity.clone(),
            credits: None,
            ratelimits: Vec::new(),
        };
        let limits = entry.limits.as_ref()?;
        self.spend(v, s, limits, entry.tag, usage, may_wait)
    }

    /// Loads a key's snapshot into the cache, tagged with counters read before the load.
    /// A key's id and workspace never change, so the first read finds which counters
    /// apply; the snapshot is read after them.
    fn load_verify_entry(&self, digest: &cache::Digest) -> Result<Arc<VerifyEntry>, RbacError> {
        self.verify_cache.loads.fetch_add(1, Ordering::Relaxed);
        let hash = digest_hex(digest);
        let created = self.read_counters(&[Scope::KeysCreated(creation_shard(digest))])?;
        let found = self.store.read(|tx| Ok(tx.key_by_hash(&hash)?))?;
        let entry = match found {
            None => VerifyEntry::new(created, None),
            Some(key) => {
                let tag = self.read_counters(&[Scope::Key(&key.id), Scope::Workspace(&key.workspace_id)])?;
                match self.store.snapshot(|tx| load_snapshot(tx, &hash))? {
                    Some(snapshot) => VerifyEntry::new(tag, Some(snapshot)),
                    // Deleted meanwhile: keys do not come back, so "not found" stays true.
                    None => VerifyEntry::new(created, None),
                }
            }
        };
        let entry = Arc::new(entry);
        self.verify_cache.put(*digest, entry.clone());
        Ok(entry)
    }

    /// How many verifications read the store so far (the others were answered from the
    /// cache).
    pub fn verify_loads(&self) -> u64 {
        self.verify_cache.loads.load(Ordering::Relaxed)
    }

    /// Hits and misses of each cache so far, by name: `root_keys`, `namespaces`,
    /// `overrides` (request-path lookups) and `verifications` (answered from the cache, or
    /// read from the store).
    pub fn cache_hit_counts(&self) -> [(&'static str, u64, u64); 4] {
        let (a, b) = self.auth.hit_counts();
        let (c, d) = self.namespaces.hit_counts();
        let (e, f) = self.overrides.hit_counts();
        let verified = self.verify_cache.hits.load(Ordering::Relaxed);
        [
            ("root_keys", a, b),
            ("namespaces", c, d),
            ("overrides", e, f),
            ("verifications", verified, self.verify_loads()),
        ]
    }

    /// Notices the writes of other processes: with local counters, every counter bumped
    /// since the last call (the admin CLI writing the same SQLite file); with any source, the
    /// root keys revoked (or created) elsewhere, whose cached authentications it drops. The
    /// server calls it once before it serves (which only notes where the database stands)
    /// and then every 50 ms. Returns how many counters changed.
    pub fn poll_changes(&self) -> Result<usize, RbacError> {
        let changed = match &self.counters {
            CounterSource::Local(local) => {
                let since = self.verify_cache.polled_seq.load(Ordering::Acquire);
                if since < 0 {
                    let seq = self.store.read(|tx| Ok(tx.counters_seq()?))?;
                    self.verify_cache.polled_seq.store(seq, Ordering::Release);
                    return Ok(0);
                }
                let (changed, last) = self.store.read(|tx| Ok(tx.counters_since(since)?))?;
                local.bump_names(changed.iter().map(|(name, _)| name.as_str()));
                self.verify_cache.polled_seq.store(last, Ordering::Release);
                changed
            }
            CounterSource::Store | CounterSource::Shared(_) => {
                let now: HashMap<String, u64> =
                    self.store.read(|tx| Ok(tx.root_key_counters()?))?.into_iter().collect();
                let mut seen = self.verify_cache.root_keys_seen.lock();
                let changed = match seen.as_ref() {
                    None => Vec::new(),
                    Some(before) => now
                        .iter()
                        .filter(|(n, v)| before.get(*n) != Some(v))
                        .map(|(n, v)| (n.clone(), *v))
                        .collect(),
                };
                *seen = Some(now);
                changed
            }
        };
        for (name, _) in &changed {
            if let Some(id) = name.strip_prefix("rk:") {
                self.auth.evict_root_key(id);
            } else if name == "rk-created" {
                self.auth.evict_where(Option::is_none);
            }
        }
        Ok(changed.len())
    }

    /// Shared counters: publishes again the counters the database changed since the last
    /// successful run (less [`RECONCILE_MARGIN_MS`]; the first run reaches back that
    /// margin), so that a writer that committed but could not publish (it died, or the
    /// shared store was unreachable) leaves other instances stale only until this runs.
    /// After it succeeds this instance trusts the shared store again; after it fails, the
    /// database's counters are read.
    pub fn reconcile_shared_counters(&self) -> Result<usize, RbacError> {
        let CounterSource::Shared(shared) = &self.counters else { return Ok(0) };
        let started = self.now();
        let last = self.verify_cache.reconciled_at.load(Ordering::Acquire);
        let since = if last < 0 { started } else { last }.saturating_sub(RECONCILE_MARGIN_MS);
        let published = self
            .store
            .read(|tx| Ok(tx.counters_changed_since(since)?))
            .and_then(|changed| match changed.is_empty() {
                true => Ok(0),
                false => shared.publish(&changed).map(|()| changed.len()).map_err(RbacError::Storage),
            })
            // Reachable at all (the epoch is read, and set when Redis lost its data)?
            .and_then(|n| shared.read(&[]).map(|_| n).map_err(RbacError::Storage));
        match published {
            Ok(n) => {
                self.verify_cache.reconciled_at.store(started, Ordering::Release);
                self.verify_cache.shared_current.store(true, Ordering::Release);
                Ok(n)
            }
            Err(e) => {
                self.verify_cache.shared_current.store(false, Ordering::Release);
                Err(e)
            }
        }
    }
}

fn first_two(values: &[u64]) -> [u64; 2] {
    [values.first().copied().unwrap_or(0), values.get(1).copied().unwrap_or(0)]
}

fn not_found() -> Verification {
    Verification {
        code: VerifyCode::NotFound,
        key: None,
        permissions: Vec::new(),
        roles: Vec::new(),
        identity: None,
        credits: None,
        ratelimits: Vec::new(),
    }
}

/// The key whose secret hashes to `hash`, with what a verification needs of it, in one
/// snapshot.
fn load_snapshot(tx: &mut dyn RbacTx, hash: &str) -> Result<Option<KeySummary>, RbacError> {
    match tx.key_by_hash(hash)? {
        Some(key) => Ok(Some(key_summary(tx, key)?)),
        None => Ok(None),
    }
}
