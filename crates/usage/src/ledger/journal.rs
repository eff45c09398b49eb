//! The memory ledger's credit journal (API-v2.md §13.5, the embedded mode): a file beside
//! the SQLite database (`<db>-credits`) that a paid spend is appended to before it is
//! answered. The file is mapped into the process's memory and a spend's record is copied
//! into the mapping: no system call, no wait for other spends. The mapping is the kernel's
//! page cache of the file, so once the copy is done the kernel holds the record: a
//! `kill -9` of the process loses no answered spend (power loss is another matter:
//! nothing is synced, see docs/operations.md). The counters are folded into the keys' rows
//! behind (every [`FOLD_EVERY`]), and the journal is replayed onto the rows when the next
//! process opens the database.
//!
//! The file is written full of zeros before it is mapped ([`CAPACITY`], twice as large
//! when full): a record copied into the mapping never needs a block the disk may not have
//! (a full disk fails a `write`, not a copy). The records end at the first that is not
//! whole (zeros, or a copy cut short by the process's end).
//!
//! One process owns the journal at a time (an exclusive lock on `<db>-credits.lock`); only
//! the owner maps the file, and a file is cut shorter only by a new owner (the last one's
//! mapping gone with it) or by its owner as it drops the mapping.
//! Another process that spends credits on the same database asks the owner to step aside
//! ([`ask_owner_to_yield`]): the owner folds what it holds and spends on the rows from then
//! on (each spend committed before its answer, conditional on the row's value), as the
//! other does, so spends stay exact across processes. Every process that spent holds a
//! shared lock on `<db>-credits.users`, which tells an owner starting later that it is not
//! alone.
//!
//! A record: `len: u32, crc32: u32`, then `len` bytes: `kind: u8`, `seq: u64`, then for a
//! spend the counter before and after (`remaining: u64, last_refill_at: i64`, `i64::MIN`
//! for none) and for a reset nothing more, then `key_len: u16` and the key id. A reset
//! says that the key's row was written otherwise (an update of its credits, or a spend of
//! another process folded into it): its records up to `seq` are void.

use memmap2::MmapMut;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the counters of answered spends are folded into the keys' rows.
pub(crate) const FOLD_EVERY: Duration = Duration::from_millis(200);
/// A journal longer than this is cut to what is not folded yet, after a fold.
pub(crate) const COMPACT_AT: u64 = 2 << 20;
/// The size of a journal's file as it is taken or cut (at least twice what it holds).
const CAPACITY: usize = 4 << 20;
/// How long a process waits for the owner to step aside before it spends on the rows.
const YIELD_WAIT: Duration = Duration::from_secs(2);

const SPEND: u8 = 1;
const RESET: u8 = 2;
/// The flags in the lock file: another process asked (offset 0), the owner stepped aside (4).
const ASKED: u64 = 0;
const YIELDED: u64 = 4;

/// A credit counter as a record holds it: remaining, last refill.
pub(crate) type Value = (u64, Option<i64>);

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Spend { seq: u64, key_id: String, before: Value, after: Value },
    Reset { seq: u64, key_id: String },
}

/// The journal, as its owner holds it.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: File,
    /// The file, mapped: the records up to `len`, zeros after.
    map: MmapMut,
    /// Holds the owner's exclusive lock; the flags.
    lock: File,
    /// The shared lock of the processes that spend on this database.
    _users: File,
    len: usize,
    /// The record being written.
    buf: Vec<u8>,
    /// Another process was here when this one took the journal: spend on the rows.
    pub(crate) shared: bool,
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn open_rw(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
}

