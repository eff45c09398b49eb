//! Webhooks (the `webhook_endpoints`, `webhook_deliveries`, `webhook_attempts` and
//! `webhook_expiry_notices` tables): what `keygate-webhooks` reads and writes. The outbox
//! rbac writes with each change is [`super::outbox_tx`].

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use keygate_webhooks::{Attempt, Delivery, DeliveryStatus, Endpoint, EndpointSecrets, WebhookTx};

type EndpointRow = (
    String,
    String,
    String,
    String,
    Option<String>,
    bool,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    i64,
    Option<i64>,
);

macro_rules! endpoint_columns {
    () => {
        (
            webhook_endpoints::id,
            webhook_endpoints::workspace_id,
            webhook_endpoints::url,
            webhook_endpoints::events,
            webhook_endpoints::description,
            webhook_endpoints::enabled,
            webhook_endpoints::credits_low,
            webhook_endpoints::expiring_days,
            webhook_endpoints::secret,
            webhook_endpoints::previous_secret,
            webhook_endpoints::previous_secret_until,
            webhook_endpoints::created_at,
            webhook_endpoints::updated_at,
        )
    };
}

/// Numbers written comma-separated.
fn joined<T: ToString>(values: &[T]) -> String {
    values.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

fn parsed<T: std::str::FromStr>(s: &str) -> Vec<T> {
    s.split(',').filter_map(|v| v.parse().ok()).collect()
}

fn endpoint(r: EndpointRow) -> (Endpoint, EndpointSecrets) {
    let (
        id,
        workspace_id,
        url,
        events,
        description,
        enabled,
        low,
        days,
        secret,
        previous,
        until,
        at,
        updated,
    ) = r;
    let endpoint = Endpoint {
        id,
        workspace_id,
        url,
        events: events.split(' ').filter(|e| !e.is_empty()).map(str::to_string).collect(),
        description,
        enabled,
        credits_low: parsed(&low),
        expiring_days: parsed(&days),
        created_at: at,
        updated_at: updated,
    };
    (endpoint, EndpointSecrets { current: secret, previous, previous_until: until })
}

/// delivery id, attempt, at, status, error, response, duration (ms).
type AttemptRow = (String, i64, i64, Option<i64>, Option<String>, Option<String>, i64);

type DeliveryRow = (String, String, String, String, String, String, i64, Option<i64>, Option<i64>, i64);

macro_rules! delivery_columns {
    () => {
        (
            webhook_deliveries::id,
            webhook_deliveries::workspace_id,
            webhook_deliveries::endpoint_id,
            webhook_deliveries::event_id,
            webhook_deliveries::event_type,
            webhook_deliveries::status,
            webhook_deliveries::attempts,
            webhook_deliveries::last_status,
            webhook_deliveries::next_attempt_at,
            webhook_deliveries::created_at,
        )
    };
}

fn delivery(r: DeliveryRow) -> Delivery {
    let (id, workspace_id, endpoint_id, event_id, event_type, status, attempts, last_status, next, at) = r;
    Delivery {
        id,
        workspace_id,
        endpoint_id,
        event_id,
        event_type,
        status: DeliveryStatus::parse(&status).unwrap_or(DeliveryStatus::Failed),
        attempts,
        last_status,
        next_attempt_at: next,
        created_at: at,
    }
}

/// A delivery as the claim returns it.
#[derive(QueryableByName)]
struct Claimed {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    workspace_id: String,
    #[diesel(sql_type = Text)]
    endpoint_id: String,
    #[diesel(sql_type = Text)]
    event_id: String,
    #[diesel(sql_type = Text)]
    event_type: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_status: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    next_attempt_at: Option<i64>,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
}

impl WebhookTx for DieselTx<'_> {
    fn insert_webhook_endpoint(&mut self, e: &Endpoint, s: &EndpointSecrets) -> R<()> {
        diesel::insert_into(webhook_endpoints::table)
            .values((
                webhook_endpoints::id.eq(&e.id),
                webhook_endpoints::workspace_id.eq(&e.workspace_id),
                webhook_endpoints::url.eq(&e.url),
                webhook_endpoints::events.eq(e.events.join(" ")),
                webhook_endpoints::description.eq(&e.description),
                webhook_endpoints::enabled.eq(e.enabled),
                webhook_endpoints::credits_low.eq(joined(&e.credits_low)),
                webhook_endpoints::expiring_days.eq(joined(&e.expiring_days)),
                webhook_endpoints::secret.eq(&s.current),
                webhook_endpoints::previous_secret.eq(&s.previous),
                webhook_endpoints::previous_secret_until.eq(s.previous_until),
                webhook_endpoints::created_at.eq(e.created_at),
                webhook_endpoints::updated_at.eq(e.updated_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn webhook_endpoint(&mut self, workspace_id: &str, id: &str) -> R<Option<(Endpoint, EndpointSecrets)>> {
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::workspace_id.eq(workspace_id))
            .select(endpoint_columns!())
            .get_result::<EndpointRow>(self.conn)
            .optional()
            .map(|r| r.map(endpoint))
            .map_err(db_err)
    }

    fn webhook_endpoints(
        &mut self,
        workspace_id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Endpoint>> {
        let mut q = webhook_endpoints::table
            .filter(webhook_endpoints::workspace_id.eq(workspace_id))
            .select(endpoint_columns!())
            .order(webhook_endpoints::id.asc())
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .into_boxed();
        if let Some(after) = after {
            q = q.filter(webhook_endpoints::id.gt(after));
        }
        q.load::<EndpointRow>(self.conn)
            .map(|rows| rows.into_iter().map(|r| endpoint(r).0).collect())
            .map_err(db_err)
    }

    fn update_webhook_endpoint(&mut self, e: &Endpoint) -> R<()> {
        diesel::update(webhook_endpoints::table.filter(webhook_endpoints::id.eq(&e.id)))
            .set((
                webhook_endpoints::url.eq(&e.url),
                webhook_endpoints::events.eq(e.events.join(" ")),
                webhook_endpoints::description.eq(&e.description),
                webhook_endpoints::enabled.eq(e.enabled),
                webhook_endpoints::credits_low.eq(joined(&e.credits_low)),
                webhook_endpoints::expiring_days.eq(joined(&e.expiring_days)),
                webhook_endpoints::updated_at.eq(e.updated_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn set_webhook_secrets(&mut self, endpoint_id: &str, s: &EndpointSecrets) -> R<()> {
        diesel::update(webhook_endpoints::table.filter(webhook_endpoints::id.eq(endpoint_id)))
            .set((
                webhook_endpoints::secret.eq(&s.current),
                webhook_endpoints::previous_secret.eq(&s.previous),
                webhook_endpoints::previous_secret_until.eq(s.previous_until),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn delete_webhook_endpoint(&mut self, workspace_id: &str, id: &str) -> R<bool> {
        let of_endpoint = webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(id))
            .select(webhook_deliveries::id);
        diesel::delete(webhook_attempts::table.filter(webhook_attempts::delivery_id.eq_any(of_endpoint)))
            .execute(self.conn)
            .map_err(db_err)?;
        diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::endpoint_id.eq(id)))
            .execute(self.conn)
            .map_err(db_err)?;
        diesel::delete(
            webhook_endpoints::table
                .filter(webhook_endpoints::workspace_id.eq(workspace_id))
                .filter(webhook_endpoints::id.eq(id)),
        )
        .execute(self.conn)
        .map(|n| n > 0)
        .map_err(db_err)
    }

    fn webhook_deliveries(
        &mut self,
        endpoint_id: &str,
        status: Option<DeliveryStatus>,
        before: Option<&str>,
        limit: usize,
    ) -> R<Vec<Delivery>> {
        let mut q = webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
            .select(delivery_columns!())
            .order(webhook_deliveries::id.desc())
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .into_boxed();
        if let Some(s) = status {
            q = q.filter(webhook_deliveries::status.eq(s.as_str()));
        }
        if let Some(before) = before {
            q = q.filter(webhook_deliveries::id.lt(before));
        }
        q.load::<DeliveryRow>(self.conn).map(|rows| rows.into_iter().map(delivery).collect()).map_err(db_err)
    }

    fn webhook_delivery(&mut self, workspace_id: &str, id: &str) -> R<Option<Delivery>> {
        webhook_deliveries::table
            .filter(webhook_deliveries::id.eq(id))
            .filter(webhook_deliveries::workspace_id.eq(workspace_id))
            .select(delivery_columns!())
            .get_result::<DeliveryRow>(self.conn)
            .optional()
            .map(|r| r.map(delivery))
            .map_err(db_err)
    }

    fn webhook_attempts(&mut self, delivery_id: &str) -> R<Vec<Attempt>> {
        let rows: Vec<AttemptRow> = webhook_attempts::table
            .filter(webhook_attempts::delivery_id.eq(delivery_id))
            .order(webhook_attempts::attempt.asc())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows
            .into_iter()
            .map(|(delivery_id, attempt, at, status, error, response, duration_ms)| Attempt {
                delivery_id,
                attempt,
                at,
                status,
                error,
                response,
                duration_ms,
            })
            .collect())
    }

    fn replay_webhook_delivery(&mut self, id: &str, now: i64) -> R<()> {
        diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(id)))
            .set((
                webhook_deliveries::status.eq(DeliveryStatus::Pending.as_str()),
                webhook_deliveries::next_attempt_at.eq(Some(now)),
                webhook_deliveries::lease_owner.eq(None::<String>),
                webhook_deliveries::lease_until.eq(None::<i64>),
                webhook_deliveries::updated_at.eq(now),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn webhook_due(&mut self, now: i64) -> R<bool> {
        use diesel::dsl::exists;
        // `status = 'pending'` written out, so that the planner can use the partial index of
        // due deliveries (a bound value cannot prove the index's condition).
        diesel::select(exists(
            webhook_deliveries::table
                .filter(diesel::dsl::sql::<diesel::sql_types::Bool>("status = 'pending'"))
                .filter(webhook_deliveries::next_attempt_at.le(now))
                .filter(
                    webhook_deliveries::lease_until.is_null().or(webhook_deliveries::lease_until.lt(now)),
                ),
        ))
        .get_result(self.conn)
        .map_err(db_err)
    }

    fn claim_webhook_deliveries(
        &mut self,
        owner: &str,
        now: i64,
        lease_until: i64,
        limit: usize,
        skip: &[&str],
    ) -> R<Vec<Delivery>> {
        // One statement; on PostgreSQL the rows another claim holds are skipped, so
        // concurrent claims never take the same delivery. The bound is a literal (SQLite
        // compiles a statement again whenever its LIMIT's parameter is bound again), and so
        // are the workspaces skipped: ids of this store's own making, written only when
        // they are nothing but letters, digits and `_`.
        let skipped: Vec<String> = skip
            .iter()
            .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .map(|w| format!("'{w}'"))
            .collect();
        let skip = match skipped.is_empty() {
            true => String::new(),
            false => format!(" AND workspace_id NOT IN ({})", skipped.join(", ")),
        };
        let sql = |lock: &str| {
            format!(
                "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2 WHERE id IN \
                 (SELECT id FROM webhook_deliveries WHERE status = 'pending' AND next_attempt_at <= $3 \
                 AND (lease_until IS NULL OR lease_until < $3){skip} ORDER BY next_attempt_at LIMIT {limit}{lock}) \
                 RETURNING id, workspace_id, endpoint_id, event_id, event_type, status, attempts, \
                 last_status, next_attempt_at, created_at"
            )
        };
        let rows: Vec<Claimed> = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => diesel::sql_query(sql(""))
                .bind::<Text, _>(owner)
                .bind::<BigInt, _>(lease_until)
                .bind::<BigInt, _>(now)
                .load(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => diesel::sql_query(sql(" FOR UPDATE SKIP LOCKED"))
                .bind::<Text, _>(owner)
                .bind::<BigInt, _>(lease_until)
                .bind::<BigInt, _>(now)
                .load(c),
        }
        .map_err(db_err)?;
        let mut out: Vec<Delivery> = rows
            .into_iter()
            .map(|c| {
                delivery((
                    c.id,
                    c.workspace_id,
                    c.endpoint_id,
                    c.event_id,
                    c.event_type,
                    c.status,
                    c.attempts,
                    c.last_status,
                    c.next_attempt_at,
                    c.created_at,
                ))
            })
            .collect();
        out.sort_by_key(|d| d.next_attempt_at);
        Ok(out)
    }

    fn webhook_event_bodies(&mut self, event_ids: &[&str]) -> R<Vec<(String, String)>> {
        webhook_events::table
            .filter(webhook_events::id.eq_any(event_ids))
            .select((webhook_events::id, webhook_events::body))
            .load(self.conn)
            .map_err(db_err)
    }

    fn webhook_endpoints_by_ids(&mut self, ids: &[&str]) -> R<Vec<(Endpoint, EndpointSecrets)>> {
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq_any(ids))
            .select(endpoint_columns!())
            .load::<EndpointRow>(self.conn)
            .map(|rows| rows.into_iter().map(endpoint).collect())
            .map_err(db_err)
    }

    fn finish_webhook_attempts(
        &mut self,
        owner: &str,
        attempts: &[(Attempt, DeliveryStatus, Option<i64>)],
    ) -> R<Vec<bool>> {
        let held: std::collections::HashSet<String> = match &mut *self.conn {
            // One statement for the round, one round trip.
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => {
                use diesel::sql_types::Array;
                #[derive(QueryableByName)]
                struct Held {
                    #[diesel(sql_type = Text)]
                    id: String,
                }
                let rows: Vec<Held> = diesel::sql_query(
                    "UPDATE webhook_deliveries d SET status = v.status, attempts = v.attempt, \
                     last_status = v.last, next_attempt_at = v.next, lease_owner = NULL, lease_until = NULL, \
                     updated_at = v.at FROM unnest($2::text[], $3::text[], $4::int8[], $5::int8[], $6::int8[], \
                     $7::int8[]) AS v(id, status, attempt, last, next, at) \
                     WHERE d.id = v.id AND d.lease_owner = $1 RETURNING d.id",
                )
                .bind::<Text, _>(owner)
                .bind::<Array<Text>, _>(attempts.iter().map(|a| a.0.delivery_id.as_str()).collect::<Vec<_>>())
                .bind::<Array<Text>, _>(attempts.iter().map(|a| a.1.as_str()).collect::<Vec<_>>())
                .bind::<Array<BigInt>, _>(attempts.iter().map(|a| a.0.attempt).collect::<Vec<_>>())
                .bind::<Array<Nullable<BigInt>>, _>(attempts.iter().map(|a| a.0.status).collect::<Vec<_>>())
                .bind::<Array<Nullable<BigInt>>, _>(attempts.iter().map(|a| a.2).collect::<Vec<_>>())
                .bind::<Array<BigInt>, _>(attempts.iter().map(|a| a.0.at).collect::<Vec<_>>())
                .load(c)
                .map_err(db_err)?;
                rows.into_iter().map(|h| h.id).collect()
            }
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => {
                let mut held = std::collections::HashSet::new();
                for (a, status, next) in attempts {
                    let n = diesel::update(
                        webhook_deliveries::table
                            .filter(webhook_deliveries::id.eq(&a.delivery_id))
                            .filter(webhook_deliveries::lease_owner.eq(owner)),
                    )
                    .set((
                        webhook_deliveries::status.eq(status.as_str()),
                        webhook_deliveries::attempts.eq(a.attempt),
                        webhook_deliveries::last_status.eq(a.status),
                        webhook_deliveries::next_attempt_at.eq(next),
                        webhook_deliveries::lease_owner.eq(None::<String>),
                        webhook_deliveries::lease_until.eq(None::<i64>),
                        webhook_deliveries::updated_at.eq(a.at),
                    ))
                    .execute(c)
                    .map_err(db_err)?;
                    if n == 1 {
                        held.insert(a.delivery_id.clone());
                    }
                }
                held
            }
        };
        // A replayed delivery numbers its attempts on; an attempt number met twice (a
        // lease taken over mid-attempt) keeps the first record.
        let rows: Vec<_> = attempts
            .iter()
            .map(|(a, _, _)| a)
            .filter(|a| held.contains(&a.delivery_id))
            .map(|a| {
                (
                    webhook_attempts::delivery_id.eq(&a.delivery_id),
                    webhook_attempts::attempt.eq(a.attempt),
                    webhook_attempts::at.eq(a.at),
                    webhook_attempts::status.eq(a.status),
                    webhook_attempts::error.eq(&a.error),
                    webhook_attempts::response.eq(&a.response),
                    webhook_attempts::duration_ms.eq(a.duration_ms),
                )
            })
            .collect();
        if !rows.is_empty() {
            on_each_backend!(self.conn, c => diesel::insert_into(webhook_attempts::table)
                .values(&rows)
                .on_conflict_do_nothing()
                .execute(c))
            .map_err(db_err)?;
        }
        Ok(attempts.iter().map(|(a, _, _)| held.contains(&a.delivery_id)).collect())
    }

    fn disable_webhook_endpoint(&mut self, id: &str, now: i64) -> R<()> {
        diesel::update(webhook_endpoints::table.filter(webhook_endpoints::id.eq(id)))
            .set((webhook_endpoints::enabled.eq(false), webhook_endpoints::updated_at.eq(Some(now))))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn enabled_webhook_endpoints(&mut self) -> R<Vec<Endpoint>> {
        webhook_endpoints::table
            .filter(webhook_endpoints::enabled.eq(true))
            .select(endpoint_columns!())
            .order(webhook_endpoints::id.asc())
            .load::<EndpointRow>(self.conn)
            .map(|rows| rows.into_iter().map(|r| endpoint(r).0).collect())
            .map_err(db_err)
    }

    fn keys_expiring_unnoticed(
        &mut self,
        workspace_id: &str,
        endpoint_id: &str,
        days: i64,
        from: i64,
        to: i64,
        limit: usize,
    ) -> R<Vec<(String, i64)>> {
        use diesel::dsl::{exists, not};
        let noticed = webhook_expiry_notices::table
            .filter(webhook_expiry_notices::key_id.eq(keys::id))
            .filter(webhook_expiry_notices::endpoint_id.eq(endpoint_id))
            .filter(webhook_expiry_notices::days.eq(days))
            .filter(webhook_expiry_notices::expires.nullable().eq(keys::expires));
        let rows: Vec<(String, Option<i64>)> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .filter(keys::expires.gt(from))
            .filter(keys::expires.le(to))
            .filter(not(exists(noticed)))
            .order(keys::expires.asc())
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .select((keys::id, keys::expires))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().filter_map(|(id, at)| Some((id, at?))).collect())
    }

    fn insert_expiry_notice(&mut self, key_id: &str, endpoint_id: &str, days: i64, expires: i64) -> R<bool> {
        let row = (
            webhook_expiry_notices::key_id.eq(key_id),
            webhook_expiry_notices::endpoint_id.eq(endpoint_id),
            webhook_expiry_notices::days.eq(days),
            webhook_expiry_notices::expires.eq(expires),
        );
        let n = match &mut *self.conn {
            #[cfg(feature = "sqlite")]
            DbConn::Sqlite(c) => diesel::insert_into(webhook_expiry_notices::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c),
            #[cfg(feature = "postgres")]
            DbConn::Pg(c) => diesel::insert_into(webhook_expiry_notices::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(c),
        }
        .map_err(db_err)?;
        Ok(n == 1)
    }

    fn prune_expiry_notices(&mut self, before: i64) -> R<usize> {
        diesel::delete(webhook_expiry_notices::table.filter(webhook_expiry_notices::expires.lt(before)))
            .execute(self.conn)
            .map_err(db_err)
    }

    fn prune_webhook_history(&mut self, before: i64, max: usize) -> R<(usize, usize)> {
        super::webhook_retention_tx::prune(self.conn, before, max)
    }

    fn webhook_backlog(&mut self) -> R<(i64, Option<i64>)> {
        use diesel::dsl::{count_star, min};
        webhook_deliveries::table
            // Written out, for the planner to use the partial index of pending deliveries.
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>("status = 'pending'"))
            .select((count_star(), min(webhook_deliveries::created_at)))
            .get_result(self.conn)
            .map_err(db_err)
    }
}
