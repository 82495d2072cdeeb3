//! The deployment profile: every setting that decides what the device must hold when ONNX
//! Runtime runs a model, as one value.
//!
//! The contract of a rewritten model is stated against it: run the model under the profile it
//! records and the device never needs more than the ceiling. The profile travels in the
//! output model's `metadata_props` under the keys of [`Profile::metadata`] (an interface that
//! runners and other tools read) and in the receipt.
//!
//! What the fields decide (`docs/design/ort-internals.md`):
//! - the optimization level decides which graph ORT runs (an offline-optimized graph is
//!   loaded at `disable`, and records the level ORT optimized it at as
//!   `offline_optimization_level`);
//! - the memory pattern, from the second run on, pre-allocates one block of the first run's
//!   traced peak inside the arena;
//! - the arena's extend strategy decides the regions the arena reserves from the device
//!   (`kNextPowerOfTwo` doubles them from the initial chunk, `kSameAsRequested` takes each
//!   request's size), and a capped arena (ORT's `max_mem` / CUDA's `gpu_mem_limit`) stops
//!   growing at the cap;
//! - where the step's outputs live: bound to the runner's buffers outside the arena (the
//!   default), allocated in the arena and copied out, or the previous step's still alive in
//!   the arena while the next step runs.
//!
//! Not every combination is offered ([`Profile::offered`]). With held outputs, an arena of
//! several regions needs what the C library's placement of the regions decides: ORT breaks
//! ties between equal free chunks by address, so the same graph needs different caps in
//! different processes, and no replay can know the caller's heap. Held outputs are offered
//! only in one region of the arena budget (`kNextPowerOfTwo` from the budget) with the
//! memory pattern off: with the pattern on, even one region measured differently in two
//! processes (`docs/design/ort-internals.md` §2.5, `tests/profile.rs`).

use std::collections::BTreeMap;
use std::fmt;

/// Prefix of every metadata key the profile writes.
pub const PROFILE_KEY_PREFIX: &str = "ckpt-opt.profile.";
/// Prefix of the session config entries a run of the model needs.
pub const SESSION_CONFIG_KEY_PREFIX: &str = "ckpt-opt.session_config.";
pub use crate::ort::{CSE_OPTIMIZER, DISABLE_OPTIMIZERS_KEY, ORT_VERSION, TRAINING_ORT_VERSION};

/// Why a profile could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("profile setting `{key}` = `{value}`: expected one of {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("unknown profile setting `{key}` (known: {known})")]
    UnknownKey { key: String, known: String },
    #[error("profile setting `{key}` = `{value}` is not supported: {why}")]
    Unsupported {
        key: String,
        value: String,
        why: &'static str,
    },
    /// A combination of settings whose device need the tool cannot predict within 1%.
    #[error("the deployment profile {flags} ({keys}) is not offered: {why}; use {instead}")]
    NotOffered {
        /// The CLI flags that select the combination.
        flags: String,
        /// The metadata entries that record it.
        keys: String,
        /// The measured reason.
        why: &'static str,
        /// What to use instead.
        instead: &'static str,
    },
}

/// The execution provider the model runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExecutionProvider {
    #[default]
    Cpu,
    Cuda,
}

/// ORT's graph optimization level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OptLevel {
    #[default]
    Disable,
    Basic,
    Extended,
    All,
}

/// How the BFC arena grows when no free chunk fits a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExtendStrategy {
    /// ORT's default: regions double from the initial chunk (1 MiB) up to 1 GiB.
    #[default]
    NextPowerOfTwo,
    /// Each new region is exactly the request.
    SameAsRequested,
}

/// The arena's first region (`initial_chunk_size_bytes`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InitialChunk {
    /// ORT's default, 1 MiB.
    OrtDefault,
    /// This many bytes.
    Bytes(u64),
    /// The arena's budget under the ceiling (the ceiling less what the caller feeds), with the
    /// arena capped there too: with `kNextPowerOfTwo` the arena is one region (with
    /// `kSameAsRequested` the first region is each request, as ever), so which free chunk serves a request
    /// never depends on where the system allocator put separate regions (with many regions,
    /// ties between equal chunks go by address, which changes from run to run). Resolved to
    /// [`InitialChunk::Bytes`] in the profile a written model records.
    #[default]
    ArenaBudget,
}

