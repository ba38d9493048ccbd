//! Inode numbers and readdir cookies: the bit layouts, each written once as a table of fields
//! whose shifts follow from the field before, with compile-time checks that they fill exactly
//! 64 bits. Nothing else in the crate shifts or masks an inode number.
//!
//! ```text
//! inode   = subtree:12 | local:52
//!           subtree 0 is the mount's fixed nodes (root = 1), or a live directory's root;
//!           subtree s > 0 is slot s of the registry (`fs::registry`), holding one subtree
//!           instance (a checkpoint's variables, a meta graph, ...)
//! local   = the subtree's own layout, one of:
//!   keyspace node (checkpoint variables):   view:2 | file:3 | depth:7 | pos:40
//!   graph node (a meta graph's names):      space:18 | file:3 | depth:6 | index:25
//! cookie  = 3 + (pos:61 | sub:3)     (cookies 1 and 2 are `.` and `..`)
//! slot    = generation:23 | free:1 | lookups:40     (a registry slot's state, not an inode)
//! ```
//!
//! Slots are reused: in a live directory, the slots of a pruned checkpoint are freed once the
//! kernel has forgotten every inode in them (FUSE FORGET), and handed out again (never-used
//! slots first, then the one freed longest ago). Each free increments the slot's
//! *generation*, which goes with every inode number given to the kernel (the FUSE entry
//! generation), so `(inode, generation)` names one node over the life of the mount; an entry
//! resolved in one generation is never handed out in another (see `fs::registry`). The
//! generation is not a field of the inode number: all 64 bits are taken (`pos` is an index
//! position, block:23 | entry:17, and a smaller `subtree` would lower the number of
//! checkpoints a snapshot mount can show), and the kernel never sends an inode number it
//! holds no lookup of, which is what freeing waits for.

/// One bit field of a packed `u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) shift: u32,
    pub(crate) bits: u32,
}

impl Field {
    /// The top field of a layout `total` bits wide.
    pub(crate) const fn top(total: u32, bits: u32) -> Field {
        Field {
            shift: total - bits,
            bits,
        }
    }

    /// The field right below `self` (a compile error if it does not fit).
    pub(crate) const fn then(self, bits: u32) -> Field {
        Field {
            shift: self.shift - bits,
            bits,
        }
    }

    pub(crate) const fn max(self) -> u64 {
        if self.bits == 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }

    pub(crate) const fn get(self, v: u64) -> u64 {
        (v >> self.shift) & self.max()
    }

    /// `x` in place, or `None` if it does not fit.
    pub(crate) const fn put(self, x: u64) -> Option<u64> {
        if x <= self.max() {
            Some(x << self.shift)
        } else {
            None
        }
    }
}

/// Inode = subtree | local.
pub(crate) const SUBTREE: Field = Field::top(64, 12);
pub(crate) const LOCAL: Field = SUBTREE.then(52);
const _: () = assert!(LOCAL.shift == 0);

/// An inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Ino(pub(crate) u64);

/// The mount root (a fixed node).
pub(crate) const ROOT: Ino = Ino(1);

impl Ino {
    pub(crate) fn new(subtree: u16, local: u64) -> Option<Ino> {
        Some(Ino(SUBTREE.put(subtree as u64)? | LOCAL.put(local)?))
    }

    pub(crate) fn subtree(self) -> u16 {
        SUBTREE.get(self.0) as u16
    }

    pub(crate) fn local(self) -> u64 {
        LOCAL.get(self.0)
    }
}

/// Most subtree instances a mount can hold at once (subtree 0 is the fixed nodes).
pub(crate) const MAX_SUBTREES: usize = SUBTREE.max() as usize;

/// The state of a registry slot (see `fs::registry`): its generation, whether it holds no
/// subtree, and the lookups the kernel holds on its inodes.
pub(crate) mod slot {
    use super::Field;
    pub(crate) const GENERATION: Field = Field::top(64, 23);
    pub(crate) const FREE: Field = GENERATION.then(1);
    pub(crate) const LOOKUPS: Field = FREE.then(40);
    const _: () = assert!(LOOKUPS.shift == 0);
}

