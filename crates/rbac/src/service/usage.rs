//! What a verification spends (API-v2.md §13): the rate limits of the key and its identity
//! (§13.1, §13.2), taken all-or-nothing through the rate-limit engine, then the key's
//! credits (§13.3), through the group commit of [`super::credits`]. A verification that
//! gets as far as credits answers only once their spend is committed: [`Pending`].

use super::credits::{Commit, Committed, Retry, SpendAsk, Spent};
use super::*;
use crate::store::CreditSpend;
use crate::{LimitAsk, LimitOutcome, Usage};
use keygate_ratelimit::{AllOrNothing, BudgetKey, Decision, LimitRequest, RateLimitStore, StoreError};

/// The most rate limits one verification may name.
pub const MAX_VERIFY_RATELIMITS: usize = 50;

/// A request's usage, before any key is looked up: names of 1–128 characters, each once;
/// `limit` and `duration` within a stored limit's bounds; costs within 0..2^53 − 1.
pub fn validate_usage(usage: &Usage) -> Result<(), ValidationError> {
    let max_cost = keygate_domain::MAX_SAFE_INTEGER;
    if usage.cost.is_some_and(|c| c > max_cost) {
        return Err(ValidationError::new("credits.cost", format!("must be 0 to {max_cost}")));
    }
    if usage.ratelimits.len() > MAX_VERIFY_RATELIMITS {
        return Err(ValidationError::new("ratelimits", format!("at most {MAX_VERIFY_RATELIMITS} entries")));
    }
    let mut names = BTreeSet::new();
    for (i, a) in usage.ratelimits.iter().enumerate() {
        let at = |field: &str| format!("ratelimits.{i}.{field}");
        check_len(&at("name"), &a.name, MAX_LIMIT_NAME_CHARS)?;
        if !names.insert(a.name.as_str()) {
            return Err(ValidationError::new(at("name"), "is named twice"));
        }
        if a.cost.is_some_and(|c| c > max_cost) {
            return Err(ValidationError::new(at("cost"), format!("must be 0 to {max_cost}")));
        }
        if a.limit.is_some_and(|l| !(1..=MAX_LIMIT_TOKENS).contains(&l)) {
            return Err(ValidationError::new(at("limit"), format!("must be 1 to {MAX_LIMIT_TOKENS}")));
        }
        if a.duration.is_some_and(|d| !(1_000..=MAX_LIMIT_DURATION_MS).contains(&d)) {
            return Err(ValidationError::new(
                at("duration"),
                format!("must be 1000 to {MAX_LIMIT_DURATION_MS}"),
            ));
        }
    }
    Ok(())
}

/// A rate limit that applies to one verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// The stored limit's id, or `adhoc:<name>`.
    id: String,
    name: String,
    auto_apply: bool,
    /// The budget's identifier: the stored limit's id (a key's limit is the key's, an
    /// identity's is shared by its keys), or `<key id>:<name>` for an ad-hoc limit.
    budget: String,
    request: LimitRequest,
}

/// Which limits apply (§13.1), sorted by name: every auto-applied limit of the key and of
/// its identity (a key limit hides an identity limit of the same name), cost 1; and every
/// limit the request names, found by name among the key's, then the identity's, with the
/// request's `limit`/`duration` over the stored ones; a name found nowhere is an ad-hoc
/// limit of the key, which needs both (else 400 at `ratelimits.<i>`).
pub(crate) fn applied_limits(
    summary: &KeySummary,
    asks: &[LimitAsk],
) -> Result<Vec<Applied>, ValidationError> {
    let identity: &[RateLimitConfig] = summary.identity.as_ref().map_or(&[], |i| &i.ratelimits);
    let find = |name: &str| {
        summary
            .ratelimits
            .iter()
            .find(|l| l.name == name)
            .or_else(|| identity.iter().find(|l| l.name == name))
    };
    let stored = |l: &RateLimitConfig, cost: u64, limit: Option<u64>, duration: Option<u64>| Applied {
        id: l.id.clone(),
        name: l.name.clone(),
        auto_apply: l.auto_apply,
        budget: l.id.clone(),
        request: LimitRequest {
            limit: limit.unwrap_or(l.limit),
            duration: duration.unwrap_or(l.duration),
            cost,
        },
    };
    let mut out: BTreeMap<&str, Applied> = BTreeMap::new();
    for l in summary.ratelimits.iter().chain(identity).filter(|l| l.auto_apply) {
        if !out.contains_key(l.name.as_str()) && find(&l.name).is_some_and(|f| f.id == l.id) {
            out.insert(&l.name, stored(l, 1, None, None));
        }
    }
    for (i, a) in asks.iter().enumerate() {
        let cost = a.cost.unwrap_or(1);
        let applied = match (find(&a.name), a.limit, a.duration) {
            (Some(l), limit, duration) => stored(l, cost, limit, duration),
            (None, _, _) if a.if_present => continue,
            (None, Some(limit), Some(duration)) => Applied {
                id: format!("adhoc:{}", a.name),
                name: a.name.clone(),
                auto_apply: false,
                budget: format!("{}:{}", summary.key.id, a.name),
                request: LimitRequest { limit, duration, cost },
            },
            (None, _, _) => {
                let msg = format!(
                    "no rate limit named {:?} on the key or its identity: an ad-hoc limit needs limit and duration",
                    a.name
                );
                return Err(ValidationError::new(format!("ratelimits.{i}"), msg));
            }
        };
        out.insert(&a.name, applied);
    }
    Ok(out.into_values().collect())
}

