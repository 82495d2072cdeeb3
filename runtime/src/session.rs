//! Building ONNX Runtime sessions from serialized models and running them on host tensors.
//!
//! Every public entry point creates a fresh session, so no run sees another's arena or memory pattern.

use std::path::PathBuf;

use ckpt_ir::normalise_domain;
use ckpt_ir::ops::training_only;
use ckpt_ir::ort::CSE_OPTIMIZER;

use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::Session;

use crate::error::{Result, RuntimeError};
use crate::locate::environment;
use crate::model::Model;
use crate::model_ops::node_ops;
use crate::tensor::{DType, HostTensor};

/// The session config entry that names the directory external data resolves against when a
/// session is created from bytes.
pub const EXTERNAL_DATA_DIR_KEY: &str = "session.model_external_initializers_file_folder_path";

/// The session config entry that makes ORT's CPU kernels deterministic where they can be
/// (reductions split over threads). It does not make ScatterND with `reduction="add"` safe on
/// duplicate indices over several threads: that races (`docs/design/ort-internals.md` 2.7).
pub const DETERMINISTIC_COMPUTE_KEY: &str = "session.use_deterministic_compute";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[default]
    Cpu,
    Cuda,
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Provider::Cpu => "CPUExecutionProvider",
            Provider::Cuda => "CUDAExecutionProvider",
        })
    }
}

/// ORT graph optimization level.
///
/// The default is `Basic` (ORT level 1): constant folding and removal of no-op nodes, which every ORT user gets,
/// while (with [`SessionConfig::disable_cse`]) leaving the node set the planner reasoned about intact. `Extended`
/// and `All` fuse ops (GELU, LayerNorm, attention, MatMul+Add…) and change layouts, which changes which
/// intermediates exist, so a measured peak would no longer belong to the graph that was planned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OptLevel {
    Disable,
    #[default]
    Basic,
    Extended,
    All,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionConfig {
    pub provider: Provider,
    pub opt_level: OptLevel,
    /// Disable ORT's common-subexpression elimination, which otherwise merges recompute clones away. Default true.
    pub disable_cse: bool,
    /// ORT's memory-pattern planner; off by default because it changes later runs' allocations.
    pub memory_pattern: bool,
    /// Write ORT's JSON profile with this path prefix.
    pub profiling: Option<PathBuf>,
    /// Intra-op threads; `None` lets ORT choose (one per physical core).
    pub intra_threads: Option<usize>,
    /// The CPU arena allocations come from; see [`Arena`].
    pub arena: Arena,
    /// With an environment arena ([`Arena::Exact`], [`Arena::Bfc`]): the arena's `max_mem` in bytes (initializers
    /// included); an allocation past it fails, naming the node (see [`crate::locate_peak`]).
    pub arena_limit: Option<u64>,
    /// Session config entries to set (`key`, `value`), as a deployment profile's `session_config` names them.
    pub config_entries: Vec<(String, String)>,
    /// Steps bind every graph output to a buffer allocated once outside the arena (ORT's
    /// default CPU allocator), which ORT writes in place: the arena never holds an output
    /// ([`crate::measure_steps`]).
    pub bind_outputs: bool,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            provider: Provider::Cpu,
            opt_level: OptLevel::Basic,
            disable_cse: true,
            memory_pattern: false,
            profiling: None,
            intra_threads: None,
            arena: Arena::Session,
            arena_limit: None,
            config_entries: Vec::new(),
            bind_outputs: false,
        }
    }
}

/// Which CPU arena a session allocates from.
///
/// ORT's own per-session BFC arena (`Session`) hands a request a whole free chunk unless the chunk is at least
/// twice the request, so a tensor can occupy up to ~2x its bytes, depending on what was freed before (observed:
/// a 1.6 MB tensor holding a 2 MiB chunk). `Exact` registers a fresh environment arena per session that always
/// splits chunks (`max_dead_bytes_per_chunk` = 256), so `InUse` is the sum of live tensors, each rounded up to
/// 256 bytes: the quantity a liveness simulation predicts. `Exact` sessions are serialized process-wide (the
/// environment holds one CPU allocator); CPU provider only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arena {
    #[default]
    Session,
    Exact,
    /// ORT's BFC arena with a deployment profile's settings: regions doubling from `initial_chunk` (ORT's default
    /// 1 MiB) when `power_of_two` (`kNextPowerOfTwo`), else each region the request (`kSameAsRequested`).
    /// With `initial_chunk_is_cap`, the first region is the cap (`arena_limit` less what loading reserved): the
    /// arena is one region.
    Bfc {
        power_of_two: bool,
        initial_chunk: Option<u64>,
        initial_chunk_is_cap: bool,
    },
}

