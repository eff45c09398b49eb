//! Recording and the write side of analytics: each verification and rate-limit decision
//! counted in memory (no I/O), the counts flushed to the database in one transaction under
//! an id that makes a retried flush land once, then rolled up into hours and days (each
//! closed hour keeping its heaviest identifiers only) and pruned.
//!
//! A flush appends its verification counts to the journal as one entry ([`crate::journal`]),
//! and a fold adds the journal up into `verification_counts`, each series once for all the
//! entries it is in: before every read of the counts (on any instance, so a count reaches
//! every reader as soon as its flush lands), and when the oldest entry has waited
//! [`FOLD_AFTER_MS`]. A key verified many times a minute costs the database one row a
//! minute, not one per flush.

use crate::limit_recorder::{Drained, LimitDecision};
use crate::recorder::{Outcome, SeriesCount};
use crate::store::{IdentifierCount, RatelimitCount, VerificationCount};
use crate::{
    AnalyticsService, AnalyticsStore, DAY, HOUR, MINUTE, TOP_IDENTIFIERS, VERIFY_NAMESPACE_PREFIX, floor,
};
use keygate_domain::{IdPrefix, new_id};
use keygate_rbac::{RbacError, Verification, VerifyScope};
use std::sync::atomic::Ordering;

/// How many periodic flushes a series' oldest count not yet written waits before one
/// writes it ([`AnalyticsService::flush_analytics_due`]; with a flush every second, 2 to 3
/// s): the counts a key gathers meanwhile are written in the same row, so a key verified
/// every few seconds costs a row per few verifications rather than one per verification.
pub const WRITE_AFTER_FLUSHES: u64 = 2;

/// How long the journal's oldest entry waits for a read before a periodic flush folds the
/// journal anyway ([`AnalyticsService::fold_journal`]).
pub const FOLD_AFTER_MS: i64 = MINUTE;

/// How many flushes' entries one fold's transaction takes (bounding its memory; the rest
/// are the next transaction's).
const FOLD_TAKE: usize = 256;

/// Every how many periodic flushes the rate-limit counts are taken (every 2 s: their
/// identifiers' rows are written per flush that finds them heavier than their sketch's
/// floor, so a shorter cadence writes more rows).
pub const LIMITS_EVERY_FLUSHES: u64 = 2;

/// What a flush takes from the recorders.
#[derive(Debug, Clone, Copy)]
enum Taken {
    /// The verification counts that are due, the rate-limit counts of the flush.
    Due,
    /// Every verification count, the rate-limit counts of the flush.
    All,
    /// Everything, at shutdown.
    Final,
}

/// How long minutes stay before they are rolled into hours, and hours into days.
pub const MINUTES_KEPT_MS: i64 = DAY;
pub const HOURS_KEPT_MS: i64 = 30 * DAY;
/// How long after an hour ends its identifiers are trimmed (late writes land first).
const TRIM_AFTER_MS: i64 = 5 * MINUTE;

impl<S: AnalyticsStore> AnalyticsService<S> {
    /// Counts a verification's outcome, in memory (nothing when analytics are off, or when
    /// neither the key nor the caller's workspace is known), with the key's and identity's
    /// rate limits that applied ([`Self::record_limit`]'s counts), and the credits it was
    /// charged (`spent_credits`, API-v2.md §22). No I/O.
    pub fn record_verification(
        &self,
        v: &Verification,
        scope: &VerifyScope<'_>,
        tags: &[String],
        spent_credits: u64,
    ) {
        let at_ms = self.rbac.clock().now_ms();
        self.record_verification_limits(v, at_ms);
        let Some(recorder) = &self.recorder else { return };
        let (workspace_id, api_id, key_id, identity_id) = match v.key() {
            Some(k) => (k.workspace_id(), k.api_id(), k.id(), k.identity_id()),
            None => match scope.workspace_id {
                Some(ws) => (ws, scope.api_id, "", None),
                None => return,
            },
        };
        let outcome =
            Outcome { workspace_id, api_id, key_id, identity_id, code: v.code, tags, at_ms, spent_credits };
        match &v.found {
            Some(key) if tags.is_empty() => recorder.record_beside(key, &outcome),
            _ => recorder.record(&outcome),
        }
    }

