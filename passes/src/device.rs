//! What the device must hold when ONNX Runtime runs a simulated graph for the steps of a
//! deployment profile: [`replay`] plays one run's arena requests ([`Simulation::arena_events`])
//! for every step on one persistent BFC arena, and [`device_need`] finds the smallest arena
//! cap under which every step runs — the number a ceiling is compared with.
//!
//! Rules (`docs/design/ort-internals.md`, sections 2.3 and 2.5):
//! - the arena lives as long as the session: regions reserved by one step serve the next, and
//!   never shrink;
//! - at the end of a run ORT releases every buffer it still holds (never-read values);
//! - graph outputs are allocated in the arena and handed to the caller: released before the
//!   next step ([`CallerOutputs::Released`]) or after the next step returns
//!   ([`CallerOutputs::Held`]); bound to buffers outside the arena
//!   ([`CallerOutputs::Bound`]), ORT writes them there and the arena never holds one;
//! - with the memory pattern on, the first run traces every planned buffer's allocation and
//!   release (not outputs, not kernel scratch) and places each at a best-fit offset
//!   (`mem_pattern_planner.h`); from the second run on one block of the traced extent is
//!   allocated when the run starts and freed when it ends, and the traced buffers live inside
//!   it; when the arena cannot serve the block (a cap), the run allocates tensor by tensor
//!   as without the pattern (`execution_frame.cc` catches the failed block allocation);
//! - a capped arena fails the first allocation that does not fit under the cap;
//! - a runtime that allocates initializers from the arena at load
//!   ([`ckpt_ir::ort::initializers_in_arena`], the profile's `ort_version`) takes one chunk per
//!   initializer ([`Simulation::initializer_bytes`]) before the first run and holds it for the
//!   session: those chunks count in the in-use peak and share the regions the runs use, and a
//!   cap is the steps' arena above them (as the training runner measures it: the smallest cap
//!   loading alone runs in, plus the steps' need).

use ckpt_ir::profile::{CallerOutputs, Profile};

use crate::arena::{rounded, ArenaConfig, BfcArena, Layout, OutOfMemory, DEFAULT_MAX_DEAD};
use crate::memory::{EventKind, Simulation};

/// One replay's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    /// Highest chunk bytes in use (ORT's `MaxInUse`) over all steps.
    pub in_use_peak: u64,
    /// Region bytes at the end (ORT's `TotalAllocated`): regions never shrink.
    pub reserved: u64,
    /// In-use peak of each step.
    pub step_in_use: Vec<u64>,
    /// The memory pattern's block (0 with the pattern off).
    pub pattern_block: u64,
    /// The first allocation that failed under the cap: (step, request).
    pub failed: Option<(usize, OutOfMemory)>,
    /// The index in [`Simulation::arena_events`] of that allocation (`None` when loading's
    /// chunks or the pattern block failed, or nothing did).
    pub failed_event: Option<usize>,
    /// The arena when that allocation failed: (free bytes, the largest free chunk).
    pub failed_free: Option<(u64, u64)>,
}

/// Where the arena binds ([`binding`]): between an arena the profile's steps fail in and one
/// 256 B larger that they run in, the request that fails and the arena then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The arena the steps fail in, in bytes.
    pub arena_bytes: u64,
    /// The arena 256 B larger, which they run in: at most the need [`device_need`] reports
    /// (the arena is not monotone in its cap, so a bisection between other ends can find
    /// another boundary).
    pub runs_in_bytes: u64,
    /// The step of the run whose request fails ([`crate::memory::ArenaEvent::step`]).
    pub step: usize,
    /// Which of the profile's runs (0: the first).
    pub run: usize,
    /// The request, in bytes.
    pub requested: u64,
    /// The bytes free in the arena's regions then.
    pub free: u64,
    /// The largest free chunk then: below `requested` the request fails on the arena's
    /// layout (its free bytes are not in one piece), not on what is in use.
    pub largest_free: u64,
}

/// The most bytes one run of `sim` requests at once (each request rounded as the arena rounds
/// it): no arena smaller than that runs its steps, whatever its layout.
pub fn requests_peak(sim: &Simulation, profile: &Profile) -> u64 {
    let mut held: rustc_hash::FxHashMap<u64, u64> = rustc_hash::FxHashMap::default();
    let (mut now, mut peak) = (0u64, 0u64);
    for e in sim.arena_events.iter().filter(|e| in_arena(profile, e)) {
        if e.alloc {
            let r = rounded(e.bytes.max(1));
            now += r;
            held.insert(e.key, r);
            peak = peak.max(now);
        } else if let Some(r) = held.remove(&e.key) {
            now -= r;
        }
    }
    peak
}

