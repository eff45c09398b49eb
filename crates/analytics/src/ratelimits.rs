//! The read side of rate-limit analytics (API-v2.md §14.1): `keygate.getRatelimits`, a
//! namespace's decisions per time slice or its heaviest identifiers, and the dashboard's
//! totals per namespace. Recorded by [`crate::limit_recorder`], written by
//! [`crate::flush`].

use crate::{AnalyticsService, AnalyticsStore, DAY, HOUR, MINUTE, floor};
use keygate_domain::ValidationError;
use keygate_rbac::{Principal, RbacError, Resource};
use std::collections::BTreeMap;

/// Identifiers kept per namespace and hour (or day), by total and by denials, and the
/// most `identifiers: true` answers (by total, plus the heaviest by denials).
pub const TOP_IDENTIFIERS: usize = 100;
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

impl<S: AnalyticsStore> AnalyticsService<S> {
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
        let namespace_id = match self.rbac.find_namespace(ws, &q.namespace)? {
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
            let (by_total, by_denied) = self.rbac.store().analytics_snapshot(|tx| {
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
        let counts = self
            .rbac
            .store()
            .analytics_snapshot(|tx| Ok(tx.ratelimit_counts(ws, &namespace_id, start, end)?))?;
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
        self.rbac.store().analytics_snapshot(|tx| {
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
