#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfmount_fuzz::bundle_entry(data));
