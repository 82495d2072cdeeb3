//! The search's second stage: local search with the oracle in the loop, from the rounds'
//! plans (those that simulated better than no recompute, cheapest first: rounds only grow
//! more conservative, so the first is the nearest to the cheapest plan that fits), then from
//! no recompute, then from the ILP's optima at tighter budgets. Each climb flips the
//! candidate (adds or drops it) that lowers the simulated peak most per added FLOP, until a
//! flip fits or none helps.
//!
//! Invariants: a climb is bounded by a move and a simulation count, never by time (but for
//! the time limit, which abandons a move); a move is simulated whole or not at all, and its
//! flips are judged in order, so the plan and its trial count are the same on any number of
//! threads.

use std::sync::atomic::{AtomicBool, Ordering};

use ckpt_solver::{solve_ilp_with, IlpOptions, Plan, Status};

use super::rounds::{ilp_options, Rounds};
use super::{ratio, Run};
use crate::options::{variant_trials, Progress, SEARCH_WIDTH};
use crate::oracle::{plan_from_set, Oracle};
use crate::par::par_map;
use crate::trace::Event;
use crate::PlanError;

/// Branch-and-bound nodes for the search's extra starts (the ILP at tighter budgets). They
/// are only starting points, and only a proven optimum is used (a plan within the rounds' 1%
/// gap too was tried: GPT-2 at 48 layers, 60%, went from +2.01% to +1.89% of a step, but
/// ResNet-18's refusal at 70% from 7.0 s to 11.7 s, over its target, climbing the extra
/// starts); at 60% on GPT-2 small the first of them ran 500 nodes for 26 s, the rest of the
/// time limit, without a plan.
const START_NODES: u64 = 50;
/// Moves a climb goes on for after its first fit, looking for a cheaper one.
const MOVES_AFTER_FIT: usize = 8;

/// What the climbs found.
pub(super) struct Climbed {
    /// The first climb's plan that fits.
    pub(super) found: Option<Plan>,
    /// The lowest simulated total the climbs reached (no recompute's where none went lower),
    /// and the set that reached it (`None`: no recompute).
    pub(super) current: (u64, Option<Vec<bool>>),
    /// Their simulations.
    pub(super) trials: usize,
    /// The trial budget stopped a climb.
    pub(super) budget_hit: bool,
}

/// Climb from each start in turn (see the module doc) until one fits. With a tightened fit in
/// hand (`tight`), the climbs only matter if they beat it: they get what a variant searched
/// with a plan in hand gets, and the tighter starts are not solved (they are the tightened
/// steps' idea without the simulator's corrections). Nor are they where the plain model was
/// proven infeasible at the budget: at a tighter one it is too, and CBC may take long to say
/// so again (GPT-2 at 96 layers, 80%: the reshape-guarded variant's round 0 proved it in
/// 1.1 s, then the start at 0.9 of the budget ran to the time limit, 18.5 s).
pub(super) fn climbs<O: Oracle>(
    run: &Run<O>,
    rounds: &Rounds,
    tight: bool,
) -> Result<Climbed, PlanError> {
    let (prob, input) = (run.input.problem, &run.input);
    let climber = Climber::new(run, tight);
    let mut trials = 0usize;
    let mut starts: Vec<Vec<bool>> = rounds
        .starts
        .iter()
        .filter(|(total, _)| *total < input.baseline_total)
        .map(|(_, set)| set.clone())
        .collect();
    starts.push(vec![false; prob.candidates.len()]);
    let mut current = (input.baseline_total, None);
    let mut found: Option<Plan> = None;
    // More starting points when those fail: the ILP's optima at tighter budgets (its linear
    // model under-counts what ORT's allocator holds, so a tighter target lands nearer the
    // truth), solved only when reached.
    let factors: &[f64] = if tight || rounds.infeasible {
        &[]
    } else {
        &[0.9, 0.8]
    };
    let tighter = factors
        .iter()
        .copied()
        .filter_map(|f| tighter_start(run, f));
    for start in starts.into_iter().chain(tighter) {
        if run.clock.passed() {
            break;
        }
        match climber.climb(start, &mut trials)? {
            Climb::Fits(plan) => {
                found = Some(*plan);
                break;
            }
            Climb::Stuck(total, set) => {
                if total < current.0 {
                    current = (total, Some(set));
                }
            }
        }
    }
    Ok(Climbed {
        found,
        current,
        trials,
        budget_hit: climber.budget_hit.load(Ordering::Relaxed),
    })
}

