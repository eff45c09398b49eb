//! `keys.verifyKey`'s check, answered from a cache of key snapshots, each used only while
//! the change counters it was loaded under are current ([`crate::counters`], kept by
//! [`super::changes`]): the key found by its secret's hash, within the caller's scope,
//! enabled, not expired, holding what the permission query asks. What a valid key then
//! spends (rate limits, credits) is `keygate-usage`'s, which keeps what it works out per
//! key in the entry's attachment ([`Checked::attached`]).

use super::changes::first_two;
use crate::counters::{Confirm, Confirming, CounterSource, SOURCE_STORE, Scope, Tag, creation_shard};
use crate::{
    KeySummary, PermissionQuery, Principal, RbacError, RbacService, RbacStore, RbacTx, Verification,
    VerifyCode, VerifyScope, key_summary,
};
use keygate_cache::CachedKey;
use keygate_cache::verify::{VerifyEntry, entry_scopes};
use keygate_domain::checksum::{self, Checksum};
use keygate_domain::{digest_hex, secret_digest};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A verification's check, before anything is spent: the answer so far (every code but
/// the spending ones) and, for a key found in scope, its cached snapshot, which the
/// spending capability reads.
#[derive(Debug)]
pub struct Checked {
    /// The answer so far: `Valid` means the key may pass, before it spends anything.
    pub verification: Verification,
    /// The key found (none when not found or out of scope).
    pub snapshot: Option<Snapshot>,
}

/// A key's cached snapshot, as a check found it. Two are equal when their keys are.
#[derive(Debug, Clone)]
pub struct Snapshot(Arc<VerifyEntry>);

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.key() == other.key()
    }
}

impl Eq for Snapshot {}

impl Snapshot {
    /// What a verification needs of the key: its effective permissions and roles, its
    /// identity and the rate limits of both.
    pub fn key(&self) -> &CachedKey {
        self.0.snapshot.as_ref().expect("a Snapshot is made of a found key's entry")
    }

    /// The change counters the snapshot was loaded under: something kept of the key
    /// elsewhere is current while it was read under the same tag.
    pub fn tag(&self) -> Tag {
        self.0.tag
    }

    /// What the spending capability keeps of this snapshot, worked out by `init` on first
    /// use (or shared by many: `init` may answer a copy it holds) and kept with the cache
    /// entry (dropped with it when the key changes). One type per entry: `None` when
    /// another type was attached first.
    pub fn attached<T: Any + Send + Sync>(&self, init: impl FnOnce(&CachedKey) -> Arc<T>) -> Option<Arc<T>> {
        self.0.attached.get_or_init(|| init(self.key())).clone().downcast().ok()
    }

    /// The cache entry (its address tells entries apart).
    pub fn entry(&self) -> &Arc<VerifyEntry> {
        &self.0
    }

    /// What analytics count beside this snapshot's cache entry: `None` at the entry's
    /// first use, which makes it for the next (a key verified once per entry, as under a
    /// cache too small for the keys in use, is counted as if there were no tally).
    pub fn tally(&self) -> Option<&keygate_cache::verify::Tally> {
        let tally = self.0.tally.get();
        if tally.is_none() {
            drop(self.0.tally.set(Box::default()));
        }
        tally
    }
}

/// What an answer of [`RbacService::check_assuming`] assumes: the shared store's epoch and
/// the named change counters at these values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assumed {
    pub epoch: u64,
    pub counters: Vec<(String, u64)>,
}

/// A cached answer waiting for its change counters' confirmation
/// ([`RbacService::check_unconfirmed`]), with the cache's span (the confirmation's wait
/// under it).
#[derive(Debug)]
pub struct Unconfirmed {
    entry: Arc<VerifyEntry>,
    span: tracing::Span,
}

impl Unconfirmed {
    /// The confirmation did not hold (or did not come): the answer is not used, and the
    /// check that follows loads the key again.
    pub fn stale(self) {
        self.span.record("keygate.cache.hit", false);
    }
}

/// The counters a cached answer holds under: the entry's, then the root key's.
struct Confirmation {
    entry: Arc<VerifyEntry>,
    /// The secret's creation shard (the counter of an entry that found no key).
    shard: u8,
    /// The caller's root key and its counter's value as it was loaded under.
    root: Option<(Arc<Principal>, u64)>,
}

impl Confirm for Confirmation {
    fn epoch(&self) -> u64 {
        self.entry.tag.source
    }

