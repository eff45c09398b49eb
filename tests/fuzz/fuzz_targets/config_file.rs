//! The config file.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        keygate::fuzzing::config_file(text);
    }
});
