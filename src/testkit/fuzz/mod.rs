//! Fuzz entry points of tfmount: one function per target, each taking arbitrary bytes. Every
//! one must return normally for every input; a panic (including a failed invariant check
//! below), an abort, a hang or an oversized allocation is a bug in tfmount.
//!
//! Part of the test kit (`tfmount::testkit::fuzz`), so a target is written once for its users:
//! - the libFuzzer targets `fuzz/fuzz_targets/*.rs` (`cargo fuzz run TARGET`);
//! - the stable-toolchain harness `examples/fuzz.rs` (seeds, mutation runs, replays);
//! - the regression tests `tests/formats/fuzz_regressions.rs` and `tests/formats/keras_hostile.rs` (for the
//!   HDF5 checksum repair).
//!
//! It walks trees with the kit's walker ([`crate::testkit::walk`]) and repairs table checksums
//! with [`crate::testkit::writer`].
//!
//! Block checksums: by default the harness recomputes the CRCs of the blocks an `.index` input
//! names, so mutations reach the parsers behind the checksum; a flag bit in each input keeps the
//! checksums as they are, so the checksum checks themselves are fuzzed too.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use crate::formats::caches::Caches;
use crate::formats::tensors::TensorInfo;
use crate::formats::v2::checkpoint::{data_file_name, index_file_name};
use crate::formats::v2::strings;
use crate::formats::v2::strings::StringLayout;
use crate::fs::{Fs, Kind, Options};
use crate::namespace::{self, FileKind};
use crate::parse::bundle::Data;
use crate::parse::dtype::{DT_STRING, DT_VARIANT};
use crate::parse::slice_key::Extent;
use crate::parse::table::{Block, Table};
use crate::parse::{bundle, mask_crc, slice_key, table, varint};
use crate::probe::{probe, state, Probed};
use crate::testkit::writer::fix_table_crcs;

use crate::testkit::walk;
use crate::testkit::walk::assert_same;

pub(crate) mod edits;
pub mod keras;
pub(crate) mod nfs;
pub(crate) mod ocdbt;
pub(crate) mod orbax_meta;
pub(crate) mod safetensors;
pub(crate) mod tfjs;
pub(crate) mod tflite;
pub(crate) mod v1;
pub(crate) mod zarr;

/// A fuzz target: must return normally for every input.
pub type Target = fn(&[u8]);

/// Every target, by the name its libFuzzer binary and seed directory have.
pub const TARGETS: &[(&str, Target)] = &[
    ("table", table),
    ("bundle_entry", bundle_entry),
    ("strings", strings),
    ("checkpoint_state", checkpoint_state),
    ("checkpoint", checkpoint),
    ("graph", graph),
    ("v1", v1::v1),
    ("keras", keras::keras),
    ("tfjs", tfjs::tfjs),
    ("ocdbt", ocdbt::ocdbt),
    ("zarr", zarr::zarr),
    ("orbax_meta", orbax_meta::orbax_meta),
    ("tflite", tflite::tflite),
    ("safetensors", safetensors::safetensors),
    ("npy", npy),
    ("object_graph", object_graph),
    ("nfs", nfs::nfs),
    ("edits", edits::edits),
];

/// The target named `name` (as in [`TARGETS`]), for the libFuzzer binaries, the stable harness
/// and the regression tests.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// An `.npy` header from arbitrary bytes (`export --set KEY=FILE.npy`): parsed, and where it
/// parses, its data offset within the header read and its shape's dimensions bounded.
pub(crate) fn npy(data: &[u8]) {
    if let Ok(n) = crate::parse::npy::parse(data) {
        assert!(
            n.data_offset as usize <= data.len(),
            "data offset past the header read"
        );
        assert!(
            n.shape.len() <= 64,
            "a shape of {} dimensions",
            n.shape.len()
        );
    }
}

/// A TF2 object graph from arbitrary bytes, edited as `export` edits it: every other key
/// dropped, a path renamed, everything kept. Input: the serialized `TrackableObjectGraph`.
pub(crate) fn object_graph(data: &[u8]) {
    use prost::Message;
    let Ok(g) = crate::proto::TrackableObjectGraph::decode(data) else {
        return;
    };
    let drop_half = |k: &str| Some((k.len() % 2 == 0).then(|| k.to_string()));
    let rename = |k: &str| Some(Some(k.replacen('/', "_/", 1)));
    let keep = |k: &str| Some(Some(k.to_string()));
    for fate in [
        &drop_half as &dyn Fn(&str) -> Option<Option<String>>,
        &rename,
        &keep,
    ] {
        if let Ok(e) = crate::formats::v2::object_graph::edit(&g, fate) {
            assert!(e.nodes.len() <= g.nodes.len(), "the edit added objects");
        }
    }
}

/// Most table entries one input is walked through (bounds the time of one run).
const MAX_ENTRIES: usize = 20_000;

// ---------------------------------------------------------------------------------------------
// table
// ---------------------------------------------------------------------------------------------

