//! What secret scanning stores beside rbac's rows: one row per key reported leaked (the
//! first report's url, source and action), so a report of the same token again changes
//! nothing more.

use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};

type R<T> = Result<T, StorageError>;

/// The first report of a leaked key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeakRecord<'a> {
    pub workspace_id: &'a str,
    pub key_id: &'a str,
    pub url: &'a str,
    pub source: &'a str,
    /// `disable`, `expire` or `report`.
    pub action: &'static str,
    pub at: i64,
}

/// Secret scanning's rows.
pub trait LeakRows {
    /// Whether the key was reported leaked before.
    fn leak_recorded(&mut self, key_id: &str) -> R<bool>;
    /// Records the first report of a key (the caller holds the key's lock).
    fn record_leak(&mut self, leak: &LeakRecord<'_>) -> R<()>;
}

/// A transaction over rbac's rows and secret scanning's.
pub trait LeakTx: RbacTx + LeakRows {}

impl<T: RbacTx + LeakRows + ?Sized> LeakTx for T {}

/// A store that hands out secret scanning's transactions. A closure returning `Err` rolls
/// its transaction back.
pub trait LeakStore: RbacStore {
    fn leak_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn LeakTx) -> Result<T, RbacError>;
}
