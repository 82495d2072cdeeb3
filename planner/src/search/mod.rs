//! The candidate search, on any [`Oracle`]: [`search`] runs its stages in turn, one call each.
//!
//! 1. **ILP rounds** (`rounds.rs`): the ILP on the linear model, corrected by the oracle
//!    round by round; then, where the rounds stall over the ceiling, tightened budgets.
//! 2. **Climbs** (`climb.rs`): hill-climbs with the oracle in the loop, from the rounds' plans,
//!    from no recompute, then from the ILP's optima at tighter budgets.
//! 3. **Cut** (`cut.rs`): drop the recomputes the fit does not need, swap expensive ones for
//!    cheaper.
//!
//! [`search_graph`] is one planning pass over a graph: its candidates, its linear model, and
//! the search through the [`Simulator`].
//!
//! Invariants: the search stops at counts (ILP nodes, trials), never at a time, but for the
//! time limit, whose every stop is recorded ([`Deadline`]); a plan is reported as fitting only
//! when the oracle's total of its realised rewrite is within the ceiling.

mod climb;
mod cut;
mod rounds;

pub(crate) use cut::swap_candidates;

use std::time::Instant;

use ckpt_passes::recompute::{candidates, problem};
use ckpt_solver::{Plan, Problem};

use crate::analysis::{step_flops, Analysis};
use crate::options::{Deadline, PlanOptions, SearchOptions};
use crate::oracle::{plan_from_set, Oracle, Simulator};
use crate::outcome::{Diagnosis, DiagnosisKind, IlpReport, Outcome, Rewritten};
use crate::par::Pool;
use crate::trace::Event;
use crate::PlanError;

/// The numbers the search starts from.
#[derive(Clone, Copy, Debug)]
pub struct SearchInput<'a> {
    /// The linear model at the ILP's arena budget (its `ceiling`); the sets the oracle is asked
    /// about index its candidates.
    pub problem: &'a Problem,
    /// The device ceiling the oracle's totals must fit.
    pub effective: u64,
    /// Bytes no recompute changes (counted in every total).
    pub fixed: u64,
    /// The oracle's total with no recompute (above `effective`).
    pub baseline_total: u64,
    /// One step's cost, in the candidates' unit: the search's floor is a thousandth of it.
    pub step_cost: u64,
}

/// A plan that fits under the oracle, made real.
pub struct Found<R> {
    pub plan: Plan,
    pub realised: R,
    /// Oracle runs: ILP rounds plus search trials.
    pub attempts: usize,
    /// The climbs' and the cut's simulations, counted against [`SearchOptions::max_trials`].
    pub trials: usize,
    pub ilp: IlpReport,
    pub time_limit_hit: bool,
}

/// How a search ended.
pub enum Searched<R> {
    Fits(Box<Found<R>>),
    /// No set it tried fits: the lowest total the oracle gave (recomputing every candidate,
    /// the climbs' best, or no recompute).
    Stuck {
        lowest_reachable_total_bytes: u64,
        /// The set whose total that is (`None`: no recompute).
        lowest_set: Option<Vec<bool>>,
        timed_out: bool,
        /// The climbs' simulations, counted against [`SearchOptions::max_trials`].
        trials: usize,
        /// [`SearchOptions::max_trials`] stopped a climb (a larger budget may find a plan).
        budget_hit: bool,
    },
    /// [`SearchOptions::beat`]: the linear model (the ILP's first round) has no plan costing
    /// at most `cutoff`, [`crate::OUTCLASSED_FACTOR`] times the plan in hand (CBC proved it,
    /// or its plan re-evaluated costs more); nothing was simulated.
    Outclassed {
        cutoff: u64,
    },
}

/// What every stage of one search reads: the oracle, the input, the options and the clock.
struct Run<'a, O> {
    oracle: &'a O,
    input: SearchInput<'a>,
    so: &'a SearchOptions,
    clock: &'a Deadline,
}

impl<O: Oracle> Run<'_, O> {
    /// Threads trials are simulated on (the answer does not depend on it).
    fn threads(&self) -> usize {
        self.so.threads.max(1)
    }

    /// The floor on a flip's added cost when it is scored, and below which a plan's cost is
    /// not worth swapping for: a thousandth of a step.
    fn cost_floor(&self) -> f64 {
        (self.input.step_cost as f64 / 1000.0).max(1.0)
    }

    /// A plan that fits, made real, as the search's answer.
    fn found(
        &self,
        (plan, realised): (Plan, O::Realised),
        attempts: usize,
        trials: usize,
        ilp: IlpReport,
    ) -> Searched<O::Realised> {
        Searched::Fits(Box::new(Found {
            plan,
            realised,
            attempts,
            trials,
            ilp,
            time_limit_hit: self.clock.hit(),
        }))
    }
}

