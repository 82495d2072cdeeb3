//! The exact solver: a MILP over compressed time, solved by CBC through
//! good_lp, warm-started with the greedy plan, refined until its answer
//! re-evaluates as fitting under [`evaluate`]. The formulation is
//! documented on [`solve_ilp_with`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coin_cbc::raw::SecondaryStatus;
use good_lp::solvers::coin_cbc::coin_cbc;
use good_lp::{
    variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel,
    Variable, WithInitialSolution,
};

use crate::baseline::{greedy_set, lowest_peak, no_recompute_needed};
use crate::problem::{dependents, topological_order};
use crate::Evaluation;
use crate::{evaluate, Fallback, Method, ModelSize, Plan, Problem, SolveError, Status};

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

    // Solve on a thread so a stuck CBC cannot hang the caller.
    let (tx, rx) = mpsc::channel();
    let shared = Arc::new((problem.clone(), cbc_warm.clone(), options.clone()));
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
    let refinement = match spawned {
        Err(e) => None.ok_or(Fallback::SolverError(format!(
            "cannot start the solve thread: {e}"
        ))),
        Ok(_) => rx
            .recv_timeout(
                (options.time_limit + options.watchdog_slack).saturating_sub(start.elapsed()),
            )
            .map_err(|_| Fallback::Watchdog),
    };

    let greedy_plan =
        |fallback: Fallback, bound: f64, size: ModelSize| -> Result<Plan, SolveError> {
            let Some(set) = warm.clone() else {
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
                Plan::from_evaluation(set, e, Method::Greedy, status, bound, start.elapsed());
            plan.info.fallback = Some(fallback);
            plan.info.model = size;
            Ok(plan)
        };
    let refinement = match refinement {
        Ok(s) => s,
        Err(fallback) => return greedy_plan(fallback, 0.0, ModelSize::default()),
    };
    let size = refinement.size;
    let ilp_plan = |x: Vec<bool>, e: Evaluation, optimal: bool, bound: f64| {
        // CBC stops at `relative_gap` with a proven bound: exact only when the bound meets
        // the objective (to within the integral objective's unit).
        let status = if !optimal {
            Status::FeasibleOnTimeout
        } else if options.relative_gap > 0.0 && (e.cost as f64 - bound) > 1.0 + 1e-9 * e.cost as f64
        {
            Status::WithinGap
        } else {
            Status::Optimal
        };
        let mut plan = Plan::from_evaluation(x, e, Method::Ilp, status, bound, start.elapsed());
        plan.info.model = size;
        plan
    };
    match refinement.end {
        RefinementEnd::Fits { x, optimal, bound } => {
            let e = evaluate(problem, &x);
            match &warm {
                Some(w) if evaluate(problem, w).cost < e.cost => greedy_plan(
                    Fallback::WorseThanWarmStart { ilp_cost: e.cost },
                    bound,
                    size,
                ),
                _ => Ok(ilp_plan(x, e, optimal, bound)),
            }
        }
        RefinementEnd::WarmOptimal => {
            let w = cbc_warm.clone().unwrap_or_default();
            let e = evaluate(problem, &w);
            let proven = e.cost as f64;
            Ok(ilp_plan(w, e, true, proven))
        }
        RefinementEnd::Infeasible => match (&cbc_warm, options.cutoff) {
            // The warm start fits (within the cutoff), so CBC's claim is numerical noise.
            (Some(_), _) => greedy_plan(
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
        RefinementEnd::Stopped { reason, bound } => greedy_plan(reason, bound, size),
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

/// What one CBC solve returned.
enum Cbc {
    /// `x`: the columns, rounded; `integral`: within 1e-6 of 0/1; `stale`:
    /// CBC's secondary status says the relaxation was infeasible or worse
    /// than the cutoff (the warm start), and the columns are then not a plan
    /// (often the last LP's); `bound`: best possible objective, in FLOPs.
    Solved {
        x: Vec<bool>,
        integral: bool,
        stale: bool,
        optimal: bool,
        bound: f64,
    },
    Infeasible,
    /// Stopped at [`IlpOptions::max_nodes`].
    NodeLimit,
    Error(String),
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

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `p_{i,s}` as a term.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Remat {
    /// Exactly 0 (before `rmin_i`, or `i` is never recomputed).
    Zero,
    /// Equals `x_i` (the segment is at or past `needed_at_i`).
    X(usize),
    Var(usize),
    /// Beyond the segment's depth: taken as 0, which may be too low.
    Truncated,
}

/// One memory row: `absent bytes - landing transients >= excess` (scaled).
struct Row {
    /// `(base - ceiling) / unit`.
    excess: f64,
    seg: usize,
    /// Candidates whose window covers the segment.
    covering: Vec<usize>,
    /// Candidates whose transient may land at the segment's first step.
    transients: Vec<usize>,
}

/// Everything about the compressed problem that does not depend on depth.
struct Skeleton {
    bytes: Vec<f64>,
    transient: Vec<f64>,
    cost: Vec<f64>,
    cost_unit: f64,
    ceiling: u64,
    /// Candidates that get a binary (the others are fixed to 0).
    useful: Vec<bool>,
    seg_start: Vec<usize>,
    seg_end: Vec<usize>,
    needed_at: Vec<usize>,
    rmin: Vec<usize>,
    deps: Vec<Vec<usize>>,
    dependents: Vec<Vec<usize>>,
    /// Position in a deps-first topological order.
    topo_pos: Vec<usize>,
    rows: Vec<Row>,
    /// Segments with at least one row.
    kept: Vec<usize>,
    /// Segments whose rows read transients (and so `p` at the segment before).
    reads_before: Vec<bool>,
}

impl Skeleton {
    fn build(problem: &Problem, relative_gap: f64) -> Skeleton {
        let cands = &problem.candidates;
        let n = cands.len();
        let t_len = problem.steps();
        let ceiling = problem.ceiling;
        let dependents = dependents(cands);
        let order = topological_order(cands);
        let mut topo_pos = vec![0; n];
        for (pos, &i) in order.iter().enumerate() {
            topo_pos[i] = pos;
        }
        let deps: Vec<Vec<usize>> = (0..n)
            .map(|k| crate::problem::clean_deps(cands, k))
            .collect();

        // rmin_i: earliest possible rematerialisation (dependents first).
        let mut rmin: Vec<usize> = cands.iter().map(|c| c.needed_at).collect();
        for &i in order.iter().rev() {
            for &k in &dependents[i] {
                rmin[i] = rmin[i].min(rmin[k]);
            }
        }

        let mut events: Vec<usize> = vec![0];
        for c in cands {
            events.push(c.free_from);
            events.push(c.needed_at);
        }
        events.retain(|&e| e < t_len);
        events.sort_unstable();
        events.dedup();
        let seg_count = events.len();
        let seg_end: Vec<usize> = (0..seg_count)
            .map(|s| {
                if s + 1 < seg_count {
                    events[s + 1]
                } else {
                    t_len
                }
            })
            .collect();
        let is_needed: BTreeSet<usize> = cands.iter().map(|c| c.needed_at).collect();
        let seg_of = |step: usize| events.partition_point(|&e| e <= step).saturating_sub(1);

        // Transients that may land at a segment's first step e: rmin_i <= e
        // <= needed_at_i and e is some needed_at.
        let mut may_land: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
        for (i, c) in cands.iter().enumerate() {
            if c.transient == 0 {
                continue;
            }
            for (s, &e) in events.iter().enumerate().skip(seg_of(rmin[i])) {
                if e > c.needed_at {
                    break;
                }
                if is_needed.contains(&e) {
                    may_land[s].push(i);
                }
            }
        }

        let mut opens: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
        let mut closes: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
        for (i, c) in cands.iter().enumerate() {
            if c.free_from < c.needed_at && c.bytes > 0 {
                opens[seg_of(c.free_from)].push(i);
                closes[seg_of(c.needed_at)].push(i);
            }
        }

        let unit = cands
            .iter()
            .map(|c| c.bytes.max(c.transient))
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let excess = |b: u64| (b as f64 - ceiling as f64) / unit;
        let mut rows = Vec::new();
        let mut active: BTreeSet<usize> = BTreeSet::new();
        for s in 0..seg_count {
            for &i in &closes[s] {
                active.remove(&i);
            }
            active.extend(opens[s].iter().copied());
            let base = problem.base_live[events[s]];
            let interior = (events[s] + 1..seg_end[s])
                .map(|t| problem.base_live[t])
                .max()
                .unwrap_or(0);
            let max_transient: u64 = may_land[s].iter().map(|&i| cands[i].transient).sum();
            let event_hot = base.saturating_add(max_transient) > ceiling;
            let interior_hot = interior > ceiling;
            let covering: Vec<usize> = active.iter().copied().collect();
            if event_hot && may_land[s].is_empty() {
                rows.push(Row {
                    excess: excess(base.max(interior)),
                    seg: s,
                    covering,
                    transients: vec![],
                });
            } else {
                if interior_hot && (!event_hot || interior > base) {
                    rows.push(Row {
                        excess: excess(interior),
                        seg: s,
                        covering: covering.clone(),
                        transients: vec![],
                    });
                }
                if event_hot {
                    rows.push(Row {
                        excess: excess(base),
                        seg: s,
                        covering,
                        transients: may_land[s].clone(),
                    });
                }
            }
        }

        let mut useful = vec![false; n];
        for row in &rows {
            for &i in &row.covering {
                useful[i] = true;
            }
        }
        // A candidate that covers no row can still help: recomputing it pulls its deps back
        // earlier, and with them their transients, away from a hot step (free when it costs
        // nothing). So a dependent of a useful candidate whose rematerialisation carries a
        // transient (its own or a useful dep's) is useful too. `order` has deps first.
        let mut pulls = vec![false; n];
        for &i in &order {
            pulls[i] = useful[i] && (cands[i].transient > 0 || deps[i].iter().any(|&d| pulls[d]));
            if !useful[i] && deps[i].iter().any(|&d| pulls[d]) {
                useful[i] = true;
                pulls[i] = true;
            }
        }
        let mut kept: Vec<usize> = rows.iter().map(|r| r.seg).collect();
        kept.dedup();
        let mut reads_before = vec![false; seg_count];
        for row in &rows {
            reads_before[row.seg] |= !row.transients.is_empty() && row.seg > 0;
        }
        // Objective in units of the costs' gcd: integral, so CBC can stop as
        // soon as the gap is below one unit. When a relative gap is allowed, the
        // unit is at least a millionth of that gap times the largest cost and
        // costs are rounded down to it: the objective spans fewer orders of
        // magnitude (a 1-FLOP move beside 10^10-FLOP matmuls left CBC unable
        // to close the gap), CBC's bound stays a bound, and the plan's real
        // cost is re-evaluated after.
        let exact = cands.iter().map(|c| c.cost).fold(0, gcd).max(1);
        let coarse = if relative_gap > 0.0 {
            let max = cands.iter().map(|c| c.cost).max().unwrap_or(0) as f64;
            (max * relative_gap * 1e-6).floor() as u64
        } else {
            0
        };
        let cost_unit = exact.max(coarse) as f64;
        Skeleton {
            bytes: cands.iter().map(|c| c.bytes as f64 / unit).collect(),
            transient: cands.iter().map(|c| c.transient as f64 / unit).collect(),
            cost: cands
                .iter()
                .map(|c| (c.cost as f64 / cost_unit).floor())
                .collect(),
            cost_unit,
            ceiling,
            useful,
            seg_start: events,
            seg_end,
            needed_at: cands.iter().map(|c| c.needed_at).collect(),
            rmin,
            deps,
            dependents,
            topo_pos,
            rows,
            kept,
            reads_before,
        }
    }

    /// Dependency distance, up to `limit`, from each candidate not yet needed
    /// at segment `s` to the frontier (candidates with `needed_at <= start_s`).
    fn distances(&self, s: usize, limit: usize) -> Vec<(usize, usize)> {
        let e = self.seg_start[s];
        let n = self.needed_at.len();
        let mut dist = vec![usize::MAX; n];
        let mut queue = VecDeque::new();
        for (k, d) in dist.iter_mut().enumerate() {
            if self.needed_at[k] <= e {
                *d = 0;
                queue.push_back(k);
            }
        }
        let mut out = Vec::new();
        while let Some(k) = queue.pop_front() {
            if dist[k] >= limit {
                continue;
            }
            for &i in &self.deps[k] {
                if dist[i] == usize::MAX {
                    dist[i] = dist[k] + 1;
                    out.push((i, dist[i]));
                    queue.push_back(i);
                }
            }
        }
        out
    }

    /// Raises the depth of every kept segment whose steps the evaluated
    /// answer violates to cover the chains it used. False if none could be
    /// raised (the violated rows were already exact).
    fn deepen(&self, depth: &mut [usize], e: &Evaluation) -> bool {
        let n = self.needed_at.len();
        let mut changed = false;
        for &s in &self.kept {
            let violated = (self.seg_start[s]..self.seg_end[s]).any(|t| e.live[t] > self.ceiling);
            if !violated || depth[s] >= n {
                continue;
            }
            let mut needed = 0;
            for seg in [Some(s), s.checked_sub(1)].into_iter().flatten() {
                let start = self.seg_start[seg];
                for (i, d) in self.distances(seg, n) {
                    if e.remat_at[i].is_some_and(|r| r <= start) {
                        needed = needed.max(d);
                    }
                }
            }
            depth[s] = needed.max(2 * depth[s]).max(1).min(n);
            changed = true;
        }
        changed
    }
}

/// The depth-limited model: which `p_{i,s}` are variables.
struct Formulation {
    /// `(candidate, segment)` of each continuous variable.
    vars: Vec<(usize, usize)>,
    var_of: HashMap<(usize, usize), usize>,
    /// Whether each variable's upper bound is exact (no truncated dependent).
    exact: Vec<bool>,
    /// Whether it needs upper bounds: it is read as the value before a
    /// transient's segment (a higher value would hide the transient), or
    /// bounds one that is. Elsewhere a higher `p` only costs absence, so
    /// lower bounds suffice.
    bounded: Vec<bool>,
}

impl Formulation {
    fn build(sk: &Skeleton, depth: &[usize]) -> Formulation {
        let mut f = Formulation {
            vars: Vec::new(),
            var_of: HashMap::new(),
            exact: Vec::new(),
            bounded: Vec::new(),
        };
        let add = |f: &mut Formulation, s: usize, limit: usize| {
            for (i, _) in sk.distances(s, limit) {
                if sk.useful[i] && !f.var_of.contains_key(&(i, s)) {
                    f.var_of.insert((i, s), f.vars.len());
                    f.vars.push((i, s));
                }
            }
        };
        for &s in &sk.kept {
            add(&mut f, s, depth[s]);
            if sk.reads_before[s] {
                add(&mut f, s - 1, depth[s]);
            }
        }
        // Exactness, dependents first.
        let mut order: Vec<usize> = (0..f.vars.len()).collect();
        order.sort_by_key(|&v| std::cmp::Reverse(sk.topo_pos[f.vars[v].0]));
        f.exact = vec![false; f.vars.len()];
        for v in order {
            let (i, s) = f.vars[v];
            f.exact[v] = sk.dependents[i].iter().all(|&k| match f.remat(sk, k, s) {
                Remat::Zero | Remat::X(_) => true,
                Remat::Var(w) => f.exact[w],
                Remat::Truncated => false,
            });
        }
        f.bounded = vec![false; f.vars.len()];
        let mut work: Vec<usize> = Vec::new();
        for row in sk.rows.iter().filter(|r| r.seg > 0) {
            for &i in &row.transients {
                if let Remat::Var(v) = f.remat(sk, i, row.seg - 1) {
                    work.push(v);
                }
            }
        }
        while let Some(v) = work.pop() {
            if f.bounded[v] {
                continue;
            }
            f.bounded[v] = true;
            let (i, s) = f.vars[v];
            for &k in &sk.dependents[i] {
                if let Remat::Var(w) = f.remat(sk, k, s) {
                    work.push(w);
                }
            }
        }
        f
    }

    fn remat(&self, sk: &Skeleton, i: usize, s: usize) -> Remat {
        let e = sk.seg_start[s];
        if !sk.useful[i] || e < sk.rmin[i] {
            Remat::Zero
        } else if e >= sk.needed_at[i] {
            Remat::X(i)
        } else {
            self.var_of
                .get(&(i, s))
                .map_or(Remat::Truncated, |&v| Remat::Var(v))
        }
    }

    fn size(&self, sk: &Skeleton, rounds: usize) -> ModelSize {
        ModelSize {
            steps: sk.seg_end.last().copied().unwrap_or(0),
            segments: sk.seg_start.len(),
            memory_rows: sk.rows.len(),
            binaries: sk.useful.iter().filter(|&&u| u).count(),
            continuous: self.vars.len(),
            truncated: self.exact.iter().filter(|&&e| !e).count(),
            rounds,
        }
    }

    fn solve(
        &self,
        sk: &Skeleton,
        warm: Option<&(Vec<bool>, Vec<Option<usize>>)>,
        time_limit: Duration,
        options: &IlpOptions,
    ) -> Cbc {
        let n = sk.useful.len();
        let mut pv = ProblemVariables::new();
        let x: Vec<Option<Variable>> = (0..n)
            .map(|i| sk.useful[i].then(|| pv.add(variable().binary())))
            .collect();
        let p: Vec<Variable> = self
            .vars
            .iter()
            .map(|_| pv.add(variable().min(0.0).max(1.0)))
            .collect();
        let w: Vec<Variable> = sk
            .kept
            .iter()
            .map(|_| pv.add(variable().min(0.0)))
            .collect();
        let x_term = |i: usize| -> Expression { x[i].map(Expression::from).unwrap_or_default() };
        let term = |r: Remat| -> Expression {
            match r {
                Remat::Zero | Remat::Truncated => Expression::default(),
                Remat::X(i) => x_term(i),
                Remat::Var(v) => p[v].into(),
            }
        };
        let objective: Expression = (0..n).filter_map(|i| x[i].map(|v| sk.cost[i] * v)).sum();
        let mut model = pv.minimise(objective).using(coin_cbc);
        model.set_parameter("log", "0");
        model.set_parameter("sec", &format!("{:.3}", time_limit.as_secs_f64()));
        // CBC 2.10's integer preprocessing declared suboptimal plans optimal
        // on 3- and 4-binary models, with and without a MIP start: keep it off.
        model.set_parameter("preprocess", "off");
        model.set_parameter("allowableGap", "0.999");
        // The warm start makes CBC's primal heuristics redundant, and on the
        // 48-layer bench its feasibility pump alone took 6-11 s.
        model.set_parameter("heur", "off");
        // CBC 2.10's knapsack cuts cut off the optimum of an 8-binary model
        // (solver/tests/tables.rs `ilp_optimum_not_cut_off`: claimed optimal at 72 where 71
        // fits). Two-MIR cuts off fixes it too, but slows the 48-layer rounds by 45%.
        model.set_parameter("knapsackCuts", "off");
        if options.relative_gap > 0.0 {
            model.set_parameter("ratioGap", &options.relative_gap.to_string());
        }
        if let Some(n) = options.max_nodes {
            model.set_parameter("maxNodes", &n.to_string());
        }
        if let Some(cutoff) = options.cutoff {
            // The objective is integral in its unit and each cost is rounded down to it: a plan
            // costing at most `cutoff` scores at most its floor, kept by the half unit.
            let units = (cutoff as f64 / sk.cost_unit).floor() + 0.5;
            model.set_parameter("cutoff", &units.to_string());
        }
        for (k, v) in &options.cbc_parameters {
            model.set_parameter(k, v);
        }

        for (v, &(i, s)) in self.vars.iter().enumerate() {
            let pi: Expression = p[v].into();
            if self.bounded[v] {
                model.add_constraint(pi.clone().leq(x_term(i)));
            }
            let mut upper = Expression::default();
            for &k in &sk.dependents[i] {
                let pk = self.remat(sk, k, s);
                if matches!(pk, Remat::Zero | Remat::Truncated) {
                    continue;
                }
                model.add_constraint(pi.clone().geq(term(pk) + x_term(i) - 1.0));
                upper += term(pk);
            }
            if self.bounded[v] && self.exact[v] {
                model.add_constraint(pi.clone().leq(upper));
            }
            if s > 0 && self.bounded[v] {
                if let Some(&w) = self.var_of.get(&(i, s - 1)) {
                    model.add_constraint(pi.geq(p[w]));
                }
            }
        }
        // w_s = Σ bytes_i x_i over the windows covering kept segment s, as a
        // chain of differences: a dense sum per row made the LP ~1.5M nonzeros
        // at 48 layers.
        let mut covered: HashMap<usize, usize> = HashMap::new();
        let mut previous: &[usize] = &[];
        for (idx, row) in sk.rows.iter().enumerate() {
            if covered.contains_key(&row.seg) {
                continue;
            }
            let k = covered.len();
            covered.insert(row.seg, k);
            let mut chain: Expression = w[k].into();
            if k > 0 {
                chain -= w[k - 1];
            }
            let (mut a, mut b) = (0, 0);
            let current = &sk.rows[idx].covering;
            while a < previous.len() || b < current.len() {
                match (previous.get(a), current.get(b)) {
                    (Some(&pa), Some(&cb)) if pa == cb => {
                        a += 1;
                        b += 1;
                    }
                    (Some(&pa), cb) if cb.is_none_or(|&cb| pa < cb) => {
                        chain += sk.bytes[pa] * x_term(pa);
                        a += 1;
                    }
                    (_, Some(&cb)) => {
                        chain -= sk.bytes[cb] * x_term(cb);
                        b += 1;
                    }
                    _ => unreachable!(),
                }
            }
            model.add_constraint(chain.eq(0.0));
            previous = current;
        }
        for row in &sk.rows {
            let mut lhs: Expression = w[covered[&row.seg]].into();
            for &i in &row.covering {
                if sk.useful[i] {
                    lhs -= sk.bytes[i] * term(self.remat(sk, i, row.seg));
                }
            }
            for &i in &row.transients {
                let now = self.remat(sk, i, row.seg);
                let before = if row.seg > 0 {
                    self.remat(sk, i, row.seg - 1)
                } else {
                    Remat::Zero
                };
                if sk.useful[i] && now != Remat::Truncated && before != Remat::Truncated {
                    lhs -= sk.transient[i] * (term(now) - term(before));
                }
            }
            model.add_constraint(lhs.geq(row.excess));
        }

        if let Some((warm, remat)) = warm.filter(|_| options.warm_start) {
            let mut init: Vec<(Variable, f64)> = Vec::new();
            for i in 0..n {
                if let Some(v) = x[i] {
                    init.push((v, if warm[i] { 1.0 } else { 0.0 }));
                }
            }
            for (v, &(i, s)) in self.vars.iter().enumerate() {
                let back = remat[i].is_some_and(|r| r <= sk.seg_start[s]);
                init.push((p[v], if back { 1.0 } else { 0.0 }));
            }
            let mut k = 0;
            for (idx, row) in sk.rows.iter().enumerate() {
                if idx > 0 && sk.rows[idx - 1].seg == row.seg {
                    continue;
                }
                let absent: f64 = row
                    .covering
                    .iter()
                    .filter(|&&i| sk.useful[i] && warm[i])
                    .map(|&i| sk.bytes[i])
                    .sum();
                init.push((w[k], absent));
                k += 1;
            }
            model = model.with_initial_solution(init);
        }

        match model.solve() {
            Ok(sol) => {
                // GapLimit: stopped at the requested gap (or the objective's unit), bound proven.
                let optimal = matches!(
                    sol.status(),
                    SolutionStatus::Optimal | SolutionStatus::GapLimit
                );
                let bound = sol.model().best_possible_value();
                let bound = if bound.is_finite() {
                    bound.max(0.0) * sk.cost_unit
                } else {
                    0.0
                };
                let xs: Vec<bool> = (0..n)
                    .map(|i| x[i].is_some_and(|v| sol.value(v) > 0.5))
                    .collect();
                let integral = x.iter().flatten().all(|&v| {
                    let value = sol.value(v);
                    (value - value.round()).abs() <= 1e-6
                });
                let stale = matches!(
                    sol.model().secondary_status(),
                    SecondaryStatus::LinearRelaxationInfeasible
                );
                Cbc::Solved {
                    x: xs,
                    integral,
                    stale,
                    optimal,
                    bound,
                }
            }
            Err(ResolutionError::Infeasible) => Cbc::Infeasible,
            // good_lp reports CBC's stop on anything but time as a bare `Stopped`; with a
            // node limit set, that is where it stopped.
            Err(ResolutionError::Other("Stopped")) if options.max_nodes.is_some() => Cbc::NodeLimit,
            Err(e) => Cbc::Error(e.to_string()),
        }
    }
}