impl Journal {
    /// Takes `path`'s journal as its owner, with the records it holds (to replay): `None`
    /// when another process owns it.
    pub(crate) fn own(path: &Path) -> std::io::Result<Option<(Journal, Vec<Record>)>> {
        let lock = open_rw(&sibling(path, ".lock"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        let users = open_rw(&sibling(path, ".users"))?;
        // Alone: nobody holds the shared lock. A process that comes after this test asks
        // through the flags, which are cleared before it.
        let shared = match users.try_lock() {
            Ok(()) => {
                lock.write_all_at(&[0; 8], 0)?;
                users.unlock()?;
                false
            }
            Err(std::fs::TryLockError::WouldBlock) => true,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        };
        users.lock_shared()?;
        if shared {
            lock.write_all_at(&1u32.to_le_bytes(), YIELDED)?;
        }
        let mut file = open_rw(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (records, valid) = decode(&bytes);
        drop(bytes);
        // A torn tail (a copy cut short by a crash) is cut off: the last owner's mapping
        // went with it.
        file.set_len(valid as u64)?;
        let map = reserve_and_map(&file, valid, capacity_for(valid))?;
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            map,
            lock,
            _users: users,
            len: valid,
            buf: Vec::with_capacity(128),
            shared,
        };
        Ok(Some((journal, records)))
    }

    /// Appends a spend of `key_id`'s counter (`before` -> `after`): in the kernel's hands
    /// once this returns. On an error nothing is appended.
    pub(crate) fn push_spend(
        &mut self,
        seq: u64,
        key_id: &str,
        before: Value,
        after: Value,
    ) -> std::io::Result<()> {
        self.begin(SPEND, seq);
        for (n, at) in [before, after] {
            self.buf.extend_from_slice(&n.to_le_bytes());
            self.buf.extend_from_slice(&at.unwrap_or(i64::MIN).to_le_bytes());
        }
        self.end(key_id)
    }

    /// Appends a reset of `key_id`'s records up to `seq`.
    pub(crate) fn push_reset(&mut self, seq: u64, key_id: &str) -> std::io::Result<()> {
        self.begin(RESET, seq);
        self.end(key_id)
    }

    fn begin(&mut self, kind: u8, seq: u64) {
        self.buf.clear();
        self.buf.extend_from_slice(&[0; 8]);
        self.buf.push(kind);
        self.buf.extend_from_slice(&seq.to_le_bytes());
    }

    /// Ends the record in `buf` and copies it into the mapping (grown first if need be).
    fn end(&mut self, key_id: &str) -> std::io::Result<()> {
        let key = &key_id.as_bytes()[..key_id.len().min(u16::MAX as usize)];
        self.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(key);
        let body = &self.buf[8..];
        let (len, crc) = (body.len() as u32, crc32fast::hash(body));
        self.buf[..4].copy_from_slice(&len.to_le_bytes());
        self.buf[4..8].copy_from_slice(&crc.to_le_bytes());
        let end = self.len + self.buf.len();
        if end > self.map.len() {
            // Twice as large: the zeros after the mapping's end written, then mapped again.
            let capacity = capacity_for(end).max(self.map.len() * 2);
            self.map = reserve_and_map(&self.file, self.map.len(), capacity)?;
        }
        self.map[self.len..end].copy_from_slice(&self.buf);
        self.len = end;
        prefetch(&self.map, end);
        Ok(())
    }

    /// The journal's length: where the next record goes.
    pub(crate) fn len(&self) -> u64 {
        self.len as u64
    }

    /// Keeps only what was written from `from` on (what is not folded yet), in a new file
    /// that replaces the journal ([`Self::spare`] then [`Self::compact_into`] in one go).
    pub(crate) fn compact(&mut self, from: u64) -> std::io::Result<()> {
        let rest = self.len.saturating_sub(from as usize);
        let spare = Self::spare(&self.path, rest)?;
        self.compact_into(from, spare).map(drop)
    }

    /// A file to compact `path`'s journal into, for about `rest` bytes of records: written
    /// full of zeros and mapped, its pages touched, so that [`Self::compact_into`] (under
    /// the journal's lock, which every spend takes) only copies and renames. Made by the
    /// owner (its fold) alone.
    pub(crate) fn spare(path: &Path, rest: usize) -> std::io::Result<Spare> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(sibling(path, ".next"))?;
        let mut map = reserve_and_map(&file, 0, capacity_for(rest))?;
        for at in (0..map.len()).step_by(4096) {
            map[at] = 0;
        }
        Ok(Spare { file, map })
    }

    /// Keeps only what was written from `from` on (what is not folded yet): copied into
    /// `spare` (grown first if the records since outgrew it), which then replaces the
    /// journal. The journal's file and mapping before are returned, to be dropped after the
    /// journal's lock (unmapping and freeing them takes a while).
    pub(crate) fn compact_into(&mut self, from: u64, spare: Spare) -> std::io::Result<Spare> {
        let rest = self.map.get(from as usize..self.len).unwrap_or_default();
        let Spare { file, mut map } = spare;
        if rest.len() > map.len() {
            map = reserve_and_map(&file, map.len(), capacity_for(rest.len()))?;
        }
        map[..rest.len()].copy_from_slice(rest);
        let len = rest.len();
        std::fs::rename(sibling(&self.path, ".next"), &self.path)?;
        self.len = len;
        Ok(Spare {
            file: std::mem::replace(&mut self.file, file),
            map: std::mem::replace(&mut self.map, map),
        })
    }

    /// The journal's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether another process asked this one to step aside.
    pub(crate) fn asked(&self) -> bool {
        let mut flag = [0; 4];
        self.lock.read_exact_at(&mut flag, ASKED).is_ok() && flag != [0; 4]
    }

    /// Tells the process that asked that this one spends on the rows now.
    pub(crate) fn stepped_aside(&self) -> std::io::Result<()> {
        self.lock.write_all_at(&1u32.to_le_bytes(), YIELDED)
    }
}

/// A file and its mapping: one made ready to take the journal's place
/// ([`Journal::spare`]), or the one it replaced.
#[derive(Debug)]
pub(crate) struct Spare {
    file: File,
    map: MmapMut,
}

/// An empty journal is left empty: its file cut to nothing as the mapping goes (which
/// nothing reads any more).
impl Drop for Journal {
    fn drop(&mut self) {
        if self.len == 0 {
            let _ = self.file.set_len(0);
        }
    }
}

/// The size of a journal's file that holds `len` bytes of records.
fn capacity_for(len: usize) -> usize {
    CAPACITY.max((len * 2).next_power_of_two())
}

/// Writes zeros into `file` from `from` up to `to` (its blocks taken now, as a `write`
/// that can fail, not as a copy into the mapping), and maps it.
fn reserve_and_map(file: &File, from: usize, to: usize) -> std::io::Result<MmapMut> {
    keygate_domain::reserve::zeros(file, from, to)?;
    map(file)
}

/// Asks the CPU to bring into its cache the lines of `map` that the next record, written
/// from `at`, will fill (a record is under 128 bytes for key ids under 77): the copy of
/// that record then finds them there. Without it each record's first store to a line
/// missed, and the next atomic instruction (the pending list's lock) waited for it: a
/// third of a spend's journaling in a profile.
fn prefetch(map: &[u8], at: usize) {
    keygate_domain::prefetch::lines(map.as_ptr().wrapping_add(at), 128);
}

/// Maps `file` into memory, writable and shared with the kernel's page cache.
#[allow(unsafe_code)]
fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: `MmapMut::map_mut` is unsafe because the memory it gives is undefined if
    // the file is cut shorter (a read or write beyond its end faults) or written by others
    // while mapped. The journal's file is mapped by its owner alone, under the exclusive
    // lock of `<db>-credits.lock` (taken in `Journal::own` before the file is opened, held
    // as long as the `Journal` and its mapping live); no other process opens the file
    // without that lock, and the owner cuts it shorter only as the mapping goes (`Drop`)
    // or before mapping it (`own`). Only `Journal` touches the mapping, through `&mut`.
    // An operator who truncates the file under a running server makes it fault; the
    // operations guide says to leave `<db>-credits` alone while a server runs.
    unsafe { MmapMut::map_mut(file) }
}

