//! Facts about ONNX Runtime itself (not about one kernel), said once for every crate:
//! the arena's allocation granularity, the optimizer a recompute rewrite must switch off, and
//! what differs between the runtime versions the simulator models.

/// ORT's arena rounds every allocation up to this many bytes (`kAllocAlignment` in
/// `core/framework/allocator.h`); a liveness simulation rounds the same way.
pub const ALLOC_ALIGN: u64 = 256;

/// ORT's name for the graph optimizer that would merge recompute clones back into their
/// originals (common-subexpression elimination).
pub const CSE_OPTIMIZER: &str = "CommonSubexpressionElimination";

/// The session config key that lists optimizers ORT must not run (comma-separated names).
pub const DISABLE_OPTIMIZERS_KEY: &str = "optimization.disable_specified_optimizers";

/// The session config key that stops ORT from pre-packing constant weights at load. Pre-packed
/// weights (a MatMul or Gemm reading an initializer: MLAS's packed B) are allocated from the
/// session's arena when it loads, in a layout MLAS sizes per kernel; with it `1` the arena
/// holds no load-time copy of a weight (a frozen backbone's weights stay where
/// [`constant_place`] puts them).
pub const DISABLE_PREPACKING_KEY: &str = "session.disable_prepacking";

/// The largest first region an arena can be given: `OrtArenaCfg`'s `initial_chunk_size_bytes`
/// is a C `int` (ORT refuses larger values with "Invalid configuration value"), here rounded
/// down to [`ALLOC_ALIGN`]. An arena budget above it is served by this region and the
/// regions that grow after it.
pub const MAX_INITIAL_CHUNK: u64 = (i32::MAX as u64) / ALLOC_ALIGN * ALLOC_ALIGN;

/// `bytes` rounded up as ORT's arena rounds a request.
pub fn alloc_rounded(bytes: u64) -> u64 {
    bytes.div_ceil(ALLOC_ALIGN) * ALLOC_ALIGN
}

/// The ONNX Runtime whose planner and arena the simulator models, and that runs standard graphs.
pub const ORT_VERSION: &str = "1.31.1";

/// The ONNX Runtime that runs ORT training artifacts (`generate_artifacts`' `training_model.onnx`, whose
/// training ops only onnxruntime-training has), through its Python package.
pub const TRAINING_ORT_VERSION: &str = "1.19.2";

/// Whether ONNX Runtime `ort_version` allocates every initializer from the session's arena at
/// load, one chunk each (its requested bytes, rounded as [`alloc_rounded`] rounds), in the
/// region the runs then use, held for the session's life. Measured on the training artifacts
/// (`tests/training.rs`): onnxruntime-training [`TRAINING_ORT_VERSION`] does; [`ORT_VERSION`]
/// places them as [`constant_place`] says.
pub fn initializers_in_arena(ort_version: &str) -> bool {
    ort_version == TRAINING_ORT_VERSION
}

/// The largest constant (an initializer, or a `Constant` node's value, which ORT folds into an
/// initializer at load) that [`ORT_VERSION`] copies into the session's allocator at load. A
/// larger one stays in the model's own bytes, which the session holds (ORT's
/// `kSmallTensorExternalDataThreshold`).
pub const SMALL_CONSTANT_MAX_BYTES: u64 = 127;

/// Where ONNX Runtime keeps a constant of `bytes` for the session's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstantPlace {
    /// A chunk of the arena's regions ([`initializers_in_arena`]).
    ArenaChunk,
    /// `Reserve()`d from the arena's allocator at load: outside its regions, unrounded, but
    /// counted against its `max_mem` (BFC's `Extend` grows by at most `max_mem` less every
    /// byte allocated, reserved bytes included). Measured: a session's `InUse` after load is
    /// the sum of its constants of at most [`SMALL_CONSTANT_MAX_BYTES`], to the byte
    /// (`tests/deploy.rs`).
    Reserved,
    /// Outside the arena: device bytes all the same.
    OutsideArena,
}

/// Where ONNX Runtime `ort_version` keeps a constant of `bytes`.
pub fn constant_place(ort_version: &str, bytes: u64) -> ConstantPlace {
    if initializers_in_arena(ort_version) {
        ConstantPlace::ArenaChunk
    } else if bytes <= SMALL_CONSTANT_MAX_BYTES {
        ConstantPlace::Reserved
    } else {
        ConstantPlace::OutsideArena
    }
}

/// The ONNX Runtime version that runs `graph`: [`TRAINING_ORT_VERSION`] when it has an op only
/// ORT's training build has (`ops::training_only`), else [`ORT_VERSION`].
pub fn runtime_version(graph: &crate::Graph) -> &'static str {
    // The registry entry cached on the node where there is one (no allocation per node).
    let training = graph
        .nodes()
        .iter()
        .any(|&n| match crate::ops::op_def(graph, n) {
            Some(d) => d.training_only,
            None => {
                let node = graph.node(n);
                crate::ops::training_only(&crate::normalise_domain(&node.domain), &node.op_type)
            }
        });
    if training {
        TRAINING_ORT_VERSION
    } else {
        ORT_VERSION
    }
}

/// The ops that [`shape_ops_follow_their_input`] moves (default domain).
pub const EARLY_SHAPE_OPS: &[&str] = &["Shape", "Size"];

/// Whether ONNX Runtime `ort_version`'s default execution order runs every [`EARLY_SHAPE_OPS`]
/// node right after the node that produces its input, instead of where the reverse
/// depth-first walk puts it: after each node of that walk's order it emits that node's
/// consumers of those op types whose producers have all run, in ascending node index.
/// Measured with the profiler's node order on the GPT-2 training artifact (all 318 nodes):
/// onnxruntime-training [`TRAINING_ORT_VERSION`] does, so a backward `Reshape`'s `Shape` of a
/// forward activation no longer holds that activation until the backward pass; [`ORT_VERSION`]
/// runs the plain walk (`docs/design/ort-internals.md`, section 1).
pub fn shape_ops_follow_their_input(ort_version: &str) -> bool {
    ort_version == TRAINING_ORT_VERSION
}
