//! Analyses (phases, schedule, liveness, memory simulation, ledger) and the recompute rewrite.
//!
//! Every analysis is a function from a graph (and bindings) to plain data; the one rewrite,
//! recompute insertion, returns a `ckpt_ir::Patch` value.
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

pub mod arena;
pub mod device;
pub mod fold;
pub mod guards;
pub mod inputs;
pub mod ledger;
pub mod loss_head;
pub mod memory;
pub mod order;
pub mod ort_casts;
pub mod ort_view;
pub mod phases;
pub mod recompute;
pub mod schedule;

pub use phases::{classify, find_loss, Classification, ClassifyError, Phase, TensorKind};
