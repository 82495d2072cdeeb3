//! The exact solver: a MILP over compressed time, solved by CBC through
//! good_lp, warm-started with the greedy plan, refined until its answer
//! re-evaluates as fitting under [`evaluate`]. The formulation is
//! documented on [`solve_ilp_with`].
//!
//! This module owns the options, the solve thread with its watchdog, the
//! refinement loop and the answer; `skeleton.rs` the compressed problem
//! every round shares, `formulation.rs` one round's depth-limited model,
//! and `cbc.rs` CBC's model of it and CBC's answer.

mod cbc;
mod formulation;
mod skeleton;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::baseline::{greedy_set, lowest_peak, no_recompute_needed};
use crate::Evaluation;
use crate::{evaluate, Fallback, Method, ModelSize, Plan, Problem, SolveError, Status};
use cbc::Cbc;
use formulation::Formulation;
use skeleton::Skeleton;

/// Limits for [`solve_ilp_with`].
#[derive(Clone, Debug, PartialEq)]
pub struct IlpOptions {
    /// Time for all refinement rounds of CBC together.
    pub time_limit: Duration,
    /// How long past `time_limit` the watchdog waits for CBC before
    /// returning the greedy plan.
    pub watchdog_slack: Duration,
    /// Relative gap at which CBC may stop (0 = prove optimality).
    pub relative_gap: f64,
    /// Pass the greedy plan to CBC as its initial solution (it is always
    /// kept as the fallback either way).
    pub warm_start: bool,
    /// Dependency depth to which each segment models rematerialisation in
    /// the first round (0 = only candidates already needed).
    pub initial_depth: usize,
    /// Branch-and-bound nodes CBC may explore in one solve: a count, so that where it stops
    /// does not depend on the machine's speed or load (the time limit does). A solve stopped
    /// by it ends the refinement with [`Fallback::NodeLimit`].
    pub max_nodes: Option<u64>,
    /// Continuous columns (the deepened rounds' rematerialisation terms) a formulation may
    /// have: a count, like [`IlpOptions::max_nodes`], so that where the refinement stops does
    /// not depend on the machine. CBC has no work limit on its root: on the 8-layer Llama at
    /// 60% one deepened model of 19,076 such columns spent the whole 30 s limit in the root
    /// relaxation's simplex. A deeper model over the limit is not solved; the refinement ends
    /// with [`Fallback::ModelLimit`].
    pub max_continuous: Option<usize>,
    /// Only plans costing at most this many FLOPs are wanted: CBC prunes every branch whose
    /// bound is above it, and a relaxation with no plan under it ends the solve with
    /// [`SolveError::NoPlanWithinCutoff`], a proof (the rounds' models are relaxations of the
    /// problem, so no plan of the problem costs that little either). A greedy warm start over
    /// it is not given to CBC; a fallback plan (a stop before a proof) may still cost more, and
    /// says so in its cost.
    pub cutoff: Option<u64>,
    /// Extra CBC parameters, applied last (e.g. `("cuts", "off")`).
    pub cbc_parameters: Vec<(String, String)>,
}

impl Default for IlpOptions {
    fn default() -> Self {
        IlpOptions {
            time_limit: Duration::from_secs(10),
            watchdog_slack: Duration::from_secs(5),
            relative_gap: 0.0,
            warm_start: true,
            initial_depth: 0,
            max_nodes: None,
            max_continuous: None,
            cutoff: None,
            cbc_parameters: Vec::new(),
        }
    }
}

/// [`solve_ilp_with`] under [`IlpOptions::default`].
pub fn solve_ilp(problem: &Problem) -> Result<Plan, SolveError> {
    solve_ilp_with(problem, &IlpOptions::default())
}