/// Where the profile's steps of `sim` stop running below `need`, an arena they run in (the
/// need [`device_need`] found): bisected between `need` and the largest arena below
/// [`requests_peak`] (which no layout runs in), the failing arena's first failing request and
/// the arena then. The boundary found is one of possibly several (the BFC arena is not
/// monotone in its cap), with the steps failing at its lower side and running at its upper.
/// `None` where the need is below the requests' peak (none to bisect) or where the boundary's
/// failure is loading's chunks, which no step's request decides.
pub fn binding(sim: &Simulation, profile: &Profile, need: u64) -> Option<Binding> {
    let unit = crate::arena::ALIGN;
    let mut lo = failing_end(sim, profile);
    let mut hi = need;
    if hi <= lo || fits(sim, profile, lo) {
        return None;
    }
    while hi - lo > unit {
        let mid = midpoint(lo, hi);
        if fits(sim, profile, mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let r = replay(sim, profile, Some(lo));
    let (run, oom) = r.failed?;
    let event = &sim.arena_events[r.failed_event?];
    let (free, largest_free) = r.failed_free?;
    Some(Binding {
        arena_bytes: lo,
        runs_in_bytes: hi,
        step: event.step,
        run,
        requested: oom.requested,
        free,
        largest_free,
    })
}

/// The arena the profile's session allocates from, capped at `cap`.
pub fn arena_config(profile: &Profile, cap: Option<u64>) -> ArenaConfig {
    ArenaConfig {
        extend: profile.arena_extend_strategy,
        initial_chunk: profile.initial_chunk_bytes(cap),
        max_dead_bytes_per_chunk: DEFAULT_MAX_DEAD,
        cap,
    }
}

/// The chunks the profile's runtime allocates from the arena at load and holds for the session:
/// one per initializer where [`ckpt_ir::ort::initializers_in_arena`], none otherwise.
pub fn load_chunks(sim: &Simulation, profile: &Profile) -> Vec<u64> {
    if !ckpt_ir::ort::initializers_in_arena(profile.ort_version) {
        return Vec::new();
    }
    sim.initializer_bytes
        .iter()
        .copied()
        .filter(|&b| b > 0)
        .collect()
}

/// The memory pattern's block: ORT's best-fit offset plan over the traced buffers of one run.
pub fn pattern_block(sim: &Simulation) -> u64 {
    // (key, offset, size) of the blocks live now, sorted by offset.
    let mut blocks: Vec<(u64, u64, u64)> = Vec::new();
    let mut extent = 0u64;
    for e in sim
        .arena_events
        .iter()
        .filter(|e| e.kind == EventKind::Buffer)
    {
        if !e.alloc {
            if let Some(i) = blocks.iter().position(|b| b.0 == e.key) {
                blocks.remove(i);
            }
            continue;
        }
        let size = rounded(e.bytes);
        if size == 0 {
            continue;
        }
        let mut current = 0u64;
        let mut waste = u64::MAX;
        let mut best: Option<u64> = None;
        for &(_, off, sz) in &blocks {
            if off >= current {
                let gap = off - current;
                if gap >= size && gap - size < waste {
                    waste = gap - size;
                    best = Some(current);
                }
            }
            current = current.max(off + sz);
        }
        if current < extent {
            let gap = extent - current;
            if gap >= size && gap - size < waste {
                best = Some(current);
            }
        }
        let offset = best.unwrap_or(current);
        extent = extent.max(offset + size);
        let at = blocks
            .iter()
            .position(|&(_, off, sz)| off > offset || (off >= offset && sz >= size))
            .unwrap_or(blocks.len());
        blocks.insert(at, (e.key, offset, size));
    }
    extent
}

/// Whether the profile's arena serves the request `e`: every one but a graph output bound to
/// a buffer outside the arena ([`CallerOutputs::Bound`]).
pub fn in_arena(profile: &Profile, e: &crate::memory::ArenaEvent) -> bool {
    !(profile.caller_outputs == CallerOutputs::Bound && e.kind == EventKind::Output)
}

/// Replay `profile.steps` runs of `sim` on one arena capped at `cap` (after the load-time
/// chunks of the profile's runtime, if it takes any).
pub fn replay(sim: &Simulation, profile: &Profile, cap: Option<u64>) -> Replay {
    replay_runs(sim, profile, cap, true)
}

/// [`replay`] playing every run, even one that repeats the run before it (what [`replay`]
/// is checked against).
pub fn replay_in_full(sim: &Simulation, profile: &Profile, cap: Option<u64>) -> Replay {
    replay_runs(sim, profile, cap, false)
}

fn replay_runs(sim: &Simulation, profile: &Profile, cap: Option<u64>, skip: bool) -> Replay {
    let steps = profile.steps.max(1) as usize;
    let load = load_chunks(sim, profile);
    let mut cfg = arena_config(profile, cap);
    // The cap is the steps' arena above what loading needs; loading's chunks are in the regions.
    cfg.cap = cap.map(|c| c + load.iter().map(|&b| rounded(b)).sum::<u64>());
    let mut arena = BfcArena::new(cfg);
    arena.reserve_keys(sim.arena_events.len() / 2 + load.len() + 1);
    let block = if profile.enable_mem_pattern {
        pattern_block(sim)
    } else {
        0
    };
    // Keys of run r are offset by r * span (+1 for the pattern block of that run).
    let span = sim.arena_events.iter().map(|e| e.key).max().unwrap_or(0) + 2;
    let mut step_in_use = Vec::with_capacity(steps);
    let mut held_outputs: Vec<u64> = Vec::new();
    let mut failed = None;
    let mut failed_event = None;
    let mut failed_free = None;
    let load_key = steps as u64 * span;
    for (i, &bytes) in load.iter().enumerate() {
        if let Err(oom) = arena.alloc(load_key + i as u64, bytes) {
            failed = Some((0, oom));
            failed_free = Some((arena.free_bytes(), arena.largest_free()));
            break;
        }
    }
    // With the outputs released a run leaves nothing behind, so a run whose arena, after its
    // first request, is laid out as the previous run's was after its first is that run again,
    // and so is every later one: their steps are not replayed.
    let released = skip && profile.caller_outputs != CallerOutputs::Held;
    let mut previous_start: Option<(bool, Layout)> = None;
    'runs: for run in 0..steps {
        if failed.is_some() {
            break;
        }
        let base = run as u64 * span;
        let before = arena.max_in_use;
        arena.max_in_use = arena.in_use;
        let block_key = base + span - 1;
        // A block the arena cannot serve is not used: the run allocates tensor by tensor.
        let patterned = block > 0 && run > 0 && arena.alloc(block_key, block).is_ok();
        let mut outputs = Vec::new();
        let mut allocated: Vec<u64> = Vec::new();
        let mut first = released;
        for (i, e) in sim.arena_events.iter().enumerate() {
            if (patterned && e.kind == EventKind::Buffer) || !in_arena(profile, e) {
                continue;
            }
            let key = base + e.key;
            if e.alloc {
                if let Err(oom) = arena.alloc(key, e.bytes) {
                    failed = Some((run, oom));
                    failed_event = Some(i);
                    failed_free = Some((arena.free_bytes(), arena.largest_free()));
                    step_in_use.push(arena.max_in_use);
                    arena.max_in_use = arena.max_in_use.max(before);
                    break 'runs;
                }
                if e.kind == EventKind::Output {
                    outputs.push(key);
                } else {
                    allocated.push(key);
                }
            } else {
                arena.free(key);
            }
            if std::mem::take(&mut first) {
                let start = (patterned, arena.layout());
                if previous_start.as_ref() == Some(&start) {
                    // This run and the rest repeat the previous one (which did not fail).
                    let again = step_in_use.last().copied().unwrap_or(0);
                    step_in_use.resize(steps, again);
                    arena.max_in_use = before.max(again);
                    break 'runs;
                }
                previous_start = Some(start);
            }
        }
        // The run ends: everything but the outputs is released, then the caller's old outputs.
        for key in allocated {
            arena.free(key);
        }
        if patterned {
            arena.free(block_key);
        }
        step_in_use.push(arena.max_in_use);
        arena.max_in_use = arena.max_in_use.max(before);
        match profile.caller_outputs {
            CallerOutputs::Released | CallerOutputs::Bound => {
                outputs.iter().for_each(|&k| arena.free(k))
            }
            CallerOutputs::Held => {
                held_outputs.iter().for_each(|&k| arena.free(k));
                held_outputs = outputs;
            }
        }
    }
    Replay {
        in_use_peak: arena.max_in_use,
        reserved: arena.reserved,
        step_in_use,
        pattern_block: block,
        failed,
        failed_event,
        failed_free,
    }
}

/// What the device must hold for the profile's steps, and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNeed {
    /// The smallest arena cap (a multiple of 256 B) under which every step runs, bisected from
    /// [`failing_end`] (which no layout runs in) up to the uncapped run's regions.
    pub arena_bytes: u64,
    /// The bisection's failing end ([`failing_end`]), which ONNX Runtime's bisection starts
    /// from too.
    pub failing_end: u64,
    /// The uncapped replay: in-use peak, reserved bytes, per-step peaks.
    pub uncapped: Replay,
}

