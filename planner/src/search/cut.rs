//! The search's last stage: cut the FLOPs of a plan that fits. Drop the recomputes the fit
//! does not need, the most expensive first, then swap each remaining one (most expensive
//! first) for a cheaper unchosen candidate ([`swap_candidates`]) that keeps the plan under
//! the ceiling.
//!
//! Invariants: every drop and swap is judged by the oracle, in order, a core's worth at a
//! time (after a kept change, the rest of the batch is judged again), so the plan and its
//! trial count are one thread's; a change not judged when the clock passes or the trial
//! budget is spent is not made (the plan still fits), and the cut stops there.

use ckpt_solver::{Plan, Problem};

use super::{ratio, Run};
use crate::oracle::{plan_from_set, Oracle};
use crate::par::Budget;
use crate::trace::Event;
use crate::PlanError;

/// How many cheaper candidates the final pass tries in place of each expensive recompute.
const SWAP_WIDTH: usize = 16;

/// Cut `plan` (see the module doc), counting the trials in `trials`.
pub(super) fn cut<O: Oracle>(
    run: &Run<O>,
    mut plan: Plan,
    trials: &mut usize,
) -> Result<Plan, PlanError> {
    let (prob, so) = (run.input.problem, run.so);
    let mut chosen: Vec<usize> = (0..plan.recompute.len())
        .filter(|&i| plan.recompute[i])
        .collect();
    chosen.sort_by_key(|&i| (std::cmp::Reverse(prob.candidates[i].cost), i));
    let budget = Budget {
        threads: run.threads(),
        clock: run.clock,
        max_trials: so.max_trials,
    };
    let mut next = 0;
    while next < chosen.len() {
        let (judged, kept) = first_fit(&budget, run, &chosen[next..], trials, |i| {
            let mut trial = plan.recompute.clone();
            trial[i] = false;
            trial
        })?;
        next += judged;
        match kept {
            Some(p) => plan = p,
            None => break,
        }
    }
    so.emit(|| Event::DropsDone {
        at: so.at(),
        trials: *trials,
        cost: plan.cost,
    });
    for &i in &chosen {
        // Swapping a recompute that costs under 1% of the plan cannot gain much, nor can
        // any swap in a plan that adds under 0.1% of a step.
        if !plan.recompute[i]
            || prob.candidates[i].cost.saturating_mul(100) < plan.cost
            || (plan.cost as f64) < run.cost_floor()
        {
            continue;
        }
        let mut without = plan.recompute.clone();
        without[i] = false;
        let cheaper = swap_candidates(prob, &plan.recompute, i);
        let (_, swapped) = first_fit(&budget, run, &cheaper, trials, |j| {
            let mut trial = without.clone();
            trial[j] = true;
            trial
        })?;
        if let Some(p) = swapped {
            plan = p;
        }
    }
    so.emit(|| Event::SwapsDone {
        at: so.at(),
        trials: *trials,
        cost: plan.cost,
    });
    Ok(plan)
}

/// The first of `items` whose set (`set_for`) fits the ceiling under the oracle, as a plan,
/// with the number of items judged up to it ([`Budget::first_kept`]).
fn first_fit<O: Oracle>(
    budget: &Budget,
    run: &Run<O>,
    items: &[usize],
    trials: &mut usize,
    set_for: impl Fn(usize) -> Vec<bool> + Sync,
) -> Result<(usize, Option<Plan>), PlanError> {
    let (prob, effective) = (run.input.problem, run.input.effective);
    budget.first_kept(items, trials, |i| {
        let trial = set_for(i);
        run.oracle
            .fits(&trial, effective)
            .map(|fits| fits.then(|| plan_from_set(prob, trial)))
    })
}

/// The candidates `i` (recomputed in `set`) may be swapped for, best first (by [`ratio`]), at
/// most [`SWAP_WIDTH`]: unchosen and cheaper. (Filters that rule partners out by the linear
/// model lose swaps ORT's allocator allows: that a partner's bytes cover what the run
/// without `i` is over the ceiling lost the best swap of the 2-layer GPT-2 at 95% — a
/// dropped buffer can also end a reuse chain — and that its window holds that run's peak
/// lost the 2-layer Llama's at 70%.)
pub(crate) fn swap_candidates(prob: &Problem, set: &[bool], i: usize) -> Vec<usize> {
    let mut cheaper: Vec<usize> = (0..set.len())
        .filter(|&j| !set[j] && prob.candidates[j].cost < prob.candidates[i].cost)
        .collect();
    cheaper.sort_by(|&x, &y| {
        ratio(&prob.candidates[y])
            .total_cmp(&ratio(&prob.candidates[x]))
            .then(x.cmp(&y))
    });
    cheaper.truncate(SWAP_WIDTH);
    cheaper
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckpt_solver::Candidate;

    fn cand(bytes: u64, cost: u64, free_from: usize, needed_at: usize) -> Candidate {
        Candidate {
            label: format!("c{bytes}/{cost}"),
            bytes,
            cost,
            free_from,
            needed_at,
            deps: vec![],
            transient: 0,
            block: None,
        }
    }

    /// Swap partners are the unchosen, cheaper candidates, the most promising first.
    #[test]
    fn swap_partners_are_the_cheaper_unchosen_candidates() {
        let prob = Problem {
            base_live: vec![0, 100, 100, 100, 100, 0],
            candidates: vec![
                cand(40, 100, 1, 5), // 0: the recompute being swapped out
                cand(30, 10, 1, 5),  // 1: 30 B x 4 steps / 11
                cand(10, 10, 1, 5),  // 2: 10 x 4 / 11
                cand(30, 10, 3, 5),  // 3: 30 x 2 / 11
                cand(30, 10, 1, 2),  // 4: 30 x 1 / 11
                cand(30, 200, 1, 5), // 5: not cheaper
                cand(30, 10, 1, 5),  // 6: already chosen
                cand(20, 5, 1, 5),   // 7: 20 x 4 / 6, the most promising
            ],
            ceiling: 80,
        };
        let set = [true, false, false, false, false, false, true, false];
        assert_eq!(swap_candidates(&prob, &set, 0), vec![7, 1, 3, 2, 4]);
        // Nothing is cheaper than the cheapest.
        assert!(swap_candidates(&prob, &set, 7).is_empty());
        // At most SWAP_WIDTH partners.
        let many = Problem {
            candidates: std::iter::once(cand(40, 100, 1, 5))
                .chain((0..40).map(|k| cand(30, 10 + k, 1, 5)))
                .collect(),
            ..prob.clone()
        };
        let mut set = vec![false; many.candidates.len()];
        set[0] = true;
        let partners = swap_candidates(&many, &set, 0);
        assert_eq!(partners, (1..=SWAP_WIDTH).collect::<Vec<_>>());
    }
}
