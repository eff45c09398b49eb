//! The in-process store's budgets on disk (API-v2.md §26: "in the embedded mode the budgets
//! survive `kill -9` and a restart"): a journal per shard in a directory beside the
//! database (`<db>-ratelimits/`), to which every change of a budget's state is appended
//! under the shard's lock, before the decision is answered.
//!
//! As the credit journal does, a journal's file is mapped into the process's memory and a
//! record is copied into the mapping: no system call, no wait beyond the shard's lock. The
//! mapping is the kernel's page cache of the file, so once the copy is done a `kill -9` of
//! the process loses nothing (power loss may: nothing is synced, docs/operations.md). A file
//! is written full of zeros before it is mapped, so a copy never needs a block the disk may
//! not have.
//!
//! A journal is two files, used in turn. When a record does not fit in the one in use, the
//! shard's live budgets (windows not ended, buckets not full) are written into the other,
//! under a generation one higher, and it becomes the one in use: no file is created,
//! renamed or deleted on the way (a first version that wrote a new file and renamed it
//! over the old one measured ~0.8 us per decision, the file system's work amortised; a
//! copy into a mapped file costs nanoseconds). A file's header names its generation; its
//! records carry the generation in their checksum, so the records a file held under an
//! older generation end the ones read, as a record cut short by a crash does. The header is
//! written after the records it covers: a crash before it leaves the other file, which says
//! the same. A file is sized for twice its live budgets' records (at least
//! [`MIN_CAPACITY`]), grown or shrunk as it is taken into use.
//!
//! Each process that opens the directory writes its journals under an epoch of its own
//! (`e<epoch>-s<shard>-<a|b>.log`): it replays every file first (epochs in order; within an
//! epoch, each shard's file of the higher generation), writes its shards' budgets into its
//! new epoch's files (the shards are chosen by a hash seeded anew by each process), and
//! only then deletes the older epochs' files, so a crash at any point of a start loses
//! nothing.
//!
//! One process owns the directory at a time (an exclusive lock on `lock`); another process
//! on the same database decides in memory alone (and logs it).
//!
//! A file: a header of 16 bytes (`KGRL`, `generation: u64`, the check of those 12 bytes),
//! then records: `len: u32, check (of the generation and the record, see `check`): u32`, then
//! `len` bytes: `duration: u64, start: u64, used: u64, algorithm: u8, parity: u8,
//! namespace_len: u16, identifier_len: u32`, the namespace id's bytes, the identifier's.

use super::Algorithm;
use crate::WindowState;
use memmap2::MmapMut;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The smallest journal file (a shard with few budgets).
pub(super) const MIN_CAPACITY: usize = 32 << 10;
const MAGIC: &[u8; 4] = b"KGRL";
/// The file's header.
pub(super) const HEADER: usize = 16;
const HEAD: usize = 8;
const FIXED: usize = 8 + 8 + 8 + 1 + 1 + 2 + 4;

/// A budget's state as a record holds it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record<'a> {
    pub namespace_id: &'a str,
    pub duration: u64,
    pub algorithm: Algorithm,
    pub parity: u8,
    pub identifier: &'a [u8],
    pub state: WindowState,
}

/// One of a journal's two files, mapped.
#[derive(Debug)]
struct Half {
    file: File,
    map: MmapMut,
}

impl Half {
    /// `path`, created empty, written full of zeros for `capacity` bytes, mapped.
    fn create(path: &Path, capacity: usize) -> std::io::Result<Self> {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        keygate_domain::reserve::zeros(&file, 0, capacity)?;
        let map = map(&file)?;
        Ok(Self { file, map })
    }

    /// Sizes the file for `capacity` bytes (what it held past that is dropped; zeros
    /// written up to a larger size), mapped again.
    fn resize(&mut self, capacity: usize) -> std::io::Result<()> {
        let old = self.map.len();
        if capacity < old {
            // Unmapped before the file is cut shorter (a mapping past a file's end faults).
            self.map = MmapMut::map_anon(1)?;
            self.file.set_len(capacity as u64)?;
        } else {
            keygate_domain::reserve::zeros(&self.file, old, capacity)?;
        }
        self.map = map(&self.file)?;
        Ok(())
    }
}

/// One shard's journal: its two files and the one in use.
#[derive(Debug)]
pub(super) struct ShardJournal {
    halves: [Half; 2],
    /// The file in use (`halves[active]`), its generation and where its records end.
    active: usize,
    generation: u64,
    len: usize,
}

