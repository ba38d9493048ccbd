//! The members of a zip file (a `.keras` model), read through [`ReadAt`]: the central directory
//! (ZIP64 too), each member's data offset past its local header, and its bytes: stored ones in
//! place, deflated ones inflated (bounded). Only what reading a `.keras` needs: a hundred lines
//! over `flate2`, where a zip crate would want a `Read + Seek` file and bring writers, archives
//! and encryption along.

use std::io::Read;

use super::{FormatError, ReadAt, Result};

const EOCD: u32 = 0x0605_4b50;
const EOCD64_LOCATOR: u32 = 0x0706_4b50;
const EOCD64: u32 = 0x0606_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;
/// The end record with the longest comment a zip can have.
const MAX_TAIL: u64 = 22 + 0xffff;
/// A central directory larger than this is refused (a `.keras` zip has three entries).
const MAX_DIRECTORY: u64 = 64 << 20;
/// Compression methods.
pub(crate) const STORED: u16 = 0;
pub(crate) const DEFLATED: u16 = 8;

fn bad(m: impl Into<String>) -> FormatError {
    FormatError::Zip(m.into())
}

/// One member of a zip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its path in the archive, as stored.
    pub name: String,
    /// Compression method (0 stored, 8 deflated).
    pub(crate) method: u16,
    /// Where its (compressed) bytes start in the zip, past its local header.
    pub(crate) data_offset: u64,
    pub(crate) compressed_size: u64,
    pub(crate) size: u64,
    /// CRC-32 of its uncompressed bytes, from the central directory.
    pub(crate) crc32: u32,
}

impl Member {
    pub(crate) fn stored(&self) -> bool {
        self.method == STORED && self.compressed_size == self.size
    }
}

fn u16_at(b: &[u8], i: usize) -> Result<u16> {
    b.get(i..i + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| bad("record cut short"))
}

fn u32_at(b: &[u8], i: usize) -> Result<u32> {
    b.get(i..i + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| bad("record cut short"))
}

