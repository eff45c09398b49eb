//! A cache prefetch: the one place in the workspace that needs `unsafe` (the workspace denies
//! it everywhere else).
//!
//! A decision's cost on a large store is dominated by one cache miss, its table slot. The
//! store issues a prefetch of that slot before it takes the shard's lock, so that the miss
//! overlaps the lock and the class lookup instead of following them (a demand load there
//! would not help: a locked instruction waits for every older load, a prefetch is not
//! ordered with it). Measured in docs/performance.md, section 1.
#![allow(unsafe_code)]

/// Asks for the cache line holding `p` to be brought into every cache level, for reading.
/// A hint only: it cannot fault, and it changes neither memory nor what any load returns,
/// whatever `p` is (valid, stale, dangling or null); a wrong address costs some bandwidth.
#[inline(always)]
pub(crate) fn prefetch_read(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 does not access memory architecturally and never faults (Intel SDM,
    // "PREFETCHh"), so no pointer is invalid for it. `_mm_prefetch` is `unsafe` only because
    // it is declared `#[target_feature(enable = "sse")]`; SSE is part of every x86_64 target.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
