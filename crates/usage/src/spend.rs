//! What a verification spends (API-v2.md §13): once rbac's check found a valid key, its
//! rate limits ([`crate::limits`]), then its credits through the ledger
//! ([`crate::ledger`]). A verification that gets as far as credits answers only once their
//! spend is committed: [`Pending`].

use crate::UsageService;
use crate::ledger::memory::{Commit, Committed, Retry};
use crate::ledger::{SpendAsk, Spent};
use crate::limits::{Applied, Held, KeyLimits, Taken, Usage, applied_limits, outcomes, own_namespace};
use crate::store::{CreditSpend, UsageStore};
use keygate_ratelimit::{Algorithm, Decision, Entry, StoreError};
use keygate_rbac::{Assumed, Checked, RbacError, Snapshot, StorageError, Verification, VerifyCode};
use std::sync::Arc;

/// A verification, answered once what it spent is committed: [`Self::wait`] blocks for
/// that, [`Self::settle`] awaits it. Until then it must not be told to anyone.
#[derive(Debug)]
#[must_use = "a verification is answered only once its spend is committed: wait or settle it"]
pub struct Pending {
    verification: Verification,
    credits: Option<CreditWait>,
}

/// What a verification waits for.
enum CreditWait {
    /// Its paid spend's commit (the memory ledger), or its retry on the row.
    Commit { commit: Commit, taken: Option<Taken> },
    /// Its spend on the row (the rows ledger).
    Row { reply: tokio::sync::oneshot::Receiver<Result<CreditSpend, StorageError>>, taken: Option<Taken> },
}

impl std::fmt::Debug for CreditWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CreditWait::Commit { .. } => "CreditWait::Commit",
            CreditWait::Row { .. } => "CreditWait::Row",
        })
    }
}

type Reply<T> = Result<Result<T, StorageError>, tokio::sync::oneshot::error::RecvError>;

fn stopped<T>(reply: Reply<T>) -> Result<T, StorageError> {
    reply.unwrap_or_else(|_| Err(StorageError::Unavailable("the credit writer stopped".into())))
}

impl Pending {
    pub(crate) fn done(verification: Verification) -> Self {
        Self { verification: counted(verification), credits: None }
    }

    /// Whether the answer waits for a commit.
    pub fn is_waiting(&self) -> bool {
        self.credits.is_some()
    }

    /// The answer, blocking the thread until the credits' spend is committed.
    pub fn wait(self) -> Result<Verification, RbacError> {
        let v = self.verification;
        match self.credits {
            None => Ok(v),
            Some(CreditWait::Row { reply, taken }) => Self::spent(v, taken, stopped(reply.blocking_recv())),
            Some(CreditWait::Commit { commit, taken }) => {
                let (answer, retry) = commit.wait();
                Self::committed(v, taken, retry, stopped(answer))
            }
        }
    }

    /// The answer, once the credits' spend is committed (see `Commit::committing` for
    /// the memory ledger's group commit).
    pub async fn settle(self) -> Result<Verification, RbacError> {
        let v = self.verification;
        match self.credits {
            None => Ok(v),
            Some(CreditWait::Row { reply, taken }) => Self::spent(v, taken, stopped(reply.await)),
            Some(CreditWait::Commit { commit, taken }) => {
                let (committing, retry) = commit.committing();
                match stopped(committing.await) {
                    Ok(Committed::Conflict) => Self::spent(v, taken, stopped(retry.spend().await)),
                    other => Self::committed(v, taken, retry, other),
                }
            }
        }
    }

    /// The answer once the memory ledger's commit is known (a conflict retried by the
    /// caller's way of waiting, or here, blocking, for [`Self::wait`]).
    fn committed(
        v: Verification,
        taken: Option<Taken>,
        retry: Retry,
        commit: Result<Committed, StorageError>,
    ) -> Result<Verification, RbacError> {
        match commit {
            Ok(Committed::Yes) => Ok(counted(v)),
            Ok(Committed::Conflict) => Self::spent(v, taken, stopped(retry.spend().blocking_recv())),
            Err(e) => Self::failed(taken, e),
        }
    }

