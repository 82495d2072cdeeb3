//! The exact solver: a MILP over compressed time, solved by CBC through
//! good_lp, warm-started with the greedy plan, re-checked with [`evaluate`].
//!
//! # Formulation
//!
//! `x_i ∈ {0,1}`: candidate `i` is recomputed. `p_{i,s} ∈ [0,1]`: `i` has been
//! rematerialised by segment `s` (`r_i <= start_s`). Minimise `Σ cost_i x_i`.
//!
//! Time is cut into segments at every event step (each `free_from`,
//! `needed_at`, 0). Inside a segment the absent set is constant, so a
//! segment needs at most two memory rows: one at its first step (the only
//! step where a transient can land, since every `r_i` is some `needed_at`)
//! and one for the largest `base_live` of the rest. Rows whose base plus
//! every transient that could land there stays under the ceiling are
//! dropped, and so are candidates that cover no kept row (recomputing them
//! can only add cost, transients, and earlier rematerialisation).
//!
//! `p_{i,s}` is a constant where it can be: `x_i` once `start_s >= needed_at_i`,
//! 0 before `rmin_i` (the earliest `needed_at` among `i` and everything that
//! depends on it, transitively). Otherwise it is a variable with
//!
//! - `p_{i,s} <= x_i`,
//! - `p_{i,s} >= p_{k,s} + x_i - 1` for each dependent `k` (a recomputed dep is
//!   back no later than its dependent),
//! - `p_{i,s} <= Σ_k p_{k,s}` (and no earlier than that),
//!
//! which, for integral `x`, force `p` to the exact 0/1 value of [`evaluate`]
//! (by induction from the candidates nothing depends on), so `p` needs no
//! integrality. Variables are created only for the segments a kept row reads
//! and, transitively, the dependents those read. A row at segment `s` is
//!
//! `base - Σ_{i: free_from_i <= start_s < needed_at_i} bytes_i (x_i - p_{i,s})
//!        + Σ_i transient_i (p_{i,s} - p_{i,s-1}) <= ceiling`.
//!
//! Rows are scaled by the largest byte count, the objective by the largest cost.

use std::collections::{BTreeSet, HashMap};
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
use crate::{evaluate, Fallback, Method, ModelSize, Plan, Problem, SolveError, Status};

