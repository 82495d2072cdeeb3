//! What the device needs for several steps of one session, measured: per-step arena statistics, and the smallest
//! arena cap (`max_mem`) under which every step runs, found by bisection — the quantity a ceiling is compared with.
//!
//! The cap is the CPU arena's `max_mem` (an environment arena, [`crate::Arena::Bfc`] or [`crate::Arena::Exact`]),
//! or with [`Provider::Cuda`] and [`crate::Arena::Bfc`] the CUDA EP arena's `gpu_mem_limit` (its extend strategy
//! from the same `Arena`; built with the `cuda` feature); the statistics are then the CUDA arena's.
//!
//! A step is one `run` of the same session with the same feeds (the memory pattern acts from the second on). With
//! `hold_outputs` the previous step's outputs stay alive until the next step has returned (the usual
//! `outs = sess.run(...)` loop); otherwise they are dropped before the next step.

use crate::error::{Result, RuntimeError};
use crate::measure::{allocator_stats, arena_allocator, stat};
use crate::model::Model;
use crate::session::{feeds, with_session, Arena, Provider, SessionConfig};
use crate::tensor::HostTensor;

/// Arena statistics of several steps of one session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepStats {
    /// `InUse` after session creation (initializers reserved in the arena).
    pub in_use_after_load: u64,
    /// `TotalAllocated` after session creation.
    pub reserved_after_load: u64,
    /// `MaxInUse - in_use_after_load` after each step (cumulative: the arena's high-water mark so far).
    pub max_in_use_after_step: Vec<u64>,
    /// `TotalAllocated - reserved_after_load` after each step: region bytes the steps reserved.
    pub reserved_after_step: Vec<u64>,
}

impl StepStats {
    /// In-use peak over all steps, above what loading left.
    pub fn in_use_peak(&self) -> u64 {
        self.max_in_use_after_step.last().copied().unwrap_or(0)
    }

    /// Region bytes the steps reserved.
    pub fn reserved(&self) -> u64 {
        self.reserved_after_step.last().copied().unwrap_or(0)
    }
}

/// Whether an error is the arena refusing an allocation past its cap.
pub fn is_out_of_memory(e: &RuntimeError) -> bool {
    matches!(e, RuntimeError::Run { message, .. }
        if message.contains("Failed to allocate") || message.contains("Available memory"))
}

