//! Fuzz body for TFLite models (`tfmount::formats::tflite`, `tfmount::formats::tflite::model`):
//! one input is one `.tflite` file, probed by content (the `TFL3` identifier), mounted through
//! `Fs` and walked with the shared walker (every directory listed and resumed, every name looked
//! up, every file read in pieces and whole: `.bin`, `.npy`, `dequantized/`, `graph/`,
//! `model.txt`, `metadata/`, `subgraphs/N/`, the views).
//!
//! Invariants, beyond the walker's: a tensor that opens serves exactly the input's bytes at the
//! offset its index gives (buffers are served in place), of its shape × element size.
//!
//! Input: flags (1 byte), then the file. Bits 0..2 pick the read size; bit 3 keeps the input's
//! bytes 4..8 as they are (otherwise they are set to `TFL3`, so mutations reach the verifier).

use crate::fs::{Fs, Options};

use super::{each_served_tensor, scratch_dir, walk_fs};

pub(crate) fn tflite(data: &[u8]) {
    let Some((&flags, file)) = data.split_first() else {
        return;
    };
    let mut file = file.to_vec();
    if flags & 8 == 0 && file.len() >= 8 {
        file[4..8].copy_from_slice(b"TFL3");
    }
    let dir = scratch_dir();
    let path = dir.path().join("model.tflite");
    if std::fs::write(&path, &file).is_err() {
        return;
    }
    let read_size = [4096, 1, 7, 100, 512, 8191, 1 << 16, 3][(flags & 7) as usize];
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
    // In-place tensors: the input's bytes at their offset.
    each_served_tensor(&fs, |info, bytes| {
        let Some(stored) = info.stored else { return };
        let at = usize::try_from(stored.offset).unwrap_or(usize::MAX);
        assert_eq!(
            file.get(at..at.saturating_add(bytes.len())),
            Some(bytes),
            "{}: served bytes are not the file's at offset {at}",
            String::from_utf8_lossy(&info.key)
        );
    });
}

pub(crate) fn seeds(
    fixtures: &std::path::Path,
) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let dir = fixtures.join("tflite");
    let mut out = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tflite"))
        .collect();
    names.sort();
    for name in names {
        let bytes = std::fs::read(dir.join(&name))?;
        out.push(("tflite", name, [&[0u8][..], &bytes].concat()));
    }
    Ok(out)
}
