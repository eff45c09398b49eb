//! The change counters' upkeep ([`crate::counters`]): each write bumps the counters it
//! touched in its own transaction and publishes them after its commit; verifications read
//! them from the configured source; the writes of other processes are noticed by a poll
//! (local counters) or a reconciliation (shared counters).

use crate::cache::RootKeyEntries;
use crate::counters::{CounterSource, SOURCE_STORE, Tag};
use crate::store::CounterTx;
use crate::{Principal, RbacError, RbacService, RbacStore, RbacTx, Scope, StorageError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// How far before the last successful reconciliation the next one reaches back: covers
/// clock differences between instances and transactions that committed late.
pub const RECONCILE_MARGIN_MS: i64 = 10_000;

/// Where this instance stands with the counters of other processes.
#[derive(Debug)]
pub(super) struct CounterState {
    /// Local counters: the last database sequence number applied (-1: not read yet).
    polled_seq: AtomicI64,
    /// Shared counters: whether the shared store holds every change the database does, as
    /// far as this instance knows. False from start until a reconciliation succeeds, and
    /// again after any call to the shared store failed; meanwhile the database's counters
    /// are read.
    pub(super) shared_current: AtomicBool,
    /// Store and shared counters: the root keys' counters as the last poll found them
    /// (`None`: not polled yet).
    root_keys_seen: parking_lot::Mutex<Option<HashMap<String, u64>>>,
    /// Shared counters: the time (ms) the last successful reconciliation started; the next
    /// one publishes what changed since then (less [`RECONCILE_MARGIN_MS`]).
    reconciled_at: AtomicI64,
}

impl Default for CounterState {
    fn default() -> Self {
        Self {
            polled_seq: AtomicI64::new(-1),
            shared_current: AtomicBool::new(false),
            root_keys_seen: parking_lot::Mutex::new(None),
            reconciled_at: AtomicI64::new(-1),
        }
    }
}

/// The counters one write bumps: collected while it runs, bumped in its transaction as its
/// last step, published after its commit (`RbacService::write`, [`RbacService::write_through`]).
#[derive(Debug, Default)]
pub struct Changes {
    names: Vec<String>,
    values: Vec<u64>,
}

impl Changes {
    /// The write changes what verifications under `scope`'s counter answer.
    pub fn touch(&mut self, scope: Scope<'_>) {
        let name = scope.name();
        if !self.names.contains(&name) {
            self.names.push(name);
        }
    }

    /// The last step of a write's transaction: bumps the counters it touched, in it.
    pub fn bump(&mut self, tx: &mut dyn CounterTx, now: i64) -> Result<(), RbacError> {
        if !self.names.is_empty() {
            self.values = tx.bump_counters(&self.names, now)?;
        }
        Ok(())
    }
}

impl<S: RbacStore> RbacService<S> {
    /// Runs a write transaction; the counters it touched are bumped inside it and published
    /// after its commit, before the caller answers.
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&mut dyn RbacTx, &mut Changes) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        self.write_through(|changes| {
            self.store.transaction(|tx| {
                let out = f(tx, changes)?;
                changes.bump(tx, self.now())?;
                Ok(out)
            })
        })
    }

    /// A write through a transaction of another capability's kind (one that extends
    /// [`RbacTx`], such as `keygate_usage::UsageTx`): `transaction` runs it, touching the
    /// counters its work changes and calling [`Changes::bump`] as its last step, as
    /// `Self::write` does; they are published after its commit.
    pub fn write_through<T>(
        &self,
        transaction: impl FnOnce(&mut Changes) -> Result<T, RbacError>,
    ) -> Result<T, RbacError> {
        let mut changes = Changes::default();
        let out = transaction(&mut changes)?;
        if changes.values.len() != changes.names.len() {
            // A bug of the caller: the cached verifications it changed stay stale until
            // their entries expire. Loud, so that a test catches it.
            log::error!("a write touched change counters it did not bump: {:?}", changes.names);
            return Err(StorageError::Internal("a write did not bump its change counters".into()).into());
        }
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
                    self.counter_state.shared_current.store(false, Ordering::Release);
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
            CounterSource::Shared(_) if !self.counter_state.shared_current.load(Ordering::Acquire) => {
                self.store_counters(scopes)
            }
            CounterSource::Shared(shared) => {
                let names: Vec<String> = scopes.iter().map(Scope::name).collect();
                match shared.read(&names) {
                    Ok((epoch, values)) => Ok(Tag { source: epoch, values: first_two(&values) }),
                    Err(e) => {
                        self.counter_state.shared_current.store(false, Ordering::Release);
                        log::warn!(
                            "change counters: the shared store did not answer, reading the database's: {e}"
                        );
                        self.store_counters(scopes)
                    }
                }
            }
        }
    }

    /// [`Self::read_counters`] of `scopes` (at most two) and, in the same read, the root
    /// key `p`'s counter, which is checked against the one `p` was loaded under as
    /// [`Self::ensure_root_key_current`] does (a revoked root key is an error): one round
    /// trip where a verification would otherwise make two.
    pub(super) fn read_counters_and_root_key(
        &self,
        scopes: &[Scope<'_>],
        p: &Principal,
    ) -> Result<Tag, RbacError> {
        let (source, values) = match &self.counters {
            CounterSource::Local(_) => return self.read_counters(scopes),
            CounterSource::Shared(shared) if self.counter_state.shared_current.load(Ordering::Acquire) => {
                let names = counter_names(scopes, p);
                match shared.read(&names) {
                    Ok(read) => read,
                    Err(e) => {
                        self.counter_state.shared_current.store(false, Ordering::Release);
                        log::warn!(
                            "change counters: the shared store did not answer, reading the database's: {e}"
                        );
                        self.store_counter_values(&names)?
                    }
                }
            }
            CounterSource::Store | CounterSource::Shared(_) => {
                self.store_counter_values(&counter_names(scopes, p))?
            }
        };
        let root = Tag { source, values: [values.get(scopes.len()).copied().unwrap_or(0), 0] };
        if Some(root) != p.tag() {
            self.root_key_changed(p)?;
        }
        Ok(Tag { source, values: first_two(&values[..scopes.len().min(values.len())]) })
    }

    fn store_counter_values(&self, names: &[String]) -> Result<(u64, Vec<u64>), RbacError> {
        Ok((SOURCE_STORE, self.store.read(|tx| Ok(tx.counters(names)?))?))
    }

    fn store_counters(&self, scopes: &[Scope<'_>]) -> Result<Tag, RbacError> {
        let names: Vec<String> = scopes.iter().map(Scope::name).collect();
        let values = self.store.read(|tx| Ok(tx.counters(&names)?))?;
        Ok(Tag { source: SOURCE_STORE, values: first_two(&values) })
    }

    /// Notices the writes of other processes: with local counters, every counter bumped
    /// since the last call (the admin CLI writing the same SQLite file); with any source, the
    /// root keys revoked (or created) elsewhere, whose cached authentications it drops. The
    /// server calls it once before it serves (which only notes where the database stands)
    /// and then every 50 ms. Returns how many counters changed.
    pub fn poll_changes(&self) -> Result<usize, RbacError> {
        let state = &self.counter_state;
        let changed = match &self.counters {
            CounterSource::Local(local) => {
                let since = state.polled_seq.load(Ordering::Acquire);
                if since < 0 {
                    let seq = self.store.read(|tx| Ok(tx.counters_seq()?))?;
                    state.polled_seq.store(seq, Ordering::Release);
                    return Ok(0);
                }
                let (changed, last) = self.store.read(|tx| Ok(tx.counters_since(since)?))?;
                local.bump_names(changed.iter().map(|(name, _)| name.as_str()));
                state.polled_seq.store(last, Ordering::Release);
                changed
            }
            CounterSource::Store | CounterSource::Shared(_) => {
                let now: HashMap<String, u64> =
                    self.store.read(|tx| Ok(tx.root_key_counters()?))?.into_iter().collect();
                let mut seen = state.root_keys_seen.lock();
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
        let state = &self.counter_state;
        let started = self.now();
        let last = state.reconciled_at.load(Ordering::Acquire);
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
                state.reconciled_at.store(started, Ordering::Release);
                state.shared_current.store(true, Ordering::Release);
                Ok(n)
            }
            Err(e) => {
                state.shared_current.store(false, Ordering::Release);
                Err(e)
            }
        }
    }
}

/// The counters' names of `scopes`, then the root key `p`'s.
fn counter_names(scopes: &[Scope<'_>], p: &Principal) -> Vec<String> {
    scopes.iter().map(Scope::name).chain([p.counter_name().to_string()]).collect()
}

pub(super) fn first_two(values: &[u64]) -> [u64; 2] {
    [values.first().copied().unwrap_or(0), values.get(1).copied().unwrap_or(0)]
}
