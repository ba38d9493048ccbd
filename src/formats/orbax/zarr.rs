//! zarr arrays as Orbax (through tensorstore) writes them: zarr v2 (`.zarray`, what Orbax's
//! default writes) and zarr v3 (`zarr.json`, what Orbax's v1 API and so Keras's
//! `OrbaxCheckpoint` write, its chunks inside `sharding_indexed` shards); chunk keys, chunk
//! decoding (zstd, gzip, zlib, none; v3's `crc32c` trailers and shard index checksums checked),
//! and the array's `.bin` bytes (row-major, little-endian) assembled from the chunks a byte range
//! covers, each chunk decoded into at most its own size.
//!
//! Format: the zarr v2 specification (`.zarray`: `shape`, `chunks`, `dtype`, `compressor`,
//! `fill_value`, `order`, `filters`, `dimension_separator`), with tensorstore's names for the
//! dtypes numpy lacks (`bfloat16`, `int4`, `float8_*`). A chunk missing from the store holds the
//! fill value (zeros for `null`).

use crate::parse::dtype::DType;
use crate::parse::FormatError;

/// Most elements an array may have (a shape claiming more is refused).
const MAX_ELEMENTS: u64 = 1 << 48;
/// Largest decoded chunk accepted.
pub(crate) const MAX_CHUNK: u64 = 1 << 31;

fn bad(m: impl Into<String>) -> FormatError {
    FormatError::Format(format!("zarr: {}", m.into()))
}

/// How a chunk's bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    None,
    Zstd,
    Gzip,
    Zlib,
}

/// A decoded chunk by its index in the chunk grid (`None`: not stored, the fill value).
pub(crate) type ChunkAt<'a> =
    dyn FnMut(&[u64]) -> Result<Option<std::sync::Arc<Vec<u8>>>, FormatError> + 'a;

/// An array's `.zarray`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArrayMeta {
    pub(crate) shape: Vec<u64>,
    pub(crate) chunks: Vec<u64>,
    pub(crate) dtype: DType,
    /// Bytes per element as stored (and served).
    pub(crate) elem: usize,
    /// Stored big-endian: swapped when served.
    pub(crate) big_endian: bool,
    pub(crate) codec: Codec,
    /// One element of the fill value, as served (little-endian).
    pub(crate) fill: Vec<u8>,
    /// `.` or `/`.
    pub(crate) separator: char,
    /// zarr v3's default chunk key encoding: keys start with `c` (`c/0/1`; `c` for 0-d).
    pub(crate) c_prefix: bool,
    /// A CRC-32C trails each stored chunk (zarr v3's `crc32c` codec).
    pub(crate) crc_trailer: bool,
    /// zarr v3's `sharding_indexed`: chunks (`chunks`) are stored inside shards of this many
    /// chunks along each dimension, each shard one stored value.
    pub(crate) shard: Option<Shard>,
}

/// How a sharded array's chunks sit in its shards.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shard {
    /// Chunks per shard along each dimension.
    pub(crate) per_shard: Vec<u64>,
    /// The shard index (one `(offset, nbytes)` per chunk) is at the shard's end (else start).
    pub(crate) index_at_end: bool,
    /// A CRC-32C trails the index.
    pub(crate) index_crc: bool,
}

