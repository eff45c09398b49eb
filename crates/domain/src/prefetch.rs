//! A hint to the CPU to bring memory into its cache ahead of use, for accesses that otherwise
//! wait for memory one after the other: a journal's next lines (the credit journal's, the
//! rate-limit store's), whose first store would miss and hold up the next atomic
//! instruction (a lock's release); a key's counter.

/// Asks the CPU to bring the cache lines of `len` bytes from `start` into its cache. A hint
/// only: nothing is read or written, and an address that is not mapped is ignored, so
/// `start` need not point into anything live (a no-op off x86_64).
#[allow(unsafe_code)]
pub fn lines(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let last = start.wrapping_add(len.saturating_sub(1));
        let mut p = start;
        loop {
            // SAFETY: `_mm_prefetch` is unsafe only because it is a `target_feature(sse)`
            // function, and SSE is part of every x86_64 target. A prefetch never faults nor
            // reads into the program.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast()) };
            if (p as usize) >> 6 >= (last as usize) >> 6 {
                break;
            }
            p = p.wrapping_add(64);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}