/// A climb from no recompute with a variant's simulations ([`variant_trials`]): a challenger
/// to a plan the rounds found, whose linear model may have needed recomputes the simulated
/// run does not. Its plan where one fits.
pub(super) fn challenge<O: Oracle>(
    run: &Run<O>,
    trials: &mut usize,
) -> Result<Option<Plan>, PlanError> {
    let climber = Climber::new(run, true);
    let none = vec![false; run.input.problem.candidates.len()];
    Ok(match climber.climb(none, trials)? {
        Climb::Fits(plan) => Some(*plan),
        Climb::Stuck(..) => None,
    })
}

/// The ILP's proven optimum at `f` times the budget, as a climb's start.
fn tighter_start<O: Oracle>(run: &Run<O>, f: f64) -> Option<Vec<bool>> {
    let prob = run.input.problem;
    let mut p = prob.clone();
    p.ceiling = ((prob.ceiling as f64 * f) as u64).max(1);
    let solved = solve_ilp_with(
        &p,
        &IlpOptions {
            max_nodes: Some(START_NODES),
            ..ilp_options(run)
        },
    );
    run.clock.note_ilp(&solved);
    run.so.emit(|| Event::TighterStart {
        factor: f,
        solved: match &solved {
            Ok(plan) => Ok((plan.info.status, plan.info.fallback.clone(), plan.info.wall)),
            Err(e) => Err(e.to_string()),
        },
        at: run.so.at(),
    });
    match solved {
        Ok(plan) if plan.info.status == Status::Optimal => Some(plan.recompute),
        _ => None,
    }
}

/// The oracle-in-the-loop climb's context: the search's, and the climbs' trial budget.
struct Climber<'a, O> {
    run: &'a Run<'a, O>,
    max_trials: usize,
    /// `max_trials` stopped a climb (a move it could not pay for was not started).
    budget_hit: AtomicBool,
}

/// How a climb ended.
enum Climb {
    /// This plan fits.
    Fits(Box<Plan>),
    /// No flip lowers the peak any more: the lowest simulated total reached, and its set.
    Stuck(u64, Vec<bool>),
}

/// The best flip of a move that does not fit: (score, total, flip, cost, peak step).
type Step = (f64, u64, usize, u64, usize);

