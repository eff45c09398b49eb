//! keygate's vault (API-v2.md §16): the plaintext of a recoverable key sealed with
//! AES-256-GCM under a [`Keyring`], with the key's (workspace, keyId) as associated data, so
//! that a ciphertext copied into another key's row does not open. The first key of the
//! ring seals, every key opens; each [`Sealed`] names the key that sealed it.
//!
//! Key material and plaintexts are zeroized when dropped, and no `Debug` of this crate
//! prints either. Synchronous, no I/O: the caller stores what [`Keyring::seal`] gives.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use rand::RngCore;
use std::fmt;
use zeroize::Zeroizing;

/// A plaintext opened from the vault: zeroized when dropped.
pub type Plaintext = Zeroizing<String>;

/// Bytes of a key (AES-256).
pub const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// Most characters of a key id.
pub const MAX_KEY_ID_CHARS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    /// The keyring's text or a key in it is not valid (never holds key material).
    #[error("the encryption keyring is not valid: {0}")]
    BadKeyring(String),
    /// A ciphertext names a key the ring does not hold.
    #[error("encryption key {0} is not in the keyring")]
    UnknownKey(String),
    /// A ciphertext does not open: not sealed for this key, or altered.
    #[error("the ciphertext does not open (not sealed for this key, or altered)")]
    Unopenable,
}

/// A sealed plaintext as stored: the id of the key that sealed it, and the base64 of
/// nonce and ciphertext (with its tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub data: String,
}

struct RingKey {
    id: String,
    cipher: Aes256Gcm,
}

/// The encryption keys, first one sealing: from `KEYGATE_ENCRYPTION_KEYS`
/// (`id:base64-of-32-bytes,...`) or the config file.
pub struct Keyring {
    keys: Vec<RingKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring").field("ids", &self.ids().collect::<Vec<_>>()).finish()
    }
}

/// `keygate-vault-v1 \0 workspace \0 keyId`: what a ciphertext is bound to.
fn associated_data(workspace: &str, key_id: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(20 + workspace.len() + key_id.len());
    aad.extend_from_slice(b"keygate-vault-v1\0");
    aad.extend_from_slice(workspace.as_bytes());
    aad.push(0);
    aad.extend_from_slice(key_id.as_bytes());
    aad
}

fn decode_base64(text: &str) -> Option<Zeroizing<Vec<u8>>> {
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .map(Zeroizing::new)
}

impl Keyring {
    /// Parses `id:base64,...` (spaces around entries allowed): ids of 1 to 64 characters
    /// of `A-Z a-z 0-9 _ - .`, unique; each key exactly 32 bytes in standard or URL-safe
    /// base64 (padding optional). Errors name the entry, never its key.
    pub fn parse(spec: &str) -> Result<Self, VaultError> {
        let spec = Zeroizing::new(spec.to_string());
        let mut keys = Vec::new();
        for (i, entry) in spec.split(',').map(str::trim).enumerate() {
            let bad = |why: &str| VaultError::BadKeyring(format!("entry {} {why}", i + 1));
            let (id, key) = entry.split_once(':').ok_or_else(|| bad("is not id:base64-of-32-bytes"))?;
            let bytes = decode_base64(key.trim()).ok_or_else(|| bad("has a key that is not base64"))?;
            let bytes: &[u8; KEY_BYTES] =
                bytes.as_slice().try_into().map_err(|_| bad("has a key that is not 32 bytes"))?;
            keys.push((id.trim().to_string(), Zeroizing::new(*bytes)));
        }
        Self::new(keys)
    }

