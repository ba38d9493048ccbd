//! A tensor's values as text (`text/<key>.txt`) served as a *growing file*: its exact size is
//! only known once every value was rendered, so until then the size reported is the text
//! rendered so far, kept at least [`AHEAD`] bytes beyond the furthest read, and the attributes
//! are marked as not to be cached ([`Size::Growing`]). A reader that reaches the reported end
//! makes the kernel ask again (see `src/fuse.rs`), and finds more.
//!
//! State per file ([`GrowingText`]):
//! - *checkpoints*: `(text offset, element index, .bin offset)` at element boundaries, at least
//!   `spacing` text bytes apart, at most [`MAX_CHECKPOINTS`] (when full, every other one is
//!   dropped and the spacing doubles). A read at any offset renders from the nearest checkpoint
//!   before it ([`TextRenderer::at_element`]).
//! - *cursors*: up to [`MAX_CURSORS`] renderers where reads left off, each with a window of the
//!   text it rendered last: up to [`BEHIND`] bytes before the last read (the kernel's readahead
//!   sends neighbouring reads in any order, and reads a page again after the size changed) and
//!   what was rendered past it (one step of [`STEP`] `.bin` bytes, or the text rendered ahead).
//!   A sequential read continues exactly where the previous one stopped.
//! - the furthest text offset rendered and the furthest read end, and the total once known.
//!
//! Memory: checkpoints are 24 bytes each; a cursor's window is bounded by [`BEHIND`], [`AHEAD`]
//! and one step of text together (plus the size of the read being served). Files are kept in the
//! byte-bounded LRU of their subtree.

use std::sync::{Arc, Mutex};

use super::subtree::Size;
use crate::error::{FsError, FsResult};
use crate::format::dtype::DType;
use crate::format::FormatError;
use crate::render::values::{TextRenderer, MAX_TEXT_PER_BYTE};
use crate::source::tensors::TensorData;

/// Text rendered ahead of the furthest read (and on the first `stat`): files shorter than this
/// get their exact size at once.
pub const AHEAD: u64 = 1 << 20;
/// `.bin` bytes rendered at a time (a multiple of every element size).
pub const STEP: u64 = 32 << 10;
/// Most checkpoints kept per file.
pub const MAX_CHECKPOINTS: usize = 2048;
/// Text bytes between checkpoints at first.
const FIRST_SPACING: u64 = 256 << 10;
/// Most cursors kept per file.
pub const MAX_CURSORS: usize = 2;
/// Text kept before the last read in a cursor's window.
pub const BEHIND: u64 = 1 << 20;
/// Text dropped from the front of a window at once (fewer, larger moves).
const TRIM: u64 = 256 << 10;

/// How far a file was rendered: what its size was reported as, and its total once known. Kept
/// apart from the file's state (which may be dropped), so that a new state never reports less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    pub rendered: u64,
    pub total: Option<u64>,
}

/// A restart point at an element boundary.
#[derive(Debug, Clone, Copy)]
struct Checkpoint {
    text: u64,
    elem: u64,
    bin: u64,
}

/// A renderer where a read left off.
struct Cursor {
    /// Text offset of `pending[0]`.
    text: u64,
    /// The window: text rendered last, up to where the renderer is.
    pending: Vec<u8>,
    /// `.bin` offset the renderer has consumed up to.
    bin: u64,
    r: TextRenderer,
}

impl Cursor {
    fn end(&self) -> u64 {
        self.text + self.pending.len() as u64
    }

    /// Drops window text before `at`, lazily: only once there is [`TRIM`] of it, or all of the
    /// window.
    fn trim(&mut self, at: u64) {
        let n = (at.saturating_sub(self.text) as usize).min(self.pending.len());
        if n as u64 >= TRIM || n == self.pending.len() {
            self.pending.drain(..n);
            self.text += n as u64;
        }
    }
}

struct State {
    total: Option<u64>,
    rendered_to: u64,
    read_to: u64,
    spacing: u64,
    checkpoints: Vec<Checkpoint>,
    /// Least recently used first.
    cursors: Vec<Cursor>,
}

