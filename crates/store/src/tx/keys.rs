//! Keys and their links to permissions and roles.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, DieselTx, KeyRow, PROBE_ROWS, R, db_err, key_from_row, named};
use diesel::prelude::*;
use keygate_domain::Named;
use keygate_rbac::store::KeyTx;
use keygate_rbac::{Credits, EntityKind, Key};

impl KeyTx for DieselTx<'_> {
    fn set_key_credits(&mut self, key_id: &str, credits: Option<&Credits>) -> R<()> {
        self.write_credit_setting(key_id, credits)
    }

    fn insert_key(&mut self, key: &Key, hash: &str) -> R<()> {
        diesel::insert_into(keys::table)
            .values((
                keys::id.eq(&key.id),
                keys::workspace_id.eq(&key.workspace_id),
                keys::hash.eq(hash),
                keys::prefix.eq(&key.start),
                keys::name.eq(&key.name),
                keys::meta.eq(&key.meta),
                keys::enabled.eq(key.enabled),
                keys::expires.eq(key.expires),
                keys::created_at.eq(key.created_at),
                keys::updated_at.eq(key.created_at),
                keys::api_id.eq(&key.api_id),
                keys::identity_id.eq(&key.identity_id),
                keys::key_prefix.eq(&key.prefix),
                keys::byte_length.eq(key.byte_length.map(i64::from)),
                keys::allowed_ips.eq(key.allowed_ips.as_ref().map(keygate_domain::AllowedIps::to_stored)),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        self.set_key_credits(&key.id, key.credits.as_ref())
    }

    fn update_key(&mut self, key: &Key, now: i64) -> R<()> {
        diesel::update(keys::table.filter(keys::id.eq(&key.id)))
            .set((
                keys::name.eq(&key.name),
                keys::meta.eq(&key.meta),
                keys::enabled.eq(key.enabled),
                keys::expires.eq(key.expires),
                keys::identity_id.eq(&key.identity_id),
                keys::allowed_ips.eq(key.allowed_ips.as_ref().map(keygate_domain::AllowedIps::to_stored)),
                keys::updated_at.eq(now),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn get_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(key_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn find_key(&mut self, key_id: &str) -> R<Option<Key>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::id.eq(key_id))
            .select(key_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn list_keys(&mut self, workspace_id: &str) -> R<Vec<Key>> {
        let rows: Vec<KeyRow> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .order((keys::created_at, keys::id))
            .select(key_columns!())
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(key_from_row).collect())
    }

    fn key_by_hash(&mut self, hash: &str) -> R<Option<Key>> {
        let q = keys::table.filter(keys::hash.eq(hash)).select(key_columns!());
        let row: Option<KeyRow> = on_backend!(self.conn, |c| q.get_result(c).optional()).map_err(db_err)?;
        Ok(row.map(key_from_row))
    }

    fn delete_key(&mut self, workspace_id: &str, key_id: &str) -> R<Option<String>> {
        // Link rows go by ON DELETE CASCADE.
        diesel::delete(keys::table.filter(keys::id.eq(key_id)).filter(keys::workspace_id.eq(workspace_id)))
            .returning(keys::hash)
            .get_result(self.conn)
            .optional()
            .map_err(db_err)
    }

    fn lock_key(&mut self, workspace_id: &str, key_id: &str) -> R<bool> {
        let query = keys::table
            .filter(keys::id.eq(key_id))
            .filter(keys::workspace_id.eq(workspace_id))
            .select(keys::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn key_entities(&mut self, kind: EntityKind, key_id: &str) -> R<Vec<Named>> {
        by_kind!(kind, ent, link, link_col, {
            let q = link::table
                .inner_join(ent::table)
                .filter(link::key_id.eq(key_id))
                .select((ent::id, ent::name));
            let rows: Vec<(String, String)> = on_backend!(self.conn, |c| q.load(c)).map_err(db_err)?;
            Ok(rows.into_iter().map(named).collect())
        })
    }

    fn link_key_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        key_id: &str,
        ids: &[String],
        now: i64,
    ) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            for chunk in ids.chunks(BATCH_ROWS) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|id| {
                        (
                            link::key_id.eq(key_id),
                            link_col.eq(id),
                            link::workspace_id.eq(workspace_id),
                            link::created_at.eq(now),
                        )
                    })
                    .collect();
                on_each_backend!(self.conn, c => diesel::insert_into(link::table).values(&rows).execute(c))
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    fn insert_keys(&mut self, keys: &[(Key, String)]) -> R<()> {
        // 20 values a row: 1,000 rows stay within both backends' bound on parameters.
        for chunk in keys.chunks(BATCH_ROWS) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|(key, hash)| {
                    let (remaining, interval, amount, day, last_refill) =
                        super::credits_tx::credit_values(key.credits.as_ref());
                    (
                        (
                            keys::id.eq(&key.id),
                            keys::workspace_id.eq(&key.workspace_id),
                            keys::hash.eq(hash),
                            keys::prefix.eq(&key.start),
                            keys::name.eq(&key.name),
                            keys::meta.eq(&key.meta),
                            keys::enabled.eq(key.enabled),
                            keys::expires.eq(key.expires),
                            keys::created_at.eq(key.created_at),
                            keys::updated_at.eq(key.created_at),
                        ),
                        (
                            keys::api_id.eq(&key.api_id),
                            keys::identity_id.eq(&key.identity_id),
                            keys::key_prefix.eq(&key.prefix),
                            keys::byte_length.eq(key.byte_length.map(i64::from)),
                            keys::credits_remaining.eq(remaining),
                            keys::credits_base.eq(remaining),
                            keys::refill_interval.eq(interval),
                            keys::refill_amount.eq(amount),
                            keys::refill_day.eq(day),
                            keys::last_refill_at.eq(last_refill),
                            // As a key created alone: its credit setting written once.
                            keys::credit_version.eq(1_i64),
                        ),
                    )
                })
                .collect();
            on_each_backend!(self.conn, c => diesel::insert_into(keys::table).values(&rows).execute(c))
                .map_err(db_err)?;
        }
        Ok(())
    }

    fn existing_hashes(&mut self, hashes: &[String]) -> R<Vec<String>> {
        let mut found = Vec::new();
        // 100 hashes a statement: PostgreSQL's planner prices 1,000 index probes above a
        // sequential scan of a table of a few hundred thousand keys (and takes the scan, 20x
        // slower, then slower still as the table grows); 100 probes it always takes.
        for chunk in hashes.chunks(PROBE_ROWS) {
            let rows: Vec<String> = keys::table
                .filter(keys::hash.eq_any(chunk))
                .select(keys::hash)
                .load(self.conn)
                .map_err(db_err)?;
            found.extend(rows);
            let rows: Vec<String> = legacy_keys::table
                .filter(legacy_keys::hash.eq_any(chunk))
                .select(legacy_keys::hash)
                .load(self.conn)
                .map_err(db_err)?;
            found.extend(rows);
        }
        Ok(found)
    }

    fn link_keys_entities(
        &mut self,
        kind: EntityKind,
        workspace_id: &str,
        links: &[(String, String)],
        now: i64,
    ) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            for chunk in links.chunks(BATCH_ROWS) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|(key_id, id)| {
                        (
                            link::key_id.eq(key_id),
                            link_col.eq(id),
                            link::workspace_id.eq(workspace_id),
                            link::created_at.eq(now),
                        )
                    })
                    .collect();
                on_each_backend!(self.conn, c => diesel::insert_into(link::table).values(&rows).execute(c))
                    .map_err(db_err)?;
            }
            Ok(())
        })
    }

    fn unlink_key_entities(&mut self, kind: EntityKind, key_id: &str, ids: &[String]) -> R<()> {
        by_kind!(kind, ent, link, link_col, {
            diesel::delete(link::table.filter(link::key_id.eq(key_id)).filter(link_col.eq_any(ids)))
                .execute(self.conn)
                .map(drop)
                .map_err(db_err)
        })
    }
}

