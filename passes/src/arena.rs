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

use ckpt_ir::profile::ExtendStrategy;
use rustc_hash::FxHashMap;

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
///
/// Chunks live in a slab (indices, not addresses, link neighbours); free chunks are ordered
/// by (size, address) as ORT's bins search them. Replaying a run is the planner's inner loop,
/// so nothing here walks more than the free set's ordered range.
#[derive(Debug, Clone)]
pub struct BfcArena {
    cfg: ArenaConfig,
    next_region: u64,
    next_base: u64,
    slab: Vec<Chunk>,
    /// Slab slots of merged-away chunks, reused by the next split.
    spare: Vec<u32>,
    /// Free chunks as (size, address, slot): ORT's bins searched from the request's bin
    /// upwards, each ordered by size then address, give the smallest fitting chunk, lowest
    /// address first.
    free_set: FreeSet,
    /// Caller key -> slot of the chunk it holds.
    held: FxHashMap<u64, u32>,
    pub in_use: u64,
    pub max_in_use: u64,
    /// Bytes of all regions.
    pub reserved: u64,
}

/// No neighbour.
const NONE: u32 = u32::MAX;

/// Free chunks as (size, address, slot), in ORT's bins: bin `k` holds sizes in
/// `[256·2^k, 256·2^(k+1))` (the last bin everything above), each kept sorted by size, then
/// address. The smallest entry at or above a size is the first in its bin at or above it,
/// else the first of the next bin that holds any: ORT's best fit. Bins hold a few chunks each,
/// so a binary search and a short move in one bin are all an insert or removal costs.
#[derive(Debug, Clone, Default)]
struct FreeSet {
    bins: [Vec<(u64, u64, u32)>; BINS],
    /// Bit `k`: bin `k` holds a chunk.
    held: u32,
}

/// ORT's bin count (`kNumBins`).
const BINS: usize = 21;

fn bin_of(size: u64) -> usize {
    let units = (size >> 8).max(1);
    (63 - units.leading_zeros() as usize).min(BINS - 1)
}

impl FreeSet {
    fn insert(&mut self, e: (u64, u64, u32)) {
        let k = bin_of(e.0);
        let bin = &mut self.bins[k];
        let at = bin.partition_point(|x| *x < e);
        bin.insert(at, e);
        self.held |= 1 << k;
    }

    fn remove(&mut self, e: &(u64, u64, u32)) {
        let k = bin_of(e.0);
        let bin = &mut self.bins[k];
        if let Ok(at) = bin.binary_search(e) {
            bin.remove(at);
            if bin.is_empty() {
                self.held &= !(1 << k);
            }
        }
    }

    /// The largest free chunk's size (0 when none is free).
    fn largest(&self) -> u64 {
        match self.held {
            0 => 0,
            held => {
                let k = 31 - held.leading_zeros() as usize;
                self.bins[k].last().map_or(0, |e| e.0)
            }
        }
    }

    /// Remove and return the smallest entry of size `r` or more.
    fn take_first_from(&mut self, r: u64) -> Option<(u64, u64, u32)> {
        let k = bin_of(r);
        let bin = &self.bins[k];
        let at = bin.partition_point(|x| x.0 < r);
        let (k, at) = if at < bin.len() {
            (k, at)
        } else {
            let above = self.held & !((2u32 << k) - 1);
            if above == 0 {
                return None;
            }
            (above.trailing_zeros() as usize, 0)
        };
        let bin = &mut self.bins[k];
        let e = bin.remove(at);
        if bin.is_empty() {
            self.held &= !(1 << k);
        }
        Some(e)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    ptr: u64,
    size: u64,
    in_use: bool,
    prev: u32,
    next: u32,
}

/// The arena's layout with the caller's keys left out: (address, size, in use) of every
/// chunk by address, the regions' bytes and where the next region comes from. Two arenas
/// with equal layouts serve the same requests the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    chunks: Vec<(u64, u64, bool)>,
    next_region: u64,
    next_base: u64,
    reserved: u64,
}

impl BfcArena {
    pub fn new(cfg: ArenaConfig) -> BfcArena {
        let first = rounded(cfg.initial_chunk.min(cfg.cap.unwrap_or(u64::MAX)).max(1));
        BfcArena {
            cfg,
            next_region: first,
            next_base: 1 << 40,
            slab: Vec::new(),
            spare: Vec::new(),
            free_set: FreeSet::default(),
            held: FxHashMap::default(),
            in_use: 0,
            max_in_use: 0,
            reserved: 0,
        }
    }

    /// Make room for `n` keys held at once (a replay knows how many requests it makes).
    pub fn reserve_keys(&mut self, n: usize) {
        self.held.reserve(n);
        self.slab.reserve(n);
    }

    fn slot(&mut self, c: Chunk) -> u32 {
        match self.spare.pop() {
            Some(i) => {
                self.slab[i as usize] = c;
                i
            }
            None => {
                self.slab.push(c);
                (self.slab.len() - 1) as u32
            }
        }
    }

