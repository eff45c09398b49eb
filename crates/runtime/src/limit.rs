//! The rate-limit decision's sequence, written once: v1's `ratelimits.limit`, v2's
//! `ratelimit.limit` and `multiLimit`, forward auth and the embedded client decide through
//! [`Runtime::limit`] and [`Runtime::limit_all`]. With warm caches a decision runs inline:
//! the namespace and the overrides from rbac's caches, the decision in the in-process store
//! or in Redis's batch. Only a namespace or overrides not seen before are read from the
//! store, once per key at a time ([`LoadGates`]), on the caller's blocking pool
//! ([`Offload`]); the decision is counted in analytics.

use crate::Runtime;
use crate::offload::{CallError, Offload, background, blocking};
use keygate_ratelimit::{
    Algorithm, AllOrNothing, BudgetKey, Checked, Decision, LimitRequest, RateLimitStore, pass_failing_open,
};
use keygate_rbac::counters::SOURCE_STORE;
use keygate_rbac::{Effective, Principal, RbacService};
use keygate_store::{CounterGuard, RedisStore, SqlStore};
use std::sync::Arc;

/// The override that applies to an identifier (if any), the overrides epoch it was read
/// under and the namespace's algorithm (read with its overrides).
type Applied = (Option<Effective>, u64, Algorithm);

/// How often a decision is retried when the namespace's overrides keep changing under it.
pub const STALE_OVERRIDES_RETRIES: usize = 3;

/// One limit a caller asks for, validated (the bounds are the API's: docs/api.md).
#[derive(Debug, Clone, Copy)]
pub struct LimitAsk<'a> {
    /// A namespace's name, or the id of an existing one; created on first use when the
    /// caller may (`ratelimit.*.create_namespace`).
    pub namespace: &'a str,
    pub identifier: &'a str,
    pub request: LimitRequest,
    /// `async: true` (contract §5.8): from this instance's state when it knows the window.
    pub is_async: bool,
}

impl<'a> LimitAsk<'a> {
    /// The ask, checked as the server checks a `ratelimits.limit` body: the identifier's
    /// length, the namespace's name, the numbers' bounds ([`LimitRequest::checked`]). For
    /// callers that are not the HTTP layer (which reads the same bounds from the JSON).
    pub fn checked(
        namespace: &'a str,
        identifier: &'a str,
        (limit, duration, cost): (u64, u64, u64),
        is_async: bool,
    ) -> Result<Self, keygate_domain::ValidationError> {
        use keygate_domain::{MAX_IDENTIFIER_CHARS, check_len, validate_namespace_name};
        check_len("identifier", identifier, MAX_IDENTIFIER_CHARS)?;
        validate_namespace_name("namespace", namespace)?;
        let request = LimitRequest::checked(limit, duration, cost)?;
        Ok(Self { namespace, identifier, request, is_async })
    }
}

/// A decision and what it was made under.
#[derive(Debug, Clone)]
pub struct Limited {
    pub decision: Decision,
    /// The override that applied (its limit and duration replaced the asked ones).
    pub applied: Option<Effective>,
    /// The namespace's id.
    pub namespace_id: Arc<String>,
}

impl Limited {
    /// The window the decision counted in: the override's, else the one asked for.
    pub fn duration(&self, asked: &LimitRequest) -> u64 {
        self.applied.as_ref().map_or(asked.duration, |o| o.duration)
    }
}

/// Several decisions taken all or nothing ([`Runtime::limit_all`]).
#[derive(Debug, Clone)]
pub struct LimitedAll {
    /// Whether every entry fit (and so was consumed).
    pub passed: bool,
    /// Each entry's decision, in the order asked.
    pub entries: Vec<Limited>,
}

