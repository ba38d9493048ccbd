//! Inputs the fuzzers found (`tests/fuzz_regressions/<target>/<name>`), replayed through the
//! same entry points as the fuzz targets (`src/testkit/fuzz/`): each must now run to the end
//! without a panic, and the named tests below check what the fixed code returns for them.
//! Also: the seeds made from the fixtures run clean, which keeps the entry points' invariant
//! checks honest against real TensorFlow files.

use crate::common;

use common::fixtures;
use std::path::{Path, PathBuf};

use crate::common::tracking_alloc::largest_allocation;
use tfmount::parse::table::Block;
use tfmount::parse::{table, FormatError};
use tfmount::testkit::fuzz as targets;

const MIB: usize = 1 << 20;

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions")
}

/// The saved input `tests/fuzz_regressions/<target>/<name>`.
fn input(target: &str, name: &str) -> Vec<u8> {
    let p = regressions_dir().join(target).join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every saved input of every target runs through its target without panicking. A directory
/// named after no target is an error (a renamed target must take its inputs along).
#[test]
fn every_saved_input_runs_clean() {
    let mut ran = 0;
    for d in std::fs::read_dir(regressions_dir()).expect("tests/fuzz_regressions") {
        let d = d.expect("dirent").path();
        let name = d
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let target = targets::target(&name)
            .unwrap_or_else(|| panic!("{}: no fuzz target of that name", d.display()));
        for f in std::fs::read_dir(&d).expect("target dir") {
            let f = f.expect("dirent").path();
            let bytes = std::fs::read(&f).expect("input");
            target(&bytes);
            ran += 1;
        }
    }
    assert!(ran > 0, "no saved inputs found");
}

/// The seeds made from the fixtures pass every target's invariant checks: the checks hold on
/// real TensorFlow files, and each target gets seeds (so the fuzzers start from real inputs).
#[test]
fn fixture_seeds_run_clean() {
    let seeds = targets::seeds(&fixtures()).expect("seeds");
    for (name, t) in targets::TARGETS {
        let own: Vec<_> = seeds.iter().filter(|(n, ..)| n == name).collect();
        assert!(own.len() >= 2, "target {name} has {} seeds", own.len());
        for (_, seed, bytes) in own {
            eprintln!("{name}/{seed}");
            t(bytes);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Found inputs, one test each
// ---------------------------------------------------------------------------------------------

/// `table/snappy-claims-200mb`: a 60-byte index whose index block is Snappy-compressed and
/// whose Snappy header claims 200,000,000 bytes. tfmount allocated the claimed size before
/// decompressing (any claim up to the 256 MiB block limit was honoured); found with libFuzzer's
/// `-malloc_limit_mb=64`. Now a claim larger than the compressed bytes can expand to is refused
/// first.
#[test]
fn snappy_length_claim_is_refused_before_allocating() {
    let data = input("table", "snappy-claims-200mb");
    let table_target = targets::target("table").expect("the table target");
    let used = largest_allocation(|| table_target(&data));
    assert!(used < MIB, "largest allocation {used} bytes");
    let mut file = data[1..].to_vec();
    tfmount::testkit::writer::fix_table_crcs(&mut file);
    let footer = table::parse_footer(&file).expect("footer");
    match table::read_block(&file, footer.index) {
        Err(FormatError::Snappy(msg)) => assert!(msg.contains("200000000"), "{msg}"),
        other => panic!("expected a Snappy error, got {other:?}"),
    }
}

/// `graph/map-order-differs-between-reads` (stable harness, `graph` target): a SavedModel
/// whose `saved_model.pbtxt` read in 512-byte pieces differed from the same file read at once
/// (same length; two `concrete_functions` entries swapped). prost-reflect keeps a decoded map
/// field in a `HashMap` and prints it in that map's (random) order, so every rendering of a
/// message with a map field (NodeDef `attr`, signatures, functions, collections) could order it
/// differently, and a file rendered again for a later read changed under the reader.
#[test]
fn graph_text_renders_maps_in_one_order() {
    let data = input("graph", "map-order-differs-between-reads");
    targets::target("graph").expect("the graph target")(&data);
    // The same message rendered many times gives the same bytes.
    let pb = std::fs::read(fixtures().join("graphs/frozen/graph.pb")).expect("graph.pb");
    let range = 0..pb.len();
    let whole = std::slice::from_ref(&range);
    let first = tfmount::render::message_text("tensorflow.GraphDef", &pb, whole).expect("renders");
    assert!(
        first.windows(5).any(|w| w == b"attr:"),
        "the graph has attr maps"
    );
    for _ in 0..20 {
        let again =
            tfmount::render::message_text("tensorflow.GraphDef", &pb, whole).expect("renders");
        assert!(again == first, "a second rendering differs");
    }
}

// ---------------------------------------------------------------------------------------------
// Found by review while writing the targets (no fuzzer input: built here)
// ---------------------------------------------------------------------------------------------

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A block of `(shared, delta, value)` entries with no restart points.
fn block_of(entries: &[(usize, &[u8], &[u8])]) -> Vec<u8> {
    let mut b = Vec::new();
    for (shared, delta, value) in entries {
        put_varint(*shared as u64, &mut b);
        put_varint(delta.len() as u64, &mut b);
        put_varint(value.len() as u64, &mut b);
        b.extend_from_slice(delta);
        b.extend_from_slice(value);
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b
}

/// Prefix compression lets each 5-byte entry repeat the whole previous key and add a byte: 64 KiB
/// of such entries rebuilt ~85 MB of keys (n²/50) when the block was parsed, and a 256 KiB block
/// over 1 GB. Keys may now take at most 64 times the block (plus 1 MiB).
#[test]
fn quadratic_key_expansion_is_refused() {
    let mut entries = Vec::new();
    let mut size = 0;
    while size < 64 << 10 {
        entries.push((entries.len(), &b"k"[..], &b""[..]));
        size += 5;
    }
    let block = block_of(&entries);
    let used = largest_allocation(|| match Block::parse(block.clone()) {
        Err(FormatError::BadBlock(msg)) => assert!(msg.contains("64 times"), "{msg}"),
        other => panic!("expected BadBlock, got {:?}", other.map(|b| b.len())),
    });
    assert!(used < 16 * MIB, "largest allocation {used} bytes");
}

/// The key bound leaves room for absurdly long real names: 1000-byte keys that share all but
/// their last 3 bytes with the previous key (about 37 times the block) still parse.
#[test]
fn long_shared_keys_within_the_bound_still_parse() {
    let mut first = vec![b'n'; 997];
    first.extend_from_slice(b"!!!");
    let value = [7u8; 20];
    let mut deltas = Vec::new();
    for i in 0..400u32 {
        deltas.push(format!("{:03}", i).into_bytes());
    }
    let mut entries: Vec<(usize, &[u8], &[u8])> = vec![(0, &first[..], &value[..])];
    for d in &deltas {
        entries.push((997, &d[..], &value[..]));
    }
    let block = block_of(&entries);
    let keys: usize = 1000 * entries.len();
    assert!(
        keys > 32 * block.len(),
        "the test block must expand more than 32 times"
    );
    let b = Block::parse(block).expect("long shared keys parse");
    assert_eq!(b.len(), 401);
    assert_eq!(&b.key(400)[997..], b"399");
}

/// The Snappy bound is exact enough for real data: the densest Snappy stream (all copies of
/// 64 bytes) still decompresses.
#[test]
fn densest_snappy_block_still_decompresses() {
    let plain = vec![b'a'; 1 << 20];
    let stored = snap::raw::Encoder::new()
        .compress_vec(&plain)
        .expect("compress");
    assert!(
        plain.len() > 20 * stored.len(),
        "ratio {}",
        plain.len() / stored.len()
    );
    let mut file = stored.clone();
    file.push(1);
    let crc = tfmount::parse::mask_crc(crc32c::crc32c(&file));
    file.extend_from_slice(&crc.to_le_bytes());
    let h = table::BlockHandle {
        offset: 0,
        size: stored.len() as u64,
    };
    assert_eq!(table::read_block(&file, h).expect("decompresses"), plain);
}

/// The `keras` target's checksum repair (so mutations reach the HDF5 parsers behind the
/// checksums) leaves a sound file as it is and gives a damaged header its checksum back.
#[test]
fn keras_checksum_repair_is_hdf5s() {
    // A superblock v3 file with version-2 object headers: nothing to repair.
    let sound = std::fs::read(fixtures().join("keras/other_writer.weights.h5")).expect("fixture");
    assert!(sound.windows(4).filter(|w| w == b"OHDR").count() > 10);
    let mut b = sound.clone();
    targets::keras::fix_hdf5_checksums(&mut b);
    assert!(b == sound, "a sound file changed");
    // A damaged header gets its checksum back.
    let at = sound.windows(4).position(|w| w == b"OHDR").expect("OHDR") + 20;
    let mut d = sound.clone();
    d[at] ^= 1;
    targets::keras::fix_hdf5_checksums(&mut d);
    assert_ne!(d[..], sound[..]);
    assert!(d.iter().zip(&sound).filter(|(a, b)| a != b).count() > 1);
}
