//! One line of a `keygate keys import` file.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| keygate::fuzzing::import_line(data));
