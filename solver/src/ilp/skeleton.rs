//! The compressed problem the ILP's every round shares: time cut into
//! segments at event steps, the memory rows that can be violated, which
//! candidates get a binary, and the scaled bytes and costs. Nothing here
//! depends on the rounds' depths; [`Skeleton::deepen`] decides them.

use std::collections::{BTreeSet, VecDeque};

use crate::problem::{clean_deps, dependents, topological_order};
use crate::{Candidate, Evaluation, Problem};

/// One memory row: `absent bytes - landing transients >= excess` (scaled).
pub(super) struct Row {
    /// `(base - ceiling) / unit`.
    pub(super) excess: f64,
    pub(super) seg: usize,
    /// Candidates whose window covers the segment.
    pub(super) covering: Vec<usize>,
    /// Candidates whose transient may land at the segment's first step.
    pub(super) transients: Vec<usize>,
}

/// Everything about the compressed problem that does not depend on depth.
pub(super) struct Skeleton {
    pub(super) bytes: Vec<f64>,
    pub(super) transient: Vec<f64>,
    pub(super) cost: Vec<f64>,
    pub(super) cost_unit: f64,
    pub(super) ceiling: u64,
    /// Candidates that get a binary (the others are fixed to 0).
    pub(super) useful: Vec<bool>,
    pub(super) seg_start: Vec<usize>,
    pub(super) seg_end: Vec<usize>,
    pub(super) needed_at: Vec<usize>,
    pub(super) rmin: Vec<usize>,
    pub(super) deps: Vec<Vec<usize>>,
    pub(super) dependents: Vec<Vec<usize>>,
    /// Position in a deps-first topological order.
    pub(super) topo_pos: Vec<usize>,
    pub(super) rows: Vec<Row>,
    /// Segments with at least one row.
    pub(super) kept: Vec<usize>,
    /// Segments whose rows read transients (and so `p` at the segment before).
    pub(super) reads_before: Vec<bool>,
}

impl Skeleton {
    pub(super) fn build(problem: &Problem, relative_gap: f64) -> Skeleton {
        let cands = &problem.candidates;
        let n = cands.len();
        let dependents = dependents(cands);
        let order = topological_order(cands);
        let mut topo_pos = vec![0; n];
        for (pos, &i) in order.iter().enumerate() {
            topo_pos[i] = pos;
        }
        let deps: Vec<Vec<usize>> = (0..n).map(|k| clean_deps(cands, k)).collect();
        let rmin = earliest_remat(cands, &order, &dependents);
        let (seg_start, seg_end) = cut_segments(cands, problem.steps());
        let may_land = landing_transients(cands, &rmin, &seg_start);
        let rows = memory_rows(problem, &seg_start, &seg_end, &may_land);
        let useful = mark_useful(cands, &rows, &order, &deps);
        let mut kept: Vec<usize> = rows.iter().map(|r| r.seg).collect();
        kept.dedup();
        let mut reads_before = vec![false; seg_start.len()];
        for row in &rows {
            reads_before[row.seg] |= !row.transients.is_empty() && row.seg > 0;
        }
        let unit = byte_unit(cands);
        let cost_unit = cost_unit(cands, relative_gap);
        Skeleton {
            bytes: cands.iter().map(|c| c.bytes as f64 / unit).collect(),
            transient: cands.iter().map(|c| c.transient as f64 / unit).collect(),
            cost: cands
                .iter()
                .map(|c| (c.cost as f64 / cost_unit).floor())
                .collect(),
            cost_unit,
            ceiling: problem.ceiling,
            useful,
            seg_start,
            seg_end,
            needed_at: cands.iter().map(|c| c.needed_at).collect(),
            rmin,
            deps,
            dependents,
            topo_pos,
            rows,
            kept,
            reads_before,
        }
    }

