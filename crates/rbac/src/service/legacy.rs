//! Keys from other systems (API-v2.md §25): imported under a legacy migration with the slow
//! hash their old system kept and a lookup part, such a key is stored under a placeholder
//! hash no secret has. A verification that finds no key cuts the lookup part out of the
//! presented secret as each legacy migration says, checks the old hashes of the keys
//! waiting under it (through the registered [`LegacyHashes`], which bounds what the checks
//! cost) and, on a match, stores the key under keygate's hash of the secret, so that its
//! next verification is a plain one. A lookup that matches nothing costs no hash.

use crate::service::creation_shard;
use crate::{Digest, LegacyHashes, RbacError, RbacService, RbacStore, Scope};
use keygate_cache::verify::VerifyEntry;
use keygate_domain::digest_hex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The most keys waiting under one lookup value whose old hashes one verification checks.
pub const MAX_LEGACY_CANDIDATES: usize = 4;

/// The hash a key waiting for its first use is stored under: no secret's digest (hex has
/// no `:`), and unique.
pub(crate) fn placeholder(key_id: &str) -> String {
    format!("legacy:{key_id}")
}

impl<S: RbacStore> RbacService<S> {
    /// Legacy migrations checked through `hashes`.
    pub fn with_legacy(mut self, hashes: Arc<dyn LegacyHashes>) -> Self {
        self.legacy = Some(hashes);
        self
    }

    /// The old-hash checks run so far (a migrated key's second verification runs none).
    pub fn legacy_checks(&self) -> u64 {
        self.legacy_checks.load(Ordering::Relaxed)
    }

    /// 404 unless `id` names a migration (a verification's `migrationId`).
    pub fn ensure_migration(&self, id: &str) -> Result<(), RbacError> {
        match self.migrations.scheme(id) {
            Some(_) => Ok(()),
            None => Err(RbacError::NotFound(crate::Resource::Migration, format!("migration {id} not found"))),
        }
    }

    /// Why `hash` cannot come in under a legacy migration, if so.
    pub(crate) fn legacy_refusal(&self, hash: &str) -> Option<String> {
        match &self.legacy {
            Some(l) => l.refuse(hash),
            None => Some("cannot be checked: old systems' hashes are not enabled here".into()),
        }
    }

    /// `entry`, the store's answer for `digest`, or when it found no key, the key a legacy
    /// migration finds for `secret` (`migration`: that one only), then stored under
    /// `digest` and read again by `reload`. A check the bounds refused leaves no "no such
    /// key" behind, so the holder of a right key may try again.
    pub(crate) fn after_miss(
        &self,
        entry: Arc<VerifyEntry>,
        secret: &str,
        digest: &Digest,
        migration: Option<&str>,
        reload: impl FnOnce() -> Result<Arc<VerifyEntry>, RbacError>,
    ) -> Result<Arc<VerifyEntry>, RbacError> {
        let Some(hashes) = self.legacy.as_ref().filter(|_| entry.snapshot.is_none()) else {
            return Ok(entry);
        };
        let mut refused = false;
        for (_, cut) in self.migrations.legacy().filter(|(id, _)| migration.is_none_or(|m| m == *id)) {
            let Some(lookup) = cut.lookup(secret) else { continue };
            for (key_id, hash) in
                self.store.read(|tx| Ok(tx.legacy_candidates(lookup, MAX_LEGACY_CANDIDATES)?))?
            {
                let verdict = hashes.check(lookup, &hash, secret);
                if verdict.is_some() {
                    self.legacy_checks.fetch_add(1, Ordering::Relaxed);
                }
                match verdict {
                    Some(true) => {
                        self.write(|tx, changes| {
                            if tx.adopt_legacy_key(&key_id, &digest_hex(digest))? {
                                changes.touch(Scope::KeysCreated(creation_shard(digest)));
                            }
                            Ok(())
                        })?;
                        return reload();
                    }
                    Some(false) => {}
                    None => refused = true,
                }
            }
        }
        if refused {
            self.verify_cache.forget_unknown(digest);
        }
        Ok(entry)
    }
}
