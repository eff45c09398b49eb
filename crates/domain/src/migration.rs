//! How keys issued elsewhere were hashed (API-v2.md §15): a migration id names a scheme,
//! and a key's hash decodes under it to the SHA-256 digest keygate stores, so the plaintext
//! verifies from then on without keygate ever seeing it.
//!
//! Built in: `sha256_hex` (hex of the SHA-256 of the key's UTF-8 bytes, either case) and
//! `sha256_base64` (standard or URL-safe base64, padding optional). The configuration may
//! name more ids, each mapped to a built-in scheme (`KEYGATE_MIGRATIONS=acme=sha256_base64`),
//! so an id another service gave a team works unchanged.
//!
//! Keys from systems that stored a slow salted hash (bcrypt, argon2id, scrypt, Django's
//! PBKDF2: API-v2.md §25) come in under a *legacy* migration, `ID=legacy:SEP:POS`: each
//! entry's hash is kept as given with its `lookup` (the part of the key the old system kept
//! in clear to find the row), and a presented key's lookup is its `POS`-th part (from 0)
//! when split at `SEP` (`pk=legacy:_:1` for `prefix_lookup_secret` keys). Such a key is
//! checked against its old hash when it is first presented, and stored under keygate's own
//! hash from then on.

use crate::ValidationError;
use base64::Engine;
use std::collections::BTreeMap;

/// A way a key's hash was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashScheme {
    Sha256Hex,
    Sha256Base64,
    /// An old system's slow hash of the whole key, kept as given, found by its lookup.
    Legacy(Cut),
}

/// Where a key's lookup part is: its `pos`-th part (from 0) when split at `sep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    pub sep: char,
    pub pos: u8,
}

impl Cut {
    /// The lookup part of `key`, when it has a non-empty one.
    pub fn lookup(self, key: &str) -> Option<&str> {
        key.split(self.sep).nth(self.pos as usize).filter(|s| !s.is_empty())
    }

    /// From `SEP:POS` (one character, a position up to 15).
    fn parse(text: &str) -> Option<Self> {
        let (sep, pos) = text.rsplit_once(':')?;
        let mut chars = sep.chars();
        let (Some(sep), None) = (chars.next(), chars.next()) else { return None };
        let pos: u8 = pos.parse().ok().filter(|p| *p < 16)?;
        Some(Self { sep, pos })
    }
}

impl HashScheme {
    /// The built-in scheme of that name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "sha256_hex" => Some(Self::Sha256Hex),
            "sha256_base64" => Some(Self::Sha256Base64),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Sha256Hex => "sha256_hex",
            Self::Sha256Base64 => "sha256_base64",
            Self::Legacy(_) => "legacy",
        }
    }

    /// The SHA-256 digest `hash` stands for, or `None` when it does not decode to 32 bytes
    /// (or the scheme is a legacy one, whose hashes are no digest).
    pub fn decode(self, hash: &str) -> Option<[u8; 32]> {
        let bytes = match self {
            Self::Legacy(_) => return None,
            Self::Sha256Hex => hex::decode(hash).ok()?,
            Self::Sha256Base64 => {
                let unpadded = hash.trim_end_matches('=');
                // Padding, when present, is whole: at most two `=` and the length a multiple of 4.
                if hash.len() - unpadded.len() > 2
                    || (unpadded.len() != hash.len() && !hash.len().is_multiple_of(4))
                {
                    return None;
                }
                let engine = if unpadded.contains(['-', '_']) {
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD
                } else {
                    &base64::engine::general_purpose::STANDARD_NO_PAD
                };
                engine.decode(unpadded).ok()?
            }
        };
        bytes.try_into().ok()
    }
}

