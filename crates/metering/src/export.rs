//! The exporter's round ([`MeteringService::export_due`]), run every few seconds on every
//! instance: for each sink, in one transaction, its mark is held, every period closed
//! since is summed per identity and written into the webhook outbox as that sink's
//! deliveries, and the mark moves past them. A second instance's round waits for the
//! mark, then finds nothing left to do; a round that fails writes nothing.

use crate::render;
use crate::settings::ExportSettings;
use crate::store::{IdentityUsage, MeteringStore, MeteringTx};
use keygate_analytics::{AnalyticsService, AnalyticsStore};
use keygate_domain::{OutboxEvent, Secret};
use keygate_rbac::{RbacError, RbacService};
use keygate_webhooks::sinks::Sink;
use std::sync::Arc;

/// How long after a period ends it is exported: every live instance flushes its counts
/// within a few seconds (`keygate_analytics::flush`), so the period's rows are whole.
pub const EXPORT_DELAY_MS: i64 = 15_000;
/// The most periods one round exports per sink (a sink catching up takes several rounds).
pub const MAX_PERIODS_PER_ROUND: usize = 60;
/// How far back a sink's mark may lag: analytics keep minute rows for a day
/// (`keygate_analytics::flush::MINUTES_KEPT_MS`); older periods are skipped (logged).
pub const MAX_LAG_MS: i64 = 23 * 3_600_000;
/// The outbox event type of the export's deliveries.
pub const EVENT_TYPE: &str = "usage.export";

/// The two sinks, by name.
const CLOUDEVENTS: &str = "cloudevents";
const STRIPE: &str = "stripe";

/// The usage export over rbac's service and analytics.
#[derive(Debug)]
pub struct MeteringService<S> {
    rbac: Arc<RbacService<S>>,
    analytics: Arc<AnalyticsService<S>>,
    settings: ExportSettings,
}

impl<S: MeteringStore + AnalyticsStore> MeteringService<S> {
    /// The export `settings` ask for (checked: [`ExportSettings::validate`]).
    pub fn new(
        rbac: Arc<RbacService<S>>,
        analytics: Arc<AnalyticsService<S>>,
        settings: ExportSettings,
    ) -> Result<Self, crate::SettingsError> {
        settings.validate()?;
        Ok(Self { rbac, analytics, settings })
    }

    /// The sinks, as the webhook worker delivers to them
    /// ([`keygate_webhooks::WebhookService::with_sinks`]).
    pub fn sinks(&self) -> Vec<Sink> {
        let mut out = Vec::new();
        if let Some(c) = &self.settings.cloudevents {
            let mut sink = Sink::new(CLOUDEVENTS, &c.url, "application/cloudevents-batch+json");
            if let Some(token) = &c.token {
                sink = sink.with_header("authorization", Secret::new(format!("Bearer {}", token.expose())));
            }
            out.push(sink);
        }
        if let Some(s) = &self.settings.stripe {
            let auth = Secret::new(format!("Bearer {}", s.key.expose()));
            out.push(
                Sink::new(STRIPE, &s.url, "application/x-www-form-urlencoded")
                    .with_header("authorization", auth),
            );
        }
        out
    }

    /// One round: every sink's closed periods written to the outbox; how many deliveries.
    pub fn export_due(&self) -> Result<usize, RbacError> {
        let now = self.rbac.clock().now_ms() as i64;
        let period = self.settings.period_ms;
        // Every period that ends at or before this is closed.
        let closed = floor(now - EXPORT_DELAY_MS, period);
        self.analytics.fold_for_read()?;
        let mut written = 0;
        for sink in [CLOUDEVENTS, STRIPE] {
            let configured = match sink {
                CLOUDEVENTS => self.settings.cloudevents.is_some(),
                _ => self.settings.stripe.is_some(),
            };
            if configured {
                written += self.export_sink(sink, closed, now)?;
            }
        }
        Ok(written)
    }

