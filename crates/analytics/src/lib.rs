//! keygate analytics (API-v2.md §14, §14.1): every verification and every rate-limit
//! decision counted in memory off the request path, flushed to the database every few
//! seconds (instances add up, a flush never lands twice), rolled up minute → hour → day,
//! pruned, and read back.
//!
//! - [`recorder`]: verifications counted per series (workspace, API, key, identity,
//!   outcome, tags, minute), sharded and bounded.
//! - [`limit_recorder`]: rate-limit decisions per namespace-minute, and each namespace's
//!   heaviest identifiers per hour (a heavy-hitters sketch).
//! - [`flush`]: recording through the service, the flush, roll-up and retention.
//! - [`journal`]: the flushes' counts as the journal holds them until a fold adds them up.
//! - [`verifications`]: `analytics.getVerifications`, v1's `keys.getVerifications`,
//!   `lastUsed`, the dashboard's charts.
//! - [`ratelimits`]: `keygate.getRatelimits` and the dashboard's totals.
//! - [`sql`]: `analytics.getVerifications` / `analytics.getRatelimits`, a SQL query over
//!   Unkey's public tables answered from these counts.
//!
//! Built on `keygate-rbac`: who may read what (a root key's `read_analytics`
//! permissions), and the APIs, keys, identities and namespaces the counts name, read in
//! the same snapshot as the counts ([`store::AnalyticsTx`] extends `RbacTx`).

pub mod flush;
pub mod journal;
pub mod limit_recorder;
pub mod ratelimits;
pub mod recorder;
pub mod sql;
pub mod store;
pub mod verifications;

pub use ratelimits::{LimitSlice, RatelimitsQuery, RatelimitsRow, TOP_IDENTIFIERS, VERIFY_NAMESPACE_PREFIX};
pub use store::{AnalyticsStore, AnalyticsTx};
pub use verifications::{
    DEFAULT_RETENTION_DAYS, DailyVerifications, KeyOrOwner, OrderField, TimeSlice, VerificationBucket,
    VerificationsQuery, VerificationsRow, field_name as outcome_field,
};

use keygate_rbac::RbacService;
use limit_recorder::LimitRecorder;
use recorder::Recorder;
use std::sync::Arc;

/// The analytics service: the recorders (none when analytics are off), over rbac's
/// service and store.
#[derive(Debug)]
pub struct AnalyticsService<S> {
    rbac: Arc<RbacService<S>>,
    /// Where verifications are counted; `None`: off.
    recorder: Option<Arc<Recorder>>,
    /// Where rate-limit decisions are counted; `None`: off.
    limit_recorder: Option<Arc<LimitRecorder>>,
    /// A flush whose commit was not confirmed ([`flush`]).
    unconfirmed_flush: parking_lot::Mutex<std::collections::VecDeque<flush::Flush>>,
    /// Held while this instance folds the journal ([`flush`]).
    folding: parking_lot::Mutex<()>,
    /// Periodic flushes so far (the rate-limit counts are taken every other one).
    due_flushes: std::sync::atomic::AtomicU64,
    /// The SQL queries running per workspace.
    sql_slots: sql::run::Slots,
}

impl<S: AnalyticsStore> AnalyticsService<S> {
    /// Analytics over `rbac`, holding at most `max_series` series of verifications and as
    /// many counts of rate-limit decisions between flushes (`None`: off; nothing is
    /// recorded, and reads answer what the database holds).
    pub fn new(rbac: Arc<RbacService<S>>, max_series: Option<usize>) -> Self {
        Self {
            rbac,
            recorder: max_series.map(|n| Arc::new(Recorder::new(n))),
            limit_recorder: max_series.map(|n| Arc::new(LimitRecorder::new(n))),
            unconfirmed_flush: Default::default(),
            folding: Default::default(),
            due_flushes: Default::default(),
            sql_slots: Default::default(),
        }
    }

    /// At most `capacity` SQL analytics queries of all workspaces at once (default
    /// [`sql::DEFAULT_MAX_CONCURRENT`]): each holds a database connection while it runs, so
    /// a server gives them at most part of its pool.
    pub fn with_sql_capacity(mut self, capacity: usize) -> Self {
        self.sql_slots = sql::run::Slots::new(capacity);
        self
    }

    /// The recorder of verifications, when analytics are on.
    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.as_ref()
    }

    /// The recorder of rate-limit decisions, when analytics are on.
    pub fn limit_recorder(&self) -> Option<&Arc<LimitRecorder>> {
        self.limit_recorder.as_ref()
    }

    fn now(&self) -> i64 {
        self.rbac.clock().now_ms() as i64
    }
}

/// The start of the bucket of `width` ms that holds `t`.
fn floor(t: i64, width: i64) -> i64 {
    t - t.rem_euclid(width)
}

const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;