/// One store read per root key, namespace or overrides at a time, on the async side:
/// requests that miss together wait here as futures for the one that reads the store, then
/// find its answer in the cache. (Each would otherwise take a blocking-pool thread of its
/// own to wait in: after an idle spell, a burst of 40k req/s grew the process from 7 to 71
/// threads in one load's time, all on the worker's core.) Keys fall into 64 stripes.
#[derive(Debug)]
pub struct LoadGates {
    gates: Box<[futures_util::lock::Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for LoadGates {
    fn default() -> Self {
        Self {
            gates: (0..64).map(|_| futures_util::lock::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl LoadGates {
    /// `n` stripes (at least one): at most `n` holders at once.
    pub fn new(n: usize) -> Self {
        Self {
            gates: (0..n.max(1)).map(|_| futures_util::lock::Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Waits for the stripe of `key`; held until the guard is dropped.
    pub async fn enter<K: std::hash::Hash + ?Sized>(
        &self,
        key: &K,
    ) -> futures_util::lock::MutexGuard<'_, ()> {
        use std::hash::BuildHasher;
        let i = self.hasher.hash_one(key) as usize % self.gates.len();
        self.gates[i].lock().await
    }
}

type Rbac = Arc<RbacService<SqlStore>>;
type Limiter = Arc<dyn RateLimitStore>;

impl Runtime {
    /// One decision for `principal`: the namespace resolved (cache, else the store), the
    /// override that applies, then the decision in the rate-limit store; counted in
    /// analytics. With Redis: 503 (`ServiceUnavailable`) when it cannot be reached, or a
    /// pass when failing open (contract §5.12).
    pub async fn limit<O: Offload>(
        &self,
        offload: &O,
        principal: &Arc<Principal>,
        ask: LimitAsk<'_>,
    ) -> Result<Limited, CallError> {
        let namespace_id = self.namespace_id(offload, principal, ask.namespace).await?;
        let now = self.rbac.clock().now_ms();
        let overrides = self.cached_overrides(offload, &namespace_id, ask.identifier).await?;
        let (decision, applied) = match &self.redis {
            Some(redis) => {
                // `async: true` (§5.8): from this instance's state when it knows the budget's
                // window (the store's `deferred.rs`; the over-admission bound is in api.md).
                let req = with_override(ask.request, overrides.0.as_ref());
                let key = BudgetKey {
                    namespace_id: &namespace_id,
                    identifier: ask.identifier,
                    duration: req.duration,
                    algorithm: overrides.2,
                };
                // Computed apart from the match: a closure's temporaries there would live
                // across the await below (and the future would not be `Send`).
                // Only fixed windows decide from this instance's state (`deferred.rs`).
                let known = match ask.is_async && key.algorithm == Algorithm::Fixed {
                    true => redis.limit_async(key, req, now),
                    false => None,
                };
                match known {
                    Some(d) => (d, overrides.0),
                    None => {
                        let at = Budget { namespace_id: &namespace_id, identifier: ask.identifier, now };
                        self.decide_in_redis(offload, redis, principal, at, ask.request, overrides).await?
                    }
                }
            }
            None => {
                // The in-process store: inline, it never finds overrides stale; `async`
                // changes nothing (one instance: exact either way).
                let req = with_override(ask.request, overrides.0.as_ref());
                let key = BudgetKey {
                    namespace_id: &namespace_id,
                    identifier: ask.identifier,
                    duration: req.duration,
                    algorithm: overrides.2,
                };
                (self.limiter.limit(key, req, now)?, overrides.0)
            }
        };
        self.analytics.record_limit(
            &principal.workspace_id,
            &namespace_id,
            ask.identifier,
            decision.success,
            now,
        );
        Ok(Limited { decision, applied, namespace_id })
    }

    /// Several decisions all or nothing (v2's `multiLimit`, API-v2.md §5.2): every entry
    /// consumed if all fit, else none. The namespaces are resolved first (created, given
    /// `create_namespace`, even when the limits then fail); each entry counted in analytics.
    pub async fn limit_all<O: Offload>(
        &self,
        offload: &O,
        principal: &Arc<Principal>,
        asks: &[LimitAsk<'_>],
    ) -> Result<LimitedAll, CallError> {
        let names: Vec<String> = asks.iter().map(|a| a.namespace.to_string()).collect();
        let (rbac, p) = (self.rbac.clone(), principal.clone());
        let namespace_ids = blocking(offload, move || {
            rbac.ensure_root_key_current(&p)?;
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            Ok(rbac.resolve_namespaces(&p, &names)?)
        })
        .await?;
        let mut overrides: Vec<Applied> = Vec::with_capacity(asks.len());
        for (a, ns) in asks.iter().zip(&namespace_ids) {
            overrides.push(self.cached_overrides(offload, ns, a.identifier).await?);
        }
        let mut stale = 0;
        let outcome: AllOrNothing = loop {
            // Overrides changing faster than they can be read: decide with the latest read.
            let epochs: Vec<(String, u64)> = match stale < STALE_OVERRIDES_RETRIES {
                true => namespace_ids.iter().zip(&overrides).map(|(ns, o)| (ns.to_string(), o.1)).collect(),
                false => Vec::new(),
            };
            let keys: Vec<(Arc<String>, String, LimitRequest, Algorithm)> = namespace_ids
                .iter()
                .zip(asks)
                .zip(&overrides)
                .map(|((ns, a), o)| {
                    (ns.clone(), a.identifier.to_string(), with_override(a.request, o.0.as_ref()), o.2)
                })
                .collect();
            let (limiter, clock) = (self.limiter.clone(), self.rbac.clock().clone());
            let decide = move || {
                let all: Vec<(BudgetKey<'_>, LimitRequest)> = keys
                    .iter()
                    .map(|(ns, id, r, algorithm)| {
                        let key = BudgetKey {
                            namespace_id: ns,
                            identifier: id,
                            duration: r.duration,
                            algorithm: *algorithm,
                        };
                        (key, *r)
                    })
                    .collect();
                let epochs: Vec<(&str, u64)> = epochs.iter().map(|(ns, e)| (ns.as_str(), *e)).collect();
                Ok(limiter.limit_all(&all, &epochs, clock.now_ms())?)
            };
            // The in-process store decides inline, as `limit` does; Redis on the pool.
            let decided = match self.redis {
                None => decide()?,
                Some(_) => blocking(offload, decide).await?,
            };
            match decided {
                Some(outcome) => break outcome,
                None => {
                    stale += 1;
                    for (i, (a, ns)) in asks.iter().zip(&namespace_ids).enumerate() {
                        let (rbac, limiter) = (self.rbac.clone(), self.limiter.clone());
                        let (ns, id) = (ns.clone(), a.identifier.to_string());
                        overrides[i] =
                            blocking(offload, move || load_overrides(&rbac, &limiter, &ns, &id)).await?;
                    }
                }
            }
        };
        let at = self.rbac.clock().now_ms();
        let entries = outcome
            .decisions
            .into_iter()
            .zip(asks)
            .zip(namespace_ids)
            .zip(overrides)
            .map(|(((decision, a), namespace_id), (applied, _, _))| {
                let passed = decision.success && outcome.passed;
                self.analytics.record_limit(&principal.workspace_id, &namespace_id, a.identifier, passed, at);
                Limited { decision, applied, namespace_id }
            })
            .collect();
        Ok(LimitedAll { passed: outcome.passed, entries })
    }

    /// The namespace's id: from rbac's cache, else resolved (and created when the caller
    /// may) once per name at a time.
    async fn namespace_id<O: Offload>(
        &self,
        offload: &O,
        principal: &Arc<Principal>,
        name: &str,
    ) -> Result<Arc<String>, CallError> {
        let cached =
            || self.rbac.namespace_cached(principal, name).map(|found| found.map_err(CallError::from));
        if let Some(found) = cached() {
            return found;
        }
        let (rbac, p, owned) = (self.rbac.clone(), principal.clone(), name.to_string());
        self.load_once(offload, name, cached, move || Ok(rbac.resolve_namespace(&p, &owned)?)).await
    }

    /// The override for `identifier` and the overrides epoch it was read under: from the
    /// cache (a due refresh runs in the background), else read once per namespace at a time.
    async fn cached_overrides<O: Offload>(
        &self,
        offload: &O,
        namespace_id: &Arc<String>,
        identifier: &str,
    ) -> Result<Applied, CallError> {
        if let Some(hit) = self.rbac.override_cached(namespace_id, identifier) {
            if hit.refresh {
                let (rbac, limiter, ns) = (self.rbac.clone(), self.limiter.clone(), namespace_id.clone());
                background(offload, "overrides refresh", move || refresh_overrides(&rbac, &limiter, &ns));
            }
            return Ok(hit.value);
        }
        let cached = || self.rbac.override_cached(namespace_id, identifier).map(|hit| Ok(hit.value));
        let (rbac, limiter) = (self.rbac.clone(), self.limiter.clone());
        let (ns, id) = (namespace_id.clone(), identifier.to_string());
        self.load_once(offload, namespace_id.as_str(), cached, move || {
            load_overrides(&rbac, &limiter, &ns, &id)
        })
        .await
    }

    /// The decision in Redis, batched with this worker's other decisions, under the
    /// namespace's overrides and the caller's root key:
    /// - when Redis finds the overrides changed since they were read (another instance
    ///   changed them), they are read again and the decision asked again;
    /// - when it finds the root key's change counter changed (a revocation through another
    ///   instance), the root key is checked against the database (401 when revoked) and the
    ///   decision asked again without that guard.
    async fn decide_in_redis<O: Offload>(
        &self,
        offload: &O,
        redis: &RedisStore,
        principal: &Arc<Principal>,
        at: Budget<'_>,
        request: LimitRequest,
        mut overrides: Applied,
    ) -> Result<(Decision, Option<Effective>), CallError> {
        let mut guard = match principal.tag() {
            Some(tag) if tag.source > SOURCE_STORE => Some(tag),
            // Loaded while Redis's counters could not be read: checked against the database's.
            Some(_) => self.return_if_revoked(offload, principal).await.map(|()| None)?,
            None => None,
        };
        let mut stale = 0;
        loop {
            let req = with_override(request, overrides.0.as_ref());
            let key = BudgetKey {
                namespace_id: at.namespace_id,
                identifier: at.identifier,
                duration: req.duration,
                algorithm: overrides.2,
            };
            // Overrides changing faster than they can be read: decide with the latest read.
            let epoch = (stale < STALE_OVERRIDES_RETRIES).then_some(overrides.1);
            let counter_guard = guard.map(|tag| CounterGuard {
                name: principal.counter_name(),
                epoch: tag.source,
                value: tag.values[0],
            });
            let decided = redis.limit_batched(key, req, at.now, epoch, counter_guard).await;
            match decided {
                Ok(Checked::Decided(d)) => return Ok((d, overrides.0)),
                Ok(Checked::StaleOverrides) => {
                    stale += 1;
                    let (rbac, limiter) = (self.rbac.clone(), self.limiter.clone());
                    let (ns, id) = (at.namespace_id.clone(), at.identifier.to_string());
                    overrides = blocking(offload, move || load_overrides(&rbac, &limiter, &ns, &id)).await?;
                }
                Ok(Checked::StaleCounter) => {
                    self.return_if_revoked(offload, principal).await?;
                    guard = None;
                }
                Err(e @ keygate_ratelimit::StoreError::Unavailable(_)) if self.fail_open => {
                    return Ok((pass_failing_open(key, req, at.now, &e), overrides.0));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `Unauthorized` when the root key was revoked (by the database, off the async side).
    async fn return_if_revoked<O: Offload>(
        &self,
        offload: &O,
        principal: &Arc<Principal>,
    ) -> Result<(), CallError> {
        let (rbac, principal) = (self.rbac.clone(), principal.clone());
        blocking(offload, move || Ok(rbac.ensure_root_key_current(&principal)?)).await
    }
}

/// Which budget a decision is for, and when.
#[derive(Debug, Clone, Copy)]
struct Budget<'a> {
    namespace_id: &'a Arc<String>,
    identifier: &'a str,
    now: u64,
}

/// Reads the namespace's overrides again into the cache (blocking I/O), under the epoch
/// read first, as in [`load_overrides`].
fn refresh_overrides(rbac: &Rbac, limiter: &Limiter, namespace_id: &str) -> Result<(), CallError> {
    let epoch = limiter.overrides_epoch(namespace_id)?;
    Ok(rbac.refresh_overrides(namespace_id, epoch)?)
}

/// Reads the namespace's overrides into the cache (blocking I/O). The epoch is read first:
/// a change committed after that read bumps it after its commit, so the pair is never
/// newer-epoch-with-older-overrides.
fn load_overrides(
    rbac: &Rbac,
    limiter: &Limiter,
    namespace_id: &str,
    identifier: &str,
) -> Result<Applied, CallError> {
    let epoch = limiter.overrides_epoch(namespace_id)?;
    let set = rbac.load_overrides(namespace_id, epoch)?;
    Ok((set.find(identifier), epoch, set.algorithm))
}

/// The request with the override (if any) replacing its limit and duration (§5.6).
fn with_override(mut request: LimitRequest, found: Option<&Effective>) -> LimitRequest {
    if let Some(o) = found {
        request.limit = o.limit;
        request.duration = o.duration;
    }
    request
}

/// The decisions' futures are `Send` (a tower service's are spawned on any worker): checked
/// where they are built, for any offload.
#[allow(dead_code)]
fn decisions_are_send<'a, O: Offload>(
    rt: &'a Runtime,
    o: &'a O,
    p: &'a Arc<Principal>,
    asks: &'a [LimitAsk<'a>],
) {
    fn send<F: Send>(_: F) {}
    send(rt.limit(o, p, asks[0]));
    send(rt.limit_all(o, p, asks));
    let usage = keygate_usage::Usage::default();
    let call = crate::VerifyCall {
        secret: "",
        principal: Some(p),
        workspace_id: None,
        api_id: None,
        access: None,
        ip: None,
        migration: None,
        query: None,
        usage: &usage,
        tags: &[],
    };
    send(rt.verify(o, call));
    send(rt.authenticate(o, ""));
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::FutureExt;

    #[test]
    fn a_load_gate_lets_one_caller_per_key_through_at_a_time() {
        let gates = LoadGates::default();
        let first = gates.enter("kg_root_a").now_or_never().expect("a free gate opens at once");
        assert!(gates.enter("kg_root_a").now_or_never().is_none(), "the same key waits");
        // Another key opens unless it shares the stripe: find one that does not.
        let other =
            (0..1000).map(|i| format!("rlns_{i}")).find_map(|k| gates.enter(k.as_str()).now_or_never());
        assert!(other.is_some(), "other keys are not held up by this one");
        drop(other);
        drop(first);
        assert!(gates.enter("kg_root_a").now_or_never().is_some(), "open again once the loader is done");
    }
}
