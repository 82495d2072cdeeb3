//! Validation of models with ORT training ops (`generate_artifacts`' `training_model.onnx`) on the training
//! runtime, onnxruntime-training [`ckpt_ir::ort::TRAINING_ORT_VERSION`] ([`ckpt_runtime::training`]): the same
//! checks as [`crate::validate`] (paired values, a broken control, the device need under the profile by
//! bisection on `max_mem`, the capped run at the ceiling), through the runner.
//!
//! That runtime's Python API has no allocator statistics, so what only statistics give is not measured there:
//! `measured_in_use_bytes` and `measured_reserved_bytes` are 0, the default-arena peak is 0, and the CSE check is
//! not made. The one-step peak (`peak_bytes`) is the smallest exact-arena cap one step runs in.

use anyhow::{Context, Result};
use ckpt_ir::onnx;
use ckpt_ir::Message;
use ckpt_runtime::training::{Staged, TrainingRunner};
use ckpt_runtime::{compare, Arena, HostTensor, Model, SessionConfig};

use crate::validate::{
    broken_control, seed_random_ops, DeviceMemory, Measured, MemoryExpectation, ValidateOptions,
    Validation, RNG_POLICY,
};

/// Whether `model` has an op only ORT's training build runs, so it validates on the training runtime.
pub fn needs_training_runtime(model: &onnx::ModelProto) -> bool {
    model.graph.as_ref().is_some_and(|g| {
        g.node.iter().any(|n| {
            ckpt_ir::ops::training_only(
                &ckpt_ir::normalise_domain(n.domain.as_deref().unwrap_or("")),
                n.op_type.as_deref().unwrap_or(""),
            )
        })
    })
}

/// The ONNX Runtime version a graph runs on: the training runtime's when it has training ops
/// ([`ckpt_ir::ort::runtime_version`]).
pub fn ort_version_for(graph: &ckpt_ir::Graph) -> &'static str {
    ckpt_ir::ort::runtime_version(graph)
}

/// The graph inputs `model` writes in place: the buffer (input 0) of every accumulating
/// optimizer step (InPlaceAccumulatorV2's gradient buffer), by the op registry.
pub fn updated_inputs(model: &onnx::ModelProto) -> Vec<String> {
    let Ok(graph) = ckpt_ir::import_bytes(
        model.encode_to_vec().into(),
        std::path::Path::new("training.onnx"),
        None,
    ) else {
        return Vec::new();
    };
    let inputs: Vec<String> = graph
        .inputs()
        .iter()
        .map(|&t| graph.tensor(t).name.clone())
        .collect();
    let mut out: Vec<String> = graph
        .nodes()
        .iter()
        .filter(|&&n| {
            ckpt_ir::ops::optimizer_step(&graph, n) == Some(ckpt_ir::ops::OptimizerStep::Accumulate)
        })
        .filter_map(|&n| {
            let t = (*graph.node(n).inputs.first()?)?;
            Some(graph.tensor(t).name.clone())
        })
        .filter(|name| inputs.contains(name))
        .collect();
    out.dedup();
    out
}

