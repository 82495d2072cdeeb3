//! Recompute: which activations can be dropped and rebuilt, what that costs, the solver's
//! [`Problem`], and the rewrite of a [`Plan`](ckpt_solver::Plan) into one labelled
//! [`Patch`](ckpt_ir::Patch).
//!
//! A **candidate** is a forward-allocated buffer (see [`crate::memory`]) holding an
//! activation saved for backward. Dropping it frees its bytes from just after its last
//! forward reader to just before its first backward reader. Rebuilding it re-runs the
//! producers of its values and, transitively, of every input that is not kept (a value
//! freed during forward, or in the same buffer); inputs held in another candidate make that
//! candidate a dependency. Ops whose policy is not `Recomputable` (random, stateful,
//! unknown) end a candidate: it is excluded, with the reason.
//!
//! The rewrite clones each recomputed chain (`<name>.recompute`), rewires only backward
//! readers, and places every clone in the file right after the producers of its inputs:
//! ORT expands a node's highest-index input first, so a low-index clone is expanded last and
//! runs right before its first backward reader — not during the forward pass.
//!
//! This module owns the solver's [`Problem`]; `candidates.rs` finds the candidates,
//! `rewrite.rs` turns a plan into a patch, `blocks.rs` plans block checkpointing, and
//! `terms.rs` lowers backward-only terms.

mod blocks;
mod candidates;
mod rewrite;
mod terms;

use ckpt_solver::Problem;

use crate::memory::Simulation;
pub use blocks::{per_block, residual_stream, Granularity, PerBlock};
pub use candidates::{candidates, Candidate, Candidates, Excluded, MAX_CHAIN_NODES};
pub use rewrite::rewrite;
pub use terms::{backward_only_terms, lower_terms};

/// The solver's problem: live bytes per step, candidates, and the arena budget.
pub fn problem(sim: &Simulation, cands: &Candidates, arena_ceiling: u64) -> Problem {
    Problem {
        base_live: sim.live.clone(),
        candidates: cands.list.iter().map(|c| c.model.clone()).collect(),
        ceiling: arena_ceiling,
    }
}
