//! String tensors (tf-format.md §4.2): varint lengths, a masked CRC of the lengths, the bytes.
//! tfmount serves each element as an 8-byte little-endian length followed by its bytes.

use crate::parse::{for_each_chunk, mask_crc, unmask_crc, varint, FormatError, ReadAt, Result};

/// Where each element lies, both in the stored bytes and in the served layout.
#[derive(Debug, Clone)]
pub struct StringLayout {
    /// Offset of the first string's bytes in the stored tensor.
    data_start: u64,
    /// `out_starts[i]` = served offset of element i's length field; last = total served size.
    out_starts: Vec<u64>,
}

/// Pieces read at a time when scanning a tensor held in a file.
const CHUNK: usize = 64 << 10;

/// Sequential access to `[.., end)` of a [`ReadAt`] through one buffer of about [`CHUNK`] bytes.
struct Window<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    end: u64,
    at: u64,
    buf: Vec<u8>,
}

impl<'a, R: ReadAt + ?Sized> Window<'a, R> {
    fn new(src: &'a R, end: u64) -> Self {
        Window {
            src,
            end,
            at: 0,
            buf: Vec::new(),
        }
    }

    /// The bytes from `pos`: at least `want` of them unless the end comes first.
    fn get(&mut self, pos: u64, want: usize) -> Result<&[u8]> {
        let need = pos.saturating_add(want as u64).min(self.end).max(pos);
        if pos < self.at || need > self.at + self.buf.len() as u64 {
            let n = self.end.saturating_sub(pos).min(CHUNK.max(want) as u64) as usize;
            self.buf.resize(n, 0);
            self.src.read_exact_at(&mut self.buf, pos)?;
            self.at = pos;
        }
        Ok(&self.buf[(pos - self.at) as usize..])
    }
}

impl StringLayout {
    /// Parses the stored bytes of an `n`-element string tensor. With `crc = Some(masked)`, also
    /// checks the length checksum and the whole tensor's CRC as TensorFlow does.
    pub fn parse(stored: &[u8], n: u64, crc: Option<u32>) -> Result<StringLayout> {
        StringLayout::parse_at(stored, 0, stored.len() as u64, n, crc)
    }

    /// [`parse`](Self::parse) of the `size` bytes at `start` of `src`, read in pieces: memory
    /// use is the layout itself (8 bytes an element) and one buffer, whatever the tensor's size.
    pub(crate) fn parse_at<R: ReadAt + ?Sized>(
        src: &R,
        start: u64,
        size: u64,
        n: u64,
        crc: Option<u32>,
    ) -> Result<StringLayout> {
        if n > size {
            return Err(FormatError::BadString("more elements than bytes"));
        }
        let end = start
            .checked_add(size)
            .ok_or(FormatError::BadString("tensor runs past the end"))?;
        let mut win = Window::new(src, end);
        // Grown as lengths are read, so a claimed count costs nothing before the bytes prove it.
        let mut out_starts = Vec::with_capacity((n as usize).min(CHUNK) + 1);
        let mut pos = start;
        let mut out = 0u64;
        let mut sum = 0u64;
        let mut running = 0u32;
        for _ in 0..n {
            let (len, used) = varint::decode_u64(win.get(pos, 10)?)
                .ok_or(FormatError::BadString("bad length"))?;
            pos += used as u64;
            sum = sum
                .checked_add(len)
                .filter(|&s| s <= size)
                .ok_or(FormatError::BadString("lengths exceed the tensor"))?;
            out_starts.push(out);
            out += 8 + len;
            if crc.is_some() {
                running = match u32::try_from(len) {
                    Ok(l) => crc32c::crc32c_append(running, &l.to_le_bytes()),
                    Err(_) => crc32c::crc32c_append(running, &len.to_le_bytes()),
                };
            }
        }
        out_starts.push(out);
        let mut cs = [0u8; 4];
        match win.get(pos, 4)?.get(..4) {
            Some(b) => cs.copy_from_slice(b),
            None => return Err(FormatError::BadString("missing length checksum")),
        }
        let data_start = pos + 4 - start;
        if data_start + sum > size {
            return Err(FormatError::BadString("strings run past the tensor"));
        }
        if let Some(masked) = crc {
            if unmask_crc(u32::from_le_bytes(cs)) != running {
                return Err(FormatError::BadString("length checksum mismatch"));
            }
            running = crc32c::crc32c_append(running, &cs);
            for_each_chunk(src, start + data_start, sum, CHUNK, |c| {
                running = crc32c::crc32c_append(running, c);
                Ok(())
            })?;
            if mask_crc(running) != masked {
                return Err(FormatError::TensorCrc {
                    stored: unmask_crc(masked),
                    computed: running,
                });
            }
        }
        Ok(StringLayout {
            data_start,
            out_starts,
        })
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.out_starts.len() - 1
    }

