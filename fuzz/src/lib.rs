//! The fuzzer of the `ckpt-opt` pipeline, a development crate (never published): the model
//! mutators and the seeded campaign ([`mutate`]), and the output-path mutations ([`paths`]).
//!
//! `tests/fuzz_slice.rs` and `tests/mutated_inputs.rs` of the CLI crate run slices of it; the
//! `ckpt-fuzz` binary (`src/main.rs`) runs a campaign (`docs/fuzzing.md`). It drives the
//! pipeline through `ckpt_opt`'s public API only.

pub mod mutate;
pub mod paths;
