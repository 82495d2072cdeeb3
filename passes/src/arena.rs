//! ORT's BFC arena (`framework/bfc_arena.cc`), reduced to what decides the bytes a device
//! must hold: 256-byte rounding, 21 bins, best fit (smallest fitting chunk in the lowest
//! fitting bin, lowest address among equals), the split rule (split when the chunk is at least
//! twice the request or the remainder is at least `max_dead_bytes_per_chunk`), coalescing on
//! free within a region, and region growth:
//! - `kNextPowerOfTwo`: the next region starts at the initial chunk and doubles until it holds
//!   the request; when no doubling was needed the size for the following region doubles, up to
//!   1 GiB;
//! - `kSameAsRequested`: each region is the request.
//!
//! A capped arena (`max_mem`) extends by at most what is left under the cap (rounded down to
//! 256 B) and fails an allocation that does not fit in it. Regions are never merged and
//! never shrink during a session. Two numbers come out: `max_in_use` (chunk bytes handed out,
//! ORT's `MaxInUse`) and `reserved` (region bytes, ORT's `TotalAllocated`).

use std::collections::{BTreeMap, BTreeSet};

use ckpt_ir::profile::ExtendStrategy;

/// Arena allocation granularity (bytes).
pub use ckpt_ir::ort::ALLOC_ALIGN as ALIGN;

/// Round a request as ORT's arena does.
pub use ckpt_ir::ort::alloc_rounded as rounded;

/// ORT's default `max_dead_bytes_per_chunk`.
pub const DEFAULT_MAX_DEAD: u64 = 128 << 20;
/// ORT's default `max_power_of_two_extend_bytes`.
const MAX_POW2: u64 = 1 << 30;

/// The settings of one arena (`OrtArenaCfg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    pub extend: ExtendStrategy,
    pub initial_chunk: u64,
    pub max_dead_bytes_per_chunk: u64,
    /// `max_mem`: the arena never reserves more than this.
    pub cap: Option<u64>,
}

impl ArenaConfig {
    /// ORT's session default: `kNextPowerOfTwo` from 1 MiB, no cap.
    pub fn ort_default() -> ArenaConfig {
        ArenaConfig {
            extend: ExtendStrategy::NextPowerOfTwo,
            initial_chunk: 1 << 20,
            max_dead_bytes_per_chunk: DEFAULT_MAX_DEAD,
            cap: None,
        }
    }
}

/// An allocation the arena could not serve under its cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    pub requested: u64,
    pub available: u64,
}

/// A replayed BFC arena.
#[derive(Debug)]
pub struct BfcArena {
    cfg: ArenaConfig,
    next_region: u64,
    next_base: u64,
    /// ptr -> chunk
    chunks: BTreeMap<u64, Chunk>,
    /// Free chunks as (size, ptr): ORT's bins searched from the request's bin upwards, each
    /// ordered by size then address, give the smallest fitting chunk, lowest address first.
    free_set: BTreeSet<(u64, u64)>,
    ptr_of: BTreeMap<u64, u64>,
    pub in_use: u64,
    pub max_in_use: u64,
    /// Bytes of all regions.
    pub reserved: u64,
}

#[derive(Debug, Clone)]
struct Chunk {
    size: u64,
    in_use: bool,
    prev: Option<u64>,
    next: Option<u64>,
}

impl BfcArena {
    pub fn new(cfg: ArenaConfig) -> BfcArena {
        let first = rounded(cfg.initial_chunk.min(cfg.cap.unwrap_or(u64::MAX)).max(1));
        BfcArena {
            cfg,
            next_region: first,
            next_base: 1 << 40,
            chunks: BTreeMap::new(),
            free_set: BTreeSet::new(),
            ptr_of: BTreeMap::new(),
            in_use: 0,
            max_in_use: 0,
            reserved: 0,
        }
    }

    fn find(&mut self, r: u64) -> Option<u64> {
        let &(size, p) = self.free_set.range((r, 0)..).next()?;
        self.free_set.remove(&(size, p));
        if size >= 2 * r || size - r >= self.cfg.max_dead_bytes_per_chunk {
            let q = p + r;
            let next = self.chunks.get(&p).and_then(|c| c.next);
            self.chunks.insert(
                q,
                Chunk {
                    size: size - r,
                    in_use: false,
                    prev: Some(p),
                    next,
                },
            );
            self.free_set.insert((size - r, q));
            if let Some(n) = next {
                if let Some(c) = self.chunks.get_mut(&n) {
                    c.prev = Some(q);
                }
            }
            if let Some(c) = self.chunks.get_mut(&p) {
                c.next = Some(q);
                c.size = r;
            }
        }
        let c = self.chunks.get_mut(&p)?;
        c.in_use = true;
        self.in_use += c.size;
        self.max_in_use = self.max_in_use.max(self.in_use);
        Some(p)
    }

