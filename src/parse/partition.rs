//! Partitioned tensors: which saved slice holds which element, and the runs of elements that are
//! contiguous in one slice (row-major order). Shared by V2 bundles and V1 checkpoints.

use crate::parse::slice_key::Extent;

/// `[start, end)` of an extent in a dimension of size `d`.
pub(crate) fn extent_range(x: &Extent, d: u64) -> (u64, u64) {
    if x.length < 0 {
        (0, d)
    } else {
        (x.start as u64, (x.start + x.length) as u64)
    }
}

/// Row-major index of element `e` of `shape`.
pub(crate) fn unravel(shape: &[u64], mut e: u64, idx: &mut [u64]) {
    for j in (0..shape.len()).rev() {
        idx[j] = e % shape[j].max(1);
        e /= shape[j].max(1);
    }
}

/// The slice holding the element at `idx`.
pub(crate) fn slice_of(shape: &[u64], slices: &[&[Extent]], idx: &[u64]) -> Option<usize> {
    slices.iter().position(|s| {
        s.iter().zip(shape).zip(idx).all(|((x, &d), &i)| {
            let (a, b) = extent_range(x, d);
            a <= i && i < b
        })
    })
}

/// Position of `idx` inside slice `s`, row-major over the slice's own shape.
pub(crate) fn local_index(shape: &[u64], s: &[Extent], idx: &[u64]) -> u64 {
    let mut src = 0u64;
    for j in 0..shape.len() {
        let (a, b) = extent_range(&s[j], shape[j]);
        src = src * (b - a) + (idx[j] - a);
    }
    src
}

/// Which slice holds element `e` of a partitioned tensor, and its index within the slice.
pub(crate) fn locate(shape: &[u64], slices: &[&[Extent]], e: u64) -> Option<(usize, u64)> {
    let mut idx = vec![0u64; shape.len()];
    unravel(shape, e, &mut idx);
    let p = slice_of(shape, slices, &idx)?;
    Some((p, local_index(shape, slices[p], &idx)))
}

/// Walks elements `[first, last)` of a partitioned tensor in runs that are contiguous in one
/// slice: `f(slice, index of the run's first element in the slice, elements)`. `None` if an
/// element lies in no slice.
pub(crate) fn for_each_run(
    shape: &[u64],
    slices: &[&[Extent]],
    first: u64,
    last: u64,
    mut f: impl FnMut(usize, u64, u64),
) -> Option<()> {
    let rank = shape.len();
    let mut idx = vec![0u64; rank];
    let mut e = first;
    while e < last {
        unravel(shape, e, &mut idx);
        let p = slice_of(shape, slices, &idx)?;
        let s = slices[p];
        let mut run = 1u64;
        let mut inner = 1u64;
        for j in (0..rank).rev() {
            let (a, b) = extent_range(&s[j], shape[j]);
            run = (b - idx[j]) * inner;
            if !(a == 0 && b == shape[j] && idx[j] == 0) {
                break;
            }
            inner *= shape[j];
        }
        let take = run.min(last - e);
        f(p, local_index(shape, s, &idx), take);
        e += take;
    }
    Some(())
}