    /// Counts a decision of a namespace made at `at_ms` (the decision's own clock reading:
    /// the hot path reads the clock once), in memory (nothing when analytics are off). No
    /// I/O.
    pub fn record_limit(
        &self,
        workspace_id: &str,
        namespace_id: &str,
        identifier: &str,
        passed: bool,
        at_ms: u64,
    ) {
        if let Some(r) = &self.limit_recorder {
            r.record(&LimitDecision { workspace_id, namespace_id, identifier, passed, at_ms });
        }
    }

    /// Counts the limits of a verification's key and identity (§13) that applied, each
    /// under `verify:<name>`, by the key's id (or the identity's, for its limits): all
    /// passed or all denied, as they are taken.
    fn record_verification_limits(&self, v: &Verification, at_ms: u64) {
        let (Some(r), Some(key)) = (&self.limit_recorder, v.key()) else { return };
        if v.ratelimits.is_empty() {
            return;
        }
        let passed = !v.ratelimits.iter().any(|l| l.exceeded);
        // `verify:<name>` on the stack where it fits: no allocation per verification.
        let mut buf = [0u8; 128];
        for l in &v.ratelimits {
            let identifier = match l.identity {
                true => v.identity().map_or(key.id(), |i| i.identity.id.as_str()),
                false => key.id(),
            };
            let namespace = joined(&mut buf, VERIFY_NAMESPACE_PREFIX, &l.name);
            r.record(&LimitDecision {
                workspace_id: key.workspace_id(),
                namespace_id: &namespace,
                identifier,
                passed,
                at_ms,
            });
        }
    }

    /// Writes every count held in memory to the database (added to what is there: the
    /// current minute's row grows with each flush): how many rows. Each flush has an id,
    /// written with it: when its commit is not confirmed (a failure, or a reply lost after
    /// the commit), the next flush writes it again under that id before taking anything
    /// new, and the id, found, says it landed the first time, so counts are never lost to
    /// a failure nor added twice. Meanwhile new counts wait in the recorders, within their
    /// bounds.
    /// The journal is folded after, so the counts are in `verification_counts` when it
    /// returns.
    pub fn flush_analytics(&self) -> Result<usize, RbacError> {
        let n = self.flush_all(Taken::All)?;
        self.fold_journal()?;
        Ok(n)
    }

    /// The periodic flush: [`Self::flush_analytics`] of the verification counts that are
    /// due, those of series whose oldest count not yet written came before the
    /// [`WRITE_AFTER_FLUSHES`]th periodic flush before this one (so a series verified again
    /// meanwhile is written once for both), and of the rate-limit counts every
    /// [`LIMITS_EVERY_FLUSHES`]th. Run every second, a count reaches the database within 3
    /// s (and the write).
    /// The journal is folded after when its oldest entry has waited [`FOLD_AFTER_MS`].
    pub fn flush_analytics_due(&self) -> Result<usize, RbacError> {
        let n = self.flush_all(Taken::Due)?;
        let oldest = self.rbac.store().analytics_read(|tx| Ok(tx.journal_oldest()?))?;
        if oldest.is_some_and(|t| t <= self.now() - FOLD_AFTER_MS) {
            self.fold_journal()?;
        }
        Ok(n)
    }

    /// [`Self::flush_analytics`] at shutdown: nothing is held after.
    pub fn flush_analytics_final(&self) -> Result<usize, RbacError> {
        let n = self.flush_all(Taken::Final)?;
        self.fold_journal()?;
        Ok(n)
    }

    /// Before a read of the verification counts (every read of this crate's, and any
    /// other that reads `verification_counts`): the journal folded, when it holds anything,
    /// so the read sees every count flushed so far by any instance.
    pub fn fold_for_read(&self) -> Result<(), RbacError> {
        if self.rbac.store().analytics_read(|tx| Ok(tx.journal_oldest()?))?.is_some() {
            self.fold_journal()?;
        }
        Ok(())
    }

