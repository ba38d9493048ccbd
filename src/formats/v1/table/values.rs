//! The values of one saved slice of a V1 checkpoint (tf-format.md §7, §10.11, §10.23): the entry's
//! value is a `SavedTensorSlices` whose `data` is a `SavedSlice { name, slice, data: TensorProto }`,
//! and the TensorProto holds the slice's values, row-major, in the typed repeated field of the
//! dtype (`float_val`, `int64_val`, `string_val`, ...) — packed or not, possibly split over several
//! occurrences of the field, some as varints.
//!
//! [`scan`] locates them in one pass over the value (read through [`ReadAt`] a chunk at a time,
//! never held whole) and checks that there are exactly as many as the slice has elements. Served
//! bytes are the row-major little-endian bytes numpy's `tobytes()` gives (ints narrowed to their
//! width, bool as one byte 0/1, complex as (re, im) pairs) or, for strings, tfmount's layout: per
//! element an 8-byte little-endian length, then the bytes.
//!
//! One packed run of fixed-width values (how TensorFlow writes float, double and complex slices)
//! is served by offset arithmetic. Anything else is decoded from a known position: the pass keeps
//! at most [`MAX_MARKS`] [`Cursor`]s (one every [`MARK_VALUES`] values or [`MARK_BYTES`] bytes,
//! spread twice as far each time the list fills), so memory stays bounded whatever the size, and a
//! read at a large offset decodes at most one mark's spacing before the values it wants. Packed
//! varint runs are counted (and skipped) by their varints' last bytes, checking each is well
//! formed, and decoded in a tight loop over the chunk in memory.

use crate::formats::v1::table::encoding::{encoding, Encoding, Kind};
use crate::formats::v1::table::meta::extents;
use crate::formats::v1::table::window::{Window, CHUNK};
use crate::parse::dtype::DType;
use crate::parse::partition::extent_range;
use crate::parse::slice_key::Extent;
use crate::parse::wire::{FIXED32, FIXED64, LEN, VARINT};
use crate::parse::{varint, FormatError, ReadAt, Result};
use crate::proto::TensorSliceProto;

/// Most position marks kept per slice.
pub(crate) const MAX_MARKS: usize = 4096;
/// Initial spacing of the marks, in values and in bytes of the value.
pub(crate) const MARK_VALUES: u64 = 16 << 10;
pub(crate) const MARK_BYTES: u64 = 1 << 20;
/// A `SavedSlice.slice` larger than this is refused (a rank-254 slice is under 6 KiB).
const MAX_SLICE_PROTO: u64 = 1 << 20;

/// A position in a slice's values, from which decoding can resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// Values before this position.
    pub(crate) value: u64,
    /// Served bytes before this position.
    pub(crate) served: u64,
    /// Next byte to decode (offset in the source).
    pos: u64,
    /// End of the packed run `pos` is inside (`<= pos` between fields).
    run_end: u64,
}

#[derive(Debug, Clone)]
enum Layout {
    /// One packed run of fixed-width values: value `i` is at `at + i * width`.
    Direct { at: u64 },
    /// Decoded from the nearest mark. `marks[0]` is the start; values are increasing.
    Marks(Vec<Cursor>),
}

/// The located values of one saved slice: where its TensorProto is in the source (the table file,
/// or a decompressed block) and how to read its values.
#[derive(Debug, Clone)]
pub(crate) struct SliceValues {
    enc: Encoding,
    /// Number of stored values (elements × `per_elem`).
    values: u64,
    /// Size of the served bytes.
    served: u64,
    /// The TensorProto: `[start, end)` of the source.
    end: u64,
    layout: Layout,
}

/// One decoded value.
enum Val {
    Num(u64),
    /// A string element: its bytes at `at`, `len` of them.
    Bytes {
        at: u64,
        len: u64,
    },
}

/// Walks the typed field of a TensorProto `[.., end)` value by value.
struct Scanner<'a, R: ReadAt + ?Sized> {
    win: Window<'a, R>,
    end: u64,
    enc: Encoding,
}

fn bad(msg: &str) -> FormatError {
    FormatError::Proto(msg.to_string())
}

impl<'a, R: ReadAt + ?Sized> Scanner<'a, R> {
    fn new(src: &'a R, end: u64, enc: Encoding) -> Self {
        Scanner {
            win: Window::new(src, end),
            end,
            enc,
        }
    }

    /// A fixed-width value of `n` bytes at `pos`, which must end by `limit`.
    fn fixed(&mut self, pos: u64, n: usize, limit: u64) -> Result<u64> {
        if pos + n as u64 > limit {
            return Err(bad("fixed-width value runs past its field"));
        }
        let b = self.win.exact(pos, n)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Ok(u64::from_le_bytes(v))
    }

    /// Decodes one value of a packed run at `c.pos < c.run_end`.
    fn packed(&mut self, c: &mut Cursor) -> Result<u64> {
        let v = match self.enc.kind {
            Kind::Fixed32 => {
                let v = self.fixed(c.pos, 4, c.run_end)?;
                c.pos += 4;
                v
            }
            Kind::Fixed64 => {
                let v = self.fixed(c.pos, 8, c.run_end)?;
                c.pos += 8;
                v
            }
            Kind::Varint | Kind::Bool => {
                let (v, next) = self.win.varint(c.pos, c.run_end)?;
                c.pos = next;
                v
            }
            Kind::Bytes => return Err(bad("strings cannot be packed")),
        };
        Ok(v)
    }

    /// The next value after `c` (advancing `c` past it), or `None` at the end of the TensorProto.
    /// Fields other than the typed one are skipped.
    fn next(&mut self, c: &mut Cursor) -> Result<Option<Val>> {
        loop {
            if c.pos < c.run_end {
                let v = self.packed(c)?;
                c.value += 1;
                c.served += self.enc.width;
                return Ok(Some(Val::Num(v)));
            }
            if c.pos >= self.end {
                return Ok(None);
            }
            let (key, at) = self.win.varint(c.pos, self.end)?;
            let number = key >> 3;
            let wire = (key & 7) as u8;
            let kind = self.enc.kind;
            if number == self.enc.field as u64 {
                let v = match (kind, wire) {
                    (_, LEN) => {
                        let (len, payload) = self.win.varint(at, self.end)?;
                        let stop = payload
                            .checked_add(len)
                            .filter(|&e| e <= self.end)
                            .ok_or_else(|| bad("field runs past the TensorProto"))?;
                        if kind != Kind::Bytes {
                            // A packed run: its values follow.
                            c.pos = payload;
                            c.run_end = stop;
                            continue;
                        }
                        c.pos = stop;
                        c.value += 1;
                        c.served = c
                            .served
                            .checked_add(8 + len)
                            .ok_or_else(|| bad("strings too long"))?;
                        return Ok(Some(Val::Bytes { at: payload, len }));
                    }
                    (Kind::Fixed32, FIXED32) => {
                        let v = self.fixed(at, 4, self.end)?;
                        c.pos = at + 4;
                        v
                    }
                    (Kind::Fixed64, FIXED64) => {
                        let v = self.fixed(at, 8, self.end)?;
                        c.pos = at + 8;
                        v
                    }
                    (Kind::Varint | Kind::Bool, VARINT) => {
                        let (v, next) = self.win.varint(at, self.end)?;
                        c.pos = next;
                        v
                    }
                    _ => return Err(bad("typed field of the wrong wire type")),
                };
                c.value += 1;
                c.served += self.enc.width;
                return Ok(Some(Val::Num(v)));
            }
            c.pos = self.skip(number, wire, at)?;
        }
    }

