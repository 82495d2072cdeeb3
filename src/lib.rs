//! The `ckpt-opt` pipeline pieces shared by the CLI, its tests and examples.
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

pub mod buckets;
pub mod capacity;
pub mod cost;
pub mod frontier;
pub mod inputs;
pub mod offline;
pub mod optimize;
pub mod plot;
pub mod profile;
pub mod progress;
pub mod receipt;
pub mod receipt_md;
pub mod size;
pub mod targets;
pub mod training;
pub mod validate;