    /// Adds the journal up into `verification_counts`: how many rows it wrote. First the
    /// flushes' entries are taken, their counts summed per series and bucket and appended
    /// again as merged entries of at most 200 series (a flush chunk), in one transaction;
    /// then each merged entry is added to the counts in the transaction that takes it. So
    /// each count lands once, whatever fails or whichever instance folds meanwhile (an
    /// entry is taken by one transaction), and no transaction holds the database's write
    /// lock for more than a chunk's writes. An entry that does not decode is logged and
    /// dropped.
    pub fn fold_journal(&self) -> Result<usize, RbacError> {
        let _one = self.folding.lock();
        let store = self.rbac.store();
        let now = self.now();
        loop {
            let more = store.analytics_transaction(|tx| {
                let taken = tx.take_journal(false, FOLD_TAKE)?;
                let merged = crate::journal::merge(&taken, |e| log::error!("analytics: dropped {e}"));
                for chunk in merged.chunks(FLUSH_CHUNK_ROWS) {
                    tx.append_journal(
                        &new_id(IdPrefix::Request),
                        true,
                        now,
                        &crate::journal::encode(chunk.iter().copied()),
                    )?;
                }
                Ok(taken.len() == FOLD_TAKE)
            })?;
            if !more {
                break;
            }
        }
        let mut rows = 0;
        while let Some(n) = store.analytics_transaction(|tx| {
            let Some(body) = tx.take_journal(true, 1)?.pop() else { return Ok(None) };
            let counts: Vec<VerificationCount> = match crate::journal::decode(&body) {
                Ok(counts) => counts.iter().map(crate::journal::Count::to_stored).collect(),
                Err(e) => {
                    log::error!("analytics: dropped {e}");
                    Vec::new()
                }
            };
            tx.add_verification_counts(&counts)?;
            Ok(Some(counts.len()))
        })? {
            rows += n;
        }
        Ok(rows)
    }

    fn flush_all(&self, taken: Taken) -> Result<usize, RbacError> {
        // One flush at a time; unconfirmed ones are settled before anything new is taken.
        let mut unconfirmed = self.unconfirmed_flush.lock();
        write_in_order(&mut unconfirmed, |f| self.write_flush(f))?;
        let mut batch = Flush { id: new_id(IdPrefix::Request), ..Flush::default() };
        let now = self.rbac.clock().now_ms();
        if let Some(recorder) = &self.recorder {
            let due = matches!(taken, Taken::Due).then_some((WRITE_AFTER_FLUSHES, now));
            let drained = recorder.drain(due);
            batch.series = drained.len();
            if !drained.is_empty() {
                batch.journal = journal_entry(&drained);
            }
        }
        let limits_due = match taken {
            Taken::Due => {
                self.due_flushes.fetch_add(1, Ordering::Relaxed).is_multiple_of(LIMITS_EVERY_FLUSHES)
            }
            Taken::All | Taken::Final => true,
        };
        if let Some(recorder) = &self.limit_recorder
            && limits_due
        {
            let drained = recorder.drain((!matches!(taken, Taken::Final)).then_some(now));
            (batch.limits, batch.identifiers) = stored_limits(&drained);
        }
        if batch.is_empty() {
            return Ok(0);
        }
        *unconfirmed = batch.into_chunks();
        write_in_order(&mut unconfirmed, |f| self.write_flush(f))
    }

    /// Writes a flush in one transaction, unless its id says it landed already: how many
    /// rows it wrote.
    fn write_flush(&self, f: &Flush) -> Result<usize, RbacError> {
        self.rbac.store().analytics_transaction(|tx| {
            if !tx.claim_analytics_flush(&f.id, self.now())? {
                return Ok(0);
            }
            if !f.journal.is_empty() {
                tx.append_journal(&f.id, false, self.now(), &f.journal)?;
            }
            tx.add_ratelimit_counts(&f.limits)?;
            tx.add_identifier_counts(&f.identifiers)?;
            Ok(f.series + f.limits.len() + f.identifiers.len())
        })
    }

