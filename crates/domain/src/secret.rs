use sha2::{Digest, Sha256};
use std::fmt;

/// The shortest root key accepted from outside (`KEYGATE_ROOT_KEY`): 24 characters.
/// Generated root keys are far longer (`kg_root_` and 43 random characters).
pub const MIN_ROOT_KEY_CHARS: usize = 24;

/// The most characters of a secret that a listing shows.
const MAX_VISIBLE_CHARS: usize = 8;

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
    /// A short visible prefix for recognising the secret in listings: at most
    /// `MAX_VISIBLE_CHARS` characters and at most a third of the secret, so a listing
    /// never shows enough of a short secret to guess the rest.
    pub fn visible_prefix(&self) -> String {
        let shown = MAX_VISIBLE_CHARS.min(self.0.chars().count() / 3);
        self.0.chars().take(shown).collect()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Checks a root key chosen outside keygate (`KEYGATE_ROOT_KEY`): at least
/// [`MIN_ROOT_KEY_CHARS`] characters, at most 512, no whitespace or control characters
/// (it travels in an `Authorization` header).
pub fn validate_root_key_secret(secret: &str) -> Result<(), crate::ValidationError> {
    let chars = secret.chars().count();
    if chars < MIN_ROOT_KEY_CHARS {
        let msg = format!("must be at least {MIN_ROOT_KEY_CHARS} characters (this one has {chars})");
        return Err(crate::ValidationError::new("rootKey", msg));
    }
    crate::check_len("rootKey", secret, 512)?;
    if secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(crate::ValidationError::new("rootKey", "must not contain spaces or control characters"));
    }
    Ok(())
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
    fn chosen_root_keys_are_long_enough() {
        assert!(validate_root_key_secret("kg_root_demo_change_me").is_err(), "22 characters");
        assert!(validate_root_key_secret("kg_root_demo_change_me_now").is_ok());
        assert!(validate_root_key_secret("kg_root_demo change_me_now").is_err());
        assert!(validate_root_key_secret(&"x".repeat(513)).is_err());
    }

    #[test]
    fn debug_redacts_and_hash_is_sha256() {
        let s = Secret::new("kg_root_abc");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(hash_secret("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(Secret::new("kg_root_abcdefghijklmnopq").visible_prefix(), "kg_root_");
        // Never more than a third of the secret.
        assert_eq!(Secret::new("abcdefghijkl").visible_prefix(), "abcd");
        assert_eq!(Secret::new("ab").visible_prefix(), "");
    }
}
