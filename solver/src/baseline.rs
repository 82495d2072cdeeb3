//! Baselines with the solver signature: no recompute, recompute all, per
//! block (Chen's √n checkpointing), greedy, and brute force (exact, tiny).
//!
//! Each returns a plan only if it fits the ceiling; a heuristic whose plan
//! does not fit returns [`SolveError::DoesNotFit`], and only the exact
//! methods return [`SolveError::Infeasible`].

use std::collections::HashMap;
use std::time::Instant;

use crate::problem::{evaluate_in, RematOrder};
use crate::{evaluate, Evaluation, Method, Plan, Problem, SolveError, Status};

/// Largest problem [`solve_brute_force`] accepts.
pub const BRUTE_FORCE_LIMIT: usize = 20;

/// The schedule as it is, if it fits.
pub fn solve_none(problem: &Problem) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    let set = vec![false; problem.candidates.len()];
    finish(problem, set, Method::NoRecompute, start)
}

/// Recompute every candidate.
pub fn solve_all(problem: &Problem) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    let set = vec![true; problem.candidates.len()];
    finish(problem, set, Method::RecomputeAll, start)
}

/// Keep the first candidate (lowest index) of each block, recompute the rest.
/// Candidates without a block are kept when any candidate has one; when none
/// has, every ⌈√n⌉-th candidate (0, k, 2k, …) is kept.
pub fn solve_per_block(problem: &Problem) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    let set = per_block_set(problem);
    finish(problem, set, Method::PerBlock, start)
}

/// The per-block strategy's recompute set, whatever the ceiling: keep the first candidate of
/// each block (or every ⌈√n⌉-th candidate when there are no blocks), recompute the rest.
pub fn per_block_set(problem: &Problem) -> Vec<bool> {
    let cands = &problem.candidates;
    let n = cands.len();
    if cands.iter().any(|c| c.block.is_some()) {
        let mut first: HashMap<u32, usize> = HashMap::new();
        for (i, c) in cands.iter().enumerate() {
            if let Some(b) = c.block {
                first.entry(b).or_insert(i);
            }
        }
        cands
            .iter()
            .enumerate()
            .map(|(i, c)| c.block.is_some_and(|b| first[&b] != i))
            .collect()
    } else {
        let k = (n as f64).sqrt().ceil().max(1.0) as usize;
        (0..n).map(|i| i % k != 0).collect()
    }
}

/// Peak-directed greedy: while the peak exceeds the ceiling, recompute the
/// candidate with the most bytes per FLOP among those absent-able at the peak
/// step (window covers it) whose addition lowers live bytes there without
/// raising the peak; then drop recomputes that became unnecessary, most
/// expensive first.
pub fn solve_greedy(problem: &Problem) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    match greedy_set(problem) {
        Ok(set) => finish(problem, set, Method::Greedy, start),
        Err(lowest) => Err(SolveError::DoesNotFit {
            method: Method::Greedy,
            ceiling: problem.ceiling,
            peak: lowest.peak,
            at_step: lowest.peak_step,
        }),
    }
}

/// The greedy recompute set, or the lowest-peak evaluation it reached.
pub(crate) fn greedy_set(problem: &Problem) -> Result<Vec<bool>, Evaluation> {
    let cands = &problem.candidates;
    let n = cands.len();
    let ceiling = problem.ceiling;
    let mut set = vec![false; n];
    let remat_order = RematOrder::of(problem);
    let evaluate = |set: &[bool]| evaluate_in(problem, &remat_order, set);
    let mut eval = evaluate(&set);
    let mut best = eval.clone();
    let mut order: Vec<usize> = (0..n).filter(|&i| cands[i].bytes > 0).collect();
    // Bytes per FLOP, descending; ties by index. Compare b_i/c_i via cross products.
    order.sort_by(|&a, &b| {
        let (ca, cb) = (cands[a].cost.max(1) as u128, cands[b].cost.max(1) as u128);
        (cands[b].bytes as u128 * ca)
            .cmp(&(cands[a].bytes as u128 * cb))
            .then(a.cmp(&b))
    });
    let mut rejected = vec![false; n];
    let mut rejected_at = usize::MAX;
    while !eval.fits(ceiling) {
        let t = eval.peak_step;
        if rejected_at != t {
            rejected.iter_mut().for_each(|r| *r = false);
            rejected_at = t;
        }
        let mut added = false;
        for &i in &order {
            let c = &cands[i];
            if set[i] || rejected[i] || !(c.free_from <= t && t < c.needed_at) {
                continue;
            }
            set[i] = true;
            let next = evaluate(&set);
            if next.peak <= eval.peak && next.live[t] < eval.live[t] {
                eval = next;
                added = true;
                break;
            }
            set[i] = false;
            rejected[i] = true;
        }
        if eval.peak < best.peak {
            best = eval.clone();
        }
        if !added {
            return Err(best);
        }
    }
    // Drop what became unnecessary, most expensive first.
    let mut chosen: Vec<usize> = (0..n).filter(|&i| set[i]).collect();
    chosen.sort_by(|&a, &b| cands[b].cost.cmp(&cands[a].cost).then(a.cmp(&b)));
    for i in chosen {
        set[i] = false;
        if !evaluate(&set).fits(ceiling) {
            set[i] = true;
        }
    }
    Ok(set)
}

