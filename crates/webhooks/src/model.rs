//! Endpoints, deliveries and their attempts, and what a request may say about them
//! (API-v2.md §23).

use keygate_domain::{Patch, ValidationError, check_len};

/// Every event type an endpoint may subscribe to.
pub const EVENT_TYPES: [&str; 11] = [
    "key.created",
    "key.updated",
    "key.deleted",
    "key.rerolled",
    "key.expiring",
    "key.expired",
    "key.credits.low",
    "key.credits.exhausted",
    "identity.credits.low",
    "identity.credits.exhausted",
    "key.leaked",
];
/// Longest endpoint URL.
pub const MAX_URL_CHARS: usize = 2_048;
/// Most event types one endpoint names.
pub const MAX_EVENTS: usize = 50;
/// Longest description.
pub const MAX_DESCRIPTION_CHARS: usize = 1_024;
/// Most values of one threshold list.
pub const MAX_THRESHOLDS: usize = 10;
/// `creditsLow` when not given: 80% of the credits spent.
pub const DEFAULT_CREDITS_LOW: [u8; 1] = [80];
/// `expiringDays` when not given: a week and a day before expiry.
pub const DEFAULT_EXPIRING_DAYS: [u16; 2] = [7, 1];

/// A workspace's endpoint (its secrets apart: [`EndpointSecrets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `whep_…`.
    pub id: String,
    pub workspace_id: String,
    pub url: String,
    /// Event types, or `["*"]`: every type.
    pub events: Vec<String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// Percent of the credits spent at which `*.credits.low` fires, ascending.
    pub credits_low: Vec<u8>,
    /// Days before `expires` at which `key.expiring` fires, descending.
    pub expiring_days: Vec<u16>,
    pub created_at: i64,
    pub updated_at: Option<i64>,
}

impl Endpoint {
    /// Whether the endpoint takes events of `event_type`.
    pub fn subscribes(&self, event_type: &str) -> bool {
        self.events.iter().any(|e| e == "*" || e == event_type)
    }
}

/// An endpoint's signing secrets as stored (`whsec_…`, or sealed by the vault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSecrets {
    pub current: String,
    /// The secret before the last rotation, signing too until `previous_until`.
    pub previous: Option<String>,
    pub previous_until: Option<i64>,
}

/// The thresholds of a request (absent lists keep their current or default values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thresholds {
    pub credits_low: Option<Vec<i64>>,
    pub expiring_days: Option<Vec<i64>>,
}

/// `webhooks.createEndpoint`'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewEndpoint {
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    pub enabled: Option<bool>,
    pub thresholds: Option<Thresholds>,
}

/// `webhooks.updateEndpoint`'s fields: absent ones are left as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointChange {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub description: Patch<String>,
    pub enabled: Option<bool>,
    pub thresholds: Option<Thresholds>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Due at `next_attempt_at`.
    Pending,
    Succeeded,
    /// Out of attempts, or its endpoint went.
    Failed,
}

impl DeliveryStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(DeliveryStatus::Pending),
            "succeeded" => Some(DeliveryStatus::Succeeded),
            "failed" => Some(DeliveryStatus::Failed),
            _ => None,
        }
    }
}

/// A delivery of an event to an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `whdl_…`.
    pub id: String,
    pub workspace_id: String,
    pub endpoint_id: String,
    /// `msg_…`: the `webhook-id` of every attempt.
    pub event_id: String,
    pub event_type: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    /// The HTTP status of the last answer (none: no answer yet, or none came).
    pub last_status: Option<i64>,
    pub next_attempt_at: Option<i64>,
    pub created_at: i64,
}

/// One attempt of a delivery, as the log shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub delivery_id: String,
    /// 1 for the first.
    pub attempt: i64,
    pub at: i64,
    /// The answer's HTTP status; none when none came (timeout, refused, private address).
    pub status: Option<i64>,
    /// What went wrong, when something did.
    pub error: Option<String>,
    /// The start of the answer's body.
    pub response: Option<String>,
    pub duration_ms: i64,
}