impl<'a, O: Oracle> Climber<'a, O> {
    /// A climber with the search's trial budget, or, where a plan is already in hand
    /// (`tight`), with what a variant searched with a plan in hand gets ([`variant_trials`]).
    fn new(run: &'a Run<'a, O>, tight: bool) -> Climber<'a, O> {
        let max_trials = if tight {
            run.so
                .max_trials
                .min(variant_trials(run.input.problem.base_live.len()))
        } else {
            run.so.max_trials
        };
        Climber {
            run,
            max_trials,
            budget_hit: AtomicBool::new(false),
        }
    }

    /// Hill-climb from `set`, bounded by a move and a simulation count (never by time, so
    /// that the same input gives the same plan).
    fn climb(&self, mut set: Vec<bool>, trials: &mut usize) -> Result<Climb, PlanError> {
        let run = self.run;
        let (prob, effective) = (run.input.problem, run.input.effective);
        let (mut current, mut peak_at) = run.oracle.peak(&set)?;
        if current <= effective {
            return Ok(Climb::Fits(Box::new(plan_from_set(prob, set))));
        }
        let max_moves = 2 * set.len() + 1;
        let mut incumbent: Option<Plan> = None; // the cheapest fitting plan seen
        let mut moves_after_fit = 0usize;
        for _ in 0..max_moves {
            if *trials >= self.max_trials {
                self.budget_hit.store(true, Ordering::Relaxed);
                break;
            }
            if run.clock.passed() {
                break;
            }
            if let Some(f) = run.so.progress {
                f(Progress::Trials {
                    count: *trials,
                    best_total_bytes: current,
                });
            }
            let flips = self.flips(&set, peak_at);
            // A move is simulated whole or not at all: one the trial budget cannot hold is
            // not started.
            if *trials + flips.len() > self.max_trials {
                self.budget_hit.store(true, Ordering::Relaxed);
                break;
            }
            let Some((fits, step_best)) = self.judge(&set, &flips, current, trials)? else {
                break;
            };
            if let Some((i, plan)) = fits {
                if incumbent.as_ref().is_none_or(|inc| plan.cost < inc.cost) {
                    run.so.emit(|| Event::FlipFits {
                        candidate: i,
                        cost: plan.cost,
                    });
                    incumbent = Some(plan);
                }
            }
            // Go on climbing, for a few moves, while the climb costs less than the plan that
            // fits: a few cheap flips may fit where one expensive flip does.
            if incumbent.is_some() {
                moves_after_fit += 1;
            }
            let promising = |b: &Step| {
                incumbent
                    .as_ref()
                    .is_none_or(|inc| b.3 < inc.cost && moves_after_fit <= MOVES_AFTER_FIT)
            };
            let Some((_, total, i, _, peak)) = step_best.filter(promising) else {
                break;
            };
            run.so.emit(|| Event::Flip {
                candidate: i,
                total_bytes: total,
                peak_step: peak,
            });
            set[i] = !set[i];
            current = total;
            peak_at = peak;
        }
        if let Some(plan) = incumbent {
            return Ok(Climb::Fits(Box::new(plan)));
        }
        Ok(Climb::Stuck(current, set))
    }

    /// Flips worth trying from `set`: every chosen candidate (drop it) and the unchosen ones
    /// with the most bytes·window per FLOP (add one), those absent at the simulated peak
    /// (`peak_at`) first.
    fn flips(&self, set: &[bool], peak_at: usize) -> Vec<usize> {
        let prob = self.run.input.problem;
        let covers = |i: usize| {
            let c = &prob.candidates[i];
            c.free_from <= peak_at && peak_at < c.needed_at
        };
        let mut adds: Vec<usize> = (0..set.len()).filter(|&i| !set[i]).collect();
        adds.sort_by(|&x, &y| {
            covers(y)
                .cmp(&covers(x))
                .then(ratio(&prob.candidates[y]).total_cmp(&ratio(&prob.candidates[x])))
                .then(x.cmp(&y))
        });
        adds.truncate(SEARCH_WIDTH);
        (0..set.len()).filter(|&i| set[i]).chain(adds).collect()
    }

    /// One move from `set` (its total `current`): every flip is simulated (in parallel), then
    /// judged in order: the same answer on any number of cores. The cheapest flip that fits
    /// (the first on a tie), and the best-scoring one that lowers the total. A flip whose
    /// total is not below the current one is passed over (it cannot fit: the current total is
    /// over the ceiling), so its total is not needed. `None`: the clock passed before every
    /// flip was simulated, and the move is abandoned.
    #[allow(clippy::type_complexity)]
    fn judge(
        &self,
        set: &[bool],
        flips: &[usize],
        current: u64,
        trials: &mut usize,
    ) -> Result<Option<(Option<(usize, Plan)>, Option<Step>)>, PlanError> {
        let run = self.run;
        let (prob, effective) = (run.input.problem, run.input.effective);
        let current_cost = plan_from_set(prob, set.to_vec()).cost;
        let judged = par_map(run.threads(), flips, |&i| {
            if run.clock.passed() {
                return Ok(None);
            }
            let mut trial = set.to_vec();
            trial[i] = !trial[i];
            run.oracle.peak_below(&trial, current).map(|below| {
                Some(below.map(|(total, peak)| (plan_from_set(prob, trial), total, peak)))
            })
        });
        let judged: Vec<_> = judged.into_iter().collect::<Result<_, _>>()?;
        *trials += judged.iter().filter(|j| j.is_some()).count();
        if judged.iter().any(|j| j.is_none()) {
            return Ok(None);
        }
        let mut fits: Option<(usize, Plan)> = None;
        let mut step_best: Option<Step> = None;
        for (&i, judged) in flips.iter().zip(judged.into_iter().flatten()) {
            let Some((plan, total, peak)) = judged else {
                continue;
            };
            if total <= effective {
                if fits
                    .as_ref()
                    .is_none_or(|f| (plan.cost, i) < (f.1.cost, f.0))
                {
                    fits = Some((i, plan));
                }
                continue;
            }
            if total >= current {
                continue;
            }
            let gain = (current - total) as f64;
            let added = plan.cost as f64 - current_cost as f64;
            // Per added FLOP, with a floor of 0.1% of a step on the cost, so that near-free
            // flips that save next to nothing do not win every move. A drop that helps costs
            // nothing but still scores by its gain: a drop saving 4 KiB must not beat an add
            // saving 30 MiB.
            let score = gain / (added.max(0.0) + run.cost_floor());
            if step_best.is_none_or(|b| score > b.0 || (score == b.0 && total < b.1)) {
                step_best = Some((score, total, i, plan.cost, peak));
            }
        }
        Ok(Some((fits, step_best)))
    }
}
