#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tfmount_fuzz::tflite::tflite(data));
