//! What an end user does with a portal session: list, reroll and chart the keys linked to
//! the session's identity in the portal's API. Any other key is 404, as if it did not
//! exist; a scope the session lacks is 403; a preview session changes nothing (403).

use crate::{PortalContext, PortalScope, PortalService, PortalStore};
use keygate_analytics::outcome_field;
use keygate_analytics::store::{VerificationFilter, VerificationSums};
use keygate_domain::{IdPrefix, Secret, ValidationError, has_prefix, validate_key_id};
use keygate_rbac::{Key, Page, RbacError, RbacTx, Resource, VerifyCode};
use std::collections::BTreeMap;

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;
/// The longest window `portal.getVerifications` reads: 90 days.
pub const MAX_WINDOW_MS: i64 = 90 * DAY;

/// One bucket of verifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerificationPoint {
    pub time: i64,
    /// Counts in [`VerifyCode::ALL`]'s order.
    pub counts: [u64; VerifyCode::ALL.len()],
    /// The credits charged (API-v2.md §22).
    pub spent_credits: u64,
}

impl VerificationPoint {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The count of the outcome whose field is `name` (`valid`, `rateLimited`, …; 0 for a
    /// name keygate never counts).
    pub fn field(&self, name: &str) -> u64 {
        VerifyCode::ALL.iter().position(|c| outcome_field(*c) == name).map_or(0, |i| self.counts[i])
    }
}

/// One key's buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySeries {
    pub key_id: String,
    pub points: Vec<VerificationPoint>,
}

/// `portal.getVerifications`: the buckets' width, the totals and each key's series, every
/// bucket present (zero-filled), ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalVerifications {
    pub bucket_ms: i64,
    pub total: Vec<VerificationPoint>,
    pub keys: Vec<KeySeries>,
}

/// The bucket width of a window: per minute up to 6 hours, per hour up to 7 days, per day
/// beyond.
pub fn bucket_width(window_ms: i64) -> i64 {
    match window_ms {
        w if w <= 6 * HOUR => MINUTE,
        w if w <= 7 * DAY => HOUR,
        _ => DAY,
    }
}

fn lacks(scope: PortalScope) -> RbacError {
    RbacError::Forbidden(format!("the portal session lacks the scope {}", scope.as_str()))
}

impl<S: PortalStore> PortalService<S> {
    /// `portal.listKeys`: a page of the identity's keys in the portal's API, each described
    /// by `describe` (in the same snapshot). Needs `keys:read`.
    pub fn list_keys<T>(
        &self,
        ctx: &PortalContext,
        after: Option<&str>,
        limit: usize,
        describe: impl Fn(&mut dyn RbacTx, Key) -> Result<T, RbacError>,
    ) -> Result<Page<T>, RbacError> {
        if !ctx.session.has(PortalScope::KeysRead) {
            return Err(lacks(PortalScope::KeysRead));
        }
        let s = &ctx.session;
        let (page, _) = self.rbac.list_api_keys(
            &ctx.principal,
            &ctx.portal.api_id,
            Some(&s.external_id),
            after,
            limit,
            describe,
        )?;
        Ok(page)
    }

    /// The key `key_id` when it is one of the session identity's keys in the portal's API;
    /// 404 otherwise.
    fn own_key(&self, ctx: &PortalContext, key_id: &str) -> Result<Key, RbacError> {
        validate_key_id("keyId", key_id)?;
        let not_found = || RbacError::not_found(Resource::Key, key_id);
        if !has_prefix(key_id, IdPrefix::Key) {
            return Err(not_found());
        }
        let ws = ctx.session.workspace_id.as_str();
        let (key, identity) = self.rbac.store().portal_read(|tx| {
            Ok((tx.get_key(ws, key_id)?, tx.identity_by_external_id(ws, &ctx.session.external_id)?))
        })?;
        match (key, identity) {
            (Some(k), Some(i))
                if k.api_id.as_deref() == Some(ctx.portal.api_id.as_str())
                    && k.identity_id.as_deref() == Some(&i.id) =>
            {
                Ok(k)
            }
            _ => Err(not_found()),
        }
    }