/// Minimum-cost recompute set whose peak fits the ceiling.
///
/// # Formulation
///
/// `x_i ∈ {0,1}`: candidate `i` is recomputed. `p_{i,s} ∈ [0,1]`: `i` is back
/// by segment `s` (`r_i <= start_s`). Minimise `Σ cost_i x_i` subject to one
/// or two memory rows per kept segment:
///
/// ```text
/// base - Σ { bytes_i (x_i - p_{i,s}) : free_from_i <= start_s < needed_at_i }
///      + Σ { transient_i (p_{i,s} - p_{i,s-1}) } <= ceiling
/// ```
///
/// **Time compression.** Segments are cut at every event step (each
/// `free_from`, `needed_at`, 0); inside one the absent set is constant, so a
/// segment needs a row at its first step (the only step where a transient
/// can land, every `r_i` being some `needed_at`) and one for the largest
/// base of the rest (merged when no transient can land, dropped when
/// dominated). Rows whose base plus every transient that could land there
/// stays under the ceiling are dropped, and so are candidates that cover no
/// kept row (recomputing them only adds cost, transients and earlier
/// rematerialisation).
///
/// **Rematerialisation.** `p_{i,s}` is `x_i` once `start_s >= needed_at_i` and 0
/// before `rmin_i` (the earliest `needed_at` among `i` and everything that
/// depends on it). Otherwise it is a variable with `p_{i,s} >= p_{k,s} + x_i - 1`
/// for each dependent `k` (a recomputed dep is back with its dependent). A
/// higher `p` only costs absence, so lower bounds suffice, except where a
/// value is read as "before" a transient's step (a higher one would hide the
/// transient): those, and the dependents' values they are bounded by, also
/// get `p_{i,s} <= x_i`, `p_{i,s} <= Σ_k p_{k,s}` and `p_{i,s} >= p_{i,s-1}`. For
/// integral `x` the minimal `p` is the exact 0/1 value of [`evaluate`] (by
/// induction from the candidates nothing depends on), so `p` needs no
/// integrality.
///
/// **Sparse rows.** The absent bytes of a kept segment, `Σ bytes_i x_i` over
/// the windows covering it, is a variable `w_s` defined by difference from
/// the previous kept segment (windows opened minus windows closed), so each
/// row holds only its `p` terms: dense rows made the 48-layer LP 1.5M
/// nonzeros and the solve 4-15 s; chained, 0.3-1.6 s.
///
/// **Depth-limited relaxation.** Exact `p` for every candidate at every
/// backward segment is quadratic (a 12-layer transformer needs ~100k
/// variables). A candidate at dependency distance `d` from the segment's
/// frontier (the candidates already needed) can only be back if a chain of
/// `d` recomputes reaches that frontier, so each segment models `p` only up
/// to a depth and fixes it to 0 beyond ("truncated": counted absent). Upper
/// bounds and transient terms that read a truncated value are left out.
/// Every truly fitting plan stays feasible, so this is a relaxation: its
/// optimum is a lower bound, and if it re-evaluates as fitting it is
/// optimal. Otherwise the violated segments are deepened to cover the
/// chains the answer used and the model is solved again.
///
/// Rows are scaled by the largest byte count; the objective is in units of
/// the costs' gcd, so it is integral and CBC stops once the gap is below 1.
///
/// **CBC settings.** Preprocessing off (CBC 2.10's declared suboptimal plans
/// optimal on 3- and 4-binary models, with and without a MIP start), primal
/// heuristics off (the greedy warm start makes them redundant; the
/// feasibility pump alone took 6-11 s at 48 layers). CBC's columns are not
/// trusted: when it reports the relaxation "infeasible or worse than the
/// cutoff" they are stale LP values and the warm start is its incumbent.
///
/// # Answer
/// Returns the ILP's plan when it re-evaluates as fitting and costs no more
/// than the greedy warm start; otherwise the greedy plan with
/// [`SolveInfo::fallback`](crate::SolveInfo) saying why. A stuck CBC is
/// abandoned after `time_limit + watchdog_slack` (its thread is detached).
pub fn solve_ilp_with(problem: &Problem, options: &IlpOptions) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    let warm = greedy_set(problem).ok();
    // A warm start over the cutoff is no answer the caller wants: CBC does not get it.
    let cbc_warm = warm.clone().filter(|w| {
        options
            .cutoff
            .is_none_or(|c| evaluate(problem, w).cost <= c)
    });
    let answer = Answer {
        problem,
        options,
        start,
        warm,
        cbc_warm,
    };
    match refine_on_thread(problem, answer.cbc_warm.clone(), options, start) {
        Ok(refinement) => answer.conclude(refinement),
        Err(fallback) => answer.greedy_plan(fallback, 0.0, ModelSize::default()),
    }
}

/// Runs [`refine`] on a thread so a stuck CBC cannot hang the caller: its
/// result, or [`Fallback::Watchdog`] once `time_limit + watchdog_slack` has
/// passed since `start` (the thread is then detached).
fn refine_on_thread(
    problem: &Problem,
    cbc_warm: Option<Vec<bool>>,
    options: &IlpOptions,
    start: Instant,
) -> Result<Refinement, Fallback> {
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new((problem.clone(), cbc_warm, options.clone()));
    let spawned = std::thread::Builder::new()
        .name("ckpt-solver-cbc".into())
        .spawn(move || {
            let (problem, warm, options) = &*shared;
            let _ = tx.send(refine(
                problem,
                warm.as_deref(),
                options,
                start + options.time_limit,
            ));
        });
    match spawned {
        Err(e) => None.ok_or(Fallback::SolverError(format!(
            "cannot start the solve thread: {e}"
        ))),
        Ok(_) => rx
            .recv_timeout(
                (options.time_limit + options.watchdog_slack).saturating_sub(start.elapsed()),
            )
            .map_err(|_| Fallback::Watchdog),
    }
}