/// The largest arena (a multiple of 256 B) below [`requests_peak`]: no layout runs the
/// profile's steps in it, so the need's bisection starts there, on the simulator's side and
/// on ONNX Runtime's (`ckpt_runtime::measure_need`, which verifies it with one run). The
/// uncapped run's in-use peak is no such end: its chunks hold the bytes the arena did not
/// split off (a chunk is split only where the rest is large enough), and a capped arena lays
/// the same requests out with fewer.
pub fn failing_end(sim: &Simulation, profile: &Profile) -> u64 {
    let unit = crate::arena::ALIGN;
    requests_peak(sim, profile).saturating_sub(1) / unit * unit
}

/// The cap a bisection between `lo` and `hi` (multiples of 256 B, more than 256 B apart)
/// tries next: halfway, on the 256 B grid, above `lo`.
fn midpoint(lo: u64, hi: u64) -> u64 {
    let unit = crate::arena::ALIGN;
    (lo + (hi - lo) / 2 / unit * unit).max(lo + unit)
}

/// Whether every step of the profile runs in an arena capped at `cap`.
pub fn fits(sim: &Simulation, profile: &Profile, cap: u64) -> bool {
    replay(sim, profile, Some(cap)).failed.is_none()
}

/// The smallest cap under which the profile's steps run, by bisection on the replay between
/// the in-use peak (nothing runs below it) and the uncapped reserved bytes (widened until
/// they run).
pub fn device_need(sim: &Simulation, profile: &Profile) -> DeviceNeed {
    let (need, _) = bisect(sim, profile, None, None);
    need
}

