//! Override patterns (`user-*`) and their matching: the input is a pattern, a NUL, then
//! identifiers separated by NULs.
#![no_main]
use keygate_ratelimit::overrides::{Override, OverrideSet, validate_pattern};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.split('\0');
    let pattern = parts.next().unwrap_or_default();
    if validate_pattern(pattern).is_err() {
        return;
    }
    let o = Override {
        id: "ovr".into(),
        namespace_id: "ns".into(),
        identifier: pattern.to_string(),
        limit: 1,
        duration: 1_000,
        is_async: false,
        seq: 0,
    };
    let set = OverrideSet::new([o]);
    for identifier in parts {
        let _ = set.find(identifier);
    }
});
