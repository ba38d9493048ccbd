//! Line-oriented output of the engines: records written to stdout as text (tab-separated
//! fields, escaped) or JSON Lines, or kept in memory (the Python module); the escaping of keys
//! and names in it, and a stdout that may be closed early (`tfmount verify ... | head`).

use std::io::{self, Write};

/// Appends `raw` with `\` written `\\`, tab `\t` and newline `\n`; every other byte as is.
pub(crate) fn escape_into(out: &mut Vec<u8>, raw: &[u8]) {
    for &b in raw {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b => out.push(b),
        }
    }
}

/// `raw` escaped as the engines' text records write keys and names ([`escape_into`]).
pub fn escape(raw: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(raw.len());
    escape_into(&mut v, raw);
    v
}

/// Whether a write failed because the reader of stdout went away (EPIPE: Rust ignores SIGPIPE,
/// so the write returns the error instead of the process being killed).
pub(crate) fn closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// One value of an output record: bytes (a key, a path, words) or a number (`None`: unknown,
/// `?` in text, `null` in JSON).
#[derive(Clone, Copy)]
pub(crate) enum Val<'a> {
    Bytes(&'a [u8]),
    Num(Option<u64>),
    /// A float: in text as `text/` writes a float64 (`inf`, `nan`), in JSON a number (`null`
    /// when not finite).
    Float(f64),
}

/// Line-oriented output: buffered stdout as text (tab-separated fields, escaped) or as JSON
/// Lines (`--json`: one object per record, each field by its name, with `"type"` first), or
/// the records kept (for the Python module).
pub(crate) struct Lines {
    w: Option<io::BufWriter<io::StdoutLock<'static>>>,
    json: bool,
    line: Vec<u8>,
    /// The lines' fields, unescaped, when kept.
    kept: Vec<Vec<Vec<u8>>>,
}

impl Lines {
    pub(crate) fn new() -> Lines {
        Lines {
            w: Some(io::BufWriter::with_capacity(64 << 10, io::stdout().lock())),
            json: false,
            line: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// [`Lines::new`], or JSON Lines with `json`.
    pub(crate) fn to_stdout(json: bool) -> Lines {
        Lines {
            json,
            ..Lines::new()
        }
    }

    /// Lines kept in memory instead of written: [`Lines::into_pairs`] gives them.
    #[cfg(feature = "python")]
    pub(crate) fn kept() -> Lines {
        Lines {
            w: None,
            json: false,
            line: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Whether lines are kept rather than written.
    pub(crate) fn keeps(&self) -> bool {
        self.w.is_none()
    }

    /// Whether records are written as JSON.
    pub(crate) fn json(&self) -> bool {
        self.json && self.w.is_some()
    }

    /// The kept lines of two fields each, as pairs (a missing field empty).
    #[cfg(feature = "python")]
    pub(crate) fn into_pairs(self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.kept
            .into_iter()
            .map(|f| {
                let mut f = f.into_iter();
                let a = f.next().unwrap_or_default();
                (a, f.next().unwrap_or_default())
            })
            .collect()
    }

    /// Writes one record of type `kind`: in text, its values escaped, separated by tabs (`kind`
    /// and the names unused); in JSON, `{"type": kind, name: value, ...}` (see [`json_field`]).
    pub(crate) fn record(&mut self, kind: &str, fields: &[(&str, Val<'_>)]) -> io::Result<()> {
        let Some(w) = &mut self.w else {
            self.kept
                .push(fields.iter().map(|(_, v)| text_of(*v)).collect());
            return Ok(());
        };
        self.line.clear();
        if self.json {
            self.line.extend_from_slice(b"{\"type\":");
            json_string(&mut self.line, kind);
            for (name, v) in fields {
                json_field(&mut self.line, name, *v);
            }
            self.line.push(b'}');
        } else {
            for (i, (_, v)) in fields.iter().enumerate() {
                if i > 0 {
                    self.line.push(b'\t');
                }
                escape_into(&mut self.line, &text_of(*v));
            }
        }
        self.line.push(b'\n');
        w.write_all(&self.line)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        match &mut self.w {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// A value's text: its bytes, or the number in decimal (`?` when unknown).
fn text_of(v: Val<'_>) -> Vec<u8> {
    match v {
        Val::Bytes(b) => b.to_vec(),
        Val::Num(Some(n)) => n.to_string().into_bytes(),
        Val::Num(None) => b"?".to_vec(),
        Val::Float(x) => {
            let mut out = Vec::new();
            crate::render::elem::write_f64(&mut out, x);
            out
        }
    }
}

fn json_string(out: &mut Vec<u8>, s: &str) {
    // Serializing a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `,"name":value`: a number (or `null`), or a string; bytes that are not UTF-8 come as their
/// text with U+FFFD for what is not, and beside it `"name_hex"`, the bytes in hex, so that no
/// key is lost.
fn json_field(out: &mut Vec<u8>, name: &str, v: Val<'_>) {
    out.push(b',');
    json_string(out, name);
    out.push(b':');
    match v {
        Val::Num(Some(n)) => out.extend_from_slice(n.to_string().as_bytes()),
        Val::Num(None) => out.extend_from_slice(b"null"),
        Val::Float(x) if !x.is_finite() => out.extend_from_slice(b"null"),
        Val::Float(x) => {
            let _ = serde_json::to_writer(&mut *out, &x);
        }
        Val::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => json_string(out, s),
            Err(_) => {
                json_string(out, &String::from_utf8_lossy(b));
                out.push(b',');
                json_string(out, &format!("{name}_hex"));
                out.push(b':');
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                json_string(out, &hex);
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_are_typed_and_keep_bytes_that_are_not_utf8() {
        let mut out = Vec::new();
        json_field(&mut out, "key", Val::Bytes(b"a/\"b\tc"));
        json_field(&mut out, "size", Val::Num(Some(12)));
        json_field(&mut out, "n", Val::Num(None));
        json_field(&mut out, "raw", Val::Bytes(b"x\xff"));
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            r#","key":"a/\"b\tc","size":12,"n":null,"raw":"x\u{fffd}","raw_hex":"78ff""#
                .replace("\\u{fffd}", "\u{fffd}")
        );
        assert_eq!(text_of(Val::Num(None)), b"?");
    }
}
