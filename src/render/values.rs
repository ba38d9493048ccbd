//! A tensor's values as text (`text/<key>.txt`).
//!
//! Input: the tensor's bytes in tfmount's `.bin` layout (row-major, little-endian; strings as an
//! 8-byte LE length then the bytes, per element). Output:
//! - numeric dtypes: fixed-width cells ([`Columns`]). Each element is written as
//!   [`super::elem`] writes it — shortest round-trip floats (`nan`, `inf`, `-inf`, `-0`),
//!   bfloat16/float16/float8/float4 as the `f32` value they stand for, integers in decimal
//!   (quantized types as their integers; int4/uint4/int2/uint2 from the low bits of each byte,
//!   as ml_dtypes reads them), bools `true`/`false` (any nonzero byte is `true`), complex
//!   `re+imj` (Python's `complex()` parses it) — right-aligned with spaces to its dtype's width
//!   ([`Kind::text_width`]), then one separator: a newline after the last element of each row of
//!   the last axis (a scalar or 1-D tensor is one line), else a space. Every element takes
//!   `width + 1` bytes, so the text's size is `elements × (width + 1)` and element `k` starts at
//!   `k × (width + 1)`: both follow from the dtype and shape, and a read at any offset renders
//!   only the elements it covers.
//! - strings: one element per line whatever the shape, escaped by [`super::escape`] (`\n`,
//!   `\t`, `\r`, `\\`, `\"`, `\xHH`); an empty string is an empty line. No fixed width (an
//!   escape takes 1 to 4 bytes per byte), so the size is only known by rendering
//!   ([`TextRenderer`], streaming).
//! - a tensor with no elements is empty text (no lines), whatever its shape.
//!
//! Memory: [`TextRenderer`] holds at most one partial element (16 bytes; for strings the 8-byte
//! length and up to 3 bytes of an unfinished UTF-8 sequence — a string's body is escaped as it
//! arrives, never held), and a clone of it is a point to resume from. Each input byte yields at
//! most 16 output bytes (a float8 element: 14 characters and a separator; a `\xHH` escape is 4
//! bytes for 1).

use std::ops::Range;

use crate::parse::dtype::DType;
use crate::render::elem::{write_padded, Kind};
use crate::render::escape::Escaper;

/// Why a tensor cannot be rendered, or its bytes do not fit its shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    /// A dtype without a text form; its name.
    #[error("dtype {0} has no text form")]
    Unsupported(String),
    /// The shape's element count overflows.
    #[error("shape has more elements than can be counted")]
    ShapeOverflow,
    /// More bytes than the shape's elements (their count).
    #[error("more bytes than the tensor's {0} elements hold")]
    TooLong(u64),
    /// The bytes end before the shape's last element.
    #[error("bytes end inside the tensor ({done} of {total} elements)")]
    Truncated {
        /// Elements rendered.
        done: u64,
        /// Elements the shape has.
        total: u64,
    },
}

/// Elements of `shape`; an error if they cannot be counted in `u64`.
fn elements(shape: &[u64]) -> Result<u64, ValuesError> {
    shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or(ValuesError::ShapeOverflow)
}

/// The fixed-width text of a numeric tensor (see the module doc): element `k` occupies text
/// bytes `[k × cell, (k + 1) × cell)`, `cell = width + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    kind: Kind,
    /// `.bin` bytes per element.
    elem: u64,
    width: usize,
    /// Elements per line.
    row: u64,
    total: u64,
    len: u64,
}

impl Columns {
    /// The layout of a tensor of `dtype` and `shape`; `Ok(None)` for strings (no fixed width).
    /// Errors for variant, resource and unknown dtypes, and when the element count or the text's
    /// size overflows `u64`.
    pub fn new(dtype: DType, shape: &[u64]) -> Result<Option<Columns>, ValuesError> {
        let kind = Kind::of(dtype).ok_or_else(|| ValuesError::Unsupported(dtype.display_name()))?;
        let total = elements(shape)?;
        let Some(width) = kind.text_width() else {
            return Ok(None);
        };
        let len = total
            .checked_mul(width as u64 + 1)
            .ok_or(ValuesError::ShapeOverflow)?;
        Ok(Some(Columns {
            kind,
            elem: kind.size() as u64,
            width,
            row: shape.last().copied().unwrap_or(1),
            total,
            len,
        }))
    }

