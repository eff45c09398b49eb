//! Admin subcommands: work on the configured database directly and print exactly one JSON
//! object on stdout; errors are one line on stderr and a non-zero exit.

mod backup;
mod check;
pub mod commands;
mod encryption;
pub(crate) mod import;
mod store;

use crate::config::Command;
use commands::{AuditCmd, KeysCmd, RootKeysCmd, WorkspacesCmd};
use keygate_domain::{SystemClock, redact_in};
use keygate_rbac::{AuditFilter, MAX_AUDIT_PAGE, RbacService};
use keygate_store::{Backend, PoolSettings, SqlStore};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

pub fn run(database_url: &str, command: Command) -> ExitCode {
    match execute(database_url, command) {
        // A list of lines (`audit list`): one JSON object each.
        Ok(serde_json::Value::Array(lines)) => {
            for line in lines {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // Stopped part way (`keys import`): what was done, then why it stopped.
            if let Some(import::Incomplete { summary, .. }) = e.downcast_ref::<import::Incomplete>() {
                println!("{summary}");
            }
            eprintln!("keygate: {}", redact_in(&format!("{e:#}"), database_url).replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn execute(database_url: &str, command: Command) -> anyhow::Result<serde_json::Value> {
    // Databases named by their own flags, not the configured one.
    let command = match command {
        Command::Store(cmd) => return store::run(cmd),
        // No database at all.
        Command::Encryption(commands::EncryptionCmd::NewKey { id }) => return encryption::new_key(&id),
        Command::Keys(KeysCmd::Check { files }) => return check::run(&files),
        other => other,
    };
    // Only `workspaces create` may start a new SQLite database: any other command run in
    // the wrong directory would otherwise create an empty `keygate.db` and report that
    // nothing is there.
    let creates = matches!(command, Command::Workspaces(WorkspacesCmd::Create { .. }));
    if let Ok(Backend::Sqlite(path)) = Backend::from_url(database_url)
        && !creates
        && !std::path::Path::new(&path).exists()
    {
        anyhow::bail!(
            "no database at {path}: run where the server's database is, or pass --database-url \
             (or DATABASE_URL)"
        );
    }
    let store =
        Arc::new(SqlStore::open(database_url, PoolSettings { max_size: 2, ..PoolSettings::default() })?);
    let rbac = RbacService::<SqlStore>::new(store.clone(), Arc::new(SystemClock));
    Ok(match command {
        Command::Serve(_) | Command::Openapi { .. } | Command::Store(_) => {
            anyhow::bail!("not an admin command")
        }
        Command::Backup(args) => return backup::run(&store, &args),
        Command::Encryption(cmd) => return encryption::run(rbac, cmd),
        Command::Workspaces(WorkspacesCmd::Create { name }) => {
            let ws = rbac.create_workspace(&name)?;
            json!({ "id": ws.id, "name": ws.name })
        }
        Command::Workspaces(WorkspacesCmd::List) => {
            let list: Vec<_> = rbac
                .list_workspaces()?
                .into_iter()
                .map(|w| json!({ "id": w.id, "name": w.name, "createdAt": w.created_at }))
                .collect();
            json!({ "workspaces": list })
        }
        Command::RootKeys(RootKeysCmd::Create { workspace, permissions }) => {
            let (rk, secret) = rbac.create_root_key(&workspace, &permissions)?;
            json!({ "id": rk.id, "key": secret.expose(), "workspaceId": rk.workspace_id, "permissions": rk.permissions })
        }
        Command::RootKeys(RootKeysCmd::List { workspace }) => {
            let keys: Vec<_> = rbac
                .list_root_keys(&workspace)?
                .into_iter()
                .map(|k| {
                    json!({ "id": k.id, "name": k.name, "prefix": k.prefix, "end": k.end, "enabled": k.enabled,
                        "permissions": k.permissions, "createdAt": k.created_at, "expires": k.expires_at,
                        "lastUsedAt": k.last_used_at })
                })
                .collect();
            json!({ "rootKeys": keys })
        }
        Command::RootKeys(RootKeysCmd::Revoke { id }) => {
            rbac.revoke_root_key(&id)?;
            json!({ "id": id, "revoked": true })
        }
        Command::Keys(KeysCmd::Create { workspace, name }) => {
            let ws = rbac.find_workspace(&workspace)?;
            let (key, secret) = rbac.create_key(&ws.id, name)?;
            json!({ "keyId": key.id, "key": secret.expose() })
        }
        Command::Keys(KeysCmd::Import(args)) => return import::run(rbac, &args),
        Command::Keys(KeysCmd::Check { .. }) => anyhow::bail!("needs no database"),
        Command::Keys(KeysCmd::List { workspace }) => {
            let list: Vec<_> = rbac
                .list_keys(&workspace)?
                .into_iter()
                .map(|k| {
                    json!({ "keyId": k.id, "start": k.start, "name": k.name, "apiId": k.api_id,
                            "enabled": k.enabled, "expires": k.expires, "createdAt": k.created_at })
                })
                .collect();
            json!({ "keys": list })
        }
        Command::Keys(KeysCmd::Delete { id }) => {
            rbac.delete_key_admin(&id)?;
            json!({ "keyId": id, "deleted": true })
        }
        Command::Audit(AuditCmd::List { workspace, event, actor, resource_id, since, until, limit }) => {
            let filter = AuditFilter { action: event, actor_id: actor, resource_id, since, until };
            let mut lines = Vec::new();
            let mut cursor: Option<String> = None;
            let wanted = limit.unwrap_or(usize::MAX);
            while lines.len() < wanted {
                let page = rbac.list_audit_events_admin(
                    &workspace,
                    &filter,
                    cursor.as_deref(),
                    MAX_AUDIT_PAGE.min(wanted - lines.len()),
                )?;
                lines.extend(page.items.into_iter().map(|e| {
                    json!({ "id": e.id, "event": e.action, "actorId": e.actor_id, "resourceType": e.resource_type,
                            "resourceId": e.resource_id, "keyId": e.key_id, "roleId": e.role_id, "time": e.at,
                            "detail": e.detail })
                }));
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            serde_json::Value::Array(lines)
        }
    })
}