    fn extend(&mut self, r: u64) -> Result<(), OutOfMemory> {
        let available = self.cfg.cap.map_or(u64::MAX, |cap| {
            cap.saturating_sub(self.reserved) / ALIGN * ALIGN
        });
        if r > available {
            return Err(OutOfMemory {
                requested: r,
                available,
            });
        }
        let size = match self.cfg.extend {
            ExtendStrategy::SameAsRequested => r,
            ExtendStrategy::NextPowerOfTwo => {
                let mut increased = false;
                while r > self.next_region {
                    self.next_region = self.next_region.saturating_mul(2);
                    increased = true;
                }
                let size = self.next_region.min(available);
                if !increased {
                    self.next_region = if self.next_region.saturating_mul(2) < MAX_POW2 {
                        self.next_region * 2
                    } else {
                        MAX_POW2
                    };
                }
                size
            }
        };
        let base = self.next_base;
        self.next_base += size + (1 << 30);
        self.reserved += size;
        self.chunks.insert(
            base,
            Chunk {
                size,
                in_use: false,
                prev: None,
                next: None,
            },
        );
        self.free_set.insert((size, base));
        Ok(())
    }

    /// Allocate `bytes` under `key` (an id of the caller's choosing, unique while live).
    pub fn alloc(&mut self, key: u64, bytes: u64) -> Result<(), OutOfMemory> {
        let r = rounded(bytes.max(1));
        let p = match self.find(r) {
            Some(p) => p,
            None => {
                self.extend(r)?;
                match self.find(r) {
                    Some(p) => p,
                    None => return Ok(()),
                }
            }
        };
        self.ptr_of.insert(key, p);
        Ok(())
    }

    /// Free what `key` holds (nothing if it holds nothing), coalescing with free neighbours.
    pub fn free(&mut self, key: u64) {
        let Some(mut p) = self.ptr_of.remove(&key) else {
            return;
        };
        let Some(c) = self.chunks.get_mut(&p) else {
            return;
        };
        c.in_use = false;
        self.in_use -= c.size;
        // Merge the next chunk into this one, then this one into the previous.
        if let Some(n) = c.next {
            if self.chunks.get(&n).is_some_and(|c| !c.in_use) {
                self.merge_into_prev(n);
            }
        }
        if let Some(pv) = self.chunks.get(&p).and_then(|c| c.prev) {
            if self.chunks.get(&pv).is_some_and(|c| !c.in_use) {
                self.merge_into_prev(p);
                p = pv;
            }
        }
        if let Some(c) = self.chunks.get(&p) {
            self.free_set.insert((c.size, p));
        }
    }

    /// Fold free chunk `n` into its previous chunk (whose free-set entry, if any, is dropped).
    fn merge_into_prev(&mut self, n: u64) {
        let Some(c) = self.chunks.remove(&n) else {
            return;
        };
        self.free_set.remove(&(c.size, n));
        let Some(pv) = c.prev else {
            return;
        };
        if let Some(after) = c.next {
            if let Some(a) = self.chunks.get_mut(&after) {
                a.prev = Some(pv);
            }
        }
        if let Some(cp) = self.chunks.get_mut(&pv) {
            self.free_set.remove(&(cp.size, pv));
            cp.size += c.size;
            cp.next = c.next;
        }
    }

    /// Whether `key` holds memory.
    pub fn holds(&self, key: u64) -> bool {
        self.ptr_of.contains_key(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extend: ExtendStrategy, cap: Option<u64>) -> ArenaConfig {
        ArenaConfig {
            extend,
            initial_chunk: 1 << 20,
            max_dead_bytes_per_chunk: DEFAULT_MAX_DEAD,
            cap,
        }
    }

    /// Power-of-two regions: a 3 MiB request takes a fresh 4 MiB region (1 MiB doubled twice)
    /// and, unsplit (4 < 2×3), counts whole; the next region stays 4 MiB.
    #[test]
    fn power_of_two_region_counts_whole() {
        let mut a = BfcArena::new(cfg(ExtendStrategy::NextPowerOfTwo, None));
        a.alloc(1, 3 << 20).unwrap();
        assert_eq!((a.in_use, a.reserved), (4 << 20, 4 << 20));
        a.alloc(2, 100).unwrap();
        assert_eq!(a.reserved, 8 << 20);
    }

    /// `kSameAsRequested`: each region is the (rounded) request.
    #[test]
    fn same_as_requested_reserves_the_request() {
        let mut a = BfcArena::new(cfg(ExtendStrategy::SameAsRequested, None));
        a.alloc(1, 1000).unwrap();
        a.alloc(2, 3 << 20).unwrap();
        assert_eq!(a.reserved, 1024 + (3 << 20));
        a.free(1);
        // A freed 1024-B region serves a 1000-B request again: nothing new reserved.
        a.alloc(3, 900).unwrap();
        assert_eq!(a.reserved, 1024 + (3 << 20));
    }

    /// Under a cap the last power-of-two region is cut to what is left, and a request past
    /// the cap fails.
    #[test]
    fn cap_cuts_the_last_region_and_fails_past_it() {
        let mut a = BfcArena::new(cfg(ExtendStrategy::NextPowerOfTwo, Some(3 << 20)));
        a.alloc(1, 1 << 20).unwrap(); // region 1 MiB
        a.alloc(2, 1 << 20).unwrap(); // region min(2 MiB, 2 MiB left)
        assert_eq!(a.reserved, 3 << 20);
        a.free(1);
        assert_eq!(
            a.alloc(3, 2 << 20),
            Err(OutOfMemory {
                requested: 2 << 20,
                available: 0
            })
        );
    }
}
