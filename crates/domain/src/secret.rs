use sha2::{Digest, Sha256};
use std::fmt;

/// A secret (root key or key) in plaintext. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// The SHA-256 hash under which the secret is stored.
    pub fn hash(&self) -> String {
        hash_secret(&self.0)
    }
    /// A short visible prefix for recognising the secret in listings.
    pub fn visible_prefix(&self) -> String {
        self.0.chars().take(12).collect()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// SHA-256 of a secret, raw (the in-memory cache key).
pub fn secret_digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Lower-case hex SHA-256 of a secret: what the database stores and looks up.
pub fn hash_secret(secret: &str) -> String {
    digest_hex(&secret_digest(secret))
}

/// The stored (hex) form of a digest from [`secret_digest`].
pub fn digest_hex(digest: &[u8; 32]) -> String {
    hex::encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_and_hash_is_sha256() {
        let s = Secret::new("kg_root_abc");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(hash_secret("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(Secret::new("kg_root_abcdefgh").visible_prefix(), "kg_root_abcd");
    }
}
