//! The recompute planner as a library: `analyse(Graph, &AnalyseOptions) -> Analysis`, then
//! `plan(&Analysis, &PlanOptions) -> Outcome`.
//!
//! # How a plan is found
//!
//! 1. **ILP rounds** ([`search`], step 1): `ckpt_solver`'s ILP on the linear model the
//!    candidates make, corrected by the oracle. Each round's plan is run by the oracle; what
//!    the run held beyond the model (per step) and where a dropped activation's buffer was
//!    really released are learnt, and the next round solves the corrected model.
//! 2. **Search**: hill-climbs with the oracle in the loop, from the rounds' plans, from no
//!    recompute, then from the ILP's optima at tighter budgets. Labelled
//!    [`ckpt_solver::Method::Search`]: no optimality bound.
//! 3. **Cut**: drop the recomputes the fit does not need, swap expensive ones for cheaper.
//! 4. **Lowered terms**: where the graph as given has no plan, its backward-only terms are
//!    moved to run just before their readers (zero FLOPs) and it is planned again.
//!
//! # Rules
//!
//! - The planner sees the truth only through an [`Oracle`]: [`Simulator`] (rewrite, apply, ORT's
//!   order, the simulated arena under the deployment profile) on a graph, [`TableOracle`] on
//!   plain numbers. A plan is reported as fitting only when the oracle's total of its
//!   realised rewrite is within the ceiling.
//! - The plan depends on the input and the options only: trials are counted, never timed
//!   (up to [`MAX_TRIALS`]); trials run on [`PlanOptions::threads`] threads are judged in
//!   order, so the plan and its trial count are the same on any number. The time limit is the
//!   one exception, and an outcome says when it stopped anything.
//! - [`Diagnosis::lowest_reachable_total_bytes`] is a total some recompute set really reaches
//!   under the oracle (recomputing every candidate, the search's best, or no recompute), not
//!   a proven floor.
//! - No I/O but the debug trace ([`PlanOptions::debug`], stderr) and the
//!   [`PlanOptions::progress`] callback; errors are typed ([`PlanError`]); nothing panics on
//!   user input. The CLI parses, orchestrates, writes and prints.

mod analysis;
mod error;
mod oracle;
mod plan;

pub use analysis::{analyse, step_flops, with_inferred_types, AnalyseOptions, Analysis};
pub use error::PlanError;
pub use oracle::{plan_from_set, Oracle, RunTrace, Simulator, TableOracle};
pub use plan::{
    default_threads, plan, search, Costs, Diagnosis, DiagnosisKind, Found, IlpReport, IlpRound,
    Outcome, PlanOptions, Progress, RewriteCounts, Rewritten, SearchInput, SearchOptions, Searched,
    MAX_TRIALS,
};
