//! The webhook outbox (`keygate_rbac::store::OutboxTx`): an event and its deliveries
//! written in the transaction of the change that causes it, and who takes credit events.

use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_domain::{IdPrefix, OutboxEvent, new_id};
use keygate_rbac::CreditSubscriber;
use keygate_rbac::store::OutboxTx;
use keygate_webhooks::DeliveryStatus;

/// key id, workspace, refill amount, credits base, endpoint id, events, creditsLow.
type SubscriberRow = (String, String, Option<i64>, Option<i64>, String, String, String);

impl OutboxTx for DieselTx<'_> {
    fn webhook_subscribers(&mut self, workspace_id: &str, event_type: &str) -> R<Vec<String>> {
        let rows: Vec<(String, String)> = webhook_endpoints::table
            .filter(webhook_endpoints::workspace_id.eq(workspace_id))
            .filter(webhook_endpoints::enabled.eq(true))
            .select((webhook_endpoints::id, webhook_endpoints::events))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .filter(|(_, events)| events.split(' ').any(|e| e == "*" || e == event_type))
            .map(|(id, _)| id)
            .collect())
    }

    fn insert_webhook_event(&mut self, event: &OutboxEvent, endpoint_ids: &[String]) -> R<()> {
        diesel::insert_into(webhook_events::table)
            .values((
                webhook_events::id.eq(&event.id),
                webhook_events::workspace_id.eq(&event.workspace_id),
                webhook_events::event_type.eq(event.event_type),
                webhook_events::body.eq(&event.body),
                webhook_events::created_at.eq(event.created_at),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        for endpoint_id in endpoint_ids {
            diesel::insert_into(webhook_deliveries::table)
                .values((
                    webhook_deliveries::id.eq(new_id(IdPrefix::WebhookDelivery)),
                    webhook_deliveries::workspace_id.eq(&event.workspace_id),
                    webhook_deliveries::endpoint_id.eq(endpoint_id),
                    webhook_deliveries::event_id.eq(&event.id),
                    webhook_deliveries::event_type.eq(event.event_type),
                    webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()),
                    webhook_deliveries::attempts.eq(0),
                    webhook_deliveries::next_attempt_at.eq(event.created_at),
                    webhook_deliveries::created_at.eq(event.created_at),
                    webhook_deliveries::updated_at.eq(event.created_at),
                ))
                .execute(self.conn)
                .map_err(db_err)?;
        }
        Ok(())
    }
    fn credit_subscribers(&mut self, key_ids: &[&str]) -> R<Vec<CreditSubscriber>> {
        let rows: Vec<SubscriberRow> = keys::table
            .inner_join(webhook_endpoints::table.on(webhook_endpoints::workspace_id.eq(keys::workspace_id)))
            .filter(keys::id.eq_any(key_ids))
            .filter(webhook_endpoints::enabled.eq(true))
            .select((
                keys::id,
                keys::workspace_id,
                keys::refill_amount,
                keys::credits_base,
                webhook_endpoints::id,
                webhook_endpoints::events,
                webhook_endpoints::credits_low,
            ))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .map(|(key_id, workspace_id, refill, base, endpoint_id, events, credits_low)| CreditSubscriber {
                key_id,
                workspace_id,
                base: refill.or(base).and_then(|b| u64::try_from(b).ok()),
                endpoint_id,
                events,
                credits_low,
            })
            .collect())
    }
}
