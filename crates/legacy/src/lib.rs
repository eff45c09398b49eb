//! Keys from other systems (API-v2.md §25): the slow hashes teams' old systems kept of
//! their keys (bcrypt, argon2, scrypt, Django's PBKDF2), checked when a key imported
//! under a legacy migration is first presented. [`Legacy`] is what `keygate-rbac` asks
//! ([`LegacyHashes`]): whether a hash may come in ([`hash`]: a known format, within
//! bounds of cost), and whether a secret matches one, within the [`gate`]'s bounds on
//! checks at once (a flood of wrong secrets for one lookup value runs one check at a
//! time, and all of them together at most half the machine's cores, taken in turn).

pub mod gate;
pub mod hash;

pub use gate::Gate;
pub use hash::LegacyHash;
use keygate_rbac::LegacyHashes;

/// Old hashes checked within a [`Gate`].
#[derive(Debug)]
pub struct Legacy {
    gate: Gate,
}

impl Legacy {
    pub fn new(gate: Gate) -> Self {
        Self { gate }
    }
}

impl Default for Legacy {
    /// Checks bounded to half the machine's cores.
    fn default() -> Self {
        Self::new(Gate::for_this_machine())
    }
}

impl LegacyHashes for Legacy {
    fn refuse(&self, hash: &str) -> Option<String> {
        LegacyHash::parse(hash).err()
    }

    fn check(&self, lookup: &str, hash: &str, secret: &str) -> Option<bool> {
        let Ok(parsed) = LegacyHash::parse(hash) else { return Some(false) };
        let _pass = self.gate.enter(lookup, gate::MAX_WAIT)?;
        Some(parsed.verify(secret))
    }
}
