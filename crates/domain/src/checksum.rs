//! Checksummed keys (API-v2.md §24), GitHub's token shape: `<prefix>_<30 random base-62
//! characters><6 base-62 characters: the CRC32 (IEEE) of the UTF-8 of everything before
//! them, digits 0-9A-Za-z, left-padded with 0>`. A scanner recognizes a real key offline
//! (`keygate keys check`); a string of the shape whose checksum does not match is no key.
//!
//! What a scanner (gitleaks, trufflehog) would match, then check the checksum of:
//! `\b[A-Za-z0-9_]{1,16}_[0-9A-Za-z]{36}\b` (the prefix: 1 to 16 of `A-Z a-z 0-9 _`).

use crate::ids::{ALPHABET, random_base58_token, random_string};

/// The random characters after `<prefix>_`.
pub const RANDOM_CHARS: usize = 30;
/// The checksum's characters, last.
pub const CHECKSUM_CHARS: usize = 6;

/// How an API's keys are made (API-v2.md §24), set when it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// `keys.createKey`'s forms (v1: `kg_` and 43 base-62 characters; v2: base58 of `byteLength` bytes).
    #[default]
    Plain,
    /// GitHub's token shape with a CRC32 checksum ([`checksum_token`]).
    Checksum,
}

impl KeyFormat {
    /// As stored and shown: `plain`, `checksum`.
    pub const fn as_str(self) -> &'static str {
        match self {
            KeyFormat::Plain => "plain",
            KeyFormat::Checksum => "checksum",
        }
    }

    /// From [`Self::as_str`]'s form (anything else: plain, as rows written before formats were).
    pub fn from_stored(s: &str) -> Self {
        if s == "checksum" { KeyFormat::Checksum } else { KeyFormat::Plain }
    }
}

/// What a string is, as a checksummed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checksum {
    /// Not of the shape: any other kind of key (or none).
    NotOfTheShape,
    /// Of the shape, and its checksum matches.
    Valid,
    /// Of the shape, and its checksum does not match: no key of keygate's.
    Invalid,
}

/// A new checksummed key with `prefix` (1 to 16 of `A-Z a-z 0-9 _`, checked by the caller).
pub fn checksum_token(prefix: &str) -> String {
    let mut out = random_string(prefix, RANDOM_CHARS);
    let sum = checksum_of(&out);
    out.push_str(std::str::from_utf8(&sum).unwrap_or("000000"));
    out
}

/// A plain v2 key: [`random_base58_token`], but never a string that [`check`] would find
/// [`Checksum::Invalid`] and a verification refuse unread (36 characters after the prefix,
/// the last six not their checksum; with 26 or 27 bytes most draws are): such a draw is
/// drawn again.
pub fn plain_token(prefix: Option<&str>, bytes: usize) -> String {
    loop {
        let token = random_base58_token(prefix, bytes);
        if check(&token) != Checksum::Invalid {
            return token;
        }
    }
}

/// Whether `token` is a checksummed key, and a valid one. No allocation: cheap enough to
/// run on every presented key before any lookup.
pub fn check(token: &str) -> Checksum {
    let Some((prefix, body)) = token.rsplit_once('_') else { return Checksum::NotOfTheShape };
    let prefix_ok =
        (1..=16).contains(&prefix.len()) && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !prefix_ok
        || body.len() != RANDOM_CHARS + CHECKSUM_CHARS
        || !body.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Checksum::NotOfTheShape;
    }
    let (signed, sum) = token.split_at(token.len() - CHECKSUM_CHARS);
    match checksum_of(signed).as_slice() == sum.as_bytes() {
        true => Checksum::Valid,
        false => Checksum::Invalid,
    }
}

/// The CRC32 of `text` in base 62, six digits, left-padded with `0`.
fn checksum_of(text: &str) -> [u8; CHECKSUM_CHARS] {
    let mut n = crc32fast::hash(text.as_bytes());
    let mut out = [ALPHABET[0]; CHECKSUM_CHARS];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(n % 62) as usize];
        n /= 62;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_keys_check_and_every_one_character_change_does_not() {
        for prefix in ["kg", "sk_live", "A1"] {
            let token = checksum_token(prefix);
            assert_eq!(token.len(), prefix.len() + 1 + 36, "{token}");
            assert_eq!(check(&token), Checksum::Valid, "{token}");
            let start = prefix.len() + 1;
            for i in start..token.len() {
                for c in ALPHABET.iter().copied().filter(|c| *c != token.as_bytes()[i]) {
                    let mut changed = token.clone().into_bytes();
                    changed[i] = c;
                    let changed = String::from_utf8(changed).unwrap();
                    assert_eq!(check(&changed), Checksum::Invalid, "{changed}");
                }
            }
        }
    }

    #[test]
    fn the_checksum_is_crc32_in_base62_left_padded() {
        // CRC32("kg_" + 30 zeros) computed independently of the encoder above.
        let signed = format!("kg_{}", "0".repeat(30));
        let mut n = crc32fast::hash(signed.as_bytes()) as u64;
        let mut digits = Vec::new();
        while n > 0 {
            digits.push(ALPHABET[(n % 62) as usize]);
            n /= 62;
        }
        digits.reverse();
        let padded = format!("{:0>6}", String::from_utf8(digits).unwrap());
        assert_eq!(check(&format!("{signed}{padded}")), Checksum::Valid);
    }

    #[test]
    fn other_shapes_are_not_checksummed_keys() {
        for s in [
            "",
            "kg",
            "kg_",
            "_abc",
            "kg_short",
            &format!("kg_{}", "a".repeat(37)),
            &format!("kg_{}-", "a".repeat(35)),
            &format!("{}_{}", "p".repeat(17), "a".repeat(36)),
            &format!("kg{}", "a".repeat(36)),
        ] {
            assert_eq!(check(s), Checksum::NotOfTheShape, "{s}");
        }
        assert_eq!(check(&format!("kg_{}", "a".repeat(36))), Checksum::Invalid);
    }
}
