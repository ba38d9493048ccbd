//! How checkpoint keys and graph names become path components.
//!
//! ## Name escaping (the layout contract)
//! A key is split on `/`; each component becomes one path component:
//! 1. `%` becomes `%25`, NUL becomes `%00` and `/` becomes `%2F` (only names that are one
//!    component, such as function and signature names, can hold a `/`);
//! 2. an empty component is written `%`, `.` is `%2E`, `..` is `%2E%2E`;
//! 3. a *directory* component whose name ends in `.bin`, `.shape`, `.dtype`, `.npy`, `.pbtxt` or
//!    `.txt` has its last `.` written `%2E` (so it cannot collide with a tensor's file);
//! 4. a component longer than 200 bytes after steps 1–3 keeps its first 200 bytes (never cutting
//!    a `%XX` or a UTF-8 sequence), followed by `%#` and the 16-hex-digit FNV-1a-64 hash of the raw component; the
//!    full key is in the `user.tfmount.key` extended attribute.
//!
//! Every name has exactly one spelling: lookups of non-canonical spellings fail.

/// File suffixes of the mount: a directory whose name ends in one gets its last `.` escaped.
pub const SUFFIXES: [&str; 6] = [".bin", ".shape", ".dtype", ".npy", ".pbtxt", ".txt"];
const MAX_ESCAPED: usize = 200;

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn percent(b: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("%{b:02X}").as_bytes());
}

/// The path component for one key component.
pub fn escape(raw: &[u8], is_dir: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + 2);
    match raw {
        b"" => return b"%".to_vec(),
        b"." => return b"%2E".to_vec(),
        b".." => return b"%2E%2E".to_vec(),
        _ => {}
    }
    for &b in raw {
        match b {
            b'%' | 0 | b'/' => percent(b, &mut out),
            b => out.push(b),
        }
    }
    if is_dir && SUFFIXES.iter().any(|s| out.ends_with(s.as_bytes())) {
        if let Some(dot) = out.iter().rposition(|&b| b == b'.') {
            out.splice(dot..dot + 1, b"%2E".iter().copied());
        }
    }
    if out.len() > MAX_ESCAPED {
        // Do not cut inside a %XX triple or a UTF-8 sequence.
        let mut cut = MAX_ESCAPED;
        while cut > 0
            && (out[cut - 1] == b'%'
                || (cut >= 2 && out[cut - 2] == b'%')
                || (0x80..0xc0).contains(&out[cut]))
        {
            cut -= 1;
        }
        if cut == 0 {
            cut = MAX_ESCAPED;
        }
        out.truncate(cut);
        out.extend_from_slice(format!("%#{:016x}", fnv1a64(raw)).as_bytes());
    }
    out
}

/// What a path component names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unescaped {
    /// Exactly this raw component.
    Exact(Vec<u8>),
    /// A long component: it starts with `prefix` and its FNV-1a-64 hash is `hash`.
    Hashed { prefix: Vec<u8>, hash: u64 },
}

/// Decodes a path component. `None` if it is not a canonical spelling of any component.
pub(crate) fn unescape(name: &[u8], is_dir: bool) -> Option<Unescaped> {
    if name == b"%" {
        return Some(Unescaped::Exact(Vec::new()));
    }
    let (body, hash) = match name.windows(2).position(|w| w == b"%#") {
        Some(i) => {
            let hex = std::str::from_utf8(&name[i + 2..]).ok()?;
            if hex.len() != 16 {
                return None;
            }
            (&name[..i], Some(u64::from_str_radix(hex, 16).ok()?))
        }
        None => (name, None),
    };
    let mut raw = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'%' {
            let hex = body.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            if hex.bytes().any(|c| c.is_ascii_lowercase()) {
                return None;
            }
            raw.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            raw.push(body[i]);
            i += 1;
        }
    }
    match hash {
        None => (escape(&raw, is_dir) == name).then_some(Unescaped::Exact(raw)),
        // Canonicity of a hashed name is checked against the candidate's full key by the caller.
        Some(hash) => Some(Unescaped::Hashed { prefix: raw, hash }),
    }
}

/// Which file of a tensor (the value is the `file` field of its inode: 0 is a directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileKind {
    Bin = 2,
    Shape = 3,
    Dtype = 4,
    Npy = 5,
}

/// The suffix of the one file per tensor of `text/` and `stats/`.
pub(crate) const TXT: &str = ".txt";