    /// Rolls minutes older than a day into hours and hours older than 30 days into days,
    /// and deletes days older than `retention_days`, for verifications and rate-limit
    /// decisions (whose closed hours keep their heaviest identifiers only) (idempotent;
    /// several instances may run it): how many rows it moved or deleted.
    pub fn roll_up_analytics(&self, retention_days: u64) -> Result<usize, RbacError> {
        let now = self.now();
        let hours_from = floor(now - MINUTES_KEPT_MS, HOUR);
        let days_from = floor(now - HOURS_KEPT_MS, DAY);
        let kept_from =
            floor(now - i64::try_from(retention_days).unwrap_or(i64::MAX / DAY).saturating_mul(DAY), DAY);
        let closed = floor(now - TRIM_AFTER_MS, HOUR);
        let keep = TOP_IDENTIFIERS;
        let store = &**self.rbac.store();
        let mut n = 0;
        n += store
            .analytics_transaction(|tx| Ok(tx.roll_up_verification_counts(MINUTE, HOUR, hours_from)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.roll_up_verification_counts(HOUR, DAY, days_from)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.delete_verification_counts_before(kept_from)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.roll_up_ratelimit_counts(MINUTE, HOUR, hours_from)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.roll_up_ratelimit_counts(HOUR, DAY, days_from)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.trim_identifier_counts(0, HOUR, closed, keep)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.trim_identifier_counts(HOUR, DAY, days_from, keep)?))?;
        n += store.analytics_transaction(|tx| Ok(tx.delete_ratelimit_counts_before(kept_from)?))?;
        // A flush is settled within seconds; its id is kept a day.
        store.analytics_transaction(|tx| Ok(tx.delete_analytics_flushes_before(now - DAY)?))?;
        Ok(n)
    }
}

/// The rows of one flush, and its id.
#[derive(Debug, Default)]
pub(crate) struct Flush {
    id: String,
    /// The verification counts, as a journal entry (empty: none), and how many series.
    journal: Vec<u8>,
    series: usize,
    limits: Vec<RatelimitCount>,
    identifiers: Vec<IdentifierCount>,
}

impl Flush {
    fn is_empty(&self) -> bool {
        self.journal.is_empty() && self.limits.is_empty() && self.identifiers.is_empty()
    }

    /// The flush as flushes of at most [`FLUSH_CHUNK_ROWS`] rows of rate-limit counts (the
    /// journal entry, one row, with the first), each with an id of its own (one
    /// transaction each).
    fn into_chunks(self) -> std::collections::VecDeque<Flush> {
        if self.limits.len() + self.identifiers.len() <= FLUSH_CHUNK_ROWS {
            return [self].into();
        }
        let chunk = || Flush { id: new_id(IdPrefix::Request), ..Flush::default() };
        let mut out = std::collections::VecDeque::new();
        // The rows moved into their chunks, not copied.
        for c in chunked(self.limits) {
            out.push_back(Flush { limits: c, ..chunk() });
        }
        for c in chunked(self.identifiers) {
            out.push_back(Flush { identifiers: c, ..chunk() });
        }
        if let Some(first) = out.front_mut() {
            (first.journal, first.series) = (self.journal, self.series);
        }
        out
    }
}

/// `rows` as vectors of at most [`FLUSH_CHUNK_ROWS`], in order, each row moved once.
fn chunked<T>(rows: Vec<T>) -> impl Iterator<Item = Vec<T>> {
    let mut rows = rows.into_iter().peekable();
    std::iter::from_fn(move || {
        rows.peek()?;
        Some(rows.by_ref().take(FLUSH_CHUNK_ROWS).collect())
    })
}

/// The most rows one flush transaction writes. A flush of more is written as several, so
/// that a write waiting behind it (a verification's credit commit, on the worker that
/// serves every request) waits for one chunk, a millisecond or two, not for the whole
/// flush (15-20 ms for a few thousand rows).
const FLUSH_CHUNK_ROWS: usize = 200;

