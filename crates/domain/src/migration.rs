//! How keys issued elsewhere were hashed (API-v2.md §15): a migration id names a scheme,
//! and a key's hash decodes under it to the SHA-256 digest keygate stores, so the plaintext
//! verifies from then on without keygate ever seeing it.
//!
//! Built in: `sha256_hex` (hex of the SHA-256 of the key's UTF-8 bytes, either case) and
//! `sha256_base64` (standard or URL-safe base64, padding optional). The configuration may
//! name more ids, each mapped to a built-in scheme (`KEYGATE_MIGRATIONS=acme=sha256_base64`),
//! so an id another service gave a team works unchanged.

use crate::ValidationError;
use base64::Engine;
use std::collections::BTreeMap;

/// A way a key's hash was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashScheme {
    Sha256Hex,
    Sha256Base64,
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
        }
    }

    /// The SHA-256 digest `hash` stands for, or `None` when it does not decode to 32 bytes.
    pub fn decode(self, hash: &str) -> Option<[u8; 32]> {
        let bytes = match self {
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
            let scheme = HashScheme::parse(scheme)
                .ok_or_else(|| invalid("the scheme is sha256_hex or sha256_base64"))?;
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
}

/// One key to bring in: its hash, under the call's scheme, and what `createKey` would take
/// (its API is the call's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigratedKey {
    pub hash: String,
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
}
