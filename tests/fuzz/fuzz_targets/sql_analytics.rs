//! The SQL analytics translator, both families and both dialects.
#![no_main]
use keygate_analytics::sql::{Dialect, Family, Scope, compile};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let scope = Scope { workspace_id: "ws_fuzz".into(), only: Some(vec!["api_fuzz".into()]) };
    for family in [Family::Verifications, Family::Ratelimits] {
        for dialect in [Dialect::Sqlite, Dialect::Postgres] {
            let _ = compile(text, family, &scope, dialect, 1_795_176_000_000);
        }
    }
});