    /// Dependency distance, up to `limit`, from each candidate not yet needed
    /// at segment `s` to the frontier (candidates with `needed_at <= start_s`).
    pub(super) fn distances(&self, s: usize, limit: usize) -> Vec<(usize, usize)> {
        let e = self.seg_start[s];
        let n = self.needed_at.len();
        let mut dist = vec![usize::MAX; n];
        let mut queue = VecDeque::new();
        for (k, d) in dist.iter_mut().enumerate() {
            if self.needed_at[k] <= e {
                *d = 0;
                queue.push_back(k);
            }
        }
        let mut out = Vec::new();
        while let Some(k) = queue.pop_front() {
            if dist[k] >= limit {
                continue;
            }
            for &i in &self.deps[k] {
                if dist[i] == usize::MAX {
                    dist[i] = dist[k] + 1;
                    out.push((i, dist[i]));
                    queue.push_back(i);
                }
            }
        }
        out
    }

    /// Raises the depth of every kept segment whose steps the evaluated
    /// answer violates to cover the chains it used. False if none could be
    /// raised (the violated rows were already exact).
    pub(super) fn deepen(&self, depth: &mut [usize], e: &Evaluation) -> bool {
        let n = self.needed_at.len();
        let mut changed = false;
        for &s in &self.kept {
            let violated = (self.seg_start[s]..self.seg_end[s]).any(|t| e.live[t] > self.ceiling);
            if !violated || depth[s] >= n {
                continue;
            }
            let mut needed = 0;
            for seg in [Some(s), s.checked_sub(1)].into_iter().flatten() {
                let start = self.seg_start[seg];
                for (i, d) in self.distances(seg, n) {
                    if e.remat_at[i].is_some_and(|r| r <= start) {
                        needed = needed.max(d);
                    }
                }
            }
            depth[s] = needed.max(2 * depth[s]).max(1).min(n);
            changed = true;
        }
        changed
    }
}

/// `rmin_i`: the earliest step `i` can be back, the earliest `needed_at`
/// among `i` and everything that depends on it (dependents first).
fn earliest_remat(cands: &[Candidate], order: &[usize], dependents: &[Vec<usize>]) -> Vec<usize> {
    let mut rmin: Vec<usize> = cands.iter().map(|c| c.needed_at).collect();
    for &i in order.iter().rev() {
        for &k in &dependents[i] {
            rmin[i] = rmin[i].min(rmin[k]);
        }
    }
    rmin
}

/// Cuts `0..t_len` at every event step (0, each `free_from`, each
/// `needed_at`): the segments' first steps and their ends (exclusive).
fn cut_segments(cands: &[Candidate], t_len: usize) -> (Vec<usize>, Vec<usize>) {
    let mut events: Vec<usize> = vec![0];
    for c in cands {
        events.push(c.free_from);
        events.push(c.needed_at);
    }
    events.retain(|&e| e < t_len);
    events.sort_unstable();
    events.dedup();
    let seg_count = events.len();
    let seg_end: Vec<usize> = (0..seg_count)
        .map(|s| {
            if s + 1 < seg_count {
                events[s + 1]
            } else {
                t_len
            }
        })
        .collect();
    (events, seg_end)
}

/// The segment holding `step`, given the segments' first steps.
fn segment_of(seg_start: &[usize], step: usize) -> usize {
    seg_start.partition_point(|&e| e <= step).saturating_sub(1)
}

/// Per segment, the candidates whose transient may land at its first step
/// `e`: `rmin_i <= e <= needed_at_i` and `e` is some `needed_at`.
fn landing_transients(cands: &[Candidate], rmin: &[usize], seg_start: &[usize]) -> Vec<Vec<usize>> {
    let is_needed: BTreeSet<usize> = cands.iter().map(|c| c.needed_at).collect();
    let mut may_land: Vec<Vec<usize>> = vec![Vec::new(); seg_start.len()];
    for (i, c) in cands.iter().enumerate() {
        if c.transient == 0 {
            continue;
        }
        for (s, &e) in seg_start
            .iter()
            .enumerate()
            .skip(segment_of(seg_start, rmin[i]))
        {
            if e > c.needed_at {
                break;
            }
            if is_needed.contains(&e) {
                may_land[s].push(i);
            }
        }
    }
    may_land
}

/// The unit rows are scaled by: the largest byte count (bytes or transient).
fn byte_unit(cands: &[Candidate]) -> f64 {
    cands
        .iter()
        .map(|c| c.bytes.max(c.transient))
        .max()
        .unwrap_or(1)
        .max(1) as f64
}