    fn find(&mut self, r: u64) -> Option<u32> {
        let (size, p, i) = self.free_set.take_first_from(r)?;
        if size >= 2 * r || size - r >= self.cfg.max_dead_bytes_per_chunk {
            let next = self.slab[i as usize].next;
            let q = self.slot(Chunk {
                ptr: p + r,
                size: size - r,
                in_use: false,
                prev: i,
                next,
            });
            self.free_set.insert((size - r, p + r, q));
            if next != NONE {
                self.slab[next as usize].prev = q;
            }
            let c = &mut self.slab[i as usize];
            c.next = q;
            c.size = r;
        }
        let c = &mut self.slab[i as usize];
        c.in_use = true;
        self.in_use += c.size;
        self.max_in_use = self.max_in_use.max(self.in_use);
        Some(i)
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
        let i = self.slot(Chunk {
            ptr: base,
            size,
            in_use: false,
            prev: NONE,
            next: NONE,
        });
        self.free_set.insert((size, base, i));
        Ok(())
    }

    /// Allocate `bytes` under `key` (an id of the caller's choosing, unique while live).
    pub fn alloc(&mut self, key: u64, bytes: u64) -> Result<(), OutOfMemory> {
        let r = rounded(bytes.max(1));
        let i = match self.find(r) {
            Some(i) => i,
            None => {
                self.extend(r)?;
                match self.find(r) {
                    Some(i) => i,
                    None => return Ok(()),
                }
            }
        };
        self.held.insert(key, i);
        Ok(())
    }

    /// Free what `key` holds (nothing if it holds nothing), coalescing with free neighbours.
    pub fn free(&mut self, key: u64) {
        let Some(mut i) = self.held.remove(&key) else {
            return;
        };
        let c = &mut self.slab[i as usize];
        c.in_use = false;
        self.in_use -= c.size;
        // Merge the next chunk into this one, then this one into the previous.
        let n = c.next;
        if n != NONE && !self.slab[n as usize].in_use {
            self.merge_into_prev(n);
        }
        let pv = self.slab[i as usize].prev;
        if pv != NONE && !self.slab[pv as usize].in_use {
            self.merge_into_prev(i);
            i = pv;
        }
        let c = self.slab[i as usize];
        self.free_set.insert((c.size, c.ptr, i));
    }

    /// Fold free chunk `n` into its previous chunk (whose free-set entry, if any, is dropped).
    fn merge_into_prev(&mut self, n: u32) {
        let c = self.slab[n as usize];
        self.free_set.remove(&(c.size, c.ptr, n));
        self.spare.push(n);
        let pv = c.prev;
        if pv == NONE {
            return;
        }
        if c.next != NONE {
            self.slab[c.next as usize].prev = pv;
        }
        let cp = &mut self.slab[pv as usize];
        let gone = (cp.size, cp.ptr, pv);
        cp.size += c.size;
        cp.next = c.next;
        self.free_set.remove(&gone);
    }

    /// Bytes of the regions in no chunk in use: free, though not necessarily in one piece.
    pub fn free_bytes(&self) -> u64 {
        self.reserved - self.in_use
    }

    /// The largest free chunk: the largest request the regions serve without growing.
    pub fn largest_free(&self) -> u64 {
        self.free_set.largest()
    }

    /// Whether `key` holds memory.
    pub fn holds(&self, key: u64) -> bool {
        self.held.contains_key(&key)
    }

    /// The arena's [`Layout`].
    pub fn layout(&self) -> Layout {
        let mut spare = vec![false; self.slab.len()];
        for &i in &self.spare {
            spare[i as usize] = true;
        }
        let mut chunks: Vec<(u64, u64, bool)> = self
            .slab
            .iter()
            .zip(&spare)
            .filter(|(_, &s)| !s)
            .map(|(c, _)| (c.ptr, c.size, c.in_use))
            .collect();
        chunks.sort_unstable();
        Layout {
            chunks,
            next_region: self.next_region,
            next_base: self.next_base,
            reserved: self.reserved,
        }
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

    /// Free bytes need not be in one piece: in one 4 MiB region, with the first and third
    /// MiB freed, 3 MiB are free but the largest free chunk is 2 MiB (the third MiB merges
    /// with the fourth, free from the start), so a 3 MiB request fails; freeing the second
    /// MiB merges them all.
    #[test]
    fn free_bytes_and_the_largest_free_chunk() {
        let mut a = BfcArena::new(ArenaConfig {
            initial_chunk: 4 << 20,
            ..cfg(ExtendStrategy::NextPowerOfTwo, Some(4 << 20))
        });
        assert_eq!((a.free_bytes(), a.largest_free()), (0, 0));
        for k in 1..=3 {
            a.alloc(k, 1 << 20).unwrap();
        }
        assert_eq!((a.free_bytes(), a.largest_free()), (1 << 20, 1 << 20));
        a.free(1);
        a.free(3);
        assert_eq!((a.free_bytes(), a.largest_free()), (3 << 20, 2 << 20));
        assert!(a.alloc(4, 3 << 20).is_err());
        a.free(2);
        assert_eq!((a.free_bytes(), a.largest_free()), (4 << 20, 4 << 20));
    }
}