    /// The offset after field `number` of wire type `wire` whose key ends at `at`.
    fn skip(&mut self, number: u64, wire: u8, at: u64) -> Result<u64> {
        if number == 0 || number > u32::MAX as u64 {
            return Err(bad("bad field number"));
        }
        let next = match wire {
            VARINT => self.win.varint(at, self.end)?.1,
            FIXED64 => at + 8,
            FIXED32 => at + 4,
            LEN => {
                let (len, payload) = self.win.varint(at, self.end)?;
                payload.saturating_add(len)
            }
            _ => return Err(bad("unsupported wire type (group or invalid)")),
        };
        if next > self.end {
            return Err(bad("field runs past the TensorProto"));
        }
        Ok(next)
    }

    /// Moves `c` forward to value `target` (`>= c.value`). Runs of fixed-width packed values are
    /// skipped by arithmetic, runs of varints by counting their last bytes.
    fn skip_to(&mut self, c: &mut Cursor, target: u64) -> Result<()> {
        while c.value < target {
            let w = match self.enc.kind {
                Kind::Fixed32 => 4,
                Kind::Fixed64 => 8,
                _ => 0,
            };
            if w > 0 && c.pos < c.run_end {
                let k = ((c.run_end - c.pos) / w).min(target - c.value);
                if k > 0 {
                    c.pos += k * w;
                    c.value += k;
                    c.served += k * self.enc.width;
                    continue;
                }
            }
            if self.count_run(c, (target - c.value).min(usize::MAX as u64) as usize)? == 0
                && self.next(c)?.is_none()
            {
                return Err(bad("fewer values than located"));
            }
        }
        Ok(())
    }

    /// Inside a packed run of varints, moves `c` past up to `need` of them (at most one chunk,
    /// and not past `limit`), checking each is well formed; returns how many. 0 if `c` is not
    /// in such a run or no varint ends in the chunk (the caller then decodes one with `next`).
    fn count_run(&mut self, c: &mut Cursor, need: usize) -> Result<usize> {
        self.count_run_until(c, need, u64::MAX)
    }

    fn count_run_until(&mut self, c: &mut Cursor, need: usize, limit: u64) -> Result<usize> {
        if !matches!(self.enc.kind, Kind::Varint | Kind::Bool) || c.pos >= c.run_end || need == 0 {
            return Ok(0);
        }
        let lim = c.run_end.min(limit).min(c.pos + CHUNK as u64);
        if lim <= c.pos {
            return Ok(0);
        }
        let avail = (lim - c.pos) as usize;
        let bytes = self.win.get_some(c.pos, avail, 64)?;
        let (n, used) = count_varints(&bytes[..avail.min(bytes.len())], need)?;
        c.pos += used as u64;
        c.value += n as u64;
        c.served += n as u64 * self.enc.width;
        Ok(n)
    }
}

/// Counts the varints that end in `bytes` (which starts at a varint), at most `need` (>= 1):
/// returns how many, and the bytes up to the end of the last one. A varint of more than 10
/// bytes, or one overflowing 64 bits, is an error, as `varint::decode_u64` has it.
///
/// 64 bytes at a time while the `need`-th varint cannot end in them: the varints ending in a
/// block are its bytes below 0x80 (a bit mask of the block), and a block in which no run of
/// continuation bytes reaches 9 (counting the run carried in) needs no other check. Any other
/// block, and the rest once `need` is near, goes through the byte loop.
fn count_varints(bytes: &[u8], need: usize) -> Result<(usize, usize)> {
    let (mut n, mut run, mut used) = (0usize, 0u32, 0usize);
    let mut k = 0usize;
    while let Some(block) = bytes.get(k..k + 64) {
        let cont = continuation_mask(block);
        let ends = !cont;
        let count = ends.count_ones() as usize;
        if n + count >= need {
            break;
        }
        // Runs of 9 or more continuation bytes inside the block, or reaching into its first
        // end from the previous block: the byte loop checks those.
        let r2 = cont & (cont >> 1);
        let r4 = r2 & (r2 >> 2);
        let r9 = r4 & (r4 >> 4) & (cont >> 8);
        if r9 != 0 || run + ends.trailing_zeros() >= 9 {
            (n, run, used) = count_bytes(block, k, need, (n, run, used))?;
        } else {
            n += count;
            used = k + 64 - ends.leading_zeros() as usize;
            run = ends.leading_zeros();
        }
        k += 64;
    }
    if n < need {
        let rest = bytes.get(k..).unwrap_or_default();
        (n, _, used) = count_bytes(rest, k, need, (n, run, used))?;
    }
    Ok((n, used))
}

/// Bit i set: byte i of the 64-byte `block` has its high bit set (a varint continues past it).
#[inline(always)]
fn continuation_mask(block: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(b) = block.get(..64) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_movemask_epi8};
        let mut m = 0u64;
        for i in 0..4 {
            // SAFETY: SSE2 is part of x86-64; `b` holds 64 bytes, the load reads 16 of them
            // from byte 16 * i (unaligned loads allowed).
            let bits = unsafe {
                _mm_movemask_epi8(_mm_loadu_si128(b.as_ptr().add(16 * i).cast::<__m128i>()))
            };
            m |= u64::from(bits as u16) << (16 * i);
        }
        return m;
    }
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut m = 0u64;
    for (i, w) in block.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        // Gathers bit 7 of each byte into the top byte, byte j's at bit 56 + j.
        let top = (u64::from_le_bytes(b) & HIGH).wrapping_mul(0x0002_0408_1020_4081) >> 56;
        m |= top << (8 * i);
    }
    m
}

/// The byte loop of [`count_varints`] over `bytes` (at offset `at` of the whole), from the
/// state `(count, run of continuation bytes, used)`, stopping at `need`.
fn count_bytes(
    bytes: &[u8],
    at: usize,
    need: usize,
    (mut n, mut run, mut used): (usize, u32, usize),
) -> Result<(usize, u32, usize)> {
    for (i, &b) in bytes.iter().enumerate() {
        if n >= need {
            break;
        }
        if b < 0x80 {
            if run == 9 && b > 1 {
                return Err(FormatError::BadVarint);
            }
            n += 1;
            run = 0;
            used = at + i + 1;
        } else {
            run += 1;
            if run >= 10 {
                return Err(FormatError::BadVarint);
            }
        }
    }
    Ok((n, run, used))
}

/// The byte loop [`count_varints`] replaces, kept to test it against.
#[cfg(test)]
fn count_varints_bytewise(bytes: &[u8], need: usize) -> Result<(usize, usize)> {
    let (mut n, mut run, mut used) = (0usize, 0u32, 0usize);
    for (k, &b) in bytes.iter().enumerate() {
        if b < 0x80 {
            if run == 9 && b > 1 {
                return Err(FormatError::BadVarint);
            }
            n += 1;
            run = 0;
            used = k + 1;
            if n == need {
                break;
            }
        } else {
            run += 1;
            if run >= 10 {
                return Err(FormatError::BadVarint);
            }
        }
    }
    Ok((n, used))
}

