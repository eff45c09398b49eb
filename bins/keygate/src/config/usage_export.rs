//! The usage export's settings (docs/metering.md): the period, an optional workspace, and
//! the sinks: CloudEvents batches (OpenMeter's ingest) and Stripe meter events. Tokens are
//! read as secrets: never printed, in `--help` (their environment values are hidden) or
//! in logs.

use clap::Args;
use keygate_domain::Secret;
use keygate_metering::settings::{
    DEFAULT_CUSTOMER_FIELD, DEFAULT_EVENT_TYPE, DEFAULT_SOURCE, STRIPE_METER_EVENTS_URL,
};
use keygate_metering::{CloudEventsSink, ExportSettings, StripeSink};

#[derive(Args, Clone, Debug, Default)]
pub struct UsageExportArgs {
    /// Usage export: the period credits and verifications are summed over per identity, in
    /// seconds (whole minutes that divide an hour; periods start at multiples of it, UTC).
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_PERIOD", default_value_t = 60)]
    pub usage_export_period: i64,
    /// Usage export: only this workspace's identities (unset: every workspace's).
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_WORKSPACE")]
    pub usage_export_workspace: Option<String>,
    /// Usage export to a CloudEvents 1.0 batch endpoint (OpenMeter's
    /// `https://<host>/api/v1/events`): its URL; unset: no CloudEvents export.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_CLOUDEVENTS_URL")]
    pub usage_export_cloudevents_url: Option<String>,
    /// The CloudEvents endpoint's token, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_CLOUDEVENTS_TOKEN", hide_env_values = true, value_parser = secret)]
    pub usage_export_cloudevents_token: Option<Secret>,
    /// The events' `source` (each event's is `<this>/<workspace id>`).
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_CLOUDEVENTS_SOURCE", default_value = DEFAULT_SOURCE)]
    pub usage_export_cloudevents_source: String,
    /// The events' `type`.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_CLOUDEVENTS_TYPE", default_value = DEFAULT_EVENT_TYPE)]
    pub usage_export_cloudevents_type: String,
    /// Usage export to Stripe meter events: the secret key (`sk_...`); unset: no Stripe
    /// export.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_STRIPE_KEY", hide_env_values = true, value_parser = secret, requires = "usage_export_stripe_event_name")]
    pub usage_export_stripe_key: Option<Secret>,
    /// The Stripe meter's `event_name`.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_STRIPE_EVENT_NAME")]
    pub usage_export_stripe_event_name: Option<String>,
    /// The identity `meta` field that holds its Stripe customer id (`cus_...`).
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_STRIPE_CUSTOMER_FIELD", default_value = DEFAULT_CUSTOMER_FIELD)]
    pub usage_export_stripe_customer_field: String,
    /// Where Stripe's meter events are sent.
    #[arg(long, env = "KEYGATE_USAGE_EXPORT_STRIPE_URL", default_value = STRIPE_METER_EVENTS_URL)]
    pub usage_export_stripe_url: String,
}

fn secret(value: &str) -> Result<Secret, String> {
    if value.trim().is_empty() {
        return Err("must not be empty".into());
    }
    Ok(Secret::new(value.trim()))
}

impl UsageExportArgs {
    /// The export, when a sink is set; an error names the setting that cannot run.
    pub fn settings(self) -> Result<Option<ExportSettings>, String> {
        let cloudevents = self.usage_export_cloudevents_url.map(|url| CloudEventsSink {
            url,
            token: self.usage_export_cloudevents_token,
            source: self.usage_export_cloudevents_source,
            event_type: self.usage_export_cloudevents_type,
        });
        let stripe = self.usage_export_stripe_key.map(|key| StripeSink {
            url: self.usage_export_stripe_url,
            key,
            event_name: self.usage_export_stripe_event_name.unwrap_or_default(),
            customer_field: self.usage_export_stripe_customer_field,
        });
        if cloudevents.is_none() && stripe.is_none() {
            return Ok(None);
        }
        let settings = ExportSettings {
            period_ms: self.usage_export_period.saturating_mul(1000),
            workspace_id: self.usage_export_workspace,
            cloudevents,
            stripe,
        };
        settings.validate().map_err(|e| e.to_string())?;
        Ok(Some(settings))
    }
}