    fn counters(&self) -> usize {
        let own = if self.entry.snapshot.is_some() { 2 } else { 1 };
        own + usize::from(self.root.is_some())
    }

    fn counter(&self, i: usize, out: &mut String) -> u64 {
        let scope = match (&self.entry.snapshot, i) {
            (Some(k), 0) => Scope::Key(k.id()),
            (Some(k), 1) => Scope::Workspace(k.workspace_id()),
            (None, 0) => Scope::KeysCreated(self.shard),
            _ => {
                let Some((p, value)) = &self.root else { return 0 };
                out.push_str(p.counter_name());
                return *value;
            }
        };
        scope.write_name(out);
        self.entry.tag.values[i]
    }
}

impl<S: RbacStore> RbacService<S> {
    /// [`Self::check`] answered from the cache alone, when that needs no I/O (local
    /// counters and a current entry), then `then` (what the verification spends), which
    /// also answers `None` when it would need I/O. `None`: ask again where the caller may
    /// block. A hit is counted only when `then` answers.
    pub fn check_cached<R>(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        then: impl FnOnce(Checked) -> Option<R>,
    ) -> Option<R> {
        let CounterSource::Local(local) = &self.counters else { return None };
        if no_key(secret) {
            // Known without a lookup: answered inline, as a cached answer is.
            return then(Checked { verification: not_found(), snapshot: None });
        }
        if !self.verify_cache.enabled {
            return None;
        }
        if self.probe.as_ref().is_some_and(|p| !p.current()) {
            return None;
        }
        let span = cache_span();
        let _entered = span.enter();
        let out = (|| {
            let digest = secret_digest(secret);
            let entry = self.verify_cache.get(&digest)?;
            let (scopes, n) = entry.scopes(&digest);
            if local.read(&scopes[..n]) != entry.tag {
                return None;
            }
            let out = then(self.answer(entry, scope, query))?;
            self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
            Some(out)
        })();
        span.record("keygate.cache.hit", out.is_some());
        out
    }