/// What the answer of one [`solve_ilp_with`] is made from: the problem, the
/// options, when the solve started, the greedy plan (`warm`) and the part of
/// it CBC was given (`cbc_warm`: none over the cutoff).
struct Answer<'a> {
    problem: &'a Problem,
    options: &'a IlpOptions,
    start: Instant,
    warm: Option<Vec<bool>>,
    cbc_warm: Option<Vec<bool>>,
}

impl Answer<'_> {
    /// The plan a finished refinement answers with: the ILP's when it fits
    /// and costs no more than the warm start, else the greedy plan or the
    /// error that proves there is none.
    fn conclude(&self, refinement: Refinement) -> Result<Plan, SolveError> {
        let problem = self.problem;
        let size = refinement.size;
        match refinement.end {
            RefinementEnd::Fits { x, optimal, bound } => {
                let e = evaluate(problem, &x);
                match &self.warm {
                    Some(w) if evaluate(problem, w).cost < e.cost => self.greedy_plan(
                        Fallback::WorseThanWarmStart { ilp_cost: e.cost },
                        bound,
                        size,
                    ),
                    _ => Ok(self.ilp_plan(x, e, optimal, bound, size)),
                }
            }
            RefinementEnd::WarmOptimal => {
                let w = self.cbc_warm.clone().unwrap_or_default();
                let e = evaluate(problem, &w);
                let proven = e.cost as f64;
                Ok(self.ilp_plan(w, e, true, proven, size))
            }
            RefinementEnd::Infeasible => match (&self.cbc_warm, self.options.cutoff) {
                // The warm start fits (within the cutoff), so CBC's claim is numerical noise.
                (Some(_), _) => self.greedy_plan(
                    Fallback::SolverError("CBC reports infeasible".into()),
                    0.0,
                    size,
                ),
                (None, Some(cutoff)) => Err(SolveError::NoPlanWithinCutoff { cutoff }),
                (None, None) => {
                    let l = lowest_peak(problem);
                    Err(SolveError::Infeasible {
                        ceiling: problem.ceiling,
                        lowest_peak: l.peak,
                        at_step: l.peak_step,
                    })
                }
            },
            RefinementEnd::Stopped { reason, bound } => self.greedy_plan(reason, bound, size),
        }
    }

    /// The ILP's plan `x`, evaluated as `e`, with `bound` proven.
    fn ilp_plan(
        &self,
        x: Vec<bool>,
        e: Evaluation,
        optimal: bool,
        bound: f64,
        size: ModelSize,
    ) -> Plan {
        // CBC stops at `relative_gap` with a proven bound: exact only when the bound meets
        // the objective (to within the integral objective's unit).
        let status = if !optimal {
            Status::FeasibleOnTimeout
        } else if self.options.relative_gap > 0.0
            && (e.cost as f64 - bound) > 1.0 + 1e-9 * e.cost as f64
        {
            Status::WithinGap
        } else {
            Status::Optimal
        };
        let mut plan =
            Plan::from_evaluation(x, e, Method::Ilp, status, bound, self.start.elapsed());
        plan.info.model = size;
        plan
    }

    /// The greedy plan, labelled with why the ILP's is not the answer; with no
    /// greedy plan, the error naming the limit that stopped the solve.
    fn greedy_plan(
        &self,
        fallback: Fallback,
        bound: f64,
        size: ModelSize,
    ) -> Result<Plan, SolveError> {
        let problem = self.problem;
        let options = self.options;
        let Some(set) = self.warm.clone() else {
            let l = lowest_peak(problem);
            if let (Fallback::NodeLimit, Some(nodes)) = (&fallback, options.max_nodes) {
                return Err(SolveError::NoPlanWithinNodeLimit {
                    nodes,
                    lowest_peak: l.peak,
                    at_step: l.peak_step,
                });
            }
            if let Fallback::ModelLimit { continuous, limit } = fallback {
                return Err(SolveError::NoPlanWithinModelLimit {
                    continuous,
                    limit,
                    lowest_peak: l.peak,
                    at_step: l.peak_step,
                });
            }
            return Err(SolveError::NoPlanWithinTimeLimit {
                seconds: options.time_limit.as_secs_f64(),
                lowest_peak: l.peak,
                at_step: l.peak_step,
            });
        };
        let e = evaluate(problem, &set);
        let status = match fallback {
            Fallback::Watchdog | Fallback::TimeLimit => Status::FeasibleOnTimeout,
            _ => Status::Heuristic,
        };
        let mut plan =
            Plan::from_evaluation(set, e, Method::Greedy, status, bound, self.start.elapsed());
        plan.info.fallback = Some(fallback);
        plan.info.model = size;
        Ok(plan)
    }
}