/// Where a step's graph outputs live and what of them the arena holds between steps. In
/// every case the runner hands the caller the outputs in buffers outside the arena, which
/// the caller holds into the next step: the ledger counts them beside the arena.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallerOutputs {
    /// ORT allocates the outputs in the arena; the runner copies them out and drops ORT's
    /// before the next step starts.
    Released,
    /// `outs = sess.run(...)` in a loop: the previous step's outputs stay in the arena until
    /// the next step has returned its own.
    Held,
    /// Every output is bound (IOBinding) to a buffer the runner allocates once outside the
    /// arena; ORT writes it there, and the arena never holds an output.
    #[default]
    Bound,
}

/// The deployment profile. [`Profile::default`] is the profile on which recompute pays off
/// best (measured; docs/guide/profile.md, "Why this default").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub execution_provider: ExecutionProvider,
    /// The level the model must be loaded at.
    pub graph_optimization_level: OptLevel,
    /// The level ORT optimized the model at before it was planned (ORT's offline mode,
    /// `optimized_model_filepath`); such a model is loaded at `disable`. `None`: planned as given.
    pub offline_optimization_level: Option<OptLevel>,
    pub enable_mem_pattern: bool,
    pub arena_extend_strategy: ExtendStrategy,
    /// The arena's first region.
    pub initial_chunk: InitialChunk,
    pub caller_outputs: CallerOutputs,
    /// The session's intra-op threads (`intra_op_num_threads`): MLAS sizes some kernels'
    /// working buffers per thread.
    pub intra_op_num_threads: u32,
    /// Consecutive steps of one session the device must hold (the memory pattern acts from
    /// the second on; held outputs from the second on).
    pub steps: u32,
    /// Session config entries the run needs (e.g. CSE off), key → value.
    pub session_config: BTreeMap<String, String>,
    /// The ONNX Runtime version the model runs on: [`ORT_VERSION`], or [`TRAINING_ORT_VERSION`]
    /// for ORT training artifacts (its planner version decides the peak).
    pub ort_version: &'static str,
}

impl Default for Profile {
    fn default() -> Profile {
        Profile {
            execution_provider: ExecutionProvider::Cpu,
            graph_optimization_level: OptLevel::Disable,
            offline_optimization_level: None,
            enable_mem_pattern: false,
            arena_extend_strategy: ExtendStrategy::NextPowerOfTwo,
            initial_chunk: InitialChunk::ArenaBudget,
            caller_outputs: CallerOutputs::Bound,
            intra_op_num_threads: 1,
            steps: 3,
            session_config: BTreeMap::from([
                (
                    DISABLE_OPTIMIZERS_KEY.to_string(),
                    CSE_OPTIMIZER.to_string(),
                ),
                (
                    crate::ort::DISABLE_PREPACKING_KEY.to_string(),
                    "1".to_string(),
                ),
            ]),
            ort_version: ORT_VERSION,
        }
    }
}

/// ORT's default first region of a BFC arena.
pub const DEFAULT_INITIAL_CHUNK: u64 = 1 << 20;

impl ExecutionProvider {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionProvider::Cpu => "cpu",
            ExecutionProvider::Cuda => "cuda",
        }
    }
}

impl OptLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            OptLevel::Disable => "disable",
            OptLevel::Basic => "basic",
            OptLevel::Extended => "extended",
            OptLevel::All => "all",
        }
    }
}

impl ExtendStrategy {
    /// ORT's name (`OrtArenaCfg`'s `arena_extend_strategy` takes 0 and 1 for these).
    pub fn as_str(self) -> &'static str {
        match self {
            ExtendStrategy::NextPowerOfTwo => "kNextPowerOfTwo",
            ExtendStrategy::SameAsRequested => "kSameAsRequested",
        }
    }

    /// The value of `OrtArenaCfg`'s `arena_extend_strategy`.
    pub fn ort_value(self) -> usize {
        match self {
            ExtendStrategy::NextPowerOfTwo => 0,
            ExtendStrategy::SameAsRequested => 1,
        }
    }
}

impl CallerOutputs {
    pub fn as_str(self) -> &'static str {
        match self {
            CallerOutputs::Released => "released",
            CallerOutputs::Held => "held",
            CallerOutputs::Bound => "bound",
        }
    }
}

