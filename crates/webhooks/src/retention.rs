//! How long the delivery log is kept: deliveries sent or failed longer ago than the
//! retention (`KEYGATE_WEBHOOKS_RETENTION_DAYS`, 30 days unless set), with their attempts,
//! and the events left without deliveries, are deleted in the background, a bounded
//! number a pass. Pending deliveries are never deleted.

use crate::{WebhookService, WebhookStore};
use keygate_rbac::RbacError;
use std::time::Duration;

/// Days a finished delivery is kept when the setting is not given.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;
/// How often each instance prunes.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(60);
/// The most deliveries (and the most events) one pass deletes: a long backlog is worked off
/// over several passes without holding the database.
pub const PRUNE_PER_PASS: usize = 5_000;
const DAY_MS: u64 = 86_400_000;

impl<S: WebhookStore> WebhookService<S> {
    /// One pass: deletes what is past the retention; how many deliveries and events.
    pub fn prune_history(&self) -> Result<(usize, usize), RbacError> {
        if self.retention_days == 0 {
            return Ok((0, 0));
        }
        let keep = i64::try_from(self.retention_days.saturating_mul(DAY_MS)).unwrap_or(i64::MAX);
        let before = self.now().saturating_sub(keep);
        self.rbac.store().webhook_transaction(|tx| Ok(tx.prune_webhook_history(before, PRUNE_PER_PASS)?))
    }
}
