//! The read side of verification analytics (API-v2.md §14): `analytics.getVerifications`
//! (v1's parameters), v1's `keys.getVerifications`, a key's `lastUsed`, and the dashboard's
//! charts and top keys, each restricted to what the root key may read.

use crate::store::{VerificationFilter, VerificationSums};
use crate::{AnalyticsService, AnalyticsStore, DAY, HOUR, floor};
use keygate_domain::{
    IdPrefix, MAX_NAME_CHARS, ValidationError, calendar, check_len, has_prefix, validate_key_id,
};
use keygate_rbac::{ApiAccess, KeySummary, Principal, RbacError, Resource, VerifyCode};
use std::collections::{BTreeMap, HashMap};

/// A time slice of `analytics.getVerifications`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSlice {
    Hour,
    Day,
    Month,
}

/// `analytics.getVerifications`'s query (API-v2.md §14; Unkey v1's parameters).
#[derive(Debug, Clone, Default)]
pub struct VerificationsQuery {
    pub api_id: String,
    pub external_id: Option<String>,
    /// Only these keys (none: all).
    pub key_ids: Vec<String>,
    /// Only counts carrying all these tags.
    pub tags: Vec<String>,
    /// Unix ms (truncated to the slice's start); `None`: everything retained.
    pub start: Option<i64>,
    /// Unix ms; `None`: now.
    pub end: Option<i64>,
    /// One row per time slice (of this size); `None`: no time grouping.
    pub time: Option<TimeSlice>,
    pub by_key: bool,
    pub by_identity: bool,
    pub by_tags: bool,
    pub by_tag: bool,
    pub limit: Option<usize>,
    /// A row field (`time`, `valid`, ..., `total`) and whether descending.
    pub order_by: Option<(OrderField, bool)>,
}

/// What `orderBy` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderField {
    Time,
    Outcome(Option<VerifyCode>),
    /// `unauthorized`: a code keygate never answers (always 0).
    Never,
    Total,
}

impl OrderField {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "time" => Self::Time,
            "total" => Self::Total,
            "unauthorized" => Self::Never,
            other => Self::Outcome(Some(*VerifyCode::ALL.iter().find(|c| field_name(**c) == other)?)),
        })
    }
}

/// The row field of a code.
pub fn field_name(code: VerifyCode) -> &'static str {
    match code {
        VerifyCode::Valid => "valid",
        VerifyCode::NotFound => "notFound",
        VerifyCode::Disabled => "disabled",
        VerifyCode::Expired => "expired",
        VerifyCode::InsufficientPermissions => "insufficientPermissions",
        VerifyCode::UsageExceeded => "usageExceeded",
        VerifyCode::RateLimited => "rateLimited",
        VerifyCode::Forbidden => "forbidden",
    }
}

/// One row of `analytics.getVerifications`: what it is grouped by, and the counts per code.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VerificationsRow {
    pub time: Option<i64>,
    pub key_id: Option<String>,
    /// The identity's id and externalId.
    pub identity: Option<(String, String)>,
    pub tags: Option<Vec<String>>,
    pub tag: Option<String>,
    /// Counts in [`VerifyCode::ALL`]'s order.
    pub counts: [u64; VerifyCode::ALL.len()],
    /// The credits charged (API-v2.md §22).
    pub spent_credits: u64,
}

impl VerificationsRow {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn count(&self, code: VerifyCode) -> u64 {
        VerifyCode::ALL.iter().position(|c| *c == code).map_or(0, |i| self.counts[i])
    }
}

/// A bucket of the dashboard's charts ([`AnalyticsService::verification_buckets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerificationBucket {
    /// Its start (Unix ms).
    pub start: i64,
    /// Counts in [`VerifyCode::ALL`]'s order.
    pub counts: [u64; VerifyCode::ALL.len()],
    /// The credits charged (API-v2.md §22).
    pub spent_credits: u64,
}