    fn export_sink(&self, sink: &'static str, closed: i64, now: i64) -> Result<usize, RbacError> {
        let period = self.settings.period_ms;
        let sink_id = format!("{}{sink}", keygate_webhooks::sinks::SINK_PREFIX);
        let (written, skipped) = self.rbac.store().metering_transaction(|tx| {
            // A sink's first round starts with the period open at that moment.
            let mut at = tx.hold_export_mark(&sink_id, floor(now, period), now)?;
            let start = at;
            let oldest = floor(now - MAX_LAG_MS, period);
            if at < oldest {
                log::warn!(
                    "usage export: {sink}'s periods from {} to {} are older than analytics' minute rows and are not sent",
                    render::rfc3339(at),
                    render::rfc3339(oldest)
                );
                at = oldest;
            }
            let (mut written, mut skipped, mut periods) = (0, 0, 0);
            while at + period <= closed && periods < MAX_PERIODS_PER_ROUND {
                let usage = tx.identity_usage(at, at + period, self.settings.workspace_id.as_deref())?;
                let (w, s) = match sink {
                    CLOUDEVENTS => (self.write_cloudevents(tx, &sink_id, &usage, at, now)?, 0),
                    _ => self.write_stripe(tx, &sink_id, &usage, at, now)?,
                };
                written += w;
                skipped += s;
                at += period;
                periods += 1;
            }
            if at != start {
                tx.set_export_mark(&sink_id, at, now)?;
            }
            Ok((written, skipped))
        })?;
        if written > 0 {
            metrics::counter!("keygate_usage_export_deliveries_total", "sink" => sink)
                .increment(written as u64);
        }
        if skipped > 0 {
            metrics::counter!("keygate_usage_export_skipped_total", "sink" => sink).increment(skipped as u64);
            log::warn!(
                "usage export: {skipped} identities with credits spent have no `{}` in their meta: not sent to Stripe",
                self.settings.stripe.as_ref().map_or("", |s| s.customer_field.as_str())
            );
        }
        Ok(written)
    }

    /// A period's identities as CloudEvents, a batch per workspace (of at most
    /// [`render::MAX_BATCH_EVENTS`]): how many batches.
    fn write_cloudevents(
        &self,
        tx: &mut dyn MeteringTx,
        sink_id: &str,
        usage: &[IdentityUsage],
        period_start: i64,
        now: i64,
    ) -> Result<usize, RbacError> {
        let Some(c) = &self.settings.cloudevents else { return Ok(0) };
        let mut n = 0;
        for workspace in usage.chunk_by(|a, b| a.workspace_id == b.workspace_id) {
            for (i, chunk) in workspace.chunks(render::MAX_BATCH_EVENTS).enumerate() {
                let events: Vec<_> = chunk.iter().map(|u| render::cloudevent(c, u, period_start)).collect();
                let ws = &chunk[0].workspace_id;
                let event = OutboxEvent {
                    id: render::outbox_id(sink_id, ws, period_start, &i.to_string()),
                    workspace_id: ws.clone(),
                    event_type: EVENT_TYPE,
                    body: render::cloudevents_batch(&events),
                    created_at: now,
                };
                tx.insert_webhook_event(&event, &[sink_id.to_string()])?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// A period's identities with credits spent as Stripe meter events, one each: how many,
    /// and how many had no customer id.
    fn write_stripe(
        &self,
        tx: &mut dyn MeteringTx,
        sink_id: &str,
        usage: &[IdentityUsage],
        period_start: i64,
        now: i64,
    ) -> Result<(usize, usize), RbacError> {
        let Some(s) = &self.settings.stripe else { return Ok((0, 0)) };
        let (mut n, mut skipped) = (0, 0);
        for u in usage.iter().filter(|u| u.spent_credits > 0) {
            let Some(customer) = render::stripe_customer(u.meta.as_deref(), &s.customer_field) else {
                skipped += 1;
                continue;
            };
            let event = OutboxEvent {
                id: render::outbox_id(sink_id, &u.workspace_id, period_start, &u.identity_id),
                workspace_id: u.workspace_id.clone(),
                event_type: EVENT_TYPE,
                body: render::stripe_form(s, &customer, u, period_start),
                created_at: now,
            };
            tx.insert_webhook_event(&event, &[sink_id.to_string()])?;
            n += 1;
        }
        Ok((n, skipped))
    }
}

/// The start of the period of `width` ms that holds `t`.
fn floor(t: i64, width: i64) -> i64 {
    t - t.rem_euclid(width)
}
