//! The one error type of this crate. Every message names the graph, tensor, node, flag or file
//! involved and, where there is one, the fix; an error of ONNX Runtime, the IR or a number's
//! parse is kept as the source, so a caller printing the chain shows both.

use std::num::ParseIntError;
use std::path::PathBuf;

use ckpt_ir::profile::OptLevel;
use ckpt_ir::{DType, ImportError, ShapeError};
use ckpt_runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// `--input` without `=`.
    #[error("--input `{flag}`: expected NAME=file.npy")]
    InputFlag { flag: String },

    /// `--int-range` without `=` or `:`.
    #[error("--int-range `{flag}`: expected NAME=LO:HI")]
    IntRangeFlag { flag: String },

    /// `--int-range`: a bound (`LO` or `HI`) that is not an integer.
    #[error("--int-range `{flag}`: {bound}")]
    IntRangeBound {
        flag: String,
        bound: &'static str,
        source: ParseIntError,
    },

    /// `--int-range` with `HI <= LO`.
    #[error("--int-range `{flag}`: HI must be greater than LO")]
    IntRangeEmpty { flag: String },

    /// `--input NAME=…` for a name the model has no input of.
    #[error("--input {name}: the model has no input named `{name}`")]
    NoSuchInput { name: String },

    /// `--input NAME=file.npy` that could not be read as the input.
    #[error("--input {tensor}")]
    ReadInput {
        tensor: String,
        source: RuntimeError,
    },

    #[error("input `{tensor}` has no element type")]
    InputNoDtype { tensor: String },

    #[error("input `{tensor}`: element type {dtype} is not supported")]
    InputDtype { tensor: String, dtype: DType },

    #[error("input `{tensor}` has no shape")]
    InputNoShape { tensor: String },

    /// An input's shape that the bindings do not make concrete.
    #[error("input `{tensor}`")]
    InputShape { tensor: String, source: ShapeError },

    /// An integer input whose valid range nothing implies.
    #[error(
        "input `{tensor}` ({dtype}): no consumer implies a valid range; give one with --int-range {tensor}=LO:HI or --input {tensor}=file.npy"
    )]
    InputRange { tensor: String, dtype: DType },

    /// The broken control needs a graph.
    #[error("model has no graph")]
    NoGraph,

    /// The broken control perturbs the first output's producer.
    #[error("model has no outputs")]
    NoOutputs,

    #[error("output `{output}` has no producer to perturb for the control")]
    ControlNoProducer { output: String },

    #[error("the node computing `{output}` has no float input to perturb for the control")]
    ControlNoFloatInput { output: String },

    #[error("finding ONNX Runtime")]
    FindOrt(#[source] RuntimeError),

    #[error("starting the training runtime")]
    StartTraining(#[source] RuntimeError),

    /// A paired run: `graph` is `original graph`, `rewritten graph` or `control`.
    #[error("running the {graph}")]
    Run {
        graph: &'static str,
        source: RuntimeError,
    },

    /// ONNX Runtime (`runtime`, its version) refused to load the model labelled `label`.
    #[error("ONNX Runtime {runtime} does not load {label}")]
    Load {
        label: String,
        runtime: String,
        source: RuntimeError,
    },

    #[error("measuring the {label} graph's device need")]
    MeasureNeed { label: String, source: RuntimeError },

    #[error("measuring the {label} graph's device need on the training runtime")]
    MeasureNeedTraining { label: String, source: RuntimeError },

    /// ORT's offline mode failed on the model at `path`.
    #[error(
        "letting ONNX Runtime optimize {} at level {level} (ORT's offline mode) to plan the graph it runs",
        path.display()
    )]
    OptimizeOffline {
        path: PathBuf,
        level: OptLevel,
        source: RuntimeError,
    },

    /// What ORT saved for the model at `path` does not import.
    #[error(
        "importing the graph ONNX Runtime saved for {} at level {level}",
        path.display()
    )]
    ImportOptimized {
        path: PathBuf,
        level: OptLevel,
        source: Box<ImportError>,
    },

    /// A node ORT wrote at `level` whose op the registry does not model; `ops` lists every
    /// unmodelled op type as `domain::op`, `hint` what to do about them (it starts with `; `).
    #[error(
        "at level {level} ONNX Runtime rewrote the graph with node `{node}` ({domain}::{op}), which ckpt-opt's op registry does not model (its memory cannot be predicted); unmodelled ops: {}{hint}",
        ops.join(", ")
    )]
    Unmodelled {
        level: OptLevel,
        node: String,
        domain: String,
        op: String,
        ops: Vec<String>,
        hint: &'static str,
    },

    #[error("profiling the graph on ONNX Runtime (--cost profile)")]
    Profile(#[source] RuntimeError),

    /// ORT's profile matched no node of the graph (`graph`: its folder, or `the graph`).
    #[error(
        "ONNX Runtime's profile of {graph} names none of its {nodes} nodes: --cost profile has no times to use"
    )]
    ProfileNamesNoNode { graph: String, nodes: usize },

    #[error(
        "--cost profile runs the graph on plain ONNX Runtime, and this graph needs the training runtime (com.microsoft training ops); use --cost flops"
    )]
    ProfileNeedsTrainingRuntime,

    /// ONNX Runtime's own error, as it gives it.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl ValidateError {
    /// The ONNX Runtime error this one wraps or is caused by, if any: a caller tells "could not
    /// validate" (the runtime, its training ops or a provider missing) from other failures by it.
    pub fn runtime(&self) -> Option<&RuntimeError> {
        use ValidateError as E;
        match self {
            E::ReadInput { source, .. }
            | E::FindOrt(source)
            | E::StartTraining(source)
            | E::Run { source, .. }
            | E::MeasureNeed { source, .. }
            | E::MeasureNeedTraining { source, .. }
            | E::OptimizeOffline { source, .. }
            | E::Profile(source)
            | E::Runtime(source) => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_runtime_error_is_found_for_the_exit_code() {
        let missing = || RuntimeError::CudaUnavailable {
            reason: "no GPU".into(),
        };
        let e = ValidateError::Run {
            graph: "rewritten graph",
            source: missing(),
        };
        assert_eq!(e.to_string(), "running the rewritten graph");
        assert!(matches!(
            std::error::Error::source(&e).and_then(|s| s.downcast_ref::<RuntimeError>()),
            Some(RuntimeError::CudaUnavailable { .. })
        ));
        let bare = ValidateError::from(missing());
        assert!(matches!(
            bare.runtime(),
            Some(RuntimeError::CudaUnavailable { .. })
        ));
        assert_eq!(bare.to_string(), missing().to_string());
        assert!(ValidateError::NoGraph.runtime().is_none());
    }
}