/// Run `steps` steps of one fresh session and read the arena after each. `cfg.arena` must be an environment arena
/// ([`Arena::Exact`] or [`Arena::Bfc`]) so that `cfg.arena_limit` applies; an allocation past it is an error
/// ([`is_out_of_memory`]).
pub fn measure_steps<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    steps: usize,
    hold_outputs: bool,
) -> Result<StepStats> {
    let model = model.into();
    if cfg.arena == Arena::Session {
        return Err(RuntimeError::SessionCreate {
            model: model.label.to_string(),
            message: "measuring steps needs a configured arena (CPU: exact or BFC; CUDA: BFC)"
                .into(),
        });
    }
    with_session(model, cfg, |session| {
        let arena = arena_allocator(model, session, cfg.provider)?;
        let load = allocator_stats(model, &arena)?;
        let in_use_after_load = stat(model, &load, "InUse")?;
        let reserved_after_load = stat(model, &load, "TotalAllocated")?;
        let feeds = feeds(model, session, inputs)?;
        let mut stats = StepStats {
            in_use_after_load,
            reserved_after_load,
            max_in_use_after_step: Vec::new(),
            reserved_after_step: Vec::new(),
        };
        if cfg.bind_outputs {
            let binding = bound_outputs(model, session, inputs, &feeds)?;
            for _ in 0..steps.max(1) {
                session
                    .run_binding(&binding)
                    .map_err(|e| RuntimeError::Run {
                        model: model.label.to_string(),
                        message: e.to_string(),
                    })?;
                record_step(model, &arena, &mut stats)?;
            }
            return Ok(stats);
        }
        let mut held: Vec<ort::value::DynValue> = Vec::new();
        for _ in 0..steps.max(1) {
            let inputs: Vec<(&str, ort::session::SessionInputValue<'_>)> =
                feeds.iter().map(|(n, v)| (n.as_str(), v.into())).collect();
            let outputs = session.run(inputs).map_err(|e| RuntimeError::Run {
                model: model.label.to_string(),
                message: e.to_string(),
            })?;
            // The previous outputs are dropped only now, after the step returned its own.
            let owned: Vec<ort::value::DynValue> = outputs.into_iter().map(|(_, v)| v).collect();
            held = if hold_outputs { owned } else { Vec::new() };
            record_step(model, &arena, &mut stats)?;
        }
        drop(held);
        Ok(stats)
    })
}

/// Read the arena after a step into `stats`.
fn record_step(
    model: Model<'_>,
    arena: &ort::memory::Allocator,
    stats: &mut StepStats,
) -> Result<()> {
    let after = allocator_stats(model, arena)?;
    stats
        .max_in_use_after_step
        .push(stat(model, &after, "MaxInUse")?.saturating_sub(stats.in_use_after_load));
    stats
        .reserved_after_step
        .push(stat(model, &after, "TotalAllocated")?.saturating_sub(stats.reserved_after_load));
    Ok(())
}

/// A binding of `feeds` and of every graph output to a tensor allocated once by ORT's default
/// CPU allocator (outside any arena). An output's symbolic dims take the size of the input
/// dim of the same name.
fn bound_outputs(
    model: Model<'_>,
    session: &ort::session::Session,
    inputs: &[HostTensor],
    feeds: &[(String, ort::value::DynTensor)],
) -> Result<ort::session::IoBinding> {
    let fail = |message: String| RuntimeError::Run {
        model: model.label.to_string(),
        message,
    };
    let mut dims: std::collections::BTreeMap<String, i64> = std::collections::BTreeMap::new();
    for outlet in session.inputs() {
        let Some(t) = inputs.iter().find(|t| t.name == outlet.name()) else {
            continue;
        };
        if let ort::value::ValueType::Tensor {
            dimension_symbols, ..
        } = outlet.dtype()
        {
            for (sym, &n) in dimension_symbols.iter().zip(&t.shape) {
                if !sym.is_empty() {
                    dims.insert(sym.to_string(), n as i64);
                }
            }
        }
    }
    let mut binding = session.create_binding().map_err(|e| fail(e.to_string()))?;
    for (name, value) in feeds {
        binding
            .bind_input(name.as_str(), value)
            .map_err(|e| fail(format!("binding input `{name}`: {e}")))?;
    }
    let host = ort::memory::Allocator::default();
    for outlet in session.outputs() {
        let name = outlet.name();
        let ort::value::ValueType::Tensor {
            ty,
            shape,
            dimension_symbols,
        } = outlet.dtype()
        else {
            return Err(fail(format!("output `{name}` is not a tensor")));
        };
        let mut concrete = Vec::with_capacity(shape.len());
        for (i, &d) in shape.iter().enumerate() {
            if d >= 0 {
                concrete.push(d);
                continue;
            }
            let sym = dimension_symbols
                .get(i)
                .map(|s| s.to_string())
                .unwrap_or_default();
            concrete.push(*dims.get(&sym).ok_or_else(|| {
                fail(format!(
                    "output `{name}` has dim {i} (`{sym}`) that no input names: its buffer cannot be allocated before the step"
                ))
            })?);
        }
        let tensor = ort::value::DynTensor::new(&host, *ty, concrete)
            .map_err(|e| fail(format!("allocating output `{name}`: {e}")))?;
        binding
            .bind_output(name, tensor)
            .map_err(|e| fail(format!("binding output `{name}`: {e}")))?;
    }
    Ok(binding)
}

/// The measured device need of several steps.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MeasuredNeed {
    /// The smallest `max_mem` (to 256 B) under which every step runs, less what loading reserved: the arena bytes
    /// the steps need.
    pub arena_bytes: u64,
    /// The uncapped steps.
    pub uncapped: StepStats,
    /// Sessions it took.
    pub runs: usize,
}

