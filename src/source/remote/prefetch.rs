//! Read-ahead for one open file of the mount (a [`Reader`]), modeled on mountpoint-s3's
//! prefetcher, capped the way its issues (#987, #1326) taught.
//!
//! A reader covers a byte range of one object (a tensor's bytes in a shard, or the whole
//! object):
//! - a range of at most [`SMALL_UP_TO`] (256 KiB) is read through the store's block cache, as
//!   a random read is (below): its neighbours in the same MiB blocks come with it;
//! - a range of at most [`WHOLE_UP_TO`] (8 MiB) is fetched whole by its first read, in one GET,
//!   and served from memory until its reads have covered it (bytes asked for twice count once);
//! - otherwise a read that continues the previous one (or starts the range) is sequential: the
//!   reader fetches ahead of it, starting with a [`FIRST_WINDOW`] (1 MiB) window that doubles
//!   each time the reader catches up with half of it, up to [`MAX_WINDOW`] (64 MiB), in parts
//!   of at most [`MAX_PART`] (8 MiB), all in flight at once; never past the end of the range;
//! - any other read is random: whole MiB blocks around it through the store's block cache
//!   ([`super::read`]), no read-ahead, and the window starts over.
//!
//! Each sequential reader of the range has its own stream (window and parts, see [`Reader`]):
//! two readers of one tensor do not reset each other's window.
//!
//! Every part is reserved from the store's budget before its GET: read-ahead speculatively (a
//! refusal halves the window, down to no read-ahead at all), the bytes a read is waiting for on
//! demand. A reader that stops reading holds at most its window; dropping it releases
//! everything and aborts its GETs. A failed or timed-out part fails the read that waits for it
//! and is forgotten, so the next read asks again.

use crate::sync::lock;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;

use crate::source::remote::budget::Reservation;
use crate::source::remote::read::{
    bytes_from_chunks, copy_from_chunks, Handle, Pending, Piece, BLOCK,
};
use crate::source::remote::RemoteError;

/// A range this small is fetched whole, in one GET (the part size, `remote_part`, when it is
/// smaller).
pub(crate) const WHOLE_UP_TO: u64 = 8 << 20;
/// A range this small is read through the store's block cache (the whole MiB blocks around
/// it, kept): small tensors next to each other in a shard (biases, norms, statistics) then
/// cost one GET per block, not one each.
pub(crate) const SMALL_UP_TO: u64 = 256 << 10;
/// First read-ahead window.
pub(crate) const FIRST_WINDOW: u64 = 1 << 20;
/// Parts that end this far behind the current read are dropped.
const KEEP_BEHIND: u64 = 1 << 20;
/// A read of a stream with parts may start this far past what it scheduled and still continue
/// it (the gap is fetched too): the kernel sends one reader's read-ahead requests on several
/// threads, so they arrive a little out of order.
const AHEAD_SLACK: u64 = 4 << 20;

/// `len` bytes from `start` (at most [`MAX_PART`]), cut or stretched by less than a block so
/// that the part ends on a block boundary of the object, or at `limit`: consecutive parts then
/// never share a block, and the disk cache, which keeps whole blocks, fetches none twice. A
/// full part is cut (it stays within [`MAX_PART`]), a shorter one stretched.
fn aligned(start: u64, len: u64, limit: u64, part: u64) -> u64 {
    let end = start + len;
    if end >= limit {
        return limit.saturating_sub(start);
    }
    let down = end / BLOCK * BLOCK;
    let end = if len >= part && down > start {
        down
    } else {
        end.div_ceil(BLOCK).saturating_mul(BLOCK).min(limit)
    };
    end - start
}

enum Data {
    Pending(Pending),
    Ready(Vec<Bytes>),
}

struct Part {
    start: u64,
    end: u64,
    data: Data,
    _res: Reservation,
}