    /// Bytes of the whole text.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the text is empty (a tensor without elements).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Characters every element is padded to.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Text bytes per element (the width and a separator).
    pub(crate) fn cell(&self) -> u64 {
        self.width as u64 + 1
    }

    /// `.bin` bytes per element.
    pub fn elem_size(&self) -> u64 {
        self.elem
    }

    /// The elements whose cells overlap text bytes `[offset, offset + len)` (clamped to the
    /// text; empty past its end).
    pub(crate) fn covering(&self, offset: u64, len: u64) -> Range<u64> {
        let end = offset.saturating_add(len).min(self.len);
        if offset >= end {
            return 0..0;
        }
        offset / self.cell()..end.div_ceil(self.cell())
    }

    /// Appends the cells of elements `first..` from their `.bin` bytes (whole elements). An
    /// error if the bytes end inside an element or go past the last one.
    pub(crate) fn render(
        &self,
        first: u64,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), ValuesError> {
        let n = bytes.len() as u64 / self.elem;
        if n * self.elem != bytes.len() as u64 {
            return Err(ValuesError::Truncated {
                done: first.saturating_add(n),
                total: self.total,
            });
        }
        if first.checked_add(n).is_none_or(|end| end > self.total) {
            return Err(ValuesError::TooLong(self.total));
        }
        out.reserve(bytes.len() / self.elem as usize * (self.width + 1));
        let mut k = first;
        for el in bytes.chunks_exact(self.elem as usize) {
            write_padded(out, self.kind.decode(el), self.width);
            k += 1;
            let eol = k.checked_rem(self.row) == Some(0);
            out.push(if eol { b'\n' } else { b' ' });
        }
        Ok(())
    }
}

/// Where the renderer is inside a string element.
#[derive(Debug, Clone)]
enum StrPos {
    /// Reading the 8-byte length; `have` bytes of it so far.
    Len { have: usize },
    /// Inside the body; `left` bytes to go.
    Body { left: u64 },
}

/// Streaming text renderer of one tensor; see the module doc.
#[derive(Debug, Clone)]
pub(crate) struct TextRenderer {
    kind: Kind,
    size: usize,
    /// Characters each element is padded to (numeric kinds).
    width: usize,
    /// Elements per line.
    row: u64,
    total: u64,
    done: u64,
    /// Elements already on the current line.
    col: u64,
    partial: [u8; 16],
    plen: usize,
    str_pos: StrPos,
    escaper: Escaper,
}

impl TextRenderer {
    /// A renderer for a tensor of `dtype` and `shape`. Errors for variant, resource and unknown
    /// dtypes, and for shapes whose element count overflows `u64`.
    pub(crate) fn new(dtype: DType, shape: &[u64]) -> Result<TextRenderer, ValuesError> {
        let kind = Kind::of(dtype).ok_or_else(|| ValuesError::Unsupported(dtype.display_name()))?;
        let total = elements(shape)?;
        let row = match (kind, shape.last()) {
            (Kind::String, _) | (_, None) => 1,
            (_, Some(&d)) => d,
        };
        Ok(TextRenderer {
            kind,
            size: kind.size(),
            width: kind.text_width().unwrap_or(0),
            row,
            total,
            done: 0,
            col: 0,
            partial: [0; 16],
            plen: 0,
            str_pos: StrPos::Len { have: 0 },
            escaper: Escaper::new(true),
        })
    }

