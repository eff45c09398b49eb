//! `key.expiring` and `key.expired` (API-v2.md §23): a scan every
//! [`EXPIRY_SCAN_INTERVAL`] on each instance finds, through the index on the keys' expiry
//! (never a scan of every key), the keys that entered an endpoint's window (`expiringDays`
//! before `expires`) or expired, without a notice yet. Each (key, endpoint, threshold,
//! expiry) is announced once: the instance whose notice insert wins writes the event, in
//! the same transaction. A key already inside several windows is announced for the nearest
//! threshold (the wider ones noted as passed); a changed expiry is a new one.

use crate::{Endpoint, WebhookService, WebhookStore};
use keygate_rbac::RbacError;
use serde_json::json;
use std::time::Duration;

/// How often each instance scans for keys about to expire or expired.
pub const EXPIRY_SCAN_INTERVAL: Duration = Duration::from_secs(30);
/// The most keys one window's scan announces (the rest at the next scan).
pub const EXPIRY_BATCH: usize = 500;
const DAY_MS: i64 = 86_400_000;
/// How long a notice is kept after the expiry it was for.
const NOTICE_KEPT_MS: i64 = 30 * DAY_MS;
/// How far back `key.expired` looks: inside the notices kept, so a key whose notice was
/// pruned is never announced again (a key that expired while no instance ran for longer
/// than this is not announced).
const EXPIRED_LOOKBACK_MS: i64 = NOTICE_KEPT_MS - DAY_MS;

impl<S: WebhookStore> WebhookService<S> {
    /// One scan: announces the keys that entered a window or expired since, for every
    /// enabled endpoint that takes those events; how many events it wrote.
    pub fn scan_expiry(&self) -> Result<usize, RbacError> {
        let now = self.now();
        let store = self.rbac.store();
        let endpoints = store.webhook_read(|tx| Ok(tx.enabled_webhook_endpoints()?))?;
        if endpoints.is_empty() {
            // No write on an instance without endpoints (the notices wait for the next scan).
            return Ok(0);
        }
        let mut sent = 0;
        for e in &endpoints {
            if e.subscribes("key.expiring") {
                let mut days: Vec<i64> = e.expiring_days.iter().map(|&d| i64::from(d)).collect();
                days.sort_unstable();
                for (i, d) in days.iter().enumerate() {
                    let window = Window { days: *d, from: now, to: now.saturating_add(d * DAY_MS) };
                    sent += self.announce(e, "key.expiring", window, &days[i + 1..], now)?;
                }
            }
            if e.subscribes("key.expired") {
                // Expiries since the endpoint was made (not every key that ever expired),
                // within the notices kept.
                let from = e.created_at.saturating_sub(1).max(now.saturating_sub(EXPIRED_LOOKBACK_MS));
                let window = Window { days: 0, from, to: now };
                sent += self.announce(e, "key.expired", window, &[], now)?;
            }
        }
        store.webhook_transaction(|tx| Ok(tx.prune_expiry_notices(now.saturating_sub(NOTICE_KEPT_MS))?))?;
        Ok(sent)
    }

    /// Announces to `e` the keys expiring in the window without a notice for it (noting
    /// the `wider` thresholds passed too).
    fn announce(
        &self,
        e: &Endpoint,
        event_type: &'static str,
        w: Window,
        wider: &[i64],
        now: i64,
    ) -> Result<usize, RbacError> {
        let store = self.rbac.store();
        let due = store.webhook_read(|tx| {
            Ok(tx.keys_expiring_unnoticed(&e.workspace_id, &e.id, w.days, w.from, w.to, EXPIRY_BATCH)?)
        })?;
        let mut sent = 0;
        for (key_id, expires) in due {
            let wrote = store.webhook_transaction(|tx| {
                if !tx.insert_expiry_notice(&key_id, &e.id, w.days, expires)? {
                    return Ok(false);
                }
                for d in wider {
                    tx.insert_expiry_notice(&key_id, &e.id, *d, expires)?;
                }
                let fields = match w.days {
                    0 => json!({ "expires": expires }),
                    days => json!({ "expires": expires, "daysBefore": days }),
                };
                self.outbox.key_event_to(
                    tx,
                    &e.workspace_id,
                    &key_id,
                    event_type,
                    now,
                    fields,
                    std::slice::from_ref(&e.id),
                )
            })?;
            sent += usize::from(wrote);
        }
        Ok(sent)
    }
}

/// Keys expiring in `(from, to]`, announced under `days` (0: expired).
#[derive(Debug, Clone, Copy)]
struct Window {
    days: i64,
    from: i64,
    to: i64,
}
