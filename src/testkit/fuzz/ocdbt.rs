//! Fuzz body for the OCDBT reader (`tfmount::formats::orbax::ocdbt`): one input is one encoded
//! manifest or B+tree node, decoded; a decoded node's entries are checked against the input's
//! size (no value longer than what could be in it).
//!
//! Input: flags (1 byte), then the encoding. Bit 0: a B+tree node (else a manifest); bit 1:
//! keep the input's length field and CRC-32C as they are (otherwise both are recomputed, so
//! mutations reach the decoder behind the checksum).

use std::path::Path;

use crate::formats::orbax::ocdbt::{Manifest, Node, Value};

pub(crate) fn ocdbt(data: &[u8]) {
    let Some((&flags, enc)) = data.split_first() else {
        return;
    };
    let mut enc = enc.to_vec();
    if flags & 2 == 0 && enc.len() >= 16 {
        let n = enc.len() as u64;
        enc[4..12].copy_from_slice(&n.to_le_bytes());
        let at = enc.len() - 4;
        let crc = crc32c::crc32c(&enc[..at]);
        enc[at..].copy_from_slice(&crc.to_le_bytes());
    }
    if flags & 1 == 0 {
        let _ = Manifest::parse(&enc);
        return;
    }
    if let Ok(Node::Leaf(entries)) = Node::parse(&enc, b"p/", b"") {
        for e in entries {
            assert!(e.key.starts_with(b"p/"), "a leaf key lost its prefix");
            if let Value::Inline(v) = e.value {
                // Inline values come from the decoded body, at most MAX_NODE bytes.
                assert!(v.len() <= crate::formats::orbax::ocdbt::MAX_NODE);
            }
        }
    }
}

/// Seeds: every manifest of the Orbax fixtures, and every B+tree node found in their data
/// files (by its magic number and length).
pub(crate) fn seeds(fixtures: &Path) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                files(&p, out)?;
            } else {
                out.push(p);
            }
        }
        Ok(())
    }
    let root = fixtures.join("orbax");
    let mut all = Vec::new();
    files(&root, &mut all)?;
    all.sort();
    let mut out = Vec::new();
    for f in all {
        let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
        let bytes = std::fs::read(&f)?;
        if name.ends_with("manifest.ocdbt") {
            out.push(("ocdbt", name, [&[0u8][..], &bytes].concat()));
            continue;
        }
        for (i, w) in bytes.windows(4).enumerate() {
            if w != [0x0c, 0xdb, 0x20, 0xde] {
                continue;
            }
            let len = bytes
                .get(i + 4..i + 12)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(0, u64::from_le_bytes);
            let end = usize::try_from(len).ok().and_then(|l| i.checked_add(l));
            if let Some(node) = end.and_then(|e| bytes.get(i..e)) {
                out.push(("ocdbt", format!("{name}@{i}"), [&[1u8][..], node].concat()));
            }
        }
    }
    Ok(out)
}