impl FileKind {
    /// The files of a tensor in `variables/` (and of a graph constant), in listing order.
    pub(crate) const ALL: [FileKind; 4] = [
        FileKind::Bin,
        FileKind::Shape,
        FileKind::Dtype,
        FileKind::Npy,
    ];

    pub(crate) fn suffix(self) -> &'static str {
        match self {
            FileKind::Bin => ".bin",
            FileKind::Shape => ".shape",
            FileKind::Dtype => ".dtype",
            FileKind::Npy => ".npy",
        }
    }

    /// The kind whose `file` code is `code`.
    pub(crate) fn from_code(code: u64) -> Option<FileKind> {
        FileKind::ALL.into_iter().find(|k| *k as u64 == code)
    }

    /// Splits `name` into a stem and the file kind its suffix names.
    pub(crate) fn split(name: &[u8]) -> Option<(&[u8], FileKind)> {
        FileKind::ALL.into_iter().find_map(|k| {
            name.strip_suffix(k.suffix().as_bytes())
                .map(|stem| (stem, k))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_rules() {
        assert_eq!(escape(b"kernel", false), b"kernel");
        assert_eq!(escape(b"", false), b"%");
        assert_eq!(escape(b".", true), b"%2E");
        assert_eq!(escape(b"..", false), b"%2E%2E");
        assert_eq!(escape(b"a%b\0c", false), b"a%25b%00c");
        assert_eq!(escape(b"f/g", false), b"f%2Fg");
        assert_eq!(escape(b"n.pbtxt", true), b"n%2Epbtxt");
        assert_eq!(escape(b"name.bin", true), b"name%2Ebin");
        assert_eq!(escape(b"name.bin", false), b"name.bin");
        assert_eq!(escape(b"x.npy.shape", true), b"x.npy%2Eshape");
        assert_eq!(escape(b"notes.txt", true), b"notes%2Etxt");
        assert_eq!(escape(b"notes.txt", false), b"notes.txt");
        assert_eq!(escape(b"n.pbtxt.txt", true), b"n.pbtxt%2Etxt");
        for s in SUFFIXES {
            let name = format!("a{s}");
            assert!(
                !escape(name.as_bytes(), true).ends_with(s.as_bytes()),
                "{s}"
            );
        }
        let long = vec![b'a'; 300];
        let e = escape(&long, false);
        assert_eq!(e.len(), 200 + 2 + 16);
        assert!(e.len() + ".shape".len() <= 255);
        let mut pct = vec![b'a'; 199];
        pct.extend_from_slice(&[b'%'; 60]);
        let e = escape(&pct, false);
        assert!(
            e.starts_with(&[b'a'; 199]) && e[199..].starts_with(b"%#"),
            "{}",
            String::from_utf8_lossy(&e)
        );
    }

    #[test]
    fn unescape_inverts_escape_and_rejects_aliases() {
        let cases: [&[u8]; 8] = [
            b"kernel",
            b"",
            b".",
            b"..",
            b"a%b\0c",
            b"name.bin",
            b"\xff\xfe",
            b"sp ace",
        ];
        for raw in cases {
            for dir in [false, true] {
                let e = escape(raw, dir);
                assert_eq!(unescape(&e, dir), Some(Unescaped::Exact(raw.to_vec())));
            }
        }
        assert_eq!(unescape(b"%61", false), None); // "a" is spelled "a"
        assert_eq!(unescape(b"%2e", false), None); // lowercase hex is not canonical
        assert_eq!(unescape(b"name.bin", true), None); // dirs never end in .bin
        assert_eq!(unescape(b"name.txt", true), None); // nor in .txt
        assert_eq!(
            FileKind::split(b"a.txt.bin"),
            Some((&b"a.txt"[..], FileKind::Bin))
        );
        assert_eq!(FileKind::split(b"a.bin.txt"), None);
        assert_eq!(unescape(b"%zz", false), None);
        assert_eq!(unescape(b"%", false), Some(Unescaped::Exact(vec![])));
        let long = vec![b'q'; 300];
        match unescape(&escape(&long, false), false) {
            Some(Unescaped::Hashed { prefix, hash }) => {
                assert!(long.starts_with(&prefix));
                assert_eq!(hash, fnv1a64(&long));
            }
            other => panic!("{other:?}"),
        }
    }
}