    /// Renders the next piece of the tensor's bytes, appending text to `out`. An error if the
    /// bytes go past the tensor's last element (what was rendered before stays in `out`).
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), ValuesError> {
        if self.kind == Kind::String {
            return self.push_strings(bytes, out);
        }
        let mut rest = bytes;
        if self.plen > 0 {
            let take = (self.size - self.plen).min(rest.len());
            self.partial[self.plen..self.plen + take].copy_from_slice(&rest[..take]);
            self.plen += take;
            rest = &rest[take..];
            if self.plen < self.size {
                return Ok(());
            }
            self.plen = 0;
            let el = self.partial;
            self.element(&el[..self.size], out)?;
        }
        let mut it = rest.chunks_exact(self.size);
        for el in &mut it {
            self.element(el, out)?;
        }
        let tail = it.remainder();
        if !tail.is_empty() {
            if self.done == self.total {
                return Err(ValuesError::TooLong(self.total));
            }
            self.partial[..tail.len()].copy_from_slice(tail);
            self.plen = tail.len();
        }
        Ok(())
    }

    fn element(&mut self, el: &[u8], out: &mut Vec<u8>) -> Result<(), ValuesError> {
        if self.done == self.total {
            return Err(ValuesError::TooLong(self.total));
        }
        write_padded(out, self.kind.decode(el), self.width);
        self.done += 1;
        self.col += 1;
        if self.col == self.row {
            out.push(b'\n');
            self.col = 0;
        } else {
            out.push(b' ');
        }
        Ok(())
    }

    fn push_strings(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), ValuesError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match self.str_pos {
                StrPos::Len { have } => {
                    if self.done == self.total {
                        return Err(ValuesError::TooLong(self.total));
                    }
                    let take = (8 - have).min(rest.len());
                    self.partial[have..have + take].copy_from_slice(&rest[..take]);
                    rest = &rest[take..];
                    if have + take < 8 {
                        self.str_pos = StrPos::Len { have: have + take };
                    } else {
                        let mut len = [0u8; 8];
                        len.copy_from_slice(&self.partial[..8]);
                        self.str_pos = StrPos::Body {
                            left: u64::from_le_bytes(len),
                        };
                        self.end_string_if_done(out);
                    }
                }
                StrPos::Body { left } => {
                    let take = left.min(rest.len() as u64) as usize;
                    self.escaper.push(&rest[..take], out);
                    rest = &rest[take..];
                    self.str_pos = StrPos::Body {
                        left: left - take as u64,
                    };
                    self.end_string_if_done(out);
                }
            }
        }
        Ok(())
    }

    fn end_string_if_done(&mut self, out: &mut Vec<u8>) {
        if let StrPos::Body { left: 0 } = self.str_pos {
            self.escaper.finish(out);
            out.push(b'\n');
            self.done += 1;
            self.str_pos = StrPos::Len { have: 0 };
        }
    }

    /// Checks that the input ended exactly after the last element.
    pub(crate) fn finish(&self) -> Result<(), ValuesError> {
        let mid_string = !matches!(self.str_pos, StrPos::Len { have: 0 });
        if self.done < self.total || self.plen > 0 || mid_string {
            return Err(ValuesError::Truncated {
                done: self.done,
                total: self.total,
            });
        }
        Ok(())
    }
}

