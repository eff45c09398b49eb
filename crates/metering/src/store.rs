//! What the usage export reads and writes beside rbac's rows: each sink's mark, and the
//! usage of identities in a period, summed from analytics' minute rows.

use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};

type R<T> = Result<T, StorageError>;

/// One identity's usage in a period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityUsage {
    pub workspace_id: String,
    pub identity_id: String,
    pub external_id: String,
    /// The identity's `meta`, as stored (JSON), when it has one.
    pub meta: Option<String>,
    /// Verifications of its keys, whatever their outcome.
    pub verifications: u64,
    /// Credits charged (API-v2.md §22).
    pub spent_credits: u64,
}

/// The export's rows.
pub trait MeteringRows {
    /// The sink's mark, when it has one (a read).
    fn export_mark(&mut self, sink: &str) -> R<Option<i64>>;
    /// The sink's mark (every period ending at or before it was exported), held until the
    /// transaction ends so that concurrent exporters of the sink take turns; a sink without
    /// one gets `initial`.
    fn hold_export_mark(&mut self, sink: &str, initial: i64, now: i64) -> R<i64>;
    /// Moves the sink's mark to `until`.
    fn set_export_mark(&mut self, sink: &str, until: i64, now: i64) -> R<()>;
    /// The usage of every identity with verifications counted in minutes `[from, to)`
    /// (of `workspace_id` alone when given), by workspace and external id.
    fn identity_usage(&mut self, from: i64, to: i64, workspace_id: Option<&str>) -> R<Vec<IdentityUsage>>;
}

/// A transaction over rbac's rows (the outbox among them) and the export's.
pub trait MeteringTx: RbacTx + MeteringRows {}

impl<T: RbacTx + MeteringRows + ?Sized> MeteringTx for T {}

/// A store that hands out the export's transactions. A closure returning `Err` rolls its
/// transaction back.
pub trait MeteringStore: RbacStore {
    fn metering_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn MeteringTx) -> Result<T, RbacError>;

    /// Reads in a read-only transaction (one snapshot on PostgreSQL).
    fn metering_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn MeteringTx) -> Result<T, RbacError>,
    {
        self.metering_transaction(f)
    }
}
