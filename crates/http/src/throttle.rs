//! A throttle for log lines that requests can trigger: at most so many per window, the
//! rest counted, so that no remote client can drive a log's volume (the process's logger
//! and the connection cap's warning use it).

use parking_lot::Mutex;

/// At most `lines` admitted per `window_ms`; counts what it refuses.
#[derive(Debug)]
pub struct Throttle {
    lines: u64,
    window_ms: u64,
    state: Mutex<ThrottleState>,
}

#[derive(Debug, Default)]
struct ThrottleState {
    window_start: u64,
    admitted: u64,
    suppressed: u64,
}

impl Throttle {
    pub fn new(lines: u64, window_ms: u64) -> Self {
        Self { lines, window_ms, state: Mutex::new(ThrottleState::default()) }
    }

    /// `Some(n)` when a line may be written now, `n` being the lines suppressed since the
    /// last one written; `None` when it is to be suppressed (and is counted).
    pub fn admit(&self, now_ms: u64) -> Option<u64> {
        let mut s = self.state.lock();
        // A clock that went back starts a new window too.
        if now_ms < s.window_start || now_ms - s.window_start >= self.window_ms {
            s.window_start = now_ms;
            s.admitted = 0;
        }
        if s.admitted >= self.lines {
            s.suppressed += 1;
            return None;
        }
        s.admitted += 1;
        Some(std::mem::take(&mut s.suppressed))
    }
}

/// `" (N similar lines suppressed)"` when N > 0, else nothing.
pub fn suppressed_note(n: u64) -> String {
    if n == 0 { String::new() } else { format!(" ({n} similar lines suppressed before this one)") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_admits_its_lines_per_window_then_counts() {
        let t = Throttle::new(2, 1_000);
        assert_eq!(t.admit(0), Some(0));
        assert_eq!(t.admit(10), Some(0));
        assert_eq!(t.admit(20), None);
        assert_eq!(t.admit(999), None);
        assert_eq!(t.admit(1_000), Some(2), "the next window's first line reports the two suppressed");
        assert_eq!(t.admit(1_001), Some(0));
        assert_eq!(t.admit(500), Some(0), "a clock that went back starts a new window");
        assert_eq!(suppressed_note(0), "");
        assert!(suppressed_note(3).contains("3 similar lines suppressed"));
    }
}