/// Whose verifications v1's `keys.getVerifications` counts.
#[derive(Debug, Clone, Copy)]
pub enum KeyOrOwner<'a> {
    Key(&'a str),
    /// The keys of the identity with this externalId (v1's `ownerId`).
    Owner(&'a str),
}

/// A day of v1's `keys.getVerifications`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DailyVerifications {
    pub time: i64,
    pub success: u64,
    pub rate_limited: u64,
    pub usage_exceeded: u64,
}

/// How many days of day rows are kept by default.
pub const DEFAULT_RETENTION_DAYS: u64 = 90;

impl<S: AnalyticsStore> AnalyticsService<S> {
    /// `analytics.getVerifications`: the API's verification counts, grouped as `q` asks.
    /// Needs `api.*.read_analytics` or `api.<apiId>.read_analytics`.
    pub fn get_verifications(
        &self,
        p: &Principal,
        q: &VerificationsQuery,
    ) -> Result<Vec<VerificationsRow>, RbacError> {
        check_len("apiId", &q.api_id, MAX_NAME_CHARS)?;
        if q.by_tag && q.by_tags {
            return Err(ValidationError::new("groupBy", "cannot group by tag and tags at once").into());
        }
        match ApiAccess::of(p, "read_analytics") {
            Some(access) if access.admits(Some(&q.api_id)) => {}
            Some(_) => return Err(ApiAccess::denied("read_analytics", Some(&q.api_id))),
            None => return Err(ApiAccess::denied("read_analytics", None)),
        }
        self.fold_for_read()?;
        // No `end`: now, or (a `start` in the future) an empty range.
        let end = q.end.unwrap_or_else(|| self.now().max(q.start.unwrap_or(0)));
        let slice_start = |t: i64| match q.time.unwrap_or(TimeSlice::Hour) {
            TimeSlice::Hour => floor(t, HOUR),
            TimeSlice::Day => floor(t, DAY),
            TimeSlice::Month => calendar::month_start(t),
        };
        let start = slice_start(q.start.unwrap_or(0).max(0));
        if start > end {
            return Err(ValidationError::new("start", "must be before end").into());
        }
        let ws = p.workspace_id.as_str();
        let (counts, identities) = self.rbac.store().analytics_snapshot(|tx| {
            if tx.get_api(ws, &q.api_id)?.is_none() {
                return Err(RbacError::not_found(Resource::Api, &q.api_id));
            }
            let identity = match &q.external_id {
                Some(e) => Some(tx.identity_by_external_id(ws, e)?.ok_or_else(|| {
                    RbacError::NotFound(Resource::Identity, format!("identity {e} not found"))
                })?),
                None => None,
            };
            let filter = VerificationFilter {
                workspace_id: ws,
                api_id: Some(&q.api_id),
                key_ids: &q.key_ids,
                identity_id: identity.as_ref().map(|i| i.id.as_str()),
                start,
                end,
                sums: VerificationSums {
                    width: q.time.map(|t| match t {
                        TimeSlice::Hour => HOUR,
                        TimeSlice::Day | TimeSlice::Month => DAY,
                    }),
                    by_api: false,
                    by_key: q.by_key,
                    by_identity: q.by_identity,
                    by_tags: q.by_tags || q.by_tag || !q.tags.is_empty(),
                },
            };
            let counts = tx.verification_counts(&filter)?;
            let mut identities = HashMap::new();
            if q.by_identity {
                for c in &counts {
                    if !c.identity_id.is_empty() && !identities.contains_key(&c.identity_id) {
                        let external =
                            tx.identity_by_id(ws, &c.identity_id)?.map(|i| i.external_id).unwrap_or_default();
                        identities.insert(c.identity_id.clone(), external);
                    }
                }
            }
            Ok((counts, identities))
        })?;
        let mut rows: HashMap<Group, ([u64; VerifyCode::ALL.len()], u64)> = HashMap::new();
        for c in counts {
            if !q.tags.iter().all(|t| c.tags.contains(t)) || (q.by_identity && c.identity_id.is_empty()) {
                continue;
            }
            let Some(code) = VerifyCode::ALL.iter().position(|k| k.as_str() == c.outcome) else { continue };
            let time = q.time.map(|_| slice_start(c.bucket));
            // Keys not found (no id) are one group, its row without a keyId.
            let key = q.by_key.then(|| c.key_id.clone()).filter(|id| !id.is_empty());
            let identity = q.by_identity.then(|| c.identity_id.clone());
            let tag_sets: Vec<Option<String>> = match q.by_tag {
                true => c.tags.iter().cloned().map(Some).collect(),
                false => vec![None],
            };
            let tags = q.by_tags.then(|| c.tags.clone());
            for tag in tag_sets {
                let (counts, spent) =
                    rows.entry((time, key.clone(), identity.clone(), tags.clone(), tag)).or_default();
                counts[code] += c.count;
                *spent += c.spent_credits;
            }
        }
        let mut out: Vec<VerificationsRow> = rows
            .into_iter()
            .map(|((time, key_id, identity, tags, tag), (counts, spent_credits))| VerificationsRow {
                time,
                key_id,
                identity: identity.map(|id| {
                    let external = identities.get(&id).cloned().unwrap_or_default();
                    (id, external)
                }),
                tags,
                tag,
                counts,
                spent_credits,
            })
            .collect();
        // Time ascending, then the groups in a stable order; then `orderBy`, if given.
        out.sort_by(|a, b| {
            (a.time, &a.key_id, &a.identity, &a.tags, &a.tag).cmp(&(
                b.time,
                &b.key_id,
                &b.identity,
                &b.tags,
                &b.tag,
            ))
        });
        if let Some((field, desc)) = q.order_by {
            let value = |r: &VerificationsRow| match field {
                OrderField::Time => r.time.unwrap_or(0).max(0) as u64,
                OrderField::Total => r.total(),
                OrderField::Never | OrderField::Outcome(None) => 0,
                OrderField::Outcome(Some(code)) => r.count(code),
            };
            out.sort_by(|a, b| match desc {
                true => value(b).cmp(&value(a)),
                false => value(a).cmp(&value(b)),
            });
        }
        if let Some(limit) = q.limit {
            out.truncate(limit);
        }
        Ok(out)
    }

