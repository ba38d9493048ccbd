//! Read-ahead for one open file of the mount (a [`Reader`]), modeled on mountpoint-s3's
//! prefetcher, capped the way its issues (#987, #1326) taught.
//!
//! A reader covers a byte range of one object (a tensor's bytes in a shard, or the whole
//! object):
//! - a range of at most [`WHOLE_UP_TO`] (8 MiB) is fetched whole by its first read, in one GET,
//!   and served from memory until every byte of it has been served once;
//! - otherwise a read that continues the previous one (or starts the range) is sequential: the
//!   reader fetches ahead of it, starting with a [`FIRST_WINDOW`] (1 MiB) window that doubles
//!   each time the reader catches up with half of it, up to [`MAX_WINDOW`] (64 MiB), in parts
//!   of at most [`MAX_PART`] (8 MiB), all in flight at once; never past the end of the range;
//! - any other read is random: whole MiB blocks around it through the store's block cache
//!   ([`super::parts`]), no read-ahead, and the window starts over.
//!
//! Every part is reserved from the store's budget before its GET: read-ahead speculatively (a
//! refusal halves the window, down to no read-ahead at all), the bytes a read is waiting for on
//! demand. A reader that stops reading holds at most its window; dropping it releases
//! everything and aborts its GETs. A failed or timed-out part fails the read that waits for it
//! and is forgotten, so the next read asks again.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

use super::budget::Reservation;
use super::file::{Pending, RemoteFile};
use super::parts::copy_overlap;
use super::RemoteError;

/// A range this small is fetched whole, in one GET.
pub const WHOLE_UP_TO: u64 = 8 << 20;
/// First read-ahead window.
pub const FIRST_WINDOW: u64 = 1 << 20;
/// Largest read-ahead window of one reader.
pub const MAX_WINDOW: u64 = 64 << 20;
/// Largest part (one GET).
pub const MAX_PART: u64 = 8 << 20;
/// Parts that end this far behind the current read are dropped.
const KEEP_BEHIND: u64 = 1 << 20;

enum Data {
    Pending(Pending),
    Ready(Bytes),
}

struct Part {
    start: u64,
    end: u64,
    data: Data,
    _res: Reservation,
}

struct Whole {
    data: Bytes,
    served: u64,
    _res: Reservation,
}

struct State {
    window: u64,
    parts: VecDeque<Part>,
    /// End of the last scheduled part (meaningful while `parts` is not empty).
    ahead_end: u64,
    /// Where a sequential read would start next.
    next_seq: u64,
    whole: Option<Whole>,
}

impl State {
    fn reset(&mut self) {
        self.parts.clear();
        self.window = FIRST_WINDOW;
    }
}

/// Sequential-read state of one open file. Reads lock it: a reader serves one read at a time.
pub struct Reader {
    file: Arc<RemoteFile>,
    range: Range<u64>,
    st: Mutex<State>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("url", &self.file.url())
            .field("range", &self.range)
            .finish()
    }
}

impl Reader {
    pub(crate) fn new(file: Arc<RemoteFile>, range: Range<u64>) -> Reader {
        let size = file.size();
        let end = range.end.min(size);
        let range = range.start.min(end)..end;
        Reader {
            st: Mutex::new(State {
                window: FIRST_WINDOW,
                parts: VecDeque::new(),
                ahead_end: range.start,
                next_seq: range.start,
                whole: None,
            }),
            file,
            range,
        }
    }

