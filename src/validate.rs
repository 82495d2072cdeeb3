//! Paired validation of an original and a rewritten training graph on ONNX Runtime:
//! the same seeded inputs, the same seeds for random ops (set in memory, never in the
//! user's files), every output compared within dtype-aware tolerances, a deliberately
//! broken control that must be rejected, measured peaks and step times side by side.
//!
//! Values are compared under ORT's deterministic compute (`session.use_deterministic_compute`),
//! so kernels that sum across threads in any order (CPU `ScatterND` with `reduction="add"`, the
//! embedding gradient) cannot fail a comparison by chance; tolerances are never loosened for
//! them. Every session is told the model's directory, so external data never resolves against
//! the current directory.

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use ckpt_ir::onnx::{self, attribute_proto::AttributeType};
use ckpt_ir::ops::{seed_attr, SeedAttr};
use ckpt_ir::Message;
use ckpt_runtime::{
    compare, locate_peak, measure_peak, run, time_steps, Arena, Comparison, HostTensor, Model,
    SessionConfig, Tolerances,
};

/// The policy printed with every validation.
pub const RNG_POLICY: &str = "random ops (Dropout, RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial) get the same seed in both graphs, derived from the run seed and the node name, set in memory only; each graph is compared on the first run of a fresh session; random ops are never recomputed";

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Set the seed of every random op from `seed` and the node's name. Returns how many.
pub fn seed_random_ops(model: &mut onnx::ModelProto, seed: u64) -> usize {
    let Some(g) = model.graph.as_mut() else {
        return 0;
    };
    let mut count = 0;
    for n in &mut g.node {
        let domain = ckpt_ir::normalise_domain(n.domain.as_deref().unwrap_or(""));
        let Some(seed_attr) = seed_attr(&domain, n.op_type.as_deref().unwrap_or("")) else {
            continue;
        };
        let s = (fnv(n.name.as_deref().unwrap_or("")) ^ seed) % 1_000_000_007;
        n.attribute.retain(|a| a.name.as_deref() != Some("seed"));
        n.attribute.push(if seed_attr == SeedAttr::Int {
            onnx::AttributeProto {
                name: Some("seed".into()),
                r#type: Some(AttributeType::Int as i32),
                i: Some(s as i64),
                ..Default::default()
            }
        } else {
            onnx::AttributeProto {
                name: Some("seed".into()),
                r#type: Some(AttributeType::Float as i32),
                f: Some(s as f32),
                ..Default::default()
            }
        });
        count += 1;
    }
    count
}