macro_rules! parse_enum {
    ($name:ident, $expected:literal, $($text:literal => $value:expr),+) => {
        impl std::str::FromStr for $name {
            type Err = ProfileError;
            fn from_str(s: &str) -> Result<$name, ProfileError> {
                match s {
                    $($text => Ok($value),)+
                    _ => Err(ProfileError::BadValue {
                        key: stringify!($name).to_string(),
                        value: s.to_string(),
                        expected: $expected,
                    }),
                }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

parse_enum!(ExecutionProvider, "`cpu` or `cuda`", "cpu" => ExecutionProvider::Cpu, "cuda" => ExecutionProvider::Cuda);
parse_enum!(OptLevel, "`disable`, `basic`, `extended` or `all`",
    "disable" => OptLevel::Disable, "basic" => OptLevel::Basic,
    "extended" => OptLevel::Extended, "all" => OptLevel::All);
parse_enum!(ExtendStrategy, "`kNextPowerOfTwo` or `kSameAsRequested`",
    "kNextPowerOfTwo" => ExtendStrategy::NextPowerOfTwo,
    "kSameAsRequested" => ExtendStrategy::SameAsRequested);
parse_enum!(CallerOutputs, "`released`, `held` or `bound`",
    "released" => CallerOutputs::Released, "held" => CallerOutputs::Held,
    "bound" => CallerOutputs::Bound);

const KEYS: &[&str] = &[
    "graph_optimization_level",
    "offline_optimization_level",
    "enable_mem_pattern",
    "arena_extend_strategy",
    "initial_chunk_size_bytes",
    "execution_provider",
    "caller_outputs",
    "intra_op_num_threads",
    "steps",
    "ort_version",
];

/// Why held outputs in an arena of several regions are not offered (measured,
/// `examples/truth_table.rs --profiles`, ORT 1.31.1 CPU, two runs of each).
const HELD_MANY_REGIONS: &str = "with held outputs, an arena of several regions needs a cap that depends on where the C library places its regions (ORT breaks ties between equal free chunks by address, and the placement is the process's heap history), so its need is not predictable: measured against the prediction +4.71% on resnet18_d0_aot and +3.14% on bert_d01_aot under kSameAsRequested, +3.67% on resnet18_d0_aot and -1.94% on t5_d0_makefx under kNextPowerOfTwo from ORT's 1 MiB first region, +19.28% on mlp_d01_aot with the memory pattern on";
/// Why held outputs with the memory pattern on are not offered, even in one region.
const HELD_PATTERN: &str = "with held outputs and the memory pattern on, ORT's need changed between processes even in one region of the budget: measured +2.51% against the prediction on t5_d0_makefx in one run (both of its measurements) and to the byte in another";
/// Why onnxruntime-training profiles other than one region with the pattern off are not
/// offered (measured, `examples/truth_table.rs ort_ --profiles`).
const TRAINING_RUNTIME: &str = "onnxruntime-training 1.19.2's memory pattern differs from 1.31.1's in a way the tool does not model (measured against the prediction: -17.4% to +87.0% on ort_gpt2_training, -38.8% to +8.9% on ort_mlp_training); with the pattern off, that runtime is offered one kNextPowerOfTwo region of the budget, the profile its artifacts are validated under";
/// Why request-sized regions with the memory pattern off are not offered, even with the
/// outputs released (measured in the test suite's process and beside a thread that allocates).
const REQUEST_SIZED: &str = "with the memory pattern off, request-sized regions leave equal free chunks in different regions, and ORT breaks ties between them by address, which is the process's heap history: t5_d0_makefx needed 2,229,248 B in a quiet process (to the byte, as predicted) but 2,284,288 and 2,287,872 B (+2.5% and +2.6%) in 2 of 5 runs of the test suite's process, and up to +1.08% beside a thread allocating (30 measurements); ResNet-18, ViT, BERT, an onnx-ad GPT-2 and an HF GPT-2 stayed to the byte";
/// What to use instead of request-sized regions with the pattern off.
const NOT_REQUEST_SIZED: &str = "`--arena-extend kNextPowerOfTwo` (the default: one region of the arena budget, predicted to the byte), or `--mem-pattern on`, whose block is one request per step";
/// What to use instead.
const ONE_REGION: &str = "`--mem-pattern off --arena-extend kNextPowerOfTwo --initial-chunk budget` on the CPU (one region of the arena budget: predicted to the byte), or `--caller-outputs released`";

impl Profile {
    /// Every profile the flags can name on the CPU at level `disable`, offered or not: memory
    /// pattern off and on × `kNextPowerOfTwo` or `kSameAsRequested` × first region the arena
    /// budget or ORT's 1 MiB × outputs bound, released or held (24), the default first.
    pub fn every_flag_combination() -> Vec<Profile> {
        let mut out = vec![Profile::default()];
        for enable_mem_pattern in [false, true] {
            for arena_extend_strategy in [
                ExtendStrategy::NextPowerOfTwo,
                ExtendStrategy::SameAsRequested,
            ] {
                for initial_chunk in [InitialChunk::ArenaBudget, InitialChunk::OrtDefault] {
                    for caller_outputs in [
                        CallerOutputs::Bound,
                        CallerOutputs::Released,
                        CallerOutputs::Held,
                    ] {
                        let p = Profile {
                            enable_mem_pattern,
                            arena_extend_strategy,
                            initial_chunk,
                            caller_outputs,
                            ..Profile::default()
                        };
                        if p != Profile::default() {
                            out.push(p);
                        }
                    }
                }
            }
        }
        out
    }

    /// Whether the tool offers this profile ([`ProfileError::NotOffered`] if not): with held
    /// outputs only one CPU arena region of the budget (`kNextPowerOfTwo` from
    /// [`InitialChunk::ArenaBudget`]) with the memory pattern off; with released outputs every
    /// profile but request-sized regions with the memory pattern off. `recorded`: the profile was
    /// read from a model, whose arena budget is recorded as [`InitialChunk::Bytes`] (then
    /// [`Profile::one_region`] checks it against the need); from flags a size is refused with
    /// held outputs, since it may be below the need. CUDA's arena always starts from ORT's
    /// 1 MiB (its options take no initial chunk). On onnxruntime-training see
    /// [`Profile::offered_on_training_runtime`].
    pub fn offered(&self, recorded: bool) -> Result<(), ProfileError> {
        if self.ort_version == TRAINING_ORT_VERSION {
            self.offered_on_training_runtime(recorded)?;
        }
        if self.caller_outputs != CallerOutputs::Held {
            return self.offered_released();
        }
        let cuda = self.execution_provider == ExecutionProvider::Cuda;
        let one_region = !cuda
            && self.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo
            && match self.initial_chunk {
                InitialChunk::ArenaBudget => true,
                InitialChunk::Bytes(_) => recorded,
                InitialChunk::OrtDefault => false,
            };
        if one_region && !self.enable_mem_pattern {
            return Ok(());
        }
        let chunk = match self.initial_chunk {
            InitialChunk::ArenaBudget => "budget".to_string(),
            InitialChunk::OrtDefault => "default".to_string(),
            InitialChunk::Bytes(b) => b.to_string(),
        };
        Err(ProfileError::NotOffered {
            flags: format!(
                "`{}--mem-pattern {} --arena-extend {} --initial-chunk {chunk} --caller-outputs held`",
                if cuda { "--provider cuda " } else { "" },
                if self.enable_mem_pattern { "on" } else { "off" },
                self.arena_extend_strategy,
            ),
            keys: format!(
                "`ckpt-opt.profile.execution_provider` = `{}`, `ckpt-opt.profile.enable_mem_pattern` = `{}`, `ckpt-opt.profile.arena_extend_strategy` = `{}`, `ckpt-opt.profile.initial_chunk_size_bytes` {}, `ckpt-opt.profile.caller_outputs` = `held`",
                self.execution_provider,
                self.enable_mem_pattern,
                self.arena_extend_strategy,
                match self.initial_chunk {
                    InitialChunk::OrtDefault => "absent".to_string(),
                    InitialChunk::ArenaBudget => "= `arena_budget`".to_string(),
                    InitialChunk::Bytes(b) => format!("= `{b}`"),
                }
            ),
            why: if one_region {
                HELD_PATTERN
            } else {
                HELD_MANY_REGIONS
            },
            instead: ONE_REGION,
        })
    }

    /// With the outputs released every profile is offered but request-sized regions
    /// (`kSameAsRequested`) with the memory pattern off, whose need depends on the process's
    /// heap ([`REQUEST_SIZED`]).
    fn offered_released(&self) -> Result<(), ProfileError> {
        if self.enable_mem_pattern || self.arena_extend_strategy != ExtendStrategy::SameAsRequested
        {
            return Ok(());
        }
        Err(ProfileError::NotOffered {
            flags: format!(
                "`{}--mem-pattern off --arena-extend kSameAsRequested`",
                if self.execution_provider == ExecutionProvider::Cuda {
                    "--provider cuda "
                } else {
                    ""
                }
            ),
            keys: "`ckpt-opt.profile.enable_mem_pattern` = `false`, `ckpt-opt.profile.arena_extend_strategy` = `kSameAsRequested`".to_string(),
            why: REQUEST_SIZED,
            instead: NOT_REQUEST_SIZED,
        })
    }

    /// On onnxruntime-training ([`TRAINING_ORT_VERSION`], ORT training artifacts) only one
    /// `kNextPowerOfTwo` region of the budget with the memory pattern off is offered: that
    /// runtime's planner and memory pattern differ from 1.31.1's in ways not modelled.
    pub fn offered_on_training_runtime(&self, recorded: bool) -> Result<(), ProfileError> {
        let one_region = match self.initial_chunk {
            InitialChunk::ArenaBudget => true,
            InitialChunk::Bytes(_) => recorded,
            InitialChunk::OrtDefault => false,
        };
        if !self.enable_mem_pattern
            && self.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo
            && one_region
            && self.execution_provider == ExecutionProvider::Cpu
        {
            return Ok(());
        }
        Err(ProfileError::NotOffered {
            flags: format!(
                "`--mem-pattern {} --arena-extend {} --initial-chunk {}{}` on an ORT training artifact",
                if self.enable_mem_pattern { "on" } else { "off" },
                self.arena_extend_strategy,
                match self.initial_chunk {
                    InitialChunk::ArenaBudget => "budget".to_string(),
                    InitialChunk::OrtDefault => "default".to_string(),
                    InitialChunk::Bytes(b) => b.to_string(),
                },
                if self.execution_provider == ExecutionProvider::Cuda {
                    " --provider cuda"
                } else {
                    ""
                }
            ),
            keys: format!(
                "`ckpt-opt.profile.ort_version` = `{TRAINING_ORT_VERSION}`, `ckpt-opt.profile.enable_mem_pattern` = `{}`, `ckpt-opt.profile.arena_extend_strategy` = `{}`",
                self.enable_mem_pattern, self.arena_extend_strategy
            ),
            why: TRAINING_RUNTIME,
            instead: "`--mem-pattern off --arena-extend kNextPowerOfTwo --initial-chunk budget` (the defaults: one region of the arena budget)",
        })
    }

    /// Whether a profile read from a model ([`Profile::offered`] with `recorded`) holds its
    /// steps in one region when they need `need` bytes of arena: a recorded first region below
    /// the need grows further regions, which is not offered with held outputs or on
    /// onnxruntime-training.
    pub fn one_region(&self, need: u64) -> Result<(), ProfileError> {
        let held = self.caller_outputs == CallerOutputs::Held;
        let training = self.ort_version == TRAINING_ORT_VERSION;
        match self.initial_chunk {
            InitialChunk::Bytes(b)
                if (held || training)
                    && self.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo
                    && self.execution_provider == ExecutionProvider::Cpu
                    && b < need =>
            {
                Err(ProfileError::NotOffered {
                    flags: format!(
                        "`--initial-chunk {b}{}`",
                        if held { " --caller-outputs held" } else { "" }
                    ),
                    keys: format!(
                        "`ckpt-opt.profile.initial_chunk_size_bytes` = `{b}` below the arena need of {need} B, {}",
                        if held {
                            "`ckpt-opt.profile.caller_outputs` = `held`".to_string()
                        } else {
                            format!("`ckpt-opt.profile.ort_version` = `{TRAINING_ORT_VERSION}`")
                        }
                    ),
                    why: if held { HELD_MANY_REGIONS } else { TRAINING_RUNTIME },
                    instead: ONE_REGION,
                })
            }
            _ => Ok(()),
        }
    }

    /// The first region the arena reserves when the arena is capped at `cap` bytes (`None`:
    /// uncapped).
    pub fn initial_chunk_bytes(&self, cap: Option<u64>) -> u64 {
        match self.initial_chunk {
            InitialChunk::OrtDefault => DEFAULT_INITIAL_CHUNK,
            InitialChunk::Bytes(b) => b,
            InitialChunk::ArenaBudget => cap.map_or(DEFAULT_INITIAL_CHUNK, |c| {
                c.min(crate::ort::MAX_INITIAL_CHUNK)
            }),
        }
    }

    /// The profile a written model records: an arena sized to the budget becomes that many
    /// bytes.
    pub fn resolved(&self, arena_budget: u64) -> Profile {
        let mut p = self.clone();
        if p.initial_chunk == InitialChunk::ArenaBudget {
            p.initial_chunk =
                InitialChunk::Bytes(arena_budget.clamp(1, crate::ort::MAX_INITIAL_CHUNK));
        }
        p
    }

    /// The `metadata_props` entries that record the profile, sorted by key.
    pub fn metadata(&self) -> Vec<(String, String)> {
        let mut out = vec![
            (
                "graph_optimization_level",
                self.graph_optimization_level.to_string(),
            ),
            ("enable_mem_pattern", self.enable_mem_pattern.to_string()),
            (
                "arena_extend_strategy",
                self.arena_extend_strategy.to_string(),
            ),
            ("execution_provider", self.execution_provider.to_string()),
            ("caller_outputs", self.caller_outputs.to_string()),
            (
                "intra_op_num_threads",
                self.intra_op_num_threads.to_string(),
            ),
            ("steps", self.steps.to_string()),
            ("ort_version", self.ort_version.to_string()),
        ];
        if let Some(l) = self.offline_optimization_level {
            out.push(("offline_optimization_level", l.to_string()));
        }
        match self.initial_chunk {
            InitialChunk::OrtDefault => {}
            InitialChunk::Bytes(c) => out.push(("initial_chunk_size_bytes", c.to_string())),
            InitialChunk::ArenaBudget => {
                out.push(("initial_chunk_size_bytes", "arena_budget".to_string()))
            }
        }
        let mut out: Vec<(String, String)> = out
            .into_iter()
            .map(|(k, v)| (format!("{PROFILE_KEY_PREFIX}{k}"), v))
            .collect();
        out.extend(
            self.session_config
                .iter()
                .map(|(k, v)| (format!("{SESSION_CONFIG_KEY_PREFIX}{k}"), v.clone())),
        );
        out.sort();
        out
    }

    /// Set one setting by its short key (`enable_mem_pattern`, …), as flags and metadata name them.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ProfileError> {
        let bad = |expected: &'static str| ProfileError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let named = |e: ProfileError| match e {
            ProfileError::BadValue {
                value, expected, ..
            } => ProfileError::BadValue {
                key: key.to_string(),
                value,
                expected,
            },
            other => other,
        };
        match key {
            "graph_optimization_level" => {
                self.graph_optimization_level = value.parse().map_err(named)?
            }
            "offline_optimization_level" => {
                self.offline_optimization_level = match value.parse().map_err(named)? {
                    OptLevel::Disable => None,
                    l => Some(l),
                }
            }
            "enable_mem_pattern" => {
                self.enable_mem_pattern = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("`true` or `false`")),
                }
            }
            "arena_extend_strategy" => self.arena_extend_strategy = value.parse().map_err(named)?,
            "initial_chunk_size_bytes" => {
                self.initial_chunk = match value {
                    "arena_budget" => InitialChunk::ArenaBudget,
                    "default" => InitialChunk::OrtDefault,
                    _ => match value.parse::<u64>() {
                        Ok(v) if v > 0 && v <= crate::ort::MAX_INITIAL_CHUNK => {
                            InitialChunk::Bytes(v)
                        }
                        _ => {
                            return Err(bad(
                                "a positive number of bytes up to 2147483392 (ORT's arena config holds a C int), `arena_budget` or `default`",
                            ))
                        }
                    },
                }
            }
            "execution_provider" => self.execution_provider = value.parse().map_err(named)?,
            "caller_outputs" => self.caller_outputs = value.parse().map_err(named)?,
            "intra_op_num_threads" => {
                self.intra_op_num_threads = match value.parse::<u32>() {
                    Ok(v) if (1..=1024).contains(&v) => v,
                    _ => return Err(bad("a whole number of threads from 1 to 1024")),
                }
            }
            "steps" => {
                let v: u32 = value
                    .parse()
                    .map_err(|_| bad("a whole number of steps from 1 to 100"))?;
                if !(1..=100).contains(&v) {
                    return Err(bad("a whole number of steps from 1 to 100"));
                }
                self.steps = v;
            }
            "ort_version" => {
                self.ort_version = [ORT_VERSION, TRAINING_ORT_VERSION]
                    .into_iter()
                    .find(|v| *v == value)
                    .ok_or_else(|| bad("`1.31.1` or `1.19.2` (training artifacts)"))?
            }
            _ => {
                return Err(ProfileError::UnknownKey {
                    key: key.to_string(),
                    known: KEYS.join(", "),
                })
            }
        }
        Ok(())
    }

    /// [`Profile::from_metadata`] of `model`'s `metadata_props` (entries without a key or a
    /// value are not profile entries).
    pub fn from_model(model: &crate::onnx::ModelProto) -> Result<Option<Profile>, ProfileError> {
        Profile::from_metadata(
            model
                .metadata_props
                .iter()
                .filter_map(|p| Some((p.key.as_deref()?, p.value.as_deref()?))),
        )
    }

    /// The profile a model's `metadata_props` record, if any key of it is present; settings
    /// not recorded keep their defaults. A recorded profile the tool does not offer
    /// ([`Profile::offered`]) is refused.
    pub fn from_metadata<'a>(
        props: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Option<Profile>, ProfileError> {
        let mut p = Profile {
            session_config: BTreeMap::new(),
            ..Profile::default()
        };
        let mut any = false;
        for (k, v) in props {
            if let Some(short) = k.strip_prefix(PROFILE_KEY_PREFIX) {
                p.set(short, v)?;
                any = true;
            } else if let Some(entry) = k.strip_prefix(SESSION_CONFIG_KEY_PREFIX) {
                p.session_config.insert(entry.to_string(), v.to_string());
                any = true;
            }
        }
        if any {
            p.offered(true)?;
        }
        Ok(any.then_some(p))
    }

    /// One line for reports: `cpu, level disable, memory pattern off, kSameAsRequested arena, outputs released, 3 steps`
    /// (`level disable (optimized offline at all)` for an offline-optimized model).
    pub fn describe(&self) -> String {
        format!(
            "{}{}, level {}{}, memory pattern {}, {} arena{}, outputs {}, {} intra-op thread{}, {} steps",
            self.execution_provider,
            if self.ort_version == ORT_VERSION {
                String::new()
            } else {
                format!(" (ONNX Runtime {})", self.ort_version)
            },
            self.graph_optimization_level,
            match self.offline_optimization_level {
                Some(l) => format!(" (optimized offline at {l})"),
                None => String::new(),
            },
            if self.enable_mem_pattern { "on" } else { "off" },
            self.arena_extend_strategy,
            match self.initial_chunk {
                InitialChunk::OrtDefault => String::new(),
                InitialChunk::Bytes(c) => format!(" from {c} B"),
                InitialChunk::ArenaBudget
                    if self.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo =>
                {
                    " in one region of the arena budget".to_string()
                }
                InitialChunk::ArenaBudget => String::new(),
            },
            self.caller_outputs,
            self.intra_op_num_threads,
            if self.intra_op_num_threads == 1 { "" } else { "s" },
            self.steps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ORT's arena config holds the first region in a C int: a budget above it resolves to the
    /// largest aligned value it takes, and a recorded value above it is refused by name.
    #[test]
    fn an_arena_budget_above_a_c_int_resolves_to_the_largest_first_region() {
        let p = Profile::default().resolved(69 << 30);
        assert_eq!(
            p.initial_chunk,
            InitialChunk::Bytes(crate::ort::MAX_INITIAL_CHUNK)
        );
        assert_eq!(crate::ort::MAX_INITIAL_CHUNK, 2_147_483_392);
        assert_eq!(
            Profile::default().initial_chunk_bytes(Some(69 << 30)),
            crate::ort::MAX_INITIAL_CHUNK
        );
        let mut q = Profile::default();
        let e = q
            .set("initial_chunk_size_bytes", "4294967296")
            .unwrap_err()
            .to_string();
        assert!(e.contains("initial_chunk_size_bytes"), "{e}");
    }

    /// Held outputs are offered in one region of the budget (and from ORT's 1 MiB with the
    /// memory pattern on); a recorded first region counts as the budget when it holds the need.
    #[test]
    fn held_outputs_are_offered_in_one_region_only() {
        let held = Profile {
            caller_outputs: CallerOutputs::Held,
            ..Profile::default()
        };
        assert_eq!(held.offered(false), Ok(()));
        let recorded = held.resolved(4096);
        assert!(matches!(
            recorded.offered(false),
            Err(ProfileError::NotOffered { .. })
        ));
        assert_eq!(recorded.offered(true), Ok(()));
        assert_eq!(recorded.one_region(4096), Ok(()));
        let e = recorded.one_region(4352).unwrap_err().to_string();
        assert!(e.contains("below the arena need of 4352 B"), "{e}");
        let released = Profile::default().resolved(4096);
        assert_eq!(released.offered(false), Ok(()));
        // Released outputs: request-sized regions only with the memory pattern on.
        let request_sized = Profile {
            arena_extend_strategy: ExtendStrategy::SameAsRequested,
            ..Profile::default()
        };
        let e = request_sized.offered(false).unwrap_err().to_string();
        assert!(
            e.contains("`--mem-pattern off --arena-extend kSameAsRequested`")
                && e.contains("t5_d0_makefx")
                && e.contains("use `--arena-extend kNextPowerOfTwo`"),
            "{e}"
        );
        let with_pattern = Profile {
            enable_mem_pattern: true,
            ..request_sized.clone()
        };
        assert_eq!(with_pattern.offered(false), Ok(()));
        assert_eq!(with_pattern.resolved(4096).offered(true), Ok(()));
        assert_eq!(released.one_region(1 << 30), Ok(()));
        let e = Profile::from_metadata([
            ("ckpt-opt.profile.arena_extend_strategy", "kSameAsRequested"),
            ("ckpt-opt.profile.caller_outputs", "held"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--arena-extend kSameAsRequested") && e.contains("--caller-outputs held"),
            "{e}"
        );
        // On onnxruntime-training: one region of the budget, memory pattern off, only.
        let training = Profile {
            ort_version: TRAINING_ORT_VERSION,
            ..Profile::default()
        };
        assert_eq!(training.offered(false), Ok(()));
        for p in [
            Profile {
                enable_mem_pattern: true,
                ..training.clone()
            },
            Profile {
                arena_extend_strategy: ExtendStrategy::SameAsRequested,
                ..training.clone()
            },
            Profile {
                initial_chunk: InitialChunk::OrtDefault,
                ..training.clone()
            },
        ] {
            let e = p.offered(true).unwrap_err().to_string();
            assert!(e.contains("on an ORT training artifact"), "{e}");
        }
        assert!(training.resolved(4096).one_region(8192).is_err());
        let cuda = Profile {
            execution_provider: ExecutionProvider::Cuda,
            ..held.clone()
        };
        assert!(cuda.offered(false).is_err());
        let e = Profile {
            enable_mem_pattern: true,
            ..held.clone()
        }
        .offered(false)
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("+2.51%") && e.contains("--mem-pattern on"),
            "{e}"
        );
    }

    #[test]
    fn metadata_reads_back() {
        let mut p = Profile::default();
        p.set("enable_mem_pattern", "true").unwrap();
        p.set("arena_extend_strategy", "kNextPowerOfTwo").unwrap();
        p.set("initial_chunk_size_bytes", "4096").unwrap();
        assert_eq!(p.initial_chunk, InitialChunk::Bytes(4096));
        let mut h = Profile::default();
        h.set("caller_outputs", "held").unwrap();
        h.set("initial_chunk_size_bytes", "8192").unwrap();
        let md = h.metadata();
        let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .unwrap()
            .unwrap();
        assert_eq!(back.caller_outputs, CallerOutputs::Held);
        let mut t = Profile::default();
        t.set("ort_version", "1.19.2").unwrap();
        assert_eq!(t.ort_version, TRAINING_ORT_VERSION);
        let md = t.metadata();
        assert!(md.contains(&("ckpt-opt.profile.ort_version".into(), "1.19.2".into())));
        let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .unwrap()
            .unwrap();
        assert_eq!(back, t);
        let md = p.metadata();
        assert!(md.contains(&(
            "ckpt-opt.profile.arena_extend_strategy".into(),
            "kNextPowerOfTwo".into()
        )));
        assert!(md.contains(&(
            "ckpt-opt.session_config.optimization.disable_specified_optimizers".into(),
            "CommonSubexpressionElimination".into()
        )));
        let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .unwrap()
            .unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn offline_level_reads_back_and_is_described() {
        let mut p = Profile::default();
        assert!(!p
            .metadata()
            .iter()
            .any(|(k, _)| k.ends_with("offline_optimization_level")));
        p.set("offline_optimization_level", "extended").unwrap();
        assert_eq!(p.offline_optimization_level, Some(OptLevel::Extended));
        let md = p.metadata();
        assert!(md.contains(&(
            "ckpt-opt.profile.offline_optimization_level".into(),
            "extended".into()
        )));
        assert!(md.contains(&(
            "ckpt-opt.profile.graph_optimization_level".into(),
            "disable".into()
        )));
        let back = Profile::from_metadata(md.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .unwrap()
            .unwrap();
        assert_eq!(back, p);
        assert!(
            p.describe().starts_with(
                "cpu, level disable (optimized offline at extended), memory pattern off"
            ),
            "{}",
            p.describe()
        );
        p.set("offline_optimization_level", "disable").unwrap();
        assert_eq!(p.offline_optimization_level, None);
        let e = p.set("offline_optimization_level", "max").unwrap_err();
        assert_eq!(
            e.to_string(),
            "profile setting `offline_optimization_level` = `max`: expected one of `disable`, `basic`, `extended` or `all`"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let mut p = Profile::default();
        let e = p.set("arena_extend_strategy", "kDouble").unwrap_err();
        assert_eq!(
            e.to_string(),
            "profile setting `arena_extend_strategy` = `kDouble`: expected one of `kNextPowerOfTwo` or `kSameAsRequested`"
        );
        assert!(p.set("steps", "0").is_err());
        assert!(p.set("ort_version", "1.20.0").is_err());
        assert!(p.set("initial_chunk_size_bytes", "0").is_err());
        assert!(matches!(
            p.set("arena", "x"),
            Err(ProfileError::UnknownKey { .. })
        ));
        assert_eq!(Profile::from_metadata([("other", "x")]).unwrap(), None);
    }
}
