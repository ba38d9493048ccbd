//! The kernels measured in-process by `benches/kernels.rs` (criterion), reached through the test
//! kit where the crate keeps them private: the value comparison of `diff --values` (one chunk's
//! loop) and the streaming CRC-32C check of a tensor's served bytes. The statistics of `stats/`
//! ([`crate::render::stats::compute`]) and the table parser ([`crate::parse::table`]) are
//! public already.

use crate::formats::crc_stream::StreamCheck;
use crate::model::values::{compare_slices, Tolerance};
use crate::parse::dtype::DType;

/// `diff --values`' compare loop over two slices of `dtype` (`None`: a dtype without numbers);
/// its outcome (the crate's `ValueDiff`) is opaque, for the benchmark to consume.
pub fn compare_values(
    dtype: DType,
    a: &[u8],
    b: &[u8],
    atol: f64,
    rtol: f64,
) -> Option<impl std::fmt::Debug> {
    compare_slices(dtype, a, b, Tolerance { atol, rtol })
}

/// The streaming check of a local range of `data.len()` bytes whose CRC-32C should be `want`,
/// fed in order in pieces of `piece` bytes (as sequential reads serve them); its verdict. `want`
/// is a plain CRC-32C (`crc32c::crc32c`), as a tensor's stored checksum unmasked is.
pub fn stream_check(data: &[u8], want: u32, piece: usize) -> Option<bool> {
    let check = StreamCheck::local(data.len() as u64, want);
    let mut verdict = None;
    for (i, p) in data.chunks(piece.max(1)).enumerate() {
        verdict = check.fill((i * piece) as u64, p).or(verdict);
    }
    verdict
}
