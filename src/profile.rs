//! The deployment profile at the CLI edge: the ONNX Runtime session a profile means
//! ([`session_config`]) and the flags that select one.

use ckpt_ir::profile::{
    ExecutionProvider, ExtendStrategy, InitialChunk, OptLevel as Level, Profile,
};
use ckpt_runtime::{Arena, OptLevel, Provider, SessionConfig};

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
