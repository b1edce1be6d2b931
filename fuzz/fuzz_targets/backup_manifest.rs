#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| database_operator_fuzz::backup_manifest(data));