struct Whole {
    data: Data,
    /// The parts of the range served so far (disjoint, merged): the range is let go once they
    /// cover it, not when as many bytes were served (the kernel may ask for some twice, a
    /// streaming check fill gaps, and a range let go early is fetched again).
    served: Vec<(u64, u64)>,
    _res: Reservation,
}

/// Most disjoint parts a [`Whole`] records; past that the range is held until its reader goes.
const MAX_SERVED_PARTS: usize = 64;

impl Whole {
    /// Records `[a, b)` served; whether the range of `len` bytes from `start` is all served.
    fn serve(&mut self, a: u64, b: u64, start: u64, len: u64) -> bool {
        let (mut a, mut b) = (a, b);
        self.served.retain(|&(s, e)| {
            if e < a || s > b {
                return true;
            }
            a = a.min(s);
            b = b.max(e);
            false
        });
        if self.served.len() < MAX_SERVED_PARTS {
            self.served.push((a, b));
        }
        a <= start && b >= start + len
    }
}

struct State {
    window: u64,
    parts: VecDeque<Part>,
    /// End of the last scheduled part (meaningful while `parts` is not empty).
    ahead_end: u64,
    /// Where a sequential read would start next.
    next_seq: u64,
    /// The last failure of a read of this stream, and when: reads that were waiting for the
    /// stream meanwhile (the kernel's other read-ahead requests) fail with it instead of
    /// asking again, so a stalled store costs one `remote_timeout`, not one per request.
    failed: Option<(Instant, RemoteError)>,
}

impl State {
    fn reset(&mut self) {
        self.parts.clear();
        self.window = FIRST_WINDOW;
    }
}

/// The read-ahead window a stream starts with: a read that starts the range fetches all of it
/// (up to the largest window, `remote_parallel` parts of `remote_part` in flight), any other
/// sequential read starts small and doubles.
fn first_window(starts_range: bool, max: u64) -> u64 {
    if starts_range {
        max
    } else {
        FIRST_WINDOW
    }
}

/// One sequential stream of reads of a [`Reader`]: its own window and parts. Reads of one
/// stream lock it (served one at a time); the atomics say, without that lock, which reads
/// continue it.
struct Stream {
    st: Mutex<State>,
    /// `next_seq`, the start of the first part and `ahead_end`, as of the last read.
    next: AtomicU64,
    lo: AtomicU64,
    hi: AtomicU64,
    has_parts: AtomicBool,
}

impl Stream {
    fn new(next_seq: u64, window: u64) -> Arc<Stream> {
        Arc::new(Stream {
            st: Mutex::new(State {
                window,
                parts: VecDeque::new(),
                ahead_end: next_seq,
                next_seq,
                failed: None,
            }),
            next: AtomicU64::new(next_seq),
            lo: AtomicU64::new(next_seq),
            hi: AtomicU64::new(next_seq),
            has_parts: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.st)
    }

    /// Whether a read at `offset` continues this stream (or falls in what it fetched).
    fn continues(&self, offset: u64) -> bool {
        self.next.load(Ordering::Relaxed) == offset
            || (self.has_parts.load(Ordering::Relaxed)
                && self.lo.load(Ordering::Relaxed) <= offset
                && offset <= self.hi.load(Ordering::Relaxed).saturating_add(AHEAD_SLACK))
    }

    fn publish(&self, st: &State) {
        self.next.store(st.next_seq, Ordering::Relaxed);
        self.lo
            .store(st.parts.front().map_or(0, |p| p.start), Ordering::Relaxed);
        self.hi.store(st.ahead_end, Ordering::Relaxed);
        self.has_parts
            .store(!st.parts.is_empty(), Ordering::Relaxed);
    }
}

/// Read-ahead of one range (a tensor's bytes): one [`Stream`] per sequential reader, so that
/// two readers of one tensor (two processes, or a reader and the kernel's read-ahead of
/// another) do not reset each other's window. Streams are told apart by where their reads
/// continue (the mount asks the kernel for no OPEN, so a read carries no file handle); at most
/// [`MAX_STREAMS`], the least recently used dropped first (those that fetched nothing before
/// those that did).
pub struct Reader {
    h: Arc<Handle>,
    range: Range<u64>,
    whole: Mutex<Option<Whole>>,
    /// Most recently used last.
    streams: Mutex<Vec<Arc<Stream>>>,
}

/// Sequential streams one reader keeps.
pub(crate) const MAX_STREAMS: usize = 4;

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("url", &self.h.obj.url)
            .field("range", &self.range)
            .finish()
    }
}

