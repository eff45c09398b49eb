//! The storage traits usage owns: the credit counters on the keys' rows. `keygate-store`
//! implements them for SQLite and PostgreSQL, in the same transactions as the RBAC ones
//! ([`UsageTx`] extends [`RbacTx`]).

use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};

type R<T> = Result<T, StorageError>;

/// A key's credits (API-v2.md §12.1).
pub trait CreditTx {
    /// Adds `delta` (may be negative) to a key's remaining credits in one statement, never
    /// below 0 nor above 2^53 - 1; a key without credits is left alone. Answers the remaining credits after.
    fn add_key_credits(&mut self, key_id: &str, delta: i64) -> R<Option<u64>>;
    /// The credit counters of `key_ids` (sorted, each once), locked until the transaction
    /// ends (PostgreSQL: `FOR UPDATE`, in id order; SQLite: the writer's lock). Keys gone
    /// are left out.
    fn lock_key_credits(&mut self, key_ids: &[&str]) -> R<Vec<CreditRow>>;
    /// The credit counter of a key, unlocked (`None`: no such key).
    fn key_credit_row(&mut self, key_id: &str) -> R<Option<CreditRow>>;
    /// Writes live counters behind (the scale-out ledger, API-v2.md §13.5): each lands only
    /// on the row's credit version it was loaded from, and only when its change number is
    /// above the row's; the outcome of each, in order.
    fn write_behind_credits(&mut self, counters: &[(&str, LiveCredits)]) -> R<Vec<WrittenBehind>>;
    /// Writes keys' counters: (key id, remaining, last refill), in one statement where the
    /// backend allows. Keys without credits are left alone.
    fn write_key_credits(&mut self, counters: &[(&str, u64, Option<i64>)]) -> R<()>;
    /// Writes a key's credit counter as a process that keeps it in memory holds it, if the
    /// row still holds `expected` (remaining, last refill): whether it did (a key without
    /// credits, or changed by another process, is left alone).
    fn set_key_credit_counter(
        &mut self,
        key_id: &str,
        expected: (u64, Option<i64>),
        remaining: u64,
        last_refill_at: Option<i64>,
    ) -> R<bool>;
}

/// A key's credit counter as [`CreditTx::lock_key_credits`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreditRow {
    pub key_id: String,
    /// `None`: the key has no credits.
    pub remaining: Option<u64>,
    pub last_refill_at: Option<i64>,
    pub refill_amount: Option<u64>,
    pub created_at: i64,
    /// Rises with each change of the credits by an update (`updateCredits`, `updateKey`).
    pub version: i64,
    /// The change number of the live counter last written behind (scale-out).
    pub seq: i64,
}

/// A key's live credit counter, as the scale-out ledger's shared store holds it: the
/// value, and the row's credit version it was loaded from and its change number since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveCredits {
    pub remaining: u64,
    pub last_refill_at: Option<i64>,
    pub version: i64,
    pub seq: i64,
}

/// How a live counter's write-behind went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrittenBehind {
    /// The row holds this change or a later one of the same counter.
    Written,
    /// The row's credits were changed by an update since the counter was loaded (or the
    /// key has no credits, or is gone): the counter is out of date.
    Superseded,
}

/// What a spend on a key's row came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditSpend {
    pub paid: bool,
    pub remaining: Option<u64>,
}

/// Everything a usage transaction offers: the RBAC transaction's operations (keys, audit,
/// change counters) and the credit counters'.
pub trait UsageTx: RbacTx + CreditTx {}

impl<T: RbacTx + CreditTx + ?Sized> UsageTx for T {}

/// A store that hands out usage transactions besides RBAC ones. A closure returning `Err`
/// rolls its transaction back.
pub trait UsageStore: RbacStore {
    fn usage_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn UsageTx) -> Result<T, RbacError>;

    /// Where the embedded credit ledger journals the spends it answers before they reach
    /// the rows (beside a database file; `None`: no file, spends are committed before
    /// their answers).
    fn credit_journal(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// Reads outside a transaction.
    fn usage_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn UsageTx) -> Result<T, RbacError>,
    {
        self.usage_transaction(f)
    }
}