    /// The workspace's verifications per outcome (or one key's: `key_id`), in buckets of
    /// `width` ms starting in `start..=end` (the dashboard's charts), ascending. Needs
    /// `read_analytics` of the
    /// key's API, or for the workspace's counts `api.*.read_analytics`; a root key holding
    /// only `api.<apiId>.read_analytics` permissions gets the sum of those APIs.
    pub fn verification_buckets(
        &self,
        p: &Principal,
        key_id: Option<&str>,
        (start, end): (i64, i64),
        width: i64,
    ) -> Result<Vec<VerificationBucket>, RbacError> {
        let access =
            ApiAccess::of(p, "read_analytics").ok_or_else(|| ApiAccess::denied("read_analytics", None))?;
        self.fold_for_read()?;
        let keys: Vec<String> = key_id.map(str::to_string).into_iter().collect();
        if let Some(id) = key_id {
            validate_key_id("keyId", id)?;
            let key = match has_prefix(id, IdPrefix::Key) {
                true => self.rbac.store().analytics_read(|tx| Ok(tx.get_key(&p.workspace_id, id)?))?,
                false => None,
            };
            let key = key.ok_or_else(|| RbacError::not_found(Resource::Key, id))?;
            if !access.admits(key.api_id.as_deref()) {
                return Err(ApiAccess::denied("read_analytics", key.api_id.as_deref()));
            }
        }
        let apis = match key_id {
            Some(_) => vec![None],
            None => access.scope(),
        };
        let counts = self.rbac.store().analytics_snapshot(|tx| {
            let mut counts = Vec::new();
            for api_id in &apis {
                let filter = VerificationFilter {
                    workspace_id: &p.workspace_id,
                    api_id: *api_id,
                    key_ids: &keys,
                    identity_id: None,
                    start: floor(start, width),
                    end,
                    sums: VerificationSums { width: Some(width), ..VerificationSums::default() },
                };
                counts.extend(tx.verification_counts(&filter)?);
            }
            Ok(counts)
        })?;
        let mut buckets: BTreeMap<i64, VerificationBucket> = BTreeMap::new();
        for c in counts {
            if let Some(i) = VerifyCode::ALL.iter().position(|k| k.as_str() == c.outcome) {
                let b = buckets
                    .entry(c.bucket)
                    .or_insert_with(|| VerificationBucket { start: c.bucket, ..Default::default() });
                b.counts[i] += c.count;
                b.spent_credits += c.spent_credits;
            }
        }
        Ok(buckets.into_values().collect())
    }

