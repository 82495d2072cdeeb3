//! The proof on ONNX Runtime that a rewrite trains the same and fits: paired losses and
//! gradients with a broken control that must be rejected ([`check`]), memory under the
//! deployment profile measured through the runner, training artifacts on the training runtime,
//! and ORT's measured kernel time as a recompute cost.
//!
//! The rooms, in the order a validation uses them:
//! - [`inputs`]: seeded inputs for every graph input, or the user's;
//! - [`offline`]: the graph ORT runs at an optimization level, ready to plan;
//! - [`paired`]: the pair's seeds, the broken control, the verdict, and the run on ONNX Runtime;
//! - [`training`]: the same pair on the training runtime, for ORT training artifacts;
//! - [`loads`]: whether ONNX Runtime loads a model (an output before it is published);
//! - [`memory`]: the session a profile means, and each graph's device need under it, measured
//!   against the prediction;
//! - [`measured_cost`]: each node's kernel time on ORT, as the planner's cost (`--cost profile`);
//! - [`progress`]: the stages that take time, as typed events for a progress line.
//!
//! Errors are [`ValidateError`]s naming the graph, tensor, node, flag or file; nothing here
//! decides an exit code. Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

mod error;
pub mod inputs;
pub mod loads;
pub mod measured_cost;
pub mod memory;
pub mod offline;
pub mod paired;
pub mod progress;
pub mod training;

pub use error::ValidateError;

use ckpt_ir::onnx;
use ckpt_runtime::HostTensor;

use paired::{ValidateOptions, Validation};

/// Validate `rewritten` against `original` on `inputs` (made as `input_generation` says): both
/// graphs and the broken control run for their values, then measured, on the training runtime
/// when `original` has an op only ORT's training build runs
/// ([`training::needs_training_runtime`]), else on ONNX Runtime; one verdict for both.
pub fn check(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    input_generation: Vec<String>,
    o: &ValidateOptions,
) -> Result<Validation, ValidateError> {
    let runs = if training::needs_training_runtime(original) {
        training::run_pair(original, rewritten, inputs, o)?
    } else {
        paired::run_pair(original, rewritten, inputs, o)?
    };
    Ok(runs.judge(input_generation, &o.tol))
}