/// Limits for [`solve_ilp_with`].
#[derive(Clone, Debug, PartialEq)]
pub struct IlpOptions {
    /// CBC's time limit.
    pub time_limit: Duration,
    /// How long past `time_limit` the watchdog waits for CBC before
    /// returning the greedy plan.
    pub watchdog_slack: Duration,
    /// Relative gap at which CBC may stop (0 = prove optimality).
    pub relative_gap: f64,
    /// Pass the greedy plan to CBC as its initial solution (it is always
    /// kept as the fallback either way).
    pub warm_start: bool,
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
/// Returns the ILP's plan when CBC's values re-evaluate as fitting and cost
/// no more than the greedy warm start; otherwise the greedy plan with
/// [`SolveInfo::fallback`](crate::SolveInfo) saying why. A stuck CBC is
/// abandoned after `time_limit + watchdog_slack` (its thread is detached).
pub fn solve_ilp_with(problem: &Problem, options: &IlpOptions) -> Result<Plan, SolveError> {
    let start = Instant::now();
    problem.validate()?;
    if let Some(plan) = no_recompute_needed(problem, start) {
        return Ok(plan);
    }
    let warm = greedy_set(problem).ok();
    let model = Formulation::build(problem);
    let size = model.size;

    let greedy_plan = |fallback: Fallback, bound: f64| -> Option<Plan> {
        let set = warm.clone()?;
        let e = evaluate(problem, &set);
        let status = if matches!(fallback, Fallback::Watchdog) { Status::FeasibleOnTimeout } else { Status::Heuristic };
        let mut plan = Plan::from_evaluation(set, e, Method::Greedy, status, bound, start.elapsed());
        plan.info.fallback = Some(fallback);
        plan.info.model = size;
        Some(plan)
    };
    let no_plan = |bound_known: bool| -> SolveError {
        let l = lowest_peak(problem);
        if bound_known {
            SolveError::Infeasible { ceiling: problem.ceiling, lowest_peak: l.peak, at_step: l.peak_step }
        } else {
            SolveError::NoPlanWithinTimeLimit {
                seconds: options.time_limit.as_secs_f64(),
                lowest_peak: l.peak,
                at_step: l.peak_step,
            }
        }
    };

    // Solve on a thread so a stuck CBC cannot hang the caller.
    let (tx, rx) = mpsc::channel();
    let model = Arc::new(model);
    let warm_start = warm.as_ref().map(|set| (set.clone(), evaluate(problem, set).remat_at));
    let opts = options.clone();
    let solve_model = Arc::clone(&model);
    let spawned = std::thread::Builder::new().name("ckpt-solver-cbc".into()).spawn(move || {
        let _ = tx.send(solve_model.solve(warm_start.as_ref(), &opts));
    });
    if let Err(e) = spawned {
        return greedy_plan(Fallback::SolverError(format!("cannot start the solve thread: {e}")), 0.0)
            .ok_or_else(|| no_plan(false));
    }
    let deadline = options.time_limit + options.watchdog_slack;
    let outcome = match rx.recv_timeout(deadline.saturating_sub(start.elapsed())) {
        Ok(o) => o,
        Err(_) => return greedy_plan(Fallback::Watchdog, 0.0).ok_or_else(|| no_plan(false)),
    };

    match outcome {
        Outcome::Infeasible => match greedy_plan(Fallback::SolverError("CBC reports infeasible".into()), 0.0) {
            // The warm start fits, so CBC's claim is numerical noise.
            Some(plan) => Ok(plan),
            None => Err(no_plan(true)),
        },
        Outcome::Error(msg) => greedy_plan(Fallback::SolverError(msg), 0.0).ok_or_else(|| no_plan(false)),
        Outcome::Solved { x, integral, stale, optimal, bound } => {
            let bound = bound * model.cost_unit;
            let e = evaluate(problem, &x);
            let warm_eval = warm.as_ref().map(|s| evaluate(problem, s));
            let status = if optimal { Status::Optimal } else { Status::FeasibleOnTimeout };
            let ilp_plan = |x: Vec<bool>, e: crate::Evaluation| {
                let mut plan = Plan::from_evaluation(x, e, Method::Ilp, status, bound, start.elapsed());
                plan.info.model = size;
                plan
            };
            let beats_warm = warm_eval.as_ref().is_none_or(|w| e.cost <= w.cost);
            if integral && e.fits(problem.ceiling) && beats_warm {
                return Ok(ilp_plan(x, e));
            }
            match (warm.clone(), warm_eval) {
                // CBC finished without a better plan than the warm start; its
                // columns are then stale (often the last LP's), and the warm
                // start is its proven-optimal incumbent.
                (Some(w), Some(we)) if optimal && (stale || !integral || !beats_warm) => Ok(ilp_plan(w, we)),
                (Some(_), Some(_)) => {
                    let fallback = if !e.fits(problem.ceiling) {
                        Fallback::ViolatesCeiling { peak: e.peak }
                    } else {
                        Fallback::WorseThanWarmStart { ilp_cost: e.cost }
                    };
                    greedy_plan(fallback, bound).ok_or_else(|| no_plan(false))
                }
                // No warm start: a fitting CBC answer is used even if fractional
                // columns had to be rounded.
                _ if e.fits(problem.ceiling) => Ok(ilp_plan(x, e)),
                // Relaxation infeasible and nothing to fall back on.
                _ if stale && optimal => Err(no_plan(true)),
                _ => Err(no_plan(false)),
            }
        }
    }
}

enum Outcome {
    /// `x`: CBC's columns, rounded; `integral`: whether they were within
    /// 1e-6 of 0/1; `bound`: CBC's best possible objective (scaled).
    /// `stale`: CBC's secondary status says the relaxation was infeasible
    /// or worse than the cutoff (the warm start): the columns are not a plan.
    Solved { x: Vec<bool>, integral: bool, stale: bool, optimal: bool, bound: f64 },
    Infeasible,
    Error(String),
}

/// `p_{i,s}` as a term: a constant or a variable.
#[derive(Clone, Copy, Debug)]
enum Remat {
    Zero,
    /// Equals `x_i` (the segment is at or past `needed_at_i`).
    X(usize),
    Var(usize),
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

/// The compressed model, built from numbers only; solved on any thread.
struct Formulation {
    bytes: Vec<f64>,
    transient: Vec<f64>,
    cost: Vec<f64>,
    cost_unit: f64,
    /// Candidates that get a binary (the others are fixed to 0).
    useful: Vec<bool>,
    /// `(candidate, segment)` of each continuous variable.
    vars: Vec<(usize, usize)>,
    var_of: HashMap<(usize, usize), usize>,
    seg_start: Vec<usize>,
    needed_at: Vec<usize>,
    rmin: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    rows: Vec<Row>,
    size: ModelSize,
}

impl Formulation {
    fn build(problem: &Problem) -> Formulation {
        let cands = &problem.candidates;
        let n = cands.len();
        let t_len = problem.steps();
        let ceiling = problem.ceiling;
        let dependents = dependents(cands);

        // rmin_i: earliest possible rematerialisation (dependents first).
        let mut rmin: Vec<usize> = cands.iter().map(|c| c.needed_at).collect();
        for &i in topological_order(cands).iter().rev() {
            for &k in &dependents[i] {
                rmin[i] = rmin[i].min(rmin[k]);
            }
        }

        // Segments.
        let mut events: Vec<usize> = vec![0];
        for c in cands {
            events.push(c.free_from);
            events.push(c.needed_at);
        }
        events.retain(|&e| e < t_len);
        events.sort_unstable();
        events.dedup();
        let seg_count = events.len();
        let seg_end = |s: usize| if s + 1 < seg_count { events[s + 1] } else { t_len };
        let is_needed: BTreeSet<usize> = cands.iter().map(|c| c.needed_at).collect();
        let seg_of = |step: usize| events.partition_point(|&e| e <= step).saturating_sub(1);

        // Transients that may land at each segment's first step: candidate i
        // at step e with rmin_i <= e <= needed_at_i and e some needed_at.
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

        // Windows opening / closing per segment (window [free_from, needed_at)).
        let mut opens: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
        let mut closes: Vec<Vec<usize>> = vec![Vec::new(); seg_count];
        for (i, c) in cands.iter().enumerate() {
            if c.free_from < c.needed_at && c.bytes > 0 {
                opens[seg_of(c.free_from)].push(i);
                closes[seg_of(c.needed_at)].push(i);
            }
        }

        let unit = cands.iter().map(|c| c.bytes.max(c.transient)).max().unwrap_or(1).max(1) as f64;
        let mut rows = Vec::new();
        let mut memory_rows = 0;
        let mut active: BTreeSet<usize> = BTreeSet::new();
        for s in 0..seg_count {
            for &i in &closes[s] {
                active.remove(&i);
            }
            active.extend(opens[s].iter().copied());
            let start = events[s];
            let base = problem.base_live[start];
            let interior = (start + 1..seg_end(s)).map(|t| problem.base_live[t]).max();
            let max_transient: u64 = may_land[s].iter().map(|&i| cands[i].transient).sum();
            let event_hot = base.saturating_add(max_transient) > ceiling;
            let interior_hot = interior.is_some_and(|m| m > ceiling);
            let covering: Vec<usize> = active.iter().copied().collect();
            let excess = |b: u64| (b as f64 - ceiling as f64) / unit;
            match (event_hot, interior_hot) {
                (false, false) => {}
                (true, true) if may_land[s].is_empty() => {
                    rows.push(Row { excess: excess(base.max(interior.unwrap_or(0))), seg: s, covering, transients: vec![] });
                }
                (true, ih) => {
                    let interior = interior.unwrap_or(0);
                    if ih && interior > base {
                        rows.push(Row { excess: excess(interior), seg: s, covering: covering.clone(), transients: vec![] });
                    }
                    rows.push(Row { excess: excess(base), seg: s, covering, transients: may_land[s].clone() });
                }
                (false, true) => {
                    rows.push(Row { excess: excess(interior.unwrap_or(0)), seg: s, covering, transients: vec![] });
                }
            }
            memory_rows = rows.len();
        }

        // Candidates that cover no kept row never help: fix them to 0.
        let mut useful = vec![false; n];
        for row in &rows {
            for &i in &row.covering {
                useful[i] = true;
            }
        }

        let mut f = Formulation {
            bytes: cands.iter().map(|c| c.bytes as f64 / unit).collect(),
            transient: cands.iter().map(|c| c.transient as f64 / unit).collect(),
            cost_unit: cands.iter().map(|c| c.cost).max().unwrap_or(1).max(1) as f64,
            cost: Vec::new(),
            useful,
            vars: Vec::new(),
            var_of: HashMap::new(),
            seg_start: events.clone(),
            needed_at: cands.iter().map(|c| c.needed_at).collect(),
            rmin,
            dependents,
            rows: Vec::new(),
            size: ModelSize::default(),
        };
        f.cost = cands.iter().map(|c| c.cost as f64 / f.cost_unit).collect();
        // Create the continuous variables every kept row reads, and their
        // dependents' transitively.
        let mut work = Vec::new();
        for row in &rows {
            for &i in row.covering.iter().chain(&row.transients) {
                work.push((i, row.seg));
            }
            if row.seg > 0 {
                for &i in &row.transients {
                    work.push((i, row.seg - 1));
                }
            }
        }
        while let Some((i, s)) = work.pop() {
            if f.var_of.contains_key(&(i, s)) || !f.is_variable(i, s) {
                continue;
            }
            let v = f.vars.len();
            f.vars.push((i, s));
            f.var_of.insert((i, s), v);
            for &k in &f.dependents[i] {
                work.push((k, s));
            }
        }
        f.size = ModelSize {
            steps: t_len,
            segments: seg_count,
            memory_rows,
            binaries: f.useful.iter().filter(|&&u| u).count(),
            continuous: f.vars.len(),
            rows: 0,
        };
        f.rows = rows;
        f
    }

