//! Which rate limits of a key and its identity apply to a verification (API-v2.md §13.1,
//! §13.2), and their taking: all or nothing through the rate-limit engine, given back when
//! the verification does not pass after all.

use keygate_domain::{MAX_SAFE_INTEGER, ValidationError, check_len, check_limit_bounds};
use keygate_ratelimit::{Algorithm, BudgetKey, Decision, Entry, LimitRequest, RateLimitStore, StoreError};
use keygate_rbac::{CachedKey, LimitOutcome, MAX_LIMIT_NAME_CHARS, RateLimitConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a verification asks to spend (API-v2.md §13): its credit cost and the rate limits
/// it names. The default: cost 1, the auto-applied limits only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Usage {
    /// `None`: 1.
    pub cost: Option<u64>,
    pub ratelimits: Vec<LimitAsk>,
    /// Spend nothing: stop after the permission check (a VALID answer says only that the
    /// key may pass; a caller spends with a second verification).
    pub check_only: bool,
}

/// A rate limit a verification names: a limit of the key or its identity by name (its
/// `limit`/`duration` replaced for this call when given), or, found nowhere, an ad-hoc
/// limit of the key (both given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitAsk {
    pub name: String,
    /// `None`: 1.
    pub cost: Option<u64>,
    pub limit: Option<u64>,
    pub duration: Option<u64>,
    /// Applied only if the key or its identity has a limit of this name (v1's `ratelimit`,
    /// which names the `default` limit); never ad-hoc.
    pub if_present: bool,
}

impl LimitAsk {
    /// The limit of that name, at cost 1, with its stored values.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), cost: None, limit: None, duration: None, if_present: false }
    }
}

impl Usage {
    /// The credits the verification `v` that asked this was charged (API-v2.md §22): its
    /// cost when it is VALID and spent credits (its key has them), else nothing.
    pub fn charged(&self, v: &keygate_rbac::Verification) -> u64 {
        match v.valid() && v.credits.is_some() && !self.check_only {
            true => self.cost.unwrap_or(1),
            false => 0,
        }
    }
}

/// The most rate limits one verification may name.
pub const MAX_VERIFY_RATELIMITS: usize = 50;

/// A request's usage, before any key is looked up: names of 1–128 characters, each once;
/// `limit` and `duration` within a stored limit's bounds; costs within 0..2^53 − 1.
pub fn validate_usage(usage: &Usage) -> Result<(), ValidationError> {
    let max_cost = MAX_SAFE_INTEGER;
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
        check_limit_bounds(at, a.limit, a.duration)?;
    }
    Ok(())
}

/// A rate limit that applies to one verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// The stored limit's id, or `adhoc:<name>` (shared with the answers' outcomes).
    id: Arc<str>,
    name: Arc<str>,
    auto_apply: bool,
    /// An identity's limit (its budget shared by the identity's keys), not the key's own.
    pub(crate) identity: bool,
    /// The budget's identifier: the stored limit's id (a key's limit is the key's, an
    /// identity's is shared by its keys), or `<key id>:<name>` for an ad-hoc limit.
    budget: String,
    pub(crate) request: LimitRequest,
    /// What it decides by (an ad-hoc limit: `fixed`).
    pub(crate) algorithm: Algorithm,
}

