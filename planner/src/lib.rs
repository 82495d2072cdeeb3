//! The recompute planner as a library: `analyse(Graph, &AnalyseOptions) -> Analysis`, then
//! `plan(&Analysis, &PlanOptions) -> Outcome`.
//!
//! # Rooms, in the order data flows
//!
//! - `analysis.rs`: [`analyse`], the analysis of one graph (types, phases, ORT's schedule, the
//!   simulation, the device need under the profile, the ledger).
//! - `options.rs`: [`PlanOptions`] (the ceiling, the costs, the threads, the trace sink, the
//!   limits), [`SearchOptions`], and the deadline every search reads.
//! - `plan.rs`: [`plan`], the first pass, then the ladder of tighter ceilings below it, then
//!   the refusal probes.
//! - `variants.rs`: the zero-FLOP variant race of the first pass, with block checkpointing's
//!   cut beside it.
//! - `leaves.rs`: the leaves' order searched for the arena (a variant).
//! - `blocks.rs`: block checkpointing as a start, cut with the simulator in the loop.
//! - `search/`: [`search`], one call per stage: the ILP rounds (`rounds.rs`), the climbs
//!   (`climb.rs`), the cut (`cut.rs`).
//! - `oracle.rs`: the [`Oracle`] every search asks, [`Simulator`] on a graph, [`TableOracle`]
//!   on plain numbers.
//! - `par.rs`: trials on threads, judged in order; the trial budget and the pass's steps.
//! - `outcome.rs`: what a plan returns ([`Outcome`], [`Rewritten`], [`Diagnosis`],
//!   [`IlpReport`]), `Serialize`.
//! - `baselines.rs`: [`baselines`] (no recompute, per-block, per-layer, recompute-all) and
//!   [`plan_at`], plans on the same axes.
//! - `trace.rs`: the typed trace [`Event`]s and their [`Trace`] sink.
//!
//! The lower rooms (analysis, options, outcome, trace, par, oracle, leaves, blocks, search)
//! never import from `plan.rs` or `variants.rs`.
//!
//! # How a plan is found
//!
//! 1. **ILP rounds** ([`search`], stage 1): `ckpt_solver`'s ILP on the linear model the
//!    candidates make, corrected by the oracle. Each round's plan is run by the oracle; what
//!    the run held beyond the model (per step) and where a dropped activation's buffer was
//!    really released are learnt, and the next round solves the corrected model. Where the
//!    rounds stall over the ceiling, the budget is tightened by the overshoot; with a
//!    tightened plan that fits in hand, the climbs (stage 2) get [`variant_trials`]
//!    simulations, and where they find no fit that plan is cut (stage 3).
//! 2. **Search**: hill-climbs with the oracle in the loop, from the rounds' plans, from no
//!    recompute, then from the ILP's optima at tighter budgets. Labelled
//!    [`ckpt_solver::Method::Search`]: no optimality bound.
//! 3. **Cut**: drop the recomputes the fit does not need, swap expensive ones for cheaper.
//! 4. **Zero-FLOP variants** (`variants.rs`): the graph with its leaves (the loss, each
//!    gradient) written in the order their inputs become ready, and where that does not fit,
//!    in an order searched for the profile's arena (`leaves.rs`: a hill-climb over the
//!    leaves' places, each trial a schedule, a simulation and the arena's bisection, counted
//!    against a step budget; where the gradients are computed decides where the BFC arena
//!    places them, and a late large request can find no room though far less is in use); the
//!    graph with its backward-only terms moved to run just before their readers, with its
//!    constant reshape targets guarded (`ckpt_passes::guards`: ORT's planner then keeps the
//!    buffers computed from them out of reuse), and with both, are planned too where the
//!    graph as given has no plan or one that adds FLOPs; the plan that adds the fewest FLOPs
//!    wins; a reordered or guarded graph that fits as it is, is the plan (no search). Once a
//!    plan is in hand, a variant whose linear model's optimum costs over
//!    [`OUTCLASSED_FACTOR`] times it is not searched, and one that is gets
//!    [`variant_trials`] simulations.
//! 5. **Block checkpointing, cut** (`blocks.rs`): block checkpointing at the residual
//!    stream's boundaries, on the reordered graph and its guarded variant; a plan that fits is
//!    cut (whole blocks, then single recomputes, most expensive first, each drop kept while the
//!    run fits) where the candidate search finds nothing adding under 5% of a step. Labelled
//!    [`ckpt_solver::Method::BlockCut`]: no optimality bound.
//!
//! 6. **The ladder** (`plan.rs`): a plan that fits a tighter ceiling fits this one, and the
//!    search is not monotone in the ceiling, so below a plan that adds anything (or a
//!    refusal) the whole percents of the given graph's total are planned in turn, each with
//!    the plan in hand to beat, until one has no plan (at most
//!    [`PlanOptions::ladder_rungs`]); the cheapest plan that runs in the arena the ceiling
//!    records is the answer ([`Rewritten::found_at_ceiling_bytes`]).
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
//!   a proven floor; [`Diagnosis::dominant_ledger_line`] is that plan's ledger's.
//! - The plan at a ceiling adds no more than the plan of any rung of the ladder below it that
//!   the ladder reaches (FLOPs, or [`PlanOptions::costs`]' unit).
//! - No I/O: the trace is typed [`Event`]s sent to [`PlanOptions::trace`], progress goes to
//!   the [`PlanOptions::progress`] callback; errors are typed ([`PlanError`]); nothing panics
//!   on user input. The CLI parses, orchestrates, writes and prints.

mod again;
mod analysis;
mod baselines;
mod blocks;
mod error;
mod head;
mod leaves;
mod options;
mod oracle;
mod outcome;
mod par;
mod plan;
mod search;
mod trace;
mod variants;

pub use analysis::{analyse, step_flops, with_inferred_types, AnalyseOptions, Analysis};
pub use baselines::{
    baselines, evaluate_plan, evaluate_set, per_block_plan, plan_at, KnownPlan, Planned,
    NO_RECOMPUTE, PER_BLOCK, PER_LAYER, RECOMPUTE_ALL,
};
pub use error::PlanError;
pub use options::{
    default_threads, recorded_metadata, variant_trials, Costs, PlanOptions, Progress,
    SearchOptions, LADDER_RUNGS, MAX_TRIALS, OUTCLASSED_FACTOR, PASS_STEPS, VARIANT_STEPS,
    VARIANT_TRIALS,
};
pub use oracle::{patch_flops, plan_from_set, Oracle, RunTrace, Simulator, TableOracle};
pub use outcome::{
    human, method_label, Diagnosis, DiagnosisKind, IlpReport, IlpRound, LossHeadChunks, Moves,
    Outcome, RewriteCounts, Rewritten, TiedGradients,
};
pub use plan::plan;
pub use search::{search, Found, SearchInput, Searched};
pub use trace::{Event, IdleBuffer, PeakHeld, Span, Trace, VariantKind, VariantResult};
