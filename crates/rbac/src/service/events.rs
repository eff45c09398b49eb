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
    /// A secret scanner found the key where it was published (API-v2.md §24).
    Leaked {
        url: &'a str,
        source: &'a str,
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
            KeyChange::Leaked { .. } => "key.leaked",
        }
    }
}

/// A key's credit counter as a write of spends left it (`keygate-usage`'s ledgers, when
/// they write counters to the rows): what it was, what it is, and whether a refill came
/// between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditChange<'a> {
    pub key_id: &'a str,
    pub before: u64,
    pub after: u64,
    pub refilled: bool,
}

impl<'a> CreditChange<'a> {
    /// From the counter's (remaining, last refill) before and after.
    pub fn of(key_id: &'a str, before: (u64, Option<i64>), after: (u64, Option<i64>)) -> Self {
        Self { key_id, before: before.0, after: after.0, refilled: before.1 != after.1 }
    }

    /// Whether credits went out (the only changes thresholds are crossed by).
    pub fn spent(&self) -> bool {
        self.refilled || self.after < self.before
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

    /// Whether a change of this kind in the workspace is told to anyone (a change of many
    /// keys reads them for [`keys_changed`](Self::keys_changed) only then). Yes by default.
    fn wants(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        change: KeyChange<'_>,
    ) -> Result<bool, RbacError> {
        let _ = (tx, workspace_id, change);
        Ok(true)
    }

    /// Told of the same change of many keys (an import, an API's deletion).
    fn keys_changed(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_ids: &[String],
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError> {
        for id in key_ids {
            self.key_changed(tx, workspace_id, id, change, at)?;
        }
        Ok(())
    }

    /// Told of credit counters written by spends, in the transaction that writes them
    /// (each counter's writes are serialized by the rows, so every crossing of a
    /// threshold is seen by exactly one call). Nothing by default.
    fn credits_spent(
        &self,
        tx: &mut dyn RbacTx,
        changes: &[CreditChange<'_>],
        at: i64,
    ) -> Result<(), RbacError> {
        let _ = (tx, changes, at);
        Ok(())
    }
}

impl<S: RbacStore> RbacService<S> {
    /// Registers the one [`KeyEvents`].
    pub fn with_key_events(mut self, events: std::sync::Arc<dyn KeyEvents>) -> Self {
        self.key_events = Some(events);
        self
    }

    /// The registered [`KeyEvents`] (the credit ledgers tell it of spends).
    pub fn key_events(&self) -> Option<&std::sync::Arc<dyn KeyEvents>> {
        self.key_events.as_ref()
    }

    /// Tells the registered [`KeyEvents`], if any, of `change` to each of the keys, in the
    /// change's transaction; `key_ids` is asked for only when someone is told.
    pub fn keys_event(
        &self,
        tx: &mut dyn RbacTx,
        workspace_id: &str,
        key_ids: impl FnOnce(&mut dyn RbacTx) -> Result<Vec<String>, RbacError>,
        change: KeyChange<'_>,
        at: i64,
    ) -> Result<(), RbacError> {
        let Some(events) = &self.key_events else { return Ok(()) };
        if !events.wants(tx, workspace_id, change)? {
            return Ok(());
        }
        let ids = key_ids(tx)?;
        events.keys_changed(tx, workspace_id, &ids, change, at)
    }

    /// Tells the registered [`KeyEvents`], if any, of `change` to the key, in the change's
    /// transaction (the other capabilities' writes of a key too: `keys.updateCredits`).
    pub fn key_event(
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
