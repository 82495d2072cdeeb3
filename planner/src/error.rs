//! What can stop an analysis or a plan: each error names the tensor, the stage or the solver
//! answer it comes from.

use ckpt_ir::ops::InferError;
use ckpt_ir::PatchError;
use ckpt_passes::memory::MemoryError;
use ckpt_passes::ClassifyError;
use ckpt_solver::SolveError;

/// Why an analysis or a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Shape inference failed on the graph.
    #[error("shape inference")]
    Infer(#[source] InferError),
    /// A declared shape (value_info, graph outputs) disagrees with what the ops compute.
    #[error("tensor `{tensor}` is declared with shape {declared}, but its producer computes {inferred}; the file's value_info is wrong (plans are never made on a declared shape the ops do not produce)")]
    DeclaredShape {
        tensor: String,
        declared: String,
        inferred: String,
    },
    /// A declared element type (value_info, graph outputs) disagrees with what the ops compute.
    #[error("tensor `{tensor}` is declared with element type {declared}, but its producer computes {inferred}; the file's value_info is wrong (ONNX's checker refuses it, and plans are never made on a declared type the ops do not produce)")]
    DeclaredType {
        tensor: String,
        declared: String,
        inferred: String,
    },
    /// A node's input or output has an element type its op's schema does not allow.
    #[error(transparent)]
    TypeConstraint(ckpt_ir::ImportError),
    /// Phases could not be found (no loss, an unknown loss name).
    #[error(transparent)]
    Classify(#[from] ClassifyError),
    /// ORT's order or the memory simulation failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A recompute patch did not apply (or, applied, did not verify).
    #[error("applying the recompute patch")]
    Patch(#[source] PatchError),
    /// The ILP answered with an error other than "no plan".
    #[error(transparent)]
    Solve(#[from] SolveError),
    /// A plan's output, exported, did not import again (a bug: every rewrite verifies).
    #[error("a plan's output did not read back to be planned again")]
    ReadBack(#[source] ckpt_ir::ImportError),
    /// An oracle over plain numbers was asked about a set of the wrong length.
    #[error("the oracle has {expected} candidates, the set {got}")]
    SetLength { expected: usize, got: usize },
}
