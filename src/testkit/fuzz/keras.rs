//! Fuzz body for Keras checkpoints (`tfmount::formats::keras`, `tfmount::formats::keras::hdf5`,
//! `tfmount::parse::zip`, `tfmount::formats::keras::sharded`): one input is one file (HDF5
//! `.weights.h5`/`.h5`, a `.keras` zip, or a sharded model's `.weights.json` manifest), probed, mounted through `Fs` and walked with the shared walker (every
//! directory listed and resumed, every name looked up, every file read in pieces and whole:
//! `.bin`, `.npy`, `.shape`, `.dtype`, `text/`, `stats/`, `names/`, `config.json`, ...).
//!
//! Invariants, beyond the walker's (listed names look up, sizes read are sizes listed, an
//! `.npy` is its header and the `.bin` bytes): each tensor stored in place (contiguous, in the
//! file or in a stored `.keras` member) serves exactly the input's bytes at the offset its
//! index gives, little-endian (element-swapped where the file says big-endian); a tensor that
//! opens serves exactly its shape × element size.
//!
//! Input: flags (1 byte), then the file. Flags: bit 0 keeps HDF5 checksums as they are
//! (otherwise the superblock's and every version-2 object header's are recomputed, so mutations
//! reach the parsers behind them); bits 1..3 pick the read size.

use crate::formats::keras::hdf5::metadata_checksum;
use crate::fs::{Fs, Options};

use super::{each_served_tensor, scratch_dir, walk_fs};

pub(crate) fn keras(data: &[u8]) {
    let Some((&flags, file)) = data.split_first() else {
        return;
    };
    let mut file = file.to_vec();
    if flags & 1 == 0 {
        fix_hdf5_checksums(&mut file);
    }
    let dir = scratch_dir();
    // A JSON input is a sharded model's manifest (`weight_map`: names or lists of them; its
    // shards missing or named wrong are what the mount and `verify` report).
    let name = if file.starts_with(b"PK") {
        "model.keras"
    } else if file.starts_with(b"{") {
        "model.weights.json"
    } else {
        "model.weights.h5"
    };
    let path = dir.path().join(name);
    if std::fs::write(&path, &file).is_err() {
        return;
    }
    let read_size = [4096, 1, 7, 100, 512, 8191, 1 << 16, 3][((flags >> 1) & 7) as usize];
    let Ok(probed) = crate::probe::probe(&path) else {
        return;
    };
    let opts = Options {
        live: false,
        ..Options::default()
    };
    let Ok(fs) = Fs::new(&probed, &opts) else {
        return;
    };
    walk_fs(&fs, read_size, true);
    stored_bytes_are_the_files(&fs, &file);
}

/// Each tensor's bytes: shape × element size when it opens; the input's bytes at its stored
/// offset when it is stored in place.
fn stored_bytes_are_the_files(fs: &Fs, file: &[u8]) {
    each_served_tensor(fs, |info, bytes| {
        let Some(stored) = info.stored else { return };
        let at = usize::try_from(stored.offset).unwrap_or(usize::MAX);
        let Some(raw) = file.get(at..at.saturating_add(bytes.len())) else {
            panic!(
                "{}: served from {at} ({} bytes), past the end of the {}-byte file",
                String::from_utf8_lossy(&info.key),
                bytes.len(),
                file.len()
            );
        };
        let es = info.dtype.elem_size().unwrap_or(1).max(1);
        let swapped: Vec<u8> = raw
            .chunks(es)
            .flat_map(|c| c.iter().rev().copied())
            .collect();
        assert!(
            bytes == raw || bytes == swapped,
            "{}: served bytes are not the file's at offset {at}",
            String::from_utf8_lossy(&info.key)
        );
    });
}

/// Recomputes the checksums a mutation breaks first: the superblock's (versions 2 and 3) and
/// each version-2 object header's first chunk (`OHDR`), wherever their signatures are (in a
/// stored `.keras` member too). Best effort: what does not parse is left alone.
pub fn fix_hdf5_checksums(b: &mut [u8]) {
    const SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";
    let mut at = 0;
    while let Some(i) = find(&b[at..], SIGNATURE).map(|i| i + at) {
        at = i + 1;
        let Some(&[version, o]) = b.get(i + 8..i + 10) else {
            break;
        };
        if version == 2 || version == 3 {
            // signature, version, sizes, flags, four addresses, then the checksum.
            let end = i + 12 + 4 * o as usize;
            if (1..=8).contains(&o) && end + 4 <= b.len() {
                let sum = metadata_checksum(&b[i..end]);
                b[end..end + 4].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
    let mut at = 0;
    while let Some(start) = find(&b[at..], b"OHDR").map(|i| i + at) {
        at = start + 1;
        let Some(&[version, flags]) = b.get(start + 4..start + 6) else {
            break;
        };
        if version != 2 {
            continue;
        }
        let mut i = start + 6;
        if flags & 0x20 != 0 {
            i += 16;
        }
        if flags & 0x10 != 0 {
            i += 4;
        }
        let width = 1usize << (flags & 3);
        let Some(size) = b.get(i..i + width) else {
            continue;
        };
        let size = size
            .iter()
            .rev()
            .fold(0u64, |a, &x| (a << 8) | u64::from(x));
        let Some(end) = usize::try_from(size)
            .ok()
            .and_then(|s| (i + width).checked_add(s))
            .filter(|&e| e.checked_add(4).is_some_and(|e4| e4 <= b.len()))
        else {
            continue;
        };
        let sum = metadata_checksum(&b[start..end]);
        b[end..end + 4].copy_from_slice(&sum.to_le_bytes());
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Seeds: every Keras fixture, checksums as they are recomputed (no change on a sound file).
pub(crate) fn seeds(
    fixtures: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let dir = fixtures.join("keras");
    let mut out = Vec::new();
    for rel in [
        "model.weights.h5",
        "legacy_model.h5",
        "k2_weights.h5",
        "other_writer.weights.h5",
        "model.keras",
        "model_deflated.keras",
        "checkpoints/ckpt-01.weights.h5",
        "sharded/model_00001.weights.h5",
        "sharded_functional/model.weights.json",
    ] {
        let Ok(bytes) = std::fs::read(dir.join(rel)) else {
            continue;
        };
        out.push((
            "keras",
            rel.replace('/', "-"),
            [&[0u8][..], &bytes].concat(),
        ));
    }
    Ok(out)
}
