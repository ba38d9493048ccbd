//! Read-only mappings of local source files, so that a read reply is written to the kernel
//! straight from the file's pages (one copy of each byte, as from memory), and the guard that
//! makes a mapping safe to touch when its file is cut short underneath it.
//!
//! A page of a mapping past the end of its file (the file was truncated after it was mapped)
//! raises SIGBUS when touched. Two kinds of touch happen:
//! - the kernel's copy of a reply (`writev` to `/dev/fuse`): a fault there is not a signal, the
//!   write fails with EFAULT and the kernel fails the request with EIO;
//! - the daemon's own (the streaming CRC-32C over the bytes, a composed file's copy across two
//!   tensors): the guard, a SIGBUS handler installed by the daemon ([`install_guard`]), maps a
//!   page of zeros over the lost page of a registered mapping, marks the mapping damaged and counts
//!   the fault on the faulting thread, so the touch completes; the read that touched it sees the
//!   count change ([`scope`]) and fails with EIO, and the file fails every later read
//!   ([`Mapping::damaged`], checked with its size and time). A SIGBUS at an address no mapping
//!   holds goes to the handler that was there before (the default: the process dies as without
//!   the guard).
//!
//! Mapped bytes are handed out only inside a [`scope`] (the FUSE adapter's read of a file of
//! tensor bytes) in a process with the guard: everything that touches them then does so before
//! the scope's check. Outside a scope (the Python module, the subcommands, rendering), and in a
//! process without the guard, files are read with `pread` as before.

use std::cell::Cell;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Mappings registered at once; past this, files are read with `pread`.
const SLOTS: usize = 256;

struct Slot {
    /// First byte of the mapping; 0 when the slot is free.
    start: AtomicUsize,
    end: AtomicUsize,
    damaged: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    damaged: AtomicBool::new(false),
};
static REGISTRY: [Slot; SLOTS] = [FREE; SLOTS];
/// Whether the guard is installed (mappings are made only then).
static GUARDED: AtomicBool = AtomicBool::new(false);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The SIGBUS action before the guard's (leaked, read by the handler).
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// Faults the guard absorbed on this thread.
    static FAULTS: Cell<u64> = const { Cell::new(0) };
    /// Whether this thread is inside a [`scope`].
    static IN_SCOPE: Cell<bool> = const { Cell::new(false) };
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a handler installed with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for slot in &REGISTRY {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start || addr >= slot.end.load(Ordering::Acquire) {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: replaces one page of a mapping this module made (its owner holds it mapped
        // while it is touched) with a private page of zeros; mmap is a plain system call, safe
        // in a signal handler.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            slot.damaged.store(true, Ordering::Release);
            FAULTS.with(|f| f.set(f.get().wrapping_add(1)));
            return;
        }
        break;
    }
    // Not ours (or the page could not be replaced): what was there before handles it.
    let prev = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: `prev` is null or the leaked action saved at installation.
    unsafe {
        if prev.is_null() {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
            return; // the fault repeats, with the default action
        }
        let p = &*prev;
        if p.sa_sigaction == libc::SIG_DFL || p.sa_sigaction == libc::SIG_IGN {
            libc::sigaction(sig, p, std::ptr::null_mut());
        } else if p.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(p.sa_sigaction);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(p.sa_sigaction);
            f(sig);
        }
    }
}

/// Installs the guard (once per process; the daemon does, at start): from then on, files are
/// mapped for the reads of a [`scope`].
pub(crate) fn install_guard() -> io::Result<()> {
    if GUARDED.load(Ordering::Acquire) {
        return Ok(());
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 && (page as usize).is_power_of_two() {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // SAFETY: a zeroed sigaction is a valid starting point; the handler is async-signal-safe
    // (atomics, mmap, sigaction).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        PREVIOUS.store(Box::into_raw(Box::new(old)), Ordering::Release);
    }
    GUARDED.store(true, Ordering::Release);
    Ok(())
}

/// Runs `f` with mapped reads allowed on this thread; returns what it returned and whether a
/// mapped page it touched was lost (its file cut short): then its bytes are not to be served.
pub(crate) fn scope<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let before = FAULTS.with(Cell::get);
    let was = IN_SCOPE.with(|s| s.replace(true));
    let r = f();
    IN_SCOPE.with(|s| s.set(was));
    (r, FAULTS.with(Cell::get) != before)
}

