//! Rate-limit analytics (API-v2.md §14.1): each decision counted in memory
//! ([`crate::ratelimit_analytics::LimitRecorder`]), flushed to the database with the
//! verification counts, rolled up (namespaces) and trimmed to the heaviest identifiers,
//! pruned, and read by `keygate.getRatelimits`.

use super::*;
use crate::ratelimit_analytics::{Drained, LimitDecision, LimitRecorder};
use crate::store::{IdentifierCount, RatelimitCount};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;

/// Identifiers kept per namespace and hour (or day), by total and by denials, and the
/// most `identifiers: true` answers (by total, plus the heaviest by denials).
pub const TOP_IDENTIFIERS: usize = 100;
/// How long after an hour ends its identifiers are trimmed (late writes land first).
const TRIM_AFTER_MS: i64 = 5 * MINUTE;
/// The namespace of a key's or identity's limit named `name` (§13) in these analytics.
pub const VERIFY_NAMESPACE_PREFIX: &str = "verify:";

/// The time slices of `keygate.getRatelimits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LimitSlice {
    Minute,
    #[default]
    Hour,
    Day,
}

impl LimitSlice {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            _ => return None,
        })
    }

    fn width(self) -> i64 {
        match self {
            Self::Minute => MINUTE,
            Self::Hour => HOUR,
            Self::Day => DAY,
        }
    }
}

/// `keygate.getRatelimits`'s query.
#[derive(Debug, Clone, Default)]
pub struct RatelimitsQuery {
    /// A namespace's name or id, or `verify:<name>`.
    pub namespace: String,
    /// Unix ms (truncated to its slice's start); `None`: everything retained.
    pub start: Option<i64>,
    /// Unix ms; `None`: now.
    pub end: Option<i64>,
    pub slice: LimitSlice,
    /// The heaviest identifiers of the range instead of time buckets.
    pub identifiers: bool,
}

/// One row of `keygate.getRatelimits`: a time slice's or an identifier's decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatelimitsRow {
    pub time: Option<i64>,
    pub identifier: Option<String>,
    pub passed: u64,
    pub denied: u64,
}

impl<S: RbacStore> RbacService<S> {
    /// Counts rate-limit decisions for analytics in `recorder` ([`Self::record_limit`],
    /// flushed by [`Self::flush_analytics`]).
    pub fn with_ratelimit_analytics(mut self, recorder: Arc<LimitRecorder>) -> Self {
        self.limit_analytics = Some(recorder);
        self
    }

    /// The recorder of rate-limit decisions, when analytics are on.
    pub fn ratelimit_analytics(&self) -> Option<&Arc<LimitRecorder>> {
        self.limit_analytics.as_ref()
    }

    /// Counts a decision of a namespace, in memory (nothing when analytics are off). No I/O.
    pub fn record_limit(&self, workspace_id: &str, namespace_id: &str, identifier: &str, passed: bool) {
        if let Some(r) = &self.limit_analytics {
            let at_ms = self.clock.now_ms();
            r.record(&LimitDecision { workspace_id, namespace_id, identifier, passed, at_ms });
        }
    }

    /// Counts the limits of a verification's key and identity (§13) that applied, each
    /// under `verify:<name>`, by the key's id (or the identity's, for its limits): all
    /// passed or all denied, as they are taken.
    pub(super) fn record_verification_limits(&self, v: &Verification) {
        let (Some(r), Some(key)) = (&self.limit_analytics, &v.key) else { return };
        if v.ratelimits.is_empty() {
            return;
        }
        let passed = !v.ratelimits.iter().any(|l| l.exceeded);
        let at_ms = self.clock.now_ms();
        let identity_limits: &[RateLimitConfig] = v.identity.as_ref().map_or(&[], |i| &i.ratelimits);
        let mut namespace = String::with_capacity(64);
        for l in &v.ratelimits {
            let identifier = match (identity_limits.iter().any(|i| i.id == l.id), &v.identity) {
                (true, Some(i)) => i.identity.id.as_str(),
                _ => key.id.as_str(),
            };
            namespace.clear();
            namespace.push_str(VERIFY_NAMESPACE_PREFIX);
            namespace.push_str(&l.name);
            r.record(&LimitDecision {
                workspace_id: &key.workspace_id,
                namespace_id: &namespace,
                identifier,
                passed,
                at_ms,
            });
        }
    }