/// The whole text of a tensor held in memory (tests, small tensors).
pub fn render_all(dtype: DType, shape: &[u64], bytes: &[u8]) -> Result<Vec<u8>, ValuesError> {
    let mut r = TextRenderer::new(dtype, shape)?;
    let mut out = Vec::new();
    r.push(bytes, &mut out)?;
    r.finish()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    fn text(dtype: i32, shape: &[u64], bytes: &[u8]) -> String {
        String::from_utf8(render_all(DType(dtype), shape, bytes).unwrap()).unwrap()
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn strings(v: &[&[u8]]) -> Vec<u8> {
        let mut o = Vec::new();
        for s in v {
            o.extend_from_slice(&(s.len() as u64).to_le_bytes());
            o.extend_from_slice(s);
        }
        o
    }

    /// `text` with each line's padding removed: its tokens joined by one space.
    fn squeeze(text: &str) -> String {
        text.split_inclusive('\n')
            .map(|l| {
                let toks: Vec<&str> = l.split_whitespace().collect();
                format!("{}\n", toks.join(" "))
            })
            .collect()
    }

    #[test]
    fn elements_are_padded_to_the_dtype_width() {
        let b = f32s(&[1.0, 2.5, -0.0, f32::NAN, f32::INFINITY, -1e-7]);
        let p = |s: &str| format!("{s:>15}");
        assert_eq!(
            text(1, &[2, 3], &b),
            format!(
                "{} {} {}\n{} {} {}\n",
                p("1"),
                p("2.5"),
                p("-0"),
                p("nan"),
                p("inf"),
                p("-1e-7")
            )
        );
        assert_eq!(
            text(10, &[2, 2], &[0, 1, 1, 0]),
            "false  true\n true false\n"
        );
        assert_eq!(text(6, &[3], &[0x80, 0xff, 0x7f]), "-128   -1  127\n");
        assert_eq!(text(4, &[], &[7]), "  7\n");
        assert_eq!(text(32, &[2], &[3, 1]), "3 1\n");
        let c = f32s(&[1.5, -2.0, 0.0, 0.0]);
        assert_eq!(
            text(8, &[2], &c),
            format!("{:>31} {:>31}\n", "1.5-2j", "0+0j")
        );
    }

    #[test]
    fn lines_follow_the_last_axis() {
        let b = f32s(&[1.0, 2.5, -0.0, f32::NAN, f32::INFINITY, -1e-7]);
        let sq = |dt, shape: &[u64], b: &[u8]| squeeze(&text(dt, shape, b));
        assert_eq!(sq(1, &[2, 3], &b), "1 2.5 -0\nnan inf -1e-7\n");
        assert_eq!(sq(1, &[6], &b), "1 2.5 -0 nan inf -1e-7\n");
        assert_eq!(sq(1, &[3, 1, 2], &b), "1 2.5\n-0 nan\ninf -1e-7\n");
        assert_eq!(sq(1, &[], &b[..4]), "1\n");
        assert_eq!(text(1, &[0], &[]), "");
        assert_eq!(text(1, &[3, 0], &[]), "");
        assert_eq!(text(3, &[2, 0, 3], &[]), "");
        assert_eq!(sq(10, &[2, 2], &[0, 1, 1, 0]), "false true\ntrue false\n");
        assert_eq!(sq(23, &[], &[0xff; 8]), "18446744073709551615\n");
        assert_eq!(text(23, &[], &[0xff; 8]), "18446744073709551615\n");
        let c = f32s(&[1.5, -2.0, 0.0, 0.0]);
        assert_eq!(sq(8, &[2], &c), "1.5-2j 0+0j\n");
        assert_eq!(sq(14, &[2], &[0x80, 0x3f, 0xcd, 0x3d]), "1 0.100097656\n");
        assert_eq!(sq(29, &[4], &[0x0f, 0x08, 0x07, 0xf1]), "-1 -8 7 1\n");
        // float32 from 1e7 on is written with an exponent (its integers are no longer exact).
        assert_eq!(
            sq(1, &[3], &f32s(&[9999999.0, 1e7, 123456790.0])),
            "9999999 1e7 1.2345679e8\n"
        );
    }

    #[test]
    fn strings_one_per_line() {
        let b = strings(&[
            b"hello",
            b"",
            b"a\nb\t\"c\"\\",
            b"\xff\x00",
            "é✓".as_bytes(),
        ]);
        assert_eq!(
            text(7, &[5], &b),
            "hello\n\na\\nb\\t\\\"c\\\"\\\\\n\\xff\\x00\né✓\n"
        );
        // Shape does not matter for strings: one element per line.
        let b2 = strings(&[b"a", b"b", b"c", b"d"]);
        assert_eq!(text(7, &[2, 2], &b2), "a\nb\nc\nd\n");
        assert_eq!(text(7, &[], &strings(&[b"x y"])), "x y\n");
        assert_eq!(text(7, &[0], &[]), "");
        assert_eq!(Columns::new(DType(7), &[3]), Ok(None));
    }

    #[test]
    fn any_chunking_gives_the_same_text() {
        let mut cases: Vec<(i32, Vec<u64>, Vec<u8>)> = vec![
            (
                1,
                vec![2, 3],
                f32s(&[1.0, 2.5, -0.0, f32::NAN, f32::INFINITY, -1e-7]),
            ),
            (18, vec![2], (0..32).collect()),
            (
                7,
                vec![4],
                strings(&[b"ab", b"", b"\xe2\x9c\x93x\xe2", b"\x80\x85 tail"]),
            ),
            (19, vec![5], (0..10u32).map(|i| (i * 37) as u8).collect()),
        ];
        cases.push((24, vec![2, 2], vec![0x3c, 0x7c, 0xfe, 0x01]));
        for (dt, shape, bytes) in cases {
            let whole = render_all(DType(dt), &shape, &bytes).unwrap();
            for step in 1..=bytes.len() {
                let mut r = TextRenderer::new(DType(dt), &shape).unwrap();
                let mut out = Vec::new();
                for piece in bytes.chunks(step) {
                    r.push(piece, &mut out).unwrap();
                }
                r.finish().unwrap();
                assert_eq!(out, whole, "dtype {dt} step {step}");
            }
        }
    }

    /// A clone of a string renderer taken anywhere (inside a length, a body, a UTF-8 sequence)
    /// continues the text exactly.
    #[test]
    fn a_cloned_renderer_continues_exactly() {
        let s = strings(&[b"ab", b"", b"\xe2\x9c\x93x", b"tail\n", b"\xe2\x82"]);
        let whole = render_all(DType(7), &[5], &s).unwrap();
        let mut r = TextRenderer::new(DType(7), &[5]).unwrap();
        let mut out = Vec::new();
        for i in 0..s.len() {
            let mut c = r.clone();
            let mut rest = out.clone();
            c.push(&s[i..], &mut rest).unwrap();
            c.finish().unwrap();
            assert_eq!(rest, whole, "from byte {i}");
            r.push(&s[i..i + 1], &mut out).unwrap();
        }
    }

    /// Every dtype: the size is `elements × (width + 1)`, each element's cell is where
    /// [`Columns`] says, and rendering any element range gives that slice of the whole text.
    #[test]
    fn columns_match_the_streamed_text() {
        let mut rand = crate::testkit::rng::xorshift(0x1234_5678_9abc_def1u64);
        let dtypes = [
            1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 22, 23, 24, 25, 26, 27,
            28, 29, 30, 31, 32, 33,
        ];
        for dt in dtypes {
            for shape in [vec![], vec![7], vec![3, 5], vec![2, 0, 4], vec![2, 3, 1]] {
                let cols = Columns::new(DType(dt), &shape).unwrap().unwrap();
                let n = shape.iter().product::<u64>();
                let es = cols.elem_size() as usize;
                let bytes: Vec<u8> = (0..n as usize * es).map(|_| rand() as u8).collect();
                let whole = render_all(DType(dt), &shape, &bytes).unwrap();
                assert_eq!(whole.len() as u64, cols.len(), "dtype {dt} {shape:?}");
                assert_eq!(cols.len(), n * cols.cell());
                for a in 0..=n {
                    for b in a..=n {
                        let mut out = Vec::new();
                        let src = &bytes[a as usize * es..b as usize * es];
                        cols.render(a, src, &mut out).unwrap();
                        let c = cols.cell() as usize;
                        assert_eq!(out, &whole[a as usize * c..b as usize * c]);
                    }
                }
                for _ in 0..50 {
                    let off = rand() % (cols.len() + 3);
                    let len = rand() % 40;
                    let r = cols.covering(off, len);
                    let end = (off + len).min(cols.len());
                    if off >= end {
                        assert!(r.is_empty());
                        continue;
                    }
                    assert!(r.start * cols.cell() <= off && r.end * cols.cell() >= end);
                    assert!(r.end <= n && (r.end - 1) * cols.cell() < end);
                }
            }
        }
        let c = Columns::new(DType(1), &[4]).unwrap().unwrap();
        let mut out = Vec::new();
        assert!(c.render(3, &[0; 8], &mut out).is_err());
        assert!(c.render(0, &[0; 7], &mut out).is_err());
        assert_eq!(
            Columns::new(DType(2), &[1 << 62]),
            Err(ValuesError::ShapeOverflow)
        );
        assert!(Columns::new(DType(21), &[1]).is_err());
    }

    #[test]
    fn wrong_lengths_are_errors() {
        let b = f32s(&[1.0, 2.0]);
        assert!(matches!(
            render_all(DType(1), &[3], &b),
            Err(ValuesError::Truncated { done: 2, total: 3 })
        ));
        assert!(matches!(
            render_all(DType(1), &[1], &b),
            Err(ValuesError::TooLong(1))
        ));
        assert!(render_all(DType(1), &[2], &b[..7]).is_err());
        assert!(render_all(DType(1), &[1], &b[..7]).is_err());
        // A string whose claimed length runs past the bytes (nothing is allocated for it).
        let mut s = u64::MAX.to_le_bytes().to_vec();
        s.extend_from_slice(b"abc");
        assert!(render_all(DType(7), &[1], &s).is_err());
        assert!(render_all(DType(7), &[1], &strings(&[b"a", b"b"])).is_err());
        assert!(render_all(DType(7), &[2], &strings(&[b"a"])).is_err());
        assert!(render_all(DType(7), &[1], &[1, 0]).is_err());
        assert!(matches!(
            TextRenderer::new(DType(21), &[1]),
            Err(ValuesError::Unsupported(_))
        ));
        assert!(matches!(
            TextRenderer::new(DType(99), &[1]),
            Err(ValuesError::Unsupported(_))
        ));
        assert_eq!(
            TextRenderer::new(DType(1), &[u64::MAX, 2]).err(),
            Some(ValuesError::ShapeOverflow)
        );
    }

    /// Output bytes per input byte, at most (module doc).
    const MAX_TEXT_PER_BYTE: usize = 16;

    #[test]
    fn output_per_byte_is_bounded() {
        // Every numeric dtype: a cell per element.
        for dt in 0..40 {
            if let Ok(Some(c)) = Columns::new(DType(dt), &[1]) {
                assert!(
                    c.cell() <= MAX_TEXT_PER_BYTE as u64 * c.elem_size(),
                    "dtype {dt}: {} bytes for {}",
                    c.cell(),
                    c.elem_size()
                );
            }
        }
        let s = strings(&[b"\x00\x00\x00\x00"]);
        assert!(render_all(DType(7), &[1], &s).unwrap().len() <= MAX_TEXT_PER_BYTE * s.len());
        assert!(render_all(DType(7), &[1], &strings(&[b""])).unwrap().len() <= 8);
    }

    /// Runs `script` with `python` (stdin = `input`), returning stdout; panics with stderr on
    /// failure.
    pub(crate) fn run_python(python: &std::path::Path, script: &str, input: &[u8]) -> Vec<u8> {
        let python = python.display();
        let mut child = Command::new(python.to_string())
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        feeder.join().unwrap();
        assert!(
            out.status.success(),
            "{python} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Every float16 pattern: our text parses back (Python `float()`, numpy float16) to the same
    /// value, and the value is numpy's float16 -> float32 conversion. Runs in CI (numpy only).
    #[test]
    fn every_float16_matches_numpy() {
        let Some(py) = crate::testkit::requires::python("numpy", "every_float16_matches_numpy")
        else {
            return;
        };
        let bytes: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        let t = render_all(DType(19), &[65536], &bytes).unwrap();
        let script = r#"
import sys, numpy as np
toks = sys.stdin.read().split()
assert len(toks) == 65536, len(toks)
vals = np.array([float(t) for t in toks], dtype=np.float64)
orig = np.arange(65536, dtype=np.uint16).view(np.float16)
as32 = orig.astype(np.float32)
back = vals.astype(np.float16)
nan = np.isnan(orig)
assert (np.isnan(vals) == nan).all()
assert (back.view(np.uint16)[~nan] == orig.view(np.uint16)[~nan]).all(), "float16 round trip"
assert (vals.astype(np.float32).view(np.uint32)[~nan] == as32.view(np.uint32)[~nan]).all(), "value"
print("ok")
"#;
        assert_eq!(run_python(&py, script, &t), b"ok\n");
    }

    /// Random float32/float64/complex text parsed back by Python to the same bits. CI (numpy).
    #[test]
    fn floats_and_complex_parse_back_in_python() {
        let test = "floats_and_complex_parse_back_in_python";
        let Some(py) = crate::testkit::requires::python("numpy", test) else {
            return;
        };
        let mut next = crate::testkit::rng::xorshift(0x1234_5678_9abc_def1u64);
        let n = 20_000usize;
        let mut f32b = Vec::new();
        let mut f64b = Vec::new();
        for i in 0..n {
            let r = next();
            // Mix raw patterns with ordinary values.
            let (a, b) = if i % 2 == 0 {
                (r as u32, r)
            } else {
                let v = (r >> 11) as f64 / (1u64 << 53) as f64 * 20.0 - 10.0;
                ((v as f32).to_bits(), v.to_bits())
            };
            f32b.extend_from_slice(&a.to_le_bytes());
            f64b.extend_from_slice(&b.to_le_bytes());
        }
        let mut input = Vec::new();
        input.extend(render_all(DType(1), &[n as u64], &f32b).unwrap());
        input.extend(render_all(DType(2), &[n as u64], &f64b).unwrap());
        input.extend(render_all(DType(8), &[n as u64 / 2], &f32b).unwrap());
        input.extend(render_all(DType(18), &[n as u64 / 2], &f64b).unwrap());
        let mut data = Vec::new();
        data.extend_from_slice(&f32b);
        data.extend_from_slice(&f64b);
        let script = format!(
            r#"
import sys, numpy as np
n = {n}
text, raw = sys.stdin.buffer.read().split(b"\0", 1)
lines = text.decode().split("\n")
f32 = np.frombuffer(raw[:4*n], np.float32)
f64 = np.frombuffer(raw[4*n:], np.float64)
got32 = np.array([float(t) for t in lines[0].split()]).astype(np.float32)
n32 = np.isnan(f32)
assert (np.isnan(got32) == n32).all()
assert (got32[~n32].view(np.uint32) == f32[~n32].view(np.uint32)).all(), "f32"
got64 = np.array([float(t) for t in lines[1].split()])
n64 = np.isnan(f64)
assert (np.isnan(got64) == n64).all()
assert (got64[~n64].view(np.uint64) == f64[~n64].view(np.uint64)).all(), "f64"
for line, src, ft in ((lines[2], f32, np.float32), (lines[3], f64, np.float64)):
    c = [complex(t) for t in line.split()]
    re = np.array([z.real for z in c]).astype(ft); im = np.array([z.imag for z in c]).astype(ft)
    for got, want in ((re, src[0::2]), (im, src[1::2])):
        nn = np.isnan(want)
        assert (np.isnan(got) == nn).all()
        assert (got[~nn].tobytes() == want[~nn].tobytes()), "complex"
assert lines[4] == "", lines[4:]
print("ok")
"#
        );
        input.push(0);
        input.extend_from_slice(&data);
        assert_eq!(run_python(&py, &script, &input), b"ok\n");
    }

    /// Strings parsed back with `codecs.escape_decode`. CI.
    #[test]
    fn strings_parse_back_in_python() {
        let mut elems: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        elems.push(
            "ünïcödé ✓ 𝄞 \u{85}\u{2028}\u{2029}\u{7f}"
                .as_bytes()
                .to_vec(),
        );
        elems.push(b"\xe2\x82".to_vec());
        elems.push(b"\xe2\x82\\x41\"'".to_vec());
        elems.push(Vec::new());
        elems.push((0..=255u8).rev().collect());
        let refs: Vec<&[u8]> = elems.iter().map(|v| v.as_slice()).collect();
        let b = strings(&refs);
        let t = render_all(DType(7), &[elems.len() as u64], &b).unwrap();
        let mut input = t.clone();
        input.push(0);
        input.extend_from_slice(&b);
        let script = r#"
import sys, codecs, struct
text, raw = sys.stdin.buffer.read().split(b"\0", 1)
want = []
i = 0
while i < len(raw):
    (n,) = struct.unpack_from("<Q", raw, i); i += 8
    want.append(raw[i:i+n]); i += n
lines = text.decode("utf-8").split("\n")
assert lines[-1] == "" and len(lines) == len(want) + 1, len(lines)
for line, w in zip(lines, want):
    assert line.isprintable() or line == "", repr(line)
    assert codecs.escape_decode(line.encode("utf-8"))[0] == w, (line, w)
print("ok")
"#;
        assert_eq!(
            run_python(std::path::Path::new("python3"), script, &input),
            b"ok\n"
        );
    }

    /// Every bfloat16 pattern and every float8/float4 byte against ml_dtypes.
    #[test]
    fn narrow_floats_match_ml_dtypes() {
        let test = "narrow_floats_match_ml_dtypes";
        let Some(py) = crate::testkit::requires::python("numpy, ml_dtypes", test) else {
            return;
        };
        let mut input = Vec::new();
        let bf: Vec<u8> = (0..=u16::MAX).flat_map(|b| b.to_le_bytes()).collect();
        input.extend(render_all(DType(14), &[65536], &bf).unwrap());
        let bytes: Vec<u8> = (0..=255u8).collect();
        for dt in [24, 25, 26, 27, 28, 33] {
            input.extend(render_all(DType(dt), &[256], &bytes).unwrap());
        }
        let script = r#"
import sys, numpy as np, ml_dtypes as m
lines = sys.stdin.read().split("\n")
kinds = [(m.bfloat16, np.arange(65536, dtype=np.uint16)),
         (m.float8_e5m2, None), (m.float8_e4m3fn, None), (m.float8_e4m3fnuz, None),
         (m.float8_e4m3b11fnuz, None), (m.float8_e5m2fnuz, None), (m.float4_e2m1fn, None)]
for line, (t, raw) in zip(lines, kinds):
    if raw is None:
        raw = np.arange(256, dtype=np.uint8)
    want = raw.view(t).astype(np.float32) if t != m.float4_e2m1fn else np.frombuffer(raw.tobytes(), t).astype(np.float32)
    got = np.array([float(x) for x in line.split()]).astype(np.float32)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), t
    assert (got[~nan].view(np.uint32) == want[~nan].view(np.uint32)).all(), t
print("ok")
"#;
        assert_eq!(run_python(&py, script, &input), b"ok\n");
    }
}