/// The planner proper, on any oracle: the simulator-corrected ILP rounds, then the
/// simulator-in-the-loop climbs from their plans, then the cut of what the fit does not need.
/// With a tightened fit in hand, the climbs get [`crate::variant_trials`] simulations (they
/// only matter if they beat it) and, where they find no fit, the tightened fit is cut; the
/// cheaper plan is the answer.
pub fn search<O: Oracle>(
    oracle: &O,
    input: &SearchInput,
    so: &SearchOptions,
) -> Result<Searched<O::Realised>, PlanError> {
    let clock = Deadline::new(so.started + so.time_limit);
    let run = Run {
        oracle,
        input: *input,
        so,
        clock: &clock,
    };
    let mut rounds = match rounds::rounds(&run)? {
        rounds::Ended::Searched(Searched::Fits(f)) => return cut_round_fit(&run, *f),
        rounds::Ended::Searched(searched) => return Ok(searched),
        rounds::Ended::Stalled(rounds) => rounds,
    };
    let tight_fit = rounds::tighten(&run, &mut rounds)?;
    let started = Instant::now();
    let climbed = climb::climbs(&run, &rounds, tight_fit.is_some())?;
    let attempts = rounds.attempts + climbed.trials;
    let ilp = IlpReport {
        rounds: rounds.report,
        used: false,
    };
    // Where the climbs found nothing, the tightened fit is cut.
    let Some(plan) = climbed
        .found
        .or_else(|| tight_fit.as_ref().map(|(p, _)| p.clone()))
    else {
        let (lowest, lowest_set) = lowest_reachable(oracle, input, climbed.current);
        return Ok(Searched::Stuck {
            lowest_reachable_total_bytes: lowest,
            lowest_set,
            timed_out: clock.hit(),
            trials: climbed.trials,
            budget_hit: climbed.budget_hit,
        });
    };
    so.emit(|| Event::SearchFits {
        at: so.at(),
        trials: climbed.trials,
        cost: plan.cost,
    });
    let mut trials = climbed.trials;
    let mut plan = cut::cut(&run, plan, &mut trials)?;
    if let Some(t) = tight_fit.filter(|(p, _)| p.cost < plan.cost || p.recompute == plan.recompute)
    {
        let ilp = IlpReport { used: true, ..ilp };
        return Ok(run.found(t, attempts, trials, ilp));
    }
    let (_, realised) = oracle.realise(&plan)?;
    plan.info.wall = started.elapsed();
    Ok(run.found((plan, realised), attempts, trials, ilp))
}

/// A round's plan that fits, cut ([`cut::cut`]) and challenged by a climb from no recompute
/// ([`climb::challenge`], itself cut): the linear model's reuse is not the simulator's, so a
/// recompute its optimum needs the simulated run may not. The 2-layer GPT-2 with dynamic dims
/// at batch 4, seq 32 and 2.9 MB, with its transposes and slices folded (not its one-hot
/// gradient): the ILP's proven optimum added 2,310,154 FLOPs, cut 663,552, the challenger
/// 294,912, while a plan adding 311,296 fit 2.85 MB. The cheapest replaces the round's; the
/// trials count as the search's.
fn cut_round_fit<O: Oracle>(
    run: &Run<O>,
    f: Found<O::Realised>,
) -> Result<Searched<O::Realised>, PlanError> {
    let mut trials = 0;
    let started = Instant::now();
    let mut plan = cut::cut(run, f.plan.clone(), &mut trials)?;
    // A plan adding under a thousandth of a step is not challenged: no climb saves much.
    let challenged = if (plan.cost as f64) < run.cost_floor() {
        None
    } else {
        climb::challenge(run, &mut trials)?
    };
    if let Some(c) = challenged {
        let c = cut::cut(run, c, &mut trials)?;
        if c.cost < plan.cost {
            plan = c;
        }
    }
    let attempts = f.attempts + trials;
    if plan.cost >= f.plan.cost {
        return Ok(Searched::Fits(Box::new(Found {
            attempts,
            trials,
            time_limit_hit: run.clock.hit(),
            ..f
        })));
    }
    let (_, realised) = run.oracle.realise(&plan)?;
    plan.info.wall = started.elapsed();
    let ilp = IlpReport {
        used: false,
        ..f.ilp
    };
    Ok(run.found((plan, realised), attempts, trials, ilp))
}