/// A broken variant: the first floating-point input of the node that computes the first
/// graph output (the loss) is scaled by 1 + 1e-3. Returns the model and the tensor's name.
/// `dir`: where the model's external data lives (its dtypes are inferred when the file
/// declares none, as a rewrite that dropped value_info does).
pub fn broken_control(
    model: &onnx::ModelProto,
    dir: Option<&std::path::Path>,
) -> Result<(onnx::ModelProto, String)> {
    let mut m = model.clone();
    let g = m
        .graph
        .as_mut()
        .ok_or_else(|| anyhow!("model has no graph"))?;
    let mut float_names: std::collections::HashSet<String> = g
        .value_info
        .iter()
        .chain(g.output.iter())
        .chain(g.input.iter())
        .filter(|v| matches!(v.r#type.as_ref().and_then(|t| t.value.as_ref()), Some(onnx::type_proto::Value::TensorType(t)) if t.elem_type == Some(1)))
        .filter_map(|v| v.name.clone())
        .collect();
    // Graphs without value_info (hand-written, stripped): the dtypes shape inference gives.
    if let Ok(graph) = ckpt_ir::import_bytes(
        model.encode_to_vec().into(),
        std::path::Path::new("control.onnx"),
        dir,
    ) {
        if let Ok(types) = ckpt_ir::ops::infer(&graph) {
            float_names.extend(
                graph
                    .tensor_ids()
                    .filter(|&t| {
                        types
                            .get(t)
                            .is_some_and(|tt| tt.dtype == ckpt_ir::DType::F32)
                    })
                    .map(|t| graph.tensor(t).name.clone()),
            );
        }
    }
    let first_out = g
        .output
        .first()
        .and_then(|o| o.name.clone())
        .ok_or_else(|| anyhow!("model has no outputs"))?;
    let producer = g
        .node
        .iter()
        .position(|n| n.output.contains(&first_out))
        .ok_or_else(|| {
            anyhow!("output `{first_out}` has no producer to perturb for the control")
        })?;
    let (slot, target) = g.node[producer]
        .input
        .iter()
        .enumerate()
        .find(|(_, t)| float_names.contains(*t))
        .map(|(s, t)| (s, t.clone()))
        .ok_or_else(|| {
            anyhow!(
                "the node computing `{first_out}` has no float input to perturb for the control"
            )
        })?;
    let scaled = format!("{target}.ckpt_opt_control");
    let scale = "ckpt_opt_control_scale".to_string();
    g.node[producer].input[slot] = scaled.clone();
    g.initializer.push(onnx::TensorProto {
        name: Some(scale.clone()),
        data_type: Some(1),
        raw_data: Some(1.001f32.to_le_bytes().to_vec().into()),
        ..Default::default()
    });
    let mul = onnx::NodeProto {
        input: vec![target.clone(), scale],
        output: vec![scaled],
        name: Some("ckpt_opt_control_mul".into()),
        op_type: Some("Mul".into()),
        domain: Some(String::new()),
        ..Default::default()
    };
    g.node.insert(producer, mul);
    Ok((m, target))
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
    /// Bytes the caller feeds and holds outside the arena (ledger: parameters, data, declared
    /// optimizer state).
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
/// profile for its steps and
/// compare it with `predicted_arena_bytes`; with a ceiling, also run it with the arena capped
/// at the ceiling less what the caller feeds.
pub fn measure_device(
    label: &str,
    model: &onnx::ModelProto,
    dir: Option<&std::path::Path>,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
    predicted_arena_bytes: u64,
) -> Result<DeviceMemory> {
    if crate::training::needs_training_runtime(model) {
        return crate::training::measure_device(label, model, inputs, e, predicted_arena_bytes);
    }
    let profile = &e.profile;
    let cfg = &crate::profile::session_config(profile);
    let arena_budget = e.arena_budget();
    let bytes = ort_ready(model, dir).encode_to_vec();
    let steps = profile.steps as usize;
    let hold = profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Held;
    let m = Model::new(label, &bytes).in_dir(dir);
    crate::progress::stage(format!(
        "validation: measuring the {label} graph's device need under the profile"
    ));
    let need = ckpt_runtime::measure_need(m, inputs, cfg, steps, hold)
        .with_context(|| format!("measuring the {label} graph's device need"))?;
    // Capped as the runner caps it: `max_mem` the ceiling less what is held outside the arena,
    // the first region the steps' budget.
    let runs_under_ceiling = match arena_budget {
        Some(budget) => Some(ckpt_runtime::runs_under(
            m,
            inputs,
            cfg,
            steps,
            hold,
            e.load_bytes,
            budget,
        )?),
        None => None,
    };
    let measured_load = need.uncapped.reserved_after_load;
    Ok(DeviceMemory {
        predicted_total_bytes: e.fixed_bytes + predicted_arena_bytes,
        measured_total_bytes: e.outside_arena_bytes() + measured_load + need.arena_bytes,
        predicted_load_bytes: e.load_bytes,
        measured_load_bytes: measured_load,
        predicted_arena_bytes,
        measured_arena_bytes: need.arena_bytes,
        relative_error: predicted_arena_bytes as f64 / need.arena_bytes.max(1) as f64 - 1.0,
        measured_in_use_bytes: need.uncapped.in_use_peak(),
        measured_reserved_bytes: need.uncapped.reserved(),
        runs_under_ceiling,
        sessions: need.runs + usize::from(arena_budget.is_some()),
    })
}

/// Predictions of both graphs' arena need under the profile, and the ceiling, for
/// [`check_memory`].
#[derive(Clone, Debug)]
pub struct MemoryExpectation {
    pub profile: ckpt_ir::Profile,
    /// The ledger's bytes beside the steps' arena ([`ckpt_passes::ledger::Ledger::fixed_bytes`]).
    pub fixed_bytes: u64,
    /// Of those, what loading takes from the arena ([`ckpt_passes::ledger::Ledger::load_bytes`]).
    pub load_bytes: u64,
    pub original_arena_bytes: u64,
    pub rewritten_arena_bytes: u64,
    pub ceiling_bytes: Option<u64>,
    /// The directory the original's external data resolves against.
    pub original_dir: Option<std::path::PathBuf>,
    /// The directory the rewritten graph's external data resolves against.
    pub rewritten_dir: Option<std::path::PathBuf>,
}

impl MemoryExpectation {
    /// What is held outside the arena's cap: the caller's bytes and constants outside it.
    pub fn outside_arena_bytes(&self) -> u64 {
        self.fixed_bytes.saturating_sub(self.load_bytes)
    }

    /// The steps' share of the ceiling: the ceiling less everything beside the steps' arena.
    pub fn arena_budget(&self) -> Option<u64> {
        self.ceiling_bytes
            .map(|c| c.saturating_sub(self.fixed_bytes))
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
    let budget = e.arena_budget();
    let o = measure_device(
        "original",
        original,
        e.original_dir.as_deref(),
        inputs,
        e,
        e.original_arena_bytes,
    )?;
    let r = measure_device(
        "rewritten",
        rewritten,
        e.rewritten_dir.as_deref(),
        inputs,
        e,
        e.rewritten_arena_bytes,
    )?;
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
                e.fixed_bytes
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
        fixed_bytes: e.fixed_bytes,
        tolerance: MEMORY_TOLERANCE,
        original: o,
        rewritten: r,
        passed: failures.is_empty(),
        failures,
    })
}

/// Measured numbers of one graph.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// Arena peak of one run (always-splitting arena: live tensors rounded to 256 B).
    pub peak_bytes: u64,
    /// Arena peak with ORT's default BFC arena.
    pub peak_bytes_default_arena: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    /// With `--locate-peak`: the node at which ORT's own run reaches its high-water mark.
    pub peak_node: Option<ckpt_runtime::PeakNode>,
}

/// The validation result (JSON keys are relied on by tests and receipts).
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub passed: bool,
    pub outputs: Vec<ckpt_runtime::OutputComparison>,
    pub control_rejected: bool,
    pub control_tensor: String,
    pub rng_policy: &'static str,
    pub random_ops_seeded: usize,
    /// Values were computed under `session.use_deterministic_compute=1`.
    pub deterministic_compute: bool,
    pub original: Measured,
    pub rewritten: Measured,
    /// The rewritten graph's peak under ORT's default optimizer set (CSE on), exact arena.
    pub rewritten_peak_bytes_with_cse: u64,
    /// Set when CSE undoes the recompute (the peak with CSE on is above the peak without).
    pub cse_warning: Option<String>,
    pub ort: serde_json::Value,
    pub session: serde_json::Value,
    pub input_generation: Vec<String>,
}

