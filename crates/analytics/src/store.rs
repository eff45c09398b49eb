//! The storage traits analytics owns: verification counts (API-v2.md §14) and rate-limit
//! counts (§14.1) per time bucket. `keygate-store` implements them for SQLite and
//! PostgreSQL, in the same transactions as the RBAC ones ([`AnalyticsTx`] extends
//! [`RbacTx`], so a read checks the API or identity it counts in the same snapshot).

use keygate_rbac::{RbacError, RbacStore, RbacTx, StorageError};

type R<T> = Result<T, StorageError>;

/// Verification analytics (API-v2.md §14): counts per series and time bucket.
pub trait VerificationCountTx {
    /// Adds each count to its row (created when absent): instances add up.
    fn add_verification_counts(&mut self, counts: &[VerificationCount]) -> R<()>;
    /// The counts `filter` selects, of every bucket width, summed as it says.
    fn verification_counts(&mut self, filter: &VerificationFilter<'_>) -> R<Vec<VerificationCount>>;
    /// Moves the counts of buckets of `from` ms starting before `before` into buckets of
    /// `to` ms (added to what is there), serialized against other instances doing the
    /// same: how many rows it moved.
    fn roll_up_verification_counts(&mut self, from: i64, to: i64, before: i64) -> R<usize>;
    /// Deletes the counts of buckets starting before `before`: how many.
    fn delete_verification_counts_before(&mut self, before: i64) -> R<usize>;
    /// The latest bucket with a count of each key that has one, of `key_ids`.
    fn keys_last_used(&mut self, key_ids: &[&str]) -> R<Vec<(String, i64)>>;
    /// Records that the analytics flush `id` is written in this transaction: false when it
    /// was already (an earlier attempt landed; write nothing).
    fn claim_analytics_flush(&mut self, id: &str, now: i64) -> R<bool>;
    /// Forgets the flushes written before `before`: how many.
    fn delete_analytics_flushes_before(&mut self, before: i64) -> R<usize>;
    /// Appends an entry to the verification journal ([`crate::journal`]) under `id` (a new
    /// id, which sorts by time): a flush's counts (`merged` false) or a fold's sums (true).
    fn append_journal(&mut self, id: &str, merged: bool, written_at: i64, body: &[u8]) -> R<()>;
    /// Takes (deletes, and returns the bodies of) up to `max` of the oldest journal entries
    /// of the kind. An entry another transaction takes meanwhile is that one's alone.
    fn take_journal(&mut self, merged: bool, max: usize) -> R<Vec<Vec<u8>>>;
    /// When the oldest journal entry was written (`None`: the journal is empty).
    fn journal_oldest(&mut self) -> R<Option<i64>>;
}

/// A count of verifications, as stored: absent parts are empty strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerificationCount {
    pub workspace_id: String,
    /// The bucket's length (ms) and start (Unix ms).
    pub width: i64,
    pub bucket: i64,
    pub api_id: String,
    pub key_id: String,
    pub identity_id: String,
    pub outcome: String,
    /// Sorted, each once.
    pub tags: Vec<String>,
    pub count: u64,
    /// The credits the counted verifications were charged (API-v2.md §22).
    pub spent_credits: u64,
}

/// Which counts a read takes: a workspace's (API's, when given), buckets starting in
/// `start..=end`, and optionally some keys and one identity; and how the database sums
/// them before answering.
#[derive(Debug, Clone, Copy)]
pub struct VerificationFilter<'a> {
    pub workspace_id: &'a str,
    pub api_id: Option<&'a str>,
    pub key_ids: &'a [String],
    pub identity_id: Option<&'a str>,
    pub start: i64,
    pub end: i64,
    pub sums: VerificationSums,
}

/// How a read's counts are summed in the database: always per outcome; per bucket of
/// `width` ms (each count's `bucket` then the start of its bucket of that width; `None`:
/// every bucket in one, `bucket` 0) and per API, key, identity and tag set only when
/// asked (a part not asked for reads as empty). Fewer rows cross to the service, whatever
/// the number of keys.
#[derive(Debug, Clone, Copy, Default)]
pub struct VerificationSums {
    pub width: Option<i64>,
    pub by_api: bool,
    pub by_key: bool,
    pub by_identity: bool,
    pub by_tags: bool,
}

