//! What a solve returns: [`Plan`] with its [`SolveInfo`], or [`SolveError`].

use std::time::Duration;

use crate::{evaluate, Evaluation, Problem};

/// Which activations to recompute and where, with how the plan was found.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `recompute[i]` for every candidate.
    pub recompute: Vec<bool>,
    /// Rematerialisation step of each recomputed candidate (`None` if kept).
    pub remat_at: Vec<Option<usize>>,
    /// Peak bytes of the plan per [`evaluate`] (`<= ceiling`).
    pub peak: u64,
    pub peak_step: usize,
    /// Added FLOPs.
    pub cost: u64,
    pub info: SolveInfo,
}

/// Who found the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    NoRecompute,
    RecomputeAll,
    PerBlock,
    Greedy,
    BruteForce,
    Ilp,
    /// A search with a simulator in the loop (the caller's), from the ILP's plans: each trial
    /// judged by the simulation, not the linear model. No optimality bound.
    Search,
    /// Block checkpointing at the graph's residual-stream boundaries, then cut with the
    /// simulator in the loop (whole blocks, then single recomputes, dropped while the plan
    /// fits). No optimality bound.
    BlockCut,
}

impl std::fmt::Display for Method {
    /// The method as a reader says it: `ILP`, `search`, `greedy`, …
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::NoRecompute => "no recompute",
            Method::RecomputeAll => "recompute all",
            Method::PerBlock => "per-block checkpointing",
            Method::Greedy => "greedy",
            Method::BruteForce => "brute force",
            Method::Ilp => "ILP",
            Method::Search => "search with the simulator in the loop",
            Method::BlockCut => "block checkpointing cut with the simulator in the loop",
        })
    }
}

/// How far the plan is from proven optimal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Proven minimum cost.
    Optimal,
    /// Proven within the requested relative gap of the minimum (`IlpOptions::relative_gap`):
    /// as reproducible as `Optimal` (no clock involved), with `gap` saying how close.
    WithinGap,
    /// The best feasible plan found when a limit stopped the search.
    FeasibleOnTimeout,
    /// A heuristic's plan: fits, no optimality claim.
    Heuristic,
    /// The schedule already fits: nothing to recompute.
    NoRecomputeNeeded,
}

/// Why the ILP returned another method's plan instead of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The solve thread did not answer within the time limit plus slack.
    Watchdog,
    /// The time limit ended the search before a fitting answer.
    TimeLimit,
    /// CBC explored its node limit ([`crate::IlpOptions::max_nodes`]) without a proof.
    NodeLimit,
    /// A deepened formulation had `continuous` columns, over
    /// [`crate::IlpOptions::max_continuous`]: it was not solved.
    ModelLimit { continuous: usize, limit: usize },
    /// CBC answered with an error (the message) or no solution.
    SolverError(String),
    /// CBC's values, re-evaluated, exceed the ceiling.
    ViolatesCeiling { peak: u64 },
    /// CBC's plan costs more than the warm start (it stopped early).
    WorseThanWarmStart { ilp_cost: u64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct SolveInfo {
    pub method: Method,
    pub status: Status,
    /// Cost of the returned plan (FLOPs).
    pub objective: u64,
    /// Proven lower bound on the optimal cost (FLOPs); equals `objective`
    /// when optimal, 0 when nothing better is known.
    pub bound: f64,
    /// `(objective - bound) / objective`, 0 when optimal or objective is 0.
    pub gap: f64,
    pub wall: Duration,
    /// Set when the ILP returned its warm start: the plan is that method's.
    pub fallback: Option<Fallback>,
    /// Size of the ILP actually solved (0 for other methods).
    pub model: ModelSize,
}

/// Size of the compressed ILP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelSize {
    pub steps: usize,
    /// Segments between consecutive event steps.
    pub segments: usize,
    /// Memory rows kept after dropping those that can never exceed the ceiling.
    pub memory_rows: usize,
    /// Candidates that can help at some kept row (binary variables).
    pub binaries: usize,
    /// Continuous "rematerialised by segment s" variables (last round).
    pub continuous: usize,
    /// Of those, the ones whose value may be too low (a dependent beyond
    /// the modelled depth).
    pub truncated: usize,
    /// Refinement rounds (CBC solves).
    pub rounds: usize,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("candidate {candidate} ({label:?}): {reason}")]
    InvalidProblem {
        candidate: usize,
        label: String,
        reason: String,
    },
    /// Proven: no recompute set brings the peak under the ceiling.
    #[error(
        "no recompute set fits the ceiling of {ceiling} bytes: the lowest peak found is \
         {lowest_peak} bytes at step {at_step}; raise the ceiling or allow more candidates"
    )]
    Infeasible {
        ceiling: u64,
        lowest_peak: u64,
        at_step: usize,
    },
    /// A heuristic's plan does not fit (others may).
    #[error("{method:?} does not fit the ceiling of {ceiling} bytes: peak {peak} bytes at step {at_step}")]
    DoesNotFit {
        method: Method,
        ceiling: u64,
        peak: u64,
        at_step: usize,
    },
    /// The search stopped before finding any plan that fits (nor proving none does).
    #[error("no plan found within {seconds} s (lowest peak seen {lowest_peak} bytes at step {at_step}); raise the time limit")]
    NoPlanWithinTimeLimit {
        seconds: f64,
        lowest_peak: u64,
        at_step: usize,
    },
    /// CBC explored its node limit ([`crate::IlpOptions::max_nodes`]) without finding a plan
    /// that fits (nor proving none does): a count, not the clock.
    #[error("no plan found within {nodes} branch-and-bound nodes (lowest peak seen {lowest_peak} bytes at step {at_step})")]
    NoPlanWithinNodeLimit {
        nodes: u64,
        lowest_peak: u64,
        at_step: usize,
    },
    /// No plan costs at most [`crate::IlpOptions::cutoff`]: CBC proved a relaxation of the
    /// problem has none.
    #[error("no plan costs at most {cutoff} FLOPs (proven on a relaxation of the problem)")]
    NoPlanWithinCutoff { cutoff: u64 },
    /// The refinement needed a formulation over [`crate::IlpOptions::max_continuous`]
    /// continuous columns without having found a plan that fits: a count, not the clock.
    #[error("no plan found within {limit} continuous columns (the next model needed {continuous}; lowest peak seen {lowest_peak} bytes at step {at_step})")]
    NoPlanWithinModelLimit {
        continuous: usize,
        limit: usize,
        lowest_peak: u64,
        at_step: usize,
    },
    #[error("brute force over {candidates} candidates is too large (limit {limit})")]
    TooLarge { candidates: usize, limit: usize },
}