impl HashScheme {
    /// Every entry's digest under this scheme, or `None` for a legacy entry (whose old hash
    /// `refuse` must not refuse, and which needs its `lookup`): 400 at the first fault.
    pub fn import(
        self,
        entries: &[MigratedKey],
        refuse: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<Option<[u8; 32]>>, ValidationError> {
        let at = |i: usize, field: &str| format!("keys.{i}.{field}");
        let legacy = matches!(self, HashScheme::Legacy(_));
        let mut out = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            match (&e.lookup, legacy) {
                (Some(_), false) => {
                    return Err(ValidationError::new(at(i, "lookup"), "is for legacy migrations only"));
                }
                (None, true) => return Err(ValidationError::new(at(i, "lookup"), "is required")),
                (Some(lookup), true) => crate::check_len(&at(i, "lookup"), lookup, crate::MAX_NAME_CHARS)?,
                (None, false) => {}
            }
            if legacy {
                if let Some(why) = refuse(&e.hash) {
                    return Err(ValidationError::new(at(i, "hash"), why));
                }
                out.push(None);
                continue;
            }
            let digest = self.decode(&e.hash).ok_or_else(|| {
                let msg = format!("is not a SHA-256 hash in the form {} expects", self.name());
                ValidationError::new(at(i, "hash"), msg)
            })?;
            out.push(Some(digest));
        }
        Ok(out)
    }
}

/// The migration ids a deployment accepts: the built-in schemes under their own names,
/// and those the configuration names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrations {
    named: BTreeMap<String, HashScheme>,
}

/// The longest migration id.
const MAX_MIGRATION_ID_CHARS: usize = 255;

impl Migrations {
    /// From `ID=SCHEME` entries (the setting `KEYGATE_MIGRATIONS`); an entry that names no
    /// built-in scheme, or an id twice, is an error naming it.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, ValidationError> {
        let mut named = BTreeMap::new();
        for entry in entries.iter().map(AsRef::as_ref).filter(|e| !e.trim().is_empty()) {
            let invalid = |why: &str| ValidationError::new("migrations", format!("{entry:?}: {why}"));
            let (id, scheme) = entry.trim().split_once('=').ok_or_else(|| invalid("use ID=SCHEME"))?;
            let (id, scheme) = (id.trim(), scheme.trim());
            if id.is_empty() || id.chars().count() > MAX_MIGRATION_ID_CHARS {
                return Err(invalid("the id must be 1 to 255 characters"));
            }
            let scheme = match scheme.strip_prefix("legacy:") {
                Some(cut) => HashScheme::Legacy(
                    Cut::parse(cut).ok_or_else(|| invalid("use legacy:SEP:POS (one character, 0 to 15)"))?,
                ),
                None => HashScheme::parse(scheme)
                    .ok_or_else(|| invalid("the scheme is sha256_hex, sha256_base64 or legacy:SEP:POS"))?,
            };
            if named.insert(id.to_string(), scheme).is_some() {
                return Err(invalid("the id is named twice"));
            }
        }
        Ok(Self { named })
    }

    /// The scheme of migration `id`: a configured id, else a built-in scheme's name.
    pub fn scheme(&self, id: &str) -> Option<HashScheme> {
        self.named.get(id).copied().or_else(|| HashScheme::parse(id))
    }

    /// The legacy migrations, by id.
    pub fn legacy(&self) -> impl Iterator<Item = (&str, Cut)> {
        self.named.iter().filter_map(|(id, s)| match s {
            HashScheme::Legacy(cut) => Some((id.as_str(), *cut)),
            _ => None,
        })
    }
}

/// Old systems' hashes, registered by `keygate-legacy` with `keygate-rbac`'s service.
pub trait LegacyHashes: Send + Sync + std::fmt::Debug {
    /// Why `hash` cannot be imported (not a format known, or too costly to check), if so.
    fn refuse(&self, hash: &str) -> Option<String>;
    /// Whether `secret` is the key of `hash`, found under `lookup`; `None` when the
    /// bounds on concurrent checks refuse it now.
    fn check(&self, lookup: &str, hash: &str, secret: &str) -> Option<bool>;
}

/// A key waiting for its first use (`keys.migrateKeys` under a legacy migration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyRow {
    pub key_id: String,
    pub workspace_id: String,
    pub lookup: String,
    pub hash: String,
}

/// One key to bring in: its hash, under the call's scheme, and what `createKey` would take
/// (its API is the call's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigratedKey {
    pub hash: String,
    /// Under a legacy migration: the part of the key its old system kept in clear.
    pub lookup: Option<String>,
    pub name: Option<String>,
    /// The identity to link, by its `externalId` (created when missing).
    pub external_id: Option<String>,
    /// A JSON object as text.
    pub meta: Option<String>,
    /// Role names or ids; each must exist.
    pub roles: Vec<String>,
    /// Permission slugs; missing ones are created.
    pub permissions: Vec<String>,
    pub expires: Option<i64>,
    pub enabled: bool,
    pub credits: Option<crate::Credits>,
    pub ratelimits: Vec<crate::NewRateLimit>,
}

