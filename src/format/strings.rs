//! String tensors (tf-format.md §4.2): varint lengths, a masked CRC of the lengths, the bytes.
//! tfmount serves each element as an 8-byte little-endian length followed by its bytes.

use super::{mask_crc, unmask_crc, varint, FormatError, Result};

/// Where each element lies, both in the stored bytes and in the served layout.
#[derive(Debug, Clone)]
pub struct StringLayout {
    /// Offset of the first string's bytes in the stored tensor.
    data_start: u64,
    /// `out_starts[i]` = served offset of element i's length field; last = total served size.
    out_starts: Vec<u64>,
}

impl StringLayout {
    /// Parses the stored bytes of an `n`-element string tensor. With `crc = Some(masked)`, also
    /// checks the length checksum and the whole tensor's CRC as TensorFlow does.
    pub fn parse(stored: &[u8], n: u64, crc: Option<u32>) -> Result<StringLayout> {
        if n > stored.len() as u64 {
            return Err(FormatError::BadString("more elements than bytes"));
        }
        let mut out_starts = Vec::with_capacity(n as usize + 1);
        let mut pos = 0usize;
        let mut out = 0u64;
        let mut sum = 0u64;
        let mut running = 0u32;
        for _ in 0..n {
            let (len, used) =
                varint::decode_u64(&stored[pos..]).ok_or(FormatError::BadString("bad length"))?;
            pos += used;
            sum = sum
                .checked_add(len)
                .filter(|&s| s <= stored.len() as u64)
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
        let cs = stored
            .get(pos..pos + 4)
            .ok_or(FormatError::BadString("missing length checksum"))?;
        let data_start = pos as u64 + 4;
        if data_start + sum > stored.len() as u64 {
            return Err(FormatError::BadString("strings run past the tensor"));
        }
        if let Some(masked) = crc {
            let stored_cs = u32::from_le_bytes([cs[0], cs[1], cs[2], cs[3]]);
            if unmask_crc(stored_cs) != running {
                return Err(FormatError::BadString("length checksum mismatch"));
            }
            running = crc32c::crc32c_append(running, cs);
            let end = (data_start + sum) as usize;
            running = crc32c::crc32c_append(running, &stored[data_start as usize..end]);
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
    pub fn len(&self) -> usize {
        self.out_starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of element `i` (`i < len()`), from the stored tensor.
    pub fn element<'a>(&self, stored: &'a [u8], i: usize) -> &'a [u8] {
        let start = self.out_starts[i];
        let len = self.out_starts[i + 1] - start - 8;
        let src = (self.data_start + start - 8 * i as u64) as usize;
        &stored[src..src + len as usize]
    }

    /// Size of the served layout.
    pub fn served_len(&self) -> u64 {
        self.out_starts.last().copied().unwrap_or(0)
    }

    pub fn mem_size(&self) -> usize {
        self.out_starts.capacity() * 8 + std::mem::size_of::<Self>()
    }

    /// Served bytes `[offset, offset+len)` (clamped to the end).
    pub fn read(&self, stored: &[u8], offset: u64, len: usize) -> Vec<u8> {
        let total = self.served_len();
        let end = total.min(offset.saturating_add(len as u64));
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        if offset >= end {
            return out;
        }
        // Element containing `offset`.
        let mut i = self.out_starts.partition_point(|&s| s <= offset) - 1;
        let mut pos = offset;
        while pos < end && i + 1 < self.out_starts.len() {
            let start = self.out_starts[i];
            let elem_len = self.out_starts[i + 1] - start - 8;
            let mut header = [0u8; 8];
            header.copy_from_slice(&elem_len.to_le_bytes());
            let src = self.data_start + start - 8 * i as u64;
            let in_elem = pos - start;
            let elem_end = (start + 8 + elem_len).min(end);
            if in_elem < 8 {
                let h_end = 8.min(elem_end - start);
                out.extend_from_slice(&header[in_elem as usize..h_end as usize]);
            }
            let d_from = in_elem.max(8) - 8;
            let d_to = elem_end - start;
            if d_to > 8 && d_from < d_to - 8 {
                let a = (src + d_from) as usize;
                let b = (src + d_to - 8) as usize;
                out.extend_from_slice(&stored[a..b]);
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
pub fn verify_variant(stored: &[u8], n: u64, masked: u32) -> Result<()> {
    let mut pos = 0usize;
    let mut crc = 0u32;
    for _ in 0..n {
        let (len, used) = varint::decode_u64(stored.get(pos..).unwrap_or(&[]))
            .ok_or(FormatError::BadString("bad variant length"))?;
        pos += used;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e.checked_add(4).is_some_and(|e4| e4 <= stored.len()))
            .ok_or(FormatError::BadString(
                "variant element runs past the tensor",
            ))?;
        crc = crc32c::crc32c_append(crc, &len.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &stored[pos..end]);
        let cs = &stored[end..end + 4];
        if unmask_crc(u32::from_le_bytes([cs[0], cs[1], cs[2], cs[3]])) != crc {
            return Err(FormatError::BadString("variant element checksum mismatch"));
        }
        crc = crc32c::crc32c_append(crc, cs);
        pos = end + 4;
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
