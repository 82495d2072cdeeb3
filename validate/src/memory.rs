//! Memory under the deployment profile, through the runner: the ONNX Runtime session a profile
//! means ([`session_config`]), each graph's device need measured under it (bisection on the
//! arena cap, [`measure_device`]) and judged against the prediction and the ceiling
//! ([`check_memory`]).
//!
//! Rules: a graph with ORT training ops is measured on the training runtime, any other on ONNX
//! Runtime, under the same session; the device total is what is held outside the arena (the
//! caller's bytes, constants outside it) + what loading takes from the arena + the steps' arena
//! need; a prediction passes within [`MEMORY_TOLERANCE`] of the measurement.

use serde::Serialize;

use ckpt_ir::onnx;
use ckpt_ir::profile::{
    ExecutionProvider, ExtendStrategy, InitialChunk, OptLevel as Level, Profile,
};
use ckpt_ir::Message;
use ckpt_runtime::{Arena, HostTensor, Model, OptLevel, Provider, SessionConfig};

use crate::error::ValidateError;
use crate::paired::ort_ready;
use crate::progress::{report, Stage};
use crate::training::{needs_training_runtime, start};

type Result<T, E = ValidateError> = std::result::Result<T, E>;

/// The session that runs a model under `profile`: its provider, level and memory pattern, CSE
/// off when the profile's session config says so, and (CPU) an environment BFC arena with the
/// profile's extend strategy and initial chunk, so that a cap (`arena_limit`) applies.
pub fn session_config(profile: &Profile) -> SessionConfig {
    let cse_off = profile
        .session_config
        .get(ckpt_ir::profile::DISABLE_OPTIMIZERS_KEY)
        .is_some_and(|v| {
            v.split(',')
                .any(|o| o.trim() == ckpt_ir::profile::CSE_OPTIMIZER)
        });
    SessionConfig {
        provider: match profile.execution_provider {
            ExecutionProvider::Cpu => Provider::Cpu,
            ExecutionProvider::Cuda => Provider::Cuda,
        },
        opt_level: match profile.graph_optimization_level {
            Level::Disable => OptLevel::Disable,
            Level::Basic => OptLevel::Basic,
            Level::Extended => OptLevel::Extended,
            Level::All => OptLevel::All,
        },
        disable_cse: cse_off,
        memory_pattern: profile.enable_mem_pattern,
        // CPU: an environment arena capped with `max_mem`; CUDA: the EP's arena capped with
        // `gpu_mem_limit` (its options take no initial chunk).
        arena: Arena::Bfc {
            power_of_two: profile.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo,
            initial_chunk: match profile.initial_chunk {
                InitialChunk::Bytes(b) => Some(b),
                InitialChunk::OrtDefault | InitialChunk::ArenaBudget => None,
            },
            initial_chunk_is_cap: profile.initial_chunk == InitialChunk::ArenaBudget,
        },
        intra_threads: Some(profile.intra_op_num_threads as usize),
        bind_outputs: profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Bound,
        // Every other entry the profile records, as the runner sets them (CSE's is
        // `disable_cse`'s).
        config_entries: profile
            .session_config
            .iter()
            .filter(|(k, _)| k.as_str() != ckpt_ir::profile::DISABLE_OPTIMIZERS_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..SessionConfig::default()
    }
}

/// The profile as the receipt and `inspect --json` write it: the metadata keys' short names.
pub fn profile_json(profile: &Profile) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (k, v) in profile.metadata() {
        m.insert(k, serde_json::Value::String(v));
    }
    serde_json::Value::Object(m)
}