/// The varint at `bytes[k..]`: by [`varint::decode_u64_16`] while 16 bytes are left.
#[inline(always)]
fn varint_at(bytes: &[u8], k: usize) -> Option<(u64, usize)> {
    match bytes.get(k..k + 16) {
        Some(w) => {
            let mut b = [0u8; 16];
            b.copy_from_slice(w);
            varint::decode_u64_16(&b)
        }
        None => bytes.get(k..).and_then(varint::decode_u64),
    }
}

/// Decodes the varints at the start of `bytes` into `dst`, `W` bytes each (the value's low bytes,
/// little-endian), until `dst` is full or no whole varint is left: returns the values written
/// and the bytes they used.
///
/// 64 bytes at a time while 72 are readable: the varints ending in the block are its bytes
/// below 0x80 (one bit mask), so where each starts and ends is known without decoding the one
/// before (the loop's only dependency is clearing the mask's lowest bit), and each varint of up
/// to 8 bytes is one 8-byte load and [`varint::groups`]. Longer ones, and the rest, go through
/// [`varint_at`] one at a time; a malformed varint stops both, as it stops `varint_at`.
#[inline]
fn decode_ints<const W: usize>(bytes: &[u8], dst: &mut [u8]) -> (usize, usize) {
    #[cfg(target_arch = "x86_64")]
    if bmi2() {
        // SAFETY: the CPU has BMI2 (checked just above).
        return unsafe { decode_ints_bmi2::<W>(bytes, dst) };
    }
    decode_ints_any::<W, false>(bytes, dst)
}

/// Whether the CPU has BMI2 (`pext` gathers a varint's 7-bit groups in one instruction).
#[cfg(target_arch = "x86_64")]
fn bmi2() -> bool {
    std::arch::is_x86_feature_detected!("bmi2")
}

/// [`decode_ints`] compiled for BMI2.
///
/// # Safety
/// The CPU must have BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn decode_ints_bmi2<const W: usize>(bytes: &[u8], dst: &mut [u8]) -> (usize, usize) {
    decode_ints_any::<W, true>(bytes, dst)
}

/// The 7-bit groups of the first `len` (1..=8) bytes of `word`, joined (a varint's value).
#[inline(always)]
fn groups_of<const PEXT: bool>(word: u64, len: usize) -> u64 {
    let mask = u64::MAX >> (64 - 8 * len);
    #[cfg(target_arch = "x86_64")]
    if PEXT {
        // SAFETY: only instantiated with PEXT inside `decode_ints_bmi2` (the CPU has BMI2).
        return unsafe { std::arch::x86_64::_pext_u64(word, mask & 0x7f7f_7f7f_7f7f_7f7f) };
    }
    varint::groups(word & mask)
}

#[inline(always)]
fn decode_ints_any<const W: usize, const PEXT: bool>(
    bytes: &[u8],
    dst: &mut [u8],
) -> (usize, usize) {
    let (mut k, mut m) = (0usize, 0usize);
    let cap = dst.len() / W;
    'blocks: while let Some(win) = bytes.get(k..k + 72) {
        let Ok(win) = <&[u8; 72]>::try_from(win) else {
            break;
        };
        let cont = continuation_mask(&win[..64]);
        let mut ends = !cont;
        if ends == 0 {
            // 64 continuation bytes: malformed, the loop below stops on it.
            break;
        }
        let n = ends.count_ones() as usize;
        // Bit i set: bytes i..i+8 all continue (a varint of more than 8 bytes, or the start
        // of one at the block's end).
        let r2 = cont & (cont >> 1);
        let r4 = r2 & (r2 >> 2);
        let r8 = r4 & (r4 >> 4);
        if r8 == 0 && n <= cap - m {
            // Every varint ending here has at most 8 bytes and has room: one load and one
            // gather each, nothing else checked.
            let mut start = 0usize;
            for d in dst[m * W..(m + n) * W].chunks_exact_mut(W) {
                let end = (ends.trailing_zeros() & 63) as usize;
                let len = end + 1 - start;
                let mut b = [0u8; 8];
                b.copy_from_slice(&win[start..start + 8]);
                let v = groups_of::<PEXT>(u64::from_le_bytes(b), len);
                let mut le = [0u8; W];
                le.copy_from_slice(&v.to_le_bytes()[..W]);
                d.copy_from_slice(&le);
                start = end + 1;
                ends &= ends - 1;
            }
            m += n;
            k += start;
            continue;
        }
        // A long or malformed varint, or the output's end: one at a time, checked.
        let mut start = 0usize;
        while ends != 0 {
            let Some(d) = dst.get_mut(m * W..(m + 1) * W) else {
                k += start;
                break 'blocks;
            };
            let end = ends.trailing_zeros() as usize;
            let len = end + 1 - start;
            let v = match win.get(start..start + 8) {
                Some(w) if len <= 8 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(w);
                    groups_of::<PEXT>(u64::from_le_bytes(b), len)
                }
                _ => match varint_at(bytes, k + start) {
                    Some((v, n)) if n == len => v,
                    // Malformed (or a run of more than 10 bytes): the loop below stops on it.
                    _ => {
                        k += start;
                        return decode_ints_from::<W>(bytes, dst, k, m);
                    }
                },
            };
            let mut le = [0u8; W];
            le.copy_from_slice(&v.to_le_bytes()[..W]);
            d.copy_from_slice(&le);
            m += 1;
            start = end + 1;
            ends &= ends - 1;
        }
        k += start;
    }
    decode_ints_from::<W>(bytes, dst, k, m)
}

/// The one-at-a-time loop of [`decode_ints`], from byte `k` of `bytes` and value `m` of `dst`.
#[inline]
fn decode_ints_from<const W: usize>(
    bytes: &[u8],
    dst: &mut [u8],
    mut k: usize,
    mut m: usize,
) -> (usize, usize) {
    for d in dst.get_mut(m * W..).unwrap_or_default().chunks_exact_mut(W) {
        let Some((v, n)) = varint_at(bytes, k) else {
            break;
        };
        let mut le = [0u8; W];
        le.copy_from_slice(&v.to_le_bytes()[..W]);
        d.copy_from_slice(&le);
        k += n;
        m += 1;
    }
    (m, k)
}

/// [`decode_ints`] for bool: one byte, 1 if the value is not 0.
fn decode_bools(bytes: &[u8], dst: &mut [u8]) -> (usize, usize) {
    let (mut k, mut m) = (0usize, 0usize);
    for d in dst.iter_mut() {
        let Some((v, n)) = varint_at(bytes, k) else {
            break;
        };
        *d = (v != 0) as u8;
        k += n;
        m += 1;
    }
    (m, k)
}

