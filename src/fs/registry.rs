//! Every subtree instance of a mount, by slot (the `subtree` field of an inode number). A slot
//! holds one subtree at a time; a snapshot mount fills its slots once, in order. A live
//! directory also frees the slots of its pruned checkpoints and fills them again, so a mount
//! that runs for weeks does not run out of them.
//!
//! Each slot keeps, in one atomic word ([`crate::namespace::ino::slot`]), its *generation*, whether
//! it is free, and the lookups the kernel holds on its inodes (a LOOKUP reply or a READDIRPLUS
//! entry adds one, FORGET takes its count away). The rules that keep an old inode number from
//! ever reaching a slot's next occupant:
//! - a slot is freed only while the kernel holds no lookup of it ([`Registry::release`]), and
//!   the kernel sends no request for an inode number it forgot;
//! - freeing increments the generation; the occupant and the generation are read together
//!   ([`Registry::get_with_generation`]), and a lookup is counted only if the slot is still
//!   that occupant's ([`Registry::pin`]): an entry resolved before its slot was freed is
//!   refused instead of handed to the kernel;
//! - the generation goes with every entry (FUSE's entry generation): were the kernel still to
//!   hold an inode of an earlier occupant, it marks it bad when the number comes back;
//! - free slots are reused last: never-used slots first, then the one freed longest ago.
//!
//! A slot whose generation reaches its maximum is not reused again.