fn start() -> Result<TrainingRunner> {
    TrainingRunner::start().context("starting the training runtime")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn measure(runner: &mut TrainingRunner, staged: &Staged, o: &ValidateOptions) -> Result<Measured> {
    let exact = SessionConfig {
        arena: Arena::Exact,
        ..o.cfg.clone()
    };
    let peak = runner.measure_need(staged, &exact, 1, false, None)?;
    let timed = runner.trial(
        staged,
        &SessionConfig {
            arena: Arena::Session,
            ..o.cfg.clone()
        },
        o.warmup + o.runs.max(1),
        false,
        None,
        false,
    )?;
    let mut times: Vec<f64> = timed.step_ms.iter().skip(o.warmup).copied().collect();
    times.sort_by(f64::total_cmp);
    Ok(Measured {
        peak_bytes: peak.arena_bytes,
        peak_bytes_default_arena: 0,
        p50_ms: percentile(&times, 0.5),
        p95_ms: percentile(&times, 0.95),
        peak_node: None,
    })
}

/// [`crate::validate::validate`] on the training runtime.
pub fn validate(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    input_generation: Vec<String>,
    o: &ValidateOptions,
) -> Result<Validation> {
    let mut a = original.clone();
    let mut b = rewritten.clone();
    let seeded = seed_random_ops(&mut a, o.seed);
    seed_random_ops(&mut b, o.seed);
    let (control, control_tensor) = broken_control(&b, None)?;
    let (a_bytes, b_bytes, c_bytes) = (
        a.encode_to_vec(),
        b.encode_to_vec(),
        control.encode_to_vec(),
    );
    let updated = updated_inputs(original);
    let mut runner = start()?;
    let sa = runner.stage(Model::new("original", &a_bytes), inputs, &updated)?;
    let sb = runner.stage(Model::new("rewritten", &b_bytes), inputs, &updated)?;
    let sc = runner.stage(Model::new("control", &c_bytes), inputs, &updated)?;
    let values_cfg = crate::validate::deterministic(&o.cfg);
    let ref_out = runner
        .run(&sa, &values_cfg)
        .context("running the original graph")?;
    let cand_out = runner
        .run(&sb, &values_cfg)
        .context("running the rewritten graph")?;
    let control_out = runner
        .run(&sc, &values_cfg)
        .context("running the control")?;
    let cmp = compare(&ref_out, &cand_out, &o.tol);
    let control_rejected = !compare(&ref_out, &control_out, &o.tol).passed;
    let original_m = measure(&mut runner, &sa, o)?;
    let rewritten_m = measure(&mut runner, &sb, o)?;
    Ok(Validation {
        passed: cmp.passed && control_rejected,
        outputs: cmp.outputs,
        control_rejected,
        control_tensor,
        deterministic_compute: true,
        rng_policy: RNG_POLICY,
        random_ops_seeded: seeded,
        original: original_m,
        rewritten: rewritten_m,
        rewritten_peak_bytes_with_cse: 0,
        cse_warning: None,
        ort: serde_json::json!({
            "library": format!("onnxruntime-training (python {})", runner.runtime.python.display()),
            "version": runner.ort_version,
        }),
        session: serde_json::to_value(&o.cfg).unwrap_or_default(),
        input_generation,
    })
}

/// [`crate::validate::measure_device`] on the training runtime: the need by bisection on `max_mem`, and with a
/// ceiling the run capped at its arena budget.
pub fn measure_device(
    label: &str,
    model: &onnx::ModelProto,
    inputs: &[HostTensor],
    e: &MemoryExpectation,
    predicted_arena_bytes: u64,
) -> Result<DeviceMemory> {
    let cfg = crate::profile::session_config(&e.profile);
    let steps = e.profile.steps as usize;
    let hold = e.profile.caller_outputs == ckpt_ir::profile::CallerOutputs::Held;
    let bytes = model.encode_to_vec();
    let mut runner = start()?;
    let staged = runner.stage(Model::new(label, &bytes), inputs, &[])?;
    let need = runner
        .measure_need(&staged, &cfg, steps, hold, Some(predicted_arena_bytes))
        .with_context(|| {
            format!("measuring the {label} graph's device need on the training runtime")
        })?;
    let budget = e.arena_budget();
    let runs_under_ceiling = match budget {
        Some(b) => Some(runner.runs_under(&staged, &cfg, steps, hold, e.load_bytes, b)?),
        None => None,
    };
    Ok(DeviceMemory {
        predicted_total_bytes: e.fixed_bytes + predicted_arena_bytes,
        measured_total_bytes: e.outside_arena_bytes() + need.load_bytes + need.arena_bytes,
        predicted_load_bytes: e.load_bytes,
        measured_load_bytes: need.load_bytes,
        predicted_arena_bytes,
        measured_arena_bytes: need.arena_bytes,
        relative_error: predicted_arena_bytes as f64 / need.arena_bytes.max(1) as f64 - 1.0,
        measured_in_use_bytes: 0,
        measured_reserved_bytes: 0,
        runs_under_ceiling,
        sessions: need.trials + usize::from(budget.is_some()),
    })
}
