//! CBC's model of one round, built from a [`Formulation`] over the
//! [`Skeleton`]: the columns, CBC's parameters, the rematerialisation bounds,
//! the absence chain, the memory rows and the warm start, added in that
//! order; and CBC's answer read back as a [`Cbc`]. CBC's columns are not
//! trusted on their own: [`Cbc::Solved`] says when they are stale.

use std::collections::HashMap;
use std::time::Duration;

use coin_cbc::raw::SecondaryStatus;
use good_lp::solvers::coin_cbc::{coin_cbc, CoinCbcProblem, CoinCbcSolution};
use good_lp::{
    variable, Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel,
    Variable, WithInitialSolution,
};

use super::formulation::{Formulation, Remat};
use super::skeleton::Skeleton;
use super::IlpOptions;

/// What one CBC solve returned.
pub(super) enum Cbc {
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

/// The model's columns: `x_i` (a binary per useful candidate, `None` for
/// the others), `p` (one per variable of the formulation) and `w_s` (the
/// absent bytes of each kept segment).
struct Columns {
    x: Vec<Option<Variable>>,
    p: Vec<Variable>,
    w: Vec<Variable>,
}

impl Columns {
    /// Declares the columns, in the order `x`, `p`, `w`.
    fn declare(f: &Formulation, sk: &Skeleton, pv: &mut ProblemVariables) -> Columns {
        let x = (0..sk.useful.len())
            .map(|i| sk.useful[i].then(|| pv.add(variable().binary())))
            .collect();
        let p = f
            .vars
            .iter()
            .map(|_| pv.add(variable().min(0.0).max(1.0)))
            .collect();
        let w = sk
            .kept
            .iter()
            .map(|_| pv.add(variable().min(0.0)))
            .collect();
        Columns { x, p, w }
    }

    /// `x_i`, or 0 for a candidate without a binary.
    fn x_term(&self, i: usize) -> Expression {
        self.x[i].map(Expression::from).unwrap_or_default()
    }

    /// `p_{i,s}` as an expression (a truncated value reads as 0).
    fn term(&self, r: Remat) -> Expression {
        match r {
            Remat::Zero | Remat::Truncated => Expression::default(),
            Remat::X(i) => self.x_term(i),
            Remat::Var(v) => self.p[v].into(),
        }
    }
}

impl Formulation {
    /// Builds CBC's model of this round and solves it within `time_limit`,
    /// from `warm` (the greedy plan and its rematerialisation steps) when
    /// [`IlpOptions::warm_start`] asks for it.
    pub(super) fn solve(
        &self,
        sk: &Skeleton,
        warm: Option<&(Vec<bool>, Vec<Option<usize>>)>,
        time_limit: Duration,
        options: &IlpOptions,
    ) -> Cbc {
        let mut pv = ProblemVariables::new();
        let cols = Columns::declare(self, sk, &mut pv);
        let objective: Expression = (0..sk.useful.len())
            .filter_map(|i| cols.x[i].map(|v| sk.cost[i] * v))
            .sum();
        let mut model = pv.minimise(objective).using(coin_cbc);
        configure(&mut model, sk, time_limit, options);
        self.bound_remat(&mut model, sk, &cols);
        let covered = chain_absence(&mut model, sk, &cols);
        self.add_memory_rows(&mut model, sk, &cols, &covered);
        if let Some((warm, remat)) = warm.filter(|_| options.warm_start) {
            model = model.with_initial_solution(self.warm_start(sk, &cols, warm, remat));
        }
        read_answer(model.solve(), sk, &cols, options)
    }

    /// Bounds each `p_{i,s}` by its dependents: `p_{i,s} >= p_{k,s} + x_i - 1`
    /// always; where it is bounded, also `p_{i,s} <= x_i`, `p_{i,s} <= Σ_k
    /// p_{k,s}` (when exact) and `p_{i,s} >= p_{i,s-1}`.
    fn bound_remat(&self, model: &mut CoinCbcProblem, sk: &Skeleton, cols: &Columns) {
        for (v, &(i, s)) in self.vars.iter().enumerate() {
            let pi: Expression = cols.p[v].into();
            if self.bounded[v] {
                model.add_constraint(pi.clone().leq(cols.x_term(i)));
            }
            let mut upper = Expression::default();
            for &k in &sk.dependents[i] {
                let pk = self.remat(sk, k, s);
                if matches!(pk, Remat::Zero | Remat::Truncated) {
                    continue;
                }
                model.add_constraint(pi.clone().geq(cols.term(pk) + cols.x_term(i) - 1.0));
                upper += cols.term(pk);
            }
            if self.bounded[v] && self.exact[v] {
                model.add_constraint(pi.clone().leq(upper));
            }
            if s > 0 && self.bounded[v] {
                if let Some(&w) = self.var_of.get(&(i, s - 1)) {
                    model.add_constraint(pi.geq(cols.p[w]));
                }
            }
        }
    }

