//! The pseudo-random numbers of unit tests: xorshift64, the same sequence for the same seed.

/// A xorshift64 generator starting from `seed` (made odd, so never stuck at 0).
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