/// Every subset; exact. Ties in cost go to the lower peak, then the subset
/// that is smaller as a bit mask.
pub fn solve_brute_force(problem: &Problem) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    let n = problem.candidates.len();
    if n > BRUTE_FORCE_LIMIT {
        return Err(SolveError::TooLarge {
            candidates: n,
            limit: BRUTE_FORCE_LIMIT,
        });
    }
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    let mut best: Option<(u64, u64, Vec<bool>)> = None;
    let mut lowest: Option<Evaluation> = None;
    let remat_order = RematOrder::of(problem);
    for mask in 0u32..(1u32 << n) {
        let set: Vec<bool> = (0..n).map(|i| mask >> i & 1 == 1).collect();
        let e = evaluate_in(problem, &remat_order, &set);
        if lowest.as_ref().is_none_or(|l| e.peak < l.peak) {
            lowest = Some(e.clone());
        }
        if e.fits(problem.ceiling) && best.as_ref().is_none_or(|b| (e.cost, e.peak) < (b.0, b.1)) {
            best = Some((e.cost, e.peak, set));
        }
    }
    match best {
        Some((_, _, set)) => {
            let e = evaluate(problem, &set);
            Ok(Plan::from_evaluation(
                set,
                e,
                Method::BruteForce,
                Status::Optimal,
                0.0,
                start.elapsed(),
            ))
        }
        None => {
            let l = lowest.unwrap_or_else(|| evaluate(problem, &[]));
            Err(SolveError::Infeasible {
                ceiling: problem.ceiling,
                lowest_peak: l.peak,
                at_step: l.peak_step,
            })
        }
    }
}

pub(crate) fn no_recompute_needed(problem: &Problem, start: Instant) -> Option<Plan> {
    let set = vec![false; problem.candidates.len()];
    let e = evaluate(problem, &set);
    e.fits(problem.ceiling).then(|| {
        Plan::from_evaluation(
            set,
            e,
            Method::NoRecompute,
            Status::NoRecomputeNeeded,
            0.0,
            start.elapsed(),
        )
    })
}

fn finish(
    problem: &Problem,
    set: Vec<bool>,
    method: Method,
    start: Instant,
) -> Result<Plan, SolveError> {
    let e = evaluate(problem, &set);
    if !e.fits(problem.ceiling) {
        return Err(SolveError::DoesNotFit {
            method,
            ceiling: problem.ceiling,
            peak: e.peak,
            at_step: e.peak_step,
        });
    }
    let status = if e.cost == 0 && set.iter().all(|&s| !s) {
        Status::NoRecomputeNeeded
    } else {
        Status::Heuristic
    };
    Ok(Plan::from_evaluation(
        set,
        e,
        method,
        status,
        0.0,
        start.elapsed(),
    ))
}

/// The lowest peak among cheap candidates for it: no recompute, recompute
/// all, and where the greedy got stuck.
pub(crate) fn lowest_peak(problem: &Problem) -> Evaluation {
    let n = problem.candidates.len();
    let mut best = evaluate(problem, &vec![false; n]);
    let all = evaluate(problem, &vec![true; n]);
    if all.peak < best.peak {
        best = all;
    }
    let g = match greedy_set(problem) {
        Ok(set) => evaluate(problem, &set),
        Err(e) => e,
    };
    if g.peak < best.peak {
        best = g;
    }
    best
}
