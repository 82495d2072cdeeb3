//! The search's first stage: the ILP on the linear model, corrected by the oracle.
//!
//! Round 0 solves the plain model. Each later round learns from the previous round's
//! rewrite, simulated (the simulator is byte-exact against ORT): (a) a recomputed activation
//! whose buffer ORT's allocator still held — handed, once freed, to a later value of the same
//! shape — only saves from where the buffer was really released, so its window shrinks; (b)
//! what the run still held beyond the model at each step (clones' transients, backward nodes
//! run early) becomes a per-step correction. Both only grow, so each round is more
//! conservative than the last; the loop ends when the oracle says a plan fits, nothing new is
//! learnt, or the rounds run out. Only plans the ILP proved optimal or within a 1% gap are
//! used: the oracle, not the linear model, has the last word, and a gap (unlike a clock, which
//! would make the output depend on the machine's speed) keeps the answer reproducible. A
//! round CBC cannot settle in [`ROUND_NODES`] branch-and-bound nodes is not worth the
//! search's time; the count, unlike a clock, stops it at the same place on any machine. The
//! time left is only CBC's safety stop.
//!
//! Tightened budgets ([`tighten`]): where the rounds stall above the ceiling, what the
//! corrected model still misses is about the overshoot: solve again with the budget lowered
//! by it, simulate, and repeat while no plan simulates higher than the last, at most
//! [`TIGHTEN_STEPS`] times (given a plan in hand, under the rounds' cutoff: a lower budget's
//! optimum is no lower). One ILP and one simulation a step, against a climb's hundreds of
//! simulations a move; the ILP's cost only grows as the budget falls, so the first plan that
//! fits is the cheapest these steps find. It does not end the search: the climbs still run
//! and their fit is cut; where they find none, the tightened fit is cut; the cheaper plan is
//! the answer (GPT-2 at 48 layers, 80%: the rounds stall 0.8% over, the climbs find nothing,
//! and the tightened fit, cut, adds 0.16% of a step, where block checkpointing's cut added
//! 6.73%). On the 2-layer fixtures the climbs beat it: cutting the tightened fit in their
//! place doubled the added FLOPs of GPT-2 and Llama at 90%.

use ckpt_solver::{solve_ilp_with, IlpOptions, Plan, Problem, SolveError, Status};

use super::{Found, Run, Searched};
use crate::options::OUTCLASSED_FACTOR;
use crate::oracle::{Oracle, RunTrace};
use crate::outcome::{IlpReport, IlpRound};
use crate::trace::Event;
use crate::PlanError;

/// Relative gap at which a round of the corrected ILP stops.
const ROUND_GAP: f64 = 0.01;
/// Branch-and-bound nodes one ILP solve may explore.
const ROUND_NODES: u64 = 500;
/// Continuous columns one ILP solve's deepened formulation may have. Over the fixtures at
/// 90-50% and the bench graphs, the deepened models CBC proved had at most 520 (2-layer GPT-2
/// at 60%, 6 s); of the four over 1,000, three were infeasible (the largest, 3,295, in 0.7 s)
/// and one unproven (2,810: T5 at 50%, 5.5 s). On the 8-layer Llama at 60%, 2,306 stopped at
/// the node limit after 3.6 s, and 19,076 spent the rest of the 30 s limit in the root
/// relaxation's simplex, which none of CBC's counts stops. A count, so the plan is the same
/// on any machine.
const ROUND_CONTINUOUS: usize = 2000;
/// Rounds of the simulator-corrected ILP.
const CORRECTION_ROUNDS: usize = 12;
/// Tightened-budget solves after the rounds.
const TIGHTEN_STEPS: usize = 6;
/// A tightened step lowers the budget by at least this fraction of it (1/64).
const TIGHTEN_MIN_STEP: u64 = 64;

