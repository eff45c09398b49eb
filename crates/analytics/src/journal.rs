//! The journal's entries (the `verification_journal` table): verification counts encoded
//! as one byte string per flush, and folded into `verification_counts` later, each series
//! once for all the entries that carry it ([`crate::flush`]).
//!
//! An entry is a table of its strings, each once (a flush's counts share a workspace and
//! an API, and a key's outcomes share its key and identity), then its counts, each six
//! indices into that table and four numbers. Little-endian throughout:
//!
//! ```text
//! version u8 (2)
//! strings u32, then each: length u32, UTF-8 bytes
//! counts u32, then each: workspace, API, key, identity, outcome, tags (u32 indices;
//!     tags as `verification_counts` stores them, a JSON array), width i64, bucket i64,
//!     count u64, spent credits u64
//! ```
//!
//! Version 1 (written before spent credits were counted) is the same without the spent
//! credits, and still read (as none spent). A body that does not decode (an unknown
//! version, a damaged row) is an error, never a panic: the fold logs it and drops it.

use crate::store::VerificationCount;
use hashbrown::HashMap;

/// The journal's maps: its strings, and a fold's sums. foldhash, seeded at random per
/// process (not SipHash: a fold at a million keys hashes millions of parts a minute).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

const VERSION: u8 = 2;
/// The version before spent credits: its counts have none.
const VERSION_1: u8 = 1;

/// A count as an entry holds it: its parts borrowed from the body (or from the series the
/// recorder drained).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Count<'a> {
    // In the order of the table's key: a fold's sorted counts fall on neighbouring pages.
    pub workspace_id: &'a str,
    pub width: i64,
    pub bucket: i64,
    pub api_id: &'a str,
    pub key_id: &'a str,
    pub identity_id: &'a str,
    pub outcome: &'a str,
    /// The tag set as stored: `[]`, or a JSON array of strings.
    pub tags: &'a str,
    pub count: u64,
    /// The credits the count's verifications were charged (API-v2.md §22).
    pub spent_credits: u64,
}

impl Count<'_> {
    /// The series and bucket, without the count.
    fn series(self) -> Self {
        Count { count: 0, spent_credits: 0, ..self }
    }

    /// The count as the store adds it.
    pub fn to_stored(&self) -> VerificationCount {
        VerificationCount {
            workspace_id: self.workspace_id.to_string(),
            width: self.width,
            bucket: self.bucket,
            api_id: self.api_id.to_string(),
            key_id: self.key_id.to_string(),
            identity_id: self.identity_id.to_string(),
            outcome: self.outcome.to_string(),
            tags: match self.tags {
                "[]" => Vec::new(),
                text => serde_json::from_str(text).unwrap_or_default(),
            },
            count: self.count,
            spent_credits: self.spent_credits,
        }
    }
}

/// A body that did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a verification journal entry that does not decode: {0}")]
pub struct Corrupt(&'static str);

/// `counts` as one entry.
pub fn encode<'a>(counts: impl IntoIterator<Item = Count<'a>>) -> Vec<u8> {
    let mut strings: Map<&str, u32> = Map::default();
    let mut order: Vec<&str> = Vec::new();
    let mut records: Vec<u8> = Vec::new();
    let mut n: u32 = 0;
    for c in counts {
        for s in [c.workspace_id, c.api_id, c.key_id, c.identity_id, c.outcome, c.tags] {
            let next = order.len() as u32;
            let i = *strings.entry(s).or_insert_with(|| {
                order.push(s);
                next
            });
            records.extend_from_slice(&i.to_le_bytes());
        }
        records.extend_from_slice(&c.width.to_le_bytes());
        records.extend_from_slice(&c.bucket.to_le_bytes());
        records.extend_from_slice(&c.count.to_le_bytes());
        records.extend_from_slice(&c.spent_credits.to_le_bytes());
        n += 1;
    }
    let text: usize = order.iter().map(|s| 4 + s.len()).sum();
    let mut out = Vec::with_capacity(1 + 4 + text + 4 + records.len());
    out.push(VERSION);
    out.extend_from_slice(&(order.len() as u32).to_le_bytes());
    for s in order {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&records);
    out
}

/// The counts of an entry, borrowing from `body`.
pub fn decode(body: &[u8]) -> Result<Vec<Count<'_>>, Corrupt> {
    let mut r = Reader { body, at: 0 };
    let spends = match r.bytes(1)? {
        [VERSION] => true,
        [VERSION_1] => false,
        _ => return Err(Corrupt("an unknown version")),
    };
    let n = r.u32()? as usize;
    // Each string takes four bytes at least: a count beyond that is a lie, not an
    // allocation to make.
    if n > body.len() / 4 {
        return Err(Corrupt("more strings than bytes"));
    }
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let len = r.u32()? as usize;
        strings.push(std::str::from_utf8(r.bytes(len)?).map_err(|_| Corrupt("a string not UTF-8"))?);
    }
    let n = r.u32()? as usize;
    let record: usize = 6 * 4 + 3 * 8 + if spends { 8 } else { 0 };
    if n.checked_mul(record) != Some(body.len() - r.at) {
        return Err(Corrupt("a length that does not match its counts"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut part = || -> Result<&str, Corrupt> {
            strings.get(r.u32()? as usize).copied().ok_or(Corrupt("a string index out of range"))
        };
        let (workspace_id, api_id, key_id, identity_id, outcome, tags) =
            (part()?, part()?, part()?, part()?, part()?, part()?);
        let (width, bucket, count) = (r.i64()?, r.i64()?, r.u64()?);
        let spent_credits = if spends { r.u64()? } else { 0 };
        out.push(Count {
            workspace_id,
            width,
            bucket,
            api_id,
            key_id,
            identity_id,
            outcome,
            tags,
            count,
            spent_credits,
        });
    }
    Ok(out)
}

/// The counts of `bodies` summed per series and bucket, in the table's key order; a body
/// that does not decode is passed to `corrupt` and left out.
pub fn merge<'a>(bodies: &'a [Vec<u8>], mut corrupt: impl FnMut(Corrupt)) -> Vec<Count<'a>> {
    let mut sums: Map<Count<'a>, (u64, u64)> = Map::default();
    for body in bodies {
        match decode(body) {
            Ok(counts) => {
                for c in counts {
                    let (n, spent) = sums.entry(c.series()).or_default();
                    *n = n.saturating_add(c.count);
                    *spent = spent.saturating_add(c.spent_credits);
                }
            }
            Err(e) => corrupt(e),
        }
    }
    let mut out: Vec<Count<'a>> =
        sums.into_iter().map(|(s, (count, spent_credits))| Count { count, spent_credits, ..s }).collect();
    out.sort_unstable();
    out
}