/// A process that does not own `path`'s journal, before its first spend: joins the
/// processes that spend (the shared lock it keeps, returned), asks the owner to step
/// aside and waits for it (at most [`YIELD_WAIT`]): whether it did (`false`: it stepped
/// aside, or no process owns the journal any more).
pub(crate) fn ask_owner_to_yield(path: &Path) -> std::io::Result<(File, bool)> {
    let users = open_rw(&sibling(path, ".users"))?;
    users.lock_shared()?;
    let lock = open_rw(&sibling(path, ".lock"))?;
    lock.write_all_at(&1u32.to_le_bytes(), ASKED)?;
    let until = std::time::Instant::now() + YIELD_WAIT;
    let mut flag = [0; 4];
    while std::time::Instant::now() < until {
        if lock.read_exact_at(&mut flag, YIELDED).is_ok() && flag != [0; 4] {
            return Ok((users, true));
        }
        if lock.try_lock().is_ok() {
            lock.unlock()?;
            return Ok((users, false));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    log::warn!(
        "{}: the owner of the credit journal did not step aside within {YIELD_WAIT:?}",
        path.display()
    );
    Ok((users, true))
}

/// The records of `bytes`, up to the first that is not whole: and how many bytes they take.
pub(crate) fn decode(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + len) else { break };
        if crc32fast::hash(body) != crc {
            break;
        }
        let Some(record) = record(body) else { break };
        records.push(record);
        at += 8 + len;
    }
    (records, at)
}

