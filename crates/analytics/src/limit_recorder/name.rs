//! An identifier as the sketches of [`super::LimitRecorder`] hold it.

/// An identifier as a sketch holds it: in the entry itself when it fits (key ids, which
/// the limits of verifications are counted by, and most user ids and addresses), so that
/// finding it compares bytes already in the CPU's cache rather than behind a pointer (a
/// cache miss per decision recorded, in a profile of verifications over 1,000 keys).
#[derive(Debug)]
pub(super) enum Name {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Heap(Box<str>),
}

/// The longest identifier held inline (with its length, 32 bytes).
const INLINE_NAME: usize = 31;

impl Name {
    pub(super) fn new(s: &str) -> Self {
        match s.len() {
            len @ 0..=INLINE_NAME => {
                let mut bytes = [0; INLINE_NAME];
                bytes[..len].copy_from_slice(s.as_bytes());
                Name::Inline { len: len as u8, bytes }
            }
            _ => Name::Heap(s.into()),
        }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            Name::Inline { len, bytes } => &bytes[..*len as usize],
            Name::Heap(s) => s.as_bytes(),
        }
    }

    /// The identifier again (always valid UTF-8: it was a `&str`'s bytes).
    pub(super) fn to_boxed(&self) -> Box<str> {
        String::from_utf8_lossy(self.as_bytes()).into()
    }
}
