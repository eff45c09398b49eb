//! The outbox: an event is written, with a pending delivery to each endpoint subscribed
//! to it, in the transaction of the change that causes it. Nothing is written (and nothing
//! read but the workspace's subscriptions) when no endpoint takes the event.

use keygate_domain::{IdPrefix, KeySummary, OutboxEvent, new_id};
use keygate_rbac::{KeyChange, KeyEvents, RbacError, RbacTx, key_summary};
use serde_json::{Value, json};
use std::sync::OnceLock;

/// How a key is shown in an event's `data` (the HTTP layer sets v2's `getKey` object).
pub type KeyRenderer = Box<dyn Fn(KeySummary) -> Value + Send + Sync>;

/// Writes events into the outbox; registered with the RBAC service as its [`KeyEvents`].
#[derive(Default)]
pub struct Outbox {
    render: OnceLock<KeyRenderer>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("renders_keys", &self.render.get().is_some()).finish()
    }
}

impl Outbox {
    /// Sets how keys are shown in events, once (later calls are ignored). Until it is set
    /// a key shows as `{"keyId"}` alone.
    pub fn set_key_renderer(&self, render: KeyRenderer) {
        let _ = self.render.set(render);
    }

    fn key_data(&self, summary: KeySummary) -> Value {
        match self.render.get() {
            Some(render) => render(summary),
            None => json!({ "keyId": summary.key.id }),
        }
    }

    /// Writes an event of `event_type` with `data` when an endpoint of the workspace takes
    /// it (`data` is made only then).
    pub fn emit(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        event_type: &'static str,
        at: i64,
        data: impl FnOnce(&mut dyn RbacTx) -> Result<Option<Value>, RbacError>,
    ) -> Result<(), RbacError> {
        let endpoints = tx.webhook_subscribers(workspace_id, event_type)?;
        if endpoints.is_empty() {
            return Ok(());
        }
        let Some(data) = data(tx)? else { return Ok(()) };
        let event = OutboxEvent {
            id: new_id(IdPrefix::WebhookEvent),
            workspace_id: workspace_id.to_string(),
            event_type,
            body: body(event_type, at, data),
            created_at: at,
        };
        tx.insert_webhook_event(&event, &endpoints)?;
        metrics::counter!("keygate_webhook_events_total", "type" => event_type).increment(1);
        Ok(())
    }
}

/// `{type, timestamp (RFC 3339), data}`: what every delivery of the event sends.
pub fn body(event_type: &str, at: i64, data: Value) -> String {
    let timestamp = jiff::Timestamp::from_millisecond(at).map(|t| t.to_string()).unwrap_or_default();
    json!({ "type": event_type, "timestamp": timestamp, "data": data }).to_string()
}

impl KeyEvents for Outbox {
    fn key_changed(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_id: &str,
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError> {
        self.emit(tx, workspace_id, change.event_type(), at, |tx| {
            let Some(key) = tx.get_key(workspace_id, key_id)? else { return Ok(None) };
            let mut data = self.key_data(key_summary(tx, key)?);
            if let (KeyChange::Rerolled { from }, Some(obj)) = (change, data.as_object_mut()) {
                obj.insert("previousKeyId".into(), Value::String(from.to_string()));
            }
            Ok(Some(data))
        })
    }
}