/// One model input as the session sees it. `None` dims are symbolic (`dim_names` holds their names).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InputSpec {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Option<usize>>,
    pub dim_names: Vec<String>,
}

/// Runs `model` once on a fresh session and returns every graph output, in the model's output order.
pub fn run<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
) -> Result<Vec<HostTensor>> {
    let model = model.into();
    with_session(model, cfg, |session| run_session(model, session, inputs))
}

/// Creates a session of `model` under `cfg` (in ORT's own session arena) and drops it: whether
/// ONNX Runtime loads the model, its external data included.
pub fn load<'a>(model: impl Into<Model<'a>>, cfg: &SessionConfig) -> Result<()> {
    let cfg = SessionConfig {
        arena: Arena::Session,
        arena_limit: None,
        ..cfg.clone()
    };
    create_session(model.into(), &cfg).map(drop)
}

/// The model's graph inputs (excluding initializers), as ORT reports them.
pub fn input_specs<'a>(model: impl Into<Model<'a>>, cfg: &SessionConfig) -> Result<Vec<InputSpec>> {
    let model = model.into();
    let session = create_session(
        model,
        &SessionConfig {
            arena: Arena::Session,
            ..cfg.clone()
        },
    )?;
    session
        .inputs()
        .iter()
        .map(|outlet| {
            let bad = |message: String| RuntimeError::Input {
                model: model.label.to_string(),
                tensor: outlet.name().to_string(),
                message,
            };
            let ty = outlet.dtype();
            let elem = ty
                .tensor_type()
                .ok_or_else(|| bad(format!("is not a tensor ({ty})")))?;
            let dtype = DType::from_ort(elem)
                .ok_or_else(|| bad(format!("element type {elem:?} is not supported")))?;
            let shape = ty
                .tensor_shape()
                .ok_or_else(|| bad("has no shape".to_string()))?;
            let dim_names = match ty {
                ort::value::ValueType::Tensor {
                    dimension_symbols, ..
                } => dimension_symbols.iter().map(|s| s.to_string()).collect(),
                _ => Vec::new(),
            };
            Ok(InputSpec {
                name: outlet.name().to_string(),
                dtype,
                shape: shape.iter().map(|&d| usize::try_from(d).ok()).collect(),
                dim_names,
            })
        })
        .collect()
}

/// Creates a fresh session and hands it to `f`; with [`Arena::Exact`], inside a freshly registered exact arena
/// that lives as long as the session.
pub(crate) fn with_session<T>(
    model: Model<'_>,
    cfg: &SessionConfig,
    f: impl FnOnce(&mut Session) -> Result<T>,
) -> Result<T> {
    match cfg.arena {
        Arena::Session => f(&mut create_session(model, cfg)?),
        // The CUDA EP's own BFC arena takes the profile's extend strategy and the cap
        // (`gpu_mem_limit`) as provider options (`register_provider`).
        Arena::Bfc { .. } if cfg.provider == Provider::Cuda => f(&mut create_session(model, cfg)?),
        Arena::Exact | Arena::Bfc { .. } => {
            if cfg.provider != Provider::Cpu {
                return Err(RuntimeError::SessionCreate {
                    model: model.label.to_string(),
                    message: format!(
                        "a configured CPU arena ({:?}) is CPU-only; {} uses its own arena",
                        cfg.arena, cfg.provider
                    ),
                });
            }
            crate::arena::with_env_cpu_arena(model, cfg.arena, cfg.arena_limit, || {
                f(&mut create_session(model, cfg)?)
            })
        }
    }
}

fn create_session(model: Model<'_>, cfg: &SessionConfig) -> Result<Session> {
    create_session_saving(model, cfg, None)
}

