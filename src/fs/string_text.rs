//! The `text/` file of a string tensor: one escaped element per line. An escape takes 1 to 4
//! bytes per byte, so the text's size depends on the bytes themselves: it is found by one
//! rendering pass over the tensor (its `.bin` read in [`STEP`]-byte pieces, the text counted and
//! dropped) when the file is first `stat`ed. String tensors are small as a rule (vocabularies,
//! file names, the object graph); a pass costs about what reading the tensor costs.
//!
//! The pass also keeps *marks*: the renderer's state (a clone, [`TextRenderer`] is small) with
//! its `.bin` and text offsets, at least `spacing` text bytes apart and at most [`MAX_MARKS`]
//! (when full, every other one is dropped and the spacing doubles). A read renders from the last
//! mark at or before its offset; a *cursor* (where the last read ended, with the text rendered
//! past it) makes sequential reads continue without rendering anything twice.
//!
//! Memory: the marks (under 100 bytes each), the cursor's text (at most one step of text past
//! the last read), and the read being served.

use crate::sync::lock;
use bytes::Bytes;
use std::sync::{Arc, Mutex};

use crate::error::{FsError, FsResult};
use crate::formats::tensors::TensorData;
use crate::parse::dtype::DType;
use crate::parse::FormatError;
use crate::render::values::TextRenderer;

/// `.bin` bytes rendered at a time.
pub(crate) const STEP: u64 = 64 << 10;
/// Text bytes between marks at first.
const FIRST_SPACING: u64 = 256 << 10;
/// Most marks kept per file.
pub(crate) const MAX_MARKS: usize = 1024;

/// A point to render from: the renderer after the `.bin` bytes before `bin`, whose text ends at
/// `text`.
#[derive(Clone)]
struct Mark {
    text: u64,
    bin: u64,
    r: TextRenderer,
}

/// Where the last read ended: `pending` is text from offset `text` on, up to where the renderer
/// (at `.bin` offset `bin`) stands.
struct Cursor {
    text: u64,
    pending: Vec<u8>,
    bin: u64,
    r: TextRenderer,
}

impl Cursor {
    fn end(&self) -> u64 {
        self.text + self.pending.len() as u64
    }

    /// Drops the text before `at` (no further than the cursor's end).
    fn drop_before(&mut self, at: u64) {
        let n = (at.saturating_sub(self.text) as usize).min(self.pending.len());
        self.pending.drain(..n);
        self.text += n as u64;
    }
}

/// One string tensor's `text/` file; see the module doc.
pub(crate) struct StringText {
    data: Arc<dyn TensorData>,
    /// For messages: what the file shows and where its bytes come from.
    what: String,
    file: String,
    len: u64,
    marks: Vec<Mark>,
    cursor: Mutex<Option<Cursor>>,
}

impl StringText {
    /// Renders the whole text once (keeping its length and marks). `what` and `file` name the
    /// tensor in errors (`tensor KEY`, the checkpoint path). An error if the bytes do not hold
    /// the tensor's elements exactly, or cannot be read.
    pub(crate) fn new(
        dtype: DType,
        shape: &[u64],
        data: Arc<dyn TensorData>,
        what: String,
        file: String,
    ) -> FsResult<StringText> {
        let mut t = StringText {
            data,
            what,
            file,
            len: 0,
            marks: Vec::new(),
            cursor: Mutex::new(None),
        };
        let mut r = TextRenderer::new(dtype, shape).map_err(|e| t.error(e.to_string()))?;
        t.marks.push(Mark {
            text: 0,
            bin: 0,
            r: r.clone(),
        });
        let mut spacing = FIRST_SPACING;
        let mut text = 0u64;
        let mut bin = 0u64;
        let mut buf = Vec::new();
        let size = t.data.size();
        while bin < size {
            buf.clear();
            bin = t.step(&mut r, bin, &mut buf)?;
            text += buf.len() as u64;
            let last = t.marks.last().map_or(0, |m| m.text);
            if text >= last.saturating_add(spacing) {
                t.marks.push(Mark {
                    text,
                    bin,
                    r: r.clone(),
                });
                if t.marks.len() > MAX_MARKS {
                    let mut i = 0;
                    t.marks.retain(|_| {
                        i += 1;
                        i % 2 == 1
                    });
                    spacing = spacing.saturating_mul(2);
                }
            }
        }
        r.finish().map_err(|e| t.error(e.to_string()))?;
        t.len = text;
        Ok(t)
    }

