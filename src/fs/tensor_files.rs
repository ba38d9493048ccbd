//! The four files of a tensor (`.bin`, `.shape`, `.dtype`, `.npy`), shared by checkpoint
//! variables and graph constants: their texts, which of them a dtype shows, and the `.npy`
//! header splice.

use crate::error::FsResult;
use crate::namespace::FileKind;
use crate::parse::dtype::DType;
use crate::parse::npy;
use bytes::Bytes;

/// The text of a `.shape` file: dims separated by one space, then a newline.
pub(crate) fn shape_text(shape: &[u64]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{}\n", dims.join(" ")).into_bytes()
}

/// The text of a `.dtype` file.
pub(crate) fn dtype_text(dtype: DType) -> Vec<u8> {
    format!("{}\n", dtype.display_name()).into_bytes()
}

/// The `.npy` header, for dtypes numpy holds natively.
pub(crate) fn npy_header(dtype: DType, shape: &[u64]) -> Option<Vec<u8>> {
    npy::header(dtype.npy_descr()?, shape)
}

/// The files a tensor of `dtype` shows, in listing order (`.npy` only where numpy has the
/// dtype). `None` (a damaged entry) shows the first three.
pub(crate) fn files(dtype: Option<DType>) -> &'static [FileKind] {
    match dtype {
        Some(d) if d.npy_descr().is_some() => &FileKind::ALL,
        _ => &FileKind::ALL[..3],
    }
}

/// Bytes `[offset, offset+size)` of `header ‖ body` (an `.npy` file), where `body(off, len)`
/// reads the body.
pub(crate) fn with_header(
    header: &[u8],
    offset: u64,
    size: usize,
    body: impl Fn(u64, usize) -> FsResult<Bytes>,
) -> FsResult<Bytes> {
    let hl = header.len() as u64;
    if offset >= hl {
        return body(offset - hl, size);
    }
    let mut out = header[offset as usize..].to_vec();
    out.truncate(size);
    let rest = size - out.len();
    if rest > 0 {
        out.extend_from_slice(&body(0, rest)?);
    }
    Ok(out.into())
}
