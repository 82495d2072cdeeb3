//! The BFC arena replay against a plain reference: chunks kept in one address-ordered list,
//! best fit by scanning every free chunk, neighbours merged by looking left and right in the
//! list. Random request sequences under both extend strategies, capped and not, must give the
//! same in-use bytes, peak, regions and failures at every step.

use ckpt_ir::profile::ExtendStrategy;
use ckpt_passes::arena::{rounded, ArenaConfig, BfcArena, OutOfMemory, ALIGN, DEFAULT_MAX_DEAD};
use proptest::prelude::*;

/// One chunk of the reference: address, size, held by key (None: free), region.
#[derive(Clone, Debug)]
struct Piece {
    ptr: u64,
    size: u64,
    key: Option<u64>,
    region: usize,
}

/// The reference arena.
struct Reference {
    cfg: ArenaConfig,
    next_region: u64,
    pieces: Vec<Piece>,
    regions: usize,
    reserved: u64,
    in_use: u64,
    max_in_use: u64,
}

impl Reference {
    fn new(cfg: ArenaConfig) -> Reference {
        Reference {
            cfg,
            next_region: rounded(cfg.initial_chunk.min(cfg.cap.unwrap_or(u64::MAX)).max(1)),
            pieces: Vec::new(),
            regions: 0,
            reserved: 0,
            in_use: 0,
            max_in_use: 0,
        }
    }

    /// Index of the smallest free piece of at least `r` bytes, lowest address on a tie.
    fn best(&self, r: u64) -> Option<usize> {
        (0..self.pieces.len())
            .filter(|&i| self.pieces[i].key.is_none() && self.pieces[i].size >= r)
            .min_by_key(|&i| (self.pieces[i].size, self.pieces[i].ptr))
    }

    fn grow(&mut self, r: u64) -> Result<(), OutOfMemory> {
        let left = match self.cfg.cap {
            Some(cap) => cap.saturating_sub(self.reserved) / ALIGN * ALIGN,
            None => u64::MAX,
        };
        if r > left {
            return Err(OutOfMemory {
                requested: r,
                available: left,
            });
        }
        let size = if self.cfg.extend == ExtendStrategy::SameAsRequested {
            r
        } else if r > self.next_region {
            while r > self.next_region {
                self.next_region *= 2;
            }
            self.next_region.min(left)
        } else {
            let size = self.next_region.min(left);
            self.next_region = (self.next_region * 2).min(1 << 30);
            size
        };
        // Regions far apart, each later one above the earlier ones.
        let ptr = (self.regions as u64 + 1) << 42;
        self.pieces.push(Piece {
            ptr,
            size,
            key: None,
            region: self.regions,
        });
        self.regions += 1;
        self.reserved += size;
        Ok(())
    }

    fn alloc(&mut self, key: u64, bytes: u64) -> Result<(), OutOfMemory> {
        let r = rounded(bytes.max(1));
        let i = match self.best(r) {
            Some(i) => i,
            None => {
                self.grow(r)?;
                self.best(r).expect("a new region holds the request")
            }
        };
        let rest = self.pieces[i].size - r;
        if self.pieces[i].size >= 2 * r || rest >= self.cfg.max_dead_bytes_per_chunk {
            let p = &self.pieces[i];
            let tail = Piece {
                ptr: p.ptr + r,
                size: rest,
                key: None,
                region: p.region,
            };
            self.pieces[i].size = r;
            self.pieces.insert(i + 1, tail);
        }
        self.pieces[i].key = Some(key);
        self.in_use += self.pieces[i].size;
        self.max_in_use = self.max_in_use.max(self.in_use);
        Ok(())
    }

    fn free(&mut self, key: u64) {
        let Some(mut i) = self.pieces.iter().position(|p| p.key == Some(key)) else {
            return;
        };
        self.pieces[i].key = None;
        self.in_use -= self.pieces[i].size;
        let joins =
            |a: &Piece, b: &Piece| a.region == b.region && a.key.is_none() && b.key.is_none();
        if i + 1 < self.pieces.len() && joins(&self.pieces[i], &self.pieces[i + 1]) {
            let next = self.pieces.remove(i + 1);
            self.pieces[i].size += next.size;
        }
        if i > 0 && joins(&self.pieces[i - 1], &self.pieces[i]) {
            let this = self.pieces.remove(i);
            i -= 1;
            self.pieces[i].size += this.size;
        }
    }

    fn sorted(&mut self) {
        self.pieces.sort_by_key(|p| p.ptr);
    }
}

/// (alloc?, key slot, bytes) steps; a free names a slot that may hold nothing.
fn steps() -> impl Strategy<Value = Vec<(bool, u64, u64)>> {
    prop::collection::vec(
        (
            any::<bool>(),
            0u64..24,
            prop_oneof![1u64..4096, 4096u64..(3 << 20), Just(1 << 20), Just(512)],
        ),
        1..200,
    )
}

fn config() -> impl Strategy<Value = ArenaConfig> {
    (
        prop_oneof![
            Just(ExtendStrategy::NextPowerOfTwo),
            Just(ExtendStrategy::SameAsRequested)
        ],
        prop_oneof![Just(1u64 << 20), 256u64..(8 << 20)],
        prop_oneof![Just(None), (1u64 << 20..(16 << 20)).prop_map(Some)],
        prop_oneof![Just(DEFAULT_MAX_DEAD), Just(4096u64)],
    )
        .prop_map(|(extend, initial_chunk, cap, max_dead)| ArenaConfig {
            extend,
            initial_chunk,
            max_dead_bytes_per_chunk: max_dead,
            cap,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn replay_matches_the_reference(cfg in config(), ops in steps()) {
        let mut a = BfcArena::new(cfg);
        let mut r = Reference::new(cfg);
        // A slot's current key: a freed slot takes a fresh key when it allocates again.
        let mut key = [u64::MAX; 24];
        let mut fresh = 0u64;
        for (k, &(alloc, slot, bytes)) in ops.iter().enumerate() {
            let s = slot as usize;
            if alloc && key[s] == u64::MAX {
                fresh += 1;
                let got = a.alloc(fresh, bytes);
                let want = r.alloc(fresh, bytes);
                r.sorted();
                prop_assert_eq!(got, want, "step {}", k);
                if got.is_ok() {
                    key[s] = fresh;
                }
            } else if !alloc && key[s] != u64::MAX {
                a.free(key[s]);
                r.free(key[s]);
                key[s] = u64::MAX;
            }
            prop_assert_eq!(
                (a.in_use, a.max_in_use, a.reserved),
                (r.in_use, r.max_in_use, r.reserved),
                "step {}", k
            );
        }
    }
}
