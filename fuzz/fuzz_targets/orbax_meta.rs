#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfmount::testkit::fuzz::orbax_meta::orbax_meta(data));