impl ShardJournal {
    /// The journal of shard `shard` in `dir` under `epoch`: two new files, neither holding
    /// a record yet (call [`Self::rewrite`] with the shard's budgets).
    pub(super) fn create(dir: &Path, epoch: u64, shard: usize) -> std::io::Result<Self> {
        let half = |h: char| Half::create(&dir.join(file_name(epoch, shard, h)), MIN_CAPACITY);
        Ok(Self { halves: [half('a')?, half('b')?], active: 1, generation: 0, len: HEADER })
    }

    /// Appends `record`: in the kernel's hands once this returns. `false` if it does not
    /// fit (nothing written): the shard then rewrites its journal.
    #[inline]
    pub(super) fn push(&mut self, record: &Record<'_>) -> bool {
        let map = &mut self.halves[self.active].map;
        let pushed = push(map, &mut self.len, self.generation, record);
        // The next record's lines brought into the cache now: its stores then hit, and the
        // shard lock's release (an atomic instruction, which waits for earlier stores)
        // does not wait for their misses (most of a journaled decision's cost without it).
        keygate_domain::prefetch::lines(map.as_ptr().wrapping_add(self.len), 128);
        pushed
    }

    /// Writes `records` (`bytes` long, [`record_len`] each) into the file not in use, under
    /// the next generation, and takes it into use.
    pub(super) fn rewrite<'a>(
        &mut self,
        records: impl Iterator<Item = Record<'a>>,
        bytes: usize,
    ) -> std::io::Result<()> {
        let next = 1 - self.active;
        let capacity = MIN_CAPACITY.max(((HEADER + bytes) * 2).next_power_of_two());
        let half = &mut self.halves[next];
        if half.map.len() < capacity || half.map.len() > 4 * capacity {
            half.resize(capacity)?;
        }
        let generation = self.generation + 1;
        let mut len = HEADER;
        for r in records {
            if !push(&mut half.map, &mut len, generation, &r) {
                return Err(std::io::Error::other("the live budgets outgrew their count"));
            }
        }
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(MAGIC);
        header[4..12].copy_from_slice(&generation.to_le_bytes());
        let check = words(0, &header[..12]) as u32;
        header[12..].copy_from_slice(&check.to_le_bytes());
        half.map[..HEADER].copy_from_slice(&header);
        (self.active, self.generation, self.len) = (next, generation, len);
        Ok(())
    }

    /// The bytes of records the file in use holds.
    pub(super) fn len(&self) -> usize {
        self.len - HEADER
    }
}

/// Encodes `record` at `map[*len..]` under `generation` if it fits.
#[inline]
fn push(map: &mut [u8], len: &mut usize, generation: u64, r: &Record<'_>) -> bool {
    let ns = &r.namespace_id.as_bytes()[..r.namespace_id.len().min(u16::MAX as usize)];
    let body_len = FIXED + ns.len() + r.identifier.len();
    let Some(out) = map.get_mut(*len..*len + HEAD + body_len) else { return false };
    let (head, body) = out.split_at_mut(HEAD);
    body[0..8].copy_from_slice(&r.duration.to_le_bytes());
    body[8..16].copy_from_slice(&r.state.start.to_le_bytes());
    body[16..24].copy_from_slice(&r.state.used.to_le_bytes());
    body[24] = r.algorithm as u8;
    body[25] = r.parity;
    body[26..28].copy_from_slice(&(ns.len() as u16).to_le_bytes());
    body[28..32].copy_from_slice(&(r.identifier.len() as u32).to_le_bytes());
    body[FIXED..FIXED + ns.len()].copy_from_slice(ns);
    body[FIXED + ns.len()..].copy_from_slice(r.identifier);
    head[0..4].copy_from_slice(&(body_len as u32).to_le_bytes());
    head[4..8].copy_from_slice(&check(generation, r, ns).to_le_bytes());
    *len += HEAD + body_len;
    true
}