/// The budgets of a verification's limits live in one namespace per identity (or per key
/// without one), never a `ratelimit.*` namespace's. The closing brace makes the Redis
/// store's cluster hash tag end there, so that every budget of one verification shares a
/// slot (and one all-or-nothing script call).
fn budget_namespace(key: &Key) -> Arc<String> {
    Arc::new(format!("vl:{}}}", key.identity_id.as_deref().unwrap_or(&key.id)))
}

/// What a cached key's verifications need of its limits, worked out once per snapshot:
/// its budgets' namespace, the limits that apply when a request names none, and its
/// credit counter (the memory ledger's, once found).
#[derive(Debug, Clone)]
pub(crate) struct KeyLimits {
    namespace: Arc<String>,
    auto: Arc<[Applied]>,
    counter: Arc<std::sync::OnceLock<Arc<super::credits::Counter>>>,
}

impl KeyLimits {
    pub(crate) fn of(summary: &KeySummary) -> Self {
        let auto = applied_limits(summary, &[]).unwrap_or_default();
        Self { namespace: budget_namespace(&summary.key), auto: auto.into(), counter: Arc::default() }
    }

    /// The weight of what it holds, for the cache's bound.
    pub(crate) fn bytes(&self) -> usize {
        self.namespace.len()
            + self.auto.iter().map(|a| 96 + a.id.len() + a.name.len() + a.budget.len()).sum::<usize>()
    }
}

/// The budgets a verification took, to give back if it does not pass after all.
#[derive(Debug)]
struct Taken {
    limiter: Arc<dyn RateLimitStore>,
    namespace: Arc<String>,
    limits: Arc<[Applied]>,
    now: u64,
}

impl Taken {
    fn entries(&self) -> Vec<(BudgetKey<'_>, LimitRequest)> {
        self.limits
            .iter()
            .map(|l| {
                let key = BudgetKey {
                    namespace_id: &self.namespace,
                    identifier: &l.budget,
                    duration: l.request.duration,
                };
                (key, l.request)
            })
            .collect()
    }

    /// All or nothing; `Ok(decisions)` with the call's outcome.
    fn take(&self) -> Result<AllOrNothing, StoreError> {
        if let [l] = &self.limits[..] {
            let key = BudgetKey {
                namespace_id: &self.namespace,
                identifier: &l.budget,
                duration: l.request.duration,
            };
            let d = self.limiter.limit(key, l.request, self.now)?;
            return Ok(AllOrNothing { passed: d.success, decisions: vec![d] });
        }
        Ok(self
            .limiter
            .limit_all(&self.entries(), &[], self.now)?
            .unwrap_or(AllOrNothing { passed: false, decisions: Vec::new() }))
    }

    fn give_back(&self) {
        if let Err(e) = self.limiter.give_back(&self.entries(), self.now) {
            log::warn!("verification: rate-limit budgets not given back: {e}");
        }
    }
}

