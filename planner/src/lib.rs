//! The recompute planner as a library: `analyse(Graph, &AnalyseOptions) -> Analysis`, then
//! `plan(&Analysis, &PlanOptions) -> Outcome`.
//!
//! # How a plan is found
//!
//! 1. **ILP rounds** ([`search`], step 1): `ckpt_solver`'s ILP on the linear model the
//!    candidates make, corrected by the oracle. Each round's plan is run by the oracle; what
//!    the run held beyond the model (per step) and where a dropped activation's buffer was
//!    really released are learnt, and the next round solves the corrected model. Where the
//!    rounds stall over the ceiling, the budget is tightened by the overshoot; with a
//!    tightened plan that fits in hand, the climbs (step 2) get [`variant_trials`]
//!    simulations, and where they find no fit that plan is cut (step 3).
//! 2. **Search**: hill-climbs with the oracle in the loop, from the rounds' plans, from no
//!    recompute, then from the ILP's optima at tighter budgets. Labelled
//!    [`ckpt_solver::Method::Search`]: no optimality bound.
//! 3. **Cut**: drop the recomputes the fit does not need, swap expensive ones for cheaper.
//! 4. **Zero-FLOP variants**: the graph with its leaves (the loss, each gradient) written in
//!    the order their inputs become ready, and where that does not fit, in an order searched
//!    for the profile's arena (`leaves.rs`: a hill-climb over the leaves' places, each trial
//!    a schedule, a simulation and the arena's bisection, counted against a step budget;
//!    where the gradients are computed decides where the BFC arena places them, and a late
//!    large request can find no room though far less is in use); the graph with its
//!    backward-only terms moved to run just before their readers, with its constant reshape targets guarded (`ckpt_passes::guards`: ORT's
//!    planner then keeps the buffers computed from them out of reuse), and with both, are
//!    planned too where the graph as given has no plan or one that adds FLOPs; the plan that
//!    adds the fewest FLOPs wins; a reordered or guarded graph that fits as it is, is the plan
//!    (no search). Once a plan is in hand, a variant whose linear model's
//!    optimum costs over [`OUTCLASSED_FACTOR`] times it is not searched, and one that is gets
//!    [`variant_trials`] simulations.
//! 5. **Block checkpointing, cut** (`blocks.rs`): block checkpointing at the residual
//!    stream's boundaries, on the reordered graph and its guarded variant; a plan that fits is
//!    cut (whole blocks, then single recomputes, most expensive first, each drop kept while the
//!    run fits) where the candidate search finds nothing adding under 5% of a step. Labelled
//!    [`ckpt_solver::Method::BlockCut`]: no optimality bound.
//!
//! ILP rounds stop at a node count, not a clock ([`ckpt_solver::IlpOptions::max_nodes`]):
//! the plan is the same on a loaded machine.
//!
//! # Rules
//!
//! - The planner sees the truth only through an [`Oracle`]: [`Simulator`] (rewrite, apply, ORT's
//!   order, the simulated arena under the deployment profile) on a graph, [`TableOracle`] on
//!   plain numbers. A plan is reported as fitting only when the oracle's total of its
//!   realised rewrite is within the ceiling.
//! - The plan depends on the input and the options only: trials are counted, never timed
//!   (up to [`PlanOptions::max_trials`], [`MAX_TRIALS`] by default and [`variant_trials`] for a
//!   zero-FLOP variant searched once a plan is in hand; a climb's move is simulated whole or
//!   not at all); trials run on [`PlanOptions::threads`] threads are judged in order, so the
//!   plan and its trial count are the same on any number. The time limit is the one
//!   exception: it stops a batch in flight, and an outcome says when it stopped anything.
//! - An oracle may answer a bounded question more cheaply than the total
//!   ([`Oracle::peak_below`], [`Oracle::fits`]); its answers must be the total's.
//! - [`Diagnosis::lowest_reachable_total_bytes`] is a total some recompute set really reaches
//!   under the oracle (recomputing every candidate, the search's best, or no recompute), not
//!   a proven floor.
//! - No I/O but the debug trace ([`PlanOptions::debug`], stderr) and the
//!   [`PlanOptions::progress`] callback; errors are typed ([`PlanError`]); nothing panics on
//!   user input. The CLI parses, orchestrates, writes and prints.

mod analysis;
mod blocks;
mod error;
mod leaves;
mod oracle;
mod plan;

pub use analysis::{analyse, step_flops, with_inferred_types, AnalyseOptions, Analysis};
pub use error::PlanError;
pub use oracle::{patch_flops, plan_from_set, Oracle, RunTrace, Simulator, TableOracle};
pub use plan::{
    default_threads, plan, recorded_metadata, search, variant_trials, Costs, Diagnosis,
    DiagnosisKind, Found, IlpReport, IlpRound, Outcome, PlanOptions, Progress, RewriteCounts,
    Rewritten, SearchInput, SearchOptions, Searched, MAX_TRIALS, OUTCLASSED_FACTOR, PASS_STEPS,
    VARIANT_STEPS, VARIANT_TRIALS,
};