    /// One memory row per [`Row`](super::skeleton::Row): the segment's absent
    /// bytes, less the bytes back by then, less the transients landing at
    /// its first step, cover its excess.
    fn add_memory_rows(
        &self,
        model: &mut CoinCbcProblem,
        sk: &Skeleton,
        cols: &Columns,
        covered: &HashMap<usize, usize>,
    ) {
        for row in &sk.rows {
            let mut lhs: Expression = cols.w[covered[&row.seg]].into();
            for &i in &row.covering {
                if sk.useful[i] {
                    lhs -= sk.bytes[i] * cols.term(self.remat(sk, i, row.seg));
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
                    lhs -= sk.transient[i] * (cols.term(now) - cols.term(before));
                }
            }
            model.add_constraint(lhs.geq(row.excess));
        }
    }

    /// The warm start's value of every column: `x` from the plan, `p` from
    /// its rematerialisation steps, `w` from its absent bytes.
    fn warm_start(
        &self,
        sk: &Skeleton,
        cols: &Columns,
        warm: &[bool],
        remat: &[Option<usize>],
    ) -> Vec<(Variable, f64)> {
        let mut init: Vec<(Variable, f64)> = Vec::new();
        for (i, &x) in cols.x.iter().enumerate() {
            if let Some(v) = x {
                init.push((v, if warm[i] { 1.0 } else { 0.0 }));
            }
        }
        for (v, &(i, s)) in self.vars.iter().enumerate() {
            let back = remat[i].is_some_and(|r| r <= sk.seg_start[s]);
            init.push((cols.p[v], if back { 1.0 } else { 0.0 }));
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
            init.push((cols.w[k], absent));
            k += 1;
        }
        init
    }
}

/// CBC's parameters for every round, then [`IlpOptions::cbc_parameters`].
fn configure(
    model: &mut CoinCbcProblem,
    sk: &Skeleton,
    time_limit: Duration,
    options: &IlpOptions,
) {
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
}

/// Defines `w_s = Σ bytes_i x_i` over the windows covering kept segment `s`
/// as a chain of differences from the previous kept segment (windows opened
/// minus windows closed): a dense sum per row made the LP ~1.5M nonzeros at
/// 48 layers. Returns each kept segment's index into `w`.
fn chain_absence(
    model: &mut CoinCbcProblem,
    sk: &Skeleton,
    cols: &Columns,
) -> HashMap<usize, usize> {
    let mut covered: HashMap<usize, usize> = HashMap::new();
    let mut previous: &[usize] = &[];
    for (idx, row) in sk.rows.iter().enumerate() {
        if covered.contains_key(&row.seg) {
            continue;
        }
        let k = covered.len();
        covered.insert(row.seg, k);
        let mut chain: Expression = cols.w[k].into();
        if k > 0 {
            chain -= cols.w[k - 1];
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
                    chain += sk.bytes[pa] * cols.x_term(pa);
                    a += 1;
                }
                (_, Some(&cb)) => {
                    chain -= sk.bytes[cb] * cols.x_term(cb);
                    b += 1;
                }
                _ => unreachable!(),
            }
        }
        model.add_constraint(chain.eq(0.0));
        previous = current;
    }
    covered
}

/// CBC's answer as a [`Cbc`]: the binaries rounded, whether they were
/// integral, whether the columns are stale, the bound in FLOPs.
fn read_answer(
    answer: Result<CoinCbcSolution, ResolutionError>,
    sk: &Skeleton,
    cols: &Columns,
    options: &IlpOptions,
) -> Cbc {
    match answer {
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
            let x: Vec<bool> = cols
                .x
                .iter()
                .map(|v| v.is_some_and(|v| sol.value(v) > 0.5))
                .collect();
            let integral = cols.x.iter().flatten().all(|&v| {
                let value = sol.value(v);
                (value - value.round()).abs() <= 1e-6
            });
            let stale = matches!(
                sol.model().secondary_status(),
                SecondaryStatus::LinearRelaxationInfeasible
            );
            Cbc::Solved {
                x,
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
