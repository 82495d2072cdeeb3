//! The time limit stops a batch of trials in flight: once the clock passes, flips not yet
//! simulated are not (the move is abandoned), and the outcome says the limit was hit. Checked
//! by counting the trials an oracle is asked for after the deadline, not by timing the search.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ckpt_planner::{
    search, Oracle, PlanError, RunTrace, SearchInput, SearchOptions, Searched, TableOracle,
};
use ckpt_solver::{Candidate, Plan, Problem};

/// A table oracle whose every run takes `delay`, counting the runs asked for after `deadline`.
struct Slow {
    inner: TableOracle,
    delay: Duration,
    deadline: Instant,
    late: AtomicUsize,
}

impl Oracle for Slow {
    type Realised = u64;

    fn trace(&self, set: &[bool]) -> Result<RunTrace, PlanError> {
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

#[test]
fn a_batch_in_flight_stops_at_the_time_limit() {
    // 60 candidates, each freeing 10 bytes over the peak; nothing reaches the ceiling, so the
    // climb goes on move after move, 32 flips a move.
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
    let prob = Problem {
        base_live: vec![500, 1000, 1000, 1000, 500],
        candidates,
        ceiling: 10,
    };
    let limit = Duration::from_millis(300);
    let options = SearchOptions {
        threads: 2,
        ..SearchOptions::one_thread(limit)
    };
    let oracle = Slow {
        inner: TableOracle::new(prob.clone(), 0),
        delay: Duration::from_millis(40),
        deadline: options.started + limit,
        late: AtomicUsize::new(0),
    };
    let input = SearchInput {
        problem: &prob,
        effective: 10,
        fixed: 0,
        baseline_total: 1000,
        step_cost: 10_000,
    };
    let Searched::Stuck { timed_out, .. } = search(&oracle, &input, &options).unwrap() else {
        panic!("nothing fits a ceiling of 10 bytes");
    };
    assert!(timed_out, "the limit stopped the search and must say so");
    // After the deadline: at most the runs that report the lowest total reached (recompute
    // all, the best set) — not the rest of a 32-flip move (about 20 runs at 40 ms on two
    // threads before the check).
    let late = oracle.late.load(Ordering::Relaxed);
    assert!(late <= 3, "{late} runs asked for after the deadline");
}
