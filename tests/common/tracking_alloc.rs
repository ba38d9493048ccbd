//! A global allocator that records the largest single allocation of the current thread, for
//! tests that show an input is refused before anything is allocated for its claimed size, and
//! that can refuse (abort the process on) any single allocation over a cap on a thread that asks.
//! A test binary installs it once with `#[global_allocator] static GLOBAL: Tracking = Tracking;`
//! (`tests/formats/main.rs`).
//!
//! Both are per thread: the tests of a binary run as threads of one process, and each sees and
//! caps only its own allocations, never its neighbours'.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Records the largest single allocation of the current thread, so a test can show that an
/// input does not make tfmount allocate what the input merely claims (tests run in parallel
/// threads; each sees only its own allocations), and refuses allocations over the thread's
/// [`cap`].
pub struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static CAP: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Notes an allocation of `size` bytes; whether it is over the thread's cap (then refused).
fn note(size: usize) -> bool {
    let _ = LARGEST.try_with(|m| m.set(m.get().max(size)));
    if size > CAP.try_with(Cell::get).unwrap_or(usize::MAX) {
        // No formatting here (it would allocate): a fixed message; the caller returns null and
        // the allocation error handler aborts, naming the size.
        let msg = b"\ntracking_alloc: an allocation over the thread's cap was requested\n";
        // SAFETY: writes a static buffer to the standard error descriptor.
        unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
        return true;
    }
    false
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if note(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the system allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if note(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns the largest single allocation it made on this thread.
pub fn largest_allocation(f: impl FnOnce()) -> usize {
    LARGEST.with(|m| m.set(0));
    f();
    LARGEST.with(|m| m.get())
}

/// The largest single allocation of this thread so far (since it started, or since the last
/// [`largest_allocation`] on it).
pub fn largest() -> usize {
    LARGEST.with(|m| m.get())
}

/// While the guard lives, any single allocation of more than `max` bytes on this thread is
/// refused, which aborts the process (the allocation error handler names the size): a parser
/// that sizes a buffer by what an input claims ends the test binary instead of passing.
#[must_use = "the cap holds while the guard lives"]
pub fn cap(max: usize) -> Cap {
    Cap(CAP.with(|c| c.replace(max)))
}

/// The guard of [`cap`]: restores the thread's previous cap when dropped.
pub struct Cap(usize);

impl Drop for Cap {
    fn drop(&mut self) {
        let _ = CAP.try_with(|c| c.set(self.0));
    }
}