    /// Bytes of the whole text.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Bytes of memory this file may come to hold (for the LRU that keeps it): the marks, and
    /// the cursor's text — at most one step's (a string byte is at most 4 text bytes, `\xHH`; an
    /// 8-byte length 1, the newline), and never more than the whole text.
    pub(crate) fn weight(&self) -> usize {
        let cursor = self.len.min(4 * STEP) as usize;
        512 + self.marks.len() * (std::mem::size_of::<Mark>() + 16) + cursor
    }

    fn error(&self, msg: String) -> FsError {
        FsError::corrupt(&self.what, &self.file, FormatError::Text(msg))
    }

    /// Renders the `.bin` piece at `bin` (up to [`STEP`] bytes) into `out`; returns where the
    /// next piece starts.
    fn step(&self, r: &mut TextRenderer, bin: u64, out: &mut Vec<u8>) -> FsResult<u64> {
        let len = STEP.min(self.data.size().saturating_sub(bin)) as usize;
        let bytes = self.data.read(bin, len)?;
        if bytes.len() != len {
            return Err(self.error(format!(
                "{} bytes at offset {bin} where {len} were expected",
                bytes.len()
            )));
        }
        r.push(&bytes, out).map_err(|e| self.error(e.to_string()))?;
        Ok(bin + len as u64)
    }

