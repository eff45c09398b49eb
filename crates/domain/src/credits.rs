//! A key's credits as its row holds them (API-v2.md §12.1): uses left and how they refill;
//! the rules of a credit setting, as `createKey` and `updateKey` take it. Spending them is
//! `keygate-usage`'s.

use crate::{Patch, ValidationError};

/// `credits` of an update: `remaining` given sets the counter (cleared: unlimited);
/// `refill` alone changes the refill and keeps the counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreditsUpdate {
    pub remaining: crate::Patch<u64>,
    pub refill: crate::Patch<RefillSpec>,
}

/// A key's credits (API-v2.md §12.1): uses left, and how they refill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credits {
    pub remaining: u64,
    pub refill: Option<Refill>,
}

/// How a key's credits refill: to `amount`, daily at 00:00 UTC or monthly on `day`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refill {
    pub interval: RefillInterval,
    pub amount: u64,
    /// Monthly only: the day of the month (1–31; a shorter month refills on its last day).
    pub day: Option<u8>,
    /// When the last refill happened (Unix ms).
    pub last_refill_at: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefillInterval {
    Daily,
    Monthly,
}

impl RefillInterval {
    pub const fn as_str(self) -> &'static str {
        match self {
            RefillInterval::Daily => "daily",
            RefillInterval::Monthly => "monthly",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "daily" => Some(RefillInterval::Daily),
            "monthly" => Some(RefillInterval::Monthly),
            _ => None,
        }
    }
}

/// A refill as a request gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillSpec {
    pub interval: RefillInterval,
    pub amount: u64,
    pub day: Option<u64>,
}

/// The credit setting a request asks for (`path`: the field, `credits`): `remaining`
/// `None` is unlimited, which takes no refill; `refillDay` (1–31) is monthly only; an
/// amount is at least 1.
pub fn credit_setting(
    path: &str,
    remaining: Option<u64>,
    refill: Option<RefillSpec>,
) -> Result<Option<Credits>, ValidationError> {
    let Some(remaining) = remaining else {
        return match refill {
            Some(_) => {
                Err(ValidationError::new(format!("{path}.refill"), "needs remaining credits (not null)"))
            }
            None => Ok(None),
        };
    };
    let refill = refill.map(|r| check_refill(&format!("{path}.refill"), r)).transpose()?;
    Ok(Some(Credits { remaining, refill }))
}

/// A refill's own rules.
pub fn check_refill(path: &str, r: RefillSpec) -> Result<Refill, ValidationError> {
    if r.amount < 1 {
        return Err(ValidationError::new(format!("{path}.amount"), "must be >= 1"));
    }
    let day = match (r.interval, r.day) {
        (RefillInterval::Daily, Some(_)) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "is for monthly refills only"));
        }
        (_, Some(d)) if !(1..=31).contains(&d) => {
            return Err(ValidationError::new(format!("{path}.refillDay"), "must be 1 to 31"));
        }
        (RefillInterval::Monthly, day) => Some(day.unwrap_or(1) as u8),
        (RefillInterval::Daily, None) => None,
    };
    Ok(Refill { interval: r.interval, amount: r.amount, day, last_refill_at: None })
}

/// A key's credits after an update's `credits` (`current`: before): cleared or `remaining`
/// cleared is unlimited; `remaining` set sets the counter (keeping the refill unless the
/// update names one); `refill` alone changes the refill and keeps the counter, which
/// needs credits (400 on an unlimited key).
pub fn updated_credits(
    current: Option<Credits>,
    update: Patch<CreditsUpdate>,
) -> Result<Option<Credits>, ValidationError> {
    let u = match update {
        Patch::Absent => return Ok(current),
        Patch::Clear => return Ok(None),
        Patch::Set(u) => u,
    };
    let remaining = match u.remaining {
        Patch::Clear => None,
        Patch::Set(n) => Some(n),
        Patch::Absent => current.as_ref().map(|c| c.remaining),
    };
    let refill = match u.refill {
        Patch::Clear => None,
        Patch::Set(r) => Some(check_refill("credits.refill", r)?),
        Patch::Absent => current.and_then(|c| c.refill),
    };
    match (remaining, refill) {
        (None, Some(_)) => Err(ValidationError::new("credits.refill", "needs remaining credits (not null)")),
        (None, None) => Ok(None),
        (Some(remaining), refill) => Ok(Some(Credits { remaining, refill })),
    }
}
