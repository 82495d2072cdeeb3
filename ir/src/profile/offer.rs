//! Which profiles the tool offers: those whose device need it predicts within 1%, and for
//! every other combination a [`ProfileError::NotOffered`] that names the flags, the metadata
//! entries, the measured reason and what to use instead.

use super::{
    CallerOutputs, ExecutionProvider, ExtendStrategy, InitialChunk, Profile, ProfileError,
    TRAINING_ORT_VERSION,
};

/// Why held outputs in an arena of several regions are not offered (measured,
/// `examples/truth_table.rs --profiles`, ORT 1.31.1 CPU, two runs of each).
const HELD_MANY_REGIONS: &str = "with held outputs, an arena of several regions needs a cap that depends on where the C library places its regions (ORT breaks ties between equal free chunks by address, and the placement is the process's heap history), so its need is not predictable: measured against the prediction +4.71% on resnet18_d0_aot and +3.14% on bert_d01_aot under kSameAsRequested, +3.67% on resnet18_d0_aot and -1.94% on t5_d0_makefx under kNextPowerOfTwo from ORT's 1 MiB first region, +19.28% on mlp_d01_aot with the memory pattern on";
/// Why held outputs with the memory pattern on are not offered, even in one region.
const HELD_PATTERN: &str = "with held outputs and the memory pattern on, ORT's need changed between processes even in one region of the budget: measured +2.51% against the prediction on t5_d0_makefx in one run (both of its measurements) and to the byte in another";
/// Why onnxruntime-training profiles other than one region with the pattern off are not
/// offered (measured, `examples/truth_table.rs ort_ --profiles`).
const TRAINING_RUNTIME: &str = "onnxruntime-training 1.19.2's memory pattern differs from 1.31.1's in a way the tool does not model (measured against the prediction: -17.4% to +87.0% on ort_gpt2_training, -38.8% to +8.9% on ort_mlp_training); with the pattern off, that runtime is offered one kNextPowerOfTwo region of the budget, the profile its artifacts are validated under";
/// Why request-sized regions are not offered, even with the outputs bound or released
/// (measured in the test suite's process, beside a thread that allocates, and in quiet
/// processes).
const REQUEST_SIZED: &str = "request-sized regions leave equal free chunks in different regions, and ORT breaks ties between them by address, which is the process's heap history, so its need varies from process to process: with the memory pattern off t5_d0_makefx needed 2,229,248 B in a quiet process (to the byte, as predicted) but 2,284,288 and 2,287,872 B (+2.5% and +2.6%) in 2 of 5 runs of the test suite's process, and up to +1.08% beside a thread allocating (30 measurements); with the memory pattern on gpt2_d0_onnxad (outputs bound) needed from 3,227,648 to 3,270,656 B against a prediction of 3,270,656 B, and t5_d0_makefx (outputs released) up to 2,283,520 B against 2,229,248 B (+2.4%), so a plan could fail to run in the arena it records";
/// What to use instead of request-sized regions.
const NOT_REQUEST_SIZED: &str = "`--arena-extend kNextPowerOfTwo` (the default: one region of the arena budget, predicted to the byte, with the memory pattern off or on)";
/// What to use instead.
const ONE_REGION: &str = "`--mem-pattern off --arena-extend kNextPowerOfTwo --initial-chunk budget` on the CPU (one region of the arena budget: predicted to the byte), or `--caller-outputs released`";

impl Profile {
    /// Whether the tool offers this profile ([`ProfileError::NotOffered`] if not): with held
    /// outputs only one CPU arena region of the budget (`kNextPowerOfTwo` from
    /// [`InitialChunk::ArenaBudget`]) with the memory pattern off; with bound or released
    /// outputs every profile but request-sized regions. `recorded`: the profile was
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

    /// With the outputs bound or released every profile is offered but request-sized regions
    /// (`kSameAsRequested`), whose need depends on the process's heap ([`REQUEST_SIZED`]).
    fn offered_released(&self) -> Result<(), ProfileError> {
        if self.arena_extend_strategy != ExtendStrategy::SameAsRequested {
            return Ok(());
        }
        Err(ProfileError::NotOffered {
            flags: format!(
                "`{}--mem-pattern {} --arena-extend kSameAsRequested`",
                if self.execution_provider == ExecutionProvider::Cuda {
                    "--provider cuda "
                } else {
                    ""
                },
                if self.enable_mem_pattern { "on" } else { "off" },
            ),
            keys: format!(
                "`ckpt-opt.profile.enable_mem_pattern` = `{}`, `ckpt-opt.profile.arena_extend_strategy` = `kSameAsRequested`",
                self.enable_mem_pattern
            ),
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

    /// Whether this profile is offered in one arena region only: a CPU arena of
    /// `kNextPowerOfTwo` regions with held outputs or on onnxruntime-training (further regions
    /// are not offered there).
    fn one_region_only(&self) -> bool {
        (self.caller_outputs == CallerOutputs::Held || self.ort_version == TRAINING_ORT_VERSION)
            && self.arena_extend_strategy == ExtendStrategy::NextPowerOfTwo
            && self.execution_provider == ExecutionProvider::Cpu
    }

    /// The most arena bytes this profile's steps may use: in one region only (held outputs or
    /// onnxruntime-training, `kNextPowerOfTwo`, CPU) from a first region of the budget or of a size, at most
    /// ORT's largest first region, [`crate::ort::MAX_INITIAL_CHUNK`]; any other profile has no
    /// such bound (`u64::MAX`). Planning holds the need under it, so whether the profile is
    /// offered is known before any plan ([`Profile::one_region`] then holds).
    pub fn arena_bound(&self) -> u64 {
        if self.one_region_only() && self.initial_chunk != InitialChunk::OrtDefault {
            crate::ort::MAX_INITIAL_CHUNK
        } else {
            u64::MAX
        }
    }

    /// Whether a profile read from a model ([`Profile::offered`] with `recorded`) holds its
    /// steps in one region when they need `need` bytes of arena: a recorded first region below
    /// the need grows further regions, which is not offered with held outputs or on
    /// onnxruntime-training.
    pub fn one_region(&self, need: u64) -> Result<(), ProfileError> {
        let held = self.caller_outputs == CallerOutputs::Held;
        match self.initial_chunk {
            InitialChunk::Bytes(b) if self.one_region_only() && b < need =>
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
}