/// [`keygate_rbac::RbacStore::verification_read`] on PostgreSQL: one statement, so one
/// snapshot and one round trip (instead of a transaction's eight), the key with what a
/// verification needs of it and the change counters of its scopes as JSON. `None` when
/// `counters` names a counter the statement did not read, or one it cannot (the caller
/// then reads in a snapshot): the statement reads `key:<id>`, `ws:<workspace>` and, for
/// no key, the names `counters(None)` gives, as `keygate_cache::counters::Scope::name`
/// spells them.
#[cfg(feature = "postgres")]
pub(crate) fn pg_verification_read(
    conn: &mut diesel::PgConnection,
    hash: &str,
    counters: &keygate_rbac::store::CounterNames<'_>,
) -> R<Option<(Option<keygate_rbac::KeySummary>, Vec<u64>)>> {
    use super::identities_tx::{identity, ratelimit};
    use keygate_rbac::{IdentityView, KeySummary};
    let absent = counters(None);
    if !literal(hash) || !absent.iter().all(|n| literal(n)) {
        return Ok(None);
    }
    let read = || PgVerificationRead { hash, absent: &absent };
    let json: String = match read().get_result(conn) {
        Err(e) if unprepared(&e) => {
            diesel::connection::SimpleConnection::batch_execute(conn, PG_VERIFICATION_READ)
                .map_err(db_err)?;
            match read().get_result(conn) {
                // Not kept between statements (a pooler in transaction mode): read in a snapshot.
                Err(e) if unprepared(&e) => return Ok(None),
                other => other,
            }
        }
        other => other,
    }
    .map_err(db_err)?;
    let read: VerificationJson = serde_json::from_str(&json)
        .map_err(|e| keygate_rbac::StorageError::Internal(format!("the verification read's answer: {e}")))?;
    let (key, direct, roles, inherited, limits, found_identity, identity_limits, values) = read;
    let summary = key.map(|k| {
        let api_allowed_ips = k.19.as_deref().map(keygate_domain::AllowedIps::from_stored);
        let view = found_identity.map(|i| IdentityView {
            identity: identity(i),
            ratelimits: sorted(identity_limits.into_iter().map(ratelimit).collect()),
        });
        let permissions = direct.into_iter().chain(inherited);
        let summary = KeySummary::new(
            key_from_row(k.into()),
            permissions,
            roles,
            view,
            limits.into_iter().map(ratelimit).collect(),
        );
        KeySummary { api_allowed_ips, ..summary }
    });
    let names = counters(summary.as_ref().map(|s| (s.key.id.as_str(), s.key.workspace_id.as_str())));
    let mut out = Vec::with_capacity(names.len());
    for name in &names {
        match values.iter().find(|(n, _)| n == name) {
            Some((_, v)) => out.push((*v).max(0) as u64),
            None => return Ok(None),
        }
    }
    Ok(Some((summary, out)))
}