/// The lowest total the oracle gives, with the set that reaches it (`None`: no recompute):
/// no recompute, the best set the search reached (`best`), or recomputing every candidate,
/// whichever is lowest (the first on a tie). A set whose rewrite the oracle cannot run is
/// passed over.
fn lowest_reachable<O: Oracle>(
    oracle: &O,
    input: &SearchInput,
    best: (u64, Option<Vec<bool>>),
) -> (u64, Option<Vec<bool>>) {
    let all = vec![true; input.problem.candidates.len()];
    let simulated_all = oracle.total(&all).unwrap_or(u64::MAX);
    let mut lowest = (input.baseline_total, None);
    for (total, set) in [best, (simulated_all, Some(all))] {
        if total < lowest.0 {
            lowest = (total, set);
        }
    }
    lowest
}

/// Bytes freed times window length per FLOP: how promising a candidate looks.
fn ratio(c: &ckpt_solver::Candidate) -> f64 {
    c.bytes as f64 * (c.needed_at - c.free_from) as f64 / (c.cost as f64 + 1.0)
}

/// One planning pass over the graph `before` holds. `beat`: the added FLOPs of a plan in
/// hand ([`SearchOptions::beat`]); an outclassed search is a refusal whose lowest reachable
/// total is the graph's own (nothing was simulated). The search gets at most the trials
/// `pool` pays for, and spends them there.
pub(crate) fn search_graph(
    before: &Analysis,
    o: &PlanOptions,
    beat: Option<u64>,
    pool: &Pool,
) -> Result<Outcome, PlanError> {
    let effective = o.effective_ceiling();
    if before.ledger.total_bytes <= effective {
        return Ok(Outcome::AlreadyFits);
    }
    let fixed = before.ledger.fixed_bytes;
    let refusal = |kind, lowest| Diagnosis::new(kind, effective, lowest, &before.ledger);
    if fixed >= effective {
        return Ok(Outcome::CannotFit(refusal(
            DiagnosisKind::FixedExceedsCeiling,
            fixed,
        )));
    }
    let mut cands = candidates(
        &before.graph,
        &before.sim,
        &before.types,
        &o.analysis.bindings,
    );
    if let Some(costs) = &o.costs {
        costs.apply(&mut cands);
    }
    let step_cost = o
        .costs
        .as_ref()
        .map_or_else(|| step_flops(before, &o.analysis.bindings), |c| c.step);
    // The ILP's linear model counts live bytes; what the profile's arena needs beyond the live
    // peak (fragmentation, held outputs, the memory pattern's block) is taken off its budget as
    // the original graph measures it in the replay. The simulator still decides every fit.
    let profile_overhead = before
        .device
        .arena_bytes
        .saturating_sub(before.sim.peak_live);
    let arena_ceiling = (effective - fixed).saturating_sub(profile_overhead).max(1);
    let prob = problem(&before.sim, &cands, arena_ceiling);
    let oracle = Simulator {
        before,
        cands: &cands,
        prob: &prob,
        options: o,
    };
    let input = SearchInput {
        problem: &prob,
        effective,
        fixed,
        baseline_total: before.ledger.total_bytes,
        step_cost,
    };
    let steps = before.sim.schedule.len();
    let so = SearchOptions {
        beat,
        max_trials: o.max_trials.min(pool.trials(steps)),
        ..o.search_options()
    };
    let pooled = so.max_trials < o.max_trials;
    let searched = search(&oracle, &input, &so)?;
    pool.spend(
        match &searched {
            Searched::Fits(f) => f.trials,
            Searched::Stuck { trials, .. } => *trials,
            Searched::Outclassed { .. } => 0,
        },
        steps,
    );
    Ok(match searched {
        Searched::Fits(f) => {
            let f = *f;
            let mut r = Rewritten::new(f.realised, cands, f.plan, arena_ceiling, effective);
            r.solve_attempts = f.attempts;
            r.ilp = f.ilp;
            r.time_limit_hit = f.time_limit_hit;
            Outcome::Rewritten(Box::new(r))
        }
        Searched::Stuck {
            lowest_reachable_total_bytes,
            lowest_set,
            timed_out,
            budget_hit,
            ..
        } => {
            let d = refusal(DiagnosisKind::NoPlanFound, lowest_reachable_total_bytes);
            // The refusal names the lowest plan's dominant line: its rewrite's ledger.
            let d = match lowest_set {
                Some(set) => {
                    let lowest = oracle.ledger_of(&plan_from_set(&prob, set))?;
                    d.lowest_at(lowest_reachable_total_bytes, lowest.dominant())
                }
                None => d,
            };
            Outcome::CannotFit(Diagnosis {
                timed_out,
                steps_spent: budget_hit && pooled,
                ..d
            })
        }
        Searched::Outclassed { .. } => Outcome::CannotFit(refusal(
            DiagnosisKind::NoPlanFound,
            before.ledger.total_bytes,
        )),
    })
}
