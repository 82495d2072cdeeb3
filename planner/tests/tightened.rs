//! The search's step 1b on plain numbers: where the corrected ILP rounds stall over the
//! ceiling, the ILP is solved again at a budget lowered by the overshoot, simulated, and the
//! cheaper of its fit and the climb's is the plan.

use std::time::Duration;

use ckpt_planner::{search, IlpRound, Oracle, SearchInput, SearchOptions, Searched, TableOracle};
use ckpt_solver::{Candidate, Problem};

fn cand(label: &str, cost: u64, free_from: usize) -> Candidate {
    Candidate {
        label: label.into(),
        bytes: 10,
        cost,
        free_from,
        needed_at: 4,
        deps: vec![],
        transient: 0,
        block: None,
    }
}

/// Search `model` at a ceiling of 90 (the peak is 100 at steps 1-3) against `truth` as the
/// oracle, under `options`: the plan found, which must fit.
fn fit(model: &Problem, truth: Problem, options: &SearchOptions) -> ckpt_planner::Found<u64> {
    let oracle = TableOracle::new(truth, 0);
    let n = model.candidates.len();
    let input = SearchInput {
        problem: model,
        effective: 90,
        fixed: 0,
        baseline_total: oracle.total(&vec![false; n]).unwrap(),
        step_cost: 10_000,
    };
    match search(&oracle, &input, options).unwrap() {
        Searched::Fits(found) => {
            assert_eq!(oracle.total(&found.plan.recompute).unwrap(), 90);
            *found
        }
        _ => panic!("no plan; `b` alone fits"),
    }
}

/// The model believes `a1` and `a2` each free 10 bytes over the peak (steps 1-3); in truth
/// they are held to their backward use (an allocator's reuse), and only `b` frees anything.
/// Round 0 picks `a1`, learns it saves nothing; round 1 picks `a2`, which simulates no lower:
/// the rounds stall. The tightened budget makes the ILP take `b` too, and that fits.
#[test]
fn tightened_budget_fits_where_the_rounds_stall() {
    let base_live = vec![50, 100, 100, 100, 50];
    let model = Problem {
        base_live: base_live.clone(),
        candidates: vec![cand("a1", 1, 1), cand("a2", 1, 1), cand("b", 50, 1)],
        ceiling: 90,
    };
    let truth = Problem {
        candidates: vec![cand("a1", 1, 4), cand("a2", 1, 4), cand("b", 50, 1)],
        ..model.clone()
    };
    let found = fit(
        &model,
        truth,
        &SearchOptions::one_thread(Duration::from_secs(600)),
    );
    let simulated: Vec<u64> = found
        .ilp
        .rounds
        .iter()
        .filter_map(|r| match r {
            IlpRound::Simulated {
                simulated_peak_bytes,
                ..
            } => Some(*simulated_peak_bytes),
            _ => None,
        })
        .collect();
    // Two stalled rounds at 100, then one tightened solve that fits.
    assert_eq!(simulated, vec![100, 100, 90], "{:?}", found.ilp.rounds);
    // The answer is the optimum: `b` alone (the climb's, cheaper than the tightened a2 + b).
    assert_eq!(found.plan.recompute, vec![false, false, true]);
    assert_eq!(found.plan.cost, 50);
}

/// The model believes `a1` and `a2` each free 20 bytes over the peak; in truth neither frees
/// anything, and `b` frees the 10 the ceiling needs. The rounds stall on `a1`, then `a2`; the
/// tightened budgets take `a2`, then `a2` + `b`, which fits. The climbs' starts (the ILP at
/// 0.9 and 0.8 of the budget on the plain model: `a1`, `a1` + `a2`) do not fit, and with two
/// simulations in all no climb's move (three flips) starts: the tightened fit is what the
/// search has, and it is cut like a climb's fit, most expensive first: dropping `b` does not
/// fit, dropping `a2` does, and `b` alone is the plan. With one simulation the budget ends the
/// cut after `b`, and `a2` is kept.
#[test]
fn a_tightened_fit_the_climbs_do_not_beat_is_cut() {
    let sized = |label: &str, bytes, cost| Candidate {
        bytes,
        ..cand(label, cost, 1)
    };
    let model = Problem {
        base_live: vec![50, 100, 100, 100, 50],
        candidates: vec![sized("a1", 20, 1), sized("a2", 20, 1), sized("b", 10, 50)],
        ceiling: 90,
    };
    let truth = Problem {
        candidates: vec![cand("a1", 1, 4), cand("a2", 1, 4), cand("b", 50, 1)],
        ..model.clone()
    };
    let budget = |max_trials| SearchOptions {
        max_trials,
        ..SearchOptions::one_thread(Duration::from_secs(600))
    };
    let found = fit(&model, truth.clone(), &budget(2));
    assert_eq!(found.plan.recompute, vec![false, false, true]);
    assert_eq!(found.plan.cost, 50);
    let found = fit(&model, truth, &budget(1));
    assert_eq!(found.plan.recompute, vec![false, true, true]);
}