/// Creates a session; with `save_to`, ORT writes the graph it will run (optimized at `cfg.opt_level` for
/// `cfg.provider`) to that path while the session is created.
pub(crate) fn create_session_saving(
    model: Model<'_>,
    cfg: &SessionConfig,
    save_to: Option<&std::path::Path>,
) -> Result<Session> {
    let env = environment()?;
    let label = model.label;
    let fail = |e: ort::Error| RuntimeError::SessionCreate {
        model: label.to_string(),
        message: e.to_string(),
    };
    let mut builder = Session::builder(env).map_err(fail)?;
    builder = builder
        .with_optimization_level(match cfg.opt_level {
            OptLevel::Disable => GraphOptimizationLevel::Disable,
            OptLevel::Basic => GraphOptimizationLevel::Level1,
            OptLevel::Extended => GraphOptimizationLevel::Level2,
            OptLevel::All => GraphOptimizationLevel::All,
        })
        .map_err(|e| fail(e.into()))?
        .with_memory_pattern(cfg.memory_pattern)
        .map_err(|e| fail(e.into()))?;
    if cfg.disable_cse {
        builder = builder
            .with_disabled_optimizers(CSE_OPTIMIZER)
            .map_err(|e| fail(e.into()))?;
    }
    // A capped arena is probed by bisection: its allocation failures are expected results,
    // not errors to print.
    if cfg.arena_limit.is_some() {
        builder = builder
            .with_log_level(ort::logging::LogLevel::Fatal)
            .map_err(|e| fail(e.into()))?;
    }
    if let Some(threads) = cfg.intra_threads {
        builder = builder
            .with_intra_threads(threads)
            .map_err(|e| fail(e.into()))?;
    }
    if cfg.arena != Arena::Session {
        builder = builder.with_env_allocators().map_err(|e| fail(e.into()))?;
    }
    // External data resolves against the model's directory, never the process's cwd (the
    // session is created from bytes, which have no location of their own).
    if let Some(dir) = model.dir {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        builder = builder
            .with_config_entry(EXTERNAL_DATA_DIR_KEY, dir.to_string_lossy())
            .map_err(|e| fail(e.into()))?;
    }
    for (key, value) in &cfg.config_entries {
        builder = builder
            .with_config_entry(key, value)
            .map_err(|e| fail(e.into()))?;
    }
    if let Some(path) = save_to {
        builder = builder
            .with_optimized_model_path(path)
            .map_err(|e| fail(e.into()))?;
    }
    if let Some(prefix) = &cfg.profiling {
        builder = builder.with_profiling(prefix).map_err(|e| fail(e.into()))?;
    }
    builder = register_provider(builder, cfg)?;
    builder
        .commit_from_memory(model.bytes)
        .map_err(|e| classify_create_error(model, cfg.provider, e))
}

