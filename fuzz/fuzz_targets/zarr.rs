#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfmount::testkit::fuzz::zarr::zarr(data));