/// Whether a read on this thread may be answered from a mapping.
pub(crate) fn allowed() -> bool {
    GUARDED.load(Ordering::Acquire) && IN_SCOPE.with(Cell::get)
}

/// A whole file mapped read-only and registered with the guard.
pub(crate) struct Mapping {
    ptr: *const u8,
    len: usize,
    slot: usize,
}

// SAFETY: the mapping is read-only and lives until dropped; nothing in it is thread-bound.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `file` (its length when it was opened); `None` without the
    /// guard, for an empty file, when every slot is taken or when `mmap` fails.
    pub(crate) fn new(file: &std::fs::File, len: u64) -> Option<Mapping> {
        Self::concat(&[(file, 0, len)])
    }

    /// Maps `len` bytes from byte `at` of each file one after the other, at consecutive
    /// addresses: one mapping whose bytes are the parts' bytes in order (runs of pieces of an
    /// object, kept in segment files, read as one range). Every `at` must be a whole number of
    /// pages, and every part but the last a whole number of pages long. `None` as for
    /// [`new`](Self::new), or when a part is not.
    pub(crate) fn concat(parts: &[(&std::fs::File, u64, u64)]) -> Option<Mapping> {
        if !GUARDED.load(Ordering::Acquire) {
            return None;
        }
        let page = PAGE.load(Ordering::Relaxed);
        let mut len = 0usize;
        for (i, &(_, at, l)) in parts.iter().enumerate() {
            let l = usize::try_from(l).ok().filter(|&l| l > 0)?;
            if (i + 1 < parts.len() && l % page != 0) || at % page as u64 != 0 {
                return None;
            }
            libc::off_t::try_from(at).ok()?;
            len = len.checked_add(l)?;
        }
        if len == 0 {
            return None;
        }
        let p = if let [(file, at, _)] = parts {
            // SAFETY: a new shared read-only mapping of an open file; nothing else is at the
            // address the kernel picks.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    *at as libc::off_t,
                )
            }
        } else {
            // SAFETY: reserves a range of addresses (no access), then maps each file over its
            // share of it (MAP_FIXED inside the reservation this call owns).
            unsafe {
                let base = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if base == libc::MAP_FAILED {
                    libc::MAP_FAILED
                } else {
                    let mut at = 0usize;
                    let mut ok = true;
                    for &(file, off, l) in parts {
                        let l = l as usize;
                        let q = libc::mmap(
                            (base as usize + at) as *mut libc::c_void,
                            l,
                            libc::PROT_READ,
                            libc::MAP_SHARED | libc::MAP_FIXED,
                            file.as_raw_fd(),
                            off as libc::off_t,
                        );
                        if q == libc::MAP_FAILED {
                            ok = false;
                            break;
                        }
                        at += l;
                    }
                    if ok {
                        base
                    } else {
                        libc::munmap(base, len);
                        libc::MAP_FAILED
                    }
                }
            }
        };
        if p == libc::MAP_FAILED {
            log::debug!("mmap failed: {}", io::Error::last_os_error());
            return None;
        }
        let start = p as usize;
        for (i, slot) in REGISTRY.iter().enumerate() {
            if slot.end.load(Ordering::Acquire) != 0 {
                continue;
            }
            // Claim by `end` (the handler matches by `start`, set last).
            if slot
                .end
                .compare_exchange(0, start + len, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                slot.damaged.store(false, Ordering::Relaxed);
                slot.start.store(start, Ordering::Release);
                return Some(Mapping {
                    ptr: p as *const u8,
                    len,
                    slot: i,
                });
            }
        }
        // SAFETY: unmapping what was just mapped, never handed out.
        unsafe { libc::munmap(p, len) };
        None
    }

    /// The mapped bytes. Touching them in the daemon is safe only inside a [`scope`] of a
    /// process with the guard (see the module docs).
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is mapped readable for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether a page of it was found lost (its file cut short) and replaced with zeros.
    pub(crate) fn damaged(&self) -> bool {
        REGISTRY[self.slot].damaged.load(Ordering::Acquire)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let slot = &REGISTRY[self.slot];
        slot.start.store(0, Ordering::Release);
        // SAFETY: the mapping this value made; no reference to its bytes outlives it (the
        // `Bytes` handed out hold the `Arc` that owns it).
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
        slot.end.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_cut_short_under_its_mapping_reads_zeros_counted_not_a_crash() {
        install_guard().expect("guard");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut f = std::fs::File::create(&path).expect("create");
        let page = PAGE.load(Ordering::Relaxed);
        f.write_all(&vec![7u8; page * 4]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let m = Mapping::new(&file, (page * 4) as u64).expect("mapped");
        let (sum, lost) = scope(|| m.bytes()[..page].iter().map(|&b| b as u64).sum::<u64>());
        assert_eq!((sum, lost), (7 * page as u64, false));
        assert!(!allowed(), "outside a scope");
        f.set_len(page as u64).expect("truncate");
        let (tail, lost) = scope(|| {
            assert!(allowed());
            m.bytes()[page * 2..].iter().map(|&b| b as u64).sum::<u64>()
        });
        assert_eq!(tail, 0, "the lost pages read as zeros");
        assert!(lost, "the scope saw the fault");
        assert!(m.damaged());
        // The page still in the file is intact.
        let (head, lost) = scope(|| m.bytes()[0] as u64);
        assert_eq!((head, lost), (7, false));
        drop(m);
    }

    #[test]
    fn files_mapped_one_after_another_read_as_one_range_and_a_cut_one_is_caught() {
        install_guard().expect("guard");
        let dir = tempfile::tempdir().expect("tempdir");
        let page = PAGE.load(Ordering::Relaxed);
        // Two whole pages of 1s, then a page of 2s that starts one page into its file (after
        // a page of 9s, as a segment's pieces follow its slots), each followed by a trailer
        // that is not mapped, and a last file of 3s not a whole page long.
        let mut files = Vec::new();
        for (i, (fill, len, at)) in [(1u8, page * 2, 0), (2, page, page), (3, page / 2 + 5, 0)]
            .into_iter()
            .enumerate()
        {
            let path = dir.path().join(format!("{i}"));
            let mut v = vec![9u8; at];
            v.extend(vec![fill; len]);
            v.extend_from_slice(b"trailer!");
            std::fs::write(&path, &v).expect("write");
            files.push((
                std::fs::File::open(&path).expect("open"),
                at as u64,
                len as u64,
                path,
            ));
        }
        let parts: Vec<_> = files.iter().map(|(f, a, l, _)| (f, *a, *l)).collect();
        let m = Mapping::concat(&parts).expect("mapped");
        let mut want = vec![1u8; page * 2];
        want.extend(vec![2u8; page]);
        want.extend(vec![3u8; page / 2 + 5]);
        let (same, lost) = scope(|| m.bytes() == &want[..]);
        assert_eq!(
            (same, lost),
            (true, false),
            "the files' bytes in order, no trailers"
        );
        // A part that is not a whole number of pages is refused unless it is the last.
        let odd: Vec<_> = [2, 0].iter().map(|&i| parts[i]).collect();
        assert!(Mapping::concat(&odd).is_none());
        // So is a part that does not start on a page.
        let (f, _, l, _) = &files[1];
        assert!(Mapping::concat(&[(f, 1, *l)]).is_none());
        // The middle file cut short: its page reads as zeros, the scope sees the fault.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&files[1].3)
            .expect("open")
            .set_len(0)
            .expect("truncate");
        let (mid, lost) = scope(|| m.bytes()[page * 2..page * 3].iter().any(|&b| b != 0));
        assert_eq!((mid, lost), (false, true));
        assert!(m.damaged());
        let (tail, lost) = scope(|| m.bytes()[page * 3]);
        assert_eq!((tail, lost), (3, false), "the file after it is intact");
    }
}
