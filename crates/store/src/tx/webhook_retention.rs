//! The delivery log's retention (keygate_webhooks::retention): finished deliveries with
//! their attempts, then the events left without deliveries, a bounded number a pass.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, R, db_err};
use diesel::prelude::*;

/// Deletes at most `max` deliveries finished before `before` (and their attempts), then at
/// most `max` events older than `before` without deliveries; how many of each.
pub(super) fn prune(conn: &mut DbConn, before: i64, max: usize) -> R<(usize, usize)> {
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let finished: Vec<String> = webhook_deliveries::table
        // Written out, for the planner to use the partial index of finished deliveries.
        .filter(diesel::dsl::sql::<diesel::sql_types::Bool>("status <> 'pending'"))
        .filter(webhook_deliveries::updated_at.lt(before))
        .order(webhook_deliveries::updated_at.asc())
        .limit(max)
        .select(webhook_deliveries::id)
        .load(conn)
        .map_err(db_err)?;
    let mut deliveries = 0;
    for chunk in finished.chunks(BATCH_ROWS) {
        diesel::delete(webhook_attempts::table.filter(webhook_attempts::delivery_id.eq_any(chunk)))
            .execute(conn)
            .map_err(db_err)?;
        deliveries += diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::id.eq_any(chunk)))
            .execute(conn)
            .map_err(db_err)?;
    }
    let delivered = webhook_deliveries::table
        .filter(webhook_deliveries::event_id.eq(webhook_events::id))
        .select(webhook_deliveries::id);
    let orphans: Vec<String> = webhook_events::table
        .filter(webhook_events::created_at.lt(before))
        .filter(diesel::dsl::not(diesel::dsl::exists(delivered)))
        .order(webhook_events::created_at.asc())
        .limit(max)
        .select(webhook_events::id)
        .load(conn)
        .map_err(db_err)?;
    let mut events = 0;
    for chunk in orphans.chunks(BATCH_ROWS) {
        events += diesel::delete(webhook_events::table.filter(webhook_events::id.eq_any(chunk)))
            .execute(conn)
            .map_err(db_err)?;
    }
    Ok((deliveries, events))
}
