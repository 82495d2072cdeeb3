//! The one error type of this crate. Every message names the file, tensor or op involved and, where there is one,
//! the fix.

use std::path::PathBuf;

/// The command that installs the ONNX Runtime this project is pinned to.
pub const INSTALL_HINT: &str =
    "run `scripts/setup.sh` from the workspace root (creates .venv with onnxruntime==1.31.1), \
     or `python3 -m pip install onnxruntime==1.31.1`, or pass `--ort-lib /path/to/libonnxruntime.so`";

/// What running on CUDA needs.
pub const CUDA_HINT: &str = "the CUDA provider needs ckpt-opt built with `--features cuda`, an NVIDIA GPU, \
     the `onnxruntime-gpu==1.31.1` wheel's libonnxruntime.so (pass it with `--ort-lib`), and CUDA 13 \
     cuBLAS/cuRAND/cudart on the library path (LD_LIBRARY_PATH)";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("ONNX Runtime not found (searched: {}); {INSTALL_HINT}", searched.join("; "))]
    OrtNotFound { searched: Vec<String> },

    #[error("ONNX Runtime library {path} (from {origin}) does not exist; {INSTALL_HINT}")]
    OrtPathMissing { path: PathBuf, origin: String },

    #[error("could not load ONNX Runtime from {path}: {message}")]
    OrtLoad { path: PathBuf, message: String },

    #[error("ONNX Runtime is already loaded from {loaded}; cannot switch to {requested} in the same process")]
    OrtAlreadyLoaded { loaded: PathBuf, requested: PathBuf },

    #[error("model {model}: ONNX Runtime could not create a session: {message}")]
    SessionCreate { model: String, message: String },

    #[error(
        "model {model} uses ONNX Runtime training ops that this ONNX Runtime build does not have: {}; \
         standard onnxruntime wheels lack them, pass an ORT build with training ops via `--ort-lib` \
         (ORT said: {message})",
        ops.join(", ")
    )]
    MissingTrainingOps {
        model: String,
        ops: Vec<String>,
        message: String,
    },

    #[error(
        "the training runtime (onnxruntime-training {}, venv {}) is unavailable: {message}; it runs ORT \
         training artifacts: let ckpt-opt create it (needs PyPI and Python 3.8-3.12), or point {} at a venv \
         with onnxruntime-training-cpu=={}",
        ckpt_ir::ort::TRAINING_ORT_VERSION, venv.display(), crate::training::VENV_ENV,
        ckpt_ir::ort::TRAINING_ORT_VERSION
    )]
    TrainingRuntime { venv: PathBuf, message: String },

    #[error("CUDA execution provider unavailable: {reason}; {CUDA_HINT}")]
    CudaUnavailable { reason: String },

    #[error("model {model}: input `{tensor}`: {message}")]
    Input {
        model: String,
        tensor: String,
        message: String,
    },

    #[error("model {model}: run failed: {message}")]
    Run { model: String, message: String },

    #[error("tensor `{tensor}`: {message}")]
    Tensor { tensor: String, message: String },

    #[error("{}: {message}", path.display())]
    Npy { path: PathBuf, message: String },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("generating `{tensor}`: {message}")]
    Generate { tensor: String, message: String },

    #[error("profile {}: {message}", path.display())]
    Profile { path: PathBuf, message: String },

    #[error("model {model}: allocator statistics: {message}")]
    AllocatorStats { model: String, message: String },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