/// What the rounds left for the later stages.
pub(super) struct Rounds {
    /// Oracle runs so far.
    pub(super) attempts: usize,
    /// (simulated total, set) of every round's plan, and of the tightened plans that
    /// simulated lower than the last.
    pub(super) starts: Vec<(u64, Vec<bool>)>,
    /// The model with its windows shrunk to what the allocator really released.
    learnt: Problem,
    /// What the runs held beyond the model, per step.
    correction: Vec<u64>,
    pub(super) report: Vec<IlpRound>,
    /// Round 0 proved the plain model infeasible at the budget (so it is at every tighter
    /// budget too).
    pub(super) infeasible: bool,
}

/// How the rounds ended: with the search's answer, or stalled.
pub(super) enum Ended<R> {
    Searched(Searched<R>),
    Stalled(Rounds),
}

/// What one round's solve gave.
enum Solved {
    Plan(Plan),
    /// No plan of proven quality: the rounds stop.
    Stop,
    /// Round 0 has no plan under the cutoff.
    Outclassed(u64),
}

/// The ILP options of a round (and of the later solves): the gap, the node and column
/// counts, and the time left as CBC's safety stop.
pub(super) fn ilp_options<O>(run: &Run<O>) -> IlpOptions {
    IlpOptions {
        time_limit: run.clock.left(),
        watchdog_slack: run.so.time_limit / 20,
        relative_gap: ROUND_GAP,
        max_nodes: Some(ROUND_NODES),
        max_continuous: Some(ROUND_CONTINUOUS),
        ..Default::default()
    }
}

/// CBC's cutoff given a plan in hand ([`crate::SearchOptions::beat`]): [`OUTCLASSED_FACTOR`]
/// times it; `None` without one.
fn cutoff<O>(run: &Run<O>) -> Option<u64> {
    run.so.beat.map(|b| b.saturating_mul(OUTCLASSED_FACTOR))
}

/// The simulator-corrected ILP rounds (see the module doc). Given a plan in hand, every round
/// only wants plans costing at most [`OUTCLASSED_FACTOR`] times it: CBC prunes on that, and
/// proves it when the model has none. Round 0 with none is outclassed; a later round with
/// none ends the rounds (its model is more conservative than round 0's, so its optimum is no
/// lower, and a plan over the cutoff is no start for a plan that beats the one in hand).
pub(super) fn rounds<O: Oracle>(run: &Run<O>) -> Result<Ended<O::Realised>, PlanError> {
    let (prob, effective, fixed) = (run.input.problem, run.input.effective, run.input.fixed);
    let mut r = Rounds {
        attempts: 0,
        starts: Vec::new(),
        learnt: prob.clone(),
        correction: vec![0u64; prob.base_live.len()],
        report: Vec::new(),
        infeasible: false,
    };
    for round in 0..CORRECTION_ROUNDS {
        if run.clock.passed() {
            break;
        }
        let cutoff = cutoff(run);
        let plan = match solve_round(run, &mut r, round, cutoff)? {
            Solved::Plan(plan) => plan,
            Solved::Stop => break,
            Solved::Outclassed(cutoff) if round == 0 => {
                return Ok(Ended::Searched(Searched::Outclassed { cutoff }))
            }
            Solved::Outclassed(_) => break,
        };
        // The plan's cost re-evaluated (each cost was rounded down in the model) can still be
        // over the cutoff: outclassed as well (a later round's plan ends the rounds).
        if let Some(cutoff) = cutoff.filter(|&c| plan.cost > c) {
            run.so.emit(|| Event::OutclassedCost {
                round,
                cost: plan.cost,
                cutoff,
                at: run.so.at(),
            });
            if round > 0 {
                break;
            }
            return Ok(Ended::Searched(Searched::Outclassed { cutoff }));
        }
        r.attempts += 1;
        let trace = run.oracle.trace(&plan.recompute)?;
        let total = trace.total;
        r.report
            .push(IlpRound::simulated(round, &plan, prob, fixed, total));
        if run.so.trace.is_some() {
            run.so.emit(|| Event::RoundSimulated {
                round,
                cost: plan.cost,
                model_peak_bytes: plan.peak + fixed,
                simulated_bytes: total,
                status: plan.info.status,
                wall: plan.info.wall,
                at: run.so.at(),
            });
            if let Some(held) = run.oracle.peak_held(&plan.recompute)? {
                run.so.emit(|| Event::PeakHeld(held));
            }
        }
        if total <= effective {
            let (realised_total, realised) = run.oracle.realise(&plan)?;
            if realised_total <= effective {
                return Ok(Ended::Searched(Searched::Fits(Box::new(Found {
                    plan,
                    realised,
                    attempts: r.attempts,
                    trials: 0,
                    ilp: IlpReport {
                        rounds: r.report,
                        used: true,
                    },
                    time_limit_hit: run.clock.hit(),
                }))));
            }
        }
        // A round that simulates no lower than an earlier one: its corrections have stopped
        // paying (each round is more conservative than the last), so the search takes over.
        let improved = r.starts.iter().all(|(t, _)| total < *t);
        r.starts.push((total, plan.recompute.clone()));
        if !improved {
            run.so.emit(|| Event::RoundNoLower { round });
            break;
        }
        if !learn(run, &mut r, &plan, &trace) {
            run.so.emit(|| Event::NothingLearnt { round });
            break;
        }
    }
    Ok(Ended::Stalled(r))
}