    fn failed(taken: Option<Taken>, e: StorageError) -> Result<Verification, RbacError> {
        if let Some(t) = &taken {
            t.give_back();
        }
        Err(e.into())
    }

    /// The answer once a spend on the row is known.
    fn spent(
        mut v: Verification,
        taken: Option<Taken>,
        spend: Result<CreditSpend, StorageError>,
    ) -> Result<Verification, RbacError> {
        let spend = match spend {
            Ok(s) => s,
            Err(e) => return Self::failed(taken, e),
        };
        v.credits = spend.remaining;
        if !spend.paid && spend.remaining.is_some() {
            usage_exceeded(&mut v, taken.as_ref());
        }
        Ok(counted(v))
    }
}

/// A verification whose credits cannot pay: USAGE_EXCEEDED, the limits it took given back.
fn usage_exceeded(v: &mut Verification, taken: Option<&Taken>) {
    refused(v, taken, VerifyCode::UsageExceeded);
}

/// A verification refused after it took limits through the rate-limit store: those given
/// back, and answered as they are again (the ones the ledger decided, it never took).
fn refused(v: &mut Verification, taken: Option<&Taken>, code: VerifyCode) {
    v.code = code;
    if let Some(t) = taken {
        t.give_back();
        for (o, l) in v.ratelimits.iter_mut().zip(t.limits.iter()).filter(|(_, l)| t.holds(l)) {
            o.remaining = o.remaining.saturating_add(l.request.cost).min(o.limit);
        }
    }
}

