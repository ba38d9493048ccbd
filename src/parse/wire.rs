//! Protobuf wire format, scanned without decoding: the fields of a message as byte ranges.
//! Graphs can be near protobuf's 2 GB limit, so tfmount indexes them by walking fields and keeps
//! only offsets; messages are decoded one at a time, when a file is read.

use super::{FormatError, Result};
use crate::parse::varint::decode_u64;

/// Wire types (tf-format.md §10 wire notes; groups are not used by TensorFlow's messages).
pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const FIXED32: u8 = 5;

/// One field occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) number: u32,
    pub(crate) wire: u8,
    /// Varint and fixed values; for `LEN`, the payload length.
    pub(crate) value: u64,
    /// The whole field (key, length, payload) within the scanned buffer.
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Where the payload starts (for `LEN`: after the length).
    pub(crate) payload: usize,
}

impl Field {
    /// A pseudo-field `number` whose payload is a whole buffer of `len` bytes (a file that is
    /// one message, read as if it were that field of a parent).
    pub(crate) fn whole(number: u32, len: usize) -> Field {
        Field {
            number,
            wire: LEN,
            value: len as u64,
            start: 0,
            end: len,
            payload: 0,
        }
    }

    pub(crate) fn payload_range(&self) -> std::ops::Range<usize> {
        self.payload..self.end
    }
}

/// Iterates the fields of the message `buf[start..end]`; offsets are relative to `buf`.
pub(crate) struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    failed: bool,
}

pub(crate) fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        buf,
        pos: 0,
        end: buf.len(),
        failed: false,
    }
}

/// Fields of the sub-message `buf[range]`, with offsets into `buf`.
pub(crate) fn fields_in(buf: &[u8], range: std::ops::Range<usize>) -> Fields<'_> {
    let end = range.end.min(buf.len());
    Fields {
        buf,
        pos: range.start.min(end),
        end,
        failed: false,
    }
}

fn bad(msg: &str) -> FormatError {
    FormatError::Proto(msg.to_string())
}

impl Fields<'_> {
    fn varint(&mut self) -> Result<u64> {
        let (v, n) = decode_u64(&self.buf[self.pos..self.end]).ok_or(FormatError::BadVarint)?;
        self.pos += n;
        Ok(v)
    }

    fn field(&mut self) -> Result<Field> {
        let start = self.pos;
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| bad("field number out of range"))?;
        if number == 0 {
            return Err(bad("field number 0"));
        }
        let wire = (key & 7) as u8;
        let left = (self.end - self.pos) as u64;
        let (value, payload) = match wire {
            VARINT => (self.varint()?, self.pos),
            FIXED64 | FIXED32 => {
                let n = if wire == FIXED64 { 8 } else { 4 };
                if left < n as u64 {
                    return Err(bad("truncated fixed-width field"));
                }
                let mut v = [0u8; 8];
                v[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                (u64::from_le_bytes(v), self.pos - n)
            }
            LEN => {
                let len = self.varint()?;
                if len > (self.end - self.pos) as u64 {
                    return Err(bad("length-delimited field runs past its message"));
                }
                let p = self.pos;
                self.pos += len as usize;
                (len, p)
            }
            _ => return Err(bad("unsupported wire type (group or invalid)")),
        };
        Ok(Field {
            number,
            wire,
            value,
            start,
            end: self.pos,
            payload,
        })
    }
}

impl Iterator for Fields<'_> {
    type Item = Result<Field>;

    fn next(&mut self) -> Option<Result<Field>> {
        if self.failed || self.pos >= self.end {
            return None;
        }
        let r = self.field();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

/// The payload of the last occurrence of `LEN` field `number` in `buf[range]` (proto3: the last
/// scalar occurrence wins).
pub(crate) fn last_len(
    buf: &[u8],
    range: std::ops::Range<usize>,
    number: u32,
) -> Result<Option<Field>> {
    let mut found = None;
    for f in fields_in(buf, range) {
        let f = f?;
        if f.number == number && f.wire == LEN {
            found = Some(f);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_fields_and_rejects_damage() {
        // field 1 varint 150, field 2 "hi", field 3 fixed32, field 4 fixed64
        let mut m = vec![0x08, 0x96, 0x01, 0x12, 0x02, b'h', b'i', 0x1d, 1, 2, 3, 4];
        m.extend_from_slice(&[0x21, 1, 0, 0, 0, 0, 0, 0, 0]);
        let f: Vec<Field> = fields(&m).collect::<Result<_>>().unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!((f[0].number, f[0].value), (1, 150));
        assert_eq!(&m[f[1].payload_range()], b"hi");
        assert_eq!(f[2].value, 0x0403_0201);
        assert_eq!(f[3].value, 1);
        assert_eq!(f[3].end, m.len());
        // Every truncation either ends cleanly at a field boundary or reports an error.
        for cut in 0..m.len() {
            let ends: Vec<usize> = f.iter().map(|x| x.end).collect();
            let r: Result<Vec<Field>> = fields(&m[..cut]).collect();
            assert_eq!(r.is_ok(), cut == 0 || ends.contains(&cut), "cut {cut}");
        }
        assert!(fields(&[0x0b]).next().unwrap().is_err()); // group start
        assert!(fields(&[0x00, 0x00]).next().unwrap().is_err()); // field 0
        assert!(fields(&[0x12, 0xff, 0xff, 0xff, 0xff, 0x0f])
            .next()
            .unwrap()
            .is_err());
    }
}
