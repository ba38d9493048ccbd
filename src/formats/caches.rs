//! The caches every checkpoint of a mount shares (one per mount, handed to each format's
//! `open` in `OpenCtx`), each bounded by bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::cache::Lru;
use crate::formats::v2::strings::StringLayout;
use crate::parse::table::{Block, BlockStore, Pos};
use crate::parse::FormatError;

/// Bytes of string-tensor layouts kept (8 bytes an element); larger layouts are rebuilt per
/// open.
const STRING_CACHE_BYTES: usize = 16 << 20;
/// Outcomes of tensor CRC checks remembered (an entry weighs [`CHECK_WEIGHT`]); a forgotten
/// outcome is checked again.
const CHECK_CACHE_BYTES: usize = 4 << 20;
pub(crate) const CHECK_WEIGHT: usize = 64;

/// The caches every checkpoint of a mount shares, each bounded by bytes: decoded index blocks,
/// string-tensor layouts, and the outcomes of tensor CRC checks.
pub(crate) struct Caches {
    pub(crate) blocks: Lru<(u64, u32), Arc<Block>>,
    pub(crate) strings: Lru<(u64, Pos), Arc<StringLayout>>,
    pub(crate) checked: Lru<(u64, Pos), Result<(), FormatError>>,
    next_id: AtomicU64,
}

impl Caches {
    /// `block_bytes`: bytes of decoded index blocks to keep.
    pub(crate) fn new(block_bytes: usize) -> Arc<Caches> {
        Arc::new(Caches {
            blocks: Lru::new(block_bytes),
            strings: Lru::new(STRING_CACHE_BYTES),
            checked: Lru::new(CHECK_CACHE_BYTES),
            next_id: AtomicU64::new(1),
        })
    }
}

impl BlockStore for Caches {
    fn get(&self, table: u64, block: u32) -> Option<Arc<Block>> {
        self.blocks.get(&(table, block))
    }

    fn put(&self, table: u64, block: u32, value: Arc<Block>) {
        let w = value.mem_size();
        self.blocks.insert((table, block), value, w);
    }

    fn register(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}