/// Options of a validation.
#[derive(Clone, Debug)]
pub struct ValidateOptions {
    pub cfg: SessionConfig,
    pub tol: Tolerances,
    pub seed: u64,
    pub warmup: usize,
    pub runs: usize,
    /// Name the node at which ORT peaks (exact CPU arena; ~log2(peak/256) extra runs per graph).
    pub locate_peak: bool,
    /// The directory the original's external data resolves against.
    pub original_dir: Option<std::path::PathBuf>,
    /// The directory the rewritten graph's external data resolves against.
    pub rewritten_dir: Option<std::path::PathBuf>,
    /// The original's session where it differs from `cfg`: a rewrite of a graph optimized
    /// offline is compared with its original run online at the level ORT optimized it at.
    pub original_cfg: Option<SessionConfig>,
}

fn measure(
    label: &str,
    bytes: &[u8],
    dir: Option<&std::path::Path>,
    inputs: &[HostTensor],
    o: &ValidateOptions,
    cfg: &SessionConfig,
) -> Result<Measured> {
    let o = &ValidateOptions {
        cfg: cfg.clone(),
        ..o.clone()
    };
    let exact_cfg = SessionConfig {
        arena: Arena::Exact,
        ..o.cfg.clone()
    };
    crate::progress::stage(format!(
        "validation: measuring the {label} graph's peak and step times"
    ));
    let m = Model::new(label, bytes).in_dir(dir);
    let exact = if o.cfg.provider == ckpt_runtime::Provider::Cpu {
        measure_peak(m, inputs, &exact_cfg)?.peak_bytes
    } else {
        0
    };
    let default_arena = measure_peak(m, inputs, &o.cfg)?.peak_bytes;
    let t = time_steps(m, inputs, &o.cfg, o.warmup, o.runs)?;
    let peak_node = if o.locate_peak && o.cfg.provider == ckpt_runtime::Provider::Cpu {
        Some(locate_peak(m, inputs, &exact_cfg)?)
    } else {
        None
    };
    Ok(Measured {
        peak_bytes: exact,
        peak_bytes_default_arena: default_arena,
        p50_ms: t.p50_ms,
        p95_ms: t.p95_ms,
        peak_node,
    })
}

/// `model` as ONNX Runtime can load it from bytes: its small external constants embedded
/// (read from `dir`; see [`ckpt_ir::embed_small_external`]), its weights left where they are.
pub fn ort_ready(model: &onnx::ModelProto, dir: Option<&std::path::Path>) -> onnx::ModelProto {
    let mut m = model.clone();
    if let Some(dir) = dir {
        ckpt_ir::embed_small_external(&mut m, dir);
    }
    m
}

