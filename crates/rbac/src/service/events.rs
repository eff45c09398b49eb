//! Key events for the webhook outbox (API-v2.md §23): every change of a key tells the
//! registered [`KeyEvents`] inside the change's transaction, so an event is committed with
//! its change or not at all. `keygate-webhooks` registers the one that writes them.

use crate::store::RbacTx;
use crate::{RbacError, RbacService, RbacStore};

/// What happened to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyChange<'a> {
    Created,
    /// Its fields, permissions, roles, limits or credits changed.
    Updated,
    /// Told before the key is deleted, so that it can still be read.
    Deleted,
    /// The key is the new one `keys.rerollKey` made from the key `from`.
    Rerolled {
        from: &'a str,
    },
}

impl KeyChange<'_> {
    /// The webhook event type (`key.created`, …).
    pub const fn event_type(self) -> &'static str {
        match self {
            KeyChange::Created => "key.created",
            KeyChange::Updated => "key.updated",
            KeyChange::Deleted => "key.deleted",
            KeyChange::Rerolled { .. } => "key.rerolled",
        }
    }
}

/// Told of every change of a key, in the transaction that makes it (after the write; for a
/// deletion, before it). An error rolls the change back.
pub trait KeyEvents: Send + Sync + std::fmt::Debug {
    fn key_changed(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_id: &str,
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError>;
}

impl<S: RbacStore> RbacService<S> {
    /// Registers the one [`KeyEvents`].
    pub fn with_key_events(mut self, events: std::sync::Arc<dyn KeyEvents>) -> Self {
        self.key_events = Some(events);
        self
    }

    /// Tells the registered [`KeyEvents`], if any, of `change` to the key.
    pub(crate) fn key_event(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_id: &str,
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError> {
        match &self.key_events {
            Some(events) => events.key_changed(tx, workspace_id, key_id, change, at),
            None => Ok(()),
        }
    }
}