/// The URL's syntax and length (where it points is [`crate::address`]'s to check).
pub fn check_url(field: &str, url: &str) -> Result<url::Url, ValidationError> {
    check_len(field, url, MAX_URL_CHARS)?;
    let parsed =
        url::Url::parse(url).map_err(|e| ValidationError::new(field, format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ValidationError::new(field, "must be an http or https URL"));
    }
    if parsed.host().is_none() {
        return Err(ValidationError::new(field, "must name a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ValidationError::new(field, "must not hold credentials"));
    }
    Ok(parsed)
}

/// 1–50 known event types, each once, or `["*"]`.
pub fn check_events(events: &[String]) -> Result<(), ValidationError> {
    if events.is_empty() || events.len() > MAX_EVENTS {
        return Err(ValidationError::new("events", format!("needs 1 to {MAX_EVENTS} event types")));
    }
    if events.iter().any(|e| e == "*") && events.len() > 1 {
        return Err(ValidationError::new("events", "\"*\" stands alone"));
    }
    for (i, e) in events.iter().enumerate() {
        if e != "*" && !EVENT_TYPES.contains(&e.as_str()) {
            let known = EVENT_TYPES.join(", ");
            return Err(ValidationError::new(
                format!("events.{i}"),
                format!("is not an event type ({known})"),
            ));
        }
        if events[..i].contains(e) {
            return Err(ValidationError::new(format!("events.{i}"), "is given twice"));
        }
    }
    Ok(())
}

/// A threshold list: 1–10 distinct values in `min..=max`, sorted (`descending` for days).
fn check_list(field: &str, values: &[i64], min: i64, max: i64) -> Result<Vec<i64>, ValidationError> {
    if values.is_empty() || values.len() > MAX_THRESHOLDS {
        return Err(ValidationError::new(field, format!("needs 1 to {MAX_THRESHOLDS} values")));
    }
    for (i, v) in values.iter().enumerate() {
        if !(min..=max).contains(v) {
            return Err(ValidationError::new(format!("{field}.{i}"), format!("must be {min} to {max}")));
        }
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted)
}

/// The thresholds `t` sets over `credits_low` and `expiring_days`.
pub fn apply_thresholds(
    t: &Thresholds,
    credits_low: &mut Vec<u8>,
    expiring_days: &mut Vec<u16>,
) -> Result<(), ValidationError> {
    if let Some(c) = &t.credits_low {
        let sorted = check_list("thresholds.creditsLow", c, 1, 99)?;
        *credits_low = sorted.into_iter().filter_map(|v| u8::try_from(v).ok()).collect();
    }
    if let Some(d) = &t.expiring_days {
        let sorted = check_list("thresholds.expiringDays", d, 1, 365)?;
        *expiring_days = sorted.into_iter().rev().filter_map(|v| u16::try_from(v).ok()).collect();
    }
    Ok(())
}

/// The description's length and characters.
pub fn check_description(d: &str) -> Result<(), ValidationError> {
    check_len("description", d, MAX_DESCRIPTION_CHARS)?;
    if d.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(ValidationError::new("description", "must not hold control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_known_types_each_once_or_a_lone_star() {
        assert!(check_events(&["key.created".into(), "key.leaked".into()]).is_ok());
        assert!(check_events(&["*".into()]).is_ok());
        assert!(check_events(&[]).is_err());
        assert!(check_events(&["*".into(), "key.created".into()]).is_err());
        assert_eq!(check_events(&["key.created".into(), "key.nope".into()]).unwrap_err().path, "events.1");
        assert!(check_events(&["key.created".into(), "key.created".into()]).is_err());
    }

    #[test]
    fn thresholds_are_bounded_sorted_and_deduplicated() {
        let (mut c, mut d) = (DEFAULT_CREDITS_LOW.to_vec(), DEFAULT_EXPIRING_DAYS.to_vec());
        let t = Thresholds { credits_low: Some(vec![90, 50, 90]), expiring_days: Some(vec![1, 30, 7]) };
        apply_thresholds(&t, &mut c, &mut d).unwrap();
        assert_eq!((c.clone(), d.clone()), (vec![50, 90], vec![30, 7, 1]));
        for bad in [vec![0], vec![100], vec![]] {
            let t = Thresholds { credits_low: Some(bad), expiring_days: None };
            assert!(apply_thresholds(&t, &mut c, &mut d).is_err());
        }
        let t = Thresholds { credits_low: None, expiring_days: Some(vec![366]) };
        assert!(apply_thresholds(&t, &mut c, &mut d).is_err());
        assert_eq!(d, vec![30, 7, 1], "a refused list changes nothing");
    }

    #[test]
    fn urls_are_http_or_https_with_a_host_and_no_credentials() {
        assert!(check_url("url", "https://example.com/hook").is_ok());
        assert!(check_url("url", "http://127.0.0.1:9/x").is_ok());
        for bad in ["ftp://example.com", "example.com", "https://user:pw@example.com/", "http://"] {
            assert!(check_url("url", bad).is_err(), "{bad}");
        }
        assert!(check_url("url", &format!("https://e.com/{}", "a".repeat(MAX_URL_CHARS))).is_err());
    }
}