    /// A keyring of `(id, key)`, the first sealing.
    pub fn new(keys: Vec<(String, Zeroizing<[u8; KEY_BYTES]>)>) -> Result<Self, VaultError> {
        if keys.is_empty() {
            return Err(VaultError::BadKeyring("it holds no key".into()));
        }
        let mut ring: Vec<RingKey> = Vec::with_capacity(keys.len());
        for (id, key) in keys {
            let valid = !id.is_empty()
                && id.chars().count() <= MAX_KEY_ID_CHARS
                && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                return Err(VaultError::BadKeyring(format!(
                    "key id {id:?} must be 1 to {MAX_KEY_ID_CHARS} of A-Z a-z 0-9 _ - ."
                )));
            }
            if ring.iter().any(|k| k.id == id) {
                return Err(VaultError::BadKeyring(format!("key id {id} appears twice")));
            }
            let cipher = Aes256Gcm::new_from_slice(key.as_slice())
                .map_err(|_| VaultError::BadKeyring(format!("key {id} is not 32 bytes")))?;
            ring.push(RingKey { id, cipher });
        }
        Ok(Self { keys: ring })
    }

    /// A new random key, as base64 (for a keyring entry `id:<this>`).
    pub fn generate_key() -> String {
        let mut key = Zeroizing::new([0u8; KEY_BYTES]);
        rand::rng().fill_bytes(key.as_mut_slice());
        STANDARD.encode(key.as_slice())
    }

    /// The id of the key that seals.
    pub fn primary_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Every key id, the sealing one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    pub fn contains(&self, id: &str) -> bool {
        self.keys.iter().any(|k| k.id == id)
    }

    /// Seals `plaintext` for the key `key_id` of `workspace` under the first key.
    pub fn seal(&self, workspace: &str, key_id: &str, plaintext: &str) -> Result<Sealed, VaultError> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let aad = associated_data(workspace, key_id);
        let sealed = key
            .cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext.as_bytes(), aad: &aad })
            .map_err(|_| VaultError::Unopenable)?;
        let mut data = Vec::with_capacity(NONCE_BYTES + sealed.len());
        data.extend_from_slice(&nonce);
        data.extend_from_slice(&sealed);
        Ok(Sealed { key_id: key.id.clone(), data: STANDARD.encode(data) })
    }

    /// Opens what [`Self::seal`] gave for the same workspace and key id.
    pub fn open(&self, workspace: &str, key_id: &str, sealed: &Sealed) -> Result<Plaintext, VaultError> {
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| VaultError::UnknownKey(sealed.key_id.clone()))?;
        let data = STANDARD.decode(&sealed.data).map_err(|_| VaultError::Unopenable)?;
        if data.len() < NONCE_BYTES + 16 {
            return Err(VaultError::Unopenable);
        }
        let (nonce, ciphertext) = data.split_at(NONCE_BYTES);
        let aad = associated_data(workspace, key_id);
        let opened = Zeroizing::new(
            key.cipher
                .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: &aad })
                .map_err(|_| VaultError::Unopenable)?,
        );
        let text = std::str::from_utf8(&opened).map_err(|_| VaultError::Unopenable)?;
        Ok(Zeroizing::new(text.to_string()))
    }

    /// `sealed` sealed again under the first key (rotation); unchanged when it is already.
    pub fn reseal(&self, workspace: &str, key_id: &str, sealed: &Sealed) -> Result<Sealed, VaultError> {
        if sealed.key_id == self.primary_id() {
            return Ok(sealed.clone());
        }
        let plaintext = self.open(workspace, key_id, sealed)?;
        self.seal(workspace, key_id, &plaintext)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ring(spec: &str) -> Keyring {
        Keyring::parse(spec).unwrap()
    }

    fn spec(id: &str, byte: u8) -> String {
        format!("{id}:{}", STANDARD.encode([byte; KEY_BYTES]))
    }

    #[test]
    fn a_sealed_key_opens_for_its_own_workspace_and_key_only() {
        let r = ring(&spec("k1", 1));
        let s = r.seal("ws_a", "key_1", "sk_live_secret").unwrap();
        assert_eq!(s.key_id, "k1");
        assert!(!s.data.contains("sk_live_secret"));
        assert_eq!(r.open("ws_a", "key_1", &s).unwrap().as_str(), "sk_live_secret");
        assert_eq!(r.open("ws_a", "key_2", &s), Err(VaultError::Unopenable), "copied to another key");
        assert_eq!(r.open("ws_b", "key_1", &s), Err(VaultError::Unopenable), "another workspace");
        // Two seals of one plaintext differ (fresh nonces).
        assert_ne!(r.seal("ws_a", "key_1", "sk_live_secret").unwrap().data, s.data);
        // Altered: does not open.
        let mut bytes = STANDARD.decode(&s.data).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = Sealed { data: STANDARD.encode(bytes), ..s.clone() };
        assert_eq!(r.open("ws_a", "key_1", &altered), Err(VaultError::Unopenable));
        for data in ["", "not base64!", "AAAA"] {
            let bad = Sealed { data: data.into(), ..s.clone() };
            assert_eq!(r.open("ws_a", "key_1", &bad), Err(VaultError::Unopenable));
        }
    }

    #[test]
    fn the_first_key_seals_every_key_opens_and_rotation_reseals() {
        let old = ring(&spec("k1", 1));
        let sealed = old.seal("ws", "key_1", "plain").unwrap();
        let both = ring(&format!("{}, {}", spec("k2", 2), spec("k1", 1)));
        assert_eq!(both.primary_id(), "k2");
        assert_eq!(both.ids().collect::<Vec<_>>(), ["k2", "k1"]);
        assert_eq!(both.open("ws", "key_1", &sealed).unwrap().as_str(), "plain");
        let resealed = both.reseal("ws", "key_1", &sealed).unwrap();
        assert_eq!(resealed.key_id, "k2");
        assert_eq!(both.reseal("ws", "key_1", &resealed).unwrap(), resealed, "already under k2");
        let new = ring(&spec("k2", 2));
        assert_eq!(new.open("ws", "key_1", &resealed).unwrap().as_str(), "plain");
        assert_eq!(new.open("ws", "key_1", &sealed), Err(VaultError::UnknownKey("k1".into())));
        // The same id with other bytes: does not open.
        let impostor = ring(&spec("k1", 9));
        assert_eq!(impostor.open("ws", "key_1", &sealed), Err(VaultError::Unopenable));
    }

    #[test]
    fn bad_keyrings_are_refused_without_showing_a_key() {
        let short = format!("k1:{}", STANDARD.encode([7u8; 16]));
        for (text, says) in [
            ("", "entry 1"),
            ("k1", "entry 1"),
            ("k1:!!!", "not base64"),
            (short.as_str(), "not 32 bytes"),
            (&format!("{},{}", spec("k1", 1), spec("k1", 2)), "twice"),
            (&format!("bad id:{}", STANDARD.encode([1u8; 32])), "must be"),
        ] {
            let e = Keyring::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(!e.contains(&STANDARD.encode([1u8; 32])), "{e}");
        }
        // URL-safe and unpadded base64 are read too.
        let key = [0xfbu8; KEY_BYTES];
        assert!(Keyring::parse(&format!("k:{}", URL_SAFE_NO_PAD.encode(key))).is_ok());
        let generated = Keyring::generate_key();
        assert_eq!(STANDARD.decode(&generated).unwrap().len(), KEY_BYTES);
        assert_eq!(format!("{:?}", ring(&spec("k1", 1))), "Keyring { ids: [\"k1\"] }");
    }
}