impl ArrayMeta {
    /// Parses an array's metadata: a zarr v2 `.zarray` or a zarr v3 `zarr.json`.
    pub(crate) fn parse(json: &[u8]) -> Result<ArrayMeta, FormatError> {
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| bad(format!("metadata: {e}")))?;
        if v["zarr_format"] == 3 {
            return Self::parse_v3(&v);
        }
        if v["zarr_format"] != 2 {
            return Err(bad(format!(
                "zarr_format {} (this reader knows 2)",
                v["zarr_format"]
            )));
        }
        let shape = sizes(&v["shape"], "shape")?;
        let chunks = sizes(&v["chunks"], "chunks")?;
        let name = v["dtype"]
            .as_str()
            .ok_or_else(|| bad("dtype is not a string"))?;
        let (dtype, big_endian) = dtype_of(name)?;
        let elem = dtype
            .elem_size()
            .filter(|&s| s > 0)
            .ok_or_else(|| bad(format!("dtype {name} is not fixed-size")))?;
        if v["order"] != "C" {
            return Err(bad(format!("order {} (this reader knows C)", v["order"])));
        }
        if !(v["filters"].is_null() || v["filters"].as_array().is_some_and(Vec::is_empty)) {
            return Err(bad(format!("filters {} are not read", v["filters"])));
        }
        let codec = match &v["compressor"] {
            serde_json::Value::Null => Codec::None,
            c => match c["id"].as_str() {
                Some("zstd") => Codec::Zstd,
                Some("gzip") => Codec::Gzip,
                Some("zlib") => Codec::Zlib,
                other => {
                    return Err(bad(format!(
                        "compressor {} is not read (zstd, gzip, zlib, none are)",
                        other.unwrap_or("?")
                    )))
                }
            },
        };
        let separator = match v["dimension_separator"].as_str() {
            None | Some(".") => '.',
            Some("/") => '/',
            Some(s) => return Err(bad(format!("dimension_separator {s:?}"))),
        };
        let fill = fill_value(&v["fill_value"], dtype, elem)?;
        let mut meta = ArrayMeta {
            shape,
            chunks,
            dtype,
            elem,
            big_endian,
            codec,
            fill,
            separator,
            c_prefix: false,
            crc_trailer: false,
            shard: None,
        };
        meta.check_sizes()?;
        Ok(meta)
    }

    /// A zarr v3 `zarr.json` (an array node).
    fn parse_v3(v: &serde_json::Value) -> Result<ArrayMeta, FormatError> {
        if v["node_type"] != "array" {
            return Err(bad(format!(
                "node_type {} (an array was expected)",
                v["node_type"]
            )));
        }
        let shape = sizes(&v["shape"], "shape")?;
        if v["chunk_grid"]["name"] != "regular" {
            return Err(bad(format!(
                "chunk grid {} (regular is read)",
                v["chunk_grid"]["name"]
            )));
        }
        let outer = sizes(
            &v["chunk_grid"]["configuration"]["chunk_shape"],
            "chunk_shape",
        )?;
        let name = v["data_type"]
            .as_str()
            .ok_or_else(|| bad("data_type is not a string"))?;
        let dtype = DType::from_name(name)
            .ok_or_else(|| bad(format!("data_type {name:?} is not one tfmount knows")))?;
        let elem = dtype
            .elem_size()
            .filter(|&s| s > 0)
            .ok_or_else(|| bad(format!("data_type {name} is not fixed-size")))?;
        let enc = &v["chunk_key_encoding"];
        let (c_prefix, default_sep) = match enc["name"].as_str() {
            Some("default") | None => (true, "/"),
            Some("v2") => (false, "."),
            Some(n) => return Err(bad(format!("chunk key encoding {n}"))),
        };
        let separator = match enc["configuration"]["separator"]
            .as_str()
            .unwrap_or(default_sep)
        {
            "/" => '/',
            "." => '.',
            s => return Err(bad(format!("chunk key separator {s:?}"))),
        };
        let codecs = v["codecs"]
            .as_array()
            .ok_or_else(|| bad("codecs is not a list"))?;
        let (chunks, pipeline, shard) = match codecs.as_slice() {
            [one] if one["name"] == "sharding_indexed" => {
                let c = &one["configuration"];
                let inner = sizes(&c["chunk_shape"], "inner chunk_shape")?;
                if inner.len() != outer.len()
                    || inner
                        .iter()
                        .zip(&outer)
                        .any(|(&i, &o)| i == 0 || o % i != 0)
                {
                    return Err(bad(format!(
                        "shards {outer:?} are not whole chunks {inner:?}"
                    )));
                }
                let per_shard = outer.iter().zip(&inner).map(|(&o, &i)| o / i).collect();
                let index = codec_list(&c["index_codecs"])?;
                if index.big_endian || index.codec != Codec::None {
                    return Err(bad(
                        "a shard index that is not little-endian and uncompressed",
                    ));
                }
                let index_at_end = match c["index_location"].as_str() {
                    None | Some("end") => true,
                    Some("start") => false,
                    Some(l) => return Err(bad(format!("index_location {l}"))),
                };
                let shard = Shard {
                    per_shard,
                    index_at_end,
                    index_crc: index.crc_trailer,
                };
                (inner, codec_list(&c["codecs"])?, Some(shard))
            }
            _ => (outer, codec_list(&v["codecs"])?, None),
        };
        let mut meta = ArrayMeta {
            shape,
            chunks,
            dtype,
            elem,
            big_endian: pipeline.big_endian,
            codec: pipeline.codec,
            fill: fill_value(&v["fill_value"], dtype, elem)?,
            separator,
            c_prefix,
            crc_trailer: pipeline.crc_trailer,
            shard,
        };
        meta.check_sizes()?;
        Ok(meta)
    }

    /// The shape, chunks and a decoded chunk fit the bounds.
    fn check_sizes(&mut self) -> Result<(), FormatError> {
        if self.shape.len() != self.chunks.len()
            || self.chunks.contains(&0)
            || self.shape.len() > 32
        {
            return Err(bad(format!(
                "shape {:?} and chunks {:?} do not match",
                self.shape, self.chunks
            )));
        }
        let n = self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if n.is_none_or(|n| n > MAX_ELEMENTS) {
            return Err(bad(format!("shape {:?} is too large", self.shape)));
        }
        self.chunks
            .iter()
            .try_fold(self.elem as u64, |a, &d| a.checked_mul(d))
            .filter(|&b| b <= MAX_CHUNK)
            .ok_or_else(|| bad(format!("chunks {:?} are too large", self.chunks)))?;
        Ok(())
    }

    /// Where chunk `index` is stored: the key of its value (relative to the array) and, for a
    /// sharded array, its position in that shard.
    pub(crate) fn stored_at(&self, index: &[u64]) -> (String, Option<usize>) {
        let Some(sh) = &self.shard else {
            return (self.chunk_key(index), None);
        };
        let outer: Vec<u64> = index
            .iter()
            .zip(&sh.per_shard)
            .map(|(&i, &p)| i / p)
            .collect();
        let pos = index
            .iter()
            .zip(&sh.per_shard)
            .fold(0u64, |at, (&i, &p)| at * p + i % p);
        (self.chunk_key(&outer), Some(pos as usize))
    }

    /// The chunk at `position` of a stored value (a shard, or the chunk itself when `None`),
    /// decoded; `None` when a shard holds no such chunk (the fill value).
    pub(crate) fn decode_at(
        &self,
        stored: &[u8],
        position: Option<usize>,
    ) -> Result<Option<Vec<u8>>, FormatError> {
        let (Some(sh), Some(pos)) = (&self.shard, position) else {
            return self.decode_chunk(stored).map(Some);
        };
        let n: u64 = sh.per_shard.iter().product();
        let index_len = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(16))
            .and_then(|l| l.checked_add(if sh.index_crc { 4 } else { 0 }))
            .filter(|&l| l <= stored.len())
            .ok_or_else(|| {
                bad(format!(
                    "a shard of {} bytes cannot hold its index",
                    stored.len()
                ))
            })?;
        let index = if sh.index_at_end {
            &stored[stored.len() - index_len..]
        } else {
            &stored[..index_len]
        };
        let entries = if sh.index_crc {
            let (e, crc) = index.split_at(index_len - 4);
            let stored_crc = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
            let computed = crc32c::crc32c(e);
            if stored_crc != computed {
                return Err(bad(format!(
                    "shard index checksum mismatch (stored {stored_crc:#010x}, computed {computed:#010x})"
                )));
            }
            e
        } else {
            index
        };
        let at = pos.checked_mul(16).filter(|&a| a + 16 <= entries.len());
        let Some(at) = at else {
            return Err(bad("a chunk position past its shard's index"));
        };
        let off = u64::from_le_bytes(entries[at..at + 8].try_into().map_err(|_| bad("index"))?);
        let len = u64::from_le_bytes(
            entries[at + 8..at + 16]
                .try_into()
                .map_err(|_| bad("index"))?,
        );
        if off == u64::MAX && len == u64::MAX {
            return Ok(None);
        }
        let body = usize::try_from(off)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| stored.get(o..o.checked_add(l)?))
            .ok_or_else(|| bad(format!("a chunk at {off}+{len} lies outside its shard")))?;
        self.decode_chunk(body).map(Some)
    }

    /// Bytes of the served array.
    pub(crate) fn size(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.elem as u64
    }

    /// Chunks along each dimension.
    fn grid(&self) -> Vec<u64> {
        self.shape
            .iter()
            .zip(&self.chunks)
            .map(|(&s, &c)| s.div_ceil(c))
            .collect()
    }

    /// The store key of chunk `index` (relative to the array): `0.1.2`, or `0` for a 0-d array.
    pub(crate) fn chunk_key(&self, index: &[u64]) -> String {
        let parts: Vec<String> = index.iter().map(u64::to_string).collect();
        let sep = self.separator.to_string();
        match (self.c_prefix, index.is_empty()) {
            (true, true) => "c".into(),
            (true, false) => format!("c{sep}{}", parts.join(&sep)),
            (false, true) => "0".into(),
            (false, false) => parts.join(&sep),
        }
    }

    /// The index of the chunk holding byte `at` of the served array (`None` past its end).
    pub(crate) fn chunk_of(&self, at: u64) -> Option<Vec<u64>> {
        if at >= self.size() {
            return None;
        }
        let mut e = at / self.elem as u64;
        let mut idx = vec![0u64; self.shape.len()];
        for d in (0..self.shape.len()).rev() {
            idx[d] = (e % self.shape[d]) / self.chunks[d];
            e /= self.shape[d];
        }
        Some(idx)
    }

    /// Bytes of one decoded chunk (chunks at the edges are stored whole too).
    pub(crate) fn chunk_bytes(&self) -> usize {
        self.chunks.iter().product::<u64>() as usize * self.elem
    }

    /// Decodes a chunk's stored bytes into its served bytes (a chunk of the full chunk shape).
    pub(crate) fn decode_chunk(&self, stored: &[u8]) -> Result<Vec<u8>, FormatError> {
        let want = self.chunk_bytes();
        let stored = if self.crc_trailer {
            let (b, crc) = stored
                .split_last_chunk::<4>()
                .ok_or_else(|| bad("a chunk shorter than its checksum"))?;
            let (s, c) = (u32::from_le_bytes(*crc), crc32c::crc32c(b));
            if s != c {
                return Err(bad(format!(
                    "chunk checksum mismatch (stored {s:#010x}, computed {c:#010x})"
                )));
            }
            b
        } else {
            stored
        };
        let mut out = match self.codec {
            Codec::None => stored.to_vec(),
            Codec::Zstd => zstd_chunk(stored, want)?,
            Codec::Gzip => bounded(flate2::read::GzDecoder::new(stored), want)?,
            Codec::Zlib => bounded(flate2::read::ZlibDecoder::new(stored), want)?,
        };
        if out.len() != want {
            return Err(bad(format!(
                "a chunk decodes to {} bytes, its shape {:?} holds {want}",
                out.len(),
                self.chunks
            )));
        }
        if self.big_endian && self.elem > 1 {
            for e in out.chunks_exact_mut(self.elem) {
                e.reverse();
            }
        }
        Ok(out)
    }

    /// Bytes `[offset, offset + len)` of the served array (clamped to its end), from the chunks
    /// that range covers: `chunk(index)` gives a chunk's decoded bytes (`None`: missing, the
    /// fill value). Copies row by row along the last dimension.
    pub(crate) fn read(
        &self,
        offset: u64,
        len: usize,
        chunk: &mut ChunkAt,
    ) -> Result<Vec<u8>, FormatError> {
        let size = self.size();
        let a = offset.min(size);
        let b = offset.saturating_add(len as u64).min(size);
        let mut out = Vec::with_capacity((b - a) as usize);
        if a == b {
            return Ok(out);
        }
        // Appends the part of `piece` (bytes of the array from `at` on) within [a, b).
        let put = |out: &mut Vec<u8>, at: u64, piece: &[u8]| {
            let from = a.saturating_sub(at).min(piece.len() as u64) as usize;
            let to = (b.saturating_sub(at)).min(piece.len() as u64) as usize;
            if from < to {
                out.extend_from_slice(&piece[from..to]);
            }
        };
        let es = self.elem as u64;
        let (ea, eb) = (a / es, b.div_ceil(es));
        let rank = self.shape.len();
        let row = self.shape.last().copied().unwrap_or(1).max(1);
        let grid = self.grid();
        let mut e = ea;
        while e < eb {
            // The element's index, and how far along its row to copy.
            let mut idx = vec![0u64; rank];
            let mut rest = e;
            for d in (0..rank).rev() {
                idx[d] = rest % self.shape[d];
                rest /= self.shape[d];
            }
            let (ci, within): (Vec<u64>, Vec<u64>) = idx
                .iter()
                .zip(&self.chunks)
                .map(|(&i, &c)| (i / c, i % c))
                .unzip();
            let mut n = (row - idx.last().copied().unwrap_or(0)).min(eb - e);
            if rank > 0 {
                n = n.min(self.chunks[rank - 1] - within[rank - 1]);
            }
            let n = n.max(1);
            if ci.iter().zip(&grid).any(|(&c, &g)| c >= g) {
                return Err(bad("element outside the chunk grid"));
            }
            match chunk(&ci)? {
                Some(c) => {
                    // The element's place in the chunk (C order over the chunk shape).
                    let at = self
                        .chunks
                        .iter()
                        .zip(&within)
                        .fold(0u64, |at, (&c, &w)| at * c + w);
                    let from = (at * es) as usize;
                    let piece = c
                        .get(from..from + (n * es) as usize)
                        .ok_or_else(|| bad("a chunk is shorter than its shape"))?;
                    put(&mut out, e * es, piece);
                }
                None => {
                    for k in 0..n {
                        put(&mut out, (e + k) * es, &self.fill);
                    }
                }
            }
            e += n;
        }
        Ok(out)
    }
}

