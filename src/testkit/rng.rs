//! The one pseudo-random generator of the tests (unit and integration), the fuzz harness and the
//! examples: xorshift64* (Vigna), the same sequence for the same seed everywhere, no dependency.

/// xorshift64*: deterministic for a given seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed` as it is (so a test's seed keeps giving the inputs it
    /// gave; 0, which would stay 0, starts from 1).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An index below `n` (0 for `n` = 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// Uniform in [0, 1), with 53 random bits.
    #[cfg(test)]
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }

    /// Fills `buf` with random bytes (eight per draw, little-endian).
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes()[..chunk.len()]);
        }
    }
}

/// `n` random bytes from a generator seeded with `seed` (test data that only has to be
/// reproducible and unlike other test data).
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    // Small seeds (1, 2, 3...) spread over the state first.
    Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)).bytes(n)
}

/// The generator for `seed` as a closure returning the next 64 bits (the unit tests' form).
#[cfg(test)]
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut rng = Rng::new(seed);
    move || rng.next()
}
