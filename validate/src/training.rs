//! Validation of models with ORT training ops (`generate_artifacts`' `training_model.onnx`) on the training
//! runtime, onnxruntime-training [`ckpt_ir::ort::TRAINING_ORT_VERSION`] ([`ckpt_runtime::training`]): the pair
//! run as [`crate::paired`] runs it (paired values, a broken control, peaks and step times), through the runner;
//! [`crate::memory`] measures the device need there too.
//!
//! That runtime's Python API has no allocator statistics, so what only statistics give is not measured there:
//! `measured_in_use_bytes` and `measured_reserved_bytes` are 0, the default-arena peak is 0, and the CSE check is
//! not made. The one-step peak (`peak_bytes`) is the smallest exact-arena cap one step runs in.

use ckpt_ir::onnx;
use ckpt_ir::Message;
use ckpt_runtime::training::{Staged, TrainingRunner};
use ckpt_runtime::{Arena, HostTensor, Model, SessionConfig};

use crate::error::ValidateError;
use crate::paired::{deterministic, escalate_control, seed_pair, Measured, Runs, ValidateOptions};

type Result<T, E = ValidateError> = std::result::Result<T, E>;

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

/// The training runtime's runner, started.
pub(crate) fn start() -> Result<TrainingRunner> {
    TrainingRunner::start().map_err(ValidateError::StartTraining)
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

/// [`crate::paired::run_pair`] on the training runtime: the three graphs staged in one runner,
/// run for their values, then both graphs measured.
pub(crate) fn run_pair(
    original: &onnx::ModelProto,
    rewritten: &onnx::ModelProto,
    inputs: &[HostTensor],
    o: &ValidateOptions,
) -> Result<Runs> {
    let mut a = original.clone();
    let mut b = rewritten.clone();
    let seeded = seed_pair(&mut a, &mut b, o.seed);
    let (a_bytes, b_bytes) = (a.encode_to_vec(), b.encode_to_vec());
    let updated = updated_inputs(original);
    let mut runner = start()?;
    let sa = runner.stage(Model::new("original", &a_bytes), inputs, &updated)?;
    let sb = runner.stage(Model::new("rewritten", &b_bytes), inputs, &updated)?;
    let values_cfg = deterministic(&o.cfg);
    let run = |runner: &mut TrainingRunner, staged: &Staged, graph: &'static str| {
        runner
            .run(staged, &values_cfg)
            .map_err(|source| ValidateError::Run { graph, source })
    };
    let reference = run(&mut runner, &sa, "original graph")?;
    let candidate = run(&mut runner, &sb, "rewritten graph")?;
    let control = escalate_control(&b, None, &reference, &o.tol, |control| {
        let c_bytes = control.encode_to_vec();
        let sc = runner.stage(Model::new("control", &c_bytes), inputs, &updated)?;
        run(&mut runner, &sc, "control")
    })?;
    let original_m = measure(&mut runner, &sa, o)?;
    let rewritten_m = measure(&mut runner, &sb, o)?;
    Ok(Runs {
        reference,
        candidate,
        control,
        random_ops_seeded: seeded,
        original: original_m,
        rewritten: rewritten_m,
        rewritten_peak_bytes_with_cse: 0,
        cse_warning: None,
        ort: crate::paired::Ort {
            library: format!(
                "onnxruntime-training (python {})",
                runner.runtime.python.display()
            ),
            version: runner.ort_version.to_string(),
        },
        session: o.cfg.clone(),
    })
}