/// A zstd-compressed chunk decoded into at most `want` bytes. When its frame says how large it
/// decodes (tensorstore writes the size), in one call into one buffer of at most that size
/// (no buffer grown and copied as it fills: a 4 MiB chunk decoded by growth faulted in and
/// copied about three times its size); pages of the buffer are touched only as bytes are
/// decoded into them. Otherwise by streaming into a buffer grown as bytes arrive.
fn zstd_chunk(stored: &[u8], want: usize) -> Result<Vec<u8>, FormatError> {
    match zstd::zstd_safe::get_frame_content_size(stored) {
        Ok(Some(n)) if n <= want as u64 => {
            zstd::bulk::decompress(stored, n as usize).map_err(|e| bad(format!("zstd: {e}")))
        }
        Ok(Some(n)) => Err(bad(format!(
            "a chunk's zstd frame holds {n} bytes, its shape {want}"
        ))),
        _ => bounded(
            zstd::stream::read::Decoder::new(stored).map_err(|e| bad(e.to_string()))?,
            want,
        ),
    }
}

/// A list of sizes (`shape`, `chunk_shape`).
fn sizes(v: &serde_json::Value, what: &str) -> Result<Vec<u64>, FormatError> {
    v.as_array()
        .ok_or_else(|| bad(format!("{what} is not a list")))?
        .iter()
        .map(|d| {
            d.as_u64()
                .ok_or_else(|| bad(format!("{what}: {d} is not a size")))
        })
        .collect()
}

