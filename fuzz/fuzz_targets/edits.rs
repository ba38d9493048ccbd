#![no_main]
// The target by its name in the test kit's table (`tfmount::testkit::fuzz::TARGETS`).
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tfmount::testkit::fuzz::target("edits").expect("a target of the test kit")(data)
});