/// Memory of one graph under the deployment profile: predicted and measured.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct DeviceMemory {
    /// Predicted device total: what is held outside the arena (the caller's bytes, constants
    /// outside it) + what loading takes from the arena + the steps' arena need.
    pub predicted_total_bytes: u64,
    /// Measured device total: the same bytes outside the arena + what loading took from the
    /// arena (measured) + the measured steps' arena need.
    pub measured_total_bytes: u64,
    /// What loading takes from the arena's allocator before the first step, predicted.
    pub predicted_load_bytes: u64,
    /// The same, measured (ORT's `InUse` after session creation; the training runtime: the
    /// smallest cap loading runs in).
    pub measured_load_bytes: u64,
    /// The smallest arena cap the profile's steps run in, predicted by the replay.
    pub predicted_arena_bytes: u64,
    /// The same, measured on ONNX Runtime by bisection on `max_mem` (to 256 B).
    pub measured_arena_bytes: u64,
    /// `predicted / measured - 1` of the arena need.
    pub relative_error: f64,
    /// ORT's `MaxInUse` over the steps, above what loading left (uncapped).
    pub measured_in_use_bytes: u64,
    /// ORT's `TotalAllocated` after the steps (uncapped): the regions reserved.
    pub measured_reserved_bytes: u64,
    /// Whether every step ran with the arena capped at the ceiling's arena budget
    /// (`None`: no ceiling given).
    pub runs_under_ceiling: Option<bool>,
    /// Sessions the bisection took.
    pub sessions: usize,
}

/// The memory verdict of a validation.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct MemoryCheck {
    /// The deployment profile the graphs ran under, in words.
    pub profile: String,
    pub steps: u32,
    pub ceiling_bytes: Option<u64>,
    /// Bytes beside the rewritten graph's arena (its ledger: what the caller feeds and holds,
    /// constants, what loading reserves).
    pub fixed_bytes: u64,
    /// Largest allowed |relative error| of a prediction.
    pub tolerance: f64,
    pub original: DeviceMemory,
    pub rewritten: DeviceMemory,
    pub passed: bool,
    /// Why it failed, one line each.
    pub failures: Vec<String>,
}

/// The largest |relative error| of a predicted arena need a validation accepts.
pub const MEMORY_TOLERANCE: f64 = 0.01;

/// Measure one graph's device memory (its external data in `dir`) under the expectation's
/// profile for its steps and compare it with `predicted_arena_bytes` (ONNX Runtime's bisection
/// starts from the simulator's `failing_end`, as the prediction's did); with a ceiling, also run
/// it with the arena capped at the ceiling less what the caller feeds.
pub fn measure_device(
    label: &str,
    model: &onnx::ModelProto,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
    side: &Expected,
) -> Result<DeviceMemory> {
    let need = if needs_training_runtime(model) {
        need_on_training_runtime(label, model, inputs, e, side)?
    } else {
        need_on_ort(label, model, inputs, e, side)?
    };
    Ok(need.against(side))
}

/// What one graph was measured to need under the profile.
struct Need {
    /// What loading took from the arena.
    load_bytes: u64,
    /// The smallest arena cap the steps run in.
    arena_bytes: u64,
    /// ORT's `MaxInUse` and `TotalAllocated` over the uncapped steps (0 where the runtime has
    /// no allocator statistics).
    in_use_bytes: u64,
    reserved_bytes: u64,
    runs_under_ceiling: Option<bool>,
    sessions: usize,
}

impl Need {
    /// The measurement beside the prediction.
    fn against(self, side: &Expected) -> DeviceMemory {
        let predicted_arena_bytes = side.arena_bytes;
        DeviceMemory {
            predicted_total_bytes: side.fixed_bytes + predicted_arena_bytes,
            measured_total_bytes: side.outside_arena_bytes() + self.load_bytes + self.arena_bytes,
            predicted_load_bytes: side.load_bytes,
            measured_load_bytes: self.load_bytes,
            predicted_arena_bytes,
            measured_arena_bytes: self.arena_bytes,
            relative_error: predicted_arena_bytes as f64 / self.arena_bytes.max(1) as f64 - 1.0,
            measured_in_use_bytes: self.in_use_bytes,
            measured_reserved_bytes: self.reserved_bytes,
            runs_under_ceiling: self.runs_under_ceiling,
            sessions: self.sessions,
        }
    }
}

