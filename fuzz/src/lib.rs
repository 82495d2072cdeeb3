//! The fuzzer of the `ckpt-opt` pipeline, a development crate (never published): the model
//! mutators ([`mutate`]), one execution to a depth from a sandboxed file ([`exec`]), the seeded
//! campaign ([`campaign`]), the sampled outputs judged by ONNX's checker and ONNX Runtime
//! ([`external`]), and the output-path mutations ([`paths`]).
//!
//! `tests/fuzz_slice.rs` and `tests/mutated_inputs.rs` of the CLI crate run slices of it; the
//! `ckpt-fuzz` binary (`src/main.rs`) runs a campaign (`docs/fuzzing.md`). It drives the
//! pipeline through the library crates' public APIs only.

pub mod campaign;
pub mod exec;
pub mod external;
pub mod mutate;
pub mod paths;
