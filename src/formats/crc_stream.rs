//! Verify while streaming: a tensor's CRC-32C computed over the bytes its reads fetch anyway,
//! so a reader reading from the start costs one fetch per byte instead of a check-first pass
//! and a second fetch.
//!
//! A [`StreamCheck`] keeps the CRC-32C of the disjoint pieces of the stored range already
//! served, merging neighbours with `crc32c_combine` (the kernel sends read-ahead requests of one
//! reader on several threads, so they arrive slightly out of order). A read is streamed when it
//! starts at most [`SLACK`] past the end of the piece that starts at 0 (the frontier); any other
//! read (one that does not start at the beginning, a reader that seeked) is told to fall back to
//! the check-first pass. A read that reaches the end of the range is held back until the CRC of
//! the whole range is known ([`StreamCheck::wait`]): a reader that reads to the end gets every
//! byte exact or an error; one that stops early may hold bytes not yet verified.
//!
//! Local files, where reading a few bytes twice costs a copy from the page cache, not a fetch,
//! admit reads anywhere in the range ([`StreamCheck::local`]: a memory-mapping reader's
//! read-around starts ahead of the bytes it needs), and the read that reaches the end reads the
//! gaps no read covered yet itself ([`StreamCheck::gaps`], [`StreamCheck::fill`]) instead of
//! waiting for readers that may come much later.
//!
//! Bounded: at most [`MAX_PIECES`] pieces (past that, reads fall back), waits bounded by a
//! deadline.

use crate::sync::lock;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How far past the frontier a read may start and still be streamed (read-ahead requests of
/// one reader in flight at once).
pub(crate) const SLACK: u64 = 4 << 20;
/// Most disjoint pieces kept.
pub(crate) const MAX_PIECES: usize = 64;

/// What to do with a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// The outcome is known: `true` if the bytes matched.
    Known(bool),
    /// Serve it and [`StreamCheck::feed`] its bytes.
    Stream,
    /// Not a streaming read: check first.
    Fallback,
}

#[derive(Debug, Default)]
struct St {
    /// start -> (end, CRC-32C of [start, end)); disjoint, never adjacent.
    pieces: BTreeMap<u64, (u64, u32)>,
    verdict: Option<bool>,
    /// The CRC-32C computed over the whole range, once known by streaming.
    computed: u32,
    /// Streamed reads admitted and not yet fed or abandoned.
    flying: usize,
}

/// The streaming check of one stored range of `len` bytes whose CRC-32C should be `want`.
#[derive(Debug)]
pub(crate) struct StreamCheck {
    len: u64,
    want: u32,
    /// How far past the frontier a read may start ([`SLACK`], or the whole range).
    slack: u64,
    st: Mutex<St>,
    known: Condvar,
}

impl StreamCheck {
    pub(crate) fn new(len: u64, want: u32) -> StreamCheck {
        StreamCheck {
            len,
            want,
            slack: SLACK,
            st: Mutex::new(St::default()),
            known: Condvar::new(),
        }
    }

    /// The check of a range of a local file: reads are admitted anywhere in it.
    pub(crate) fn local(len: u64, want: u32) -> StreamCheck {
        StreamCheck {
            slack: u64::MAX,
            ..StreamCheck::new(len, want)
        }
    }

    fn lock(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }

    /// The CRC-32C computed over the whole range (meaningful once the verdict came from
    /// streaming).
    pub(crate) fn computed(&self) -> u32 {
        self.lock().computed
    }

    /// A streamed read failed before its bytes were fed.
    pub(crate) fn abandon(&self) {
        let mut st = self.lock();
        st.flying = st.flying.saturating_sub(1);
        drop(st);
        self.known.notify_all();
    }

    /// Records an outcome found otherwise (a check-first pass): waiting reads wake up.
    pub(crate) fn settle(&self, ok: bool) {
        let mut st = self.lock();
        st.verdict.get_or_insert(ok);
        st.pieces.clear();
        drop(st);
        self.known.notify_all();
    }

    /// Whether a read of `[a, b)` (offsets within the range) is streamed.
    pub(crate) fn admit(&self, a: u64, b: u64) -> Admit {
        let mut st = self.lock();
        if let Some(v) = st.verdict {
            return Admit::Known(v);
        }
        let frontier = match st.pieces.first_key_value() {
            Some((0, &(end, _))) => end,
            _ => 0,
        };
        if a > frontier.saturating_add(self.slack) || b > self.len || a > b {
            return Admit::Fallback;
        }
        // Room for the piece this read may add (it may merge, but count it).
        if st.pieces.len() >= MAX_PIECES && a > frontier {
            return Admit::Fallback;
        }
        st.flying += 1;
        Admit::Stream
    }