/// Solve round `round`'s corrected model (with `cutoff`, given a plan in hand); a round that
/// ends the rounds is recorded in `r`'s report (round 0 outclassed ends the search).
fn solve_round<O: Oracle>(
    run: &Run<O>,
    r: &mut Rounds,
    round: usize,
    cutoff: Option<u64>,
) -> Result<Solved, PlanError> {
    let corrected = corrected(&r.learnt, &r.correction);
    let solved = solve_ilp_with(
        &corrected,
        &IlpOptions {
            cutoff,
            ..ilp_options(run)
        },
    );
    run.clock.note_ilp(&solved);
    Ok(match solved {
        Err(e @ SolveError::NoPlanWithinCutoff { cutoff }) => {
            run.so.emit(|| Event::Outclassed {
                round,
                cutoff,
                at: run.so.at(),
            });
            if round > 0 {
                r.report.push(IlpRound::NoPlan {
                    round,
                    error: e.to_string(),
                });
            }
            Solved::Outclassed(cutoff)
        }
        Ok(p)
            if matches!(
                p.info.status,
                Status::Optimal | Status::WithinGap | Status::NoRecomputeNeeded
            ) =>
        {
            Solved::Plan(p)
        }
        Ok(p) => {
            run.so.emit(|| Event::RoundUnproven {
                round,
                status: p.info.status,
                fallback: p.info.fallback.clone(),
                cost: p.cost,
                bound: p.info.bound,
                wall: p.info.wall,
                at: run.so.at(),
                beat: run.so.beat,
            });
            r.report.push(IlpRound::Unproven {
                round,
                status: p.info.status,
                seconds: p.info.wall.as_secs_f64(),
            });
            Solved::Stop
        }
        Err(
            e @ (SolveError::Infeasible { .. }
            | SolveError::NoPlanWithinTimeLimit { .. }
            | SolveError::NoPlanWithinNodeLimit { .. }
            | SolveError::NoPlanWithinModelLimit { .. }
            | SolveError::DoesNotFit { .. }),
        ) => {
            run.so.emit(|| Event::RoundNoPlan {
                round,
                error: e.to_string(),
                at: run.so.at(),
            });
            // Round 0 solves the plain model at the budget: proven infeasible there, it
            // is at every tighter budget too.
            r.infeasible |= round == 0 && matches!(e, SolveError::Infeasible { .. });
            r.report.push(IlpRound::NoPlan {
                round,
                error: e.to_string(),
            });
            Solved::Stop
        }
        Err(e) => return Err(PlanError::Solve(e)),
    })
}

