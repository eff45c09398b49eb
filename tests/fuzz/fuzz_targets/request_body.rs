//! The JSON body reader and the rate-limit request bodies.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keygate::fuzzing::request_body(data));