/// [`device_need`] when it is below `limit`; `None` as soon as the bisection shows it is
/// not: its answer is always above the failing end it has reached, so once that end is
/// `limit` less 256 B or more, the answer is at least `limit`. Where it answers, the answer
/// is [`device_need`]'s (the same probes, in the same order).
pub fn device_need_below(sim: &Simulation, profile: &Profile, limit: u64) -> Option<DeviceNeed> {
    match bisect(sim, profile, Some(limit), None) {
        (need, None) => Some(need),
        (_, Some(_)) => None,
    }
}

/// Whether [`device_need`] is at most `budget`, by the same probes in the same order, stopped
/// as soon as they settle it: the answer is never above the fitting end the bisection has
/// reached (that end only falls), so once that end is at or under `budget` the need is too;
/// and it is always above the failing end, as in [`device_need_below`].
pub fn device_need_within(sim: &Simulation, profile: &Profile, budget: u64) -> bool {
    match bisect(sim, profile, Some(budget.saturating_add(1)), Some(budget)) {
        (need, None) => need.arena_bytes <= budget,
        (_, Some(stop)) => stop == Stop::AtMost,
    }
}

/// Where a bounded bisection stopped before the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// Its failing end reached the limit: the need is at least the limit.
    AtLeast,
    /// Its fitting end reached the bound: the need is at most the bound.
    AtMost,
}

/// The bisection, and where it stopped early: at `limit` (the need is unknown but at least
/// `limit`) or at `within` (at most `within`); then the first value is a placeholder.
fn bisect(
    sim: &Simulation,
    profile: &Profile,
    limit: Option<u64>,
    within: Option<u64>,
) -> (DeviceNeed, Option<Stop>) {
    let uncapped = replay(sim, profile, None);
    let floor = failing_end(sim, profile);
    let reached = |lo: u64| limit.is_some_and(|l| lo.saturating_add(crate::arena::ALIGN) >= l);
    let settled = |hi: u64| within.is_some_and(|w| hi <= w);
    let stopped = |uncapped: Replay, stop: Stop| {
        let need = DeviceNeed {
            arena_bytes: limit.unwrap_or(0),
            failing_end: floor,
            uncapped,
        };
        (need, Some(stop))
    };
    // (Before the first probe where the failing end stays there: the probes only raise it.)
    if floor < rounded(uncapped.reserved) && reached(floor) {
        return stopped(uncapped, Stop::AtLeast);
    }
    let mut hi = rounded(uncapped.reserved);
    // An arena capped at its own uncapped total extends as the uncapped one did; a profile
    // whose first region is the cap may still need a little more: widen until it runs.
    let mut slack = crate::arena::ALIGN;
    while !fits(sim, profile, hi) {
        hi += slack;
        slack *= 2;
    }
    let mut lo = floor;
    if hi > 0 && lo >= hi {
        lo = hi - crate::arena::ALIGN;
    }
    if reached(lo) {
        return stopped(uncapped, Stop::AtLeast);
    }
    if settled(hi) {
        return stopped(uncapped, Stop::AtMost);
    }
    while hi - lo > crate::arena::ALIGN {
        let mid = midpoint(lo, hi);
        if fits(sim, profile, mid) {
            hi = mid;
            if settled(hi) {
                return stopped(uncapped, Stop::AtMost);
            }
        } else {
            lo = mid;
            if reached(lo) {
                return stopped(uncapped, Stop::AtLeast);
            }
        }
    }
    let over = limit.is_some_and(|l| hi >= l).then_some(Stop::AtLeast);
    (
        DeviceNeed {
            arena_bytes: hi,
            failing_end: floor,
            uncapped,
        },
        over,
    )
}