/// The limits' part of the answer: each limit with its decision.
fn outcomes(limits: &[Applied], decisions: &[Decision]) -> Vec<LimitOutcome> {
    limits
        .iter()
        .zip(decisions)
        .map(|(l, d)| LimitOutcome {
            id: l.id.clone(),
            name: l.name.clone(),
            limit: d.limit,
            duration: l.request.duration,
            reset: d.reset,
            remaining: d.remaining,
            exceeded: !d.success,
            auto_apply: l.auto_apply,
        })
        .collect()
}

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

    /// The answer, once the credits' spend is committed (see [`Commit::committing`] for
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
    v.code = VerifyCode::UsageExceeded;
    if let Some(t) = taken {
        t.give_back();
        for (o, l) in v.ratelimits.iter_mut().zip(t.limits.iter()) {
            o.remaining = o.remaining.saturating_add(l.request.cost).min(o.limit);
        }
    }
}

impl<S: RbacStore + 'static> RbacService<S> {
    /// The spending part of a VALID verification of `summary` (§13.3): its limits, all or
    /// nothing (RATE_LIMITED: nothing spent), then its credits (committed before the
    /// answer; USAGE_EXCEEDED: the limits given back). `None` when that needs I/O and
    /// `may_wait` is false (the caller asks again where it may block); nothing is spent
    /// then.
    pub(super) fn spend(
        &self,
        mut v: Verification,
        summary: &KeySummary,
        limits: &KeyLimits,
        tag: crate::counters::Tag,
        usage: &Usage,
        may_wait: bool,
    ) -> Option<Result<Pending, RbacError>> {
        if v.code != VerifyCode::Valid || usage.check_only {
            return Some(Ok(Pending::done(v)));
        }
        let applied: Arc<[Applied]> = match usage.ratelimits.is_empty() {
            true => limits.auto.clone(),
            false => match applied_limits(summary, &usage.ratelimits) {
                Ok(l) => l.into(),
                Err(e) => return Some(Err(e.into())),
            },
        };
        if !may_wait && !applied.is_empty() && self.limiter.is_remote() {
            return None;
        }
        let now = self.clock.now_ms();
        let mut taken = None;
        if !applied.is_empty() {
            let t = Taken {
                limiter: self.limiter.clone(),
                namespace: limits.namespace.clone(),
                limits: applied,
                now,
            };
            let outcome = match t.take() {
                Ok(o) => o,
                Err(e) => return Some(Err(limit_error(e))),
            };
            v.ratelimits = outcomes(&t.limits, &outcome.decisions);
            if !outcome.passed {
                v.code = VerifyCode::RateLimited;
                return Some(Ok(Pending::done(v)));
            }
            taken = Some(t);
        }
        let cost = usage.cost.unwrap_or(1);
        let ask = SpendAsk { key: &summary.key, cost, may_wait, tag };
        let spent = self.credits.spend(&self.store, ask, now as i64, &limits.counter);
        let give_back = |taken: &Option<Taken>| {
            if let Some(t) = taken {
                t.give_back();
            }
        };
        match spent {
            Err(e) => {
                give_back(&taken);
                Some(Err(e.into()))
            }
            Ok(Spent::NeedsLoad) => {
                give_back(&taken);
                None
            }
            Ok(Spent::Unlimited) => Some(Ok(Pending::done(v))),
            Ok(Spent::Decided { paid: false, remaining, .. }) => {
                v.credits = Some(remaining);
                usage_exceeded(&mut v, taken.as_ref());
                Some(Ok(Pending::done(v)))
            }
            Ok(Spent::Decided { paid: true, remaining, commit }) => {
                v.credits = Some(remaining);
                let credits = commit.map(|commit| CreditWait::Commit { commit, taken });
                Some(Ok(match credits {
                    None => Pending::done(v),
                    Some(wait) => Pending { verification: v, credits: Some(wait) },
                }))
            }
            Ok(Spent::Later(reply)) => {
                Some(Ok(Pending { verification: v, credits: Some(CreditWait::Row { reply, taken }) }))
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(id: &str, name: &str, auto_apply: bool) -> RateLimitConfig {
        RateLimitConfig { id: id.into(), name: name.into(), limit: 10, duration: 60_000, auto_apply }
    }

    fn summary(key: Vec<RateLimitConfig>, shared: Vec<RateLimitConfig>) -> KeySummary {
        let key_row = Key {
            id: "key_1".into(),
            workspace_id: "ws".into(),
            api_id: None,
            identity_id: Some("id_1".into()),
            credits: None,
            prefix: None,
            byte_length: None,
            start: "kg_".into(),
            name: None,
            meta: None,
            enabled: true,
            expires: None,
            created_at: 0,
        };
        let identity = Identity {
            id: "id_1".into(),
            workspace_id: "ws".into(),
            external_id: "acme".into(),
            meta: None,
            created_at: 0,
            updated_at: 0,
        };
        KeySummary {
            key: key_row,
            permissions: vec![],
            roles: vec![],
            identity: Some(IdentityView { identity, ratelimits: shared }),
            ratelimits: key,
            last_used: None,
        }
    }

    fn ask(name: &str) -> LimitAsk {
        LimitAsk::named(name)
    }

    #[test]
    fn auto_applied_limits_apply_and_a_key_limit_hides_its_identitys_namesake() {
        let s = summary(
            vec![limit("rl_k1", "a", true), limit("rl_k2", "b", false)],
            vec![limit("rl_i1", "a", true), limit("rl_i2", "c", true), limit("rl_i3", "d", false)],
        );
        let got = applied_limits(&s, &[]).unwrap();
        let ids: Vec<&str> = got.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["rl_k1", "rl_i2"]);
        assert!(got.iter().all(|a| a.request.cost == 1));
    }

    #[test]
    fn named_limits_are_found_on_the_key_then_the_identity_with_the_requests_values_over_them() {
        let s = summary(
            vec![limit("rl_k1", "a", false)],
            vec![limit("rl_i1", "a", false), limit("rl_i2", "b", false)],
        );
        let asks = [
            LimitAsk { cost: Some(3), limit: Some(99), ..ask("a") },
            LimitAsk { duration: Some(1_000), cost: Some(0), ..ask("b") },
            LimitAsk { limit: Some(5), duration: Some(2_000), ..ask("zz") },
        ];
        let got = applied_limits(&s, &asks).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            (got[0].id.as_str(), got[0].request),
            ("rl_k1", LimitRequest { limit: 99, duration: 60_000, cost: 3 })
        );
        assert_eq!(
            (got[1].budget.as_str(), got[1].request),
            ("rl_i2", LimitRequest { limit: 10, duration: 1_000, cost: 0 })
        );
        assert_eq!((got[2].id.as_str(), got[2].budget.as_str()), ("adhoc:zz", "key_1:zz"));
        let err = applied_limits(&s, &[ask("a"), LimitAsk { limit: Some(5), ..ask("nope") }]).unwrap_err();
        assert_eq!(err.path, "ratelimits.1");
        let optional = LimitAsk { if_present: true, ..ask("nope") };
        assert_eq!(applied_limits(&s, &[optional]).unwrap(), vec![], "v1's `default`, where there is none");
    }

    #[test]
    fn usage_is_bounded_before_any_key_is_read() {
        let bad = |u: Usage| validate_usage(&u).unwrap_err().path;
        assert_eq!(bad(Usage { cost: Some(1 << 53), ..Usage::default() }), "credits.cost");
        assert_eq!(
            bad(Usage { check_only: false, cost: None, ratelimits: vec![ask("a"), ask("a")] }),
            "ratelimits.1.name"
        );
        assert_eq!(
            bad(Usage { check_only: false, cost: None, ratelimits: vec![ask("")] }),
            "ratelimits.0.name"
        );
        let l = LimitAsk { limit: Some(0), ..ask("a") };
        assert_eq!(bad(Usage { check_only: false, cost: None, ratelimits: vec![l] }), "ratelimits.0.limit");
        let d = LimitAsk { duration: Some(999), ..ask("a") };
        assert_eq!(
            bad(Usage { check_only: false, cost: None, ratelimits: vec![d] }),
            "ratelimits.0.duration"
        );
        assert_eq!(
            bad(Usage { check_only: false, cost: None, ratelimits: vec![ask("a"); 51] }),
            "ratelimits"
        );
        assert!(
            validate_usage(&Usage {
                check_only: false,
                cost: Some(0),
                ratelimits: vec![LimitAsk { cost: Some(0), ..ask("x") }]
            })
            .is_ok()
        );
    }
}
