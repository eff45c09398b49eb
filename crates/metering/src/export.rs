//! The exporter's round ([`MeteringService::export_due`]), run every few seconds on every
//! instance: for each sink, the periods closed since its mark are summed per identity (in
//! a read transaction), then written into the webhook outbox as that sink's deliveries in
//! one transaction that holds the mark, checks it still stands where it was read, and moves
//! it past them. Of two instances' rounds one writes; the other finds the mark moved and
//! writes nothing. A round that fails writes nothing.

use crate::render;
use crate::settings::ExportSettings;
use crate::store::{IdentityUsage, MeteringStore};
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
        let mut written = 0;
        let mut folded = false;
        for sink in [CLOUDEVENTS, STRIPE] {
            let configured = match sink {
                CLOUDEVENTS => self.settings.cloudevents.is_some(),
                _ => self.settings.stripe.is_some(),
            };
            if configured {
                written += self.export_sink(sink, closed, now, &mut folded)?;
            }
        }
        Ok(written)
    }

    /// A sink's closed periods written out. `folded`: whether this round folded analytics'
    /// journal already (it is folded before the first read of a round that has a period
    /// to export, not every round: the journal's point is to write a key's row once a
    /// minute, `keygate_analytics::flush::FOLD_AFTER_MS`).
    fn export_sink(
        &self,
        sink: &'static str,
        closed: i64,
        now: i64,
        folded: &mut bool,
    ) -> Result<usize, RbacError> {
        let period = self.settings.period_ms;
        let sink_id = format!("{}{sink}", keygate_webhooks::sinks::SINK_PREFIX);
        let store = self.rbac.store();
        // The mark as it stands; a sink's first round writes it: the period open then.
        let start = match store.metering_read(|tx| Ok(tx.export_mark(&sink_id)?))? {
            Some(at) => at,
            None => store
                .metering_transaction(|tx| Ok(tx.hold_export_mark(&sink_id, floor(now, period), now)?))?,
        };
        // The first period that starts within the lag (its minute rows are all still kept).
        let oldest = floor(now - MAX_LAG_MS + period - 1, period);
        let mut at = start;
        if at < oldest {
            log::warn!(
                "usage export: {sink}'s periods from {} to {} are older than analytics' minute rows and are not sent",
                render::rfc3339(at),
                render::rfc3339(oldest)
            );
            at = oldest;
        }
        if at + period > closed {
            return Ok(0);
        }
        if !std::mem::replace(folded, true) {
            self.analytics.fold_for_read()?;
        }
        // Summed in a read transaction (a minute's rows are scanned under no write lock),
        // rendered, then written under the mark held, if it still stands where it was read
        // (else another instance exported these periods meanwhile).
        let ws = self.settings.workspace_id.as_deref();
        let usage = store.metering_read(|tx| {
            let mut out = Vec::new();
            while at + period <= closed && out.len() < MAX_PERIODS_PER_ROUND {
                out.push((at, tx.identity_usage(at, at + period, ws)?));
                at += period;
            }
            Ok(out)
        })?;
        let (mut events, mut skipped) = (Vec::new(), 0);
        for (period_start, usage) in &usage {
            match sink {
                CLOUDEVENTS => events.extend(self.cloudevents(&sink_id, usage, *period_start, now)),
                _ => skipped += self.stripe_events(&sink_id, usage, *period_start, now, &mut events),
            }
        }
        let endpoints = [sink_id.clone()];
        let written = store.metering_transaction(|tx| {
            if tx.hold_export_mark(&sink_id, start, now)? != start {
                return Ok(0);
            }
            for event in &events {
                tx.insert_webhook_event(event, &endpoints)?;
            }
            tx.set_export_mark(&sink_id, at, now)?;
            Ok(events.len())
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

    /// A period's identities as CloudEvents: a batch per workspace (of at most
    /// [`render::MAX_BATCH_EVENTS`]).
    fn cloudevents(
        &self,
        sink_id: &str,
        usage: &[IdentityUsage],
        period_start: i64,
        now: i64,
    ) -> Vec<OutboxEvent> {
        let Some(c) = &self.settings.cloudevents else { return Vec::new() };
        let mut out = Vec::new();
        for workspace in usage.chunk_by(|a, b| a.workspace_id == b.workspace_id) {
            for (i, chunk) in workspace.chunks(render::MAX_BATCH_EVENTS).enumerate() {
                let events: Vec<_> = chunk.iter().map(|u| render::cloudevent(c, u, period_start)).collect();
                let ws = &chunk[0].workspace_id;
                out.push(OutboxEvent {
                    id: render::outbox_id(sink_id, ws, period_start, &i.to_string()),
                    workspace_id: ws.clone(),
                    event_type: EVENT_TYPE,
                    body: render::cloudevents_batch(&events),
                    created_at: now,
                });
            }
        }
        out
    }

    /// A period's identities with credits spent as Stripe meter events, one each, into
    /// `out`: how many had no customer id (not sent).
    fn stripe_events(
        &self,
        sink_id: &str,
        usage: &[IdentityUsage],
        period_start: i64,
        now: i64,
        out: &mut Vec<OutboxEvent>,
    ) -> usize {
        let Some(s) = &self.settings.stripe else { return 0 };
        let mut skipped = 0;
        for u in usage.iter().filter(|u| u.spent_credits > 0) {
            let Some(customer) = render::stripe_customer(u.meta.as_deref(), &s.customer_field) else {
                skipped += 1;
                continue;
            };
            out.push(OutboxEvent {
                id: render::outbox_id(sink_id, &u.workspace_id, period_start, &u.identity_id),
                workspace_id: u.workspace_id.clone(),
                event_type: EVENT_TYPE,
                body: render::stripe_form(s, &customer, u, period_start),
                created_at: now,
            });
        }
        skipped
    }
}

/// The start of the period of `width` ms that holds `t`.
fn floor(t: i64, width: i64) -> i64 {
    t - t.rem_euclid(width)
}