/// A record's check: its fields and bytes mixed a word at a time (multiply, shift, xor)
/// with the generation, folded to 32 bits, computed from the record's values, not read
/// back from the mapping (words read over the narrow stores just made there stall on
/// store forwarding). Not CRC-32: for records of ~80 bytes crc32fast's setup cost more
/// than the rest of a journaled decision together. What a check must catch here is a
/// record cut short (the rest zeros, or an older generation's bytes), which any change to
/// a field turns into another value with probability 1 − 2^-32. Its value is fixed (no
/// seed): files outlive the process.
fn check(generation: u64, r: &Record<'_>, ns: &[u8]) -> u32 {
    let sizes = r.algorithm as u64
        | u64::from(r.parity) << 8
        | (ns.len() as u64) << 16
        | (r.identifier.len() as u64) << 32;
    let mut h = mix(generation, r.duration);
    h = mix(h, r.state.start);
    h = mix(h, r.state.used);
    h = mix(h, sizes);
    h = words(words(h, ns), r.identifier);
    (h ^ (h >> 32)) as u32
}

#[inline(always)]
fn mix(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 29)
}

/// `bytes` mixed into `h` a word at a time, then their last 8 bytes (fewer, zero-extended,
/// for a shorter slice) with the length on top. The last word is loaded from the slice,
/// not copied into a padded buffer first (a wide load over the copy's narrow stores stalls).
#[inline(always)]
fn words(mut h: u64, bytes: &[u8]) -> u64 {
    let word = |w: &[u8]| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
    let mut chunks = bytes.chunks_exact(8);
    for w in &mut chunks {
        h = mix(h, word(w));
    }
    let last = match bytes.len() {
        n if n >= 8 => word(&bytes[n - 8..]),
        _ => bytes.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b)),
    };
    mix(h, last ^ ((bytes.len() as u64) << 48))
}

/// The bytes `record` takes in a file.
pub(super) fn record_len(namespace_id: &str, identifier: &[u8]) -> usize {
    HEAD + FIXED + namespace_id.len().min(u16::MAX as usize) + identifier.len()
}

/// A file's generation, if its header is whole.
pub(super) fn generation(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..HEADER)?;
    let check = u32::from_le_bytes(header[12..16].try_into().ok()?);
    (&header[..4] == MAGIC && words(0, &header[..12]) as u32 == check)
        .then(|| u64::from_le_bytes(header[4..12].try_into().unwrap_or_default()))
}

/// The records of a file's `bytes` (of its generation), up to the first that is not whole.
pub(super) fn decode(bytes: &[u8], mut each: impl FnMut(Record<'_>)) {
    let Some(generation) = generation(bytes) else { return };
    let mut at = HEADER;
    while let Some(head) = bytes.get(at..at + HEAD) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let Some(body) = bytes.get(at + HEAD..at + HEAD + len) else { return };
        let Some(record) = record(body) else { return };
        if check(generation, &record, record.namespace_id.as_bytes()) != stored {
            return;
        }
        each(record);
        at += HEAD + len;
    }
}

fn record(body: &[u8]) -> Option<Record<'_>> {
    if body.len() < FIXED {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap_or([0; 8]));
    let ns_len = u16::from_le_bytes([body[26], body[27]]) as usize;
    let id_len = u32::from_le_bytes(body[28..32].try_into().ok()?) as usize;
    let ns = body.get(FIXED..FIXED + ns_len)?;
    let identifier = body.get(FIXED + ns_len..FIXED + ns_len + id_len)?;
    Some(Record {
        namespace_id: std::str::from_utf8(ns).ok()?,
        duration: u64_at(0),
        algorithm: *Algorithm::ALL.get(body[24] as usize)?,
        parity: body[25] & 1,
        identifier,
        state: WindowState { start: u64_at(8), used: u64_at(16) },
    })
}

/// A journal file's name.
fn file_name(epoch: u64, shard: usize, half: char) -> String {
    format!("e{epoch:08}-s{shard:05}-{half}.log")
}

/// A journal file of `dir`: its path, epoch and shard.
pub(super) struct Found {
    pub path: PathBuf,
    pub epoch: u64,
    pub shard: usize,
}

/// The directory's journal files.
pub(super) fn files(dir: &Path) -> std::io::Result<Vec<Found>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let parsed = name.strip_prefix('e').and_then(|n| n.strip_suffix(".log")).and_then(|n| {
            let mut parts = n.split('-');
            let epoch = parts.next()?.parse().ok()?;
            let shard = parts.next()?.strip_prefix('s')?.parse().ok()?;
            matches!(parts.next()?, "a" | "b").then_some((epoch, shard))
        });
        if let Some((epoch, shard)) = parsed {
            out.push(Found { path, epoch, shard });
        }
    }
    out.sort_by(|a, b| (a.epoch, a.shard, &a.path).cmp(&(b.epoch, b.shard, &b.path)));
    Ok(out)
}