    /// [`Self::check`]'s answer alone: a verification that spends nothing.
    pub fn check_key(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Result<Verification, RbacError> {
        Ok(self.check(secret, scope, query)?.verification)
    }

    /// `keys.verifyKey`'s check: whether `secret` is a key that is enabled, not expired
    /// and, when `query` is given, holds the permissions it asks for (directly or through
    /// its roles). Needs no root key: the secret is the credential. A cached answer is used
    /// only while the change counters it was loaded under are current, so a change
    /// (setPermissions, deleteKey, ...) applies to the next verification. What a valid key
    /// then spends is the caller's to take (`keygate-usage`).
    ///
    /// `scope` narrows which keys can be found: a key outside it answers `NOT_FOUND`,
    /// exactly as a key that does not exist (a gateway of one tenant never sees another
    /// tenant's keys as valid). Its root key, when given, is checked still current first
    /// (as [`Self::ensure_root_key_current`] does; a revoked one is an error), its change
    /// counter read with the key's in one read when the key's entry is cached.
    pub fn check(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Result<Checked, RbacError> {
        // The root key, when its counter is not in memory (where the poll's evictions keep
        // the root key cache exact): its counter is read with the key's when the key's
        // entry is cached, else on its own first.
        let root_key = scope.root_key.filter(|p| p.tag().is_some() && !self.counters.is_local());
        if no_key(secret) {
            if let Some(p) = root_key {
                self.ensure_root_key_current(p)?;
            }
            return Ok(Checked { verification: not_found(), snapshot: None });
        }
        if let (Some(probe), CounterSource::Local(_)) = (&self.probe, &self.counters) {
            probe.catch_up(|| self.poll_changes().map(drop))?;
        }
        let span = cache_span();
        let _entered = span.enter();
        let digest = secret_digest(secret);
        let cached = if self.verify_cache.enabled { self.verify_cache.get(&digest) } else { None };
        if let (Some(p), None) = (root_key, &cached) {
            self.ensure_root_key_current(p)?;
        }
        let entry = if !self.verify_cache.enabled {
            span.record("keygate.cache.hit", false);
            self.verify_cache.loads.fetch_add(1, Ordering::Relaxed);
            let load = || {
                let hash = digest_hex(&digest);
                let snapshot =
                    self.verify_cache.compact(self.store.verification_read(&hash, &|_| Vec::new())?.0);
                Ok(Arc::new(VerifyEntry::new(Tag { source: SOURCE_STORE, values: [0; 2] }, snapshot)))
            };
            self.after_miss(load()?, secret, &digest, scope.migration, load)?
        } else {
            let current = match cached {
                Some(entry) => {
                    let (scopes, n) = entry.scopes(&digest);
                    let tag = match root_key {
                        None => self.read_counters(&scopes[..n])?,
                        Some(p) => self.read_counters_and_root_key(&scopes[..n], p)?,
                    };
                    (tag == entry.tag).then_some(entry)
                }
                None => None,
            };
            match current {
                Some(entry) => {
                    self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
                    span.record("keygate.cache.hit", true);
                    entry
                }
                None => {
                    span.record("keygate.cache.hit", false);
                    let entry = self.load_verify_entry(&digest)?;
                    self.after_miss(entry, secret, &digest, scope.migration, || {
                        self.load_verify_entry(&digest)
                    })?
                }
            }
        };
        Ok(self.answer(entry, scope, query))
    }

    /// [`Self::check`] of a cached answer without reading its change counters: the
    /// answer and the counter values it holds only while they are unchanged, for a caller
    /// that checks them itself in the same atomic step as what it does with the answer
    /// (the credit spend in Redis: one round trip where a read and a spend take two), and
    /// otherwise calls [`Self::check`]. `None` unless the counters are a shared store's
    /// that is trusted, and the key is cached; and when `wants` says no to the key.
    pub fn check_assuming(
        &self,
        secret: &str,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
        wants: impl FnOnce(&CachedKey) -> bool,
    ) -> Option<(Checked, Assumed)> {
        if !matches!(self.counters, CounterSource::Shared(_))
            || !self.verify_cache.enabled
            || no_key(secret)
            || !self.counter_state.shared_current.load(Ordering::Acquire)
        {
            return None;
        }
        let digest = secret_digest(secret);
        let entry = self.verify_cache.get(&digest)?;
        if !entry.snapshot.as_ref().is_some_and(wants) {
            return None;
        }
        // (A miss, or a key not wanted, shows in the span of the check that follows.)
        let span = cache_span();
        let _entered = span.enter();
        let (scopes, n) = entry.scopes(&digest);
        let mut counters: Vec<(String, u64)> =
            scopes[..n].iter().zip(entry.tag.values).map(|(s, v)| (s.name(), v)).collect();
        if let Some(p) = scope.root_key {
            match p.tag() {
                Some(t) if t.source == entry.tag.source => {
                    counters.push((p.counter_name().to_string(), t.values[0]))
                }
                Some(_) => return None,
                None => {}
            }
        }
        let assumed = Assumed { epoch: entry.tag.source, counters };
        let checked = self.answer(entry, scope, query);
        if checked.verification.code == VerifyCode::Valid {
            // (Other answers are not used: the caller checks them again.)
            self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
            span.record("keygate.cache.hit", true);
        }
        Some((checked, assumed))
    }

    /// [`Self::check`] of a cached answer on shared change counters, to be confirmed by the
    /// shared store's read of them ([`crate::SharedCounters::confirm`]: one round trip that the
    /// confirmations of concurrent verifications share): the answer to give
    /// ([`Self::confirmed`]) once the confirmation says every counter still holds, and the
    /// confirmation to await. The counters are the entry's (the key's and its workspace's,
    /// or for a secret found to be no key, its creation shard's) and the root key `root`'s.
    /// `None`: check the usual way (not cached, the shared store not trusted, the root key
    /// loaded under another epoch, the store cannot confirm, or `wants` says no to the
    /// key). Freshness is [`Self::check`]'s: the counters are read after this call, so a
    /// change answered before it is seen.
    pub fn check_unconfirmed(
        &self,
        secret: &str,
        root: Option<&Arc<Principal>>,
        wants: impl FnOnce(&CachedKey) -> bool,
    ) -> Option<(Unconfirmed, Confirming)> {
        let CounterSource::Shared(shared) = &self.counters else { return None };
        if !self.verify_cache.enabled
            || no_key(secret)
            || !self.counter_state.shared_current.load(Ordering::Acquire)
        {
            return None;
        }
        let digest = secret_digest(secret);
        let entry = self.verify_cache.get(&digest)?;
        if entry.snapshot.as_ref().is_some_and(|s| !wants(s)) {
            return None;
        }
        let root = match root {
            Some(p) => match p.tag() {
                Some(t) if t.source == entry.tag.source => Some((p.clone(), t.values[0])),
                Some(_) => return None,
                None => None,
            },
            None => None,
        };
        let shard = creation_shard(&digest);
        let check = Confirmation { entry: entry.clone(), shard, root };
        let span = cache_span();
        let confirming = span.in_scope(|| shared.confirm(Box::new(check)))?;
        Some((Unconfirmed { entry, span }, confirming))
    }

    /// The answer of a check whose counters a confirmation found unchanged
    /// ([`Self::check_unconfirmed`]), within `scope` (the one the root key given there
    /// belongs to), against `query`.
    pub fn confirmed(
        &self,
        unconfirmed: Unconfirmed,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Checked {
        self.verify_cache.hits.fetch_add(1, Ordering::Relaxed);
        let Unconfirmed { entry, span } = unconfirmed;
        span.record("keygate.cache.hit", true);
        span.in_scope(|| self.answer(entry, scope, query))
    }

    /// The check of a snapshot at `now`, within `scope`, against `query`.
    fn answer(
        &self,
        entry: Arc<VerifyEntry>,
        scope: &VerifyScope<'_>,
        query: Option<&PermissionQuery>,
    ) -> Checked {
        let Some(k) = entry.snapshot.as_ref().filter(|k| scope.admits(k.workspace_id(), k.api_id())) else {
            return Checked { verification: not_found(), snapshot: None };
        };
        let code = if !k.admits_ip(scope.ip) {
            VerifyCode::Forbidden
        } else if !k.enabled() {
            VerifyCode::Disabled
        } else if k.expires().is_some_and(|e| e <= self.now()) {
            VerifyCode::Expired
        } else if query.is_some_and(|q| !q.satisfied_by(&|p| k.holds(p))) {
            VerifyCode::InsufficientPermissions
        } else {
            VerifyCode::Valid
        };
        let snapshot = Snapshot(entry);
        let v = Verification { code, found: Some(snapshot.clone()), credits: None, ratelimits: Vec::new() };
        Checked { verification: v, snapshot: Some(snapshot) }
    }

    /// Loads a key's snapshot into the cache, tagged with counters that are as they were
    /// before the snapshot was read. Usually one database transaction: the snapshot and,
    /// where the counters are the database's or a copy of them (PostgreSQL alone, Redis),
    /// the counters' values in it; the tag is then the values in memory when no bump began
    /// since before the snapshot (local counters), the values in the snapshot (the
    /// database's), or the shared store's read after it when they equal the snapshot's (a
    /// write committed after the snapshot moves the shared copy only up, past them). When
    /// that does not hold (a write raced the load, or the shared copy lags), the counters
    /// read after the first snapshot tag a second one of the same scopes
    /// ([`Self::load_verify_entry_in_two`] when even the scopes changed).
    fn load_verify_entry(&self, digest: &keygate_cache::Digest) -> Result<Arc<VerifyEntry>, RbacError> {
        self.verify_cache.loads.fetch_add(1, Ordering::Relaxed);
        let hash = digest_hex(digest);
        let local = match &self.counters {
            CounterSource::Local(local) => Some((local, local.generation())),
            _ => None,
        };
        let (snapshot, in_snapshot) = self.store.verification_read(&hash, &|key| match local {
            Some(_) => Vec::new(),
            None => {
                let (scopes, n) = entry_scopes(key, digest);
                scopes[..n].iter().map(Scope::name).collect()
            }
        })?;
        let snapshot = self.verify_cache.compact(snapshot);
        let (scopes, n) = entry_scopes(snapshot.as_ref().map(|k| (k.id(), k.workspace_id())), digest);
        let scopes = &scopes[..n];
        let (tag, current) = match (&self.counters, local) {
            (CounterSource::Local(counters), Some((_, before))) => {
                let tag = counters.read(scopes);
                (tag, counters.generation() == before)
            }
            (CounterSource::Store, _) => {
                (Tag { source: SOURCE_STORE, values: first_two(&in_snapshot) }, true)
            }
            _ => {
                let tag = self.read_counters(scopes)?;
                let current = tag.values[..n] == in_snapshot[..];
                (tag, current)
            }
        };
        let entry = if current {
            VerifyEntry::new(tag, snapshot)
        } else {
            let again = self.verify_cache.compact(self.store.verification_read(&hash, &|_| Vec::new())?.0);
            let (again_scopes, m) = entry_scopes(again.as_ref().map(|k| (k.id(), k.workspace_id())), digest);
            if again_scopes[..m] != *scopes {
                return self.load_verify_entry_in_two(digest, &hash);
            }
            VerifyEntry::new(tag, again)
        };
        let entry = Arc::new(entry);
        self.verify_cache.put(*digest, entry.clone());
        Ok(entry)
    }

    /// [`Self::load_verify_entry`] in the order that needs no proof: the creation
    /// counter, the key, its counters, then its snapshot (a key's id and workspace never
    /// change, so the first read finds which counters apply).
    fn load_verify_entry_in_two(
        &self,
        digest: &keygate_cache::Digest,
        hash: &str,
    ) -> Result<Arc<VerifyEntry>, RbacError> {
        let created = self.read_counters(&[Scope::KeysCreated(creation_shard(digest))])?;
        let found = self.store.read(|tx| Ok(tx.key_by_hash(hash)?))?;
        let entry = match found {
            None => VerifyEntry::new(created, None),
            Some(key) => {
                let tag = self.read_counters(&[Scope::Key(&key.id), Scope::Workspace(&key.workspace_id)])?;
                match self.verify_cache.compact(self.store.verification_read(hash, &|_| Vec::new())?.0) {
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

    /// The keys in the verification cache, each with its secret's digest (a snapshot of
    /// the cache to write: `keygate_runtime`'s warm start).
    pub fn cached_keys(&self) -> Vec<(keygate_cache::Digest, Snapshot)> {
        let mut out = Vec::new();
        self.verify_cache
            .found
            .for_each(|d, e| out.extend(e.snapshot.as_ref().map(|_| (*d, Snapshot(e.clone())))));
        out
    }

    /// Caches `key` under `digest`, current while its counters hold `tag`: the caller
    /// answers for `tag` having been read before `key` was known current (the warm start).
    pub fn cache_key(&self, digest: keygate_cache::Digest, tag: Tag, key: CachedKey) {
        self.verify_cache.put(digest, Arc::new(VerifyEntry::new(tag, Some(key))));
    }

    /// Whether `secret`'s key (or its absence) is in the verification cache, current or not.
    pub fn is_cached(&self, secret: &str) -> bool {
        self.verify_cache.get(&secret_digest(secret)).is_some()
    }

    /// What the cached keys share (their names, grants, scopes and identities).
    pub fn cache_interner(&self) -> &keygate_cache::Interner {
        &self.verify_cache.interner
    }

    /// Keys held in the verification cache now (found keys; unknown secrets apart), and
    /// what they weigh by the cache's account (bounded by its size).
    pub fn verify_cache_keys(&self) -> (usize, u64) {
        (self.verify_cache.found.len(), self.verify_cache.found.weight())
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
}

/// Whether `secret` is no key, known without a lookup: empty, or of the checksummed keys'
/// shape with a checksum that does not match (API-v2.md §24), so a flood of made-up
/// strings costs neither a store read nor a place in the cache.
fn no_key(secret: &str) -> bool {
    secret.is_empty() || checksum::check(secret) == Checksum::Invalid
}

fn not_found() -> Verification {
    Verification { code: VerifyCode::NotFound, found: None, credits: None, ratelimits: Vec::new() }
}

/// What a verification reads of the key whose secret hashes to `hash`, and the values
/// of the change counters `counters` names for it, in `tx` (the default
/// [`RbacStore::verification_read`]).
pub fn verification_read(
    tx: &mut dyn RbacTx,
    hash: &str,
    counters: &crate::store::CounterNames<'_>,
) -> Result<(Option<KeySummary>, Vec<u64>), RbacError> {
    let summary = match tx.key_by_hash(hash)? {
        Some(key) => {
            let api = match &key.api_id {
                Some(id) => tx.get_api(&key.workspace_id, id)?.and_then(|a| a.allowed_ips),
                None => None,
            };
            Some(KeySummary { api_allowed_ips: api, ..key_summary(tx, key)? })
        }
        None => None,
    };
    let names = counters(summary.as_ref().map(|s| (s.key.id.as_str(), s.key.workspace_id.as_str())));
    let values = if names.is_empty() { Vec::new() } else { tx.counters(&names)? };
    Ok((summary, values))
}

/// The trace span of a look into the verification cache: `keygate.cache.hit` true when the
/// answer came from it, false when it did not (where the key was loaded, its database read
/// is a child). Disabled, and free, unless the program traces (docs/operations.md,
/// "Observability").
fn cache_span() -> tracing::Span {
    keygate_domain::trace::child_span(|| {
        tracing::info_span!("verification cache", keygate.cache.hit = tracing::field::Empty)
    })
}