/// Reads the fields of the message `[from, to)` of `win`: `(number, wire, payload start, end)`
/// for `LEN` fields, others skipped. Calls `f` for each.
fn for_each_len_field<R: ReadAt + ?Sized>(
    win: &mut Window<'_, R>,
    from: u64,
    to: u64,
    mut f: impl FnMut(&mut Window<'_, R>, u64, u64, u64) -> Result<()>,
) -> Result<()> {
    let mut pos = from;
    while pos < to {
        let (key, at) = win.varint(pos, to)?;
        let number = key >> 3;
        if number == 0 {
            return Err(bad("field number 0"));
        }
        pos = match (key & 7) as u8 {
            VARINT => win.varint(at, to)?.1,
            FIXED64 => at + 8,
            FIXED32 => at + 4,
            LEN => {
                let (len, payload) = win.varint(at, to)?;
                let end = payload
                    .checked_add(len)
                    .filter(|&e| e <= to)
                    .ok_or_else(|| bad("field runs past its message"))?;
                f(win, number, payload, end)?;
                end
            }
            _ => return Err(bad("unsupported wire type (group or invalid)")),
        };
        if pos > to {
            return Err(bad("field runs past its message"));
        }
    }
    Ok(())
}

/// What the scan is told about the slice it must find.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) shape: &'a [u64],
    pub(crate) slice: &'a [Extent],
    pub(crate) dtype: DType,
}

impl Expect<'_> {
    /// Elements of the slice; `None` if an extent lies outside the shape or the count overflows.
    pub(crate) fn elements(&self) -> Option<u64> {
        if self.shape.len() != self.slice.len() {
            return None;
        }
        self.shape
            .iter()
            .zip(self.slice)
            .try_fold(1u64, |n, (&d, x)| {
                let len = if x.length == -1 {
                    d
                } else {
                    let end = x.start.checked_add(x.length)?;
                    if x.start < 0 || x.length < 0 || end as u64 > d {
                        return None;
                    }
                    x.length as u64
                };
                n.checked_mul(len)
            })
    }
}

/// Locates the values of the slice `want` in the entry value `[offset, offset+len)` of `src` (a
/// `SavedTensorSlices`), checking that it holds that slice of that tensor, and that it has exactly
/// as many values as the slice has elements. One pass over the TensorProto's fields; fixed-width
/// values in one packed run are not read at all.
pub(crate) fn scan<R: ReadAt + ?Sized>(
    src: &R,
    offset: u64,
    len: u64,
    want: Expect<'_>,
) -> Result<SliceValues> {
    let elements = want
        .elements()
        .ok_or_else(|| FormatError::BadEntry("slice outside the shape".into()))?;
    let enc = encoding(want.dtype).ok_or_else(|| {
        FormatError::BadEntry(format!(
            "dtype {} cannot be read from a V1 checkpoint",
            want.dtype.display_name()
        ))
    })?;
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= src.len())
        .ok_or(FormatError::BadBlock("value runs past the file"))?;
    let mut win = Window::new(src, end);
    // SavedTensorSlices.data (2): the SavedSlice.
    let mut data = None;
    let mut several = false;
    for_each_len_field(&mut win, offset, end, |_, n, a, b| {
        if n == 2 {
            several |= data.replace((a, b)).is_some();
        }
        Ok(())
    })?;
    let (ds, de) = data.ok_or_else(|| super::slice_mismatch("no data in the entry"))?;
    if several {
        return Err(super::slice_mismatch("several data fields"));
    }
    // SavedSlice: name (1), slice (2), data (3).
    let (mut name, mut slices, mut tensor, mut tensors) = (None, 0, None, 0);
    let mut slice = None;
    for_each_len_field(&mut win, ds, de, |_, n, a, b| {
        match n {
            1 => name = Some((a, b)),
            2 => {
                slices += 1;
                slice = Some((a, b));
            }
            3 => {
                tensors += 1;
                tensor = Some((a, b));
            }
            _ => {}
        }
        Ok(())
    })?;
    let mismatch = |m: &str| super::slice_mismatch(m.to_string());
    // (proto3 leaves an empty name out.)
    match name {
        Some((a, b)) if b - a == want.name.len() as u64 => {
            if win.exact(a, want.name.len())? != want.name {
                return Err(mismatch("another tensor's name"));
            }
        }
        None if want.name.is_empty() => {}
        _ => return Err(mismatch("another tensor's name")),
    }
    let proto: TensorSliceProto = match (slices, slice) {
        (0, _) => TensorSliceProto::default(),
        (1, Some((a, b))) if b - a <= MAX_SLICE_PROTO => {
            let mut buf = vec![0u8; (b - a) as usize];
            src.read_exact_at(&mut buf, a)?;
            prost::Message::decode(&buf[..])?
        }
        _ => return Err(mismatch("bad slice field")),
    };
    let got = extents(&proto, want.shape).map_err(|_| mismatch("another slice's extent"))?;
    let same = got.len() == want.slice.len()
        && got
            .iter()
            .zip(want.slice)
            .zip(want.shape)
            .all(|((x, w), &d)| extent_range(x, d) == extent_range(w, d));
    if !same {
        return Err(mismatch("another slice's extent"));
    }
    let (ts, te) = match (tensors, tensor) {
        (0, _) => (de, de), // no TensorProto: no values
        (1, Some(r)) => r,
        _ => return Err(mismatch("several TensorProtos")),
    };
    let expected = elements
        .checked_mul(enc.per_elem)
        .ok_or_else(|| FormatError::BadEntry("element count overflows".into()))?;
    scan_values(src, ts, te, enc, expected)
}

/// The pass over the TensorProto `[start, end)`.
fn scan_values<R: ReadAt + ?Sized>(
    src: &R,
    start: u64,
    end: u64,
    enc: Encoding,
    expected: u64,
) -> Result<SliceValues> {
    let mut sc = Scanner::new(src, end, enc);
    let count = |found| super::value_count(expected, found);
    // Fields only: one packed run of fixed-width values is served by offset.
    if matches!(enc.kind, Kind::Fixed32 | Kind::Fixed64) {
        let mut runs = Vec::new();
        let mut other = false;
        let mut pos = start;
        while pos < end && runs.len() < 2 && !other {
            let (key, at) = sc.win.varint(pos, end)?;
            let wire = (key & 7) as u8;
            let next = sc.skip(key >> 3, wire, at)?;
            if key >> 3 == enc.field as u64 {
                if wire == LEN {
                    runs.push((sc.win.varint(at, end)?.1, next));
                } else {
                    other = true;
                }
            }
            pos = next;
        }
        if !other && runs.len() <= 1 {
            let (a, b) = runs.first().copied().unwrap_or((end, end));
            let w = if enc.kind == Kind::Fixed32 { 4 } else { 8 };
            if (b - a) % w != 0 {
                return Err(bad("packed run not a whole number of values"));
            }
            if (b - a) / w != expected {
                return Err(count((b - a) / w));
            }
            return Ok(SliceValues {
                enc,
                values: expected,
                served: expected * enc.width,
                end,
                layout: Layout::Direct { at: a },
            });
        }
    }
    let mut c = Cursor {
        value: 0,
        served: 0,
        pos: start,
        run_end: start,
    };
    let mut marks = vec![c];
    let (mut every_v, mut every_b) = (MARK_VALUES, MARK_BYTES);
    loop {
        let mut last = *marks.last().unwrap_or(&c);
        if c.value - last.value >= every_v || c.pos - last.pos >= every_b {
            marks.push(c);
            last = c;
            if marks.len() >= MAX_MARKS {
                marks = marks.into_iter().step_by(2).collect();
                every_v *= 2;
                every_b *= 2;
            }
        }
        // Inside a packed run of varints, values are counted by their last bytes (and checked
        // well formed), a chunk at a time, up to the next mark.
        let need = (last.value + every_v - c.value) as usize;
        if sc.count_run_until(&mut c, need, last.pos + every_b)? > 0 {
            if c.value > expected {
                return Err(count(c.value));
            }
            continue;
        }
        if sc.next(&mut c)?.is_none() {
            break;
        }
        if c.value > expected {
            return Err(count(c.value));
        }
    }
    if c.value != expected {
        return Err(count(c.value));
    }
    Ok(SliceValues {
        enc,
        values: expected,
        served: c.served,
        end,
        layout: Layout::Marks(marks),
    })
}