    /// Adds the bytes `data` served from offset `a` by a read [`admit`](Self::admit)ted as
    /// [`Admit::Stream`]: the parts not covered yet are folded in. Returns the outcome when this
    /// completed the range.
    pub(crate) fn feed(&self, a: u64, data: &[u8]) -> Option<bool> {
        let mut st = self.lock();
        st.flying = st.flying.saturating_sub(1);
        self.fold(st, a, data)
    }

    /// Adds bytes read only to complete the check (a gap of [`gaps`](Self::gaps)), as
    /// [`feed`](Self::feed) does, for no admitted read.
    pub(crate) fn fill(&self, a: u64, data: &[u8]) -> Option<bool> {
        let st = self.lock();
        self.fold(st, a, data)
    }

    /// The parts of the range no piece covers yet, in order (none once the outcome is known).
    pub(crate) fn gaps(&self) -> Vec<(u64, u64)> {
        let st = self.lock();
        if st.verdict.is_some() {
            return Vec::new();
        }
        let mut gaps = Vec::new();
        let mut pos = 0;
        for (&s, &(e, _)) in &st.pieces {
            if s > pos {
                gaps.push((pos, s));
            }
            pos = pos.max(e);
        }
        if pos < self.len {
            gaps.push((pos, self.len));
        }
        gaps
    }

    fn fold(&self, mut st: MutexGuard<'_, St>, a: u64, data: &[u8]) -> Option<bool> {
        let b = a.saturating_add(data.len() as u64).min(self.len);
        if let Some(v) = st.verdict {
            return Some(v);
        }
        // The gaps of [a, b) between existing pieces.
        let mut gaps = Vec::new();
        let mut pos = a;
        let before = st
            .pieces
            .range(..=a)
            .next_back()
            .map(|(&s, &(e, _))| (s, e));
        if let Some((_, e)) = before {
            pos = pos.max(e);
        }
        for (&s, &(e, _)) in st.pieces.range(a..b) {
            if s > pos {
                gaps.push((pos, s));
            }
            pos = pos.max(e);
        }
        if pos < b {
            gaps.push((pos, b));
        }
        for (g0, g1) in gaps {
            let bytes = &data[(g0 - a) as usize..(g1 - a) as usize];
            // In order (the piece before ends here): the CRC carries on over these bytes, with
            // no `crc32c_combine` (a few microseconds per read).
            let prev = st
                .pieces
                .range(..g0)
                .next_back()
                .map(|(&s, &(e, c))| (s, e, c));
            match prev {
                Some((ps, pe, pc)) if pe == g0 => {
                    st.pieces.remove(&ps);
                    insert(&mut st.pieces, ps, g1, crc32c::crc32c_append(pc, bytes));
                }
                _ => insert(&mut st.pieces, g0, g1, crc32c::crc32c(bytes)),
            }
            if st.pieces.len() > MAX_PIECES {
                break;
            }
        }
        let whole = match st.pieces.first_key_value() {
            Some((0, &(end, crc))) if end >= self.len => Some(crc),
            _ if self.len == 0 => Some(0),
            _ => None,
        };
        let v = whole.map(|crc| crc == self.want);
        if let (Some(v), Some(crc)) = (v, whole) {
            st.verdict = Some(v);
            st.computed = crc;
            st.pieces.clear();
        }
        drop(st);
        self.known.notify_all();
        v
    }