/// One `text/` file; see the module doc.
pub struct GrowingText {
    dtype: DType,
    shape: Vec<u64>,
    data: Arc<dyn TensorData>,
    /// For messages: what the file shows and where its bytes come from.
    what: String,
    file: String,
    state: Mutex<State>,
}

impl GrowingText {
    /// The text file of a tensor of `dtype` and `shape` whose bytes are `data`. `what` and
    /// `file` name it in errors (`tensor KEY`, the checkpoint path).
    pub fn new(
        dtype: DType,
        shape: Vec<u64>,
        data: Arc<dyn TensorData>,
        what: String,
        file: String,
    ) -> FsResult<GrowingText> {
        let g = GrowingText {
            dtype,
            shape,
            data,
            what,
            file,
            state: Mutex::new(State {
                total: None,
                rendered_to: 0,
                read_to: 0,
                spacing: FIRST_SPACING,
                checkpoints: vec![Checkpoint {
                    text: 0,
                    elem: 0,
                    bin: 0,
                }],
                cursors: Vec::new(),
            }),
        };
        g.renderer_at(0)?;
        Ok(g)
    }

    /// The same file, knowing how far an earlier state of it rendered: its size is reported as
    /// at least that (the text is the same every time it is rendered).
    pub fn resume(self, p: Progress) -> GrowingText {
        {
            let mut st = self.lock();
            st.rendered_to = st.rendered_to.max(p.rendered);
            st.total = st.total.or(p.total);
        }
        self
    }

    /// How far this file was rendered.
    pub fn progress(&self) -> Progress {
        let st = self.lock();
        Progress {
            rendered: st.rendered_to,
            total: st.total,
        }
    }

    /// Bytes of memory this file may come to hold (for the LRU that keeps it).
    pub fn weight(&self) -> usize {
        let bin = self.data.size();
        let text = bin.saturating_mul(MAX_TEXT_PER_BYTE as u64);
        let per_cursor = text.min(BEHIND + TRIM + AHEAD + 2 * STEP * MAX_TEXT_PER_BYTE as u64);
        let checkpoints = (text / FIRST_SPACING + 1).min(MAX_CHECKPOINTS as u64);
        (512 + MAX_CURSORS as u64 * per_cursor + checkpoints * 24) as usize
    }

    fn error(&self, msg: String) -> FsError {
        FsError::corrupt(&self.what, &self.file, FormatError::Text(msg))
    }

