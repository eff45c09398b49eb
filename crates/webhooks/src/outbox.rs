//! The outbox: an event is written, with a pending delivery to each endpoint subscribed
//! to it, in the transaction of the change that causes it. Nothing is written (and nothing
//! read but the workspace's subscriptions) when no endpoint takes the event.

use crate::thresholds::{crossed_low, exhausted};
use keygate_domain::{IdPrefix, KeySummary, OutboxEvent, new_id};
use keygate_rbac::{CreditChange, CreditSubscriber, KeyChange, KeyEvents, RbacError, RbacTx, key_summary};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// How a key is shown in an event's `data` (the HTTP layer sets v2's `getKey` object).
pub type KeyRenderer = Box<dyn Fn(KeySummary) -> Value + Send + Sync>;

/// Writes events into the outbox; registered with the RBAC service as its [`KeyEvents`].
#[derive(Default)]
pub struct Outbox {
    render: OnceLock<KeyRenderer>,
    /// Set when this process wrote an event: the worker's wait ([`Outbox::wait`]) ends.
    written: parking_lot::Mutex<bool>,
    woken: parking_lot::Condvar,
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

    /// Waits up to `limit` for this process to write an event (its transaction may not be
    /// committed yet when this returns): whether one was written.
    pub fn wait(&self, limit: std::time::Duration) -> bool {
        let mut written = self.written.lock();
        if !*written {
            self.woken.wait_for(&mut written, limit);
        }
        std::mem::replace(&mut *written, false)
    }

    /// Ends a [`wait`](Self::wait) (an event written, an answer in).
    pub(crate) fn wake(&self) {
        *self.written.lock() = true;
        self.woken.notify_all();
    }

    fn key_data(&self, summary: KeySummary) -> Value {
        match self.render.get() {
            Some(render) => render(summary),
            None => json!({ "keyId": summary.key.id }),
        }
    }

    /// Writes one event to `endpoints`.
    fn write(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        event_type: &'static str,
        at: i64,
        data: Value,
        endpoints: &[String],
    ) -> Result<(), RbacError> {
        let event = OutboxEvent {
            id: new_id(IdPrefix::WebhookEvent),
            workspace_id: workspace_id.to_string(),
            event_type,
            body: body(event_type, at, data),
            created_at: at,
        };
        tx.insert_webhook_event(&event, endpoints)?;
        metrics::counter!("keygate_webhook_events_total", "type" => event_type).increment(1);
        self.wake();
        Ok(())
    }

    /// Writes an event of `event_type` about a key (shown as getKey shows it, with
    /// `fields` beside) to `endpoints`: whether the key was there to write it about.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn key_event_to(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_id: &str,
        event_type: &'static str,
        at: i64,
        fields: Value,
        endpoints: &[String],
    ) -> Result<bool, RbacError> {
        let Some(key) = tx.get_key(workspace_id, key_id)? else { return Ok(false) };
        let mut data = self.key_data(key_summary(tx, key)?);
        if let (Some(obj), Value::Object(extra)) = (data.as_object_mut(), fields) {
            obj.extend(extra);
        }
        self.write(tx, workspace_id, event_type, at, data, endpoints)?;
        Ok(true)
    }

    /// The credit events of one key's change to the endpoints in `subscribers` (its
    /// workspace's): `key.credits.low` once per percent crossed, each to the endpoints
    /// that name it, and `key.credits.exhausted`.
    fn credit_events(
        &self,
        tx: &mut dyn RbacTx,
        change: &CreditChange<'_>,
        subscribers: &[&CreditSubscriber],
        at: i64,
    ) -> Result<(), RbacError> {
        let Some(first) = subscribers.first() else { return Ok(()) };
        let takes = |s: &CreditSubscriber, t: &str| s.events.split(' ').any(|e| e == "*" || e == t);
        let mut low: BTreeMap<u8, Vec<String>> = BTreeMap::new();
        let mut gone = Vec::new();
        for s in subscribers {
            if let Some(base) = s.base.filter(|_| takes(s, "key.credits.low")) {
                for percent in s.credits_low.split(',').filter_map(|p| p.parse::<u8>().ok()) {
                    if crossed_low(base, change, percent) {
                        low.entry(percent).or_default().push(s.endpoint_id.clone());
                    }
                }
            }
            if takes(s, "key.credits.exhausted") && exhausted(change) {
                gone.push(s.endpoint_id.clone());
            }
        }
        if low.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let ws = first.workspace_id.as_str();
        let Some(key) = tx.get_key(ws, change.key_id)? else { return Ok(()) };
        let key = self.key_data(key_summary(tx, key)?);
        let with = |fields: Value| {
            let mut data = key.clone();
            if let (Some(obj), Value::Object(extra)) = (data.as_object_mut(), fields) {
                obj.extend(extra);
            }
            data
        };
        for (percent, endpoints) in low {
            let data = with(json!({ "threshold": percent, "remaining": change.after, "base": first.base }));
            self.write(tx, ws, "key.credits.low", at, data, &endpoints)?;
        }
        if !gone.is_empty() {
            self.write(tx, ws, "key.credits.exhausted", at, with(json!({ "remaining": 0 })), &gone)?;
        }
        Ok(())
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
        self.write(tx, workspace_id, event_type, at, data, &endpoints)
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
            match (change, data.as_object_mut()) {
                (KeyChange::Rerolled { from }, Some(obj)) => {
                    obj.insert("previousKeyId".into(), Value::String(from.to_string()));
                }
                (KeyChange::Leaked { url, source }, Some(obj)) => {
                    obj.insert("url".into(), Value::String(url.to_string()));
                    obj.insert("source".into(), Value::String(source.to_string()));
                }
                _ => {}
            }
            Ok(Some(data))
        })
    }

    fn wants(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        change: KeyChange<'_>,
    ) -> Result<bool, RbacError> {
        Ok(!tx.webhook_subscribers(workspace_id, change.event_type())?.is_empty())
    }

    /// The endpoints read once for all the keys.
    fn keys_changed(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_ids: &[String],
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError> {
        let endpoints = tx.webhook_subscribers(workspace_id, change.event_type())?;
        if endpoints.is_empty() {
            return Ok(());
        }
        for id in key_ids {
            let Some(key) = tx.get_key(workspace_id, id)? else { continue };
            let data = self.key_data(key_summary(tx, key)?);
            self.write(tx, workspace_id, change.event_type(), at, data, &endpoints)?;
        }
        Ok(())
    }

    fn credits_spent(
        &self,
        tx: &mut dyn RbacTx,
        changes: &[CreditChange<'_>],
        at: i64,
    ) -> Result<(), RbacError> {
        let spent: Vec<&CreditChange<'_>> = changes.iter().filter(|c| c.spent()).collect();
        if spent.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = spent.iter().map(|c| c.key_id).collect();
        let subscribers = tx.credit_subscribers(&ids)?;
        if subscribers.is_empty() {
            return Ok(());
        }
        for change in spent {
            let mine: Vec<&CreditSubscriber> =
                subscribers.iter().filter(|s| s.key_id == change.key_id).collect();
            self.credit_events(tx, change, &mine, at)?;
        }
        Ok(())
    }
}