    /// Text bytes `[offset, offset + size)`, clamped to the end of the text.
    pub(crate) fn read(&self, offset: u64, size: usize) -> FsResult<Bytes> {
        let end = offset.saturating_add(size as u64).min(self.len);
        if offset >= end {
            return Ok(Bytes::new());
        }
        let kept = lock(&self.cursor)
            .take()
            .filter(|c| c.text <= offset && offset <= c.end());
        let mut c = match kept {
            Some(c) => c,
            None => {
                let i = self.marks.partition_point(|m| m.text <= offset);
                let m = self
                    .marks
                    .get(i.saturating_sub(1))
                    .ok_or(FsError::NotFound)?;
                Cursor {
                    text: m.text,
                    pending: Vec::new(),
                    bin: m.bin,
                    r: m.r.clone(),
                }
            }
        };
        let size = self.data.size();
        while c.end() < end {
            if c.bin >= size {
                // The text is shorter than the first pass found: the bytes changed.
                return Err(self.error(format!("text ends at {}, not at {}", c.end(), self.len)));
            }
            c.drop_before(offset);
            c.bin = self.step(&mut c.r, c.bin, &mut c.pending)?;
        }
        let a = (offset - c.text) as usize;
        let out = c.pending[a..(end - c.text) as usize].to_vec();
        c.drop_before(end);
        *lock(&self.cursor) = Some(c);
        Ok(out.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::values::render_all;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A tensor held in memory, counting the bytes read from it.
    struct Mem(Vec<u8>, Arc<AtomicU64>);

    impl TensorData for Mem {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
            let r = super::super::subtree::slice_of(&self.0, offset, len);
            self.1.fetch_add(r.len() as u64, Ordering::Relaxed);
            Ok(r)
        }
    }

    fn strings(n: u32) -> Vec<u8> {
        let mut s = Vec::new();
        for i in 0..n {
            let body = format!("s{i}\t{}\"\u{e9}", "x".repeat((i % 37) as usize));
            let mut body = body.into_bytes();
            if i % 11 == 0 {
                body.extend_from_slice(b"\xff\x00\xe2\x82");
            }
            s.extend_from_slice(&(body.len() as u64).to_le_bytes());
            s.extend_from_slice(&body);
        }
        s
    }

    fn file(n: u32, bytes: Vec<u8>) -> (StringText, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let t = StringText::new(
            DType(7),
            &[n as u64],
            Arc::new(Mem(bytes, count.clone())),
            "tensor t".into(),
            "test".into(),
        )
        .unwrap();
        (t, count)
    }

    #[test]
    fn size_and_sequential_reads() {
        let bytes = strings(60_000);
        let whole = render_all(DType(7), &[60_000], &bytes).unwrap();
        assert!(whole.len() as u64 > 4 * FIRST_SPACING);
        let (t, read) = file(60_000, bytes.clone());
        assert_eq!(t.len(), whole.len() as u64);
        assert_eq!(read.load(Ordering::Relaxed), bytes.len() as u64, "one pass");
        assert!(t.marks.len() > 4);
        read.store(0, Ordering::Relaxed);
        let mut out = Vec::new();
        loop {
            let r = t.read(out.len() as u64, 128 << 10).unwrap();
            if r.is_empty() {
                break;
            }
            out.extend_from_slice(&r);
        }
        assert!(out == whole);
        // A sequential read renders each byte once (plus the first mark's step).
        assert!(read.load(Ordering::Relaxed) <= bytes.len() as u64 + STEP);
    }

    #[test]
    fn reads_at_any_offset_match_the_whole_text() {
        let bytes = strings(40_000);
        let whole = render_all(DType(7), &[40_000], &bytes).unwrap();
        let (t, _) = file(40_000, bytes);
        let mut next = crate::testkit::rng::xorshift(12345);
        for _ in 0..300 {
            let x = next();
            let off = (x >> 20) % (whole.len() as u64 + 10);
            let n = ((x >> 8) % 70_000) as usize;
            let got = t.read(off, n).unwrap();
            let a = (off as usize).min(whole.len());
            let b = (a + n).min(whole.len());
            assert_eq!(got, &whole[a..b], "read({off}, {n})");
        }
        assert_eq!(t.read(whole.len() as u64, 10).unwrap(), &b""[..]);
        assert_eq!(t.read(0, 0).unwrap(), &b""[..]);
    }

    #[test]
    fn marks_stay_bounded_and_a_long_element_is_split() {
        // A single element of 40 MiB of NUL bytes (160 MiB of `\x00`): marks fall inside it
        // (renderer clones mid-element), so a read near its end renders one step, not all of it.
        let body = vec![0u8; 40 << 20];
        let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let (t, _) = file(1, bytes);
        assert_eq!(t.len(), 4 * (40 << 20) + 1);
        assert!(t.marks.len() > 100 && t.marks.len() <= MAX_MARKS);
        let off = t.len() - 1000;
        let got = t.read(off, 2000).unwrap();
        assert_eq!(got.len(), 1000);
        assert_eq!(&got[got.len() - 5..], b"\\x00\n");
    }

    #[test]
    fn damaged_bytes_are_errors() {
        // Bytes that end inside the tensor, or hold more elements than the shape.
        let bytes = strings(10);
        let short = StringText::new(
            DType(7),
            &[11],
            Arc::new(Mem(bytes.clone(), Arc::default())),
            "t".into(),
            "f".into(),
        );
        assert!(short.is_err());
        let long = StringText::new(
            DType(7),
            &[9],
            Arc::new(Mem(bytes, Arc::default())),
            "t".into(),
            "f".into(),
        );
        assert!(long.is_err());
        let mut claimed = u64::MAX.to_le_bytes().to_vec();
        claimed.extend_from_slice(b"abc");
        assert!(StringText::new(
            DType(7),
            &[1],
            Arc::new(Mem(claimed, Arc::default())),
            "t".into(),
            "f".into(),
        )
        .is_err());
    }
}