/// Rate-limit analytics (API-v2.md §14.1): decisions per namespace and time bucket, and
/// the heaviest identifiers per namespace-hour.
pub trait RatelimitCountTx {
    /// Adds each count to its row (created when absent): instances add up.
    fn add_ratelimit_counts(&mut self, counts: &[RatelimitCount]) -> R<()>;
    /// Adds each identifier's count to its row (created when absent).
    fn add_identifier_counts(&mut self, counts: &[IdentifierCount]) -> R<()>;
    /// The namespace's counts in buckets starting in `start..=end`, of every width.
    fn ratelimit_counts(
        &mut self,
        workspace_id: &str,
        namespace_id: &str,
        start: i64,
        end: i64,
    ) -> R<Vec<RatelimitCount>>;
    /// The namespace's identifiers in buckets starting in `start..=end`, summed over the
    /// range: the `limit` heaviest by denials (`by_denied`) or by total, heaviest first
    /// (then by identifier).
    fn top_identifiers(
        &mut self,
        workspace_id: &str,
        namespace_id: &str,
        range: (i64, i64),
        by_denied: bool,
        limit: usize,
    ) -> R<Vec<IdentifierCount>>;
    /// Moves the namespace counts of buckets of `from` ms starting before `before` into
    /// buckets of `to` ms (added to what is there), serialized against other instances:
    /// how many rows it moved.
    fn roll_up_ratelimit_counts(&mut self, from: i64, to: i64, before: i64) -> R<usize>;
    /// Moves the identifier counts of buckets of `from` ms (0: an hour still open to
    /// every instance's writes) starting before `before` into buckets of `to` ms, keeping
    /// per namespace and new bucket only the `keep` heaviest by total and the `keep`
    /// heaviest by denials; serialized against other instances: how many rows it read.
    fn trim_identifier_counts(&mut self, from: i64, to: i64, before: i64, keep: usize) -> R<usize>;
    /// Deletes the namespace and identifier counts of buckets starting before `before`.
    fn delete_ratelimit_counts_before(&mut self, before: i64) -> R<usize>;
    /// The workspace's decisions per namespace (id) in buckets starting in `start..=end`:
    /// `(namespace id, passed, denied)`.
    fn ratelimit_namespace_totals(
        &mut self,
        workspace_id: &str,
        start: i64,
        end: i64,
    ) -> R<Vec<(String, u64, u64)>>;
}

/// A namespace's rate-limit decisions in one bucket, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatelimitCount {
    pub workspace_id: String,
    /// A namespace's id, or `verify:<name>` (the limits of keys and identities).
    pub namespace_id: String,
    /// The bucket's length (ms) and start (Unix ms).
    pub width: i64,
    pub bucket: i64,
    pub passed: u64,
    pub denied: u64,
}

/// An identifier's rate-limit decisions in one namespace and bucket, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifierCount {
    pub workspace_id: String,
    pub namespace_id: String,
    /// The bucket's length (ms; 0: an hour still open) and start (Unix ms).
    pub width: i64,
    pub bucket: i64,
    pub identifier: String,
    pub passed: u64,
    pub denied: u64,
}

/// Everything an analytics transaction offers: the RBAC transaction's operations (APIs,
/// keys, identities, namespaces) and the counts'.
pub trait AnalyticsTx: RbacTx + VerificationCountTx + RatelimitCountTx + SqlQueryTx {}

impl<T: RbacTx + VerificationCountTx + RatelimitCountTx + SqlQueryTx + ?Sized> AnalyticsTx for T {}

/// A store that hands out analytics transactions besides RBAC ones. A closure returning
/// `Err` rolls its transaction back.
pub trait AnalyticsStore: RbacStore {
    fn analytics_transaction<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>;

    /// Several reads that agree with each other (one snapshot, no write lock).
    fn analytics_snapshot<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.analytics_transaction(f)
    }

    /// Reads outside a transaction.
    fn analytics_read<T, F>(&self, f: F) -> Result<T, RbacError>
    where
        F: FnOnce(&mut dyn AnalyticsTx) -> Result<T, RbacError>,
    {
        self.analytics_transaction(f)
    }
}

/// Analytics in SQL (API-v2.md §18): runs a statement [`crate::sql`] compiled.
pub trait SqlQueryTx {
    /// The rows of `q`, each one JSON array text; stopped at `deadline`
    /// ([`crate::sql::SqlRunError::TooExpensive`]).
    fn run_analytics_sql(
        &mut self,
        q: &crate::sql::Compiled,
        deadline: std::time::Instant,
    ) -> Result<Vec<String>, crate::sql::SqlRunError>;
}
