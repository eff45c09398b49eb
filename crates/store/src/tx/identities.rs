//! Identities, the links of keys to them, and the rate limits of identities and keys.

use crate::DbConn;
use crate::schema::*;
use crate::tx::{BATCH_ROWS, DieselTx, Keyset, R, contains_pattern, db_err};
use diesel::prelude::*;
use keygate_domain::AllowedIps;
use keygate_rbac::store::IdentityTx;
use keygate_rbac::{Identity, LimitOwner, RateLimitConfig};
use std::collections::HashSet;

/// An identity's row: the columns of [`identity_columns!`].
pub(crate) type IdentityRow = (String, String, String, Option<String>, i64, i64, Option<String>);

macro_rules! identity_columns {
    () => {
        (
            identities::id,
            identities::workspace_id,
            identities::external_id,
            identities::meta,
            identities::created_at,
            identities::updated_at,
            identities::allowed_ips,
        )
    };
}

pub(crate) fn identity(
    (id, workspace_id, external_id, meta, created_at, updated_at, allowed): IdentityRow,
) -> Identity {
    let allowed_ips = allowed.as_deref().map(keygate_domain::AllowedIps::from_stored);
    Identity { id, workspace_id, external_id, meta, allowed_ips, created_at, updated_at }
}

/// A stored rate limit: `(id, name, max_tokens, duration, auto_apply, algorithm)`.
pub(crate) type LimitRow = (String, String, i64, i64, bool, String);

pub(crate) fn ratelimit((id, name, limit, duration, auto_apply, algorithm): LimitRow) -> RateLimitConfig {
    RateLimitConfig {
        id,
        name,
        limit: u64::try_from(limit).unwrap_or(0),
        duration: u64::try_from(duration).unwrap_or(0),
        auto_apply,
        // Written by this crate only, from a parsed algorithm.
        algorithm: keygate_domain::Algorithm::parse(&algorithm).unwrap_or_default(),
    }
}

