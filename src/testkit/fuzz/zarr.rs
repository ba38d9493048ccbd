//! Fuzz body for zarr v2 arrays (`tfmount::formats::orbax::zarr`): one input is a `.zarray` and
//! one stored chunk; the metadata is parsed, the chunk decoded, and (for arrays of at most 1 MiB)
//! the whole array assembled from that chunk standing for every chunk, read whole and in pieces,
//! which must agree.
//!
//! Input: the metadata's length (2 bytes, little-endian), the metadata, then the chunk.

use std::path::Path;
use std::sync::Arc;

use crate::formats::orbax::zarr::ArrayMeta;

pub(crate) fn zarr(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let n = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (meta, chunk) = rest.split_at(n);
    let Ok(meta) = ArrayMeta::parse(meta) else {
        return;
    };
    let Ok(decoded) = meta.decode_chunk(chunk) else {
        return;
    };
    if meta.size() > 1 << 20 {
        return;
    }
    let decoded = Arc::new(decoded);
    let mut every = |_: &[u64]| Ok(Some(decoded.clone()));
    let Ok(whole) = meta.read(0, usize::MAX, &mut every) else {
        return;
    };
    assert_eq!(
        whole.len() as u64,
        meta.size(),
        "a whole read is the array's size"
    );
    let mut pieces = Vec::new();
    while (pieces.len() as u64) < meta.size() {
        let got = meta
            .read(pieces.len() as u64, 13, &mut every)
            .expect("a piece of a readable array");
        assert!(!got.is_empty(), "a read short of the end returned nothing");
        pieces.extend_from_slice(&got);
    }
    assert_eq!(pieces, whole, "pieces and the whole agree");
}

/// Seeds: every array of `tests/fixtures/orbax/zarr/ckpt`: its `.zarray` and first chunk.
pub(crate) fn seeds(fixtures: &Path) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let root = fixtures.join("orbax/zarr/ckpt");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(".zarray").is_file())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        let meta = std::fs::read(d.join(".zarray"))?;
        let first = ["0", "0.0", "0.0.0.0"]
            .iter()
            .find_map(|k| std::fs::read(d.join(k)).ok())
            .unwrap_or_default();
        let len = u16::try_from(meta.len()).unwrap_or(u16::MAX);
        let name = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((
            "zarr",
            name,
            [&len.to_le_bytes()[..], &meta, &first].concat(),
        ));
    }
    Ok(out)
}