/// The need on ONNX Runtime: bisection on `max_mem`, and with a ceiling the run capped as the
/// runner caps it (`max_mem` the ceiling less what is held outside the arena, the first region
/// the steps' budget).
fn need_on_ort(
    label: &str,
    model: &onnx::ModelProto,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
    side: &Expected,
) -> Result<Need> {
    let (dir, failing_end) = (side.dir.as_deref(), side.failing_end);
    let profile = &e.profile;
    let cfg = &session_config(profile);
    let arena_budget = e.arena_budget(side);
    let bytes = ort_ready(model, dir).encode_to_vec();
    let steps = profile.steps as usize;
    let hold = profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Held;
    let m = Model::new(label, &bytes).in_dir(dir);
    report(Stage::DeviceNeed(label));
    let need = ckpt_runtime::measure_need(m, inputs, cfg, steps, hold, Some(failing_end)).map_err(
        |source| ValidateError::MeasureNeed {
            label: label.to_string(),
            source,
        },
    )?;
    let runs_under_ceiling = match arena_budget {
        Some(budget) => Some(ckpt_runtime::runs_under(
            m,
            inputs,
            cfg,
            steps,
            hold,
            side.load_bytes,
            budget,
        )?),
        None => None,
    };
    Ok(Need {
        load_bytes: need.uncapped.reserved_after_load,
        arena_bytes: need.arena_bytes,
        in_use_bytes: need.uncapped.in_use_peak(),
        reserved_bytes: need.uncapped.reserved(),
        runs_under_ceiling,
        sessions: need.runs + usize::from(arena_budget.is_some()),
    })
}

/// The need on the training runtime ([`crate::training`]): the same bisection and capped run,
/// through its runner, which has no allocator statistics.
fn need_on_training_runtime(
    label: &str,
    model: &onnx::ModelProto,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
    side: &Expected,
) -> Result<Need> {
    let predicted_arena_bytes = side.arena_bytes;
    let cfg = session_config(&e.profile);
    let steps = e.profile.steps as usize;
    let hold = e.profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Held;
    let bytes = model.encode_to_vec();
    let mut runner = start()?;
    let staged = runner.stage(Model::new(label, &bytes), inputs, &[])?;
    let need = runner
        .measure_need(&staged, &cfg, steps, hold, Some(predicted_arena_bytes))
        .map_err(|source| ValidateError::MeasureNeedTraining {
            label: label.to_string(),
            source,
        })?;
    let budget = e.arena_budget(side);
    let runs_under_ceiling = match budget {
        Some(b) => Some(runner.runs_under(&staged, &cfg, steps, hold, side.load_bytes, b)?),
        None => None,
    };
    Ok(Need {
        load_bytes: need.load_bytes,
        arena_bytes: need.arena_bytes,
        in_use_bytes: 0,
        reserved_bytes: 0,
        runs_under_ceiling,
        sessions: need.trials + usize::from(budget.is_some()),
    })
}

/// Predictions of both graphs' device bytes under the profile, and the ceiling, for
/// [`check_memory`].
#[derive(Clone, Debug)]
pub struct MemoryExpectation {
    pub profile: ckpt_ir::Profile,
    pub ceiling_bytes: Option<u64>,
    pub original: Expected,
    pub rewritten: Expected,
}

/// What one graph's analysis predicts: its ledger's bytes beside the arena (a rewrite that
/// folds copies away drops constants and adds its own), the arena, and where the bisection
/// starts.
#[derive(Clone, Debug)]
pub struct Expected {
    /// The ledger's bytes beside the steps' arena ([`ckpt_passes::ledger::Ledger::fixed_bytes`]).
    pub fixed_bytes: u64,
    /// Of those, what loading takes from the arena ([`ckpt_passes::ledger::Ledger::load_bytes`]).
    pub load_bytes: u64,
    /// The steps' arena need.
    pub arena_bytes: u64,
    /// The failing end the prediction's bisection started from
    /// ([`ckpt_passes::device::failing_end`]): ONNX Runtime's starts there too.
    pub failing_end: u64,
    /// The directory the graph's external data resolves against.
    pub dir: Option<std::path::PathBuf>,
}

