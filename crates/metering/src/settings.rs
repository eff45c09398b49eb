//! The usage export's settings: the period, an optional workspace, and the sinks (at most
//! one of each kind). The server reads them from its configuration
//! (`KEYGATE_USAGE_EXPORT_*`, docs/metering.md); tokens are [`Secret`]s, never shown.

use keygate_domain::Secret;

/// The period when none is set: a minute.
pub const DEFAULT_PERIOD_MS: i64 = 60_000;
/// Where Stripe takes meter events.
pub const STRIPE_METER_EVENTS_URL: &str = "https://api.stripe.com/v1/billing/meter_events";
/// The identity `meta` field that holds a Stripe customer id, when none is set.
pub const DEFAULT_CUSTOMER_FIELD: &str = "stripeCustomerId";
/// CloudEvents' `source` prefix, when none is set (each event's is `<source>/<workspace id>`).
pub const DEFAULT_SOURCE: &str = "keygate";
/// CloudEvents' `type`, when none is set.
pub const DEFAULT_EVENT_TYPE: &str = "keygate.usage";

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// What to export, how often, and where.
#[derive(Debug, Clone)]
pub struct ExportSettings {
    /// A whole number of minutes that divides an hour: periods start at multiples of it
    /// (UTC), so an hour always ends a period. At most an hour: a period is summed from
    /// analytics' minute rows, which are kept for a day (a longer period is summed by the
    /// billing system from these).
    pub period_ms: i64,
    /// Only this workspace's identities (`None`: every workspace's).
    pub workspace_id: Option<String>,
    pub cloudevents: Option<CloudEventsSink>,
    pub stripe: Option<StripeSink>,
}

/// CloudEvents 1.0 batches (`application/cloudevents-batch+json`), as OpenMeter ingests.
#[derive(Debug, Clone)]
pub struct CloudEventsSink {
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub token: Option<Secret>,
    pub source: String,
    pub event_type: String,
}

/// Stripe meter events (`POST /v1/billing/meter_events`, form-encoded), one per identity
/// and period with credits spent.
#[derive(Debug, Clone)]
pub struct StripeSink {
    pub url: String,
    /// The secret key, sent as `Authorization: Bearer <key>`.
    pub key: Secret,
    /// The meter's `event_name`.
    pub event_name: String,
    /// The identity `meta` field that holds its Stripe customer id.
    pub customer_field: String,
}

/// Settings that cannot run, with the setting to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct SettingsError {
    pub setting: &'static str,
    pub why: String,
}

fn bad(setting: &'static str, why: impl Into<String>) -> SettingsError {
    SettingsError { setting, why: why.into() }
}

impl ExportSettings {
    /// Checks every setting: the period, each sink's URL (http or https), names.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let p = self.period_ms;
        if !(MINUTE_MS..=HOUR_MS).contains(&p) || p % MINUTE_MS != 0 || HOUR_MS % p != 0 {
            return Err(bad(
                "usage_export_period",
                "must be whole minutes that divide an hour (60 to 3600 seconds)",
            ));
        }
        if let Some(c) = &self.cloudevents {
            check_url("usage_export_cloudevents_url", &c.url)?;
            check_text("usage_export_cloudevents_source", &c.source, 200)?;
            check_text("usage_export_cloudevents_type", &c.event_type, 200)?;
        }
        if let Some(s) = &self.stripe {
            check_url("usage_export_stripe_url", &s.url)?;
            check_text("usage_export_stripe_event_name", &s.event_name, 100)?;
            check_text("usage_export_stripe_customer_field", &s.customer_field, 200)?;
            if s.key.expose().trim().is_empty() {
                return Err(bad("usage_export_stripe_key", "must not be empty"));
            }
        }
        if self.cloudevents.is_none() && self.stripe.is_none() {
            return Err(bad("usage_export", "names no sink (a CloudEvents URL or a Stripe key)"));
        }
        Ok(())
    }
}

fn check_url(setting: &'static str, url: &str) -> Result<(), SettingsError> {
    match url::Url::parse(url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(_) => Err(bad(setting, "must be an http:// or https:// URL")),
        Err(e) => Err(bad(setting, format!("is not a URL ({e})"))),
    }
}

fn check_text(setting: &'static str, text: &str, max: usize) -> Result<(), SettingsError> {
    if text.trim().is_empty() || text.chars().count() > max || text.chars().any(char::is_control) {
        return Err(bad(setting, format!("must be 1 to {max} characters, no control characters")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ExportSettings {
        ExportSettings {
            period_ms: DEFAULT_PERIOD_MS,
            workspace_id: None,
            cloudevents: Some(CloudEventsSink {
                url: "http://127.0.0.1:8080/api/v1/events".into(),
                token: None,
                source: DEFAULT_SOURCE.into(),
                event_type: DEFAULT_EVENT_TYPE.into(),
            }),
            stripe: None,
        }
    }

    #[test]
    fn periods_are_whole_minutes_that_divide_an_hour() {
        for ok in [60_000, 300_000, 900_000, 3_600_000] {
            assert_eq!(ExportSettings { period_ms: ok, ..settings() }.validate(), Ok(()), "{ok}");
        }
        for bad in [0, 1_000, 90_000, 7 * 60_000, 2 * 3_600_000, 86_400_000, -60_000] {
            let e = ExportSettings { period_ms: bad, ..settings() }.validate().unwrap_err();
            assert_eq!(e.setting, "usage_export_period", "{bad}");
        }
    }

    #[test]
    fn sinks_need_a_web_url_and_names() {
        let mut s = settings();
        s.cloudevents.as_mut().unwrap().url = "ftp://x/y".into();
        assert_eq!(s.validate().unwrap_err().setting, "usage_export_cloudevents_url");
        let mut s = settings();
        s.stripe = Some(StripeSink {
            url: STRIPE_METER_EVENTS_URL.into(),
            key: Secret::new("sk_test_x"),
            event_name: "".into(),
            customer_field: DEFAULT_CUSTOMER_FIELD.into(),
        });
        assert_eq!(s.validate().unwrap_err().setting, "usage_export_stripe_event_name");
        let none = ExportSettings { cloudevents: None, ..settings() };
        assert_eq!(none.validate().unwrap_err().setting, "usage_export");
    }
}