fn record(body: &[u8]) -> Option<Record> {
    let u64_at = |i: usize| body.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let value_at = |i: usize| -> Option<Value> {
        let at = u64_at(i + 8)? as i64;
        Some((u64_at(i)?, (at != i64::MIN).then_some(at)))
    };
    let (kind, seq) = (*body.first()?, u64_at(1)?);
    let key_at = match kind {
        SPEND => 9 + 32,
        RESET => 9,
        _ => return None,
    };
    let key_len = u16::from_le_bytes(body.get(key_at..key_at + 2)?.try_into().ok()?) as usize;
    let key_id = std::str::from_utf8(body.get(key_at + 2..key_at + 2 + key_len)?).ok()?.to_string();
    Some(match kind {
        SPEND => Record::Spend { seq, key_id, before: value_at(9)?, after: value_at(25)? },
        _ => Record::Reset { seq, key_id },
    })
}

/// Where a key's journal records start to apply to its row (`row`: the row's counter):
/// after the last record the row is at, or from the first (since the last reset) it was
/// at before; `None` when the row is at none of them (another process wrote it since).
pub(crate) fn replay_from(records: &[(Value, Value)], row: Value) -> Option<usize> {
    for (i, (before, after)) in records.iter().enumerate().rev() {
        if *after == row {
            return Some(i + 1);
        }
        if *before == row {
            return Some(i);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn records_are_read_back_and_a_torn_tail_is_cut_off() {
        let d = dir();
        let path = d.path().join("db-credits");
        let written = {
            let (mut j, records) = Journal::own(&path).unwrap().unwrap();
            assert!(records.is_empty() && !j.shared);
            j.push_spend(1, "key_a", (10, None), (9, None)).unwrap();
            j.push_spend(2, "key_b", (5, Some(7)), (4, Some(7))).unwrap();
            j.push_reset(3, "key_a").unwrap();
            j.len() as usize
        };
        // A copy cut short by the process's end: part of a record after the last.
        let mut bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), CAPACITY, "the file is reserved ahead");
        let part = bytes[..20].to_vec();
        bytes[written..written + 20].copy_from_slice(&part);
        std::fs::write(&path, &bytes).unwrap();
        let (j, records) = Journal::own(&path).unwrap().unwrap();
        assert_eq!(
            records,
            vec![
                Record::Spend { seq: 1, key_id: "key_a".into(), before: (10, None), after: (9, None) },
                Record::Spend { seq: 2, key_id: "key_b".into(), before: (5, Some(7)), after: (4, Some(7)) },
                Record::Reset { seq: 3, key_id: "key_a".into() },
            ]
        );
        assert_eq!(j.len(), written as u64);
        let after = std::fs::read(&path).unwrap();
        assert_eq!(after[..written], bytes[..written]);
        assert!(after[written..].iter().all(|b| *b == 0), "the torn tail is cut off");
    }

    #[test]
    fn a_full_journal_grows_and_an_empty_one_is_left_empty() {
        let d = dir();
        let path = d.path().join("db-credits");
        let n = {
            let (mut j, _) = Journal::own(&path).unwrap().unwrap();
            let mut n = 0;
            while j.len() < 2 * CAPACITY as u64 {
                n += 1;
                j.push_spend(n, "key_a", (n + 1, None), (n, Some(n as i64))).unwrap();
            }
            n
        };
        let (j, records) = Journal::own(&path).unwrap().unwrap();
        assert_eq!(records.len() as u64, n, "every record across the growth");
        assert_eq!(
            records.last(),
            Some(&Record::Spend {
                seq: n,
                key_id: "key_a".into(),
                before: (n + 1, None),
                after: (n, Some(n as i64))
            })
        );
        let mut j = j;
        j.compact(j.len()).unwrap();
        drop(j);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "an empty journal leaves an empty file");
    }

    #[test]
    fn a_corrupt_record_ends_the_journal() {
        let d = dir();
        let path = d.path().join("db-credits");
        let written = {
            let (mut j, _) = Journal::own(&path).unwrap().unwrap();
            j.push_spend(1, "key_a", (10, None), (9, None)).unwrap();
            j.push_spend(2, "key_a", (9, None), (8, None)).unwrap();
            j.len() as usize
        };
        let mut bytes = std::fs::read(&path).unwrap();
        let last = written - 1;
        bytes[last] ^= 1;
        let (records, valid) = decode(&bytes);
        assert_eq!(records.len(), 1);
        assert!(valid < written);
    }

    #[test]
    fn compaction_keeps_what_follows() {
        let d = dir();
        let path = d.path().join("db-credits");
        let (mut j, _) = Journal::own(&path).unwrap().unwrap();
        j.push_spend(1, "key_a", (10, None), (9, None)).unwrap();
        let folded = j.len();
        j.push_spend(2, "key_a", (9, None), (8, None)).unwrap();
        j.compact(folded).unwrap();
        j.push_spend(3, "key_a", (8, None), (7, None)).unwrap();
        let (records, _) = decode(&std::fs::read(&path).unwrap());
        let seqs: Vec<u64> = records
            .iter()
            .map(|r| match r {
                Record::Spend { seq, .. } | Record::Reset { seq, .. } => *seq,
            })
            .collect();
        assert_eq!(seqs, [2, 3]);
    }

    #[test]
    fn one_owner_at_a_time_and_the_owner_learns_of_others() {
        let d = dir();
        let path = d.path().join("db-credits");
        let (owner, _) = Journal::own(&path).unwrap().unwrap();
        assert!(Journal::own(&path).unwrap().is_none(), "owned already");
        assert!(!owner.asked());
        let asking = std::thread::spawn({
            let path = path.clone();
            move || ask_owner_to_yield(&path).unwrap()
        });
        while !owner.asked() {
            std::thread::sleep(Duration::from_millis(1));
        }
        owner.stepped_aside().unwrap();
        let (other, yielded) = asking.join().unwrap();
        assert!(yielded);
        drop(owner);
        // The other process still spends: the next owner spends on the rows from the start.
        let (next, _) = Journal::own(&path).unwrap().unwrap();
        assert!(next.shared);
        drop((next, other));
        let (alone, _) = Journal::own(&path).unwrap().unwrap();
        assert!(!alone.shared && !alone.asked());
        drop(alone);
        // Nobody owns it: asking says so at once.
        let (_other, yielded) = ask_owner_to_yield(&path).unwrap();
        assert!(!yielded);
    }

    #[test]
    fn replay_starts_where_the_row_is() {
        let r = [((10, None), (9, None)), ((9, None), (8, None)), ((8, None), (7, None))];
        assert_eq!(replay_from(&r, (10, None)), Some(0), "nothing folded");
        assert_eq!(replay_from(&r, (8, None)), Some(2), "folded up to the second");
        assert_eq!(replay_from(&r, (7, None)), Some(3), "all folded");
        assert_eq!(replay_from(&r, (500, None)), None, "written by another process since");
        // After a refill (a later refill time) the values repeat: the last match counts.
        let r = [((2, Some(1)), (1, Some(1))), ((1, Some(1)), (9, Some(2))), ((9, Some(2)), (8, Some(2)))];
        assert_eq!(replay_from(&r, (9, Some(2))), Some(2));
    }
}
