//! Secrets and signatures in the Standard Webhooks format (standardwebhooks.com): a secret
//! is `whsec_` + the base64 of random bytes; a signature is `v1,` + the base64 of
//! HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.<body>` keyed with the secret's
//! decoded bytes. Secrets at rest are sealed with the vault's keyring when there is one.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use keygate_vault::{Keyring, Sealed};
use rand::RngCore;
use sha2::Sha256;

/// The prefix of a secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// Random bytes in a new secret (the contract allows 24–64).
pub const SECRET_BYTES: usize = 32;
/// The prefix of a secret sealed at rest: `vault:<keyring key id>:<data>`.
const SEALED_PREFIX: &str = "vault:";

/// A new secret, `whsec_…`.
pub fn new_secret() -> String {
    let mut raw = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut raw);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(raw))
}

/// The signing key a secret stands for: its base64 part decoded.
fn key_bytes(secret: &str) -> Option<Vec<u8>> {
    STANDARD.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()
}

/// `v1,<signature>` of each secret, space-separated: the `webhook-signature` header.
pub fn signature_header(secrets: &[&str], msg_id: &str, timestamp: i64, body: &str) -> String {
    let mut out = String::new();
    for secret in secrets {
        let Some(key) = key_bytes(secret) else { continue };
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else { continue };
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body.as_bytes());
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("v1,");
        out.push_str(&STANDARD.encode(mac.finalize().into_bytes()));
    }
    out
}

/// A secret as stored: sealed with `keyring` (bound to the endpoint) when there is one.
pub fn seal(
    keyring: Option<&Keyring>,
    workspace_id: &str,
    endpoint_id: &str,
    secret: &str,
) -> Result<String, String> {
    let Some(ring) = keyring else { return Ok(secret.to_string()) };
    let sealed = ring.seal(workspace_id, endpoint_id, secret).map_err(|e| e.to_string())?;
    Ok(format!("{SEALED_PREFIX}{}:{}", sealed.key_id, sealed.data))
}

/// A stored secret opened.
pub fn open(
    keyring: Option<&Keyring>,
    workspace_id: &str,
    endpoint_id: &str,
    stored: &str,
) -> Result<String, String> {
    let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else { return Ok(stored.to_string()) };
    let ring = keyring.ok_or("the secret is sealed and no keyring is configured")?;
    let (key_id, data) = rest.split_once(':').ok_or("a sealed secret without its key id")?;
    let sealed = Sealed { key_id: key_id.to_string(), data: data.to_string() };
    let plain = ring.open(workspace_id, endpoint_id, &sealed).map_err(|e| e.to_string())?;
    Ok(plain.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_prefixed_base64_of_32_random_bytes() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert_eq!(key_bytes(&a).map(|k| k.len()), Some(SECRET_BYTES));
    }

    #[test]
    fn the_signature_matches_the_reference_libraries_vector() {
        // The test vector of the Standard Webhooks (Svix) reference libraries.
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let (id, ts, body) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, r#"{"test": 2432232314}"#);
        let got = signature_header(&[secret], id, ts, body);
        assert_eq!(got, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(signature_header(&[secret, secret], id, ts, body), format!("{got} {got}"));
    }

    #[test]
    fn sealed_secrets_open_only_with_their_endpoint() {
        let ring = Keyring::parse(&format!("k1:{}", Keyring::generate_key())).unwrap();
        let s = new_secret();
        let stored = seal(Some(&ring), "ws", "whep_1", &s).unwrap();
        assert!(stored.starts_with("vault:k1:") && !stored.contains(&s));
        assert_eq!(open(Some(&ring), "ws", "whep_1", &stored).unwrap(), s);
        assert!(open(Some(&ring), "ws", "whep_2", &stored).is_err());
        assert!(open(None, "ws", "whep_1", &stored).is_err());
        assert_eq!(open(None, "ws", "whep_1", &s).unwrap(), s);
    }
}