impl Expected {
    /// What `a` predicts, its external data in `dir`.
    pub fn of(a: &ckpt_planner::Analysis, dir: Option<std::path::PathBuf>) -> Expected {
        Expected {
            fixed_bytes: a.ledger.fixed_bytes,
            load_bytes: a.ledger.load_bytes,
            arena_bytes: a.device.arena_bytes,
            failing_end: a.device.failing_end,
            dir,
        }
    }

    /// What is held outside the arena's cap: the caller's bytes and constants outside it.
    pub fn outside_arena_bytes(&self) -> u64 {
        self.fixed_bytes.saturating_sub(self.load_bytes)
    }
}

impl MemoryExpectation {
    /// What the analyses of `original` and `rewritten` predict under `profile` (with
    /// `ceiling`, the capped run too); each graph's external data resolves against its `dirs`.
    pub fn of(
        profile: &ckpt_ir::Profile,
        (original, rewritten): (&ckpt_planner::Analysis, &ckpt_planner::Analysis),
        ceiling_bytes: Option<u64>,
        (original_dir, rewritten_dir): (Option<std::path::PathBuf>, Option<std::path::PathBuf>),
    ) -> MemoryExpectation {
        MemoryExpectation {
            profile: profile.clone(),
            ceiling_bytes,
            original: Expected::of(original, original_dir),
            rewritten: Expected::of(rewritten, rewritten_dir),
        }
    }

    /// A graph's share of the ceiling for its steps: the ceiling less everything beside its
    /// steps' arena.
    pub fn arena_budget(&self, side: &Expected) -> Option<u64> {
        self.ceiling_bytes
            .map(|c| c.saturating_sub(side.fixed_bytes))
    }
}

/// Measure both graphs under the profile and judge: the rewritten graph's measured total must
/// stay under the ceiling and run in an arena capped at the ceiling's budget, and both
/// predictions must be within [`MEMORY_TOLERANCE`] of the measurements.
pub fn check_memory(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
) -> Result<MemoryCheck> {
    let budget = e.arena_budget(&e.rewritten);
    let o = measure_device("original", original, inputs, e, &e.original)?;
    let r = measure_device("rewritten", rewritten, inputs, e, &e.rewritten)?;
    let mut failures = Vec::new();
    if let Some(c) = e.ceiling_bytes {
        if r.measured_total_bytes > c {
            failures.push(format!(
                "the rewritten graph needs {} B on the device (measured), above the ceiling of {c} B",
                r.measured_total_bytes
            ));
        }
        if r.runs_under_ceiling == Some(false) {
            failures.push(format!(
                "the rewritten graph does not run {} steps in an arena capped at {} B (the ceiling less {} B fed by the caller)",
                e.profile.steps,
                budget.unwrap_or(0),
                e.rewritten.fixed_bytes
            ));
        }
    }
    for (name, m) in [("original", &o), ("rewritten", &r)] {
        if m.relative_error.abs() > MEMORY_TOLERANCE {
            failures.push(format!(
                "the {name} graph's arena need was predicted at {} B but measured at {} B ({:+.2}%, tolerance {:.0}%)",
                m.predicted_arena_bytes,
                m.measured_arena_bytes,
                100.0 * m.relative_error,
                100.0 * MEMORY_TOLERANCE
            ));
        }
    }
    Ok(MemoryCheck {
        profile: e.profile.describe(),
        steps: e.profile.steps,
        ceiling_bytes: e.ceiling_bytes,
        fixed_bytes: e.rewritten.fixed_bytes,
        tolerance: MEMORY_TOLERANCE,
        original: o,
        rewritten: r,
        passed: failures.is_empty(),
        failures,
    })
}
