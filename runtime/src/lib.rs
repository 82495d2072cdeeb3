//! Running graphs on ONNX Runtime: finding the library, seeded inputs, paired comparison, peak memory, execution
//! order and step time, on the CPU or CUDA provider.
//!
//! This is the only crate that names `ort`. Models cross the API as serialized ONNX bytes ([`Model`]) and tensors
//! as [`HostTensor`]s; every entry point creates a fresh session, so measurements never share an arena.
//!
//! Stage by stage, from `main` to the receipt: `docs/design/pipeline.md`.

mod arena;
mod compare;
mod device;
mod error;
mod generate;
mod locate;
mod measure;
mod model;
mod model_ops;
mod npy;
mod offline;
mod session;
mod tensor;
pub mod training;

pub use compare::{compare, Comparison, OutputComparison, Tol, Tolerances};
pub use device::{
    is_out_of_memory, measure_need, measure_steps, runs_under, MeasuredNeed, StepStats,
};
pub use error::{Result, RuntimeError, CUDA_HINT, INSTALL_HINT};
pub use generate::{derive_seed, generate, generate_inputs, Distribution};
pub use locate::{init, init_with, loaded, OrtInfo, OrtLibrarySearch};
pub use measure::{
    locate_peak, measure_peak, parse_profile, profile_order, profile_runs, time_steps, NodeEvent,
    PeakNode, PeakStats, StepTimes,
};

/// ORT's arena granularity: every allocation is rounded up to this many bytes.
pub use ckpt_ir::ort::ALLOC_ALIGN as ALIGN_BYTES;
/// ORT's name for the optimizer that would merge recompute clones back into their originals.
pub use ckpt_ir::ort::CSE_OPTIMIZER;
pub use model::Model;
pub use npy::{encode_npy, read_npy, write_npy};
pub use offline::optimize_offline;
pub use session::{
    input_specs, load, run, Arena, InputSpec, OptLevel, Provider, SessionConfig,
    DETERMINISTIC_COMPUTE_KEY, EXTERNAL_DATA_DIR_KEY,
};
pub use tensor::{DType, Element, HostTensor};