impl<S: UsageStore + 'static> UsageService<S> {
    /// What a checked verification spends (§13.3), when its check found a VALID key: its
    /// limits, all or nothing (RATE_LIMITED: nothing spent), then its credits (committed
    /// before the answer; USAGE_EXCEEDED: the limits given back). Any other answer spends
    /// nothing. `None` when that needs I/O and `may_wait` is false (the caller asks again
    /// where it may block); nothing is spent then. `usage` was validated
    /// ([`crate::validate_usage`]) before the check. `assumed`: the change counters the
    /// check's answer assumed (`RbacService::check_assuming`), checked with the credit
    /// spend; `None` (nothing spent) when one moved, or when the answer could not be
    /// confirmed that way: the caller checks again.
    pub fn spend(
        &self,
        checked: Checked,
        usage: &Usage,
        may_wait: bool,
        assumed: Option<&Assumed>,
    ) -> Option<Result<Pending, RbacError>> {
        let p = match self.prepare(checked, usage, may_wait, assumed, false) {
            Prepare::Ledger(p) => p,
            Prepare::Answered(answer) => return answer,
        };
        let for_ledger = p.taken.for_ledger();
        let spent = self.ledger.spend(p.ask(&for_ledger, may_wait, assumed), p.now as i64, &p.limits.counter);
        drop(for_ledger);
        self.finish(p, spent)
    }

    /// [`Self::spend`] through the ledger's queued path (the shared ledger's spend sent
    /// with the round trips of other requests, awaited on the caller's tokio runtime), of a
    /// check whose answer `assumed` confirms with the spend, or (`None`) that was confirmed
    /// already: `None` (nothing spent) when it has no such path, when its answer needs the
    /// blocking path (a counter to load, an update's lock, a counter that moved) or when
    /// it would take identity limits (another round trip, the blocking way).
    pub(crate) async fn spend_queued(
        &self,
        checked: Checked,
        usage: &Usage,
        assumed: Option<&Assumed>,
    ) -> Option<Result<Pending, RbacError>> {
        let p = match self.prepare(checked, usage, true, assumed, true) {
            Prepare::Ledger(p) => p,
            Prepare::Answered(answer) => return answer,
        };
        let queued = {
            let for_ledger = p.taken.for_ledger();
            self.ledger.spend_queued(p.ask(&for_ledger, true, assumed), p.now as i64)
        };
        match queued {
            Some(spent) => {
                let spent = spent.await;
                self.finish(p, spent)
            }
            None => {
                give_back((!p.taken.limits.is_empty()).then_some(&p.taken));
                None
            }
        }
    }

    /// [`Self::spend`] up to the ledger: the limits held through the rate-limit store
    /// taken (RATE_LIMITED: nothing spent), what the ledger is to spend; or the answer
    /// already (nothing to spend, or refused), or `None` as [`Self::spend`] says.
    fn prepare(
        &self,
        checked: Checked,
        usage: &Usage,
        may_wait: bool,
        assumed: Option<&Assumed>,
        queued: bool,
    ) -> Prepare {
        use Prepare::Answered;
        let Checked { verification: mut v, snapshot } = checked;
        let snapshot = match snapshot {
            Some(s) if v.code == VerifyCode::Valid && !usage.check_only => s,
            _ => return Answered(Some(Ok(Pending::done(v)))),
        };
        let key = snapshot.key();
        // A key with nothing of its own to take (no credits, no limits) shares one record
        // with every such key; a request naming ad-hoc limits for it gets its own.
        let plain = |k: &keygate_rbac::CachedKey| {
            k.credits().is_none()
                && k.ratelimits().is_empty()
                && k.identity().is_none_or(|i| i.ratelimits.is_empty())
        };
        let init = |k: &keygate_rbac::CachedKey| match plain(k) {
            true => self.plain.clone(),
            false => Arc::new(self.key_limits(k)),
        };
        let Some(mut limits) = snapshot.attached(init) else {
            return Answered(if assumed.is_some() { None } else { Some(Ok(Pending::done(v))) });
        };
        if Arc::ptr_eq(&limits, &self.plain) && !usage.ratelimits.is_empty() {
            let own = self.key_limits(key);
            if !Arc::ptr_eq(&own.own, &self.plain.own) {
                limits = Arc::new(own);
            }
        }
        if let Some(counter) = limits.counter.get() {
            counter.prefetch();
        }
        let applied: Arc<[Applied]> = match usage.ratelimits.is_empty() {
            true => limits.auto.clone(),
            false => match applied_limits(key, &usage.ratelimits) {
                Ok(l) => l.into(),
                Err(_) if assumed.is_some() => return Answered(None),
                Err(e) => return Answered(Some(Err(e.into()))),
            },
        };
        if (assumed.is_some() && !self.ledger.assumes_counters())
            || (queued && applied.iter().any(|l| l.identity))
        {
            // Only the ledger's one step can confirm the answer; the queued path takes no
            // identity limits.
            return Answered(None);
        }
        // The shared ledger takes the key's own limits with its credit spend: one step (its
        // script decides fixed windows; a key with a sliding or bucket limit of its own
        // takes its limits through the rate-limit store, then spends).
        let with_spend = self.ledger.takes_limits()
            && key.credits().is_some()
            && applied.iter().all(|l| l.identity || l.algorithm == Algorithm::Fixed);
        if !may_wait && (with_spend || (!applied.is_empty() && self.limiter.is_remote())) {
            return Answered(None);
        }
        let now = self.rbac.clock().now_ms();
        let taken = Taken {
            limiter: self.limiter.clone(),
            key: limits.clone(),
            limits: applied,
            held: if with_spend { Held::Identity } else { Held::All },
            now,
        };
        let mut decisions = Vec::new();
        if !taken.limits.is_empty() {
            let outcome = match taken.take() {
                Ok(o) => o,
                Err(e) => return Answered(Some(Err(limit_error(e)))),
            };
            decisions = outcome.decisions;
            if !outcome.passed {
                v.ratelimits = outcomes(&taken.limits, &decisions);
                v.code = VerifyCode::RateLimited;
                return Answered(Some(Ok(Pending::done(v))));
            }
        }
        let cost = usage.cost.unwrap_or(1);
        Prepare::Ledger(Prepared { v, snapshot, limits, taken, decisions, cost, now })
    }

    /// [`Self::spend`] from what the ledger's spend came to.
    fn finish(&self, p: Prepared, spent: Result<Spent, StorageError>) -> Option<Result<Pending, RbacError>> {
        let Prepared { v, taken, mut decisions, .. } = p;
        let taken = (!taken.limits.is_empty()).then_some(taken);
        // The answer's limits: the decisions the ledger made on the key's own limits put
        // in their places among the rate-limit store's.
        let mut answer = |mut v: Verification, ledgers: Vec<Decision>| {
            if let Some(t) = &taken {
                let mut ledgers = ledgers.into_iter();
                for (d, l) in decisions.iter_mut().zip(t.limits.iter()) {
                    if !t.holds(l) {
                        *d = ledgers.next();
                    }
                }
                v.ratelimits = outcomes(&t.limits, &decisions);
            }
            v
        };
        match spent {
            Err(e) => {
                give_back(taken.as_ref());
                Some(Err(e.into()))
            }
            Ok(Spent::NeedsLoad | Spent::Stale) => {
                give_back(taken.as_ref());
                None
            }
            Ok(Spent::RateLimited { limits }) => {
                let mut v = answer(v, limits);
                refused(&mut v, taken.as_ref(), VerifyCode::RateLimited);
                Some(Ok(Pending::done(v)))
            }
            Ok(Spent::Unlimited { limits }) => Some(Ok(Pending::done(answer(v, limits)))),
            Ok(Spent::Decided { paid: false, remaining, limits, .. }) => {
                let mut v = answer(v, limits);
                v.credits = Some(remaining);
                usage_exceeded(&mut v, taken.as_ref());
                Some(Ok(Pending::done(v)))
            }
            Ok(Spent::Decided { paid: true, remaining, commit, limits }) => {
                let mut v = answer(v, limits);
                v.credits = Some(remaining);
                let credits = commit.map(|commit| CreditWait::Commit { commit, taken });
                Some(Ok(match credits {
                    None => Pending::done(v),
                    Some(wait) => Pending { verification: v, credits: Some(wait) },
                }))
            }
            Ok(Spent::Later(reply)) => {
                let v = answer(v, Vec::new());
                Some(Ok(Pending { verification: v, credits: Some(CreditWait::Row { reply, taken }) }))
            }
        }
    }
}