/// Local layout of a key-space node (checkpoint variables and the views that mirror them).
pub(crate) mod keyspace {
    use super::{Field, LOCAL};
    pub(crate) const VIEW: Field = Field::top(LOCAL.bits, 2);
    pub(crate) const FILE: Field = VIEW.then(3);
    pub(crate) const DEPTH: Field = FILE.then(7);
    pub(crate) const POS: Field = DEPTH.then(40);
    const _: () = assert!(POS.shift == 0);
}

/// Local layout of a graph node (one meta graph's name spaces).
pub(crate) mod graph {
    use super::{Field, LOCAL};
    pub(crate) const SPACE: Field = Field::top(LOCAL.bits, 18);
    pub(crate) const FILE: Field = SPACE.then(3);
    pub(crate) const DEPTH: Field = FILE.then(6);
    pub(crate) const INDEX: Field = DEPTH.then(25);
    const _: () = assert!(INDEX.shift == 0);
}

/// Local layout of a `names/` node (`fs::names`): a directory (`LEAF` 0, `INDEX` its number
/// from 1), or one file of a leaf (`LEAF` 1, `FILE` its kind, `INDEX` the leaf's number).
pub(crate) mod names {
    use super::{Field, LOCAL};
    pub(crate) const LEAF: Field = Field::top(LOCAL.bits, 1);
    pub(crate) const FILE: Field = LEAF.then(3);
    pub(crate) const INDEX: Field = FILE.then(48);
    const _: () = assert!(INDEX.shift == 0);
}

/// A readdir cookie: where to continue after an entry. Cookies below [`cookie::BASE`] are the
/// start, `.` and `..`.
pub(crate) mod cookie {
    use super::Field;
    pub(crate) const BASE: u64 = 3;
    pub(crate) const POS: Field = Field::top(61, 61);
    pub(crate) const SUB: Field = Field::top(3, 3);
    const _: () = assert!(SUB.shift == 0 && POS.shift == 0);

    /// The cookie of sub-entry `sub` (0..7) of the item at `pos`.
    pub(crate) fn of(pos: u64, sub: u64) -> Option<u64> {
        let v = POS.put(pos)?.checked_shl(SUB.bits)? | SUB.put(sub)?;
        v.checked_add(BASE)
    }

    /// `(pos, sub)` of a cookie at or above `BASE`.
    pub(crate) fn split(c: u64) -> (u64, u64) {
        let v = c - BASE;
        (v >> SUB.bits, SUB.get(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_fill_their_width() {
        assert_eq!(SUBTREE.bits + LOCAL.bits, 64);
        assert_eq!(
            keyspace::VIEW.bits + keyspace::FILE.bits + keyspace::DEPTH.bits + keyspace::POS.bits,
            LOCAL.bits
        );
        assert_eq!(
            slot::GENERATION.bits + slot::FREE.bits + slot::LOOKUPS.bits,
            64
        );
        assert_eq!(
            names::LEAF.bits + names::FILE.bits + names::INDEX.bits,
            LOCAL.bits
        );
        assert_eq!(
            graph::SPACE.bits + graph::FILE.bits + graph::DEPTH.bits + graph::INDEX.bits,
            LOCAL.bits
        );
    }

    #[test]
    fn inode_and_cookie_roundtrip() {
        for (s, l) in [(0u16, 1u64), (1, 0), (4095, LOCAL.max()), (7, 12345)] {
            let i = Ino::new(s, l).unwrap();
            assert_eq!((i.subtree(), i.local()), (s, l));
        }
        assert_eq!(Ino::new(4096, 0), None);
        assert_eq!(Ino::new(0, 1 << 52), None);
        for (p, s) in [(0u64, 0u64), (5, 7), (keyspace::POS.max(), 3)] {
            assert_eq!(cookie::split(cookie::of(p, s).unwrap()), (p, s));
        }
        assert_eq!(cookie::of(0, 8), None);
        assert!(cookie::of(0, 0).unwrap() >= cookie::BASE);
    }
}
