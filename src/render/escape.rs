//! C-style escaping of arbitrary bytes into one line of text, streaming (input may arrive in
//! pieces that split a UTF-8 sequence).
//!
//! Rules: `\n`, `\t`, `\r`, `\\` (and `\"` when quotes are escaped); printable ASCII as is; valid
//! UTF-8 sequences as is, except C1 controls (U+0080..U+009F) and U+2028/U+2029 (line breaks to
//! Python's `str.splitlines`), whose bytes are escaped; every other byte — ASCII controls, DEL,
//! and each byte of an invalid or truncated UTF-8 sequence — as `\xHH` (two lowercase hex
//! digits, exactly two, as Python reads them). The escaped text never holds a raw control
//! character or line break, and Python's `codecs.escape_decode(line.encode())[0]` gives back
//! the original bytes.

/// Escapes bytes pushed in pieces; holds at most 3 bytes of an unfinished UTF-8 sequence.
#[derive(Debug, Clone, Default)]
pub(crate) struct Escaper {
    quote: bool,
    pending: [u8; 4],
    len: u8,
    need: u8,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex(out: &mut Vec<u8>, b: u8) {
    out.extend_from_slice(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
}

impl Escaper {
    /// `quote`: also escape `"` as `\"`.
    pub(crate) fn new(quote: bool) -> Escaper {
        Escaper {
            quote,
            ..Escaper::default()
        }
    }

    /// Escapes `bytes`, appending to `out`.
    pub(crate) fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        for &b in bytes {
            self.byte(b, out);
        }
    }

    /// Ends the input: an unfinished sequence is written as `\xHH` bytes.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        self.flush_invalid(out);
    }

    fn flush_invalid(&mut self, out: &mut Vec<u8>) {
        for &b in &self.pending[..self.len as usize] {
            hex(out, b);
        }
        self.len = 0;
        self.need = 0;
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.need > 0 {
            // The first continuation byte's range excludes overlong forms, surrogates and code
            // points past U+10FFFF (the Unicode table of well-formed sequences).
            let ok = match (self.len, self.pending[0]) {
                (1, 0xe0) => (0xa0..=0xbf).contains(&b),
                (1, 0xed) => (0x80..=0x9f).contains(&b),
                (1, 0xf0) => (0x90..=0xbf).contains(&b),
                (1, 0xf4) => (0x80..=0x8f).contains(&b),
                _ => (0x80..=0xbf).contains(&b),
            };
            if ok {
                self.pending[self.len as usize] = b;
                self.len += 1;
                self.need -= 1;
                if self.need == 0 {
                    self.emit_char(out);
                }
                return;
            }
            self.flush_invalid(out);
        }
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' if self.quote => out.extend_from_slice(b"\\\""),
            0x20..=0x7e => out.push(b),
            0xc2..=0xdf => self.start(b, 1),
            0xe0..=0xef => self.start(b, 2),
            0xf0..=0xf4 => self.start(b, 3),
            _ => hex(out, b),
        }
    }

    fn start(&mut self, b: u8, need: u8) {
        self.pending[0] = b;
        self.len = 1;
        self.need = need;
    }

    fn emit_char(&mut self, out: &mut Vec<u8>) {
        let seq = &self.pending[..self.len as usize];
        let line_break_or_c1 = matches!(seq, [0xc2, 0x80..=0x9f] | [0xe2, 0x80, 0xa8 | 0xa9]);
        if line_break_or_c1 {
            for &b in seq {
                hex(out, b);
            }
        } else {
            out.extend_from_slice(seq);
        }
        self.len = 0;
    }
}

/// `bytes` escaped in one go.
pub(crate) fn escape(bytes: &[u8], quote: bool, out: &mut Vec<u8>) {
    let mut e = Escaper::new(quote);
    e.push(bytes, out);
    e.finish(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(b: &[u8]) -> String {
        let mut o = Vec::new();
        escape(b, true, &mut o);
        String::from_utf8(o).unwrap()
    }

    #[test]
    fn escapes_by_the_rules() {
        assert_eq!(esc(b"plain text"), "plain text");
        assert_eq!(esc(b"a\nb\tc\rd\\e\"f"), r#"a\nb\tc\rd\\e\"f"#);
        assert_eq!(esc(b"\x00\x1f\x7f"), r"\x00\x1f\x7f");
        assert_eq!(esc("ünï ✓ 𝄞".as_bytes()), "ünï ✓ 𝄞");
        assert_eq!(esc(b"\xff\xfe"), r"\xff\xfe");
        // Truncated sequence, then ASCII: the sequence's bytes escaped, the ASCII kept.
        assert_eq!(esc(b"\xe2\x9cA"), r"\xe2\x9cA");
        assert_eq!(esc(b"\xe2\x9c"), r"\xe2\x9c");
        // Overlong, surrogate, past U+10FFFF.
        assert_eq!(esc(b"\xc0\xaf"), r"\xc0\xaf");
        assert_eq!(esc(b"\xed\xa0\x80"), r"\xed\xa0\x80");
        assert_eq!(esc(b"\xf4\x90\x80\x80"), r"\xf4\x90\x80\x80");
        // C1 control NEL and U+2028 are line breaks to Python: escaped.
        assert_eq!(
            esc("a\u{85}b\u{2028}c".as_bytes()),
            r"a\xc2\x85b\xe2\x80\xa8c"
        );
        let mut o = Vec::new();
        escape(b"q\"", false, &mut o);
        assert_eq!(o, b"q\"");
    }

    #[test]
    fn pieces_give_the_same_text() {
        let input = "x✓\u{85}𝄞\n\u{2029}é".as_bytes().to_vec();
        let mut all = input.clone();
        all.extend_from_slice(b"\xf0\x9f\xff\xe2\x82");
        let whole = esc(&all);
        for cut in 0..all.len() {
            for cut2 in cut..all.len() {
                let mut e = Escaper::new(true);
                let mut o = Vec::new();
                e.push(&all[..cut], &mut o);
                e.push(&all[cut..cut2], &mut o);
                e.push(&all[cut2..], &mut o);
                e.finish(&mut o);
                assert_eq!(String::from_utf8(o).unwrap(), whole);
            }
        }
    }
}