impl IdentityTx for DieselTx<'_> {
    fn insert_identity(&mut self, i: &Identity) -> R<bool> {
        self.insert_in_savepoint(|c| {
            diesel::insert_into(identities::table)
                .values((
                    identities::id.eq(&i.id),
                    identities::workspace_id.eq(&i.workspace_id),
                    identities::external_id.eq(&i.external_id),
                    identities::meta.eq(&i.meta),
                    identities::allowed_ips
                        .eq(i.allowed_ips.as_ref().map(keygate_domain::AllowedIps::to_stored)),
                    identities::created_at.eq(i.created_at),
                    identities::updated_at.eq(i.updated_at),
                ))
                .execute(c)
        })
    }

    fn identity_by_id(&mut self, workspace_id: &str, id: &str) -> R<Option<Identity>> {
        let q = identities::table
            .filter(identities::workspace_id.eq(workspace_id))
            .filter(identities::id.eq(id))
            .select(identity_columns!());
        let row: Option<IdentityRow> =
            on_backend!(self.conn, |c| q.get_result(c).optional()).map_err(db_err)?;
        Ok(row.map(identity))
    }

    fn identity_by_external_id(&mut self, workspace_id: &str, external_id: &str) -> R<Option<Identity>> {
        let row: Option<IdentityRow> = identities::table
            .filter(identities::workspace_id.eq(workspace_id))
            .filter(identities::external_id.eq(external_id))
            .select(identity_columns!())
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(identity))
    }

    fn lock_identities_by_external_ids(
        &mut self,
        workspace_id: &str,
        external_ids: &[String],
    ) -> R<Vec<Identity>> {
        let mut found = Vec::new();
        for chunk in external_ids.chunks(BATCH_ROWS) {
            let query = identities::table
                .filter(identities::workspace_id.eq(workspace_id))
                .filter(identities::external_id.eq_any(chunk))
                .select(identity_columns!());
            let rows: Vec<IdentityRow> = match &mut *self.conn {
                #[cfg(feature = "postgres")]
                DbConn::Pg(c) => query.for_no_key_update().load(c),
                #[cfg(feature = "sqlite")]
                DbConn::Sqlite(c) => query.load(c),
            }
            .map_err(db_err)?;
            found.extend(rows.into_iter().map(identity));
        }
        Ok(found)
    }

    fn insert_identities_if_absent(&mut self, all: &[Identity]) -> R<Vec<String>> {
        let mut inserted = Vec::new();
        for chunk in all.chunks(BATCH_ROWS) {
            let rows: Vec<_> = chunk
                .iter()
                .map(|i| {
                    (
                        identities::id.eq(&i.id),
                        identities::workspace_id.eq(&i.workspace_id),
                        identities::external_id.eq(&i.external_id),
                        identities::meta.eq(&i.meta),
                        identities::allowed_ips
                            .eq(i.allowed_ips.as_ref().map(keygate_domain::AllowedIps::to_stored)),
                        identities::created_at.eq(i.created_at),
                        identities::updated_at.eq(i.updated_at),
                    )
                })
                .collect();
            // An external id taken meanwhile by another transaction is skipped (after waiting
            // for it); the caller reads what is stored.
            let ids: Vec<String> = on_each_backend!(self.conn, c => {
                diesel::insert_into(identities::table)
                    .values(&rows)
                    .on_conflict_do_nothing()
                    .returning(identities::id)
                    .get_results(c)
            })
            .map_err(db_err)?;
            inserted.extend(ids);
        }
        Ok(inserted)
    }

    fn lock_identity(&mut self, workspace_id: &str, id: &str) -> R<bool> {
        let query = identities::table
            .filter(identities::workspace_id.eq(workspace_id))
            .filter(identities::id.eq(id))
            .select(identities::id);
        Ok(lock_first!(self.conn, query)?.is_some())
    }

    fn identities_page(
        &mut self,
        workspace_id: &str,
        search: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> R<Vec<Identity>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                let mut q =
                    identities::table.filter(identities::workspace_id.eq(workspace_id)).into_boxed::<$db>();
                if let Some(after) = after {
                    let cmp = format!("{} > ", ks.col("external_id"));
                    q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                }
                if let Some(search) = search {
                    let p = contains_pattern(search);
                    let like = |c: &str| format!("{} LIKE ", ks.lower(c));
                    let cond = sql::<Bool>(&format!("({}", like("id")))
                        .bind::<Text, _>(p.clone())
                        .sql(&format!(" ESCAPE '\\' OR {}", like("external_id")))
                        .bind::<Text, _>(p)
                        .sql(" ESCAPE '\\')");
                    q = q.filter(cond);
                }
                q.order(sql::<Text>(&ks.col("external_id")))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .select(identity_columns!())
                    .load::<IdentityRow>($c)
            }};
        }
        let rows = on_each_keyset!(self.conn, page).map_err(db_err)?;
        Ok(rows.into_iter().map(identity).collect())
    }

    fn set_identity_allowed_ips(&mut self, id: &str, allowed: Option<&AllowedIps>, now: i64) -> R<()> {
        diesel::update(identities::table.filter(identities::id.eq(id)))
            .set((
                identities::allowed_ips.eq(allowed.map(AllowedIps::to_stored)),
                identities::updated_at.eq(now),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn set_identity_meta(&mut self, id: &str, meta: Option<&str>, now: i64) -> R<()> {
        diesel::update(identities::table.filter(identities::id.eq(id)))
            .set((identities::meta.eq(meta), identities::updated_at.eq(now)))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn delete_identity(&mut self, workspace_id: &str, id: &str) -> R<bool> {
        // Its rate limits go by ON DELETE CASCADE.
        diesel::delete(
            identities::table.filter(identities::workspace_id.eq(workspace_id)).filter(identities::id.eq(id)),
        )
        .execute(self.conn)
        .map(|n| n > 0)
        .map_err(db_err)
    }

    fn unlink_identity_keys(&mut self, workspace_id: &str, id: &str) -> R<Vec<String>> {
        let of = keys::table.filter(keys::workspace_id.eq(workspace_id)).filter(keys::identity_id.eq(id));
        let ids: Vec<String> = of.select(keys::id).order(keys::id).load(self.conn).map_err(db_err)?;
        diesel::update(
            keys::table.filter(keys::workspace_id.eq(workspace_id)).filter(keys::identity_id.eq(id)),
        )
        .set(keys::identity_id.eq(None::<String>))
        .execute(self.conn)
        .map_err(db_err)?;
        Ok(ids)
    }

    fn identity_key_ids(&mut self, workspace_id: &str, id: &str) -> R<Vec<String>> {
        keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .filter(keys::identity_id.eq(id))
            .select(keys::id)
            .order(keys::id)
            .load(self.conn)
            .map_err(db_err)
    }

    fn set_key_identity(&mut self, key_id: &str, identity_id: Option<&str>) -> R<()> {
        diesel::update(keys::table.filter(keys::id.eq(key_id)))
            .set(keys::identity_id.eq(identity_id))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn ratelimits_of(&mut self, owner: LimitOwner<'_>) -> R<Vec<RateLimitConfig>> {
        use ratelimits::{algorithm, auto_apply, duration, id, identity_id, key_id, max_tokens, name};
        // One query of static type per owner (not a boxed one: its statement is found by type).
        let all = ratelimits::table.select((id, name, max_tokens, duration, auto_apply, algorithm));
        let rows: Vec<LimitRow> = match owner {
            LimitOwner::Identity(owner) => {
                let q = all.filter(identity_id.eq(owner));
                on_backend!(self.conn, |c| q.load(c))
            }
            LimitOwner::Key(owner) => {
                let q = all.filter(key_id.eq(owner));
                on_backend!(self.conn, |c| q.load(c))
            }
        }
        .map_err(db_err)?;
        let mut all: Vec<RateLimitConfig> = rows.into_iter().map(ratelimit).collect();
        // Byte order whatever the database's collation.
        all.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(all)
    }

    fn replace_ratelimits(
        &mut self,
        workspace_id: &str,
        owner: LimitOwner<'_>,
        limits: &[RateLimitConfig],
        now: i64,
    ) -> R<()> {
        let (identity_id, key_id) = match owner {
            LimitOwner::Identity(id) => (Some(id), None),
            LimitOwner::Key(id) => (None, Some(id)),
        };
        let existing = self.ratelimits_of(owner)?;
        let keep: HashSet<&str> = limits.iter().map(|l| l.id.as_str()).collect();
        let gone: Vec<&str> =
            existing.iter().map(|l| l.id.as_str()).filter(|id| !keep.contains(id)).collect();
        if !gone.is_empty() {
            diesel::delete(ratelimits::table.filter(ratelimits::id.eq_any(&gone)))
                .execute(self.conn)
                .map_err(db_err)?;
        }
        let stored: HashSet<&str> = existing.iter().map(|l| l.id.as_str()).collect();
        for l in limits {
            let (max, duration) =
                (i64::try_from(l.limit).unwrap_or(i64::MAX), i64::try_from(l.duration).unwrap_or(i64::MAX));
            if stored.contains(l.id.as_str()) {
                diesel::update(ratelimits::table.filter(ratelimits::id.eq(&l.id)))
                    .set((
                        ratelimits::max_tokens.eq(max),
                        ratelimits::duration.eq(duration),
                        ratelimits::auto_apply.eq(l.auto_apply),
                        ratelimits::algorithm.eq(l.algorithm.as_str()),
                    ))
                    .execute(self.conn)
                    .map_err(db_err)?;
            } else {
                diesel::insert_into(ratelimits::table)
                    .values((
                        ratelimits::id.eq(&l.id),
                        ratelimits::workspace_id.eq(workspace_id),
                        ratelimits::identity_id.eq(identity_id),
                        ratelimits::key_id.eq(key_id),
                        ratelimits::name.eq(&l.name),
                        ratelimits::max_tokens.eq(max),
                        ratelimits::duration.eq(duration),
                        ratelimits::auto_apply.eq(l.auto_apply),
                        ratelimits::created_at.eq(now),
                        ratelimits::algorithm.eq(l.algorithm.as_str()),
                    ))
                    .execute(self.conn)
                    .map_err(db_err)?;
            }
        }
        Ok(())
    }
}