impl SolveInfo {
    /// How the plan was found, as a reader says it: the method, and what is proven about it
    /// (`ILP, proven optimal`, `ILP, within 0.40% of optimal`, `search with the simulator in
    /// the loop (no optimality bound)`). A heuristic's or a search's plan never claims a gap.
    pub fn label(&self) -> String {
        let m = self.method;
        match (m, self.status) {
            (Method::Search | Method::BlockCut, _) | (_, Status::Heuristic) => {
                format!("{m} (no optimality bound)")
            }
            (_, Status::NoRecomputeNeeded) => "no recompute needed".into(),
            (_, Status::Optimal) => format!("{m}, proven optimal"),
            (_, Status::WithinGap) => {
                format!("{m}, within {:.2}% of optimal", 100.0 * self.gap)
            }
            (_, Status::FeasibleOnTimeout) => format!(
                "{m}, best found when the time limit stopped it (within {:.2}% of optimal)",
                100.0 * self.gap
            ),
        }
    }
}

impl Plan {
    /// The plan of a given recompute set under the model ([`evaluate`]), whether or not it
    /// fits: labelled `method` with [`Status::Heuristic`] (no optimality claim). For callers
    /// that choose sets themselves (a search, a baseline, a test).
    pub fn for_set(problem: &Problem, set: Vec<bool>, method: Method) -> Plan {
        let eval = evaluate(problem, &set);
        let mut plan =
            Plan::from_evaluation(set, eval, method, Status::Heuristic, 0.0, Duration::ZERO);
        plan.info.gap = 1.0;
        plan
    }

    /// A plan from a recompute set; the caller has checked it fits.
    pub(crate) fn from_evaluation(
        recompute: Vec<bool>,
        eval: Evaluation,
        method: Method,
        status: Status,
        bound: f64,
        wall: Duration,
    ) -> Plan {
        let objective = eval.cost;
        let bound = if status == Status::Optimal || status == Status::NoRecomputeNeeded {
            objective as f64
        } else {
            bound.min(objective as f64).max(0.0)
        };
        Plan {
            recompute,
            remat_at: eval.remat_at,
            peak: eval.peak,
            peak_step: eval.peak_step,
            cost: objective,
            info: SolveInfo {
                method,
                status,
                objective,
                bound,
                gap: gap(objective, bound),
                wall,
                fallback: None,
                model: ModelSize::default(),
            },
        }
    }

    /// Re-evaluates this plan against `problem`; true when it matches and fits.
    pub fn check(&self, problem: &Problem) -> bool {
        let e = evaluate(problem, &self.recompute);
        e.peak == self.peak
            && e.cost == self.cost
            && e.remat_at == self.remat_at
            && e.fits(problem.ceiling)
    }
}

pub(crate) fn gap(objective: u64, bound: f64) -> f64 {
    if objective == 0 {
        0.0
    } else {
        ((objective as f64 - bound) / objective as f64).max(0.0)
    }
}