    /// The workspace's `limit` most verified keys and identities in `start..=end` (the
    /// dashboard's overview): `(id, total, valid)` each, heaviest first; an identity as
    /// `(its id, its externalId)`. Needs `api.*.read_analytics`, or counts the APIs of the
    /// root key's `api.<apiId>.read_analytics` permissions.
    #[allow(clippy::type_complexity)]
    pub fn top_verified(
        &self,
        p: &Principal,
        (start, end): (i64, i64),
        limit: usize,
    ) -> Result<(Vec<(String, u64, u64)>, Vec<((String, String), u64, u64)>), RbacError> {
        let access =
            ApiAccess::of(p, "read_analytics").ok_or_else(|| ApiAccess::denied("read_analytics", None))?;
        self.fold_for_read()?;
        let ws = p.workspace_id.as_str();
        let counts = self.rbac.store().analytics_snapshot(|tx| {
            let mut counts = Vec::new();
            for api_id in access.scope() {
                let filter = VerificationFilter {
                    workspace_id: ws,
                    api_id,
                    key_ids: &[],
                    identity_id: None,
                    start,
                    end,
                    sums: VerificationSums { by_key: true, by_identity: true, ..VerificationSums::default() },
                };
                counts.extend(tx.verification_counts(&filter)?);
            }
            Ok(counts)
        })?;
        let mut keys: HashMap<String, (u64, u64)> = HashMap::new();
        let mut identities: HashMap<String, (u64, u64)> = HashMap::new();
        for c in counts {
            let valid = if c.outcome == VerifyCode::Valid.as_str() { c.count } else { 0 };
            for (map, id) in [(&mut keys, &c.key_id), (&mut identities, &c.identity_id)] {
                if !id.is_empty() {
                    let e = map.entry(id.clone()).or_default();
                    e.0 += c.count;
                    e.1 += valid;
                }
            }
        }
        let top = |m: HashMap<String, (u64, u64)>| {
            let mut v: Vec<(String, u64, u64)> = m.into_iter().map(|(id, (t, ok))| (id, t, ok)).collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(limit);
            v
        };
        let top_identities = top(identities);
        let named = self.rbac.store().analytics_read(|tx| {
            top_identities
                .into_iter()
                .map(|(id, t, ok)| {
                    let external = tx.identity_by_id(ws, &id)?.map(|i| i.external_id).unwrap_or_default();
                    Ok(((id, external), t, ok))
                })
                .collect::<Result<Vec<_>, RbacError>>()
        })?;
        Ok((top(keys), named))
    }