impl Reader {
    pub(crate) fn new(h: Arc<Handle>, range: Range<u64>) -> Reader {
        let size = h.obj.size;
        let end = range.end.min(size);
        let range = range.start.min(end)..end;
        Reader {
            whole: Mutex::new(None),
            streams: Mutex::new(Vec::new()),
            h,
            range,
        }
    }

    /// The read-ahead window of the stream read last (for tests and logs).
    #[cfg(test)]
    pub(crate) fn window(&self) -> u64 {
        let last = self.lock_streams().last().cloned();
        last.map_or(FIRST_WINDOW, |s| s.lock().window)
    }

    fn lock_streams(&self) -> MutexGuard<'_, Vec<Arc<Stream>>> {
        lock(&self.streams)
    }

    /// The stream a read of `[offset, end)` continues, made if it starts the range; `None` for
    /// a random read (which leaves a stream that its continuation will find).
    fn stream_for(&self, offset: u64, end: u64) -> Option<Arc<Stream>> {
        let mut ss = self.lock_streams();
        if let Some(i) = ss.iter().position(|s| s.continues(offset)) {
            let s = ss.remove(i);
            ss.push(s.clone());
            return Some(s);
        }
        let max = self.h.reads.io.window;
        let (s, found) = if offset == self.range.start {
            let s = Stream::new(offset, first_window(true, max));
            (s.clone(), Some(s))
        } else {
            (Stream::new(end, first_window(false, max)), None)
        };
        if ss.len() >= MAX_STREAMS {
            let idle = ss.iter().position(|s| !s.has_parts.load(Ordering::Relaxed));
            ss.remove(idle.unwrap_or(0));
        }
        ss.push(s);
        found
    }

    /// Up to `len` bytes at `offset` of the object (fewer only at its end), like `pread`.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, RemoteError> {
        let avail = self.h.obj.size.saturating_sub(offset);
        let n = usize::try_from(avail).map_or(len, |a| a.min(len));
        self.read_bytes(offset, n).map(Vec::from)
    }

    /// Exactly `len` bytes at `offset`, like [`Reader::read_into`]. A read of a range fetched
    /// whole shares its bytes where they are one chunk (no copy), else is appended from them
    /// (no zeroed buffer first).
    pub(crate) fn read_bytes(&self, offset: u64, len: usize) -> Result<Bytes, RemoteError> {
        if self.h.reads.io.disk.is_some() && !self.busy() {
            let obj = &self.h.obj;
            obj.check()?;
            obj.check_range(offset, len as u64)?;
            if let Some(v) = self.h.read_on_disk_vec(offset, len) {
                return Ok(v.into());
            }
        }
        let mut out = None;
        let whole = self.read_whole(offset, len as u64, |d| {
            out = Some(bytes_from_chunks(offset, len, self.range.start, d));
        })?;
        if whole {
            return match out {
                Some(b) if b.len() == len => Ok(b),
                b => Err(RemoteError::Request {
                    url: self.h.obj.url.clone(),
                    msg: format!(
                        "{} bytes fetched from {offset}, expected {len}",
                        b.map_or(0, |b| b.len())
                    ),
                }),
            };
        }
        let mut buf = vec![0u8; len];
        self.read_into(&mut buf, offset)?;
        Ok(buf.into())
    }

    /// Whether the range's bytes match CRC-32C `want`, checked on bytes the disk cache holds: a
    /// range fetched whole by its first read (see [`Reader::is_whole`]) whose pieces are all
    /// on disk is taken from them at once (unchecked, without a pass over each piece: in a
    /// FUSE reply's read their files mapped as one range, else read into memory), its CRC
    /// computed, and, when it matches, served from there (each read a slice of it: no copy). `false` (read the usual way) when it is not such a range, or it did not
    /// match: then its pieces are checked and what is wrong is removed, to be fetched again.
    pub(crate) fn check_cached(&self, want: u32) -> bool {
        let ctx = &*self.h.reads;
        let rlen = self.range.end - self.range.start;
        if ctx.io.disk.is_none() || rlen > WHOLE_UP_TO.min(ctx.io.part) {
            return false;
        }
        let mut whole = lock(&self.whole);
        if whole.is_some() {
            return false;
        }
        let Some(res) = ctx.budget.try_reserve(rlen) else {
            return false;
        };
        let Some(v) = self.h.read_disk_unchecked(self.range.clone()) else {
            return false;
        };
        let crc = v.iter().fold(0, |c, b| crc32c::crc32c_append(c, b));
        if crc != want {
            self.h
                .drop_on_disk(self.range.clone(), "the tensor's CRC-32C");
            return false;
        }
        *whole = Some(Whole {
            data: Data::Ready(v),
            served: Vec::new(),
            _res: res,
        });
        true
    }

    /// The range's bytes failed a check: what the disk cache holds of them is checked piece
    /// by piece, and removed (see [`Handle::drop_on_disk`]).
    pub(crate) fn forget_cached(&self) {
        self.h
            .drop_on_disk(self.range.clone(), "the tensor's CRC-32C");
    }

    /// A read of `len` bytes at `offset` served from the range fetched whole (see
    /// [`Reader::is_whole`]): `serve` gets its chunks (the range's bytes from its start).
    /// A range held whole already ([`Reader::check_cached`] holds small ones too) serves any
    /// read inside it. `Ok(false)` when the read is not one of those (outside the range, a
    /// large or small range not held, no room in the budget to keep it).
    fn read_whole(
        &self,
        offset: u64,
        len: u64,
        mut serve: impl FnMut(&[Bytes]),
    ) -> Result<bool, RemoteError> {
        let obj = &self.h.obj;
        obj.check()?;
        obj.check_range(offset, len)?;
        let end = offset + len;
        if len == 0 || offset < self.range.start || end > self.range.end {
            return Ok(false);
        }
        let ctx = &*self.h.reads;
        let deadline = Instant::now() + ctx.timeout;
        let rlen = self.range.end - self.range.start;
        let mut whole = lock(&self.whole);
        if whole.is_none() {
            if !self.is_whole() {
                return Ok(false);
            }
            self.start_whole(&mut whole, deadline);
        }
        let Some(w) = &mut *whole else {
            // No room in the budget to keep it: read it like a large one.
            return Ok(false);
        };
        if let Data::Pending(p) = &mut w.data {
            match p.wait(ctx, deadline) {
                Ok(d) => w.data = Data::Ready(d),
                Err(e) => {
                    *whole = None;
                    return Err(e);
                }
            }
        }
        if let Data::Ready(d) = &w.data {
            serve(d);
        }
        if w.serve(offset, end, self.range.start, rlen) {
            *whole = None;
        }
        Ok(true)
    }

    /// Fills `buf` from `offset` of the object; fails within `remote_timeout`.
    pub(crate) fn read_into(&self, buf: &mut [u8], offset: u64) -> Result<(), RemoteError> {
        let obj = &self.h.obj;
        obj.check()?;
        obj.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let ctx = &*self.h.reads;
        let deadline = Instant::now() + ctx.timeout;
        let end = offset + buf.len() as u64;

        // Bytes the disk cache holds: read in place.
        if ctx.io.disk.is_some() && !self.busy() && self.h.read_on_disk(buf, offset) {
            return Ok(());
        }
        // A range up to WHOLE_UP_TO: all of it in one GET (or held already, checked from the
        // disk cache).
        if self.read_whole(offset, buf.len() as u64, |d| {
            copy_from_chunks(buf, offset, self.range.start, d);
        })? {
            return Ok(());
        }
        if self.is_small() {
            return self.h.read_blocks(buf, offset, deadline);
        }

        let Some(stream) = self.stream_for(offset, end) else {
            return self.h.read_blocks(buf, offset, deadline);
        };
        let started = Instant::now();
        let mut st = stream.lock();
        if let Some((at, e)) = &st.failed {
            if *at >= started {
                return Err(e.clone());
            }
        }
        let r = self.read_stream(&mut st, buf, offset, deadline);
        if let Err(e) = &r {
            st.failed = Some((Instant::now(), e.clone()));
        }
        stream.publish(&st);
        r
    }

    /// Starts the one GET of a small range, unless it is under way or the budget has no room.
    fn start_whole(&self, whole: &mut Option<Whole>, deadline: Instant) {
        let ctx = &*self.h.reads;
        if whole.is_some() {
            return;
        }
        if let Some(res) = ctx.budget.try_reserve(self.range.end - self.range.start) {
            let p = Pending::spawn(
                ctx,
                &self.h.obj,
                self.range.clone(),
                Piece::AsReceived,
                deadline,
            );
            *whole = Some(Whole {
                data: Data::Pending(p),
                served: Vec::new(),
                _res: res,
            });
        }
    }

    /// Whether bytes fetched for this reader are held in memory (a range fetched whole, parts
    /// of a stream): its reads then go on through them, not to the disk cache's files.
    fn busy(&self) -> bool {
        lock(&self.whole).is_some()
            || self
                .lock_streams()
                .iter()
                .any(|s| s.has_parts.load(Ordering::Relaxed))
    }

    /// Whether the range's bytes can be read without a new fetch: held whole (or being
    /// fetched whole), or all in the disk cache.
    pub(crate) fn holds_all(&self) -> bool {
        let held = lock(&self.whole).is_some();
        held || (self.h.reads.io.disk.is_some() && self.h.all_cached(self.range.clone()))
    }

    /// Whether the range is fetched whole by its first read (one GET).
    fn is_whole(&self) -> bool {
        self.range.end - self.range.start <= WHOLE_UP_TO.min(self.h.reads.io.part)
            && !self.is_small()
    }

    /// Whether the range is read through the block cache (see [`SMALL_UP_TO`]).
    fn is_small(&self) -> bool {
        self.range.end - self.range.start <= SMALL_UP_TO
    }

    /// Starts fetching the range from its start without waiting, as a first read there would
    /// (read-ahead in tensor order, for a composed file about to reach this tensor); only with
    /// room in the budget (nothing waits for it), and only once.
    pub(crate) fn prefetch(&self) {
        let ctx = &*self.h.reads;
        let obj = &self.h.obj;
        let rlen = self.range.end - self.range.start;
        if rlen == 0 || self.is_small() || obj.check().is_err() {
            return;
        }
        // Bytes the disk cache holds are read (and checked) from there by the first read.
        if ctx.io.disk.is_some() && self.h.all_cached(self.range.clone()) {
            return;
        }
        let deadline = Instant::now() + ctx.timeout;
        if self.is_whole() {
            let mut whole = lock(&self.whole);
            self.start_whole(&mut whole, deadline);
            return;
        }
        let Some(stream) = self.stream_for(self.range.start, self.range.start) else {
            return;
        };
        let mut st = stream.lock();
        if st.parts.is_empty() && st.next_seq == self.range.start {
            st.ahead_end = self.range.start;
            // Speculative parts only (nothing is consumed yet): a refusal of the budget
            // shrinks the window, never waits.
            if self
                .schedule(&mut st, self.range.start, self.range.start, deadline)
                .is_err()
            {
                st.reset();
            }
        }
        stream.publish(&st);
    }

    /// A read of one stream (see [`Reader::read_into`]).
    fn read_stream(
        &self,
        st: &mut State,
        buf: &mut [u8],
        offset: u64,
        deadline: Instant,
    ) -> Result<(), RemoteError> {
        let ctx = &*self.h.reads;
        let obj = &self.h.obj;
        let end = offset + buf.len() as u64;
        while st
            .parts
            .front()
            .is_some_and(|p| p.end.saturating_add(KEEP_BEHIND) <= offset)
        {
            st.parts.pop_front();
        }
        let in_parts = st.parts.front().is_some_and(|p| p.start <= offset)
            && offset <= st.ahead_end.saturating_add(AHEAD_SLACK);
        if !in_parts && offset != st.next_seq {
            // Random (the stream moved on since it was picked).
            st.reset();
            st.next_seq = end;
            return self.h.read_blocks(buf, offset, deadline);
        }
        if !in_parts {
            // Sequential, nothing scheduled here yet: start from this read.
            st.parts.clear();
            st.ahead_end = offset;
        }
        if let Err(e) = self.schedule(st, offset, end, deadline) {
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
                    Ok(v) => part.data = Data::Ready(v),
                    Err(e) => {
                        st.reset();
                        return Err(e);
                    }
                }
            }
            if let Data::Ready(d) = &part.data {
                pos += copy_from_chunks(&mut buf[(pos - offset) as usize..], pos, part.start, d);
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
        // A late request of the kernel's read-ahead does not move the stream back.
        st.next_seq = st.next_seq.max(end);
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
        let ctx = &*self.h.reads;
        let obj = &self.h.obj;
        let limit = self.range.end.max(consumed_end).min(obj.size);
        let continuing = !st.parts.is_empty();
        if continuing
            && st.ahead_end >= consumed_end
            && st.ahead_end - consumed_end >= st.window / 2
        {
            return Ok(());
        }
        if continuing && st.ahead_end < limit {
            st.window = (st.window * 2).min(ctx.io.window);
        }
        let base = if continuing { consumed_end } else { offset };
        let mut target = consumed_end.max(limit.min(base + st.window));
        while st.ahead_end < target {
            let need = st.ahead_end < consumed_end;
            let want = aligned(
                st.ahead_end,
                ctx.io.part.min(target - st.ahead_end),
                limit,
                ctx.io.part,
            );
            let (res, len) = match ctx.budget.try_reserve(want) {
                Some(r) => (r, want),
                None if need => {
                    let len = aligned(
                        st.ahead_end,
                        ctx.io.part.min(consumed_end - st.ahead_end),
                        limit,
                        ctx.io.part,
                    );
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
                    Piece::AsReceived,
                    part_deadline,
                )),
                _res: res,
            });
            st.ahead_end = start + len;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole() -> Whole {
        Whole {
            data: Data::Ready(Vec::new()),
            served: Vec::new(),
            _res: crate::source::remote::budget::Budget::new(1 << 20)
                .try_reserve(0)
                .expect("an empty reservation"),
        }
    }

    /// A range held whole is let go once its reads cover it, not once as many bytes were
    /// served: bytes asked for twice (the kernel, a streaming check filling its gaps) do not
    /// count twice (they did, and the rest of the range was fetched again).
    #[test]
    fn a_whole_range_is_let_go_once_covered() {
        let mut w = whole();
        // Range [100, 400): the first half twice, out of order, then the rest.
        assert!(!w.serve(100, 250, 100, 300));
        assert!(!w.serve(100, 250, 100, 300));
        assert!(!w.serve(300, 400, 100, 300));
        assert!(!w.serve(200, 260, 100, 300));
        assert_eq!(w.served, [(300, 400), (100, 260)]);
        assert!(w.serve(260, 300, 100, 300));
        // Bounded: past MAX_SERVED_PARTS disjoint parts, nothing more is recorded.
        let mut w = whole();
        for i in 0..(MAX_SERVED_PARTS as u64 + 10) {
            assert!(!w.serve(10 * i, 10 * i + 5, 0, 1 << 20));
        }
        assert_eq!(w.served.len(), MAX_SERVED_PARTS);
    }
}