    fn renderer_at(&self, elem: u64) -> FsResult<TextRenderer> {
        TextRenderer::at_element(self.dtype, &self.shape, elem)
            .map_err(|e| self.error(e.to_string()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The size to report: exact once the end was reached, else the text rendered so far after
    /// rendering up to [`AHEAD`] bytes past the furthest read.
    pub fn size(&self) -> FsResult<Size> {
        let mut st = self.lock();
        if let Some(t) = st.total {
            return Ok(Size::Known(t));
        }
        let target = st.read_to.saturating_add(AHEAD);
        if st.rendered_to < target {
            let start = st.rendered_to;
            let mut c = self.take_cursor(&mut st, start)?;
            // Text well before the furthest read was read already: not kept.
            let keep_from = st.read_to.saturating_sub(BEHIND);
            let r = self.render_until(&mut st, &mut c, target, keep_from);
            Self::put_cursor(&mut st, c);
            r?;
        }
        Ok(match st.total {
            Some(t) => Size::Known(t),
            None => Size::Growing(st.rendered_to),
        })
    }

    /// Text bytes `[offset, offset + size)`, clamped to the end of the text.
    pub fn read(&self, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        // No text is longer than this: nothing to render for a read beyond it.
        let most = self.data.size().saturating_mul(MAX_TEXT_PER_BYTE as u64);
        let mut st = self.lock();
        if st.total.is_some_and(|t| offset >= t) || offset >= most || size == 0 {
            return Ok(Vec::new());
        }
        let mut c = self.take_cursor(&mut st, offset)?;
        let want = offset.saturating_add(size as u64);
        let keep_from = offset.saturating_sub(BEHIND);
        let out = self
            .render_until(&mut st, &mut c, want, keep_from)
            .map(|()| {
                let a = (offset.saturating_sub(c.text) as usize).min(c.pending.len());
                let b = a.saturating_add(size).min(c.pending.len());
                c.pending[a..b].to_vec()
            });
        if let Ok(out) = &out {
            st.read_to = st.read_to.max(offset + out.len() as u64);
        }
        Self::put_cursor(&mut st, c);
        out
    }

    /// A cursor from which text offset `at` is reached soonest: a kept cursor whose pending text
    /// covers `at` or ends before it, or a new one at the last checkpoint at or before `at`.
    fn take_cursor(&self, st: &mut State, at: u64) -> FsResult<Cursor> {
        // How far before `at` rendering would have to start from each cursor.
        let best = st
            .cursors
            .iter()
            .enumerate()
            .filter(|(_, c)| c.text <= at)
            .max_by_key(|(_, c)| c.end().min(at))
            .map(|(i, c)| (i, c.end().min(at)));
        let ck_i = st.checkpoints.partition_point(|c| c.text <= at);
        let ck = st.checkpoints[ck_i.saturating_sub(1)];
        match best {
            Some((i, from)) if from >= ck.text => Ok(st.cursors.remove(i)),
            _ => Ok(Cursor {
                text: ck.text,
                pending: Vec::new(),
                bin: ck.bin,
                r: self.renderer_at(ck.elem)?,
            }),
        }
    }

    fn put_cursor(st: &mut State, c: Cursor) {
        if st.cursors.len() >= MAX_CURSORS {
            st.cursors.remove(0);
        }
        st.cursors.push(c);
    }

    /// Renders with `c` until its text reaches offset `target` or the text ends, dropping
    /// pending text before `keep_from` as it comes (so memory stays bounded however far
    /// `target` is).
    fn render_until(
        &self,
        st: &mut State,
        c: &mut Cursor,
        target: u64,
        keep_from: u64,
    ) -> FsResult<()> {
        let size = self.data.size();
        c.trim(keep_from);
        while c.end() < target {
            if c.bin >= size {
                c.r.finish().map_err(|e| self.error(e.to_string()))?;
                st.total = Some(c.end());
                st.rendered_to = c.end();
                return Ok(());
            }
            let len = STEP.min(size - c.bin) as usize;
            let bytes = self.data.read(c.bin, len)?;
            if bytes.len() != len {
                return Err(self.error(format!(
                    "{} bytes at offset {} where {len} were expected",
                    bytes.len(),
                    c.bin
                )));
            }
            c.r.push(&bytes, &mut c.pending)
                .map_err(|e| self.error(e.to_string()))?;
            c.bin += len as u64;
            let end = c.end();
            st.rendered_to = st.rendered_to.max(end);
            if c.r.at_boundary() {
                self.checkpoint(st, end, c.r.elements_done(), c.bin);
            }
            c.trim(keep_from);
        }
        if c.bin >= size && c.r.at_boundary() {
            // Everything was rendered: the end is known without another step.
            c.r.finish().map_err(|e| self.error(e.to_string()))?;
            st.total = Some(c.end());
        }
        Ok(())
    }

    /// Notes a restart point at the frontier, thinning the list when it is full.
    fn checkpoint(&self, st: &mut State, text: u64, elem: u64, bin: u64) {
        let last = st.checkpoints.last().map_or(0, |c| c.text);
        if text < last.saturating_add(st.spacing) {
            return;
        }
        st.checkpoints.push(Checkpoint { text, elem, bin });
        if st.checkpoints.len() > MAX_CHECKPOINTS {
            let mut i = 0;
            st.checkpoints.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            st.spacing = st.spacing.saturating_mul(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::values::render_all;

    /// A tensor held in memory, counting the bytes read from it.
    struct Mem(Vec<u8>, Arc<std::sync::atomic::AtomicU64>);

    impl TensorData for Mem {
        fn size(&self) -> u64 {
            self.0.len() as u64
        }
        fn read(&self, offset: u64, len: usize) -> FsResult<Vec<u8>> {
            let r = super::super::subtree::slice_of(&self.0, offset, len);
            self.1
                .fetch_add(r.len() as u64, std::sync::atomic::Ordering::Relaxed);
            Ok(r)
        }
    }

    fn floats(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / 1000.0 - 8000.0).to_le_bytes()
            })
            .collect()
    }

    fn file(dtype: i32, shape: &[u64], bytes: Vec<u8>) -> GrowingText {
        counted(dtype, shape, bytes).0
    }

    fn counted(
        dtype: i32,
        shape: &[u64],
        bytes: Vec<u8>,
    ) -> (GrowingText, Arc<std::sync::atomic::AtomicU64>) {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let g = GrowingText::new(
            DType(dtype),
            shape.to_vec(),
            Arc::new(Mem(bytes, n.clone())),
            "tensor t".into(),
            "test".into(),
        )
        .unwrap();
        (g, n)
    }

    /// Reads like the kernel does: stat, read while below the size, stat again at the end.
    fn read_like_kernel(g: &GrowingText, chunk: usize) -> (Vec<u8>, Vec<Size>) {
        let mut out = Vec::new();
        let mut sizes = vec![g.size().unwrap()];
        loop {
            let known = match *sizes.last().unwrap() {
                Size::Known(s) | Size::Growing(s) => s,
                Size::Broken => panic!("broken"),
            };
            if (out.len() as u64) < known {
                let n = chunk.min((known - out.len() as u64) as usize);
                let r = g.read(out.len() as u64, n).unwrap();
                assert!(!r.is_empty(), "nothing below the reported size");
                out.extend_from_slice(&r);
            } else {
                let s = g.size().unwrap();
                if matches!(s, Size::Known(k) if k == out.len() as u64) {
                    sizes.push(s);
                    return (out, sizes);
                }
                sizes.push(s);
            }
        }
    }

    #[test]
    fn sequential_reads_give_the_whole_text_and_sizes_grow() {
        let bytes = floats(600_000);
        let whole = render_all(DType(1), &[1000, 600], &bytes).unwrap();
        assert!(whole.len() as u64 > 3 * AHEAD);
        let g = file(1, &[1000, 600], bytes);
        let (text, sizes) = read_like_kernel(&g, 128 << 10);
        assert_eq!(text, whole);
        assert!(matches!(sizes[0], Size::Growing(s) if s >= AHEAD && s < whole.len() as u64));
        let vals: Vec<u64> = sizes
            .iter()
            .map(|s| match s {
                Size::Known(v) | Size::Growing(v) => *v,
                Size::Broken => 0,
            })
            .collect();
        assert!(vals.windows(2).all(|w| w[0] <= w[1]), "{vals:?}");
        assert_eq!(g.size().unwrap(), Size::Known(whole.len() as u64));
    }

    /// Reads as the kernel sends them under readahead: neighbouring ranges out of order, the
    /// page at the old end again after each size change. Every value is rendered once.
    #[test]
    fn out_of_order_reads_render_each_value_once() {
        let bytes = floats(500_000);
        let whole = render_all(DType(1), &[500_000], &bytes).unwrap();
        let (g, read) = counted(1, &[500_000], bytes.clone());
        let mut at = 0u64;
        let mut size = match g.size().unwrap() {
            Size::Growing(s) => s,
            other => panic!("{other:?}"),
        };
        let w = 128u64 << 10;
        loop {
            // Two neighbouring windows, the later one first, both within the reported size.
            let second = (at + w).min(size);
            let end = (at + 2 * w).min(size);
            let b = g.read(second, (end - second) as usize).unwrap();
            let a = g.read(at, (second - at) as usize).unwrap();
            assert_eq!(a, &whole[at as usize..second as usize]);
            assert_eq!(b, &whole[second as usize..end as usize]);
            at = end;
            if at == size {
                // The page holding the old end is read again, then the size asked for.
                let page = at & !4095;
                assert_eq!(
                    g.read(page, 4096).unwrap(),
                    &whole[page as usize..(page as usize + 4096).min(whole.len())]
                );
                match g.size().unwrap() {
                    Size::Known(t) if t == at => break,
                    Size::Known(t) | Size::Growing(t) => size = t,
                    Size::Broken => panic!("broken"),
                }
            }
        }
        assert_eq!(at, whole.len() as u64);
        let n = read.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(n, bytes.len() as u64, "bytes read from the tensor");
    }

    #[test]
    fn small_files_have_their_exact_size_at_once() {
        let g = file(1, &[3], floats(3));
        let whole = render_all(DType(1), &[3], &floats(3)).unwrap();
        assert_eq!(g.size().unwrap(), Size::Known(whole.len() as u64));
        assert_eq!(g.read(0, 1000).unwrap(), whole);
        assert_eq!(g.read(whole.len() as u64, 10).unwrap(), b"");
        let empty = file(1, &[0, 5], Vec::new());
        assert_eq!(empty.size().unwrap(), Size::Known(0));
        assert_eq!(empty.read(0, 10).unwrap(), b"");
    }

    #[test]
    fn reads_at_any_offset_match_the_whole_text() {
        let bytes = floats(400_000);
        let whole = render_all(DType(1), &[400_000], &bytes).unwrap();
        let g = file(1, &[400_000], bytes);
        // Read the whole text once (checkpoints), then jump around.
        let (text, _) = read_like_kernel(&g, 1 << 20);
        assert_eq!(text, whole);
        let mut x = 12345u64;
        for _ in 0..200 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 20) % (whole.len() as u64 + 10);
            let n = ((x >> 8) % 70_000) as usize;
            let got = g.read(off, n).unwrap();
            let a = (off as usize).min(whole.len());
            let b = (a + n).min(whole.len());
            assert_eq!(got, &whole[a..b], "read({off}, {n})");
        }
        // A fresh file read backwards, past what was rendered.
        let g2 = file(1, &[400_000], floats(400_000));
        for off in [3_000_000u64, 10, 2_999_000, 500_000] {
            let got = g2.read(off, 5000).unwrap();
            let a = (off as usize).min(whole.len());
            let b = (a + 5000).min(whole.len());
            assert_eq!(got, &whole[a..b], "fresh read({off})");
        }
        let st = g.lock();
        assert!(st.checkpoints.len() > 4 && st.checkpoints.len() <= MAX_CHECKPOINTS);
        assert!(st.cursors.len() <= MAX_CURSORS);
    }

    #[test]
    fn a_resumed_file_never_reports_less() {
        let bytes = floats(300_000);
        let whole = render_all(DType(1), &[300_000], &bytes).unwrap();
        let g = file(1, &[300_000], bytes.clone());
        let first = g.size().unwrap();
        g.read(0, 900_000).unwrap();
        let second = g.size().unwrap();
        let p = g.progress();
        assert!(matches!((first, second), (Size::Growing(a), Size::Growing(b)) if a < b));
        assert_eq!(Size::Growing(p.rendered), second);
        // A new state for the same file (the old one was dropped).
        let g2 = file(1, &[300_000], bytes).resume(p);
        assert_eq!(g2.size().unwrap(), second);
        assert_eq!(
            g2.read(p.rendered - 10, 10).unwrap(),
            &whole[p.rendered as usize - 10..p.rendered as usize]
        );
        let (text, _) = read_like_kernel(&g2, 100_000);
        assert_eq!(text, whole);
    }

    #[test]
    fn strings_and_truncated_data() {
        let mut s = Vec::new();
        let mut want = Vec::new();
        for i in 0..50_000u32 {
            let body = format!("s{i}\t{}", "x".repeat((i % 37) as usize));
            s.extend_from_slice(&(body.len() as u64).to_le_bytes());
            s.extend_from_slice(body.as_bytes());
            want.push(body);
        }
        let whole = render_all(DType(7), &[50_000], &s).unwrap();
        let g = file(7, &[50_000], s.clone());
        let (text, _) = read_like_kernel(&g, 4096);
        assert_eq!(text, whole);
        assert_eq!(g.read(777_777, 100).unwrap(), &whole[777_777..777_877]);
        // Bytes that end inside the tensor: reading to the end fails.
        let short = file(1, &[100], floats(99));
        assert!(short.read(0, 10_000).is_err());
        assert!(short.size().is_err());
    }
}