impl MigratedKey {
    /// An enabled key of that hash, with nothing else.
    pub fn with_hash(hash: impl Into<String>) -> Self {
        Self {
            hash: hash.into(),
            lookup: None,
            name: None,
            external_id: None,
            meta: None,
            roles: Vec::new(),
            permissions: Vec::new(),
            expires: None,
            enabled: true,
            credits: None,
            ratelimits: Vec::new(),
        }
    }
}

/// What a call did: the keys made, `(hash as given, key id)` in request order, and the
/// hashes skipped, already a key's or repeating an earlier entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    pub migrated: Vec<(String, String)>,
    pub failed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_digest;

    #[test]
    fn hex_in_either_case_and_base64_in_both_alphabets_with_or_without_padding() {
        let digest = secret_digest("sk_live_customer_key");
        let hex = hex::encode(digest);
        assert_eq!(HashScheme::Sha256Hex.decode(&hex), Some(digest));
        assert_eq!(HashScheme::Sha256Hex.decode(&hex.to_uppercase()), Some(digest));
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
        for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
            let b64 = engine.encode(digest);
            assert_eq!(HashScheme::Sha256Base64.decode(&b64), Some(digest), "{b64}");
        }
    }

    #[test]
    fn anything_but_32_bytes_does_not_decode() {
        let digest = secret_digest("k");
        let hex = hex::encode(digest);
        for bad in [&hex[..62], "zz", "", &format!("{hex}00")] {
            assert_eq!(HashScheme::Sha256Hex.decode(bad), None, "{bad}");
        }
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        for bad in [&b64[..40], "!!!!", &format!("{b64}=="), &format!("{}===", &b64[..43])] {
            assert_eq!(HashScheme::Sha256Base64.decode(bad), None, "{bad}");
        }
        // Base64 of 32 bytes is not a hex hash, and the other way round.
        assert_eq!(HashScheme::Sha256Hex.decode(&b64), None);
        assert_eq!(HashScheme::Sha256Base64.decode(&hex), None);
    }

    #[test]
    fn configured_ids_map_to_built_in_schemes() {
        let m = Migrations::parse(&["acme = sha256_base64", "legacy=sha256_hex"]).unwrap();
        assert_eq!(m.scheme("acme"), Some(HashScheme::Sha256Base64));
        assert_eq!(m.scheme("legacy"), Some(HashScheme::Sha256Hex));
        assert_eq!(m.scheme("sha256_hex"), Some(HashScheme::Sha256Hex), "built-ins by their names");
        assert_eq!(m.scheme("other"), None);
        for bad in [&["acme"][..], &["acme=md5"], &["=sha256_hex"], &["a=sha256_hex", "a=sha256_base64"]] {
            assert!(Migrations::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn legacy_migrations_cut_the_lookup_at_a_separator_and_position() {
        let m = Migrations::parse(&["pk=legacy:_:1", "drf=legacy:.:0", "colon=legacy:::2", "a=sha256_hex"])
            .unwrap();
        let cut = |id| match m.scheme(id) {
            Some(HashScheme::Legacy(c)) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(cut("pk").lookup("acme_BRTRKFsL_51FwqftsmMDHHbJAMEXXHCgG"), Some("BRTRKFsL"));
        assert_eq!(cut("drf").lookup("Xb3Fe1.s3cr3t"), Some("Xb3Fe1"));
        assert_eq!(cut("colon").lookup("a:b:c"), Some("c"));
        assert_eq!(cut("pk").lookup("nolookup"), None, "too few parts");
        assert_eq!(cut("pk").lookup("a__b"), None, "an empty part");
        assert_eq!(m.legacy().map(|(id, _)| id).collect::<Vec<_>>(), ["colon", "drf", "pk"]);
        assert_eq!(HashScheme::Legacy(cut("pk")).decode(&"0".repeat(64)), None);
        for bad in
            [&["x=legacy:_"][..], &["x=legacy:__:1"], &["x=legacy:_:16"], &["x=legacy::1"], &["x=legacy"]]
        {
            assert!(Migrations::parse(bad).is_err(), "{bad:?}");
        }
    }
}