    /// Where element `i`'s bytes lie in the stored tensor: `(offset, length)`; `i <= len()`
    /// (`i == len()` gives the end of the last element, length 0).
    pub(crate) fn element_range(&self, i: usize) -> (u64, u64) {
        let start = self.out_starts[i];
        let len = match self.out_starts.get(i + 1) {
            Some(next) => next - start - 8,
            None => 0,
        };
        (self.data_start + start - 8 * i as u64, len)
    }

    /// The bytes of element `i` (`i < len()`), from the stored tensor.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn element<'a>(&self, stored: &'a [u8], i: usize) -> &'a [u8] {
        let (src, len) = self.element_range(i);
        &stored[src as usize..(src + len) as usize]
    }

    /// Size of the served layout.
    pub(crate) fn served_len(&self) -> u64 {
        self.out_starts.last().copied().unwrap_or(0)
    }

    pub(crate) fn mem_size(&self) -> usize {
        self.out_starts.capacity() * 8 + std::mem::size_of::<Self>()
    }

    /// The elements `[first, last]` overlapping served bytes `[offset, end)`, for `offset < end
    /// <= served_len()`.
    fn elements_of(&self, offset: u64, end: u64) -> (usize, usize) {
        let first = self.out_starts.partition_point(|&s| s <= offset) - 1;
        let last = self.out_starts.partition_point(|&s| s < end) - 1;
        (first, last)
    }

    /// Served bytes `[offset, offset+len)` (clamped to the end).
    pub fn read(&self, stored: &[u8], offset: u64, len: usize) -> Vec<u8> {
        let Some((offset, end, first, a, b)) = self.span(offset, len) else {
            return Vec::new();
        };
        match stored.get(a as usize..b as usize) {
            Some(data) => self.assemble(data, a, offset, end, first),
            None => Vec::new(),
        }
    }

    /// [`read`](Self::read) of the tensor stored at `start` of `src`: reads only the stored
    /// bytes of the elements the range overlaps.
    pub(crate) fn read_at<R: ReadAt + ?Sized>(
        &self,
        src: &R,
        start: u64,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let Some((offset, end, first, a, b)) = self.span(offset, len) else {
            return Ok(Vec::new());
        };
        let mut data = vec![0u8; (b - a) as usize];
        let at = start
            .checked_add(a)
            .ok_or(FormatError::BadString("tensor runs past the end"))?;
        src.read_exact_at(&mut data, at)?;
        Ok(self.assemble(&data, a, offset, end, first))
    }

    /// For a read of `[offset, offset+len)`: the clamped `(offset, end)`, the first element, and
    /// the stored span `[a, b)` holding the bytes of the elements overlapped; `None` if empty.
    fn span(&self, offset: u64, len: usize) -> Option<(u64, u64, usize, u64, u64)> {
        let end = self.served_len().min(offset.saturating_add(len as u64));
        if offset >= end {
            return None;
        }
        let (first, last) = self.elements_of(offset, end);
        let (a, _) = self.element_range(first);
        let (l, ll) = self.element_range(last);
        Some((offset, end, first, a, l + ll))
    }

    /// Served bytes `[offset, end)` from `data`, the stored bytes from offset `base` on.
    fn assemble(&self, data: &[u8], base: u64, offset: u64, end: u64, first: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut i = first;
        let mut pos = offset;
        while pos < end && i + 1 < self.out_starts.len() {
            let start = self.out_starts[i];
            let (src, elem_len) = self.element_range(i);
            let header = elem_len.to_le_bytes();
            let in_elem = pos - start;
            let elem_end = (start + 8 + elem_len).min(end);
            if in_elem < 8 {
                let h_end = 8.min(elem_end - start);
                out.extend_from_slice(&header[in_elem as usize..h_end as usize]);
            }
            let d_from = in_elem.max(8) - 8;
            let d_to = elem_end - start;
            if d_to > 8 && d_from < d_to - 8 {
                let a = (src - base + d_from) as usize;
                let b = (src - base + d_to - 8) as usize;
                out.extend_from_slice(&data[a..b]);
            }
            pos = elem_end;
            i += 1;
        }
        out
    }
}

/// Checks a stored variant tensor (tf-format.md §4.3): per element a varint64 length, the
/// serialized `VariantTensorDataProto`, and the masked running CRC so far (over the length as an
/// 8-byte u64, then the bytes); `masked` is the entry's CRC of the whole.
#[cfg(any(test, feature = "testkit"))]
pub(crate) fn verify_variant(stored: &[u8], n: u64, masked: u32) -> Result<()> {
    verify_variant_at(stored, 0, stored.len() as u64, n, masked)
}

