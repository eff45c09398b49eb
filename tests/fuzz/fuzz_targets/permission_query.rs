//! The permission query language (`a AND (b OR c)`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = keygate_rbac::parse_permission_query(text);
    }
});
