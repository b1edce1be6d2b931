#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| database_operator_fuzz::mariadb_gtid(data));