impl SliceValues {
    #[cfg(test)]
    pub(crate) fn encoding(&self) -> Encoding {
        self.enc
    }

    /// Number of stored values (elements × values per element).
    #[cfg(test)]
    pub(crate) fn values(&self) -> u64 {
        self.values
    }

    /// Size of the served bytes of this slice.
    pub(crate) fn served_len(&self) -> u64 {
        self.served
    }

    /// True when values are read by offset (no decoding, no marks).
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self.layout, Layout::Direct { .. })
    }

    /// Number of position marks kept.
    pub(crate) fn marks(&self) -> usize {
        match &self.layout {
            Layout::Direct { .. } => 0,
            Layout::Marks(m) => m.len(),
        }
    }

    /// Bytes held, for a cache's accounting.
    pub(crate) fn mem_size(&self) -> usize {
        std::mem::size_of::<Self>() + self.marks() * std::mem::size_of::<Cursor>()
    }

    /// Where to start decoding for value `v` / served offset `s`: the last mark at or before it,
    /// or `hint` (where a previous read ended) if that is closer.
    fn start(
        &self,
        marks: &[Cursor],
        hint: Option<Cursor>,
        before: impl Fn(&Cursor) -> bool,
    ) -> Cursor {
        let i = marks.partition_point(&before).saturating_sub(1);
        let m = marks.get(i).copied().unwrap_or(Cursor {
            value: 0,
            served: 0,
            pos: self.end,
            run_end: self.end,
        });
        match hint {
            Some(h) if before(&h) && h.value >= m.value && h.pos <= self.end => h,
            _ => m,
        }
    }

    /// Appends the served bytes of values `[lo, hi)` (non-string dtypes) to `out`, reading `src`
    /// (the source `scan` read). `hint` is a cursor a previous call returned; the cursor after
    /// `hi` is returned for the next call.
    pub(crate) fn read_values<R: ReadAt + ?Sized>(
        &self,
        src: &R,
        lo: u64,
        hi: u64,
        hint: Option<Cursor>,
        out: &mut Vec<u8>,
    ) -> Result<Option<Cursor>> {
        if lo > hi || hi > self.values || self.enc.kind == Kind::Bytes {
            return Err(FormatError::BadEntry("value range out of bounds".into()));
        }
        let w = self.enc.width;
        let marks = match &self.layout {
            Layout::Direct { at } => {
                let n = ((hi - lo) * w) as usize;
                let from = out.len();
                out.resize(from + n, 0);
                src.read_exact_at(&mut out[from..], at + lo * w)?;
                return Ok(None);
            }
            Layout::Marks(m) => m,
        };
        let mut c = self.start(marks, hint, |m| m.value <= lo);
        let mut sc = Scanner::new(src, self.end, self.enc);
        sc.skip_to(&mut c, lo)?;
        // The values are written in place: `out` grows (and is zeroed) once, `at` is the next
        // byte to write.
        let wu = w as usize;
        let base = out.len();
        out.resize(base + ((hi - lo) * w) as usize, 0);
        let mut at = base;
        let bool_kind = self.enc.kind == Kind::Bool;
        while c.value < hi {
            // Inside a packed run of varints: decode straight from the window's chunk.
            if matches!(self.enc.kind, Kind::Varint | Kind::Bool) && c.pos < c.run_end {
                let avail = (c.run_end - c.pos).min(CHUNK as u64) as usize;
                let bytes = sc.win.get_some(c.pos, avail, 64)?;
                let bytes = &bytes[..avail.min(bytes.len())];
                let dst = out.get_mut(at..).unwrap_or_default();
                let (m, k) = match (bool_kind, wu) {
                    (true, _) => decode_bools(bytes, dst),
                    (false, 8) => decode_ints::<8>(bytes, dst),
                    (false, 4) => decode_ints::<4>(bytes, dst),
                    (false, 2) => decode_ints::<2>(bytes, dst),
                    (false, 1) => decode_ints::<1>(bytes, dst),
                    (false, _) => return Err(bad("unsupported value width")),
                };
                at += m * wu;
                c.value += m as u64;
                c.pos += k as u64;
                c.served += m as u64 * w;
                if k > 0 {
                    continue;
                }
            }
            match sc.next(&mut c)? {
                Some(Val::Num(v)) => {
                    let dst = out
                        .get_mut(at..at + wu)
                        .ok_or_else(|| bad("more values than asked"))?;
                    if bool_kind {
                        dst.fill((v != 0) as u8);
                    } else {
                        dst.copy_from_slice(&v.to_le_bytes()[..wu]);
                    }
                    at += wu;
                }
                _ => return Err(bad("fewer values than located")),
            }
        }
        out.truncate(at);
        Ok(Some(c))
    }

    /// Appends served bytes `[offset, offset+len)` (clamped to the end) of a string slice to
    /// `out`. Only the elements the range overlaps are read; `hint` as for [`read_values`].
    ///
    /// [`read_values`]: Self::read_values
    pub(crate) fn read_strings<R: ReadAt + ?Sized>(
        &self,
        src: &R,
        offset: u64,
        len: u64,
        hint: Option<Cursor>,
        out: &mut Vec<u8>,
    ) -> Result<Option<Cursor>> {
        let Layout::Marks(marks) = &self.layout else {
            return Err(FormatError::BadEntry("not a string slice".into()));
        };
        if self.enc.kind != Kind::Bytes {
            return Err(FormatError::BadEntry("not a string slice".into()));
        }
        let end = offset.saturating_add(len).min(self.served);
        if offset >= end {
            return Ok(hint);
        }
        let mut c = self.start(marks, hint, |m| m.served <= offset);
        let mut sc = Scanner::new(src, self.end, self.enc);
        let mut last = c;
        while c.served < end {
            let before = c;
            let Some(Val::Bytes { at, len }) = sc.next(&mut c)? else {
                return Err(bad("fewer values than located"));
            };
            if c.served <= offset {
                last = c;
                continue;
            }
            emit_string(src, before.served, at, len, offset, end, out)?;
            last = if c.served <= end { c } else { before };
        }
        Ok(Some(last))
    }

    /// The string elements from the first on: `next()` gives each one's `(offset, length)` in
    /// the source.
    pub(crate) fn elements<'a, R: ReadAt + ?Sized>(
        &'a self,
        src: &'a R,
    ) -> Result<Elements<'a, R>> {
        let Layout::Marks(marks) = &self.layout else {
            return Err(FormatError::BadEntry("not a string slice".into()));
        };
        if self.enc.kind != Kind::Bytes {
            return Err(FormatError::BadEntry("not a string slice".into()));
        }
        Ok(Elements {
            sc: Scanner::new(src, self.end, self.enc),
            c: marks.first().copied().ok_or(bad("no marks"))?,
            n: self.values,
        })
    }
}