    /// Takes the rate-limit counts held in memory, as the database keeps them (see
    /// [`LimitRecorder::drain`]; `final_flush`, at shutdown: every sketch).
    pub(super) fn drain_ratelimit_analytics(
        &self,
        final_flush: bool,
    ) -> (Vec<RatelimitCount>, Vec<IdentifierCount>) {
        match &self.limit_analytics {
            Some(recorder) => stored(&recorder.drain((!final_flush).then(|| self.clock.now_ms()))),
            None => Default::default(),
        }
    }

    /// Rolls the namespace counts up as the verification counts are, keeps each closed
    /// hour's (then, after 30 days, each day's) heaviest identifiers only, and deletes
    /// what is older than the retention: how many rows it moved or deleted.
    pub(super) fn roll_up_ratelimit_analytics(
        &self,
        hours_from: i64,
        days_from: i64,
        kept_from: i64,
    ) -> Result<usize, RbacError> {
        let closed = floor(self.now() - TRIM_AFTER_MS, HOUR);
        let keep = TOP_IDENTIFIERS;
        let mut n =
            self.store.transaction(|tx| Ok(tx.roll_up_ratelimit_counts(MINUTE, HOUR, hours_from)?))?;
        n += self.store.transaction(|tx| Ok(tx.roll_up_ratelimit_counts(HOUR, DAY, days_from)?))?;
        n += self.store.transaction(|tx| Ok(tx.trim_identifier_counts(0, HOUR, closed, keep)?))?;
        n += self.store.transaction(|tx| Ok(tx.trim_identifier_counts(HOUR, DAY, days_from, keep)?))?;
        n += self.store.transaction(|tx| Ok(tx.delete_ratelimit_counts_before(kept_from)?))?;
        Ok(n)
    }

    /// `keygate.getRatelimits`: a namespace's decisions per time slice, or its heaviest
    /// identifiers over the range. Needs `ratelimit.*.read_analytics` or
    /// `ratelimit.<namespaceId>.read_analytics`.
    pub fn get_ratelimits(
        &self,
        p: &Principal,
        q: &RatelimitsQuery,
    ) -> Result<Vec<RatelimitsRow>, RbacError> {
        keygate_domain::validate_namespace_name("namespace", &q.namespace)?;
        let any = "ratelimit.*.read_analytics";
        let held = |ns: &str| p.holds(any) || p.holds(&format!("ratelimit.{ns}.read_analytics"));
        if !p.holds(any)
            && !p.permissions().any(|x| x.starts_with("ratelimit.") && x.ends_with(".read_analytics"))
        {
            return Err(RbacError::missing(&[any]));
        }
        let end = q.end.unwrap_or_else(|| self.now().max(q.start.unwrap_or(0)));
        let width = match q.identifiers {
            true => HOUR,
            false => q.slice.width(),
        };
        let start = floor(q.start.unwrap_or(0).max(0), width);
        if start > end {
            return Err(ValidationError::new("start", "must be before end").into());
        }
        let ws = p.workspace_id.as_str();
        let namespace_id = match self.find_namespace(ws, &q.namespace)? {
            Some(ns) => ns.id,
            None if q.namespace.starts_with(VERIFY_NAMESPACE_PREFIX) => q.namespace.clone(),
            None => return Err(RbacError::not_found(Resource::Namespace, &q.namespace)),
        };
        if !held(&namespace_id) {
            return Err(RbacError::InsufficientPermissions(format!(
                "the root key lacks the permission {any} (or ratelimit.{namespace_id}.read_analytics)"
            )));
        }
        if q.identifiers {
            let (by_total, by_denied) = self.store.snapshot(|tx| {
                let range = (start, end);
                Ok((
                    tx.top_identifiers(ws, &namespace_id, range, false, TOP_IDENTIFIERS)?,
                    tx.top_identifiers(ws, &namespace_id, range, true, TOP_IDENTIFIERS)?,
                ))
            })?;
            let mut rows: Vec<RatelimitsRow> = Vec::with_capacity(by_total.len());
            for c in by_total.into_iter().chain(by_denied.into_iter().filter(|c| c.denied > 0)) {
                if !rows.iter().any(|r| r.identifier.as_deref() == Some(c.identifier.as_str())) {
                    rows.push(RatelimitsRow {
                        time: None,
                        identifier: Some(c.identifier),
                        passed: c.passed,
                        denied: c.denied,
                    });
                }
            }
            rows.sort_by(|a, b| {
                (b.passed + b.denied, b.denied)
                    .cmp(&(a.passed + a.denied, a.denied))
                    .then_with(|| a.identifier.cmp(&b.identifier))
            });
            return Ok(rows);
        }
        let counts = self.store.snapshot(|tx| Ok(tx.ratelimit_counts(ws, &namespace_id, start, end)?))?;
        let mut slices: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for c in counts {
            let e = slices.entry(floor(c.bucket, width)).or_default();
            e.0 += c.passed;
            e.1 += c.denied;
        }
        Ok(slices
            .into_iter()
            .filter(|(_, (passed, denied))| passed + denied > 0)
            .map(|(time, (passed, denied))| RatelimitsRow {
                time: Some(time),
                identifier: None,
                passed,
                denied,
            })
            .collect())
    }
}