/// Takes the exclusive lock of `dir` (created if missing): `None` when another process
/// holds it. The lock is held as long as the file returned is open.
pub(super) fn lock(dir: &Path) -> std::io::Result<Option<File>> {
    std::fs::create_dir_all(dir)?;
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("lock"))?;
    match lock.try_lock() {
        Ok(()) => Ok(Some(lock)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Maps `file` into memory, writable and shared with the kernel's page cache.
#[allow(unsafe_code)]
fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: `MmapMut::map_mut` is unsafe because the memory it gives is undefined if the
    // file is cut shorter (a read or write beyond its end faults) or written by others while
    // mapped. A journal file is created (truncated) by `Half::create` and mapped by this
    // process alone, under the exclusive lock of the directory (`lock`, held by the store
    // for as long as it lives); no keygate process opens the files without that lock, and
    // this one cuts a file shorter only after dropping its mapping (`Half::resize`). An
    // operator who truncates a file under a running server makes it fault;
    // docs/operations.md says to leave `<db>-ratelimits` alone while a server runs.
    unsafe { MmapMut::map_mut(file) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(identifier: &[u8], used: u64) -> Record<'_> {
        Record {
            namespace_id: "ns_1",
            duration: 60_000,
            algorithm: Algorithm::Sliding,
            parity: 1,
            identifier,
            state: WindowState { start: 120_000, used },
        }
    }

    fn read(path: &Path) -> Vec<(Vec<u8>, u64)> {
        let mut got = Vec::new();
        decode(&std::fs::read(path).expect("read"), |r| got.push((r.identifier.to_vec(), r.state.used)));
        got
    }

    #[test]
    fn records_read_back_until_the_first_torn_one_or_an_older_generations() {
        let dir = tempfile::tempdir().expect("dir");
        let mut j = ShardJournal::create(dir.path(), 3, 7).expect("create");
        let long = [b'x'; 300];
        j.rewrite([rec(b"a", 1), rec(&long, 2)].into_iter(), 0).expect("first rewrite");
        assert!(j.push(&rec(b"a", 5)));
        let a = dir.path().join("e00000003-s00007-a.log");
        assert_eq!(read(&a), [(b"a".to_vec(), 1), (long.to_vec(), 2), (b"a".to_vec(), 5)]);
        // A torn last record: the ones before it only.
        let mut bytes = std::fs::read(&a).expect("read");
        bytes[HEADER + j.len() - 3] ^= 0xff;
        let mut n = 0;
        decode(&bytes, |_| n += 1);
        assert_eq!(n, 2);
        // Two rewrites later the first file is in use again under generation 3: what it
        // held under generation 1 past the new records is not read.
        j.rewrite([rec(b"b", 9)].into_iter(), 0).expect("second");
        j.rewrite([rec(b"c", 8)].into_iter(), 0).expect("third");
        assert_eq!(generation(&std::fs::read(&a).expect("read")), Some(3));
        assert_eq!(read(&a), [(b"c".to_vec(), 8)]);
        assert_eq!(read(&dir.path().join("e00000003-s00007-b.log")), [(b"b".to_vec(), 9)]);
        let found = files(dir.path()).expect("files");
        assert_eq!(found.iter().map(|f| (f.epoch, f.shard)).collect::<Vec<_>>(), [(3, 7), (3, 7)]);
    }

    #[test]
    fn a_full_file_refuses_a_record_and_a_rewrite_sizes_the_next_for_what_it_holds() {
        let dir = tempfile::tempdir().expect("dir");
        let mut j = ShardJournal::create(dir.path(), 1, 0).expect("create");
        j.rewrite(std::iter::empty(), 0).expect("rewrite");
        let id = [b'y'; 1000];
        let fits = (MIN_CAPACITY - HEADER) / record_len("ns_1", &id);
        for _ in 0..fits {
            assert!(j.push(&rec(&id, 1)));
        }
        assert!(!j.push(&rec(&id, 1)), "full");
        assert_eq!(j.len(), fits * record_len("ns_1", &id));
        let live: Vec<Record<'_>> = (0..fits).map(|_| rec(&id, 2)).collect();
        j.rewrite(live.into_iter(), fits * record_len("ns_1", &id)).expect("rewrite");
        let b = std::fs::metadata(dir.path().join("e00000001-s00000-b.log")).expect("b").len();
        assert_eq!(b as usize, 2 * MIN_CAPACITY, "twice what it holds");
        assert!(j.push(&rec(&id, 3)), "room again");
    }
}
