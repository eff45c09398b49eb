//! Recoverable keys (API-v2.md §16): a key made `recoverable` keeps its plaintext sealed
//! in the vault (`keygate_vault`) beside its hash; a root key holding `decrypt_key`
//! reveals it (`getKey`/`listKeys` `decrypt`, the dashboard's reveal), one `key.decrypt`
//! audit event per key revealed; `keygate encryption rotate` seals every key again under
//! the keyring's first key.

use crate::{ApiAccess, AuditEvent, Key, Principal, RbacError, RbacService, RbacStore, RbacTx, StorageError};
use keygate_domain::Secret;
use keygate_vault::{Keyring, Plaintext, VaultError};
use std::collections::HashMap;
use std::sync::Arc;

pub const PERM_ENCRYPT_KEY: &str = "api.*.encrypt_key";
pub const PERM_DECRYPT_KEY: &str = "api.*.decrypt_key";

/// What a rotation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotated {
    /// Keys sealed again under the first key.
    pub resealed: u64,
    /// Keys left as they were because they could not be opened (named in the log).
    pub failed: u64,
}

/// The 412 of a ciphertext that does not open: nothing is revealed.
fn unopenable(key_id: &str, e: &VaultError) -> RbacError {
    RbacError::Precondition(format!("key {key_id}: its stored plaintext cannot be revealed: {e}"))
}

impl<S: RbacStore> RbacService<S> {
    /// Recoverable keys: plaintexts sealed under `keyring` (without one, `recoverable`
    /// answers 412).
    pub fn with_vault(mut self, keyring: Arc<Keyring>) -> Self {
        self.vault = Some(keyring);
        self
    }

    /// The keyring, when one is configured.
    pub fn vault(&self) -> Option<&Arc<Keyring>> {
        self.vault.as_ref()
    }

    /// The keyring to seal a new key of `api_id` with: 403 unless `p` holds `encrypt_key`
    /// for it, then 412 when no keyring is configured.
    pub(super) fn sealing_keyring(
        &self,
        p: &Principal,
        api_id: Option<&str>,
    ) -> Result<Arc<Keyring>, RbacError> {
        match ApiAccess::of(p, "encrypt_key") {
            Some(access) if access.admits(api_id) => {}
            _ => return Err(ApiAccess::denied("encrypt_key", api_id)),
        }
        self.vault.clone().ok_or_else(|| {
            RbacError::Precondition(
                "recoverable keys need an encryption keyring (KEYGATE_ENCRYPTION_KEYS): none is configured"
                    .into(),
            )
        })
    }

    /// Seals `secret`, the plaintext of `key`, into its row.
    pub(super) fn seal_key(
        &self,
        tx: &mut dyn RbacTx,
        keyring: &Keyring,
        key: &Key,
        secret: &Secret,
    ) -> Result<(), RbacError> {
        let sealed = keyring
            .seal(&key.workspace_id, &key.id, secret.expose())
            .map_err(|e| RbacError::Storage(StorageError::Internal(format!("sealing a key: {e}"))))?;
        Ok(tx.set_key_secret(&key.id, Some(&sealed))?)
    }

    /// Whether the key has a sealed plaintext (a recoverable key).
    pub(super) fn is_recoverable(
        &self,
        tx: &mut dyn RbacTx,
        ws: &str,
        key_id: &str,
    ) -> Result<bool, RbacError> {
        Ok(!tx.key_secrets(ws, &[key_id])?.is_empty())
    }

    /// The plaintexts of the recoverable ones of `keys` (`(keyId, apiId)`, already read by
    /// the caller), for `decrypt: true`: 403 unless `p` holds `decrypt_key` for every key's
    /// API (nothing revealed), 412 when a ciphertext does not open (nothing revealed). One
    /// `key.decrypt` audit event per key revealed, written before anything is answered.
    pub fn reveal_keys(
        &self,
        p: &Principal,
        keys: &[(&str, Option<&str>)],
    ) -> Result<HashMap<String, Plaintext>, RbacError> {
        let access = ApiAccess::of(p, "decrypt_key").ok_or_else(|| ApiAccess::denied("decrypt_key", None))?;
        if let Some((_, api)) = keys.iter().find(|(_, api)| !access.admits(*api)) {
            return Err(ApiAccess::denied("decrypt_key", *api));
        }
        let ws = p.workspace_id.as_str();
        let ids: Vec<&str> = keys.iter().map(|(id, _)| *id).collect();
        let Some(keyring) = &self.vault else { return Ok(HashMap::new()) };
        self.store.transaction(|tx| {
            let sealed = tx.key_secrets(ws, &ids)?;
            let mut revealed = HashMap::with_capacity(sealed.len());
            for (key_id, s) in &sealed {
                let plaintext = keyring.open(ws, key_id, s).map_err(|e| unopenable(key_id, &e))?;
                revealed.insert(key_id.clone(), plaintext);
            }
            let now = self.now();
            let events: Vec<AuditEvent> = sealed
                .iter()
                .map(|(key_id, _)| AuditEvent::on_key(ws, &p.root_key_id, "key.decrypt", key_id, now))
                .collect();
            tx.insert_audit_events(&events)?;
            Ok(revealed)
        })
    }

    /// The keyring ids recoverable keys are sealed under that the configured keyring lacks
    /// (keygate refuses to start then), with how many keys each seals.
    pub fn missing_vault_keys(&self) -> Result<Vec<(String, u64)>, RbacError> {
        let used = self.store.read(|tx| Ok(tx.vault_key_ids()?))?;
        Ok(used.into_iter().filter(|(id, _)| !self.vault.as_ref().is_some_and(|v| v.contains(id))).collect())
    }

    /// How many recoverable keys are not sealed under the first key yet.
    pub fn keys_to_rotate(&self) -> Result<u64, RbacError> {
        let Some(keyring) = &self.vault else { return Ok(0) };
        let used = self.store.read(|tx| Ok(tx.vault_key_ids()?))?;
        Ok(used.iter().filter(|(id, _)| id != keyring.primary_id()).map(|(_, n)| n).sum())
    }

    /// Seals every recoverable key not under the keyring's first key again under it,
    /// `batch` keys per transaction, online (creates and reveals go on; a key made
    /// meanwhile is sealed under the first key already) and resumable (a stopped run
    /// leaves each key sealed under one of the two). `progress` gets the running total.
    pub fn rotate_vault(&self, batch: usize, mut progress: impl FnMut(u64)) -> Result<Rotated, RbacError> {
        let keyring = self
            .vault
            .clone()
            .ok_or_else(|| RbacError::Precondition("no encryption keyring is configured".into()))?;
        let (mut done, mut after) = (Rotated::default(), None::<String>);
        loop {
            let step = self.store.transaction(|tx| {
                let rows = tx.key_secrets_not_under(keyring.primary_id(), after.as_deref(), batch.max(1))?;
                let mut step = Rotated::default();
                for (key_id, ws, sealed) in &rows {
                    match keyring.reseal(ws, key_id, sealed) {
                        Ok(resealed) => {
                            tx.set_key_secret(key_id, Some(&resealed))?;
                            step.resealed += 1;
                        }
                        Err(e) => {
                            log::error!("encryption rotate: key {key_id} left as it is: {e}");
                            step.failed += 1;
                        }
                    }
                }
                Ok((step, rows.last().map(|(id, _, _)| id.clone())))
            })?;
            let (step, last) = step;
            done.resealed += step.resealed;
            done.failed += step.failed;
            match last {
                Some(id) => {
                    progress(done.resealed + done.failed);
                    after = Some(id);
                }
                None => return Ok(done),
            }
        }
    }
}