fn u64_at(b: &[u8], i: usize) -> Result<u64> {
    let s = b.get(i..i + 8).ok_or_else(|| bad("record cut short"))?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

fn read<R: ReadAt + ?Sized>(src: &R, offset: u64, len: u64) -> Result<Vec<u8>> {
    if offset.checked_add(len).is_none_or(|e| e > src.len()) {
        return Err(bad(format!(
            "a record at {offset} ({len} bytes) runs past the end of the file ({} bytes)",
            src.len()
        )));
    }
    let mut v = vec![0u8; len as usize];
    src.read_exact_at(&mut v, offset)?;
    Ok(v)
}

/// Every member of the zip `src`, in central-directory order.
pub fn members<R: ReadAt + ?Sized>(src: &R) -> Result<Vec<Member>> {
    let len = src.len();
    let tail_start = len.saturating_sub(MAX_TAIL);
    let tail = read(src, tail_start, len - tail_start)?;
    let at = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| u32_at(&tail, i).ok() == Some(EOCD))
        .ok_or_else(|| bad("no end of central directory record: not a zip, or cut short"))?;
    let eocd = &tail[at..];
    let mut entries = u64::from(u16_at(eocd, 10)?);
    let mut cd_size = u64::from(u32_at(eocd, 12)?);
    let mut cd_offset = u64::from(u32_at(eocd, 16)?);
    if entries == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff {
        // ZIP64: the locator sits just before the end record.
        let loc_at = (tail_start + at as u64)
            .checked_sub(20)
            .ok_or_else(|| bad("ZIP64 locator missing"))?;
        let loc = read(src, loc_at, 20)?;
        if u32_at(&loc, 0)? != EOCD64_LOCATOR {
            return Err(bad("ZIP64 locator missing"));
        }
        let rec = read(src, u64_at(&loc, 8)?, 56)?;
        if u32_at(&rec, 0)? != EOCD64 {
            return Err(bad("bad ZIP64 end of central directory record"));
        }
        entries = u64_at(&rec, 32)?;
        cd_size = u64_at(&rec, 40)?;
        cd_offset = u64_at(&rec, 48)?;
    }
    if cd_size > MAX_DIRECTORY || entries > cd_size / 46 {
        return Err(bad(format!(
            "central directory of {cd_size} bytes for {entries} entries"
        )));
    }
    let cd = read(src, cd_offset, cd_size)?;
    let mut out = Vec::with_capacity(entries as usize);
    let mut i = 0usize;
    for _ in 0..entries {
        if u32_at(&cd, i)? != CENTRAL {
            return Err(bad("bad central directory entry"));
        }
        let method = u16_at(&cd, i + 10)?;
        let crc32 = u32_at(&cd, i + 16)?;
        let mut compressed_size = u64::from(u32_at(&cd, i + 20)?);
        let mut size = u64::from(u32_at(&cd, i + 24)?);
        let name_len = usize::from(u16_at(&cd, i + 28)?);
        let extra_len = usize::from(u16_at(&cd, i + 30)?);
        let comment_len = usize::from(u16_at(&cd, i + 32)?);
        let mut local = u64::from(u32_at(&cd, i + 42)?);
        let name = cd
            .get(i + 46..i + 46 + name_len)
            .ok_or_else(|| bad("entry name cut short"))?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = cd
            .get(i + 46 + name_len..i + 46 + name_len + extra_len)
            .ok_or_else(|| bad("entry extra field cut short"))?;
        // ZIP64 extra field: the 64-bit values of the fields that are all ones, in order.
        let mut e = 0usize;
        while e + 4 <= extra.len() {
            let (id, n) = (u16_at(extra, e)?, usize::from(u16_at(extra, e + 2)?));
            let body = extra
                .get(e + 4..e + 4 + n)
                .ok_or_else(|| bad("extra field cut short"))?;
            if id == 1 {
                let mut k = 0usize;
                for field in [&mut size, &mut compressed_size, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64_at(body, k)?;
                        k += 8;
                    }
                }
            }
            e += 4 + n;
        }
        let lh = read(src, local, 30)?;
        if u32_at(&lh, 0)? != LOCAL {
            return Err(bad(format!("{name}: bad local header")));
        }
        let data_offset = local + 30 + u64::from(u16_at(&lh, 26)?) + u64::from(u16_at(&lh, 28)?);
        if data_offset
            .checked_add(compressed_size)
            .is_none_or(|end| end > len)
        {
            return Err(bad(format!(
                "{name}: its data runs past the end of the file"
            )));
        }
        out.push(Member {
            name,
            method,
            data_offset,
            compressed_size,
            size,
            crc32,
        });
        i += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}

/// Sequential reads of a range of a [`ReadAt`].
struct RangeRead<'a, R: ?Sized> {
    src: &'a R,
    at: u64,
    end: u64,
}

impl<R: ReadAt + ?Sized> Read for RangeRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.end - self.at).min(buf.len() as u64) as usize;
        self.src
            .read_exact_at(&mut buf[..n], self.at)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A member's bytes (inflated if deflated), refused above `max` bytes, checked against its
/// CRC-32.
pub fn read_member<R: ReadAt + ?Sized>(src: &R, m: &Member, max: u64) -> Result<Vec<u8>> {
    if m.size > max {
        return Err(bad(format!(
            "{}: {} bytes, more than the {max}-byte limit",
            m.name, m.size
        )));
    }
    let raw = RangeRead {
        src,
        at: m.data_offset,
        end: m.data_offset + m.compressed_size,
    };
    let mut out = Vec::new();
    let r = match m.method {
        STORED => raw.take(m.size).read_to_end(&mut out),
        DEFLATED => flate2::read::DeflateDecoder::new(raw)
            .take(m.size.saturating_add(1))
            .read_to_end(&mut out),
        other => return Err(bad(format!("{}: compression method {other}", m.name))),
    };
    r.map_err(|e| bad(format!("{}: {e}", m.name)))?;
    if out.len() as u64 != m.size {
        return Err(bad(format!(
            "{}: {} bytes, the directory says {}",
            m.name,
            out.len(),
            m.size
        )));
    }
    let mut crc = flate2::Crc::new();
    crc.update(&out);
    if crc.sum() != m.crc32 {
        return Err(bad(format!(
            "{}: CRC-32 mismatch (stored {:#010x}, computed {:#010x})",
            m.name,
            m.crc32,
            crc.sum()
        )));
    }
    Ok(out)
}

