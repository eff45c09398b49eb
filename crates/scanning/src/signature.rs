//! GitHub's signatures on secret scanning reports: ECDSA P-256 with SHA-256 over the raw
//! body, base64 of the DER signature in `Github-Public-Key-Signature`, under the key that
//! `Github-Public-Key-Identifier` names among the public keys GitHub publishes
//! (`{public_keys: [{key_identifier, key (PEM), is_current}]}`), which the operator keeps
//! in a file ([`KeyFile`]).

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use parking_lot::Mutex;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// The longest key identifier or signature header taken (GitHub's are far shorter).
const MAX_HEADER_CHARS: usize = 1_024;
/// The most public keys a file may hold.
const MAX_KEYS: usize = 100;

/// Why a report is refused (401: nothing happens). The messages name no key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No key file is configured, or it cannot be read now.
    NotConfigured(String),
    /// A header is missing or malformed.
    Malformed(&'static str),
    /// The identifier names no key of the file.
    UnknownKey,
    /// The signature does not verify over the body.
    BadSignature,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NotConfigured(why) => write!(f, "secret scanning reports are not accepted here: {why}"),
            Refused::Malformed(what) => write!(f, "{what}"),
            Refused::UnknownKey => f.write_str("Github-Public-Key-Identifier names no known public key"),
            Refused::BadSignature => f.write_str("Github-Public-Key-Signature does not verify over the body"),
        }
    }
}

#[derive(Deserialize)]
struct Published {
    public_keys: Vec<PublishedKey>,
}

#[derive(Deserialize)]
struct PublishedKey {
    key_identifier: String,
    key: String,
    // `is_current` is read by GitHub's own tooling; a key still listed verifies.
}

/// The public keys of one version of the file, by identifier.
#[derive(Debug, Default)]
pub struct PublicKeys {
    keys: Vec<(String, VerifyingKey)>,
}

impl PublicKeys {
    /// From the JSON GitHub publishes (`GET https://api.github.com/meta/public_keys/secret_scanning`).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let published: Published =
            serde_json::from_str(text).map_err(|e| format!("not GitHub's key list: {e}"))?;
        if published.public_keys.len() > MAX_KEYS {
            return Err(format!("more than {MAX_KEYS} public keys"));
        }
        let mut keys = Vec::with_capacity(published.public_keys.len());
        for k in published.public_keys {
            let key = VerifyingKey::from_public_key_pem(k.key.trim())
                .map_err(|_| format!("key {}: not a P-256 public key in PEM", k.key_identifier))?;
            keys.push((k.key_identifier, key));
        }
        Ok(Self { keys })
    }

    /// Whether `signature` (base64 of a DER ECDSA signature) by the key `identifier`
    /// verifies over `body`.
    pub fn verify(&self, identifier: &str, signature: &str, body: &[u8]) -> Result<(), Refused> {
        if identifier.is_empty() || identifier.len() > MAX_HEADER_CHARS {
            return Err(Refused::Malformed("Github-Public-Key-Identifier is missing or too long"));
        }
        if signature.is_empty() || signature.len() > MAX_HEADER_CHARS {
            return Err(Refused::Malformed("Github-Public-Key-Signature is missing or too long"));
        }
        let key =
            self.keys.iter().find(|(id, _)| id == identifier).map(|(_, k)| k).ok_or(Refused::UnknownKey)?;
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature.trim())
            .map_err(|_| Refused::Malformed("Github-Public-Key-Signature is not base64"))?;
        let signature = Signature::from_der(&der).map_err(|_| Refused::BadSignature)?;
        key.verify(body, &signature).map_err(|_| Refused::BadSignature)
    }
}

/// The file `KEYGATE_GITHUB_SCANNING_KEYS` names, read again whenever its modification
/// time changes (replacing it is how the operator refreshes the keys: no restart).
#[derive(Debug)]
pub struct KeyFile {
    path: Option<PathBuf>,
    read: Mutex<Option<(SystemTime, Arc<PublicKeys>)>>,
}

