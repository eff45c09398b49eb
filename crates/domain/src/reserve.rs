//! Space taken on disk ahead of a mapping: the journals (the credit journal's, the
//! rate-limit store's) copy records into a mapped file, and a copy into a mapping cannot
//! fail cleanly when the disk is full (the process faults), so their files are written full
//! of zeros first, where a full disk fails a `write`.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Writes zeros into `file` from `from` up to `to` (its blocks taken now, as a `write`
/// that can fail, not as a copy into a mapping).
pub fn zeros(file: &File, from: usize, to: usize) -> std::io::Result<()> {
    let zeros = [0u8; 64 << 10];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len());
        file.write_all_at(&zeros[..n], at as u64)?;
        at += n;
    }
    Ok(())
}
