//! Writing a `.safetensors` file for `export --to safetensors`, with the guarantees of the V2
//! writer ([`super::output`]): the header (laid out by [`crate::parse::safetensors::Layout`],
//! the same layout `model.safetensors` serves), then every tensor's bytes in the header's
//! order, streamed into a temporary file beside `OUT` with each tensor's CRC-32C computed on the
//! way; then `fsync`, every tensor read back against its CRC, the header read back whole, and
//! the file renamed to `OUT`. safetensors stores no checksum: the CRCs are the writer's own.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::output::{copy_range, named, stream, ReadBack, Target, Verifier};

const BUF: usize = 1 << 20;

/// A `.safetensors` file being written to `OUT`.
pub(crate) struct SafetensorsWriter {
    out: PathBuf,
    target: Target,
    path: PathBuf,
    file: BufWriter<File>,
    header: Vec<u8>,
    /// Each tensor's bytes in the file, their CRC-32C, and whether they were read back already.
    written: Vec<(u64, u64, u32, bool)>,
    at: u64,
    /// Reads back what the kernel copied while the next tensor is written.
    verifier: Verifier,
    finished: bool,
}

impl SafetensorsWriter {
    /// A writer of `out` whose header is `header` (the length, the JSON, its padding). `out`
    /// existing is refused unless `force`.
    pub(crate) fn create(out: &Path, header: Vec<u8>, force: bool) -> Result<Self, String> {
        if !force && fs::symlink_metadata(out).is_ok() {
            return Err(format!("{}: exists (--force replaces it)", out.display()));
        }
        let target = Target::new(out)?;
        let (path, mut file) = target.create(".safetensors", BUF)?;
        file.write_all(&header).map_err(|e| named(&path, e))?;
        Ok(SafetensorsWriter {
            out: out.to_path_buf(),
            target,
            at: header.len() as u64,
            path,
            file,
            header,
            written: Vec::new(),
            verifier: Verifier::new(),
            finished: false,
        })
    }

    /// Adds the next tensor of the header's order: `size` bytes handed over by `fill`; returns
    /// their CRC-32C.
    pub(crate) fn add(
        &mut self,
        size: u64,
        fill: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<u32, String> {
        let crc = stream(&mut self.file, &self.path, size, fill)?;
        self.written.push((self.at, self.at + size, crc, false));
        self.at += size;
        Ok(crc)
    }

    /// Adds the next tensor from `size` bytes of the local file `src` at `offset`, stored there
    /// with the CRC-32C `stored_crc`: copied by the kernel, read back at once against it (as
    /// [`crate::formats::v2::write::BundleWriter::add_copied`]). `Ok(false)`, nothing added,
    /// where the kernel cannot copy between the two files.
    pub(crate) fn add_copied(
        &mut self,
        key: &str,
        size: u64,
        (src, src_path, offset): (&File, &Path, u64),
        stored_crc: u32,
    ) -> Result<bool, String> {
        self.file.flush().map_err(|e| named(&self.path, e))?;
        if !copy_range(src, offset, self.file.get_ref(), &self.path, size)? {
            return Ok(false);
        }
        let (at, end) = (self.at, self.at + size);
        self.at = end;
        let what = format!(
            "{key}: CRC-32C mismatch in its copy from {} at {offset}",
            src_path.display()
        );
        self.verifier.check(&self.path, at, end, stored_crc, what)?;
        self.written.push((at, end, stored_crc, true));
        Ok(true)
    }

    /// The first error the read-back of a copied tensor found so far.
    pub(crate) fn failed(&self) -> Option<String> {
        self.verifier.failed()
    }

    /// Makes `OUT` whole (see the module's docs); on failure the temporary is removed.
    pub(crate) fn finish(mut self) -> Result<(u64, PathBuf), String> {
        let path = self.path.clone();
        self.file.flush().map_err(|e| named(&path, e))?;
        let f = self.file.get_ref();
        f.sync_all().map_err(|e| named(&path, e))?;
        self.verifier.finish()?;
        let mut head = vec![0u8; self.header.len()];
        f.read_exact_at(&mut head, 0).map_err(|e| named(&path, e))?;
        if head != self.header {
            return Err(format!("{}: the header read back differs", path.display()));
        }
        let mut rb = ReadBack::new(f, &path, self.at);
        for &(a, z, crc, _) in self.written.iter().filter(|w| !w.3) {
            let got = rb.crc(a, z)?;
            if got != crc {
                return Err(format!(
                    "{}: bytes {a}..{z} read back differ from what was written",
                    path.display()
                ));
            }
        }
        drop(rb);
        fs::rename(&path, &self.out).map_err(|e| named(&self.out, e))?;
        self.target.sync_dir();
        self.finished = true;
        Ok((self.at, self.out.clone()))
    }
}

impl Drop for SafetensorsWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_file(&self.path);
        }
    }
}