/// Learn from the run `trace` of a round's `plan`: where each recomputed activation's buffer
/// was really released, and what the run held beyond the model at each step. Whether
/// anything new was learnt.
fn learn<O: Oracle>(run: &Run<O>, r: &mut Rounds, plan: &Plan, trace: &RunTrace) -> bool {
    let mut learnt = false;
    for (i, c) in r.learnt.candidates.iter_mut().enumerate() {
        if !plan.recompute[i] {
            continue;
        }
        run.so.emit(|| Event::Released {
            candidate: i,
            label: c.label.clone(),
            bytes: c.bytes,
            cost: c.cost,
            free_from: c.free_from,
            needed_at: c.needed_at,
            released_at: trace.released_at[i],
        });
        let released = trace.released_at[i].unwrap_or(c.needed_at).min(c.needed_at);
        if released > c.free_from {
            c.free_from = released;
            learnt = true;
        }
    }
    let model = ckpt_solver::evaluate(&r.learnt, &plan.recompute);
    for ((corr, seen), modelled) in r.correction.iter_mut().zip(&trace.seen).zip(&model.live) {
        let excess = seen.saturating_sub(*modelled);
        if excess > *corr {
            *corr = excess;
            learnt = true;
        }
    }
    learnt
}

/// Tightened budgets after the rounds (see the module doc): the first tightened plan that
/// fits, made real; the plans that simulate lower than the last join `r`'s starts.
pub(super) fn tighten<O: Oracle>(
    run: &Run<O>,
    r: &mut Rounds,
) -> Result<Option<(Plan, O::Realised)>, PlanError> {
    let (prob, effective, fixed) = (run.input.problem, run.input.effective, run.input.fixed);
    let Some(&(mut last, _)) = r.starts.iter().min_by_key(|(t, _)| *t) else {
        return Ok(None);
    };
    let mut tight = corrected(&r.learnt, &r.correction);
    for step in 0..TIGHTEN_STEPS {
        if run.clock.passed() || last <= effective {
            break;
        }
        let overshoot = (last - effective).max(tight.ceiling / TIGHTEN_MIN_STEP);
        if overshoot >= tight.ceiling {
            break;
        }
        tight.ceiling -= overshoot;
        // A solve the time limit cut short makes the plan the clock's: reported as such. With
        // a plan in hand, under the cutoff (a lower budget's optimum is no lower).
        let solved = solve_ilp_with(
            &tight,
            &IlpOptions {
                cutoff: cutoff(run),
                ..ilp_options(run)
            },
        );
        run.clock.note_ilp(&solved);
        let plan = match solved {
            Ok(p) if matches!(p.info.status, Status::Optimal | Status::WithinGap) => p,
            _ => break,
        };
        r.attempts += 1;
        let total = run.oracle.trace(&plan.recompute)?.total;
        run.so.emit(|| Event::Tightened {
            step,
            budget: tight.ceiling,
            cost: plan.cost,
            simulated_bytes: total,
            at: run.so.at(),
        });
        let round = r.report.len();
        r.report
            .push(IlpRound::simulated(round, &plan, prob, fixed, total));
        if total <= effective {
            let (realised_total, realised) = run.oracle.realise(&plan)?;
            if realised_total <= effective {
                return Ok(Some((plan, realised)));
            }
        }
        if total > last {
            break;
        }
        if total < last {
            r.starts.push((total, plan.recompute.clone()));
        }
        last = total;
    }
    Ok(None)
}

/// `learnt` with `correction` (what the runs held beyond the model, per step) added to its
/// base live bytes: the model an ILP round solves.
fn corrected(learnt: &Problem, correction: &[u64]) -> Problem {
    let mut p = learnt.clone();
    for (b, c) in p.base_live.iter_mut().zip(correction) {
        *b += c;
    }
    p
}