/// [`verify_variant`] of the `size` bytes at `start` of `src`, read in pieces.
pub(crate) fn verify_variant_at<R: ReadAt + ?Sized>(
    src: &R,
    start: u64,
    size: u64,
    n: u64,
    masked: u32,
) -> Result<()> {
    let end = start
        .checked_add(size)
        .ok_or(FormatError::BadString("tensor runs past the end"))?;
    let mut win = Window::new(src, end);
    let mut pos = start;
    let mut crc = 0u32;
    for _ in 0..n {
        let (len, used) = varint::decode_u64(win.get(pos, 10)?)
            .ok_or(FormatError::BadString("bad variant length"))?;
        pos += used as u64;
        let elem_end = pos
            .checked_add(len)
            .filter(|&e| e.checked_add(4).is_some_and(|e4| e4 <= end))
            .ok_or(FormatError::BadString(
                "variant element runs past the tensor",
            ))?;
        crc = crc32c::crc32c_append(crc, &len.to_le_bytes());
        for_each_chunk(src, pos, len, CHUNK, |c| {
            crc = crc32c::crc32c_append(crc, c);
            Ok(())
        })?;
        let mut cs = [0u8; 4];
        match win.get(elem_end, 4)?.get(..4) {
            Some(b) => cs.copy_from_slice(b),
            None => {
                return Err(FormatError::BadString(
                    "variant element runs past the tensor",
                ))
            }
        }
        if unmask_crc(u32::from_le_bytes(cs)) != crc {
            return Err(FormatError::BadString("variant element checksum mismatch"));
        }
        crc = crc32c::crc32c_append(crc, &cs);
        pos = elem_end + 4;
    }
    if mask_crc(crc) != masked {
        return Err(FormatError::TensorCrc {
            stored: unmask_crc(masked),
            computed: crc,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes like TensorFlow's writer; returns (bytes, masked crc).
    pub(crate) fn encode(strings: &[&[u8]]) -> (Vec<u8>, u32) {
        let mut out = Vec::new();
        let mut crc = 0u32;
        for s in strings {
            varint::encode_u64(s.len() as u64, &mut out);
            crc = crc32c::crc32c_append(crc, &(s.len() as u32).to_le_bytes());
        }
        let cs = mask_crc(crc).to_le_bytes();
        out.extend_from_slice(&cs);
        crc = crc32c::crc32c_append(crc, &cs);
        for s in strings {
            out.extend_from_slice(s);
            crc = crc32c::crc32c_append(crc, s);
        }
        (out, mask_crc(crc))
    }

    fn served(strings: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for s in strings {
            v.extend_from_slice(&(s.len() as u64).to_le_bytes());
            v.extend_from_slice(s);
        }
        v
    }

    #[test]
    fn every_range_matches_the_reference_layout() {
        let long = vec![7u8; 300];
        let strings: Vec<&[u8]> = vec![b"abc", b"", b"\x00\xff", &long, b"z"];
        let (bytes, crc) = encode(&strings);
        let layout = StringLayout::parse(&bytes, strings.len() as u64, Some(crc)).unwrap();
        let want = served(&strings);
        assert_eq!(layout.served_len(), want.len() as u64);
        for off in 0..want.len() {
            for len in [1usize, 3, 8, 9, 17, 400] {
                let end = (off + len).min(want.len());
                assert_eq!(
                    layout.read(&bytes, off as u64, len),
                    want[off..end],
                    "off {off} len {len}"
                );
            }
        }
    }

    #[test]
    fn empty_tensor_and_corruption() {
        let (bytes, crc) = encode(&[]);
        assert_eq!(bytes.len(), 4);
        assert_eq!(crc, mask_crc(crc32c::crc32c(&mask_crc(0).to_le_bytes())));
        let l = StringLayout::parse(&bytes, 0, Some(crc)).unwrap();
        assert_eq!(l.served_len(), 0);
        let (mut bytes, crc) = encode(&[b"hello", b"world"]);
        assert!(StringLayout::parse(&bytes, 2, Some(crc)).is_ok());
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(matches!(
            StringLayout::parse(&bytes, 2, Some(crc)),
            Err(FormatError::TensorCrc { .. })
        ));
        assert!(StringLayout::parse(&bytes, 2, None).is_ok());
        bytes[0] = 0x7f; // length far past the end
        assert!(StringLayout::parse(&bytes, 2, None).is_err());
        assert!(StringLayout::parse(&bytes[..3], 2, None).is_err());
        assert!(StringLayout::parse(&[0x80; 16], 3, None).is_err());
    }
}