/// An `.index` table from arbitrary bytes: opened, walked entry by entry, every key looked up
/// and sought again. Input: one flags byte, then the file. Flags: bit 0 keeps block checksums as
/// they are; bit 1 disables the block cache; bit 2 also parses the file as one raw block.
pub(crate) fn table(data: &[u8]) {
    let Some((&flags, file)) = data.split_first() else {
        return;
    };
    if flags & 4 != 0 {
        block_invariants(file);
    }
    let mut file = file.to_vec();
    if flags & 1 == 0 {
        fix_table_crcs(&mut file);
    }
    let cache = Caches::new(if flags & 2 != 0 { 0 } else { 1 << 20 });
    if let Ok(t) = Table::open(Arc::new(file), cache) {
        walk_table(&t);
    }
}

/// A parsed block's keys are strictly increasing and `seek` finds each of them.
fn block_invariants(raw: &[u8]) {
    let Ok(b) = Block::parse(raw.to_vec()) else {
        return;
    };
    for i in 0..b.len().min(MAX_ENTRIES) {
        let k = b.key(i);
        let _ = b.value(i);
        if i > 0 {
            assert!(
                b.key(i - 1) < k,
                "block keys {} and {i} out of order",
                i - 1
            );
        }
        assert_eq!(b.seek(k), i, "block seek to key {i}");
        let mut after = k.to_vec();
        after.push(0);
        assert_eq!(b.seek(&after), i + 1, "block seek just past key {i}");
    }
}