/// What a zarr v3 codec list does to a chunk's bytes.
struct Pipeline {
    big_endian: bool,
    codec: Codec,
    crc_trailer: bool,
}

/// A zarr v3 codec list (`bytes`, then at most one compressor, then at most `crc32c`).
fn codec_list(v: &serde_json::Value) -> Result<Pipeline, FormatError> {
    let mut p = Pipeline {
        big_endian: false,
        codec: Codec::None,
        crc_trailer: false,
    };
    for c in v.as_array().ok_or_else(|| bad("codecs is not a list"))? {
        match c["name"].as_str() {
            Some("bytes") => p.big_endian = c["configuration"]["endian"] == "big",
            Some("zstd") if p.codec == Codec::None => p.codec = Codec::Zstd,
            Some("gzip") if p.codec == Codec::None => p.codec = Codec::Gzip,
            Some("crc32c") => p.crc_trailer = true,
            other => {
                return Err(bad(format!(
                    "codec {} is not read (bytes, zstd, gzip, crc32c are)",
                    other.unwrap_or("?")
                )))
            }
        }
    }
    Ok(p)
}

/// At most `max` bytes from a decoder (one more is an error).
fn bounded(mut r: impl std::io::Read, max: usize) -> Result<Vec<u8>, FormatError> {
    use std::io::Read as _;
    let mut out = Vec::new();
    (&mut r)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| bad(format!("a chunk does not decode: {e}")))?;
    Ok(out)
}