/// The rows that can be violated: per segment, one at its first step (where
/// transients land) and one for the largest base of the rest, merged when no
/// transient can land, dropped when they stay under the ceiling.
fn memory_rows(
    problem: &Problem,
    seg_start: &[usize],
    seg_end: &[usize],
    may_land: &[Vec<usize>],
) -> Vec<Row> {
    let cands = &problem.candidates;
    let ceiling = problem.ceiling;
    let seg_count = seg_start.len();
    let mut opens: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
    let mut closes: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
    for (i, c) in cands.iter().enumerate() {
        if c.free_from < c.needed_at && c.bytes > 0 {
            opens[segment_of(seg_start, c.free_from)].push(i);
            closes[segment_of(seg_start, c.needed_at)].push(i);
        }
    }

    let unit = byte_unit(cands);
    let excess = |b: u64| (b as f64 - ceiling as f64) / unit;
    let mut rows = Vec::new();
    let mut active: BTreeSet<usize> = BTreeSet::new();
    for s in 0..seg_count {
        for &i in &closes[s] {
            active.remove(&i);
        }
        active.extend(opens[s].iter().copied());
        let base = problem.base_live[seg_start[s]];
        let interior = (seg_start[s] + 1..seg_end[s])
            .map(|t| problem.base_live[t])
            .max()
            .unwrap_or(0);
        let max_transient: u64 = may_land[s].iter().map(|&i| cands[i].transient).sum();
        let event_hot = base.saturating_add(max_transient) > ceiling;
        let interior_hot = interior > ceiling;
        let covering: Vec<usize> = active.iter().copied().collect();
        if event_hot && may_land[s].is_empty() {
            rows.push(Row {
                excess: excess(base.max(interior)),
                seg: s,
                covering,
                transients: vec![],
            });
        } else {
            if interior_hot && (!event_hot || interior > base) {
                rows.push(Row {
                    excess: excess(interior),
                    seg: s,
                    covering: covering.clone(),
                    transients: vec![],
                });
            }
            if event_hot {
                rows.push(Row {
                    excess: excess(base),
                    seg: s,
                    covering,
                    transients: may_land[s].clone(),
                });
            }
        }
    }
    rows
}

/// The candidates that get a binary: those covering a row, and those whose
/// recompute pulls a transient-carrying dep away from a hot step.
fn mark_useful(
    cands: &[Candidate],
    rows: &[Row],
    order: &[usize],
    deps: &[Vec<usize>],
) -> Vec<bool> {
    let n = cands.len();
    let mut useful = vec![false; n];
    for row in rows {
        for &i in &row.covering {
            useful[i] = true;
        }
    }
    // A candidate that covers no row can still help: recomputing it pulls its deps back
    // earlier, and with them their transients, away from a hot step (free when it costs
    // nothing). So a dependent of a useful candidate whose rematerialisation carries a
    // transient (its own or a useful dep's) is useful too. `order` has deps first.
    let mut pulls = vec![false; n];
    for &i in order {
        pulls[i] = useful[i] && (cands[i].transient > 0 || deps[i].iter().any(|&d| pulls[d]));
        if !useful[i] && deps[i].iter().any(|&d| pulls[d]) {
            useful[i] = true;
            pulls[i] = true;
        }
    }
    useful
}

/// The objective's unit, in FLOPs: the costs' gcd, so the objective is
/// integral and CBC can stop as soon as the gap is below one unit. When a
/// relative gap is allowed, the unit is at least a millionth of that gap
/// times the largest cost and costs are rounded down to it: the objective
/// spans fewer orders of magnitude (a 1-FLOP move beside 10^10-FLOP matmuls
/// left CBC unable to close the gap), CBC's bound stays a bound, and the
/// plan's real cost is re-evaluated after.
fn cost_unit(cands: &[Candidate], relative_gap: f64) -> f64 {
    let exact = cands.iter().map(|c| c.cost).fold(0, gcd).max(1);
    let coarse = if relative_gap > 0.0 {
        let max = cands.iter().map(|c| c.cost).max().unwrap_or(0) as f64;
        (max * relative_gap * 1e-6).floor() as u64
    } else {
        0
    };
    exact.max(coarse) as f64
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
