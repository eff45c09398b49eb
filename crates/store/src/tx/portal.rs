//! Customer portals and their sessions (the `portals` and `portal_sessions` tables).

use crate::DbConn;
use crate::schema::*;
use crate::tx::{DieselTx, Keyset, R, db_err, like_literal};
use diesel::prelude::*;
use keygate_portal::{Portal, PortalSession, PortalTx};

type PortalRow =
    (String, String, String, String, String, bool, Option<String>, Option<String>, i64, Option<i64>);

macro_rules! portal_columns {
    () => {
        (
            portals::id,
            portals::workspace_id,
            portals::slug,
            portals::display_name,
            portals::api_id,
            portals::enabled,
            portals::logo_url,
            portals::primary_color,
            portals::created_at,
            portals::updated_at,
        )
    };
}

fn portal(r: PortalRow) -> Portal {
    let (
        id,
        workspace_id,
        slug,
        display_name,
        api_id,
        enabled,
        logo_url,
        primary_color,
        created_at,
        updated_at,
    ) = r;
    Portal {
        id,
        workspace_id,
        slug,
        display_name,
        api_id,
        enabled,
        logo_url,
        primary_color,
        created_at,
        updated_at,
    }
}

type SessionRow = (
    String,
    String,
    String,
    String,
    String,
    bool,
    Option<String>,
    String,
    i64,
    Option<i64>,
    i64,
    Option<i64>,
);

macro_rules! session_columns {
    () => {
        (
            portal_sessions::id,
            portal_sessions::workspace_id,
            portal_sessions::portal_id,
            portal_sessions::external_id,
            portal_sessions::scopes,
            portal_sessions::preview,
            portal_sessions::return_url,
            portal_sessions::root_key_id,
            portal_sessions::code_expires_at,
            portal_sessions::token_expires_at,
            portal_sessions::created_at,
            portal_sessions::revoked_at,
        )
    };
}

fn session(r: SessionRow) -> PortalSession {
    let (
        id,
        workspace_id,
        portal_id,
        external_id,
        scopes,
        preview,
        return_url,
        root_key_id,
        code_exp,
        token_exp,
        at,
        rev,
    ) = r;
    PortalSession {
        id,
        workspace_id,
        portal_id,
        external_id,
        scopes: PortalSession::parse_scopes(&scopes),
        preview,
        return_url,
        root_key_id,
        code_expires_at: code_exp,
        token_expires_at: token_exp,
        created_at: at,
        revoked_at: rev,
    }
}

/// The one portal `$filter` selects.
macro_rules! one_portal {
    ($tx:expr, $filter:expr) => {
        portals::table
            .filter($filter)
            .select(portal_columns!())
            .first::<PortalRow>($tx.conn)
            .optional()
            .map(|r| r.map(portal))
            .map_err(db_err)
    };
}

