//! XDR (RFC 4506), the subset NFSv3, MOUNT and ONC RPC use: unsigned 32- and 64-bit integers,
//! booleans, fixed and variable-length opaque data. The reader works over one received RPC
//! record (bounded by the server, see `server.rs`) and checks every claimed length against what
//! is left of it and against the protocol's own maximum before taking any bytes: nothing is
//! allocated by a length read from the wire, and no input panics.

/// The bytes of a record ended before a field, or a field broke a protocol limit: the call's
/// arguments are garbage (`GARBAGE_ARGS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Garbage;

/// Reads XDR fields from the front of a byte slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Garbage> {
        if n > self.buf.len() {
            return Err(Garbage);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Garbage> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, Garbage> {
        Ok((u64::from(self.u32()?) << 32) | u64::from(self.u32()?))
    }

    /// Opaque data of a fixed length `n` (padded to 4 bytes).
    pub(crate) fn fixed(&mut self, n: usize) -> Result<&'a [u8], Garbage> {
        let b = self.take(n)?;
        self.take(pad(n))?;
        Ok(b)
    }

    /// Variable-length opaque data (or a string) of at most `max` bytes.
    pub(crate) fn opaque(&mut self, max: usize) -> Result<&'a [u8], Garbage> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(Garbage);
        }
        self.fixed(n)
    }
}

/// The padding after `n` bytes of opaque data.
pub(crate) fn pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Writes XDR fields to a growing buffer.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        self.u32(u32::from(v))
    }

    /// Opaque data of a length both sides know (no length word).
    pub(crate) fn fixed(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(&[0; 3][..pad(b.len())]);
        self
    }

    /// Variable-length opaque data or a string (callers keep it under 4 GiB: names, handles,
    /// link targets).
    pub(crate) fn opaque(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32).fixed(b)
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }
}

/// The encoded size of variable-length opaque data of `n` bytes.
pub(crate) fn opaque_len(n: usize) -> usize {
    4 + n + pad(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut w = Writer::default();
        w.u32(7)
            .u64(1 << 40)
            .bool(true)
            .opaque(b"abcde")
            .fixed(b"xy");
        assert_eq!(w.len(), 4 + 8 + 4 + opaque_len(5) + 4);
        let mut r = Reader::new(&w.buf);
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u64(), Ok(1 << 40));
        assert_eq!(r.u32(), Ok(1));
        assert_eq!(r.opaque(5), Ok(&b"abcde"[..]));
        assert_eq!(r.fixed(2), Ok(&b"xy"[..]));
        assert_eq!(r.u32(), Err(Garbage));
    }

    #[test]
    fn claimed_lengths_are_checked_before_anything_is_taken() {
        // A length of 4 GiB - 1 in an 8-byte record.
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4]);
        assert_eq!(r.opaque(usize::MAX), Err(Garbage));
        // Over the protocol's limit, though the bytes are there.
        let mut w = Writer::default();
        w.opaque(&[0; 65]);
        assert_eq!(Reader::new(&w.buf).opaque(64), Err(Garbage));
        // Padding missing.
        assert_eq!(Reader::new(&[0, 0, 0, 1, 9]).opaque(8), Err(Garbage));
        assert_eq!(Reader::new(&[0, 0, 0]).u32(), Err(Garbage));
    }
}