/// Writes `queue`'s flushes in order, each taken off once written: how many rows; on a
/// failure, it and those after it stay queued.
fn write_in_order(
    queue: &mut std::collections::VecDeque<Flush>,
    write: impl Fn(&Flush) -> Result<usize, RbacError>,
) -> Result<usize, RbacError> {
    let mut rows = 0;
    while let Some(f) = queue.front() {
        rows += write(f)?;
        queue.pop_front();
    }
    Ok(rows)
}

/// Drained series as one journal entry (minute buckets; the tag sets as the table stores
/// them).
fn journal_entry(drained: &[SeriesCount]) -> Vec<u8> {
    let tags: Vec<std::borrow::Cow<'static, str>> = drained
        .iter()
        .map(|c| match c.series.tags().collect::<Vec<_>>() {
            t if t.is_empty() => "[]".into(),
            t => serde_json::to_string(&t).unwrap_or_else(|_| "[]".into()).into(),
        })
        .collect();
    crate::journal::encode(drained.iter().zip(&tags).map(|(c, tags)| {
        let s = &c.series;
        crate::journal::Count {
            workspace_id: s.workspace_id(),
            width: MINUTE,
            bucket: i64::try_from(s.minute).unwrap_or(i64::MAX),
            api_id: s.api_id(),
            key_id: s.key_id(),
            identity_id: s.identity_id(),
            outcome: s.code.as_str(),
            tags,
            count: c.count,
            spent_credits: c.spent_credits,
        }
    }))
}

/// Drained rate-limit counts as the database keeps them (open hours' identifiers at
/// width 0).
fn stored_limits(d: &Drained) -> (Vec<RatelimitCount>, Vec<IdentifierCount>) {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let counts = d
        .minutes
        .iter()
        .map(|m| RatelimitCount {
            workspace_id: m.workspace_id.to_string(),
            namespace_id: m.namespace_id.to_string(),
            width: MINUTE,
            bucket: int(m.minute),
            passed: m.passed,
            denied: m.denied,
        })
        .collect();
    let identifiers = d
        .identifiers
        .iter()
        .map(|i| IdentifierCount {
            workspace_id: i.workspace_id.to_string(),
            namespace_id: i.namespace_id.to_string(),
            width: 0,
            bucket: int(i.hour),
            identifier: i.identifier.to_string(),
            passed: i.passed,
            denied: i.denied,
        })
        .collect();
    (counts, identifiers)
}

/// `prefix` followed by `name`, in `buf` where it fits (no allocation), else on the heap.
fn joined<'b>(buf: &'b mut [u8], prefix: &str, name: &str) -> std::borrow::Cow<'b, str> {
    if let Some((head, tail)) =
        buf.get_mut(..prefix.len() + name.len()).map(|to| to.split_at_mut(prefix.len()))
    {
        head.copy_from_slice(prefix.as_bytes());
        tail.copy_from_slice(name.as_bytes());
    }
    match buf.get(..prefix.len() + name.len()).map(std::str::from_utf8) {
        Some(Ok(joined)) => joined.into(),
        _ => format!("{prefix}{name}").into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rows_are_cut_into_chunks_in_order() {
        let n = super::FLUSH_CHUNK_ROWS;
        let chunks: Vec<Vec<usize>> = super::chunked((0..2 * n + 1).collect()).collect();
        assert_eq!(chunks.iter().map(Vec::len).collect::<Vec<_>>(), [n, n, 1]);
        assert_eq!(chunks.concat(), (0..2 * n + 1).collect::<Vec<_>>());
        assert_eq!(super::chunked(Vec::<u8>::new()).count(), 0);
    }

    #[test]
    fn a_name_is_joined_on_the_stack_where_it_fits_else_on_the_heap() {
        let mut buf = [0u8; 16];
        let short = super::joined(&mut buf, "verify:", "requests");
        assert!(matches!(short, std::borrow::Cow::Borrowed("verify:requests")), "{short:?}");
        let long = super::joined(&mut buf, "verify:", "a name longer than the buffer é");
        assert!(matches!(&long, std::borrow::Cow::Owned(s) if s == "verify:a name longer than the buffer é"));
        assert_eq!(super::joined(&mut buf, "verify:", "é"), "verify:é");
    }
}