/// The session config values are compared under: `cfg` with deterministic compute on.
pub fn deterministic(cfg: &SessionConfig) -> SessionConfig {
    let mut c = cfg.clone();
    c.config_entries
        .retain(|(k, _)| k != ckpt_runtime::DETERMINISTIC_COMPUTE_KEY);
    c.config_entries
        .push((ckpt_runtime::DETERMINISTIC_COMPUTE_KEY.into(), "1".into()));
    c
}

/// Validate `rewritten` against `original` (both already imported from these models).
pub fn validate(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    input_generation: Vec<String>,
    o: &ValidateOptions,
) -> Result<Validation> {
    if crate::training::needs_training_runtime(original) {
        return crate::training::validate(original, rewritten, inputs, input_generation, o);
    }
    let (a_dir, b_dir) = (o.original_dir.as_deref(), o.rewritten_dir.as_deref());
    let mut a = ort_ready(original, a_dir);
    let mut b = ort_ready(rewritten, b_dir);
    let seeded = seed_random_ops(&mut a, o.seed);
    seed_random_ops(&mut b, o.seed);
    let (a_bytes, b_bytes) = (a.encode_to_vec(), b.encode_to_vec());
    let info = ckpt_runtime::init(None)
        .context("finding ONNX Runtime")?
        .clone();
    let values_cfg = deterministic(&o.cfg);
    let original_values_cfg = deterministic(o.original_cfg.as_ref().unwrap_or(&o.cfg));
    crate::progress::stage("validation: running the original graph");
    let ref_out = run(
        Model::new("original", &a_bytes).in_dir(a_dir),
        inputs,
        &original_values_cfg,
    )
    .context("running the original graph")?;
    crate::progress::stage("validation: running the rewritten graph");
    let cand_out = run(
        Model::new("rewritten", &b_bytes).in_dir(b_dir),
        inputs,
        &values_cfg,
    )
    .context("running the rewritten graph")?;
    let cmp: Comparison = compare(&ref_out, &cand_out, &o.tol);
    let (control, control_tensor) = broken_control(&b, b_dir)?;
    let control_bytes = control.encode_to_vec();
    crate::progress::stage("validation: running the broken control");
    let control_out = run(
        Model::new("control", &control_bytes).in_dir(b_dir),
        inputs,
        &values_cfg,
    )
    .context("running the control")?;
    let control_rejected = !compare(&ref_out, &control_out, &o.tol).passed;
    let original_cfg = o.original_cfg.as_ref().unwrap_or(&o.cfg);
    let original_m = measure("original", &a_bytes, a_dir, inputs, o, original_cfg)?;
    let rewritten_m = measure("rewritten", &b_bytes, b_dir, inputs, o, &o.cfg)?;
    let cse_cfg = SessionConfig {
        disable_cse: false,
        opt_level: ckpt_runtime::OptLevel::Basic,
        arena: Arena::Exact,
        ..o.cfg.clone()
    };
    let no_cse_cfg = SessionConfig {
        disable_cse: true,
        ..cse_cfg.clone()
    };
    let (with_cse, without_cse) = if o.cfg.provider == ckpt_runtime::Provider::Cpu {
        (
            measure_peak(
                Model::new("rewritten", &b_bytes).in_dir(b_dir),
                inputs,
                &cse_cfg,
            )?
            .peak_bytes,
            measure_peak(
                Model::new("rewritten", &b_bytes).in_dir(b_dir),
                inputs,
                &no_cse_cfg,
            )?
            .peak_bytes,
        )
    } else {
        (0, 0)
    };
    let cse_warning = (with_cse > without_cse).then(|| {
        format!(
            "with ONNX Runtime's default optimizers (CommonSubexpressionElimination on, level basic) the rewritten graph peaks at {with_cse} B instead of {without_cse} B: CSE merges recompute clones back; set optimization.disable_specified_optimizers=CommonSubexpressionElimination"
        )
    });
    Ok(Validation {
        passed: cmp.passed && control_rejected,
        outputs: cmp.outputs,
        control_rejected,
        control_tensor,
        rng_policy: RNG_POLICY,
        random_ops_seeded: seeded,
        deterministic_compute: true,
        original: original_m,
        rewritten: rewritten_m,
        rewritten_peak_bytes_with_cse: with_cse,
        cse_warning,
        ort: serde_json::json!({"library": info.library.display().to_string(), "version": info.version}),
        session: serde_json::to_value(&values_cfg).unwrap_or_default(),
        input_generation,
    })
}