/// Checks a stored member's bytes against its CRC-32, reading them in chunks.
pub(crate) fn check_crc<R: ReadAt + Sync + ?Sized>(src: &R, m: &Member) -> Result<()> {
    check_crc_with(m, 1, |at, len| crc_of_range(src, at, len))
}

/// The CRC-32 of bytes `[at, at + len)` of `src`, read in chunks of 1 MiB.
pub(crate) fn crc_of_range<R: ReadAt + ?Sized>(src: &R, at: u64, len: u64) -> Result<flate2::Crc> {
    let mut crc = flate2::Crc::new();
    let mut buf = vec![0u8; (1usize << 20).min(usize::try_from(len).unwrap_or(usize::MAX))];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], at + done)?;
        crc.update(&buf[..n]);
        done += n as u64;
    }
    Ok(crc)
}

/// Checks a stored member's bytes against its CRC-32, made of the CRC-32s of up to `threads`
/// consecutive parts of it (each at least 32 MiB), each computed by `crc_of(offset in the
/// file, length)` on a thread of its own, and combined in order.
pub(crate) fn check_crc_with(
    m: &Member,
    threads: usize,
    crc_of: impl Fn(u64, u64) -> Result<flate2::Crc> + Sync,
) -> Result<()> {
    if !m.stored() {
        return Err(bad(format!("{}: not stored", m.name)));
    }
    let parts = (threads as u64).clamp(1, (m.size / (32 << 20)).max(1));
    let step = m.size.div_ceil(parts).max(1);
    let ranges: Vec<(u64, u64)> = (0..parts)
        .map(|k| (k * step, ((k + 1) * step).min(m.size)))
        .filter(|(a, b)| a < b)
        .map(|(a, b)| (m.data_offset + a, b - a))
        .collect();
    let crcs: Vec<Result<flate2::Crc>> = if ranges.len() <= 1 {
        ranges.iter().map(|&(at, len)| crc_of(at, len)).collect()
    } else {
        std::thread::scope(|sc| {
            let crc_of = &crc_of;
            let handles: Vec<_> = ranges
                .iter()
                .map(|&(at, len)| sc.spawn(move || crc_of(at, len)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(bad(format!("{}: a checking thread failed", m.name)))
                    })
                })
                .collect()
        })
    };
    let mut crc = flate2::Crc::new();
    for c in crcs {
        crc.combine(&c?);
    }
    if crc.sum() != m.crc32 {
        return Err(bad(format!(
            "CRC-32 mismatch (stored {:#010x}, computed {:#010x})",
            m.crc32,
            crc.sum()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored member of `len` bytes at offset 7 of a buffer, its CRC-32 `crc`.
    fn member(len: u64, crc: u32) -> Member {
        Member {
            name: "m".into(),
            method: STORED,
            crc32: crc,
            compressed_size: len,
            size: len,
            data_offset: 7,
        }
    }

    /// The CRC-32 made of parts on threads is the one of the whole (the parts combined in
    /// order), for sizes that split unevenly, and a wrong one is a mismatch in words.
    #[test]
    fn a_crc_made_of_parts_is_the_crc_of_the_whole() {
        for len in [0u64, 1, 5, (64 << 20) + 3, (96 << 20) + 1] {
            let buf: Vec<u8> = (0..len + 7).map(|i| (i * 2654435761 % 251) as u8).collect();
            let mut whole = flate2::Crc::new();
            whole.update(&buf[7..]);
            let m = member(len, whole.sum());
            for threads in [1, 2, 3, 4] {
                check_crc_with(&m, threads, |at, n| crc_of_range(&buf[..], at, n))
                    .unwrap_or_else(|e| panic!("{len} bytes on {threads} threads: {e}"));
            }
            let e = check_crc(&buf[..], &member(len, whole.sum() ^ 1)).expect_err("a wrong CRC-32");
            assert!(e.to_string().contains("CRC-32 mismatch"), "{e}");
        }
    }
}