    /// v1 `keys.getVerifications`: one key's verifications (or the keys' of the identity
    /// whose externalId is `Owner`'s) per day, `start..=end` (Unix ms; `start` truncated
    /// to its day; default everything retained, until now). Needs `read_analytics` for
    /// all APIs or the key's (an identity's keys in other APIs are left out).
    pub fn key_verifications(
        &self,
        p: &Principal,
        who: KeyOrOwner<'_>,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Result<Vec<DailyVerifications>, RbacError> {
        match who {
            KeyOrOwner::Key(id) => validate_key_id("keyId", id)?,
            KeyOrOwner::Owner(owner) => check_len("ownerId", owner, MAX_NAME_CHARS)?,
        }
        let access =
            ApiAccess::of(p, "read_analytics").ok_or_else(|| ApiAccess::denied("read_analytics", None))?;
        let end = end.unwrap_or_else(|| self.now().max(start.unwrap_or(0)));
        let start = floor(start.unwrap_or(0).max(0), DAY);
        if start > end {
            return Err(ValidationError::new("start", "must be before end").into());
        }
        self.fold_for_read()?;
        let ws = p.workspace_id.as_str();
        let counts = self.rbac.store().analytics_snapshot(|tx| {
            let filter = VerificationFilter {
                workspace_id: ws,
                api_id: None,
                key_ids: &[],
                identity_id: None,
                start,
                end,
                // Per day; per API for an identity's keys (whose APIs the caller may not all reach).
                sums: VerificationSums { width: Some(DAY), by_api: true, ..VerificationSums::default() },
            };
            match who {
                KeyOrOwner::Key(id) => {
                    let key = match has_prefix(id, IdPrefix::Key) {
                        true => tx.get_key(ws, id)?,
                        false => None,
                    };
                    let key = key.ok_or_else(|| RbacError::not_found(Resource::Key, id))?;
                    if !access.admits(key.api_id.as_deref()) {
                        return Err(ApiAccess::denied("read_analytics", key.api_id.as_deref()));
                    }
                    let ids = [id.to_string()];
                    Ok(tx.verification_counts(&VerificationFilter { key_ids: &ids, ..filter })?)
                }
                KeyOrOwner::Owner(owner) => {
                    let Some(identity) = tx.identity_by_external_id(ws, owner)? else {
                        return Ok(Vec::new());
                    };
                    let counts = tx.verification_counts(&VerificationFilter {
                        identity_id: Some(&identity.id),
                        ..filter
                    })?;
                    Ok(counts
                        .into_iter()
                        .filter(|c| access.admits((!c.api_id.is_empty()).then_some(c.api_id.as_str())))
                        .collect())
                }
            }
        })?;
        let mut days: std::collections::BTreeMap<i64, DailyVerifications> = Default::default();
        for c in counts {
            let time = floor(c.bucket, DAY);
            let day = days.entry(time).or_insert(DailyVerifications { time, ..Default::default() });
            match c.outcome.as_str() {
                "VALID" => day.success += c.count,
                "RATE_LIMITED" => day.rate_limited += c.count,
                "USAGE_EXCEEDED" => day.usage_exceeded += c.count,
                _ => {}
            }
        }
        Ok(days.into_values().collect())
    }

    /// Sets `last_used` of each key: the start of the last minute it was verified in, from
    /// the counts written (a bucket's start after a roll-up) and those still in memory on
    /// this instance. Nothing when analytics are off.
    pub fn fill_last_used(&self, keys: &mut [KeySummary]) -> Result<(), RbacError> {
        let Some(recorder) = &self.recorder else { return Ok(()) };
        if keys.is_empty() {
            return Ok(());
        }
        self.fold_for_read()?;
        let ids: Vec<&str> = keys.iter().map(|k| k.key.id.as_str()).collect();
        let mut last: HashMap<String, i64> =
            self.rbac.store().analytics_read(|tx| Ok(tx.keys_last_used(&ids)?))?.into_iter().collect();
        for (id, minute) in recorder.last_minutes(&ids) {
            let at = i64::try_from(minute).unwrap_or(i64::MAX);
            last.entry(id).and_modify(|t| *t = (*t).max(at)).or_insert(at);
        }
        for k in keys {
            k.last_used = last.get(&k.key.id).copied();
        }
        Ok(())
    }
}

/// What a row groups by: time slice, key, identity, tag set, tag.
type Group = (Option<i64>, Option<String>, Option<String>, Option<Vec<String>>, Option<String>);
