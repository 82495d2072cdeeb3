//! What stops a search: the time limit stops a batch of trials in flight (once the clock
//! passes, flips not yet simulated are not, the move is abandoned, and the outcome says the
//! limit was hit), and the trial budget is spent in whole moves. Checked by counting the
//! runs an oracle is asked for, not by timing the search.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ckpt_planner::{
    search, Oracle, PlanError, RunTrace, SearchInput, SearchOptions, Searched, TableOracle,
};
use ckpt_solver::{Candidate, Plan, Problem};

/// A table oracle whose every run takes `delay`, counting the runs asked for, and those asked
/// for after `deadline`.
struct Slow {
    inner: TableOracle,
    delay: Duration,
    deadline: Instant,
    calls: AtomicUsize,
    late: AtomicUsize,
}

impl Oracle for Slow {
    type Realised = u64;

    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if Instant::now() >= self.deadline {
            self.late.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::sleep(self.delay);
        self.inner.trace(set)
    }

    fn realise(&self, plan: &Plan) -> Result<(u64, u64), PlanError> {
        self.inner.realise(plan)
    }
}

/// Search the unreachable problem under `options` (their time limit is the oracle's
/// deadline) with runs of `delay`: whether it says the limit stopped it, the runs asked for,
/// and those asked for after the deadline.
fn searched(options: &SearchOptions, delay: Duration) -> (bool, usize, usize) {
    let prob = unreachable_problem();
    let oracle = Slow {
        inner: TableOracle::new(prob.clone(), 0),
        delay,
        deadline: options.started + options.time_limit,
        calls: AtomicUsize::new(0),
        late: AtomicUsize::new(0),
    };
    let input = SearchInput {
        problem: &prob,
        effective: 10,
        fixed: 0,
        baseline_total: 1000,
        step_cost: 10_000,
    };
    let Searched::Stuck { timed_out, .. } = search(&oracle, &input, options).unwrap() else {
        panic!("nothing fits a ceiling of 10 bytes");
    };
    let calls = oracle.calls.load(Ordering::Relaxed);
    (timed_out, calls, oracle.late.load(Ordering::Relaxed))
}

/// 60 candidates, each freeing 10 bytes over the peak; nothing reaches a ceiling of 10, so
/// the climb goes on move after move, 32 flips a move at first.
fn unreachable_problem() -> Problem {
    let candidates: Vec<Candidate> = (0..60)
        .map(|i| Candidate {
            label: format!("c{i}"),
            bytes: 10,
            cost: 1 + i,
            free_from: 1,
            needed_at: 4,
            deps: vec![],
            transient: 0,
            block: None,
        })
        .collect();
    Problem {
        base_live: vec![500, 1000, 1000, 1000, 500],
        candidates,
        ceiling: 10,
    }
}

#[test]
fn a_batch_in_flight_stops_at_the_time_limit() {
    let options = SearchOptions {
        threads: 2,
        ..SearchOptions::one_thread(Duration::from_millis(300))
    };
    let (timed_out, _, late) = searched(&options, Duration::from_millis(40));
    assert!(timed_out, "the limit stopped the search and must say so");
    // After the deadline: at most the runs that report the lowest total reached (recompute
    // all, the best set) — not the rest of a 32-flip move (about 20 runs at 40 ms on two
    // threads before the check).
    assert!(late <= 3, "{late} runs asked for after the deadline");
}

/// With a budget of 70 trials the climb runs two whole moves (32 flips, then 33: the first
/// add is now a drop candidate) and does not start a third it could not finish: the oracle
/// is asked for the two moves, the climb's start and the lowest total reached, and no more.
#[test]
fn the_trial_budget_is_spent_in_whole_moves() {
    let options = SearchOptions {
        max_trials: 70,
        ..SearchOptions::one_thread(Duration::from_secs(600))
    };
    let (timed_out, calls, _) = searched(&options, Duration::ZERO);
    assert!(!timed_out);
    // 1 (the start) + 32 + 33 (two moves) + at most 3 (the lowest total reached).
    assert!(
        (66..=69).contains(&calls),
        "{calls} runs for a budget of 70"
    );
}
