//! The `ckpt-opt` pipeline pieces shared by the CLI, its tests and examples: the flags
//! ([`cli`]), the job they describe ([`job`]), the exit codes ([`exit`]), the model as every
//! command loads it ([`model_io`]), planning, validation, the receipt and the reports.
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

pub mod cli;
pub mod exit;
pub mod job;
pub mod model_io;
pub mod pipeline;
pub mod progress;
pub mod receipt;
pub mod reports;
pub mod size;
pub mod targets;