/// Whether every step runs with the arena capped at `arena_bytes` above what loading reserves
/// (`reserved_after_load`, as an earlier [`measure_steps`] of the same model read it).
#[allow(clippy::too_many_arguments)]
pub fn runs_under<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    steps: usize,
    hold_outputs: bool,
    reserved_after_load: u64,
    arena_bytes: u64,
) -> Result<bool> {
    runs_under_cap(
        model.into(),
        inputs,
        cfg,
        steps,
        hold_outputs,
        reserved_after_load + arena_bytes,
        reserved_after_load,
    )
}

fn runs_under_cap(
    model: Model<'_>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    steps: usize,
    hold_outputs: bool,
    cap: u64,
    base: u64,
) -> Result<bool> {
    let arena = match cfg.arena {
        // The CUDA EP's options set no initial chunk (`register_provider`).
        Arena::Bfc {
            power_of_two,
            initial_chunk_is_cap: true,
            ..
        } if cfg.provider == Provider::Cpu => Arena::Bfc {
            power_of_two,
            initial_chunk: Some(
                cap.saturating_sub(base)
                    .clamp(crate::ALIGN_BYTES, ckpt_ir::ort::MAX_INITIAL_CHUNK),
            ),
            initial_chunk_is_cap: true,
        },
        other => other,
    };
    let c = SessionConfig {
        arena_limit: Some(cap),
        arena,
        ..cfg.clone()
    };
    match measure_steps(model, inputs, &c, steps, hold_outputs) {
        Ok(_) => Ok(true),
        Err(e) if is_out_of_memory(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Find the smallest cap under which `steps` steps run, by bisection (to 256 B) between a
/// failing end and the uncapped reserved bytes. The failing end is `failing_end` (an arena
/// predicted too small for the steps: the simulator's `ckpt_passes::device::failing_end`, the
/// largest arena below the most bytes one run requests at once), verified by one run; where
/// the steps run there after all, or none is given, it is 0.
pub fn measure_need<'a>(
    model: impl Into<Model<'a>>,
    inputs: &[HostTensor],
    cfg: &SessionConfig,
    steps: usize,
    hold_outputs: bool,
    failing_end: Option<u64>,
) -> Result<MeasuredNeed> {
    let model = model.into();
    let align = crate::ALIGN_BYTES;
    let uncapped = measure_steps(model, inputs, cfg, steps, hold_outputs)?;
    let base = uncapped.reserved_after_load;
    let mut runs = 1;
    let mut hi = uncapped.reserved().div_ceil(align) * align;
    // An arena capped at its own uncapped total extends as the uncapped one did; if not (ORT loads regions
    // differently under a cap), widen until it runs.
    let mut slack = align;
    while !runs_under_cap(model, inputs, cfg, steps, hold_outputs, base + hi, base)? {
        runs += 1;
        hi += slack;
        slack *= 2;
    }
    runs += 1;
    let mut lo = 0;
    let end = failing_end.map(|e| (e / align * align).min(hi.saturating_sub(align)));
    if let Some(end) = end.filter(|&e| e > 0) {
        runs += 1;
        if runs_under_cap(model, inputs, cfg, steps, hold_outputs, base + end, base)? {
            hi = end;
        } else {
            lo = end;
        }
    }
    while hi - lo > align {
        let mid = (lo + (hi - lo) / 2) / align * align;
        let mid = mid.max(lo + align);
        runs += 1;
        if runs_under_cap(model, inputs, cfg, steps, hold_outputs, base + mid, base)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(MeasuredNeed {
        arena_bytes: hi,
        uncapped,
        runs,
    })
}
