//! Dashboard sessions (the `dashboard_sessions` table), by the hash of their token.

use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_rbac::store::{SessionTx, StoredSession};

type SessionRow = (String, String, String, String, i64, i64);

impl SessionTx for DieselTx<'_> {
    fn insert_session(&mut self, s: &StoredSession) -> R<()> {
        use dashboard_sessions::dsl as d;
        diesel::insert_into(d::dashboard_sessions)
            .values((
                d::token_hash.eq(&s.token_hash),
                d::workspace_id.eq(&s.workspace_id),
                d::root_key_id.eq(&s.root_key_id),
                d::csrf_token.eq(&s.csrf_token),
                d::created_at.eq(s.created_at),
                d::seen_at.eq(s.seen_at),
            ))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(())
    }

    fn session_by_hash(&mut self, token_hash: &str) -> R<Option<StoredSession>> {
        use dashboard_sessions::dsl as d;
        let row: Option<SessionRow> = d::dashboard_sessions
            .filter(d::token_hash.eq(token_hash))
            .select((
                d::token_hash,
                d::workspace_id,
                d::root_key_id,
                d::csrf_token,
                d::created_at,
                d::seen_at,
            ))
            .get_result(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(row.map(|(token_hash, workspace_id, root_key_id, csrf_token, created_at, seen_at)| {
            StoredSession { token_hash, workspace_id, root_key_id, csrf_token, created_at, seen_at }
        }))
    }

    fn touch_session(&mut self, token_hash: &str, now: i64) -> R<()> {
        use dashboard_sessions::dsl as d;
        diesel::update(d::dashboard_sessions.filter(d::token_hash.eq(token_hash)))
            .set(d::seen_at.eq(now))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(())
    }

    fn delete_session(&mut self, token_hash: &str) -> R<bool> {
        use dashboard_sessions::dsl as d;
        let n = diesel::delete(d::dashboard_sessions.filter(d::token_hash.eq(token_hash)))
            .execute(self.conn)
            .map_err(db_err)?;
        Ok(n > 0)
    }

    fn delete_sessions_seen_before(&mut self, before: i64) -> R<usize> {
        use dashboard_sessions::dsl as d;
        diesel::delete(d::dashboard_sessions.filter(d::seen_at.lt(before))).execute(self.conn).map_err(db_err)
    }
}
