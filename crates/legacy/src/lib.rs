//! Keys from other systems (API-v2.md §25): the slow hashes teams' old systems kept of
//! their keys (bcrypt, argon2, scrypt, Django's PBKDF2), checked when a key imported
//! under a legacy migration is first presented. [`Legacy`] is what `keygate-rbac` asks
//! ([`LegacyHashes`]): whether a hash may come in ([`hash`]: a known format, within
//! bounds of cost), and whether a secret matches one, within the [`gate`]'s bounds on
//! checks at once (a flood of wrong secrets for one lookup value runs one check at a
//! time and, after each failed one, none for a while; all of them together at most half
//! the machine's cores, a check finding them taken refused at once), each
//! on a thread of its own at the lowest scheduling priority ([`low_priority`]): the
//! verifications the process answers meanwhile run first.

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
        // No waiting for a place: the check runs inside a verification's load, and a load
        // waiting would hold one of the few that run at once (on SQLite, one per worker).
        let pass = self.gate.enter(lookup, std::time::Duration::ZERO)?;
        let start = std::time::Instant::now();
        let matched = low_priority(|| parsed.verify(secret));
        if !matched {
            pass.failed(start.elapsed());
        }
        Some(matched)
    }
}

/// `f` on a thread of its own at nice 19 (a thread's priority cannot be raised back
/// without privileges, hence a new one per check: microseconds, against a check's tens
/// or hundreds of milliseconds), the caller waiting without using the CPU. Where the
/// priority cannot be lowered, `f` runs at the usual one.
pub fn low_priority<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut job = Some(f);
    let done = std::thread::scope(|s| {
        let worker = std::thread::Builder::new().name("keygate-legacy".into()).spawn_scoped(s, || {
            #[cfg(target_os = "linux")]
            let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
            job.take().map(|f| f())
        });
        worker.ok().and_then(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    });
    match (done, job) {
        (Some(out), _) => out,
        // No thread could be started: here, then.
        (None, Some(f)) => f(),
        (None, None) => unreachable!("the job ran and answered"),
    }
}