    fn is_variable(&self, i: usize, s: usize) -> bool {
        let e = self.seg_start[s];
        self.useful[i] && self.rmin[i] <= e && e < self.needed_at[i]
    }

    fn remat(&self, i: usize, s: usize) -> Remat {
        if !self.useful[i] {
            return Remat::Zero;
        }
        let e = self.seg_start[s];
        if e >= self.needed_at[i] {
            Remat::X(i)
        } else if e < self.rmin[i] {
            Remat::Zero
        } else {
            match self.var_of.get(&(i, s)) {
                Some(&v) => Remat::Var(v),
                None => Remat::Zero, // unreachable after build: every read is created
            }
        }
    }

    /// `warm`: a fitting recompute set and its rematerialisation steps.
    fn solve(&self, warm: Option<&(Vec<bool>, Vec<Option<usize>>)>, options: &IlpOptions) -> Outcome {
        let n = self.useful.len();
        let mut pv = ProblemVariables::new();
        let x: Vec<Option<Variable>> = (0..n)
            .map(|i| self.useful[i].then(|| pv.add(variable().binary())))
            .collect();
        let p: Vec<Variable> = self.vars.iter().map(|_| pv.add(variable().min(0.0).max(1.0))).collect();
        let x_term = |i: usize| -> Expression { x[i].map(Expression::from).unwrap_or_default() };
        let term = |r: Remat| -> Expression {
            match r {
                Remat::Zero => Expression::default(),
                Remat::X(i) => x_term(i),
                Remat::Var(v) => p[v].into(),
            }
        };
        let objective: Expression = (0..n).filter_map(|i| x[i].map(|v| self.cost[i] * v)).sum();
        let mut model = pv.minimise(objective).using(coin_cbc);
        model.set_parameter("log", "0");
        model.set_parameter("sec", &format!("{:.3}", options.time_limit.as_secs_f64()));
        // CBC 2.10's integer preprocessing with a MIP start can declare a
        // suboptimal plan optimal (seen on a 3-binary model): keep it off.
        model.set_parameter("preprocess", "off");
        if options.relative_gap > 0.0 {
            model.set_parameter("ratioGap", &options.relative_gap.to_string());
        }

        let mut rows = 0;
        for (v, &(i, s)) in self.vars.iter().enumerate() {
            let pi: Expression = p[v].into();
            model.add_constraint(pi.clone().leq(x_term(i)));
            let mut upper = Expression::default();
            for &k in &self.dependents[i] {
                let pk = self.remat(k, s);
                if let Remat::Zero = pk {
                    continue;
                }
                model.add_constraint(pi.clone().geq(term(pk) + x_term(i) - 1.0));
                upper += term(pk);
                rows += 1;
            }
            model.add_constraint(pi.leq(upper));
            rows += 2;
        }
        for row in &self.rows {
            let mut lhs = Expression::default();
            for &i in &row.covering {
                if self.useful[i] {
                    lhs += self.bytes[i] * (x_term(i) - term(self.remat(i, row.seg)));
                }
            }
            for &i in &row.transients {
                if self.useful[i] {
                    let before = if row.seg > 0 { term(self.remat(i, row.seg - 1)) } else { Expression::default() };
                    lhs -= self.transient[i] * (term(self.remat(i, row.seg)) - before);
                }
            }
            model.add_constraint(lhs.geq(row.excess));
            rows += 1;
        }
        let _ = rows;

        if let Some((warm, remat)) = warm.filter(|_| options.warm_start) {
            let mut init: Vec<(Variable, f64)> = Vec::new();
            for i in 0..n {
                if let Some(v) = x[i] {
                    init.push((v, if warm[i] { 1.0 } else { 0.0 }));
                }
            }
            for (v, &(i, s)) in self.vars.iter().enumerate() {
                let on = remat[i].is_some_and(|r| r <= self.seg_start[s]);
                init.push((p[v], if on { 1.0 } else { 0.0 }));
            }
            model = model.with_initial_solution(init);
        }

        for (k, v) in &options.cbc_parameters {
            model.set_parameter(k, v);
        }
        match model.solve() {
            Ok(sol) => {
                let optimal = matches!(sol.status(), SolutionStatus::Optimal);
                let bound = sol.model().best_possible_value();
                let xs: Vec<bool> = (0..n).map(|i| x[i].is_some_and(|v| sol.value(v) > 0.5)).collect();
                let integral = x.iter().flatten().all(|&v| {
                    let value = sol.value(v);
                    (value - value.round()).abs() <= 1e-6
                });
                let bound = if bound.is_finite() { bound } else { 0.0 };
                let stale = matches!(sol.model().secondary_status(), SecondaryStatus::LinearRelaxationInfeasible);
                Outcome::Solved { x: xs, integral, stale, optimal, bound }
            }
            Err(ResolutionError::Infeasible) => Outcome::Infeasible,
            Err(e) => Outcome::Error(e.to_string()),
        }
    }
}
