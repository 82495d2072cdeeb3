//! `Problem -> Plan`: which activations to recompute so that peak memory fits
//! a ceiling at minimal added FLOPs, decided from numbers only.
//!
//! # The model (the contract with the caller)
//!
//! The caller has simulated a fixed schedule of `T = base_live.len()` steps
//! and knows `base_live[t]`, the bytes live at step `t` with no recompute.
//! Each [`Candidate`] is an activation that may be dropped from `free_from`
//! (after its last forward use) and recomputed for `needed_at` (its first
//! backward use), at `cost` FLOPs, reading the candidates in `deps`, with
//! `transient` extra bytes live while it is recomputed.
//!
//! For a recompute set `R` ([`evaluate`] is the one implementation):
//!
//! ```text
//! r_i     = min(needed_at_i, min { r_k : k in R, i in deps_k })      for i in R (least fixpoint)
//! live(t) = base_live[t] - Σ { bytes_i : i in R, free_from_i <= t < r_i }
//!                        + Σ { transient_i : i in R, t == r_i }
//! peak    = max_t live(t)        cost = Σ { cost_i : i in R }        fits iff peak <= ceiling
//! ```
//!
//! `r_i` is the rematerialisation step: a recomputed dep is back no later
//! than anything recomputed from it, and stays live from then on.
//!
//! Valid input ([`Problem::validate`]): `free_from <= needed_at < T`, deps
//! in range and acyclic.
//!
//! # Solvers
//!
//! All take `&Problem` and return `Result<Plan, SolveError>`: the ILP
//! ([`solve_ilp`], exact, CBC; the formulation is on [`solve_ilp_with`]),
//! and the baselines [`solve_none`],
//! [`solve_all`], [`solve_per_block`], [`solve_greedy`],
//! [`solve_brute_force`] (exact, ≤ 20 candidates). Every returned plan fits
//! per [`evaluate`]; [`SolveInfo`] says who found it, whether it is proven
//! optimal, its bound and gap.
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

mod baseline;
mod ilp;
mod plan;
mod problem;

pub use baseline::{
    per_block_set, solve_all, solve_brute_force, solve_greedy, solve_none, solve_per_block,
    BRUTE_FORCE_LIMIT,
};
pub use ilp::{solve_ilp, solve_ilp_with, IlpOptions};
pub use plan::{Fallback, Method, ModelSize, Plan, SolveError, SolveInfo, Status};
pub use problem::{evaluate, Candidate, Evaluation, Problem};