impl KeyFile {
    /// `None`: reports are refused (401), as no key can verify them.
    pub fn new(path: Option<PathBuf>) -> Self {
        Self { path, read: Mutex::new(None) }
    }

    /// Whether a file is named.
    pub fn configured(&self) -> bool {
        self.path.is_some()
    }

    /// Reads the file now, so that a bad one fails the start rather than the first report.
    pub fn check(&self) -> Result<(), String> {
        self.keys().map(drop).map_err(|e| e.to_string())
    }

    /// The keys as the file holds them now.
    pub fn keys(&self) -> Result<Arc<PublicKeys>, Refused> {
        let Some(path) = &self.path else {
            return Err(Refused::NotConfigured("KEYGATE_GITHUB_SCANNING_KEYS is not set".into()));
        };
        let unreadable = |e: std::io::Error| Refused::NotConfigured(format!("{}: {e}", path.display()));
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).map_err(unreadable)?;
        let mut read = self.read.lock();
        if let Some((at, keys)) = read.as_ref()
            && *at == modified
        {
            return Ok(keys.clone());
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        let keys = Arc::new(
            PublicKeys::from_json(&text)
                .map_err(|e| Refused::NotConfigured(format!("{}: {e}", path.display())))?,
        );
        *read = Some((modified, keys.clone()));
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer;
    use p256::pkcs8::{EncodePublicKey, LineEnding};

    fn key_json(id: &str, key: &SigningKey) -> String {
        let pem = key.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
        serde_json::json!({"public_keys": [{"key_identifier": id, "key": pem, "is_current": true}]})
            .to_string()
    }

    fn sign(key: &SigningKey, body: &[u8]) -> String {
        let sig: Signature = key.sign(body);
        base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
    }

    #[test]
    fn a_signature_verifies_only_over_its_body_under_its_key() {
        let key = SigningKey::from_slice(&[7; 32]).unwrap();
        let other = SigningKey::from_slice(&[9; 32]).unwrap();
        let keys = PublicKeys::from_json(&key_json("k1", &key)).unwrap();
        let body = br#"[{"token":"x","type":"keygate","url":"u","source":"content"}]"#;
        assert_eq!(keys.verify("k1", &sign(&key, body), body), Ok(()));
        assert_eq!(keys.verify("k1", &sign(&key, body), &body[..body.len() - 1]), Err(Refused::BadSignature));
        assert_eq!(keys.verify("k1", &sign(&other, body), body), Err(Refused::BadSignature));
        assert_eq!(keys.verify("k2", &sign(&key, body), body), Err(Refused::UnknownKey));
        assert!(matches!(keys.verify("k1", "***", body), Err(Refused::Malformed(_))));
        assert!(matches!(keys.verify("", &sign(&key, body), body), Err(Refused::Malformed(_))));
        assert_eq!(keys.verify("k1", "AAAA", body), Err(Refused::BadSignature));
    }

    #[test]
    fn the_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let (a, b) = (SigningKey::from_slice(&[1; 32]).unwrap(), SigningKey::from_slice(&[2; 32]).unwrap());
        std::fs::write(&path, key_json("a", &a)).unwrap();
        let file = KeyFile::new(Some(path.clone()));
        let body = b"[]";
        assert_eq!(file.keys().unwrap().verify("a", &sign(&a, body), body), Ok(()));
        // A replaced file (another modification time) is read again.
        let next = path.with_extension("next");
        std::fs::write(&next, key_json("b", &b)).unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options().write(true).open(&next).unwrap().set_modified(later).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(file.keys().unwrap().verify("a", &sign(&a, body), body), Err(Refused::UnknownKey));
        assert_eq!(file.keys().unwrap().verify("b", &sign(&b, body), body), Ok(()));
        assert!(matches!(KeyFile::new(None).keys(), Err(Refused::NotConfigured(_))));
        std::fs::write(&path, r#"{"public_keys": [{"key_identifier": "x", "key": "nope"}]}"#).unwrap();
        assert!(KeyFile::new(Some(path)).check().is_err());
    }
}