    /// Waits until the outcome is known: at most `busy` while streamed reads are in flight,
    /// `idle` while none is; then `None` (check first).
    pub(crate) fn wait(&self, idle: Duration, busy: Duration) -> Option<bool> {
        let t0 = Instant::now();
        let mut st = self.lock();
        loop {
            if let Some(v) = st.verdict {
                return Some(v);
            }
            let limit = if st.flying > 0 { busy } else { idle };
            let waited = t0.elapsed();
            if waited >= limit {
                return None;
            }
            st = self
                .known
                .wait_timeout(st, (limit - waited).min(idle.max(Duration::from_millis(1))))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// Inserts the piece `[s, e)` with CRC `crc` (disjoint from the others), merging it with the
/// pieces that end at `s` and start at `e`.
fn insert(pieces: &mut BTreeMap<u64, (u64, u32)>, mut s: u64, mut e: u64, mut crc: u32) {
    if let Some((&ps, &(pe, pc))) = pieces.range(..s).next_back() {
        if pe == s {
            pieces.remove(&ps);
            crc = crc32c::crc32c_combine(pc, crc, (e - s) as usize);
            s = ps;
        }
    }
    if let Some(&(ne, nc)) = pieces.get(&e) {
        pieces.remove(&e);
        crc = crc32c::crc32c_combine(crc, nc, (ne - e) as usize);
        e = ne;
    }
    pieces.insert(s, (e, crc));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn in_order_reads_give_the_crc_at_the_last_one() {
        let d = data(10_000);
        let c = StreamCheck::new(d.len() as u64, crc32c::crc32c(&d));
        for (i, ch) in d.chunks(1000).enumerate() {
            let a = (i * 1000) as u64;
            assert_eq!(c.admit(a, a + ch.len() as u64), Admit::Stream);
            let v = c.feed(a, ch);
            assert_eq!(v, (i == 9).then_some(true), "{i}");
        }
        assert_eq!(c.admit(0, 10), Admit::Known(true));
    }

    #[test]
    fn out_of_order_and_overlapping_reads_merge() {
        let d = data(50_000);
        let c = StreamCheck::new(d.len() as u64, crc32c::crc32c(&d));
        for (a, b) in [
            (10_000, 20_000),
            (0, 5_000),
            (3_000, 12_000),
            (30_000, 50_000),
            (0, 100),
        ] {
            assert_eq!(c.admit(a, b), Admit::Stream);
            assert_eq!(c.feed(a, &d[a as usize..b as usize]), None);
        }
        let t0 = Instant::now();
        assert_eq!(
            c.wait(Duration::from_millis(50), Duration::from_secs(60)),
            None
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no read in flight: short wait"
        );
        assert_eq!(c.feed(19_000, &d[19_000..31_000]), Some(true));
        assert_eq!(c.wait(Duration::ZERO, Duration::ZERO), Some(true));
    }

    #[test]
    fn a_mismatch_is_known_and_remembered() {
        let mut d = data(4096);
        let c = StreamCheck::new(d.len() as u64, crc32c::crc32c(&d));
        d[4000] ^= 1;
        assert_eq!(c.feed(0, &d[..2048]), None);
        assert_eq!(c.feed(2048, &d[2048..]), Some(false));
        assert_eq!(c.admit(0, 1), Admit::Known(false));
    }

    #[test]
    fn reads_far_past_the_frontier_fall_back() {
        let c = StreamCheck::new(1 << 30, 0);
        assert_eq!(c.admit(0, 10), Admit::Stream);
        assert_eq!(c.admit(SLACK + 1, SLACK + 10), Admit::Fallback);
        assert_eq!(c.admit(SLACK, SLACK + 10), Admit::Stream);
        assert!(c.wait(Duration::ZERO, Duration::ZERO).is_none());
        c.settle(true);
        assert_eq!(c.admit(SLACK + 1, SLACK + 10), Admit::Known(true));
    }

    #[test]
    fn a_local_check_admits_reads_anywhere_and_fills_its_gaps() {
        let d = data(30_000);
        let c = StreamCheck::local(d.len() as u64, crc32c::crc32c(&d));
        // A read-around far ahead of the frontier, then the end: admitted, not a fallback.
        for (a, b) in [(20_000u64, 25_000u64), (5_000, 8_000), (25_000, 30_000)] {
            assert_eq!(c.admit(a, b), Admit::Stream);
            assert_eq!(c.feed(a, &d[a as usize..b as usize]), None);
        }
        assert_eq!(c.gaps(), vec![(0, 5_000), (8_000, 20_000)]);
        assert_eq!(c.fill(0, &d[..5_000]), None);
        assert_eq!(c.fill(8_000, &d[8_000..20_000]), Some(true));
        assert!(c.gaps().is_empty());
        // The remote check sends the same far read to the check-first pass.
        let far = StreamCheck::new(1 << 30, 0);
        assert_eq!(far.admit(SLACK + 1, SLACK + 2), Admit::Fallback);
        assert_eq!(
            StreamCheck::local(1 << 30, 0).admit(SLACK + 1, SLACK + 2),
            Admit::Stream
        );
    }

    #[test]
    fn a_filled_gap_with_wrong_bytes_is_a_mismatch() {
        let d = data(10_000);
        let c = StreamCheck::local(d.len() as u64, crc32c::crc32c(&d));
        assert_eq!(c.admit(5_000, 10_000), Admit::Stream);
        assert_eq!(c.feed(5_000, &d[5_000..]), None);
        let mut wrong = d[..5_000].to_vec();
        wrong[17] ^= 0x40;
        assert_eq!(c.fill(0, &wrong), Some(false));
        assert_eq!(c.admit(0, 1), Admit::Known(false));
    }

    #[test]
    fn pieces_are_bounded() {
        let c = StreamCheck::new(1 << 20, 0);
        let d = vec![0u8; 10];
        for i in 0..MAX_PIECES as u64 {
            assert_eq!(c.admit(i * 100, i * 100 + 10), Admit::Stream);
            c.feed(i * 100, &d);
        }
        assert_eq!(c.admit(10_000, 10_010), Admit::Fallback);
        // Reads at the frontier still go on.
        assert_eq!(c.admit(10, 20), Admit::Stream);
    }
}
