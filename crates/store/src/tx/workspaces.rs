//! Workspaces.

use crate::schema::*;
use crate::tx::{DieselTx, R, db_err};
use diesel::prelude::*;
use keygate_rbac::Workspace;
use keygate_rbac::store::WorkspaceTx;

impl WorkspaceTx for DieselTx<'_> {
    fn count_workspaces(&mut self) -> R<i64> {
        workspaces::table.count().get_result(self.conn).map_err(db_err)
    }

    fn insert_workspace(&mut self, ws: &Workspace) -> R<()> {
        diesel::insert_into(workspaces::table)
            .values((
                workspaces::id.eq(&ws.id),
                workspaces::name.eq(&ws.name),
                workspaces::created_at.eq(ws.created_at),
            ))
            .execute(self.conn)
            .map(drop)
            .map_err(db_err)
    }

    fn find_workspace(&mut self, id_or_name: &str) -> R<Option<Workspace>> {
        let found: Option<(String, String, i64)> = workspaces::table
            .filter(workspaces::id.eq(id_or_name).or(workspaces::name.eq(id_or_name)))
            .order(workspaces::created_at)
            .select((workspaces::id, workspaces::name, workspaces::created_at))
            .first(self.conn)
            .optional()
            .map_err(db_err)?;
        Ok(found.map(|(id, name, created_at)| Workspace { id, name, created_at }))
    }

    fn list_workspaces(&mut self) -> R<Vec<Workspace>> {
        let rows: Vec<(String, String, i64)> = workspaces::table
            .order((workspaces::created_at, workspaces::id))
            .select((workspaces::id, workspaces::name, workspaces::created_at))
            .load(self.conn)
            .map_err(db_err)?;
        Ok(rows.into_iter().map(|(id, name, created_at)| Workspace { id, name, created_at }).collect())
    }
}