fn walk_table(t: &Table) {
    let mut walked: Vec<(table::Pos, Vec<u8>)> = Vec::new();
    let mut pos = t.seek(b"");
    let complete = loop {
        match pos {
            Ok(Some(p)) if walked.len() < MAX_ENTRIES => {
                let (blk, i) = t
                    .entry(p)
                    .unwrap_or_else(|e| panic!("seek/next gave {p:?}, which entry() refuses: {e}"));
                let key = blk.key(i).to_vec();
                let _ = blk.value(i);
                if let Some((_, prev)) = walked.last() {
                    assert!(*prev < key, "table walk: keys out of order at {p:?}");
                }
                walked.push((p, key));
                pos = t.next(p);
            }
            Ok(Some(_)) | Err(_) => break false,
            Ok(None) => break true,
        }
    };
    for (i, (p, key)) in walked.iter().enumerate() {
        match t.get(key) {
            Ok(Some((q, blk, j))) => {
                assert_eq!(q, *p, "get() of a walked key found another position");
                assert_eq!(blk.key(j), &key[..]);
            }
            other => panic!(
                "get() of the key walked at {p:?} gave {:?}",
                other.map(|o| o.map(|(q, ..)| q))
            ),
        }
        let mut after = key.clone();
        after.push(0);
        let want = walked.get(i + 1).map(|(q, _)| *q);
        if want.is_some() || complete {
            assert_eq!(
                t.seek(&after).ok().flatten(),
                want,
                "seek just past the key at {p:?}"
            );
        }
    }
    if complete {
        // Decoding the blocks one by one gives the same entries as the walk.
        let mut direct = Vec::new();
        for b in 0..t.num_blocks() {
            let blk = t.block(b as u32).unwrap_or_else(|e| {
                panic!("block {b} failed after a complete walk: {e}");
            });
            direct.extend((0..blk.len()).map(|i| blk.key(i).to_vec()));
        }
        let walked_keys: Vec<_> = walked.into_iter().map(|(_, k)| k).collect();
        assert!(
            direct == walked_keys,
            "block-by-block entries differ from the walk"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// bundle_entry
// ---------------------------------------------------------------------------------------------

/// An index value parsed as a bundle header and as a tensor entry. An accepted entry must keep
/// the promises later arithmetic relies on; a partitioned entry's slices go through the tiling
/// check (compared with a direct count for small tensors) and the slice-key encoder (whose
/// keys must sort like the extents they encode).
pub(crate) fn bundle_entry(data: &[u8]) {
    if let Ok(h) = bundle::parse_header(data) {
        assert!(h.num_shards >= 1 && h.num_shards <= bundle::MAX_SHARDS as u32);
    }
    let Ok(e) = bundle::parse_entry(data) else {
        return;
    };
    assert!(e.shape.len() <= bundle::MAX_RANK);
    let n = e
        .shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .unwrap_or_else(|| panic!("accepted shape {:?} overflows", e.shape));
    assert_eq!(e.num_elements(), n);
    match &e.data {
        Data::Contiguous { offset, size, .. } => {
            assert!(offset
                .checked_add(*size)
                .is_some_and(|end| end <= i64::MAX as u64));
            if let Some(es) = e.dtype.elem_size() {
                assert_eq!(n.checked_mul(es as u64), Some(*size));
            }
        }
        Data::Sliced(slices) => slice_invariants(&e.shape, slices, &data[..data.len().min(6)]),
    }
}

fn slice_invariants(shape: &[u64], slices: &[Vec<Extent>], name: &[u8]) {
    assert!(!slices.is_empty() && slices.len() <= bundle::MAX_SLICES);
    let mut keyed = Vec::new();
    for s in slices {
        assert_eq!(s.len(), shape.len(), "slice rank");
        let sub = bundle::slice_shape(shape, s);
        for ((&d, &x), e) in shape.iter().zip(&sub).zip(s) {
            if e.length >= 0 {
                assert!(
                    e.start >= 0 && (e.start as u64).checked_add(x).is_some_and(|end| end <= d)
                );
            } else {
                assert_eq!(e.length, -1);
                assert_eq!(x, d);
            }
        }
        assert_eq!(
            bundle::slice_elements(shape, s),
            sub.iter().product::<u64>()
        );
        let norm: Vec<(i64, i64)> = s
            .iter()
            .map(|e| {
                if e.length < 0 {
                    (0, -1)
                } else {
                    (e.start, e.length)
                }
            })
            .collect();
        let key = slice_key::encode(name, s);
        assert_eq!(
            key.first(),
            Some(&0u8),
            "slice keys start with NUL (hidden)"
        );
        keyed.push((norm, key));
    }
    for w in keyed.windows(2) {
        assert_eq!(
            w[0].0.cmp(&w[1].0),
            w[0].1.cmp(&w[1].1),
            "slice keys do not sort like their extents: {:?} / {:?}",
            w[0].0,
            w[1].0
        );
    }
    let tiled = bundle::check_tiling(shape, slices).is_ok();
    let n: u64 = shape.iter().product();
    if n <= 4096 && (slices.len() as u64).saturating_mul(n) <= 1 << 20 {
        assert_eq!(
            tiled,
            covered_exactly_once(shape, slices),
            "check_tiling on {shape:?} {slices:?}"
        );
    }
}

/// Reference for `check_tiling`: every element of `shape` lies in exactly one slice.
fn covered_exactly_once(shape: &[u64], slices: &[Vec<Extent>]) -> bool {
    let n: u64 = shape.iter().product();
    let mut idx = vec![0u64; shape.len()];
    for e in 0..n {
        let mut rem = e;
        for j in (0..shape.len()).rev() {
            idx[j] = rem % shape[j];
            rem /= shape[j];
        }
        let count = slices
            .iter()
            .filter(|s| {
                s.iter().zip(shape).zip(&idx).all(|((x, &d), &i)| {
                    let (a, b) = if x.length < 0 {
                        (0, d)
                    } else {
                        (x.start as u64, x.start as u64 + x.length as u64)
                    };
                    a <= i && i < b
                })
            })
            .count();
        if count != 1 {
            return false;
        }
    }
    true
}

// ---------------------------------------------------------------------------------------------
// strings
// ---------------------------------------------------------------------------------------------

/// A string (and variant) tensor's stored bytes: layout parse compared with a reference parse,
/// every element, served reads in one piece and in chunks, CRC checks. Input: flags (1 byte),
/// element count (u16 LE), a masked CRC (u32 LE), the stored bytes. Flags: bit 0 also parses
/// with the input's CRC; bit 1 rewrites the length checksum, passes the right CRC and requires
/// success whenever the reference parse succeeds; bit 2 does the same for the variant element
/// checksums; bits 3..8 pick the read chunk size.
pub(crate) fn strings(data: &[u8]) {
    if data.len() < 7 {
        return;
    }
    let flags = data[0];
    let n = u16::from_le_bytes([data[1], data[2]]) as u64;
    let crc = u32::from_le_bytes([data[3], data[4], data[5], data[6]]);
    let stored = &data[7..];

    let parsed = StringLayout::parse(stored, n, None);
    let reference = reference_strings(stored, n);
    match (&parsed, &reference) {
        (Ok(layout), Some(r)) => check_layout(layout, stored, r, 1 + (flags >> 3) as usize),
        (Err(_), None) => {}
        (Ok(_), None) => panic!("StringLayout accepted bytes the reference parse refuses"),
        (Err(e), Some(_)) => panic!("StringLayout refused bytes the reference parse accepts: {e}"),
    }
    if flags & 1 != 0 {
        let with_crc = StringLayout::parse(stored, n, Some(crc));
        assert!(with_crc.is_err() || parsed.is_ok());
    }
    if flags & 2 != 0 {
        if let Some(r) = &reference {
            let (fixed, masked) = with_string_crcs(stored, r);
            if let Err(e) = StringLayout::parse(&fixed, n, Some(masked)) {
                panic!("a string tensor with correct checksums was refused: {e}");
            }
        }
    }
    let variant = strings::verify_variant(stored, n, crc);
    if flags & 4 != 0 {
        match with_variant_crcs(stored, n) {
            Some((fixed, masked)) => {
                if let Err(e) = strings::verify_variant(&fixed, n, masked) {
                    panic!("a variant tensor with correct checksums was refused: {e}");
                }
            }
            None => assert!(variant.is_err(), "a malformed variant tensor verified"),
        }
    }
}

/// Where the reference parse puts things: the length checksum's offset, then each element's
/// (offset, length) in the stored bytes.
struct RefStrings {
    checksum_at: usize,
    lens: Vec<u64>,
    elems: Vec<(usize, usize)>,
}

/// tf-format.md §4.2, written independently of `StringLayout`: n varint64 lengths, 4 bytes of
/// masked CRC, then the strings back to back (trailing bytes allowed).
fn reference_strings(stored: &[u8], n: u64) -> Option<RefStrings> {
    if n > stored.len() as u64 {
        return None;
    }
    let mut pos = 0usize;
    let mut lens = Vec::new();
    let mut total = 0u128;
    for _ in 0..n {
        let (len, used) = varint::decode_u64(&stored[pos..])?;
        pos += used;
        total += len as u128;
        lens.push(len);
    }
    let checksum_at = pos;
    let data_start = pos.checked_add(4).filter(|&d| d <= stored.len())?;
    if data_start as u128 + total > stored.len() as u128 {
        return None;
    }
    let mut elems = Vec::with_capacity(lens.len());
    let mut at = data_start;
    for &len in &lens {
        elems.push((at, len as usize));
        at += len as usize;
    }
    Some(RefStrings {
        checksum_at,
        lens,
        elems,
    })
}

fn check_layout(layout: &StringLayout, stored: &[u8], r: &RefStrings, chunk: usize) {
    assert_eq!(layout.len(), r.elems.len());
    let mut want = Vec::new();
    for (i, &(start, len)) in r.elems.iter().enumerate() {
        let elem = &stored[start..start + len];
        assert_same(layout.element(stored, i), elem, &format!("element {i}"));
        want.extend_from_slice(&(len as u64).to_le_bytes());
        want.extend_from_slice(elem);
    }
    let total = layout.served_len();
    assert_eq!(total, want.len() as u64, "served length");
    assert_same(
        &layout.read(stored, 0, usize::MAX),
        &want,
        "one read of everything",
    );
    assert!(layout.read(stored, total, 16).is_empty());
    assert!(layout.read(stored, u64::MAX, 16).is_empty());
    let chunk = chunk.max(want.len() / 4096 + 1);
    let mut pieces = Vec::new();
    let mut off = 0u64;
    while off < total {
        let piece = layout.read(stored, off, chunk);
        assert_eq!(
            piece.len() as u64,
            chunk.min((total - off) as usize) as u64,
            "read at {off}"
        );
        pieces.extend_from_slice(&piece);
        off += chunk as u64;
    }
    assert_same(&pieces, &want, &format!("reads in {chunk}-byte pieces"));
}

/// `stored` with its length checksum rewritten to match, and the masked CRC of the whole.
fn with_string_crcs(stored: &[u8], r: &RefStrings) -> (Vec<u8>, u32) {
    let mut fixed = stored.to_vec();
    let mut crc = 0u32;
    for &len in &r.lens {
        crc = match u32::try_from(len) {
            Ok(l) => crc32c::crc32c_append(crc, &l.to_le_bytes()),
            Err(_) => crc32c::crc32c_append(crc, &len.to_le_bytes()),
        };
    }
    let cs = mask_crc(crc).to_le_bytes();
    fixed[r.checksum_at..r.checksum_at + 4].copy_from_slice(&cs);
    crc = crc32c::crc32c_append(crc, &cs);
    let end = r.elems.last().map_or(r.checksum_at + 4, |&(s, l)| s + l);
    crc = crc32c::crc32c_append(crc, &stored[r.checksum_at + 4..end]);
    (fixed, mask_crc(crc))
}

/// `stored` with every variant element's running checksum rewritten to match (tf-format.md
/// §4.3), and the masked CRC of the whole; `None` if the elements do not fit.
fn with_variant_crcs(stored: &[u8], n: u64) -> Option<(Vec<u8>, u32)> {
    let mut fixed = stored.to_vec();
    let mut pos = 0usize;
    let mut crc = 0u32;
    for _ in 0..n {
        let (len, used) = varint::decode_u64(fixed.get(pos..)?)?;
        pos += used;
        let end = pos.checked_add(usize::try_from(len).ok()?)?;
        if end.checked_add(4)? > fixed.len() {
            return None;
        }
        crc = crc32c::crc32c_append(crc, &len.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &fixed[pos..end]);
        let cs = mask_crc(crc).to_le_bytes();
        fixed[end..end + 4].copy_from_slice(&cs);
        crc = crc32c::crc32c_append(crc, &cs);
        pos = end + 4;
    }
    Some((fixed, mask_crc(crc)))
}

// ---------------------------------------------------------------------------------------------
// checkpoint_state
// ---------------------------------------------------------------------------------------------

/// Checkpoints the scratch directory of `checkpoint_state` holds (as `NAME.index`).
const STATE_DIR_CHECKPOINTS: &[&str] = &["model.ckpt-1", "ckpt-2", "a b"];

/// A `checkpoint` state file: parsed, and resolved in a directory holding a few checkpoints.
/// Resolution must succeed exactly when the text parses; what it returns must exist, be named
/// uniquely, and include every listed path whose base name is a checkpoint of the directory.
pub(crate) fn checkpoint_state(data: &[u8]) {
    let dir = scratch_dir();
    for name in STATE_DIR_CHECKPOINTS {
        if std::fs::write(dir.path().join(format!("{name}.index")), b"").is_err() {
            return;
        }
    }
    let state_file = dir.path().join("checkpoint");
    if std::fs::write(&state_file, data).is_err() {
        return;
    }
    let parsed = std::str::from_utf8(data).ok().map(state::parse);
    let resolved = state::resolve(&crate::source::local::LocalStore, dir.path(), &state_file);
    let Some(Ok(st)) = parsed else {
        assert!(
            resolved.is_err(),
            "resolve accepted a state file parse refuses"
        );
        return;
    };
    let (list, latest) = match resolved {
        Ok(r) => r,
        Err(e) => panic!("resolve refused a state file parse accepts: {e}"),
    };
    let mut names = HashSet::new();
    for (name, prefix) in &list {
        assert!(!name.is_empty() && !name.contains('/'), "bad name {name:?}");
        assert!(names.insert(name.clone()), "{name:?} listed twice");
        assert!(index_file_name(prefix).is_file(), "{prefix:?} has no index");
    }
    if let Some(l) = &latest {
        assert!(names.contains(l), "latest {l:?} is not listed");
    }
    let listed = st
        .all_model_checkpoint_paths
        .iter()
        .chain(std::iter::once(&st.model_checkpoint_path));
    for p in listed {
        let base = Path::new(p).file_name().and_then(|b| b.to_str());
        if let Some(b) = base.filter(|b| STATE_DIR_CHECKPOINTS.contains(b)) {
            assert!(
                names.contains(b),
                "{p:?} names {b}, which exists, but was not resolved"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// checkpoint
// ---------------------------------------------------------------------------------------------

/// Most data shards one input writes.
const MAX_SHARD_FILES: usize = 8;

/// A whole checkpoint through the filesystem core (`Fs`), as the kernel would use it: every
/// directory listed (and resumed from cookies), every name looked up, every file read in pieces
/// and whole, xattrs and symlinks. Invariants: listed names look up to the same inode, sizes
/// from `getattr` are the sizes read, an `.npy` file is its header followed by the `.bin` bytes.
///
/// Input: flags (1 byte), then chunks `[u32 LE length][bytes]` (a length past the end takes the
/// rest): the `.index` file, then data shards 0, 1, ... (as many as the header asks for, at most
/// 8; missing ones stay missing). Flags: bit 0 keeps index block checksums as they are; bit 1
/// verifies tensor CRCs; bit 2 disables the block cache; bits 3..6 pick the read size; bit 6
/// gives the prefix an empty base name (`dir/`: files `dir/.index`, `dir/.data-*`).
pub(crate) fn checkpoint(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let chunks = split_chunks(rest, 1 + MAX_SHARD_FILES);
    let Some(index) = chunks.first() else {
        return;
    };
    let mut index = index.to_vec();
    if flags & 1 == 0 {
        fix_table_crcs(&mut index);
    }
    let num_shards = header_of(&index).map_or(1, |h| h.num_shards);
    let dir = scratch_dir();
    let prefix = if flags & 0x40 != 0 {
        let mut p = dir.path().as_os_str().to_owned();
        p.push("/");
        std::path::PathBuf::from(p)
    } else {
        dir.path().join("ck")
    };
    if std::fs::write(index_file_name(&prefix), &index).is_err() {
        return;
    }
    for (i, shard) in chunks[1..].iter().enumerate().take(num_shards as usize) {
        if std::fs::write(data_file_name(&prefix, i as u32, num_shards), shard).is_err() {
            return;
        }
    }
    let opts = Options {
        verify_crc: flags & 2 != 0,
        cache_bytes: if flags & 4 != 0 { 0 } else { 1 << 20 },
        ..Options::default()
    };
    let read_size = [4096, 1, 7, 64, 100, 512, 8191, 1 << 16][((flags >> 3) & 7) as usize];
    if let Ok(fs) = Fs::new(&Probed::prefix(prefix), &opts) {
        walk_fs(&fs, read_size, true);
    }
}

/// Splits `data` into at most `max` chunks of `[u32 LE length][bytes]`.
pub(crate) fn split_chunks(mut data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while out.len() < max && data.len() >= 4 {
        let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let rest = &data[4..];
        let len = len.min(rest.len());
        out.push(&rest[..len]);
        data = &rest[len..];
    }
    out
}

/// Joins chunks in the layout `split_chunks` reads.
pub(crate) fn join_chunks(chunks: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c);
    }
    out
}

fn header_of(index: &[u8]) -> Option<bundle::Header> {
    let t = Table::open(Arc::new(index.to_vec()), Caches::new(0)).ok()?;
    let (blk, i) = t.entry(t.seek(b"").ok()??).ok()?;
    if !blk.key(i).is_empty() {
        return None;
    }
    bundle::parse_header(blk.value(i)).ok()
}

/// A fresh scratch directory, in tmpfs where there is one.
pub(crate) fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("the fuzz harness cannot make a scratch directory: {e}"),
    }
}

/// Most nodes and bytes one input is walked through (bounds the time of one run).
const MAX_NODES: usize = 1_000;
const MAX_FILE_BYTES: u64 = 256 << 10;

/// Tensors of one checkpoint checked against the input's bytes per input.
const MAX_CHECKED_TENSORS: u64 = 400;

/// Every tensor of the mount's checkpoints that opens (the first [`MAX_CHECKED_TENSORS`] of
/// each): it serves exactly shape × element size bytes (where the dtype has a size), and one
/// of at most [`MAX_FILE_BYTES`] read whole gives that many, which `check` gets with what the
/// index says of the tensor (to compare with the input where it is stored in place).
fn each_served_tensor(fs: &Fs, mut check: impl FnMut(&TensorInfo, &[u8])) {
    for (_, set) in fs.checkpoints() {
        let mut pos = set.seek(b"").ok().flatten();
        let mut n = 0;
        while let Some(p) = pos {
            n += 1;
            if n > MAX_CHECKED_TENSORS {
                break;
            }
            pos = set.next(p).ok().flatten();
            let Ok(info) = set.info(p) else { continue };
            let Ok(data) = set.open(p) else { continue };
            let size = data.size();
            if let Some(es) = info.dtype.elem_size() {
                let want = info
                    .shape
                    .iter()
                    .try_fold(es as u64, |a, &d| a.checked_mul(d));
                assert_eq!(
                    want,
                    Some(size),
                    "{}: served {size} bytes for shape {:?} of {}",
                    String::from_utf8_lossy(&info.key),
                    info.shape,
                    info.dtype.display_name()
                );
            }
            if size > MAX_FILE_BYTES {
                continue;
            }
            let Ok(bytes) = data.read(0, size as usize) else {
                continue;
            };
            assert_eq!(bytes.len() as u64, size, "a whole read is the whole size");
            check(&info, &bytes);
        }
    }
}

/// Walks the whole mount with the shared walker (`src/testkit/walk.rs`, lenient: listings
/// resumed from their first, middle and last cookies, every listed name looked up, every file
/// read in `read_size` pieces and whole) checking the invariants of [`checkpoint`]; with
/// `key_names`, also that each name under a checkpoint view is the escaped last component of
/// its key.
fn walk_fs(fs: &Fs, read_size: usize, key_names: bool) {
    let core = walk::Core {
        read_size,
        max_file_bytes: MAX_FILE_BYTES,
        max_entries: MAX_NODES,
        ..walk::Core::lenient(fs)
    };
    let opts = walk::Walk {
        max_nodes: MAX_NODES,
        read: true,
        keys: key_names,
    };
    let nodes = walk::walk(&core, &opts);
    for (path, node) in &nodes {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if let Some(key) = &node.key {
            check_name(name, key, node.kind);
        }
        // An `.npy` file is an NPY header followed by exactly the `.bin` bytes.
        let (Some(stem), Some(Ok(npy))) = (path.strip_suffix(b".npy"), &node.data) else {
            continue;
        };
        let bin_path = [stem, b".bin"].concat();
        if let Some(Some(Ok(bin))) = nodes.get(&bin_path).map(|n| &n.data) {
            assert!(
                npy.len() >= bin.len() && npy.ends_with(bin),
                ".npy data differs from .bin"
            );
            assert!(npy.starts_with(b"\x93NUMPY"), ".npy header");
        }
    }
}

/// A name under `variables/` is the escaped last component of the key (or key prefix) its
/// `user.tfmount.key` holds, plus a file suffix for files.
fn check_name(name: &[u8], key: &[u8], kind: Kind) {
    let (stem, raw, is_dir) = match kind {
        Kind::Dir => (name, key.strip_suffix(b"/").unwrap_or(key), true),
        _ => match FileKind::split(name) {
            Some((stem, _)) => (stem, key, false),
            None => return,
        },
    };
    let last = raw.rsplit(|&b| b == b'/').next().unwrap_or(raw);
    assert_eq!(
        String::from_utf8_lossy(stem),
        String::from_utf8_lossy(&namespace::escape(last, is_dir)),
        "name of key {:?}",
        String::from_utf8_lossy(key)
    );
}

// ---------------------------------------------------------------------------------------------
// graph
// ---------------------------------------------------------------------------------------------

/// The file names a `graph` input is mounted as, by `flags % 5`.
const GRAPH_FILES: [&str; 5] = [
    "saved_model.pb",
    "saved_model.pbtxt",
    "model.meta",
    "graph.pb",
    "graph.pbtxt",
];

/// A graph file (SavedModel, `.meta`, frozen GraphDef; binary or text) mounted through `Fs`
/// and walked like [`checkpoint`]'s mounts: protobuf decoding and text rendering of every node,
/// function, signature and constant. Input: flags (1 byte: `% 5` picks the file name, bit 3
/// disables the block cache, bits 4..6 pick the read size), then the file.
pub(crate) fn graph(data: &[u8]) {
    let Some((&flags, file)) = data.split_first() else {
        return;
    };
    let dir = scratch_dir();
    let path = dir.path().join(GRAPH_FILES[(flags % 5) as usize]);
    if std::fs::write(&path, file).is_err() {
        return;
    }
    let opts = Options {
        text_cache_bytes: if flags & 8 != 0 { 0 } else { 1 << 20 },
        ..Options::default()
    };
    let read_size = [4096, 1, 7, 100, 512, 8191, 1 << 16, 3][((flags >> 4) & 7) as usize];
    if let Ok(probed) = probe(&path) {
        if let Ok(fs) = Fs::new(&probed, &opts) {
            walk_fs(&fs, read_size, false);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------------------------

/// A few state files beyond the fixtures' (stale absolute paths, odd names, bad syntax).
const STATE_SEEDS: &[&str] = &[
    "model_checkpoint_path: \"model.ckpt-1\"\nall_model_checkpoint_paths: \"model.ckpt-1\"\n",
    "model_checkpoint_path: \"/gone/dir/ckpt-2\"\nall_model_checkpoint_paths: \"a b\"\n\
     all_model_checkpoint_paths: \"../x/model.ckpt-1\"\nall_model_checkpoint_timestamps: 1.5e9\n",
    "model_checkpoint_path: 'ckpt-2' # comment\nlast_preserved_timestamp: -2\n",
    "model_checkpoint_path: \"\\x00\\303\\251\"\nall_model_checkpoint_paths: \"\"\n",
    "all_model_checkpoint_paths: [\"ckpt-2\", \"a b\"]\n",
];

/// Graph files of the fixtures, with the flags byte naming their kind (see [`GRAPH_FILES`]);
/// the 220 KiB `saved_model.pbtxt` is left out (it would slow every mutation).
const GRAPH_SEEDS: &[(u8, &str)] = &[
    (0, "demo_savedmodel/saved_model.pb"),
    (0, "graphs/tf1_two_tags/saved_model.pb"),
    (0, "graphs/tf2_module/saved_model.pb"),
    // Concrete functions of every argument kind: signatures.txt decodes its StructuredValues.
    (0, "graphs/tf2_signatures/saved_model.pb"),
    (2, "graphs/tf1_meta/model.ckpt.meta"),
    (2, "tf1_adam/model.ckpt-2.meta"),
    (3, "graphs/frozen/graph.pb"),
    (4, "graphs/frozen/graph.pbtxt"),
];

/// Seed inputs for every target, made from the fixture checkpoints under `fixtures`:
/// `(target, name, bytes)`.
pub fn seeds(fixtures: &Path) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut entry_values = HashSet::new();
    for (name, prefix) in fixture_prefixes(fixtures)? {
        let index = std::fs::read(index_file_name(&prefix))?;
        out.push(("table", name.clone(), [&[0u8][..], &index].concat()));
        let Some(h) = header_of(&index) else {
            continue;
        };
        let shards: Vec<Vec<u8>> = (0..h.num_shards.min(MAX_SHARD_FILES as u32))
            .map(|i| std::fs::read(data_file_name(&prefix, i, h.num_shards)).unwrap_or_default())
            .collect();
        let mut chunks: Vec<&[u8]> = vec![&index];
        chunks.extend(shards.iter().map(|s| &s[..]));
        out.push((
            "checkpoint",
            name.clone(),
            [&[2u8][..], &join_chunks(&chunks)].concat(),
        ));
        // The same checkpoint under a prefix with an empty base name (`dir/.index`).
        out.push((
            "checkpoint",
            format!("{name}-empty-base"),
            [&[0x42u8][..], &join_chunks(&chunks)].concat(),
        ));
        let t =
            Table::open(Arc::new(index.clone()), Caches::new(0)).map_err(std::io::Error::other)?;
        let mut pos = t.seek(b"").map_err(std::io::Error::other)?;
        let mut k = 0;
        while let Some(p) = pos {
            let (blk, i) = t.entry(p).map_err(std::io::Error::other)?;
            let value = blk.value(i).to_vec();
            if !blk.key(i).is_empty() {
                if let Ok(e) = bundle::parse_entry(&value) {
                    string_seed(&e, &shards, &name, k, &mut out);
                    if blk.key(i) == b"_CHECKPOINTABLE_OBJECT_GRAPH" {
                        object_graph_seed(&e, &shards, &name, &mut out);
                    }
                }
            }
            if entry_values.insert(value.clone()) {
                out.push(("bundle_entry", format!("{name}-{k}"), value));
            }
            k += 1;
            pos = t.next(p).map_err(std::io::Error::other)?;
        }
    }
    for (flags, rel) in GRAPH_SEEDS {
        if let Ok(bytes) = std::fs::read(fixtures.join(rel)) {
            let name = rel.replace('/', "-");
            out.push(("graph", name, [&[*flags][..], &bytes].concat()));
        }
    }
    for d in ["tf1_adam", "tf2_keras"] {
        if let Ok(text) = std::fs::read(fixtures.join(d).join("checkpoint")) {
            out.push(("checkpoint_state", d.to_string(), text));
        }
    }
    out.extend(v1::seeds(fixtures)?);
    out.extend(keras::seeds(fixtures)?);
    out.extend(tfjs::seeds(fixtures)?);
    out.extend(tflite::seeds(fixtures)?);
    out.extend(ocdbt::seeds(fixtures)?);
    out.extend(zarr::seeds(fixtures)?);
    out.extend(orbax_meta::seeds(fixtures)?);
    out.extend(safetensors::seeds(fixtures)?);
    out.extend(nfs::seeds());
    out.extend(edits::seeds());
    for (descr, shape) in [("<f4", &[3u64, 4][..]), ("|b1", &[][..]), ("<i8", &[5][..])] {
        if let Some(h) = crate::parse::npy::header(descr, shape) {
            out.push(("npy", descr[1..].to_string(), h));
        }
    }
    {
        use prost::Message;
        let vars: Vec<(String, String)> = ["model/enc/kernel", "model/dec/bias", "optimizer/iter"]
            .iter()
            .map(|p| (p.to_string(), format!("{p}/.ATTRIBUTES/VARIABLE_VALUE")))
            .collect();
        let g = crate::testkit::writer::object_graph(&vars).encode_to_vec();
        out.push(("object_graph", "three".to_string(), g));
    }
    for (i, s) in STATE_SEEDS.iter().enumerate() {
        out.push((
            "checkpoint_state",
            format!("extra-{i}"),
            s.as_bytes().to_vec(),
        ));
    }
    Ok(out)
}

/// A TF2 checkpoint's object graph (a string scalar: its length, a checksum, the bytes), as a
/// seed of `object_graph`.
fn object_graph_seed(
    e: &bundle::Entry,
    shards: &[Vec<u8>],
    name: &str,
    out: &mut Vec<(&'static str, String, Vec<u8>)>,
) {
    let Data::Contiguous {
        shard,
        offset,
        size,
        ..
    } = e.data
    else {
        return;
    };
    let Some(b) = shards
        .get(shard as usize)
        .and_then(|s| s.get(offset as usize..(offset + size) as usize))
    else {
        return;
    };
    let Some((len, n)) = varint::decode_u64(b) else {
        return;
    };
    if let Some(body) = b.get(n + 4..n + 4 + len as usize) {
        out.push(("object_graph", name.to_string(), body.to_vec()));
    }
}

fn string_seed(
    e: &bundle::Entry,
    shards: &[Vec<u8>],
    name: &str,
    k: usize,
    out: &mut Vec<(&'static str, String, Vec<u8>)>,
) {
    let Data::Contiguous {
        shard,
        offset,
        size,
        crc,
    } = e.data
    else {
        return;
    };
    if e.dtype != DT_STRING && e.dtype != DT_VARIANT {
        return;
    }
    let (Ok(n), Some(bytes)) = (
        u16::try_from(e.num_elements()),
        shards
            .get(shard as usize)
            .and_then(|s| s.get(offset as usize..(offset + size) as usize)),
    ) else {
        return;
    };
    let mut input = vec![0b110];
    input.extend_from_slice(&n.to_le_bytes());
    input.extend_from_slice(&crc.to_le_bytes());
    input.extend_from_slice(bytes);
    out.push(("strings", format!("{name}-{k}"), input));
}

/// Every checkpoint prefix (a `P.index` file) one or two levels below `fixtures`, named after
/// its path (`tf1_adam-model.ckpt-2`), sorted.
fn fixture_prefixes(fixtures: &Path) -> std::io::Result<Vec<(String, std::path::PathBuf)>> {
    let mut out = Vec::new();
    let mut dirs = vec![fixtures.to_path_buf()];
    for d in std::fs::read_dir(fixtures)? {
        let d = d?.path();
        if d.is_dir() {
            dirs.push(d.clone());
            if d.join("variables").is_dir() {
                dirs.push(d.join("variables"));
            }
        }
    }
    for d in dirs {
        for f in std::fs::read_dir(&d)? {
            let p = f?.path();
            let Some(stem) = p.to_str().and_then(|s| s.strip_suffix(".index")) else {
                continue;
            };
            let rel = Path::new(stem)
                .strip_prefix(fixtures)
                .unwrap_or(Path::new(stem))
                .to_string_lossy()
                .replace('/', "-");
            out.push((rel, std::path::PathBuf::from(stem)));
        }
    }
    out.sort();
    Ok(out)
}