/// Which limits apply (§13.1), sorted by name: every auto-applied limit of the key and of
/// its identity (a key limit hides an identity limit of the same name), cost 1; and every
/// limit the request names, found by name among the key's, then the identity's, with the
/// request's `limit`/`duration` over the stored ones; a name found nowhere is an ad-hoc
/// limit of the key, which needs both (else 400 at `ratelimits.<i>`).
pub(crate) fn applied_limits(key: &CachedKey, asks: &[LimitAsk]) -> Result<Vec<Applied>, ValidationError> {
    let identity: &[RateLimitConfig] = key.identity().map_or(&[], |i| &i.ratelimits);
    let find = |name: &str| {
        key.ratelimits().iter().find(|l| l.name == name).or_else(|| identity.iter().find(|l| l.name == name))
    };
    let of_identity = |l: &RateLimitConfig| !key.ratelimits().iter().any(|k| k.id == l.id);
    let stored = |l: &RateLimitConfig, cost: u64, limit: Option<u64>, duration: Option<u64>| Applied {
        id: l.id.as_str().into(),
        name: l.name.as_str().into(),
        auto_apply: l.auto_apply,
        identity: of_identity(l),
        budget: l.id.clone(),
        request: LimitRequest {
            limit: limit.unwrap_or(l.limit),
            duration: duration.unwrap_or(l.duration),
            cost,
        },
        algorithm: l.algorithm,
    };
    let mut out: BTreeMap<&str, Applied> = BTreeMap::new();
    for l in key.ratelimits().iter().chain(identity).filter(|l| l.auto_apply) {
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
                id: format!("adhoc:{}", a.name).into(),
                name: a.name.as_str().into(),
                auto_apply: false,
                identity: false,
                budget: format!("{}:{}", key.id(), a.name),
                request: LimitRequest { limit, duration, cost },
                algorithm: Algorithm::Fixed,
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

/// The budgets of an identity's limits live in one namespace per identity, never a
/// `ratelimit.*` namespace's. The closing brace makes the Redis store's cluster hash tag end
/// there, so that every budget of one identity shares a slot (and one all-or-nothing script
/// call). A key's own limits (and its ad-hoc ones) live in the namespace its credit ledger
/// names (in the slot of its credit counter when that is in Redis, so one script takes
/// both); else, in a shared store, in `vl:<key id>}` (one slot); else, in the in-process
/// store, in [`LOCAL_OWN_NAMESPACE`].
fn identity_namespace(identity_id: &str) -> Arc<String> {
    Arc::new(format!("vl:{identity_id}}}"))
}

/// The namespace of every key's own limits in the in-process store. The budgets'
/// identifiers tell the keys apart (a stored limit's id, unique; `<key id>:<name>` for an
/// ad-hoc limit), so the keys' budgets of one duration are one class of the store, one
/// table per shard, as a `ratelimit.*` namespace's identifiers are: a namespace per key
/// made each key a class of its own, its own small table, so a decision missed the cache on
/// the shard's class index, the class and its table, and all keys' limits of one name
/// were in one shard, behind one lock. (Never a namespace's id: those start `rlns_`; the
/// identities' start `vl:`.)
pub(crate) const LOCAL_OWN_NAMESPACE: &str = "vl";

/// The namespace of `key_id`'s own limits where no credit ledger takes them: in a shared
/// store (`remote`), the key's own, `vl:<key id>}` (one cluster slot, so its limits are one
/// all-or-nothing call); in the in-process store, `local` (which names
/// [`LOCAL_OWN_NAMESPACE`], one allocation shared by all keys).
pub(crate) fn own_namespace(key_id: &str, remote: bool, local: &Arc<String>) -> Arc<String> {
    match remote {
        true => Arc::new(format!("vl:{key_id}}}")),
        false => local.clone(),
    }
}

/// What a cached key's verifications need of its limits, worked out once per snapshot:
/// its budgets' namespaces, the limits that apply when a request names none, and its
/// credit counter (the memory ledger's, once found).
#[derive(Debug, Clone)]
pub(crate) struct KeyLimits {
    /// The key's own limits' (and ad-hoc limits') namespace.
    pub(crate) own: Arc<String>,
    /// Its identity's limits' namespace (`own` without an identity).
    pub(crate) identity: Arc<String>,
    pub(crate) auto: Arc<[Applied]>,
    pub(crate) counter: std::sync::OnceLock<Arc<crate::ledger::memory::Counter>>,
}

impl KeyLimits {
    /// `own`: the namespace of the key's own limits.
    /// What a key with nothing of its own to take holds: `own`, the namespace every key
    /// shares, and no limits.
    pub(crate) fn plain(own: Arc<String>, none: Arc<[Applied]>) -> Self {
        Self { identity: own.clone(), own, auto: none, counter: Default::default() }
    }

    /// `none`: an empty list of limits to share (most keys have no auto-applied limit).
    pub(crate) fn of(key: &CachedKey, own: Arc<String>, none: &Arc<[Applied]>) -> Self {
        let auto = applied_limits(key, &[]).unwrap_or_default();
        let auto = if auto.is_empty() { none.clone() } else { auto.into() };
        // An identity's namespace only where it has limits to take in it.
        let identity = match key.identity().filter(|i| !i.ratelimits.is_empty()) {
            Some(i) => identity_namespace(&i.identity.id),
            None => own.clone(),
        };
        Self { own, identity, auto, counter: Default::default() }
    }
}

/// Which of a verification's limits are taken through the rate-limit store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// All of them.
    All,
    /// Its identity's only: the credit ledger takes the key's own with the credit spend.
    Identity,
}

/// The budgets a verification took, to give back if it does not pass after all.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) limiter: Arc<dyn RateLimitStore>,
    /// The key's namespaces (one reference count, the key's own: the in-process store's
    /// namespace of all keys' limits is one allocation, which every verification would
    /// otherwise count on one cache line).
    pub(crate) key: Arc<KeyLimits>,
    pub(crate) limits: Arc<[Applied]>,
    pub(crate) held: Held,
    pub(crate) now: u64,
}