use crate::sync::{lock, read_lock, write_lock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::fs::subtree::Subtree;
use crate::namespace::ino::{slot, MAX_SUBTREES};

struct Slot {
    /// The occupant. The generation changes only under this lock's write side, so that a
    /// reader sees an occupant with its own generation.
    tree: RwLock<Option<Arc<dyn Subtree>>>,
    /// `generation | free | lookups` ([`slot`]).
    state: AtomicU64,
}

/// Which slots can be handed out.
struct Ids {
    /// The first slot never used.
    fresh: usize,
    /// Freed slots, the one freed longest ago first.
    freed: VecDeque<u16>,
}

pub(crate) struct Registry {
    slots: Box<[Slot]>,
    ids: Mutex<Ids>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

const FREE: u64 = 1 << slot::FREE.shift;

fn generation(state: u64) -> u64 {
    slot::GENERATION.get(state)
}

fn lookups(state: u64) -> u64 {
    slot::LOOKUPS.get(state)
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            slots: (0..MAX_SUBTREES)
                .map(|_| Slot {
                    tree: RwLock::new(None),
                    state: AtomicU64::new(FREE),
                })
                .collect(),
            ids: Mutex::new(Ids {
                fresh: 0,
                freed: VecDeque::new(),
            }),
        }
    }

    /// A slot to fill with [`Registry::set`]: a never-used one (in order, from 0), else the
    /// one freed longest ago; `None` when every slot is taken.
    pub(crate) fn reserve(&self) -> Option<u16> {
        let mut ids = lock(&self.ids);
        if ids.fresh < self.slots.len() {
            let id = u16::try_from(ids.fresh).ok()?;
            ids.fresh += 1;
            return Some(id);
        }
        ids.freed.pop_front()
    }

    /// Fills reserved slot `id`.
    pub(crate) fn set(&self, id: u16, t: Arc<dyn Subtree>) {
        if let Some(s) = self.slots.get(id as usize) {
            let mut tree = write_lock(&s.tree);
            *tree = Some(t);
            s.state.fetch_and(!FREE, Ordering::AcqRel);
        }
    }

    pub(crate) fn get(&self, id: u16) -> Option<Arc<dyn Subtree>> {
        self.get_with_generation(id).map(|(t, _)| t)
    }

    /// The occupant of slot `id` and its generation.
    pub(crate) fn get_with_generation(&self, id: u16) -> Option<(Arc<dyn Subtree>, u64)> {
        let s = self.slots.get(id as usize)?;
        let tree = read_lock(&s.tree);
        let t = tree.clone()?;
        Some((t, generation(s.state.load(Ordering::Acquire))))
    }

    /// The generation of slot `id` now.
    pub(crate) fn generation(&self, id: u16) -> u64 {
        self.slots
            .get(id as usize)
            .map_or(0, |s| generation(s.state.load(Ordering::Acquire)))
    }

    /// Counts one lookup the kernel is about to hold on an inode of slot `id`, resolved in
    /// `generation`. False (and nothing counted) if the slot was freed since: the entry must
    /// not reach the kernel.
    pub(crate) fn pin(&self, id: u16, generation_seen: u64) -> bool {
        let Some(s) = self.slots.get(id as usize) else {
            return false;
        };
        s.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let ok = v & FREE == 0
                    && generation(v) == generation_seen
                    && lookups(v) < slot::LOOKUPS.max();
                ok.then_some(v + 1)
            })
            .is_ok()
    }

    /// The kernel forgot `n` lookups of inodes of slot `id` (FORGET names no generation: they
    /// are the current occupant's, since a slot is freed only once all were forgotten).
    pub(crate) fn forgot(&self, id: u16, n: u64) {
        if let Some(s) = self.slots.get(id as usize) {
            let _ = s
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                    Some(v - lookups(v) + lookups(v).saturating_sub(n))
                });
        }
    }

    /// Lookups the kernel holds on inodes of slot `id`.
    pub(crate) fn lookups(&self, id: u16) -> u64 {
        self.slots
            .get(id as usize)
            .map_or(0, |s| lookups(s.state.load(Ordering::Acquire)))
    }

    /// Frees slot `id` if the kernel holds no lookup of it: its subtree is dropped (files
    /// closed once the operations under way are done), its generation goes up, and the slot
    /// can be handed out again. A slot reserved and never filled is given back as it is.
    /// False if it is still looked up (or already free).
    pub(crate) fn release(&self, id: u16) -> bool {
        let Some(s) = self.slots.get(id as usize) else {
            return false;
        };
        let old = {
            let mut tree = write_lock(&s.tree);
            let v = s.state.load(Ordering::Acquire);
            if v & FREE != 0 {
                let mut ids = lock(&self.ids);
                let reserved = (id as usize) < ids.fresh && !ids.freed.contains(&id);
                if reserved && tree.is_none() && generation(v) < slot::GENERATION.max() {
                    ids.freed.push_back(id);
                    return true;
                }
                return false;
            }
            if lookups(v) != 0 {
                return false;
            }
            let next = generation(v) + 1;
            let reusable = next <= slot::GENERATION.max();
            let state = slot::GENERATION
                .put(next.min(slot::GENERATION.max()))
                .unwrap_or(0)
                | FREE;
            // A pin between the load and here fails this exchange.
            if s.state
                .compare_exchange(v, state, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return false;
            }
            if reusable {
                lock(&self.ids).freed.push_back(id);
            }
            tree.take()
        };
        drop(old);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{FsError, FsResult};
    use crate::fs::subtree::{Entry, NodeAttr};
    use crate::fs::Kind;
    use crate::namespace::ino::Ino;

    /// A subtree that is only its name.
    struct Named(&'static str);

    impl Subtree for Named {
        fn attr(&self, _: u64) -> FsResult<NodeAttr> {
            Err(FsError::NotFound)
        }
        fn kind(&self, _: u64) -> FsResult<Kind> {
            Ok(Kind::Dir)
        }
        fn lookup(&self, _: u64, _: &[u8]) -> FsResult<Ino> {
            Err(FsError::NotFound)
        }
        fn parent(&self, _: u64) -> FsResult<Option<Ino>> {
            Ok(None)
        }
        fn readdir(&self, _: u64, _: u64, _: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
            Ok(())
        }
        fn open(&self, _: u64) -> FsResult<()> {
            Ok(())
        }
        fn read(&self, _: u64, _: u64, _: usize) -> FsResult<bytes::Bytes> {
            Ok(bytes::Bytes::copy_from_slice(self.0.as_bytes()))
        }
    }

    fn name(r: &Registry, id: u16) -> Option<Vec<u8>> {
        r.get(id)
            .map(|t| t.read(0, 0, 0).map(Vec::from).unwrap_or_default())
    }

    #[test]
    fn slots_are_reused_only_once_forgotten_with_a_new_generation() {
        let r = Registry::new();
        let fill = |name| {
            let id = r.reserve().expect("a slot");
            r.set(id, Arc::new(Named(name)));
            id
        };
        let a = fill("a");
        let b = fill("b");
        assert_eq!((a, b), (0, 1), "never-used slots in order");
        let (_, gen_a) = r.get_with_generation(a).expect("a");
        assert_eq!(gen_a, 0);
        // The kernel looks up two inodes of `a`.
        assert!(r.pin(a, gen_a));
        assert!(r.pin(a, gen_a));
        assert!(!r.release(a), "still looked up");
        r.forgot(a, 1);
        assert!(!r.release(a), "one lookup left");
        r.forgot(a, 1);
        assert_eq!(r.lookups(a), 0);
        assert!(r.release(a), "forgotten: freed");
        assert!(!r.release(a), "freed once");
        assert!(r.get(a).is_none(), "a freed slot serves nothing");
        assert!(
            !r.pin(a, gen_a),
            "an entry resolved before the free is refused"
        );
        assert_eq!(r.generation(a), 1);
        // Never-used slots come first: `a` waits until they are all taken.
        let mut taken = vec![];
        while let Some(id) = r.reserve() {
            taken.push(id);
            if id == a {
                break;
            }
        }
        assert_eq!(taken.len(), MAX_SUBTREES - 2 + 1);
        assert_eq!(taken.last(), Some(&a));
        assert_eq!(taken[0], 2);
        r.set(a, Arc::new(Named("c")));
        let (_, gen_c) = r.get_with_generation(a).expect("c");
        assert_eq!(gen_c, gen_a + 1, "the generation went up");
        assert_eq!(name(&r, a).as_deref(), Some(&b"c"[..]));
        // A stale (inode, generation) never counts against the new occupant.
        assert!(!r.pin(a, gen_a));
        assert_eq!(r.lookups(a), 0);
        assert!(r.pin(a, gen_c));
        assert_eq!(r.lookups(a), 1);
        // Forgetting more than was looked up saturates.
        r.forgot(a, 5);
        assert_eq!(r.lookups(a), 0);
        assert_eq!(r.generation(a), gen_c, "forgetting keeps the generation");
        // `b` was never freed: untouched.
        assert_eq!(name(&r, b).as_deref(), Some(&b"b"[..]));
        assert_eq!(r.generation(b), 0);
    }

    #[test]
    fn freed_slots_are_reused_oldest_first() {
        let r = Registry::new();
        while let Some(id) = r.reserve() {
            r.set(id, Arc::new(Named("x")));
        }
        for id in [7, 3, 9] {
            assert!(r.release(id));
        }
        assert_eq!(r.reserve(), Some(7));
        assert_eq!(r.reserve(), Some(3));
        assert_eq!(r.reserve(), Some(9));
        assert_eq!(r.reserve(), None);
        // A slot reserved and never filled is given back once.
        assert!(r.release(3));
        assert_eq!(r.reserve(), Some(3));
        assert!(r.release(3));
        assert!(!r.release(3), "already given back");
        assert_eq!(r.generation(3), 1, "nothing of it was handed out");
    }

    #[test]
    fn a_slot_at_its_last_generation_is_not_reused() {
        let r = Registry::new();
        while let Some(id) = r.reserve() {
            r.set(id, Arc::new(Named("x")));
        }
        let last = slot::GENERATION.max();
        let s = &r.slots[5];
        s.state.store(
            slot::GENERATION.put(last - 1).unwrap_or(0),
            Ordering::Release,
        );
        assert!(r.release(5));
        assert_eq!(r.reserve(), Some(5));
        r.set(5, Arc::new(Named("y")));
        assert_eq!(r.generation(5), last);
        assert!(r.release(5));
        assert_eq!(r.generation(5), last);
        assert_eq!(r.reserve(), None, "retired");
        assert!(!r.pin(5, last), "a free slot counts no lookup");
    }
}