/// What [`UsageService::prepare`] came to.
enum Prepare {
    /// Over to the ledger.
    Ledger(Prepared),
    /// The answer already, or `None` (see [`UsageService::spend`]).
    Answered(Option<Result<Pending, RbacError>>),
}

/// A verification's spend as [`UsageService::prepare`] leaves it for the ledger.
struct Prepared {
    v: Verification,
    snapshot: Snapshot,
    limits: Arc<KeyLimits>,
    taken: Taken,
    /// The rate-limit store's decisions, per limit (`None` for the ledger's).
    decisions: Vec<Option<Decision>>,
    cost: u64,
    now: u64,
}

impl<S: UsageStore + 'static> UsageService<S> {
    /// What a key's verifications take, worked out from the key: its namespaces (its own
    /// limits' in the credit ledger's slot, or the rate-limit store's), its auto-applied
    /// limits.
    fn key_limits(&self, k: &keygate_rbac::CachedKey) -> KeyLimits {
        let own = match self.ledger.limits_namespace(k.id()) {
            Some(ns) => Arc::new(ns),
            None => own_namespace(k.id(), self.limiter.is_remote(), &self.own_local),
        };
        KeyLimits::of(k, own, &self.no_limits)
    }
}

impl Prepared {
    /// What the ledger is to spend; `for_ledger`: the key's own limits it takes
    /// ([`Taken::for_ledger`]).
    fn ask<'a>(
        &'a self,
        for_ledger: &'a [Entry<'a>],
        may_wait: bool,
        assumed: Option<&'a Assumed>,
    ) -> SpendAsk<'a> {
        let key = self.snapshot.key();
        SpendAsk { key, cost: self.cost, may_wait, tag: self.snapshot.tag(), limits: for_ledger, assumed }
    }
}

fn give_back(taken: Option<&Taken>) {
    if let Some(t) = taken {
        t.give_back();
    }
}

fn limit_error(e: StoreError) -> RbacError {
    match e {
        StoreError::Unavailable(why) => StorageError::Unavailable(why).into(),
        StoreError::CannotAtomically(why) => StorageError::Internal(why).into(),
    }
}

/// Counts a verification's outcome (`keygate_verifications_total{code}`); static labels, so
/// no allocation.
fn counted(v: Verification) -> Verification {
    let code = v.code.as_str();
    metrics::counter!("keygate_verifications_total", "code" => code).increment(1);
    v
}