/// Limits by name, in byte order (as `ratelimits_of` gives them).
#[cfg(feature = "postgres")]
fn sorted(mut limits: Vec<keygate_rbac::RateLimitConfig>) -> Vec<keygate_rbac::RateLimitConfig> {
    limits.sort_by(|a, b| a.name.cmp(&b.name));
    limits
}

/// [`pg_verification_read`]'s answer: the key (`None`: none), its direct permissions' names,
/// its roles' names, their permissions' names, its limits, its identity and that identity's
/// limits, and the counters read (name, value).
#[cfg(feature = "postgres")]
type VerificationJson = (
    Option<KeyJson>,
    Vec<String>,
    Vec<String>,
    Vec<String>,
    Vec<LimitRow>,
    Option<super::identities_tx::IdentityRow>,
    Vec<LimitRow>,
    Vec<(String, i64)>,
);

#[cfg(feature = "postgres")]
use super::identities_tx::LimitRow;

/// A [`KeyRow`] as a JSON array (serde reads tuples of at most 16).
#[cfg(feature = "postgres")]
#[derive(serde::Deserialize)]
struct KeyJson(
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    bool,
    Option<i64>,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    i64,
    Option<String>,
    /// Its API's `allowedIps` (not a column of the key).
    Option<String>,
);

#[cfg(feature = "postgres")]
impl From<KeyJson> for KeyRow {
    fn from(k: KeyJson) -> Self {
        (
            k.0, k.1, k.2, k.3, k.4, k.5, k.6, k.7, k.8, k.9, k.10, k.11, k.12, k.13, k.14, k.15, k.16, k.17,
            k.18,
        )
    }
}

/// The statement of [`pg_verification_read`]: the execution of [`PG_VERIFICATION_READ`]
/// (the key's columns in [`KeyRow`]'s order).
#[cfg(feature = "postgres")]
struct PgVerificationRead<'a> {
    hash: &'a str,
    absent: &'a [String],
}

#[cfg(feature = "postgres")]
impl diesel::query_builder::QueryId for PgVerificationRead<'_> {
    type QueryId = PgVerificationRead<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