/// What taking a verification's limits came to: whether all fitted, and a decision per
/// limit (in order; `None` for the limits the credit ledger takes, when all fitted).
pub(crate) struct TakeOutcome {
    pub(crate) passed: bool,
    pub(crate) decisions: Vec<Option<Decision>>,
}

impl Taken {
    /// Whether `l` is taken through the rate-limit store (and given back there).
    pub(crate) fn holds(&self, l: &Applied) -> bool {
        self.held == Held::All || l.identity
    }

    fn entry<'a>(&'a self, l: &'a Applied, cost: u64) -> Entry<'a> {
        let namespace_id = if l.identity { &self.key.identity } else { &self.key.own };
        let key = BudgetKey {
            namespace_id,
            identifier: &l.budget,
            duration: l.request.duration,
            algorithm: l.algorithm,
        };
        (key, LimitRequest { cost, ..l.request })
    }

    /// The key's own limits as the credit ledger takes them (with the spend), when it does.
    pub(crate) fn for_ledger(&self) -> Vec<Entry<'_>> {
        match self.held {
            Held::All => Vec::new(),
            Held::Identity => {
                self.limits.iter().filter(|l| !l.identity).map(|l| self.entry(l, l.request.cost)).collect()
            }
        }
    }

    /// Takes the limits it holds, all or nothing, in two groups, each one script call in
    /// one slot: the identity's (shared by its keys, in the identity's slot), then the
    /// key's own (in the key's). A group that does not fit gives back the groups before it;
    /// the groups after it are only read (at cost 0: how much is left), as are the key's
    /// own limits the ledger takes when its identity's did not fit. A group between two
    /// others is never seen half-taken by this verification's answer; concurrent ones may
    /// see a budget taken for an instant and given back (a denial, never an admission).
    pub(crate) fn take(&self) -> Result<TakeOutcome, StoreError> {
        let mut decisions = vec![None; self.limits.len()];
        let mut passed = true;
        // The group taken before this one (by whether it is the identity's).
        let mut before: Option<bool> = None;
        for identity in [true, false] {
            let Some(first) = self.limits.iter().find(|l| l.identity == identity) else { continue };
            if passed && !self.holds(first) {
                continue;
            }
            let fitted = self.all_or_nothing(identity, passed, &mut decisions)?;
            if passed && !fitted {
                passed = false;
                if let Some(g) = before {
                    self.give_back_of(|l| l.identity == g);
                    for (d, l) in
                        decisions.iter_mut().zip(self.limits.iter()).filter(|(_, l)| l.identity == g)
                    {
                        if let Some(d) = d.as_mut() {
                            d.remaining = d.remaining.saturating_add(l.request.cost).min(d.limit);
                        }
                    }
                }
            }
            before = Some(identity);
        }
        Ok(TakeOutcome { passed, decisions })
    }

    /// One group's all-or-nothing call (the identity's limits or the key's own; a single
    /// limit: the one-budget call, with no allocation), its decisions put in `decisions`;
    /// whether it fitted. After a group that did not fit (`passed` false) the group is only
    /// read, at cost 0, and each decision says whether the limit's own cost would have
    /// fitted.
    fn all_or_nothing(
        &self,
        identity: bool,
        passed: bool,
        decisions: &mut [Option<Decision>],
    ) -> Result<bool, StoreError> {
        let in_group = |l: &&Applied| l.identity == identity;
        let cost = |l: &Applied| if passed { l.request.cost } else { 0 };
        let read = |d: Decision, l: &Applied| match passed {
            true => d,
            false => Decision { success: fits(d.remaining, l.request.cost), ..d },
        };
        let mut group = self.limits.iter().zip(decisions.iter_mut()).filter(|(l, _)| in_group(l));
        let (fitted, got) = match self.limits.iter().filter(in_group).count() {
            1 => {
                let (l, slot) = group.next().expect("counted");
                let (key, req) = self.entry(l, cost(l));
                let d = self.limiter.limit(key, req, self.now)?;
                *slot = Some(read(d, l));
                return Ok(d.success);
            }
            _ => {
                let entries: Vec<Entry<'_>> =
                    self.limits.iter().filter(in_group).map(|l| self.entry(l, cost(l))).collect();
                match self.limiter.limit_all(&entries, &[], self.now)? {
                    Some(o) => (o.passed, o.decisions),
                    None => {
                        return Err(StoreError::Unavailable(
                            "an all-or-nothing call answered nothing".into(),
                        ));
                    }
                }
            }
        };
        for ((l, slot), d) in group.zip(got) {
            *slot = Some(read(d, l));
        }
        Ok(fitted)
    }

    /// Gives back, through the rate-limit store, the limits `which` picks.
    fn give_back_of(&self, which: impl Fn(&Applied) -> bool) {
        let entries: Vec<Entry<'_>> =
            self.limits.iter().filter(|l| which(l)).map(|l| self.entry(l, l.request.cost)).collect();
        if entries.is_empty() {
            return;
        }
        if let Err(e) = self.limiter.give_back(&entries, self.now) {
            log::warn!("verification: rate-limit budgets not given back: {e}");
        }
    }

    /// Gives back what it took through the rate-limit store.
    pub(crate) fn give_back(&self) {
        self.give_back_of(|l| self.holds(l));
    }
}

