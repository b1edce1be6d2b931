#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| database_operator_fuzz::dump_filter(data));
