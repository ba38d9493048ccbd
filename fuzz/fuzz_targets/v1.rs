#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfmount_fuzz::v1::v1(data));
