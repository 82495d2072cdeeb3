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
//!
//! This module owns the settings and their defaults, the values the arena reads from them,
//! and the one-line description; `offer.rs` decides which profiles are offered, with the
//! measured reasons; `metadata.rs` reads and writes the `metadata_props` form.

mod metadata;
mod offer;
#[cfg(test)]
mod tests;

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