#[cfg(feature = "postgres")]
impl diesel::query_builder::Query for PgVerificationRead<'_> {
    type SqlType = diesel::sql_types::Text;
}

#[cfg(feature = "postgres")]
impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for PgVerificationRead<'_> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        // EXECUTE takes no bind parameters: its arguments are literals, of the characters
        // `literal` admits (checked by the caller).
        out.push_sql("EXECUTE keygate_verification_read('");
        out.push_sql(self.hash);
        out.push_sql("', ARRAY[");
        for (i, name) in self.absent.iter().enumerate() {
            out.push_sql(if i == 0 { "'" } else { ", '" });
            out.push_sql(name);
            out.push_sql("'");
        }
        out.push_sql("]::text[])");
        Ok(())
    }
}

/// Whether `e` says the connection has no `keygate_verification_read` statement prepared.
#[cfg(feature = "postgres")]
fn unprepared(e: &diesel::result::Error) -> bool {
    use diesel::result::Error::DatabaseError;
    matches!(e, DatabaseError(_, info) if info.message().contains("keygate_verification_read"))
}

/// Whether `s` can be written into [`PgVerificationRead`]'s SQL as it is, between quotes:
/// the hash (hex) and counter names (`created:<shard>`) are, always.
#[cfg(feature = "postgres")]
fn literal(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b":_-".contains(&b))
}

/// The statement [`PgVerificationRead`] executes, prepared on a connection the first time
/// it is needed there: its plan is kept (the pool's connections keep no other statement,
/// see `pool.rs`, and planning this one would cost several times its execution). Its one
/// parameter that is not an id is the hash, looked up by a unique index whatever its value.
#[cfg(feature = "postgres")]
const PG_VERIFICATION_READ: &str = "PREPARE keygate_verification_read(text, text[]) AS \
     WITH k AS (SELECT * FROM keys WHERE hash = $1), \
     i AS (SELECT i.* FROM k JOIN identities i ON i.workspace_id = k.workspace_id AND i.id = k.identity_id) \
     SELECT json_build_array(\
     (SELECT json_build_array(id, workspace_id, prefix, name, meta, enabled, expires, created_at, api_id, \
      identity_id, credits_remaining, refill_interval, refill_amount, refill_day, last_refill_at, key_prefix, \
      byte_length, updated_at, allowed_ips, \
      (SELECT a.allowed_ips FROM apis a WHERE a.workspace_id = k.workspace_id AND a.id = k.api_id)) FROM k), \
     (SELECT coalesce(json_agg(p.name), '[]') FROM k JOIN keys_permissions kp ON kp.key_id = k.id \
      JOIN permissions p ON p.id = kp.permission_id), \
     (SELECT coalesce(json_agg(r.name), '[]') FROM k JOIN keys_roles kr ON kr.key_id = k.id \
      JOIN roles r ON r.id = kr.role_id), \
     (SELECT coalesce(json_agg(p.name), '[]') FROM k JOIN keys_roles kr ON kr.key_id = k.id \
      JOIN roles_permissions rp ON rp.role_id = kr.role_id JOIN permissions p ON p.id = rp.permission_id), \
     (SELECT coalesce(json_agg(json_build_array(l.id, l.name, l.max_tokens, l.duration, l.auto_apply, l.algorithm)), '[]') \
      FROM k JOIN ratelimits l ON l.key_id = k.id), \
     (SELECT json_build_array(id, workspace_id, external_id, meta, created_at, updated_at, allowed_ips) FROM i), \
     (SELECT coalesce(json_agg(json_build_array(l.id, l.name, l.max_tokens, l.duration, l.auto_apply, l.algorithm)), '[]') \
      FROM i JOIN ratelimits l ON l.identity_id = i.id), \
     (SELECT coalesce(json_agg(json_build_array(n.scope, coalesce(c.value, 0))), '[]') FROM \
      (SELECT 'key:' || id AS scope FROM k UNION ALL SELECT 'ws:' || workspace_id FROM k \
       UNION ALL SELECT unnest($2)) n LEFT JOIN change_counters c ON c.scope = n.scope))::text";

#[cfg(feature = "postgres")]
impl diesel::RunQueryDsl<diesel::PgConnection> for PgVerificationRead<'_> {}