impl<S: RbacStore> RbacService<S> {
    /// The workspace's rate-limit decisions per namespace in `start..=end` (the
    /// dashboard's overview): `(namespace name, passed, denied)`, most denied first, at most
    /// `limit`; the limits of keys as `verify:<name>`. Needs `ratelimit.*.read_analytics`.
    pub fn ratelimit_totals(
        &self,
        p: &Principal,
        (start, end): (i64, i64),
        limit: usize,
    ) -> Result<Vec<(String, u64, u64)>, RbacError> {
        let any = "ratelimit.*.read_analytics";
        if !p.holds(any) {
            return Err(RbacError::missing(&[any]));
        }
        let ws = p.workspace_id.as_str();
        self.store.snapshot(|tx| {
            let mut totals = tx.ratelimit_namespace_totals(ws, start, end)?;
            totals.sort_by(|a, b| {
                b.2.cmp(&a.2).then_with(|| (b.1 + b.2).cmp(&(a.1 + a.2))).then_with(|| a.0.cmp(&b.0))
            });
            totals.truncate(limit);
            totals
                .into_iter()
                .map(|(ns, passed, denied)| {
                    let name = match tx.namespace_by_id(ws, &ns)? {
                        Some(n) => n.name,
                        None => ns,
                    };
                    Ok((name, passed, denied))
                })
                .collect()
        })
    }
}

fn floor(t: i64, width: i64) -> i64 {
    t - t.rem_euclid(width)
}

/// Drained counts as the database keeps them (open hours' identifiers at width 0).
fn stored(d: &Drained) -> (Vec<RatelimitCount>, Vec<IdentifierCount>) {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let counts = d
        .minutes
        .iter()
        .map(|m| RatelimitCount {
            workspace_id: m.workspace_id.to_string(),
            namespace_id: m.namespace_id.to_string(),
            width: MINUTE,
            bucket: int(m.minute),
            passed: m.passed,
            denied: m.denied,
        })
        .collect();
    let identifiers = d
        .identifiers
        .iter()
        .map(|i| IdentifierCount {
            workspace_id: i.workspace_id.to_string(),
            namespace_id: i.namespace_id.to_string(),
            width: 0,
            bucket: int(i.hour),
            identifier: i.identifier.to_string(),
            passed: i.passed,
            denied: i.denied,
        })
        .collect();
    (counts, identifiers)
}
