//! The hashes old systems kept of their keys, parsed and checked: bcrypt (`$2a$`, `$2b$`,
//! `$2y$`), argon2 PHC strings (`$argon2id$`, also `$argon2i$`/`$argon2d$`), scrypt PHC
//! strings (`$scrypt$ln=..,r=..,p=..$salt$hash`) and Django's `pbkdf2_sha256$iterations$salt$hash`.
//! Each is bounded in cost when it is imported: a planted hash of bcrypt cost 31 would
//! take one check hours of CPU.

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use base64::Engine;

/// The costliest bcrypt cost accepted (14: about a second of one core).
pub const MAX_BCRYPT_COST: u32 = 14;
/// The most memory one argon2 or scrypt check may take, in KiB (128 MiB).
pub const MAX_MEMORY_KIB: u64 = 128 * 1024;
/// The most argon2 passes.
pub const MAX_ARGON2_PASSES: u32 = 16;
/// The most PBKDF2 iterations (Django 6 uses 1,200,000).
pub const MAX_PBKDF2_ITERATIONS: u32 = 5_000_000;

/// An old system's hash of a key, checked within its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyHash<'a> {
    Bcrypt(&'a str),
    Argon2(&'a str),
    Scrypt(&'a str),
    /// Django's `pbkdf2_sha256`: iterations, salt (used as its UTF-8 bytes), the base64 digest.
    DjangoPbkdf2 {
        iterations: u32,
        salt: &'a str,
        digest: [u8; 32],
    },
}

impl<'a> LegacyHash<'a> {
    /// `hash` in one of the formats, within the bounds; else why not.
    pub fn parse(hash: &'a str) -> Result<Self, String> {
        if let Some(rest) = hash.strip_prefix("pbkdf2_sha256$") {
            return django(rest);
        }
        if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) {
            let parts: bcrypt::HashParts =
                hash.parse().map_err(|_| "is not a well-formed bcrypt hash".to_string())?;
            if parts.get_cost() > MAX_BCRYPT_COST {
                return Err(format!("has bcrypt cost {}, above {MAX_BCRYPT_COST}", parts.get_cost()));
            }
            return Ok(Self::Bcrypt(hash));
        }
        let phc = PasswordHash::new(hash)
            .map_err(|_| "is not a bcrypt, argon2, scrypt or Django pbkdf2_sha256 hash".to_string())?;
        let param = |name: &str| phc.params.get_decimal(name).map(u64::from);
        match phc.algorithm.as_str() {
            "argon2id" | "argon2i" | "argon2d" => {
                let (m, t) = (param("m").unwrap_or(0), param("t").unwrap_or(0));
                if m > MAX_MEMORY_KIB || t > u64::from(MAX_ARGON2_PASSES) || phc.hash.is_none() {
                    return Err(format!(
                        "asks for m={m} KiB, t={t}: above {MAX_MEMORY_KIB} KiB or {MAX_ARGON2_PASSES} passes"
                    ));
                }
                Ok(Self::Argon2(hash))
            }
            "scrypt" => {
                let (ln, r, p) = (param("ln").unwrap_or(0), param("r").unwrap_or(0), param("p").unwrap_or(0));
                // Memory: 128 * r * 2^ln bytes; p runs in sequence.
                let kib = if ln < 40 { (128 * r).saturating_mul(1 << ln) / 1024 } else { u64::MAX };
                if kib > MAX_MEMORY_KIB || p > 16 || phc.hash.is_none() {
                    return Err(format!("asks for {kib} KiB and p={p}: above {MAX_MEMORY_KIB} KiB or 16"));
                }
                Ok(Self::Scrypt(hash))
            }
            other => Err(format!("is a {other} hash: bcrypt, argon2, scrypt or Django pbkdf2_sha256 only")),
        }
    }

    /// Whether `secret` is the key this is the hash of.
    pub fn verify(&self, secret: &str) -> bool {
        match self {
            Self::Bcrypt(h) => bcrypt::verify(secret, h).unwrap_or(false),
            Self::Argon2(h) => PasswordHash::new(h)
                .is_ok_and(|p| argon2::Argon2::default().verify_password(secret.as_bytes(), &p).is_ok()),
            Self::Scrypt(h) => PasswordHash::new(h)
                .is_ok_and(|p| scrypt::Scrypt.verify_password(secret.as_bytes(), &p).is_ok()),
            Self::DjangoPbkdf2 { iterations, salt, digest } => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<sha2::Sha256>(
                    secret.as_bytes(),
                    salt.as_bytes(),
                    *iterations,
                    &mut out,
                );
                // Constant time: every byte compared.
                out.iter().zip(digest).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
            }
        }
    }
}

/// `iterations$salt$base64(digest)` (Django's `PBKDF2PasswordHasher`).
fn django(rest: &str) -> Result<LegacyHash<'_>, String> {
    let bad = || "is not a well-formed pbkdf2_sha256 hash (pbkdf2_sha256$iterations$salt$hash)".to_string();
    let mut parts = rest.split('$');
    let (Some(n), Some(salt), Some(b64), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let iterations: u32 = n.parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
    if iterations > MAX_PBKDF2_ITERATIONS {
        return Err(format!("has {iterations} iterations, above {MAX_PBKDF2_ITERATIONS}"));
    }
    let digest = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| bad())?;
    let digest: [u8; 32] = digest.try_into().map_err(|_| bad())?;
    if salt.is_empty() {
        return Err(bad());
    }
    Ok(LegacyHash::DjangoPbkdf2 { iterations, salt, digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_checks_its_own_key_and_no_other() {
        let bcrypt = bcrypt::hash_with_salt("key_one", 4, [7u8; 16])
            .unwrap()
            .format_for_version(bcrypt::Version::TwoB);
        let mut out = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<sha2::Sha256>(b"key_one", b"salty", 1000, &mut out);
        let django =
            format!("pbkdf2_sha256$1000$salty${}", base64::engine::general_purpose::STANDARD.encode(out));
        for h in [bcrypt.as_str(), &django] {
            let parsed = LegacyHash::parse(h).unwrap();
            assert!(parsed.verify("key_one"), "{h}");
            assert!(!parsed.verify("key_two"), "{h}");
        }
    }

    #[test]
    fn costly_or_malformed_hashes_are_refused_with_a_reason() {
        let cheap = bcrypt::hash_with_salt("k", 4, [1u8; 16]).unwrap().to_string();
        let too_costly = cheap.replace("$04$", "$15$");
        for bad in [
            "",
            "md5$abc",
            "$2b$04$short",
            "pbkdf2_sha256$0$salt$AAAA",
            "pbkdf2_sha256$1000$$AAAA",
            "pbkdf2_sha256$99999999$salt$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "$argon2id$v=19$m=1048576,t=3,p=4$c2FsdHNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "$scrypt$ln=24,r=8,p=1$c2FsdHNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "$pbkdf2-sha256$i=1000$c2FsdA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ]
        .into_iter()
        .map(String::from)
        .chain([too_costly])
        {
            assert!(LegacyHash::parse(&bad).is_err(), "{bad}");
        }
    }
}