    /// The object's bytes this reader covers.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// The current read-ahead window (for tests and logs).
    pub fn window(&self) -> u64 {
        self.lock().window
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `len` bytes at `offset` of the object (fewer only at its end), like `pread`.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, RemoteError> {
        let avail = self.file.size().saturating_sub(offset);
        let n = usize::try_from(avail).map_or(len, |a| a.min(len));
        let mut buf = vec![0u8; n];
        self.read_into(&mut buf, offset)?;
        Ok(buf)
    }

    /// Fills `buf` from `offset` of the object; fails within `remote_timeout`.
    pub fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        let obj = &self.file.obj;
        obj.check()?;
        obj.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let ctx = &self.file.ctx;
        let deadline = Instant::now() + ctx.timeout;
        let end = offset + buf.len() as u64;
        let mut st = self.lock();

        // A small range: all of it in one GET.
        let rlen = self.range.end - self.range.start;
        if rlen <= WHOLE_UP_TO && offset >= self.range.start && end <= self.range.end {
            if st.whole.is_none() {
                if let Some(res) = ctx.budget.try_reserve(rlen) {
                    let mut p = Pending::spawn(ctx, obj, self.range.clone(), rlen, deadline);
                    let data = p
                        .wait(ctx, deadline)?
                        .into_iter()
                        .next()
                        .unwrap_or_default();
                    st.whole = Some(Whole {
                        data,
                        served: 0,
                        _res: res,
                    });
                }
            }
            if let Some(w) = &mut st.whole {
                copy_overlap(buf, offset, self.range.start, &w.data);
                w.served += buf.len() as u64;
                if w.served >= rlen {
                    st.whole = None;
                }
                st.next_seq = end;
                return Ok(());
            }
            // No room in the budget to keep it: read it like a large one.
        }

        while st
            .parts
            .front()
            .is_some_and(|p| p.end.saturating_add(KEEP_BEHIND) <= offset)
        {
            st.parts.pop_front();
        }
        let in_parts =
            st.parts.front().is_some_and(|p| p.start <= offset) && offset <= st.ahead_end;
        if !in_parts && offset != st.next_seq {
            // Random.
            st.reset();
            st.next_seq = end;
            return self.file.read_blocks(buf, offset, deadline);
        }
        if !in_parts {
            // Sequential, nothing scheduled here yet: start from this read.
            st.parts.clear();
            st.ahead_end = offset;
        }
        if let Err(e) = self.schedule(&mut st, offset, end, deadline) {
            st.reset();
            return Err(e);
        }
        let mut pos = offset;
        let mut i = 0;
        while pos < end {
            let Some(part) = st.parts.get_mut(i) else {
                break;
            };
            if part.end <= pos {
                i += 1;
                continue;
            }
            if let Data::Pending(p) = &mut part.data {
                match p.wait(ctx, deadline) {
                    Ok(v) => part.data = Data::Ready(v.into_iter().next().unwrap_or_default()),
                    Err(e) => {
                        st.reset();
                        return Err(e);
                    }
                }
            }
            if let Data::Ready(d) = &part.data {
                pos += copy_overlap(&mut buf[(pos - offset) as usize..], pos, part.start, d);
            }
            i += 1;
        }
        if pos < end {
            // Cannot happen: schedule() covers [offset, end).
            st.reset();
            return Err(RemoteError::Request {
                url: obj.url.clone(),
                msg: format!("read-ahead did not cover bytes {pos}..{end}"),
            });
        }
        st.next_seq = end;
        Ok(())
    }

    /// Schedules parts so that the read `[offset, consumed_end)` is covered and read-ahead
    /// reaches a window past it (a first window counts from `offset`); grows the window while
    /// the reader keeps up, shrinks it when the budget refuses.
    fn schedule(
        &self,
        st: &mut State,
        offset: u64,
        consumed_end: u64,
        deadline: Instant,
    ) -> Result<(), RemoteError> {
        let ctx = &self.file.ctx;
        let obj = &self.file.obj;
        let limit = self.range.end.max(consumed_end).min(obj.size);
        let continuing = !st.parts.is_empty();
        if continuing
            && st.ahead_end >= consumed_end
            && st.ahead_end - consumed_end >= st.window / 2
        {
            return Ok(());
        }
        if continuing && st.ahead_end < limit {
            st.window = (st.window * 2).min(MAX_WINDOW);
        }
        let base = if continuing { consumed_end } else { offset };
        let mut target = consumed_end.max(limit.min(base + st.window));
        while st.ahead_end < target {
            let need = st.ahead_end < consumed_end;
            let want = MAX_PART.min(target - st.ahead_end);
            let (res, len) = match ctx.budget.try_reserve(want) {
                Some(r) => (r, want),
                None if need => {
                    let len = MAX_PART.min(consumed_end - st.ahead_end);
                    let r = ctx
                        .budget
                        .reserve(len, deadline)
                        .ok_or_else(|| ctx.timeout_err(&obj.url))?;
                    (r, len)
                }
                None => {
                    if st.window <= FIRST_WINDOW {
                        break;
                    }
                    st.window /= 2;
                    target = consumed_end.max(limit.min(base + st.window));
                    continue;
                }
            };
            let start = st.ahead_end;
            // A read-ahead part has its own bound, from now.
            let part_deadline = Instant::now() + ctx.timeout;
            st.parts.push_back(Part {
                start,
                end: start + len,
                data: Data::Pending(Pending::spawn(
                    ctx,
                    obj,
                    start..start + len,
                    len,
                    part_deadline,
                )),
                _res: res,
            });
            st.ahead_end = start + len;
        }
        Ok(())
    }
}