    /// `portal.rerollKey`: as `keys.rerollKey`, for one of the identity's keys in the
    /// portal's API. Needs `keys:reroll`, and not a preview session. The audit events name
    /// the actor `portal:<session id>`.
    pub fn reroll_key(
        &self,
        ctx: &PortalContext,
        key_id: &str,
        expiration: Option<u64>,
    ) -> Result<(Key, Secret), RbacError> {
        if !ctx.session.has(PortalScope::KeysReroll) {
            return Err(lacks(PortalScope::KeysReroll));
        }
        if ctx.session.preview {
            return Err(RbacError::Forbidden("a preview session cannot change keys".into()));
        }
        self.own_key(ctx, key_id)?;
        self.rbac.reroll_key(&ctx.principal, key_id, expiration)
    }

    /// `portal.getVerifications`: the identity's verifications in the portal's API (or one
    /// of its keys') in `start..end` (Unix ms, `end` exclusive, at most 90 days). Needs
    /// `analytics:read`.
    pub fn verifications(
        &self,
        ctx: &PortalContext,
        start: i64,
        end: i64,
        key_id: Option<&str>,
    ) -> Result<PortalVerifications, RbacError> {
        if !ctx.session.has(PortalScope::AnalyticsRead) {
            return Err(lacks(PortalScope::AnalyticsRead));
        }
        if start < 0 {
            return Err(ValidationError::new("startTime", "must be at least 0").into());
        }
        if end <= start {
            return Err(ValidationError::new("endTime", "must be after startTime").into());
        }
        if end - start > MAX_WINDOW_MS {
            return Err(ValidationError::new("endTime", "must be at most 90 days after startTime").into());
        }
        if let Some(id) = key_id {
            self.own_key(ctx, id)?;
        }
        let width = bucket_width(end - start);
        let first = start - start.rem_euclid(width);
        let ws = ctx.session.workspace_id.as_str();
        let keys: Vec<String> = key_id.map(str::to_string).into_iter().collect();
        self.analytics.fold_for_read()?;
        let counts = self.rbac.store().analytics_snapshot(|tx| {
            let Some(identity) = tx.identity_by_external_id(ws, &ctx.session.external_id)? else {
                return Ok(Vec::new());
            };
            let filter = VerificationFilter {
                workspace_id: ws,
                api_id: Some(&ctx.portal.api_id),
                key_ids: &keys,
                identity_id: Some(&identity.id),
                start: first,
                end: end - 1,
                sums: VerificationSums { width: Some(width), by_key: true, ..VerificationSums::default() },
            };
            Ok(tx.verification_counts(&filter)?)
        })?;
        let buckets: Vec<i64> = (0..).map(|i| first + i * width).take_while(|t| *t < end).collect();
        let zeroed = || {
            buckets
                .iter()
                .map(|t| VerificationPoint { time: *t, ..VerificationPoint::default() })
                .collect::<Vec<_>>()
        };
        let mut total = zeroed();
        let mut per_key: BTreeMap<String, Vec<VerificationPoint>> = BTreeMap::new();
        if let Some(id) = key_id {
            per_key.insert(id.to_string(), zeroed());
        }
        for c in counts {
            let (Some(outcome), Ok(slot)) = (
                VerifyCode::ALL.iter().position(|k| k.as_str() == c.outcome),
                buckets.binary_search(&c.bucket),
            ) else {
                continue;
            };
            for point in [&mut total[slot], &mut per_key.entry(c.key_id).or_insert_with(zeroed)[slot]] {
                point.counts[outcome] += c.count;
                point.spent_credits += c.spent_credits;
            }
        }
        let keys = per_key.into_iter().map(|(key_id, points)| KeySeries { key_id, points }).collect();
        Ok(PortalVerifications { bucket_ms: width, total, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_choose_their_buckets() {
        assert_eq!(bucket_width(HOUR), MINUTE);
        assert_eq!(bucket_width(6 * HOUR), MINUTE);
        assert_eq!(bucket_width(6 * HOUR + 1), HOUR);
        assert_eq!(bucket_width(7 * DAY), HOUR);
        assert_eq!(bucket_width(7 * DAY + 1), DAY);
    }
}
