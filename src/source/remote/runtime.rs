//! The small tokio runtime a remote store owns (2 worker threads), and the way synchronous
//! callers (FUSE threads, the CLI, the parsers through `ReadAt`) wait on it.
//!
//! Waiting is always bounded by the callers (every future they pass carries a timeout). A caller
//! that is itself on a tokio runtime thread cannot block on it directly; it waits through a
//! short-lived helper thread instead of panicking.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::runtime::{Handle, Runtime};

/// Owns the runtime; shut down without waiting when dropped.
#[derive(Debug)]
pub(crate) struct Rt {
    rt: Option<Runtime>,
    handle: Handle,
}

impl Rt {
    pub(crate) fn new() -> std::io::Result<Rt> {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("tfmount-remote-{n}"))
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        Ok(Rt {
            rt: Some(rt),
            handle,
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `fut` to completion from synchronous code.
    pub(crate) fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        if Handle::try_current().is_err() {
            return self.handle.block_on(fut);
        }
        // On a runtime thread: `block_on` would panic there; wait from a thread of our own.
        std::thread::scope(|s| match s.spawn(|| self.handle.block_on(fut)).join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        })
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // Tasks still in flight (read-ahead) are abandoned; safe from any thread.
            rt.shutdown_background();
        }
    }
}