/// Appends the part within `[offset, end)` of the served element (8-byte length, then its `len`
/// bytes at `at` of `src`) that starts at served offset `from`.
pub(crate) fn emit_string<R: ReadAt + ?Sized>(
    src: &R,
    from: u64,
    at: u64,
    len: u64,
    offset: u64,
    end: u64,
    out: &mut Vec<u8>,
) -> Result<()> {
    let header = len.to_le_bytes();
    let elem_end = from + 8 + len;
    let a = offset.max(from);
    let b = end.min(elem_end);
    if a >= b {
        return Ok(());
    }
    if a < from + 8 {
        out.extend_from_slice(&header[(a - from) as usize..((b.min(from + 8)) - from) as usize]);
    }
    let da = a.max(from + 8) - from - 8;
    let db = b.max(from + 8) - from - 8;
    if db > da {
        let n = out.len();
        out.resize(n + (db - da) as usize, 0);
        src.read_exact_at(&mut out[n..], at + da)?;
    }
    Ok(())
}

/// String elements in order (see [`SliceValues::elements`]).
pub(crate) struct Elements<'a, R: ReadAt + ?Sized> {
    sc: Scanner<'a, R>,
    c: Cursor,
    n: u64,
}

impl<R: ReadAt + ?Sized> Elements<'_, R> {
    /// Index of the element `next` gives.
    pub(crate) fn index(&self) -> u64 {
        self.c.value
    }

    pub(crate) fn next_element(&mut self) -> Result<Option<(u64, u64)>> {
        if self.c.value >= self.n {
            return Ok(None);
        }
        match self.sc.next(&mut self.c)? {
            Some(Val::Bytes { at, len }) => Ok(Some((at, len))),
            _ => Err(bad("fewer values than located")),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::parse::varint::encode_u64;

    pub(crate) fn key(field: u32, wire: u8, out: &mut Vec<u8>) {
        encode_u64(((field as u64) << 3) | wire as u64, out);
    }

    pub(crate) fn len_field(field: u32, payload: &[u8], out: &mut Vec<u8>) {
        key(field, LEN, out);
        encode_u64(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }

    /// A `SavedTensorSlices` value holding `tensor_proto` as slice `slice` of `name`.
    pub(crate) fn entry(name: &[u8], slice: &[(i64, i64)], tensor_proto: &[u8]) -> Vec<u8> {
        use crate::proto::tensor_slice_proto::extent::HasLength;
        use crate::proto::tensor_slice_proto::Extent as PE;
        let sp = TensorSliceProto {
            extent: slice
                .iter()
                .map(|&(start, l)| PE {
                    start: if l < 0 { 0 } else { start },
                    has_length: (l >= 0).then_some(HasLength::Length(l)),
                })
                .collect(),
        };
        let mut saved = Vec::new();
        len_field(1, name, &mut saved);
        len_field(2, &prost::Message::encode_to_vec(&sp), &mut saved);
        len_field(3, tensor_proto, &mut saved);
        let mut out = Vec::new();
        len_field(2, &saved, &mut out);
        out
    }

    fn expect<'a>(name: &'a [u8], shape: &'a [u64], slice: &'a [Extent], dtype: i32) -> Expect<'a> {
        Expect {
            name,
            shape,
            slice,
            dtype: DType(dtype),
        }
    }

    const FULL1: [Extent; 1] = [crate::parse::slice_key::FULL];

    fn read_all(v: &SliceValues, src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if v.encoding().kind == Kind::Bytes {
            v.read_strings(src, 0, u64::MAX, None, &mut out).unwrap();
        } else {
            v.read_values(src, 0, v.values(), None, &mut out).unwrap();
        }
        out
    }

    /// The encodings read from the dtype table are TensorFlow's `SaveTypeTraits` (plus the
    /// fields bfloat16, uint32 and uint64 take in a TensorProto), as this module listed them
    /// before the table existed.
    #[test]
    fn encodings_from_the_dtype_table() {
        let want = |d: i32| -> Option<(u32, Kind, u64, u64)> {
            Some(match d {
                1 => (5, Kind::Fixed32, 1, 4),
                2 => (6, Kind::Fixed64, 1, 8),
                3 | 13 => (7, Kind::Varint, 1, 4),
                4 | 6 | 11 | 12 => (7, Kind::Varint, 1, 1),
                5 | 15 | 16 | 17 => (7, Kind::Varint, 1, 2),
                7 => (8, Kind::Bytes, 1, 0),
                8 => (9, Kind::Fixed32, 2, 4),
                9 => (10, Kind::Varint, 1, 8),
                10 => (11, Kind::Bool, 1, 1),
                14 | 19 => (13, Kind::Varint, 1, 2),
                18 => (12, Kind::Fixed64, 2, 8),
                22 => (16, Kind::Varint, 1, 4),
                23 => (17, Kind::Varint, 1, 8),
                _ => return None,
            })
        };
        for d in -1..=140 {
            let got = encoding(DType(d)).map(|e| (e.field, e.kind, e.per_elem, e.width));
            assert_eq!(got, want(d), "dtype {d}");
        }
    }

    #[test]
    fn packed_and_unpacked_forms_serve_the_same_bytes() {
        let vals: Vec<i64> = (0..1000)
            .map(|i| (i * i * 7919) - 3_000_000 * (i % 3))
            .collect();
        let want: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape = [1000u64];
        // int64_val packed in one run, packed in three runs, unpacked, and mixed with other
        // fields in between.
        let mut packed = Vec::new();
        vals.iter().for_each(|&v| encode_u64(v as u64, &mut packed));
        let mut one = Vec::new();
        len_field(10, &packed, &mut one);
        let mut three = Vec::new();
        for part in vals.chunks(400) {
            let mut p = Vec::new();
            part.iter().for_each(|&v| encode_u64(v as u64, &mut p));
            len_field(10, &p, &mut three);
            key(1, VARINT, &mut three); // dtype
            encode_u64(9, &mut three);
        }
        let mut unpacked = Vec::new();
        for &v in &vals {
            key(10, VARINT, &mut unpacked);
            encode_u64(v as u64, &mut unpacked);
        }
        for tp in [one, three, unpacked] {
            let e = entry(b"t", &[(0, -1)], &tp);
            let v = scan(&e[..], 0, e.len() as u64, expect(b"t", &shape, &FULL1, 9)).unwrap();
            assert!(!v.is_direct());
            assert_eq!(read_all(&v, &e), want);
            // Every sub-range, with and without a hint.
            let mut hint = None;
            for lo in (0..1000).step_by(37) {
                let mut out = Vec::new();
                hint = v
                    .read_values(&e[..], lo, (lo + 50).min(1000), hint, &mut out)
                    .unwrap();
                assert_eq!(out, want[lo as usize * 8..(lo as usize + 50).min(1000) * 8]);
            }
        }
    }

    #[test]
    fn fixed_width_one_run_is_direct_others_are_decoded() {
        let vals: Vec<f32> = (0..300).map(|i| i as f32 * -1.5).collect();
        let want: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let shape = [300u64];
        let mut one = Vec::new();
        len_field(5, &want, &mut one);
        let e = entry(b"f", &[(0, -1)], &one);
        let v = scan(&e[..], 0, e.len() as u64, expect(b"f", &shape, &FULL1, 1)).unwrap();
        assert!(v.is_direct());
        assert_eq!(read_all(&v, &e), want);
        let mut unpacked = Vec::new();
        for x in &vals {
            key(5, FIXED32, &mut unpacked);
            unpacked.extend_from_slice(&x.to_le_bytes());
        }
        let e = entry(b"f", &[(0, -1)], &unpacked);
        let v = scan(&e[..], 0, e.len() as u64, expect(b"f", &shape, &FULL1, 1)).unwrap();
        assert!(!v.is_direct());
        assert_eq!(read_all(&v, &e), want);
        // Wrong counts: one value short, one too many, a partial value.
        for n in [299 * 4, 301 * 4, 300 * 4 - 1] {
            let bytes: Vec<u8> = want.iter().cycle().take(n).copied().collect();
            let mut tp = Vec::new();
            len_field(5, &bytes, &mut tp);
            let e = entry(b"f", &[(0, -1)], &tp);
            assert!(scan(&e[..], 0, e.len() as u64, expect(b"f", &shape, &FULL1, 1)).is_err());
        }
    }

    #[test]
    fn narrow_ints_bool_half_and_complex() {
        // int8 stored as int32 varints (negative ones as 10-byte varints).
        let ints: [i64; 5] = [-128, -1, 0, 1, 127];
        let mut p = Vec::new();
        ints.iter().for_each(|&v| encode_u64(v as u64, &mut p));
        let mut tp = Vec::new();
        len_field(7, &p, &mut tp);
        let e = entry(b"i", &[(0, -1)], &tp);
        let shape = [5u64];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"i", &shape, &FULL1, 6)).unwrap();
        assert_eq!(read_all(&v, &e), [0x80, 0xff, 0, 1, 0x7f]);
        let v = scan(&e[..], 0, e.len() as u64, expect(b"i", &shape, &FULL1, 5)).unwrap();
        assert_eq!(
            read_all(&v, &e),
            [0x80, 0xff, 0xff, 0xff, 0, 0, 1, 0, 0x7f, 0]
        );
        // bool: any non-zero varint is true.
        let mut tp = Vec::new();
        len_field(11, &[0, 1, 2, 0], &mut tp);
        let e = entry(b"b", &[(0, -1)], &tp);
        let shape = [4u64];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"b", &shape, &FULL1, 10)).unwrap();
        assert_eq!(read_all(&v, &e), [0, 1, 1, 0]);
        // half: bit patterns in half_val.
        let mut p = Vec::new();
        [0x3c00u64, 0x7e00, 0x8000]
            .iter()
            .for_each(|&v| encode_u64(v, &mut p));
        let mut tp = Vec::new();
        len_field(13, &p, &mut tp);
        let e = entry(b"h", &[(0, -1)], &tp);
        let shape = [3u64];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"h", &shape, &FULL1, 19)).unwrap();
        assert_eq!(read_all(&v, &e), [0x00, 0x3c, 0x00, 0x7e, 0x00, 0x80]);
        // complex64: 2 floats an element; 3 floats for 2 elements is an error.
        let floats: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let mut tp = Vec::new();
        len_field(9, &floats, &mut tp);
        let e = entry(b"c", &[(0, -1)], &tp);
        let shape = [2u64];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"c", &shape, &FULL1, 8)).unwrap();
        assert_eq!(read_all(&v, &e), floats);
        let mut tp = Vec::new();
        len_field(9, &floats[..12], &mut tp);
        let e = entry(b"c", &[(0, -1)], &tp);
        assert!(matches!(
            scan(&e[..], 0, e.len() as u64, expect(b"c", &shape, &FULL1, 8)),
            Err(e) if e == super::super::value_count(4, 3)
        ));
    }

    #[test]
    fn strings_by_served_offset() {
        let strs: Vec<Vec<u8>> = (0..500)
            .map(|i| (0..(i * 13 % 70)).map(|j| (i + j) as u8).collect())
            .collect();
        let mut tp = Vec::new();
        for s in &strs {
            len_field(8, s, &mut tp);
        }
        let mut want = Vec::new();
        for s in &strs {
            want.extend_from_slice(&(s.len() as u64).to_le_bytes());
            want.extend_from_slice(s);
        }
        let e = entry(b"s", &[(0, -1)], &tp);
        let shape = [500u64];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"s", &shape, &FULL1, 7)).unwrap();
        assert_eq!(v.served_len(), want.len() as u64);
        assert_eq!(read_all(&v, &e), want);
        let mut hint = None;
        for off in (0..want.len() as u64).step_by(97) {
            for len in [1u64, 5, 8, 9, 300] {
                let mut out = Vec::new();
                let h = v.read_strings(&e[..], off, len, hint, &mut out).unwrap();
                let end = (off + len).min(want.len() as u64) as usize;
                assert_eq!(out, want[off as usize..end], "off {off} len {len}");
                hint = h;
            }
        }
        let mut els = v.elements(&e[..]).unwrap();
        for s in &strs {
            let (at, len) = els.next_element().unwrap().unwrap();
            assert_eq!(&e[at as usize..(at + len) as usize], &s[..]);
        }
        assert_eq!(els.next_element().unwrap(), None);
    }

    #[test]
    fn marks_stay_bounded_and_reads_far_in_are_right() {
        let n = 300_000u64;
        let mut p = Vec::new();
        (0..n).for_each(|i| encode_u64(i * 3, &mut p));
        let mut tp = Vec::new();
        len_field(10, &p, &mut tp);
        let e = entry(b"big", &[(0, -1)], &tp);
        let shape = [n];
        let v = scan(&e[..], 0, e.len() as u64, expect(b"big", &shape, &FULL1, 9)).unwrap();
        assert!(v.marks() >= (n / MARK_VALUES) as usize && v.marks() < MAX_MARKS);
        let mut out = Vec::new();
        v.read_values(&e[..], n - 3, n, None, &mut out).unwrap();
        let want: Vec<u8> = ((n - 3)..n).flat_map(|i| (i * 3).to_le_bytes()).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn wrong_name_slice_or_shape_of_entry() {
        let mut tp = Vec::new();
        len_field(5, &[0; 8], &mut tp);
        let e = entry(b"w", &[(0, 2)], &tp);
        let shape = [4u64];
        let two = [Extent {
            start: 0,
            length: 2,
        }];
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"w", &shape, &two, 1)).is_ok());
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"v", &shape, &two, 1)).is_err());
        let other = [Extent {
            start: 2,
            length: 2,
        }];
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"w", &shape, &other, 1)).is_err());
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"w", &shape, &two, 99)).is_err());
        assert!(scan(&e[..], 0, e.len() as u64 + 1, expect(b"w", &shape, &two, 1)).is_err());
        // Extents outside the shape, or overflowing, are refused, not computed with.
        for bad_ext in [
            Extent {
                start: 3,
                length: 2,
            },
            Extent {
                start: -1,
                length: 2,
            },
            Extent {
                start: i64::MAX,
                length: i64::MAX,
            },
        ] {
            let ext = [bad_ext];
            assert!(scan(&e[..], 0, e.len() as u64, expect(b"w", &shape, &ext, 1)).is_err());
        }
        // proto3 leaves an empty name out: a tensor named "" still matches.
        let mut saved = Vec::new();
        len_field(2, &[], &mut saved);
        let mut tp = Vec::new();
        len_field(10, &[7], &mut tp);
        len_field(3, &tp, &mut saved);
        let mut e = Vec::new();
        len_field(2, &saved, &mut e);
        let v = scan(&e[..], 0, e.len() as u64, expect(b"", &[], &[], 9)).unwrap();
        assert_eq!(read_all(&v, &e), 7u64.to_le_bytes());
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"x", &[], &[], 9)).is_err());
    }

    #[test]
    fn hostile_values_fail_cleanly() {
        let shape = [4u64];
        let mut tp = Vec::new();
        len_field(10, &[1, 2, 3, 4], &mut tp);
        let e = entry(b"t", &[(0, -1)], &tp);
        for cut in 0..e.len() {
            let _ = scan(&e[..cut], 0, cut as u64, expect(b"t", &shape, &FULL1, 9));
        }
        for i in 0..e.len() {
            for bit in 0..8 {
                let mut b = e.clone();
                b[i] ^= 1 << bit;
                if let Ok(v) = scan(&b[..], 0, b.len() as u64, expect(b"t", &shape, &FULL1, 9)) {
                    let mut out = Vec::new();
                    if v.read_values(&b[..], 0, 4, None, &mut out).is_ok() {
                        assert_eq!(out.len(), 32);
                    }
                }
            }
        }
        // Huge lengths and varints inside the TensorProto.
        for tp in [
            vec![0x52, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            vec![
                0x50, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
            vec![0x53, 0x00],
            vec![0x00],
        ] {
            let e = entry(b"t", &[(0, -1)], &tp);
            assert!(scan(&e[..], 0, e.len() as u64, expect(b"t", &shape, &FULL1, 9)).is_err());
        }
        // Malformed varints inside a packed run: 11 bytes, or 10 overflowing 64 bits.
        for bad_varint in [
            &[0xffu8; 10][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            let mut p = vec![5u8];
            p.extend_from_slice(bad_varint);
            p.extend_from_slice(&[0x02, 3, 4]);
            let mut tp = Vec::new();
            len_field(10, &p, &mut tp);
            let e = entry(b"t", &[(0, -1)], &tp);
            assert_eq!(
                scan(&e[..], 0, e.len() as u64, expect(b"t", &shape, &FULL1, 9)).err(),
                Some(FormatError::BadVarint)
            );
        }
        assert_eq!(count_varints(&[0xff; 9], 5).unwrap(), (0, 0));
        let max = [
            0xffu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00,
        ];
        assert_eq!(count_varints(&max, 5).unwrap(), (2, 11));
        assert_eq!(count_varints(&max, 1).unwrap(), (1, 10));
        // A run ending inside a varint.
        let mut tp = Vec::new();
        len_field(10, &[1, 2, 3, 0x80], &mut tp);
        let e = entry(b"t", &[(0, -1)], &tp);
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"t", &shape, &FULL1, 9)).is_err());
        // A count that overflows when multiplied by the values per element.
        let big = [u64::MAX / 2];
        let e = entry(b"t", &[(0, -1)], &[]);
        assert!(scan(&e[..], 0, e.len() as u64, expect(b"t", &big, &FULL1, 8)).is_err());
    }

    #[test]
    fn word_at_a_time_varint_count_is_the_byte_loop() {
        // Bytes drawn so that runs of continuation bytes of every length occur, 10th bytes of
        // every value, and every `need`, at every start: the result (or the error) must be the
        // byte loop's.
        let mut next = crate::testkit::rng::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for round in 0..3000 {
            let len = (next() % 300) as usize;
            let bias = next() % 4;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    match (r >> 8) % 8 {
                        k if k < 4 + bias => 0x80 | (r as u8),
                        6 => (r as u8) & 1,
                        _ => (r as u8) & 0x7f,
                    }
                })
                .collect();
            for need in [1, 2, 3, 5, 8, 13, 64, usize::MAX] {
                for start in 0..bytes.len().min(9) {
                    let start = start * 8;
                    let Some(b) = bytes.get(start..) else {
                        continue;
                    };
                    assert_eq!(
                        count_varints(b, need).ok(),
                        count_varints_bytewise(b, need).ok(),
                        "round {round}, need {need}, bytes {b:02x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn block_varint_decoding_is_the_one_at_a_time_loop() {
        // Varints of every length (valid, 11 bytes long, or overflowing at the 10th), decoded
        // into every width and every room left in the output: the values, count and bytes used
        // must be the one-at-a-time loop's.
        let mut next = crate::testkit::rng::xorshift(0x2545_f491_4f6c_dd1du64);
        fn both<const W: usize>(bytes: &[u8], room: usize, what: &str) {
            let (mut a, mut b) = (vec![0u8; room * W], vec![0u8; room * W]);
            let slow = decode_ints_from::<W>(bytes, &mut b, 0, 0);
            // As the CPU runs it (BMI2 where it has it), and the portable build.
            let fast = decode_ints::<W>(bytes, &mut a);
            assert_eq!(fast, slow, "{what}: count and bytes used");
            assert_eq!(a, b, "{what}: values");
            a.fill(0);
            let portable = decode_ints_any::<W, false>(bytes, &mut a);
            assert_eq!(portable, slow, "{what}: count and bytes used, portable");
            assert_eq!(a, b, "{what}: values, portable");
        }
        for round in 0..2000 {
            let mut bytes = Vec::new();
            let n = (next() % 200) as usize;
            for _ in 0..n {
                let r = next();
                // Half the rounds with a malformed varint every 25 or so, half nearly none.
                match r % if round % 2 == 0 { 50 } else { 5000 } {
                    0 => bytes.extend_from_slice(&[0xff; 11]),
                    1 => bytes.extend_from_slice(&[
                        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
                    ]),
                    _ => varint::encode_u64(r >> (r % 64), &mut bytes),
                }
            }
            for cut in [0, 1, 7, 13] {
                let b = &bytes[..bytes.len().saturating_sub(cut)];
                let room = (next() % 260) as usize;
                let what = format!("round {round}, cut {cut}, room {room}");
                both::<8>(b, room, &what);
                both::<4>(b, room, &what);
                both::<2>(b, room, &what);
                both::<1>(b, room, &what);
            }
        }
    }
}
