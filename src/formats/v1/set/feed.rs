//! One read of a large V1 block feeding two passes: the CRC check reads the block's pieces in
//! order ([`fv1::block::verify_block_pieces`]) and hands them on; the value's scan ([`Fed`], a
//! [`ReadAt`]) reads from those pieces instead of reading the file a second time. Reads that the
//! pieces do not cover (behind the last two, or once the check has ended) go to the file.
//!
//! Nothing waits on a side that is gone: the check's `send` fails once the scan has dropped its
//! [`Fed`], and the scan's `recv` fails once the check has ended (done, failed or panicked).

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Mutex;

use super::{lock, ByteSource};
use crate::formats::v1::table as fv1;
use crate::parse::table::BlockHandle;
use crate::parse::{ReadAt, Result};

/// Pieces in flight between the check and the scan (each up to `CRC_CHUNK`, 256 KiB).
const DEPTH: usize = 4;
/// Pieces the scan keeps: its window may start in the one before the newest.
const HELD: usize = 2;

/// The scan's side: the pieces received so far (the last [`HELD`]), the file for the rest.
pub(super) struct Fed<'a> {
    src: &'a dyn ByteSource,
    rx: Receiver<(u64, Vec<u8>)>,
    /// Buffers handed back to the check for its next pieces.
    back: SyncSender<Vec<u8>>,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    pieces: VecDeque<(u64, Vec<u8>)>,
    /// The check sends no more.
    ended: bool,
}

/// The check of block `h` of `src` (run it on its own thread) and the reader of the pieces it
/// reads (for the scan).
pub(super) fn check_and_feed(
    src: &dyn ByteSource,
    h: BlockHandle,
) -> (impl FnOnce() -> Result<u8> + Send + '_, Fed<'_>) {
    let (tx, rx) = sync_channel::<(u64, Vec<u8>)>(DEPTH);
    let (back, spare) = sync_channel::<Vec<u8>>(DEPTH);
    let check = move || {
        let mut feeding = true;
        fv1::block::verify_block_pieces(src, h, |at, piece| {
            if !feeding {
                return Some(piece);
            }
            match tx.send((at, piece)) {
                Ok(()) => spare.try_recv().ok(),
                // The scan is done: no more sending, the one buffer reused.
                Err(e) => {
                    feeding = false;
                    Some((e.0).1)
                }
            }
        })
    };
    let fed = Fed {
        src,
        rx,
        back,
        held: Mutex::new(Held::default()),
    };
    (check, fed)
}

impl ReadAt for Fed<'_> {
    fn len(&self) -> u64 {
        self.src.len()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let mut held = lock(&self.held);
        let end = offset.saturating_add(buf.len() as u64);
        let mut pos = offset;
        while pos < end {
            let covering = held
                .pieces
                .iter()
                .find(|(at, p)| *at <= pos && pos < at + p.len() as u64);
            if let Some((at, p)) = covering {
                let from = (pos - at) as usize;
                let n = ((at + p.len() as u64).min(end) - pos) as usize;
                let to = (pos - offset) as usize;
                buf[to..to + n].copy_from_slice(&p[from..from + n]);
                pos += n as u64;
                continue;
            }
            let behind = held.pieces.front().is_some_and(|(at, _)| pos < *at);
            if behind || held.ended {
                break;
            }
            match self.rx.recv() {
                Ok(piece) => {
                    held.pieces.push_back(piece);
                    if held.pieces.len() > HELD {
                        if let Some((_, old)) = held.pieces.pop_front() {
                            // A full return channel: the buffer is dropped.
                            let _ = self.back.try_send(old);
                        }
                    }
                }
                Err(_) => held.ended = true,
            }
        }
        if pos < end {
            let to = (pos - offset) as usize;
            self.src.read_exact_at(&mut buf[to..], pos)?;
        }
        Ok(())
    }
}