/// TF's dtype for a zarr v2 dtype string, and whether it is stored big-endian.
fn dtype_of(name: &str) -> Result<(DType, bool), FormatError> {
    let (order, code) = match name.as_bytes().first() {
        Some(b'<') => (false, &name[1..]),
        Some(b'>') => (true, &name[1..]),
        Some(b'|') => (false, &name[1..]),
        _ => (false, name),
    };
    // numpy's codes (`f4`, `u1`), else tensorstore's names for what numpy lacks (`bfloat16`,
    // `int4`, `float8_e4m3fn`), which are TF's names too.
    DType::from_npy_code(code)
        .or_else(|| DType::from_name(code))
        .map(|d| (d, order))
        .ok_or_else(|| bad(format!("dtype {name:?} is not one tfmount knows")))
}

/// One element of the fill value as served: `null` and `0` are zeros; a number is written in
/// the dtype; `NaN`/`Infinity` for floats.
fn fill_value(v: &serde_json::Value, dtype: DType, elem: usize) -> Result<Vec<u8>, FormatError> {
    use crate::parse::dtype::Elem;
    let zeros = vec![0u8; elem];
    if v.is_null() || v == 0 || v == false {
        return Ok(zeros);
    }
    let f = match v {
        serde_json::Value::String(s) if s == "NaN" => f64::NAN,
        serde_json::Value::String(s) if s == "Infinity" => f64::INFINITY,
        serde_json::Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
        serde_json::Value::Bool(true) => 1.0,
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                if let Some(Elem::Int { size, .. }) = dtype.elem() {
                    return Ok(i.to_le_bytes()[..size as usize].to_vec());
                }
            }
            n.as_f64().ok_or_else(|| bad(format!("fill_value {v}")))?
        }
        _ => return Err(bad(format!("fill_value {v} is not read"))),
    };
    if f == 0.0 && f.is_sign_positive() {
        return Ok(zeros);
    }
    match dtype.elem() {
        Some(Elem::F32) => Ok((f as f32).to_le_bytes().to_vec()),
        Some(Elem::F64) => Ok(f.to_le_bytes().to_vec()),
        Some(Elem::Bool) => Ok(vec![u8::from(f != 0.0)]),
        _ => Err(bad(format!(
            "fill_value {v} for dtype {}",
            dtype.display_name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expected as leaves, fixture, sha, Leaf};
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// (dtype, shape, sha256) of each leaf Orbax restored, by array name (`params.dense.kernel`).
    fn expected(name: &str) -> BTreeMap<String, Leaf> {
        leaves(name)
            .into_iter()
            .map(|(k, v)| (k.replace('/', "."), v))
            .collect()
    }

    /// The whole array through `read`, in pieces of `piece` bytes.
    fn read_all(meta: &ArrayMeta, piece: usize, chunk: &mut ChunkAt) -> Vec<u8> {
        let mut out = Vec::new();
        while (out.len() as u64) < meta.size() {
            let got = meta.read(out.len() as u64, piece, chunk).expect("read");
            assert!(!got.is_empty());
            out.extend_from_slice(&got);
        }
        out
    }

    #[test]
    fn every_array_of_the_zarr_checkpoint_is_what_orbax_restored() {
        let root = fixture("zarr/ckpt");
        let want = expected("zarr");
        let names: Vec<String> = std::fs::read_dir(&root)
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join(".zarray").exists())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), want.len());
        for name in names {
            let dir = root.join(&name);
            let meta =
                ArrayMeta::parse(&std::fs::read(dir.join(".zarray")).expect("meta")).expect(&name);
            let (dtype, shape, digest) = &want[&name];
            assert_eq!(&meta.shape, shape, "{name}");
            assert_eq!(&meta.dtype.display_name(), dtype, "{name}");
            let mut chunk = |i: &[u64]| -> Result<Option<Arc<Vec<u8>>>, FormatError> {
                match std::fs::read(dir.join(meta.chunk_key(i))) {
                    Ok(b) => Ok(Some(Arc::new(meta.decode_chunk(&b)?))),
                    Err(_) => Ok(None),
                }
            };
            for piece in [usize::MAX, 7, 4096] {
                let got = read_all(&meta, piece, &mut chunk);
                assert_eq!(&sha(&got), digest, "{name}, read in pieces of {piece}");
            }
        }
    }

    #[test]
    fn hostile_metadata_and_chunks_are_errors() {
        let meta =
            std::fs::read(fixture("zarr/ckpt/params.embed.embedding/.zarray")).expect("meta");
        for cut in 0..meta.len() {
            let _ = ArrayMeta::parse(&meta[..cut]);
        }
        for bad_meta in [
            r#"{"zarr_format":2,"shape":[1099511627776,1099511627776],"chunks":[1,1],"dtype":"<f4","order":"C","compressor":null,"fill_value":null}"#,
            r#"{"zarr_format":2,"shape":[4],"chunks":[4294967296],"dtype":"<f4","order":"C","compressor":null,"fill_value":null}"#,
            r#"{"zarr_format":2,"shape":[4],"chunks":[0],"dtype":"<f4","order":"C","compressor":null,"fill_value":null}"#,
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<U4","order":"C","compressor":null,"fill_value":null}"#,
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<f4","order":"F","compressor":null,"fill_value":null}"#,
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<f4","order":"C","compressor":{"id":"blosc"},"fill_value":null}"#,
            r#"{"zarr_format":3}"#,
        ] {
            assert!(ArrayMeta::parse(bad_meta.as_bytes()).is_err(), "{bad_meta}");
        }
        let m = ArrayMeta::parse(&meta).expect("meta");
        let chunk = std::fs::read(fixture("zarr/ckpt/params.embed.embedding/0.0")).expect("chunk");
        for cut in 0..chunk.len() {
            assert!(m.decode_chunk(&chunk[..cut]).is_err(), "cut at {cut}");
        }
        // A chunk that decodes to more than its shape holds.
        let big = zstd::stream::encode_all(&vec![0u8; m.chunk_bytes() + 1][..], 1).expect("zstd");
        assert!(m.decode_chunk(&big).is_err());
    }
}