/// How the refinement loop ([`refine`]) ended.
enum RefinementEnd {
    /// CBC's answer, re-evaluated as fitting; `optimal` when CBC proved it
    /// optimal for the relaxation (hence for the problem).
    Fits {
        x: Vec<bool>,
        optimal: bool,
        bound: f64,
    },
    /// CBC proved no plan cheaper than the warm start exists.
    WarmOptimal,
    /// CBC proved the relaxation, hence the problem, infeasible.
    Infeasible,
    /// No fitting answer; `bound` is the best proven lower bound.
    Stopped { reason: Fallback, bound: f64 },
}

/// What [`refine`] returns: how it ended and the size of its last model.
struct Refinement {
    end: RefinementEnd,
    size: ModelSize,
}

/// The refinement loop: solve the depth-limited relaxation, deepen the
/// segments whose rows the answer violates, repeat until it fits.
fn refine(
    problem: &Problem,
    warm: Option<&[bool]>,
    options: &IlpOptions,
    deadline: Instant,
) -> Refinement {
    let skeleton = Skeleton::build(problem, options.relative_gap);
    let warm = warm.map(|w| (w.to_vec(), evaluate(problem, w)));
    let warm_cost = warm.as_ref().map(|(_, e)| e.cost);
    let warm = warm.map(|(w, e)| (w, e.remat_at));
    let mut depth = vec![options.initial_depth; skeleton.seg_start.len()];
    let mut best_bound = 0.0f64;
    for round in 1.. {
        let formulation = Formulation::build(&skeleton, &depth);
        let size = formulation.size(&skeleton, round);
        if let Some(limit) = options.max_continuous.filter(|&l| size.continuous > l) {
            return Refinement {
                end: RefinementEnd::Stopped {
                    reason: Fallback::ModelLimit {
                        continuous: size.continuous,
                        limit,
                    },
                    bound: best_bound,
                },
                size,
            };
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Refinement {
                end: RefinementEnd::Stopped {
                    reason: Fallback::TimeLimit,
                    bound: best_bound,
                },
                size,
            };
        }
        let (x, integral, stale, optimal, bound) =
            match formulation.solve(&skeleton, warm.as_ref(), remaining, options) {
                Cbc::Solved {
                    x,
                    integral,
                    stale,
                    optimal,
                    bound,
                } => (x, integral, stale, optimal, bound),
                Cbc::Infeasible => {
                    return Refinement {
                        end: RefinementEnd::Infeasible,
                        size,
                    }
                }
                Cbc::NodeLimit => {
                    return Refinement {
                        end: RefinementEnd::Stopped {
                            reason: Fallback::NodeLimit,
                            bound: best_bound,
                        },
                        size,
                    }
                }
                Cbc::Error(msg) => {
                    return Refinement {
                        end: RefinementEnd::Stopped {
                            reason: Fallback::SolverError(msg),
                            bound: best_bound,
                        },
                        size,
                    }
                }
            };
        if !stale {
            best_bound = best_bound.max(bound);
        }
        let e = evaluate(problem, &x);
        let beats_warm = warm_cost.is_none_or(|wc| e.cost <= wc);
        if !stale && integral && e.fits(problem.ceiling) && beats_warm {
            return Refinement {
                end: RefinementEnd::Fits {
                    x,
                    optimal,
                    bound: best_bound,
                },
                size,
            };
        }
        if !optimal {
            return Refinement {
                end: RefinementEnd::Stopped {
                    reason: Fallback::TimeLimit,
                    bound: best_bound,
                },
                size,
            };
        }
        if warm.is_some() && (stale || !beats_warm) {
            // The relaxation cannot beat the warm start, which fits.
            return Refinement {
                end: RefinementEnd::WarmOptimal,
                size,
            };
        }
        if stale {
            return Refinement {
                end: RefinementEnd::Infeasible,
                size,
            };
        }
        if !skeleton.deepen(&mut depth, &e) {
            return Refinement {
                end: RefinementEnd::Stopped {
                    reason: Fallback::ViolatesCeiling { peak: e.peak },
                    bound: best_bound,
                },
                size,
            };
        }
    }
    unreachable!("the refinement loop returns")
}
