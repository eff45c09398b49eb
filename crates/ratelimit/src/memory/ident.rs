//! How the in-process store holds a budget's identifier: up to [`INLINE`] bytes inside the
//! entry itself, longer ones in their class's [`Arena`]; and the [`Query`] a lookup compares
//! entries with, built without allocating.

/// The longest identifier an entry holds inline.
pub(super) const INLINE: usize = 15;

/// The length of an inline identifier. An enum rather than a `u8` so that its unused values
/// are a niche: they tell the other [`Ident`] variant and the table's empty and deleted
/// slots apart, and an [`Entry`] stays 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum InlineLen {
    L0,
    L1,
    L2,
    L3,
    L4,
    L5,
    L6,
    L7,
    L8,
    L9,
    L10,
    L11,
    L12,
    L13,
    L14,
    L15,
}

const LENS: [InlineLen; INLINE + 1] = {
    use InlineLen::*;
    [L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15]
};

/// An inline identifier: its bytes, zero-padded, then its length (`repr(C)` keeps it last,
/// at offset 15, so that [`Ident::Heap`] fits before its niche).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(super) struct Inline {
    pub(super) bytes: [u8; INLINE],
    pub(super) len: InlineLen,
}

/// An identifier as an entry holds it: 16 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ident {
    Inline(Inline),
    /// A longer identifier: a 32-bit tag of the key's hash (so that a neighbour is rejected
    /// without reading its bytes) and where its bytes are in the class's [`Arena`]. (A
    /// pointer with a tag beside it would not fit before the niche: variants other than the
    /// largest must fit, padding included, in the bytes before it.)
    Heap {
        tag: u32,
        at: u32,
        len: u32,
    },
}

/// The bytes of a class's identifiers longer than [`INLINE`], back to back in one buffer,
/// so that comparing one costs one miss (a slab of boxes would cost two). Ended entries
/// leave their bytes behind until a sweep finds over half of the buffer unused and copies
/// the rest into a new one.
#[derive(Debug, Default)]
pub(super) struct Arena {
    pub(super) bytes: Vec<u8>,
    /// Bytes that belong to entries in the table.
    pub(super) used: usize,
}

/// A sweep compacts an arena only above this size.
pub(super) const MIN_ARENA_COMPACT: usize = 4096;

impl Arena {
    #[inline]
    pub(super) fn get(&self, at: u32, len: u32) -> &[u8] {
        let at = at as usize;
        self.bytes.get(at..at + len as usize).unwrap_or_default()
    }

    /// Appends `id`; `None` if the arena would pass 4 GiB (offsets are 32-bit).
    pub(super) fn push(&mut self, id: &[u8]) -> Option<(u32, u32)> {
        let at = u32::try_from(self.bytes.len()).ok()?;
        let len = u32::try_from(id.len()).ok()?;
        at.checked_add(len)?;
        self.bytes.extend_from_slice(id);
        self.used += id.len();
        Some((at, len))
    }
}

impl Inline {
    pub(super) fn from_words(len: InlineLen, (lo, mid): (u64, u64)) -> Self {
        let mut bytes = [0; INLINE];
        bytes[..8].copy_from_slice(&lo.to_le_bytes());
        bytes[7..].copy_from_slice(&mid.to_le_bytes());
        Self { bytes, len }
    }

    /// Bytes 0-7 and 7-14 as two little-endian words (overlapping by one byte).
    #[inline]
    pub(super) fn words(&self) -> (u64, u64) {
        (word(self.bytes.first_chunk()), word(self.bytes.last_chunk()))
    }
}

/// A little-endian word of 8 bytes (one load; `None` never happens where it is used).
#[inline]
fn word(bytes: Option<&[u8; 8]>) -> u64 {
    bytes.map_or(0, |b| u64::from_le_bytes(*b))
}

/// Up to 8 bytes as a little-endian word, zero-padded, read with at most three loads and no
/// copy through memory.
#[inline]
fn padded_word(b: &[u8]) -> u64 {
    let n = b.len();
    let half = |c: Option<&[u8; 4]>| c.map_or(0, |c| u64::from(u32::from_le_bytes(*c)));
    match n {
        0 => 0,
        1..=3 => {
            u64::from(b[0]) | u64::from(b[n / 2]) << (8 * (n / 2)) | u64::from(b[n - 1]) << (8 * (n - 1))
        }
        // Two overlapping loads: the bytes they share are equal, so OR keeps them.
        4..=7 => half(b.first_chunk()) | half(b.last_chunk()) << (8 * (n - 4)),
        _ => word(b.first_chunk()),
    }
}

/// The identifier of a lookup, built once per call without allocating. An inline one is
/// compared as its length and two words, [`Inline::words`] of its zero-padded bytes, built
/// from loads of the identifier itself: copying it into an [`Inline`] first measured ~20 ns
/// slower (the copy's narrow stores and the wide loads reading them back do not line up, so
/// the loads wait until the stores retire).
#[derive(Debug, Clone, Copy)]
pub(super) enum Query<'a> {
    Inline { len: InlineLen, words: (u64, u64) },
    Heap(u32, &'a [u8]),
}

impl<'a> Query<'a> {
    #[inline]
    pub(super) fn new(identifier: &'a str, hash: u64) -> Self {
        let id = identifier.as_bytes();
        match LENS.get(id.len()) {
            Some(&len) => {
                let (lo, hi) = id.split_at(id.len().min(8));
                let (lo, hi) = (padded_word(lo), padded_word(hi));
                Query::Inline { len, words: (lo, lo >> 56 | hi << 8) }
            }
            None => Query::Heap(hash as u32, id),
        }
    }
}

impl Ident {
    #[inline]
    pub(super) fn matches(&self, query: &Query<'_>, arena: &Arena) -> bool {
        match (self, query) {
            (Ident::Inline(a), Query::Inline { len, words }) => a.len == *len && a.words() == *words,
            (Ident::Heap { tag, at, len }, Query::Heap(qtag, b)) => tag == qtag && arena.get(*at, *len) == *b,
            _ => false,
        }
    }

    pub(super) fn bytes<'a>(&'a self, arena: &'a Arena) -> &'a [u8] {
        match self {
            Ident::Inline(i) => &i.bytes[..i.len as usize],
            Ident::Heap { at, len, .. } => arena.get(*at, *len),
        }
    }
}