struct Reader<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        let end = self.at.checked_add(n).ok_or(Corrupt("a length past the end"))?;
        let out = self.body.get(self.at..end).ok_or(Corrupt("a length past the end"))?;
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Corrupt> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, Corrupt> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count<'a>(key: &'a str, outcome: &'a str, tags: &'a str, bucket: i64, n: u64) -> Count<'a> {
        Count {
            workspace_id: "ws_1",
            width: 60_000,
            bucket,
            api_id: "api_1",
            key_id: key,
            identity_id: "",
            outcome,
            tags,
            count: n,
            spent_credits: n / 2,
        }
    }

    #[test]
    fn an_entry_decodes_to_what_was_encoded_each_string_stored_once() {
        let counts = vec![
            count("key_a", "VALID", "[]", 60_000, 3),
            count("key_a", "RATE_LIMITED", "[\"path=/x\"]", 60_000, 1),
            count("key_b", "VALID", "[]", 120_000, u64::MAX),
            count("", "NOT_FOUND", "[]", -60_000, 7),
        ];
        let body = encode(counts.clone());
        assert_eq!(decode(&body).unwrap(), counts);
        // "ws_1", "api_1", "key_a", "", "VALID", "[]", ... each once.
        assert_eq!(body.iter().filter(|&&b| b == b'w').count(), 1, "{body:?}");
        assert_eq!(decode(&encode([])).unwrap(), []);
    }

    #[test]
    fn entries_merge_per_series_and_bucket_in_the_tables_order() {
        let first =
            encode([count("key_b", "VALID", "[]", 60_000, 2), count("key_a", "VALID", "[]", 60_000, 1)]);
        let second = encode([count("key_a", "VALID", "[]", 60_000, 4), count("key_a", "VALID", "[]", 0, 5)]);
        let bodies = vec![first, vec![9, 9, 9], second];
        let mut bad = Vec::new();
        let merged = merge(&bodies, |e| bad.push(e));
        assert_eq!(
            merged,
            [
                count("key_a", "VALID", "[]", 0, 5),
                count("key_a", "VALID", "[]", 60_000, 5),
                count("key_b", "VALID", "[]", 60_000, 2)
            ]
        );
        assert_eq!(bad, [Corrupt("an unknown version")]);
    }

    #[test]
    fn a_damaged_body_is_an_error_never_a_panic() {
        let body =
            encode([count("key_a", "VALID", "[\"a\"]", 60_000, 3), count("key_b", "VALID", "[]", 0, 1)]);
        // Every truncation, and every byte changed, of a real body.
        for end in 0..body.len() {
            assert!(decode(&body[..end]).is_err(), "cut at {end}");
        }
        for at in 0..body.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut b = body.clone();
                b[at] = v;
                let _ = decode(&b);
            }
        }
        assert!(decode(&[1, 0xff, 0xff, 0xff, 0xff]).is_err(), "a string count past the body");
        let mut extra = body.clone();
        extra.push(0);
        assert!(decode(&extra).is_err(), "a byte past the counts");
    }

    #[test]
    fn an_entry_of_the_version_before_spent_credits_reads_as_none_spent() {
        let counts = [count("key_a", "VALID", "[]", 60_000, 3), count("key_b", "VALID", "[\"a\"]", 0, 8)];
        // Version 1: the same records without their last eight bytes.
        let v2 = encode(counts);
        let strings_end = v2.len() - 4 - counts.len() * 56;
        let mut v1 = vec![1];
        v1.extend_from_slice(&v2[1..strings_end + 4]);
        for r in v2[strings_end + 4..].chunks(56) {
            v1.extend_from_slice(&r[..48]);
        }
        let read = decode(&v1).unwrap();
        assert_eq!(read, counts.map(|c| Count { spent_credits: 0, ..c }));
        assert!(decode(&v1[..v1.len() - 1]).is_err());
    }

    #[test]
    fn a_stored_count_reads_its_tags_back() {
        let c = count("key_a", "VALID", "[\"a\",\"b=c\"]", 0, 1).to_stored();
        assert_eq!(c.tags, ["a", "b=c"]);
        assert!(count("key_a", "VALID", "[]", 0, 1).to_stored().tags.is_empty());
    }
}