/// Registers `cfg.provider`. CUDA: with [`Arena::Bfc`], the EP's arena extends by the arena's strategy, and
/// `arena_limit` becomes its `gpu_mem_limit` (the cap a bisection moves). The EP's options have no initial chunk:
/// its first region is ORT's default (1 MiB).
#[cfg(feature = "cuda")]
fn register_provider(builder: SessionBuilder, cfg: &SessionConfig) -> Result<SessionBuilder> {
    match cfg.provider {
        Provider::Cpu => Ok(builder),
        Provider::Cuda => {
            let mut ep = ort::ep::CUDA::default().with_device_id(0);
            if let Arena::Bfc { power_of_two, .. } = cfg.arena {
                ep = ep.with_arena_extend_strategy(if power_of_two {
                    ort::ep::ArenaExtendStrategy::NextPowerOfTwo
                } else {
                    ort::ep::ArenaExtendStrategy::SameAsRequested
                });
            }
            if let Some(limit) = cfg.arena_limit {
                ep = ep.with_memory_limit(usize::try_from(limit).unwrap_or(usize::MAX));
            }
            builder
                .with_execution_providers([ep.build().error_on_failure()])
                .map_err(|e| RuntimeError::CudaUnavailable {
                    reason: e.to_string(),
                })
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn register_provider(builder: SessionBuilder, cfg: &SessionConfig) -> Result<SessionBuilder> {
    match cfg.provider {
        Provider::Cpu => Ok(builder),
        Provider::Cuda => Err(RuntimeError::CudaUnavailable {
            reason: "this build of ckpt-runtime has no CUDA support (feature `cuda` is off)"
                .to_string(),
        }),
    }
}

/// Session creation failures that have a known cause get their own error: missing training ops, a CUDA EP that
/// cannot load.
fn classify_create_error(model: Model<'_>, provider: Provider, e: ort::Error) -> RuntimeError {
    let message = e.to_string();
    let op_missing = [
        "No Op registered for",
        "not a registered function/op",
        "Could not find an implementation",
    ]
    .iter()
    .any(|m| message.contains(m));
    if op_missing {
        let mut ops: Vec<String> = node_ops(model.bytes)
            .into_iter()
            .filter(|(domain, op)| {
                !domain.is_empty()
                    && domain != "ai.onnx"
                    && (training_only(&normalise_domain(domain), op) || mentions_op(&message, op))
            })
            .map(|(domain, op)| {
                if domain.is_empty() {
                    op
                } else {
                    format!("{domain}:{op}")
                }
            })
            .collect();
        ops.sort();
        ops.dedup();
        if !ops.is_empty() {
            return RuntimeError::MissingTrainingOps {
                model: model.label.to_string(),
                ops,
                message,
            };
        }
    }
    if provider == Provider::Cuda && (message.contains("CUDA") || message.contains("cuda")) {
        return RuntimeError::CudaUnavailable { reason: message };
    }
    RuntimeError::SessionCreate {
        model: model.label.to_string(),
        message,
    }
}

fn mentions_op(message: &str, op: &str) -> bool {
    !op.is_empty()
        && [
            format!("for {op} "),
            format!(" {op}("),
            format!("({op})"),
            format!(", {op},"),
            format!(":{op}("),
        ]
        .iter()
        .any(|p| message.contains(p.as_str()))
}

pub(crate) fn run_session(
    model: Model<'_>,
    session: &mut Session,
    inputs: &[HostTensor],
) -> Result<Vec<HostTensor>> {
    let feeds = feeds(model, session, inputs)?;
    let output_names: Vec<String> = session
        .outputs()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    let mut outputs = session.run(feeds).map_err(|e| RuntimeError::Run {
        model: model.label.to_string(),
        message: e.to_string(),
    })?;
    output_names
        .iter()
        .map(|name| {
            let value = outputs
                .remove(name.as_str())
                .ok_or_else(|| RuntimeError::Run {
                    model: model.label.to_string(),
                    message: format!("ORT returned no value for output `{name}`"),
                })?;
            HostTensor::from_ort(name, value)
        })
        .collect()
}

/// Matches host tensors to the session's inputs by name: every graph input must be fed (initializers that are also
/// inputs may be), nothing unknown may be, and dtypes and fixed dims must agree.
pub(crate) fn feeds(
    model: Model<'_>,
    session: &Session,
    inputs: &[HostTensor],
) -> Result<Vec<(String, ort::value::DynTensor)>> {
    let err = |tensor: &str, message: String| RuntimeError::Input {
        model: model.label.to_string(),
        tensor: tensor.to_string(),
        message,
    };
    let overridable: Vec<String> = session
        .overridable_initializers()
        .iter()
        .map(|i| i.name().to_string())
        .collect();
    for outlet in session.inputs() {
        if !inputs.iter().any(|t| t.name == outlet.name())
            && !overridable.iter().any(|n| n == outlet.name())
        {
            return Err(err(
                outlet.name(),
                format!("is a graph input but was not given ({})", outlet.dtype()),
            ));
        }
    }
    let mut feeds = Vec::with_capacity(inputs.len());
    for t in inputs {
        let Some(outlet) = session.inputs().iter().find(|o| o.name() == t.name) else {
            let known: Vec<&str> = session.inputs().iter().map(|o| o.name()).collect();
            return Err(err(
                &t.name,
                format!(
                    "is not an input of the model (inputs: {})",
                    known.join(", ")
                ),
            ));
        };
        let ty = outlet.dtype();
        if let Some(elem) = ty.tensor_type() {
            if elem != t.dtype.to_ort() {
                return Err(err(
                    &t.name,
                    format!("given {} but the model wants {ty}", t.dtype),
                ));
            }
        }
        if let Some(shape) = ty.tensor_shape() {
            let fits = shape.len() == t.shape.len()
                && shape
                    .iter()
                    .zip(&t.shape)
                    .all(|(&want, &have)| want < 0 || want as usize == have);
            if !fits {
                return Err(err(
                    &t.name,
                    format!("given shape {:?} but the model wants {ty}", t.shape),
                ));
            }
        }
        feeds.push((t.name.clone(), t.to_ort()?));
    }
    Ok(feeds)
}