/// Whether a budget with `remaining` left takes `cost` (the decision rule: cost 0 passes
/// while anything is left).
fn fits(remaining: u64, cost: u64) -> bool {
    if cost == 0 { remaining > 0 } else { remaining >= cost }
}

/// The limits' part of the answer: each limit with its decision.
pub(crate) fn outcomes(limits: &[Applied], decisions: &[Option<Decision>]) -> Vec<LimitOutcome> {
    limits
        .iter()
        .zip(decisions)
        .filter_map(|(l, d)| d.as_ref().map(|d| (l, d)))
        .map(|(l, d)| LimitOutcome {
            id: Arc::clone(&l.id),
            name: Arc::clone(&l.name),
            limit: d.limit,
            duration: l.request.duration,
            reset: d.reset,
            remaining: d.remaining,
            exceeded: !d.success,
            auto_apply: l.auto_apply,
            identity: l.identity,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keygate_rbac::{Identity, IdentityView, Interner, Key, KeySummary};

    fn limit(id: &str, name: &str, auto_apply: bool) -> RateLimitConfig {
        let algorithm = Algorithm::Fixed;
        RateLimitConfig {
            id: id.into(),
            name: name.into(),
            limit: 10,
            duration: 60_000,
            auto_apply,
            algorithm,
        }
    }

    fn summary(key: Vec<RateLimitConfig>, shared: Vec<RateLimitConfig>) -> CachedKey {
        let key_row = Key {
            allowed_ips: None,
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
            updated_at: 0,
        };
        let identity = Identity {
            allowed_ips: None,
            id: "id_1".into(),
            workspace_id: "ws".into(),
            external_id: "acme".into(),
            meta: None,
            created_at: 0,
            updated_at: 0,
        };
        let summary = KeySummary {
            api_allowed_ips: None,
            key: key_row,
            permissions: vec![],
            roles: vec![],
            identity: Some(IdentityView { identity, ratelimits: shared }),
            ratelimits: key,
            last_used: None,
        };
        CachedKey::new(summary, &Interner::default())
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
        let ids: Vec<&str> = got.iter().map(|a| &*a.id).collect();
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
            (&*got[0].id, got[0].request),
            ("rl_k1", LimitRequest { limit: 99, duration: 60_000, cost: 3 })
        );
        assert_eq!(
            (got[1].budget.as_str(), got[1].request),
            ("rl_i2", LimitRequest { limit: 10, duration: 1_000, cost: 0 })
        );
        assert_eq!((&*got[2].id, got[2].budget.as_str()), ("adhoc:zz", "key_1:zz"));
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