impl PortalTx for DieselTx<'_> {
    fn insert_portal(&mut self, p: &Portal) -> R<()> {
        diesel::insert_into(portals::table)
            .values((
                portals::id.eq(&p.id),
                portals::workspace_id.eq(&p.workspace_id),
                portals::slug.eq(&p.slug),
                portals::display_name.eq(&p.display_name),
                portals::api_id.eq(&p.api_id),
                portals::enabled.eq(p.enabled),
                portals::logo_url.eq(&p.logo_url),
                portals::primary_color.eq(&p.primary_color),
                portals::created_at.eq(p.created_at),
                portals::updated_at.eq(p.updated_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn portal(&mut self, workspace_id: &str, id_or_slug: &str) -> R<Option<Portal>> {
        one_portal!(
            self,
            portals::workspace_id
                .eq(workspace_id)
                .and(portals::id.eq(id_or_slug).or(portals::slug.eq(id_or_slug)))
        )
    }

    fn portal_of_api(&mut self, workspace_id: &str, api_id: &str) -> R<Option<Portal>> {
        one_portal!(self, portals::workspace_id.eq(workspace_id).and(portals::api_id.eq(api_id)))
    }

    fn api_has_recoverable_keys(&mut self, workspace_id: &str, api_id: &str) -> R<bool> {
        let found: Option<String> = keys::table
            .filter(keys::workspace_id.eq(workspace_id))
            .filter(keys::api_id.eq(api_id))
            .filter(keys::ciphertext.is_not_null())
            .select(keys::id)
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.is_some())
    }

    fn workspace_portals(&mut self, workspace_id: &str) -> R<Vec<Portal>> {
        portals::table
            .filter(portals::workspace_id.eq(workspace_id))
            .order(portals::slug.asc())
            .select(portal_columns!())
            .load::<PortalRow>(self.conn)
            .map(|rows| rows.into_iter().map(portal).collect())
            .map_err(db_err)
    }

    fn portal_by_slug(&mut self, slug: &str) -> R<Option<Portal>> {
        one_portal!(self, portals::slug.eq(slug))
    }

    fn portal_by_id(&mut self, id: &str) -> R<Option<Portal>> {
        one_portal!(self, portals::id.eq(id))
    }

    fn update_portal(&mut self, p: &Portal) -> R<()> {
        diesel::update(portals::table.filter(portals::id.eq(&p.id)))
            .set((
                portals::slug.eq(&p.slug),
                portals::display_name.eq(&p.display_name),
                portals::api_id.eq(&p.api_id),
                portals::enabled.eq(p.enabled),
                portals::logo_url.eq(&p.logo_url),
                portals::primary_color.eq(&p.primary_color),
                portals::updated_at.eq(p.updated_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn delete_portal(&mut self, workspace_id: &str, id: &str) -> R<bool> {
        diesel::delete(portal_sessions::table.filter(portal_sessions::portal_id.eq(id)))
            .execute(self.conn)
            .map_err(db_err)?;
        diesel::delete(
            portals::table.filter(portals::workspace_id.eq(workspace_id)).filter(portals::id.eq(id)),
        )
        .execute(self.conn)
        .map(|n| n > 0)
        .map_err(db_err)
    }

    fn insert_portal_session(&mut self, s: &PortalSession, code_hash: &str) -> R<()> {
        diesel::insert_into(portal_sessions::table)
            .values((
                portal_sessions::id.eq(&s.id),
                portal_sessions::workspace_id.eq(&s.workspace_id),
                portal_sessions::portal_id.eq(&s.portal_id),
                portal_sessions::external_id.eq(&s.external_id),
                portal_sessions::scopes.eq(s.scopes_text()),
                portal_sessions::preview.eq(s.preview),
                portal_sessions::return_url.eq(&s.return_url),
                portal_sessions::root_key_id.eq(&s.root_key_id),
                portal_sessions::code_hash.eq(code_hash),
                portal_sessions::code_expires_at.eq(s.code_expires_at),
                portal_sessions::token_expires_at.eq(s.token_expires_at),
                portal_sessions::created_at.eq(s.created_at),
                portal_sessions::revoked_at.eq(s.revoked_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn redeem_portal_code(
        &mut self,
        code_hash: &str,
        token_hash: &str,
        now: i64,
        token_expires_at: i64,
    ) -> R<Option<PortalSession>> {
        // One conditional UPDATE: the row lock (PostgreSQL) or the write lock (SQLite)
        // lets one redemption match; the others find the code cleared.
        let won = diesel::update(
            portal_sessions::table
                .filter(portal_sessions::code_hash.eq(code_hash))
                .filter(portal_sessions::code_expires_at.gt(now))
                .filter(portal_sessions::token_hash.is_null())
                .filter(portal_sessions::revoked_at.is_null()),
        )
        .set((
            portal_sessions::code_hash.eq(None::<String>),
            portal_sessions::token_hash.eq(token_hash),
            portal_sessions::token_expires_at.eq(token_expires_at),
        ))
        .execute(self.conn)
        .map_err(db_err)?;
        match won {
            1 => self.portal_session_by_token(token_hash),
            _ => Ok(None),
        }
    }

    fn portal_session_by_token(&mut self, token_hash: &str) -> R<Option<PortalSession>> {
        portal_sessions::table
            .filter(portal_sessions::token_hash.eq(token_hash))
            .select(session_columns!())
            .first::<SessionRow>(self.conn)
            .optional()
            .map(|r| r.map(session))
            .map_err(db_err)
    }

    fn live_portal_sessions(
        &mut self,
        portal_id: &str,
        prefix: Option<&str>,
        after: Option<&str>,
        limit: usize,
        now: i64,
    ) -> R<Vec<PortalSession>> {
        use diesel::dsl::sql;
        use diesel::sql_types::{Bool, Text};
        let live = || {
            portal_sessions::revoked_at.is_null().and(
                portal_sessions::token_expires_at
                    .gt(now)
                    .or(portal_sessions::token_hash.is_null().and(portal_sessions::code_expires_at.gt(now))),
            )
        };
        // The first `limit` external ids (in byte order), then their sessions.
        macro_rules! page {
            ($db:ty, $ks:expr, $c:expr) => {{
                let ks: &Keyset = &$ks;
                let mut q = portal_sessions::table
                    .filter(portal_sessions::portal_id.eq(portal_id.to_string()))
                    .filter(live())
                    .into_boxed::<$db>();
                if let Some(after) = after {
                    let cmp = format!("{} > ", ks.col("external_id"));
                    q = q.filter(sql::<Bool>(&cmp).bind::<Text, _>(after.to_string()));
                }
                if let Some(prefix) = prefix {
                    q = q.filter(
                        portal_sessions::external_id.like(format!("{}%", like_literal(prefix))).escape('\\'),
                    );
                }
                // PostgreSQL orders a DISTINCT only by what it selects: the column
                // `COLLATE "C"` is selected as it is ordered.
                q.select(sql::<Text>(&ks.col("external_id")))
                    .distinct()
                    .order(sql::<Text>(&ks.col("external_id")))
                    .limit(i64::try_from(limit).unwrap_or(i64::MAX))
                    .load::<String>($c)
            }};
        }
        let ids = on_each_keyset!(self.conn, page).map_err(db_err)?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<SessionRow> = portal_sessions::table
            .filter(portal_sessions::portal_id.eq(portal_id))
            .filter(portal_sessions::external_id.eq_any(&ids))
            .filter(live())
            .order((portal_sessions::created_at.asc(), portal_sessions::id.asc()))
            .select(session_columns!())
            .load(self.conn)
            .map_err(db_err)?;
        // Grouped in the ids' order.
        let mut out: Vec<PortalSession> = rows.into_iter().map(session).collect();
        out.sort_by_key(|s| ids.iter().position(|i| *i == s.external_id));
        Ok(out)
    }

    fn revoke_portal_sessions(&mut self, portal_id: &str, external_id: &str, now: i64) -> R<usize> {
        diesel::update(
            portal_sessions::table
                .filter(portal_sessions::portal_id.eq(portal_id))
                .filter(portal_sessions::external_id.eq(external_id))
                .filter(portal_sessions::revoked_at.is_null())
                .filter(
                    portal_sessions::token_expires_at.gt(now).or(portal_sessions::token_hash
                        .is_null()
                        .and(portal_sessions::code_expires_at.gt(now))),
                ),
        )
        .set((portal_sessions::revoked_at.eq(now), portal_sessions::code_hash.eq(None::<String>)))
        .execute(self.conn)
        .map_err(db_err)
    }
}
