//! A search given the cost of a plan in hand ([`SearchOptions::beat`]) stops after the ILP's
//! first round when the linear model's optimum costs more than [`OUTCLASSED_FACTOR`] times
//! it, without asking the oracle anything; at or under that it searches as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ckpt_planner::{
    search, Oracle, PlanError, RunTrace, SearchInput, SearchOptions, Searched, TableOracle,
    OUTCLASSED_FACTOR,
};
use ckpt_solver::{Candidate, Plan, Problem};

/// A table oracle counting the runs it is asked for.
struct Counting {
    inner: TableOracle,
    calls: AtomicUsize,
}

impl Oracle for Counting {
    type Realised = u64;

    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.trace(set)
    }

    fn realise(&self, plan: &Plan) -> Result<(u64, u64), PlanError> {
        self.inner.realise(plan)
    }
}

/// Two candidates over a peak of 100 at a ceiling of 80: the cheapest fit recomputes `b`
/// (cost 40); `a` (cost 10) frees too little.
fn problem() -> Problem {
    let cand = |label: &str, bytes, cost| Candidate {
        label: label.into(),
        bytes,
        cost,
        free_from: 1,
        needed_at: 4,
        deps: vec![],
        transient: 0,
        block: None,
    };
    Problem {
        base_live: vec![50, 100, 100, 100, 50],
        candidates: vec![cand("a", 10, 10), cand("b", 20, 40)],
        ceiling: 80,
    }
}

fn searched(beat: Option<u64>) -> (Searched<u64>, usize) {
    let prob = problem();
    let oracle = Counting {
        inner: TableOracle::new(prob.clone(), 0),
        calls: AtomicUsize::new(0),
    };
    let input = SearchInput {
        problem: &prob,
        effective: 80,
        fixed: 0,
        baseline_total: 100,
        step_cost: 10_000,
    };
    let options = SearchOptions {
        beat,
        ..SearchOptions::one_thread(Duration::from_secs(600))
    };
    let s = search(&oracle, &input, &options).unwrap();
    (s, oracle.calls.load(Ordering::Relaxed))
}

#[test]
fn a_model_optimum_over_the_factor_stops_the_search_unsimulated() {
    // 40 > 2 x 19: outclassed at the cutoff, and no run asked for.
    let beat = 40 / OUTCLASSED_FACTOR - 1;
    let (s, calls) = searched(Some(beat));
    let Searched::Outclassed { cutoff } = s else {
        panic!("the model's optimum 40 is over {OUTCLASSED_FACTOR} x {beat}");
    };
    assert_eq!(cutoff, OUTCLASSED_FACTOR * beat);
    assert_eq!(calls, 0, "an outclassed search simulates nothing");
}

#[test]
fn at_or_under_the_factor_the_search_runs() {
    for beat in [Some(40 / OUTCLASSED_FACTOR), Some(1000), None] {
        let (s, calls) = searched(beat);
        let Searched::Fits(f) = s else {
            panic!("beat {beat:?}: `b` fits and must be found");
        };
        assert_eq!(f.plan.recompute, vec![false, true]);
        assert!(calls > 0);
    }
}
