//! The memory ledger's credit journal (API-v2.md §13.5, the embedded mode): a file beside
//! the SQLite database (`<db>-credits`) that a paid spend is appended to before it is
//! answered. Appends are batched (one `write` per group of spends, no `fsync`): once
//! `write` returns, the kernel holds the record, so a `kill -9` of the process loses no
//! answered spend. The counters are folded into the keys' rows behind (every
//! [`FOLD_EVERY`]), and the journal is replayed onto the rows when the next process opens
//! the database.
//!
//! One process owns the journal at a time (an exclusive lock on `<db>-credits.lock`).
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

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the counters of answered spends are folded into the keys' rows.
pub(crate) const FOLD_EVERY: Duration = Duration::from_millis(200);
/// A journal longer than this is cut to what is not folded yet, after a fold.
pub(crate) const COMPACT_AT: u64 = 16 << 20;
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
    /// Holds the owner's exclusive lock; the flags.
    lock: File,
    /// The shared lock of the processes that spend on this database.
    _users: File,
    len: u64,
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
        // A torn tail (a write cut short by a crash) is cut off.
        file.set_len(valid as u64)?;
        file.seek(SeekFrom::End(0))?;
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            lock,
            _users: users,
            len: valid as u64,
            buf: Vec::new(),
            shared,
        };
        Ok(Some((journal, records)))
    }

    pub(crate) fn push_spend(&mut self, seq: u64, key_id: &str, before: Value, after: Value) {
        let start = self.begin(SPEND, seq);
        for (n, at) in [before, after] {
            self.buf.extend_from_slice(&n.to_le_bytes());
            self.buf.extend_from_slice(&at.unwrap_or(i64::MIN).to_le_bytes());
        }
        self.end(start, key_id);
    }

    pub(crate) fn push_reset(&mut self, seq: u64, key_id: &str) {
        let start = self.begin(RESET, seq);
        self.end(start, key_id);
    }

    fn begin(&mut self, kind: u8, seq: u64) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; 8]);
        self.buf.push(kind);
        self.buf.extend_from_slice(&seq.to_le_bytes());
        start
    }

    fn end(&mut self, start: usize, key_id: &str) {
        let key = &key_id.as_bytes()[..key_id.len().min(u16::MAX as usize)];
        self.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(key);
        let body = &self.buf[start + 8..];
        let (len, crc) = (body.len() as u32, crc32fast::hash(body));
        self.buf[start..start + 4].copy_from_slice(&len.to_le_bytes());
        self.buf[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes the records pushed since the last write, in one `write`. On an error the
    /// journal is cut back to what it held: none of them is written.
    pub(crate) fn write(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let done = self.file.write_all(&self.buf);
        let written = self.buf.len() as u64;
        self.buf.clear();
        match done {
            Ok(()) => {
                self.len += written;
                Ok(())
            }
            Err(e) => {
                let _ = self.file.set_len(self.len).and_then(|()| self.file.seek(SeekFrom::End(0)).map(drop));
                Err(e)
            }
        }
    }

    /// The journal's length: where the next write goes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Keeps only what was written from `from` on (what is not folded yet), by writing it
    /// to a new file that replaces the journal.
    pub(crate) fn compact(&mut self, from: u64) -> std::io::Result<()> {
        let mut rest = vec![0; self.len.saturating_sub(from) as usize];
        self.file.read_exact_at(&mut rest, from)?;
        let next = sibling(&self.path, ".next");
        let mut file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&next)?;
        file.write_all(&rest)?;
        std::fs::rename(&next, &self.path)?;
        file.seek(SeekFrom::End(0))?;
        self.file = file;
        self.len = rest.len() as u64;
        Ok(())
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
        {
            let (mut j, records) = Journal::own(&path).unwrap().unwrap();
            assert!(records.is_empty() && !j.shared);
            j.push_spend(1, "key_a", (10, None), (9, None));
            j.push_spend(2, "key_b", (5, Some(7)), (4, Some(7)));
            j.write().unwrap();
            j.push_reset(3, "key_a");
            j.write().unwrap();
        }
        // A write cut short: half a record.
        let whole = std::fs::read(&path).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(&whole[..20]);
        std::fs::write(&path, &torn).unwrap();
        let (j, records) = Journal::own(&path).unwrap().unwrap();
        assert_eq!(
            records,
            vec![
                Record::Spend { seq: 1, key_id: "key_a".into(), before: (10, None), after: (9, None) },
                Record::Spend { seq: 2, key_id: "key_b".into(), before: (5, Some(7)), after: (4, Some(7)) },
                Record::Reset { seq: 3, key_id: "key_a".into() },
            ]
        );
        assert_eq!(j.len(), whole.len() as u64);
        assert_eq!(std::fs::read(&path).unwrap(), whole, "the torn tail is cut off");
    }

    #[test]
    fn a_corrupt_record_ends_the_journal() {
        let d = dir();
        let path = d.path().join("db-credits");
        {
            let (mut j, _) = Journal::own(&path).unwrap().unwrap();
            j.push_spend(1, "key_a", (10, None), (9, None));
            j.push_spend(2, "key_a", (9, None), (8, None));
            j.write().unwrap();
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let (records, valid) = decode(&bytes);
        assert_eq!(records.len(), 1);
        assert!(valid < bytes.len());
    }

    #[test]
    fn compaction_keeps_what_follows() {
        let d = dir();
        let path = d.path().join("db-credits");
        let (mut j, _) = Journal::own(&path).unwrap().unwrap();
        j.push_spend(1, "key_a", (10, None), (9, None));
        j.write().unwrap();
        let folded = j.len();
        j.push_spend(2, "key_a", (9, None), (8, None));
        j.write().unwrap();
        j.compact(folded).unwrap();
        j.push_spend(3, "key_a", (8, None), (7, None));
        j.write().unwrap();
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
