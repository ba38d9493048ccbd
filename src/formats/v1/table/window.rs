//! Sequential access to a byte range of a [`ReadAt`] through one bounded buffer: the V1 reader
//! walks table entries and protobuf fields by offset, reading a chunk at a time, so a value of any
//! size is scanned with one buffer of about [`CHUNK`] bytes.

use crate::parse::{varint, FormatError, ReadAt, Result};

/// Bytes read at a time.
pub(crate) const CHUNK: usize = 128 << 10;

pub(crate) struct Window<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    /// Nothing at or past this offset is ever read.
    end: u64,
    /// Offset of `buf[0]` in `src`.
    at: u64,
    buf: Vec<u8>,
}

impl<'a, R: ReadAt + ?Sized> Window<'a, R> {
    /// A window over `[.., end)` of `src`; `end` is clamped to the source's length.
    pub(crate) fn new(src: &'a R, end: u64) -> Self {
        Window {
            src,
            end: end.min(src.len()),
            at: 0,
            buf: Vec::new(),
        }
    }

    /// The bytes from `pos` on: at least `want` of them unless the end comes first (then all up
    /// to the end). `pos` past the end is an error.
    pub(crate) fn get(&mut self, pos: u64, want: usize) -> Result<&[u8]> {
        if pos > self.end {
            return Err(FormatError::BadBlock("read past the end of its range"));
        }
        let need = pos.saturating_add(want as u64).min(self.end);
        let have_end = self.at + self.buf.len() as u64;
        if pos < self.at || need > have_end {
            let n = (self.end - pos).min(CHUNK.max(want) as u64) as usize;
            self.buf.resize(n, 0);
            self.src.read_exact_at(&mut self.buf, pos)?;
            self.at = pos;
        }
        Ok(&self.buf[(pos - self.at) as usize..])
    }

    /// The bytes from `pos` on, up to `want` of them: what the buffer holds if that is at least
    /// `min` bytes (or reaches the end), else a new chunk read from `pos`. Sequential scans use
    /// it to go on in the chunk they have rather than read its rest again.
    pub(crate) fn get_some(&mut self, pos: u64, want: usize, min: usize) -> Result<&[u8]> {
        let have_end = self.at + self.buf.len() as u64;
        let held = pos >= self.at
            && pos <= have_end
            && (have_end - pos >= min as u64 || have_end >= self.end.min(pos + want as u64));
        let b = if held {
            &self.buf[(pos - self.at) as usize..]
        } else {
            self.get(pos, want)?
        };
        Ok(&b[..want.min(b.len())])
    }

    /// Exactly `n` bytes at `pos` (`n` small: a key, a header).
    pub(crate) fn exact(&mut self, pos: u64, n: usize) -> Result<&[u8]> {
        let b = self.get(pos, n)?;
        b.get(..n).ok_or(FormatError::BadBlock("truncated"))
    }

    /// The varint at `pos`, which must end before `limit`; returns it and the offset after it.
    pub(crate) fn varint(&mut self, pos: u64, limit: u64) -> Result<(u64, u64)> {
        let avail = limit.min(self.end).saturating_sub(pos).min(10) as usize;
        let b = self.get(pos, avail)?;
        let (v, n) = varint::decode_u64(&b[..avail.min(b.len())]).ok_or(FormatError::BadVarint)?;
        Ok((v, pos + n as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_within_bounds_only() {
        let data: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let mut w = Window::new(&data[..], 200_000);
        assert_eq!(w.get(5, 3).unwrap()[..3], [5, 6, 7]);
        assert_eq!(w.get(199_998, 10).unwrap(), &[0x3e, 0x3f][..]);
        assert!(w.get(200_001, 1).is_err());
        assert_eq!(w.get(200_000, 1).unwrap(), &[0u8; 0][..]);
        assert!(w.exact(199_999, 2).is_err());
        assert_eq!(w.exact(3, 2).unwrap(), &[3, 4]);
        // get_some: the held chunk while it has `min` bytes, else a new one.
        let mut w = Window::new(&data[..], 200_000);
        assert_eq!(w.get(0, 1).unwrap().len(), CHUNK);
        assert_eq!(w.get_some(100, 50, 10).unwrap(), &data[100..150]);
        assert_eq!(
            w.get_some(CHUNK as u64 - 5, 50, 4).unwrap(),
            &data[CHUNK - 5..CHUNK]
        );
        assert_eq!(
            w.get_some(CHUNK as u64 - 5, 50, 10).unwrap(),
            &data[CHUNK - 5..CHUNK + 45]
        );
        assert_eq!(
            w.get_some(199_990, 50, 20).unwrap(),
            &data[199_990..200_000]
        );
        assert_eq!(
            w.get_some(199_995, 50, 20).unwrap(),
            &data[199_995..200_000]
        );
        assert!(w.get_some(200_001, 5, 1).is_err());
        let v = [0x96u8, 0x01, 0xff, 0xff];
        let mut w = Window::new(&v[..], 4);
        assert_eq!(w.varint(0, 4).unwrap(), (150, 2));
        assert!(w.varint(0, 1).is_err()); // the varint would cross the limit
        assert!(w.varint(2, 4).is_err()); // truncated
    }
}
