//! `keygate encryption rotate|new-key`: the vault's keyring from the shell (docs/security.md).

use super::commands::EncryptionCmd;
use keygate_rbac::RbacService;
use keygate_store::SqlStore;
use keygate_vault::Keyring;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// `encryption new-key --id ID`: `{"id", "entry"}`, the entry as the server reads it.
pub(super) fn new_key(id: &str) -> anyhow::Result<serde_json::Value> {
    let entry = format!("{id}:{}", Keyring::generate_key());
    Keyring::parse(&entry).map_err(|e| anyhow::anyhow!("--id: {e}"))?;
    Ok(json!({ "id": id, "entry": entry }))
}

pub(super) fn run(rbac: RbacService<SqlStore>, cmd: EncryptionCmd) -> anyhow::Result<serde_json::Value> {
    match cmd {
        EncryptionCmd::NewKey { id } => new_key(&id),
        EncryptionCmd::Rotate { encryption_keys, batch } => {
            let keyring = Arc::new(
                Keyring::parse(&encryption_keys)
                    .map_err(|e| anyhow::anyhow!("KEYGATE_ENCRYPTION_KEYS: {e}"))?,
            );
            let primary = keyring.primary_id().to_string();
            let rbac = rbac.with_vault(keyring);
            let missing = rbac.missing_vault_keys()?;
            if !missing.is_empty() {
                let ids: Vec<&str> = missing.iter().map(|(id, _)| id.as_str()).collect();
                anyhow::bail!(
                    "keys are sealed under {}, which the keyring does not hold: add it after the new key",
                    ids.join(", ")
                );
            }
            let total = rbac.keys_to_rotate()?;
            let started = Instant::now();
            let done = rbac.rotate_vault(batch as usize, |n| {
                eprintln!("keygate: encryption rotate: {n} of {total} keys")
            })?;
            let summary = json!({
                "sealedUnder": primary,
                "resealed": done.resealed,
                "failed": done.failed,
                "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            });
            if done.failed > 0 {
                println!("{summary}");
                anyhow::bail!(
                    "{} keys could not be opened and were left as they were (the log names them)",
                    done.failed
                );
            }
            Ok(summary)
        }
    }
}
