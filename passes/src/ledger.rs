//! The memory ledger of one training step: what is held outside ORT's arena, what the arena
//! holds at its peak (saved activations, gradients, transients), and which line dominates.
//!
//! The device total is every byte the device holds while the runner (`ckpt_opt.Session`, or
//! `ckpt-runtime`'s steps) runs the profile's steps:
//! - what the caller feeds and holds between steps: parameters, optimizer state, data inputs
//!   (fed every step), and the graph outputs, which the runner hands back in buffers it owns
//!   and the loop holds into the next step (`out = s.run(feeds)`);
//! - the model's constants (initializers and `Constant` values, frozen weights among them)
//!   where the profile's ONNX Runtime keeps them ([`ckpt_ir::ort::constant_place`]): outside
//!   the arena, or reserved from its allocator at load (counted against its cap);
//! - the smallest arena the profile's steps run in ([`crate::device::device_need`]).
//!
//! The arena cap a runner sets (`max_mem`) is the ceiling less what is held outside the arena
//! ([`Ledger::outside_arena_bytes`]): the steps' arena plus what loading reserves from it.

use ckpt_ir::ort::{constant_place, ConstantPlace};
use ckpt_ir::{Bindings, Graph, TensorId};

use crate::memory::{rounded, Buffer, Simulation};
use crate::phases::{Classification, TensorKind};

/// An optimizer that runs outside the graph, declared by the user.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Optimizer {
    #[default]
    None,
    Sgd,
    /// Two moments per parameter.
    Adam,
}

/// The ledger. Byte counts are exact under the bindings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub parameters_count: u64,
    pub parameters_bytes: u64,
    /// Gradients: outputs of the step, or accumulation buffers.
    pub gradients_bytes: u64,
    pub optimizer_state_bytes: u64,
    pub data_bytes: u64,
    pub saved_activations_count: u64,
    pub saved_activations_bytes: u64,
    /// The largest saved activations (name, bytes).
    pub largest_saved: Vec<(String, u64)>,
    /// Predicted in-use peak of one step on an always-splitting arena (live tensors, 256-B
    /// rounded): a diagnostic, not what the device holds.
    pub arena_peak_bytes: u64,
    /// What the arena needs under the deployment profile: the smallest cap under which the
    /// profile's steps run ([`crate::device::device_need`]).
    pub device_arena_bytes: u64,
    /// Arena bytes at the peak that are neither saved activations nor gradients.
    pub transient_at_peak_bytes: u64,
    /// Graph outputs the runner hands back in buffers the caller holds between steps.
    pub outputs_bytes: u64,
    /// Constants (initializers, `Constant` values) held outside the arena for the session.
    pub initializer_bytes: u64,
    /// Constants loading takes from the arena's allocator before the first step: reserved
    /// outside its regions, or its first chunks ([`ConstantPlace`]); counted against its cap.
    pub load_bytes: u64,
    /// Everything but the steps' arena: [`Ledger::outside_arena_bytes`] plus `load_bytes`.
    /// The steps' arena budget is the ceiling less this.
    pub fixed_bytes: u64,
    /// `fixed_bytes + device_arena_bytes`: what the device must hold, the number a ceiling is
    /// compared with.
    pub total_bytes: u64,
}

impl Ledger {
    /// (line, bytes) pairs, for printing and for naming the dominant line.
    pub fn lines(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("parameters", self.parameters_bytes),
            ("gradients", self.gradients_bytes),
            ("optimizer state", self.optimizer_state_bytes),
            ("data inputs", self.data_bytes),
            ("saved activations", self.saved_activations_bytes),
            ("transient at peak", self.transient_at_peak_bytes),
            ("outputs held by the caller", self.outputs_bytes),
            ("initializers", self.initializer_bytes + self.load_bytes),
        ]
    }

    /// What the caller feeds and holds between steps: parameters, optimizer state, data
    /// inputs and the outputs it got back.
    pub fn caller_bytes(&self) -> u64 {
        self.parameters_bytes + self.optimizer_state_bytes + self.data_bytes + self.outputs_bytes
    }

    /// What the device holds outside the arena's cap: the caller's bytes and the constants
    /// kept outside the arena. The ceiling less this is the arena cap a runner sets.
    pub fn outside_arena_bytes(&self) -> u64 {
        self.caller_bytes() + self.initializer_bytes
    }

    /// The arena cap (`max_mem`) the profile's steps run under: what loading takes from the
    /// arena's allocator and the steps' arena.
    pub fn arena_cap_bytes(&self) -> u64 {
        self.load_bytes + self.device_arena_bytes
    }

    pub fn dominant(&self) -> &'static str {
        self.lines()
            .into_iter()
            .max_by_key(|l| l.1)
            .map_or("parameters", |l| l.0)
    }
}

fn bytes_of(graph: &Graph, t: TensorId, b: &Bindings) -> u64 {
    let tensor = graph.tensor(t);
    match (tensor.dtype, tensor.shape.as_ref()) {
        (Some(d), Some(s)) => s.bytes_under(d.bits(), b).unwrap_or(0),
        _ => 0,
    }
}

/// The model's constants by where ONNX Runtime `ort_version` keeps them: (outside the arena,
/// taken from the arena's allocator at load). Constants are the initializers a node reads
/// (ORT drops the others at load) and the values of nodes ORT folds at load (`Constant`) that
/// a node or the graph's outputs read.
pub fn constants(graph: &Graph, b: &Bindings, ort_version: &str) -> (u64, u64) {
    // A runtime that takes initializers as arena chunks is modelled on what it was measured
    // on: its initializers ([`crate::device::load_chunks`]).
    let chunks = ckpt_ir::ort::initializers_in_arena(ort_version);
    // ONNX Runtime drops a constant nothing reads at load (a `Constant` node is an
    // initializer by then): a fold that removes a constant's last reader leaves it unread.
    let is_read = |t: &TensorId| !graph.tensor(*t).consumers().is_empty();
    let folded = graph
        .nodes()
        .iter()
        .filter(|&&n| !chunks && ckpt_ir::ops::folded_at_load(graph, n))
        .flat_map(|&n| graph.node(n).outputs.clone())
        .flatten()
        .filter(|t| is_read(t) || graph.tensor(*t).is_output);
    let read = graph.initializers().filter(is_read);
    let (mut outside, mut load) = (0u64, 0u64);
    for t in read.chain(folded) {
        let bytes = bytes_of(graph, t, b);
        match constant_place(ort_version, bytes) {
            ConstantPlace::OutsideArena => outside += bytes,
            ConstantPlace::Reserved => load += bytes,
            ConstantPlace::ArenaChunk => load += rounded(bytes),
        }
    }
    (outside, load)
}

/// Bytes of the graph outputs (each tensor once): what the runner hands back and the caller
/// holds into the next step.
pub fn outputs_bytes(graph: &Graph, b: &Bindings) -> u64 {
    let mut seen = std::collections::BTreeSet::new();
    graph
        .outputs()
        .iter()
        .filter(|&&t| seen.insert(t))
        .map(|&t| bytes_of(graph, t, b))
        .sum()
}

/// Build the ledger. `device_arena_bytes` is the arena's need under the deployment profile
/// of ONNX Runtime `ort_version`; `optimizer` adds state for an optimizer outside the graph,
/// in `optimizer_bits` per element (Adam: two moments per parameter element).
#[allow(clippy::too_many_arguments)]
pub fn ledger(
    graph: &Graph,
    class: &Classification,
    sim: &Simulation,
    device_arena_bytes: u64,
    b: &Bindings,
    optimizer: Optimizer,
    optimizer_bits: u64,
    ort_version: &str,
) -> Ledger {
    let mut l = Ledger::default();
    let mut param_elems = 0u64;
    let mut grad_in_arena = 0u64;
    for t in graph.tensor_ids() {
        let bytes = bytes_of(graph, t, b);
        let tensor = graph.tensor(t);
        let computed = tensor.producer().is_some();
        match class.kind(t) {
            TensorKind::Parameter => {
                l.parameters_count += 1;
                l.parameters_bytes += bytes;
                param_elems += tensor
                    .shape
                    .as_ref()
                    .and_then(|s| s.numel_under(b).ok())
                    .unwrap_or(0);
            }
            TensorKind::Gradient => {
                l.gradients_bytes += bytes;
                if computed && tensor.is_output {
                    grad_in_arena += rounded(bytes);
                }
            }
            TensorKind::OptimizerState => l.optimizer_state_bytes += bytes,
            TensorKind::Data if tensor.is_graph_input() => l.data_bytes += bytes,
            TensorKind::SavedActivation => {
                l.saved_activations_count += 1;
                l.saved_activations_bytes += bytes;
                l.largest_saved.push((tensor.name.clone(), bytes));
            }
            _ => {}
        }
    }
    l.optimizer_state_bytes += match optimizer {
        Optimizer::None | Optimizer::Sgd => 0,
        Optimizer::Adam => (2 * param_elems * optimizer_bits).div_ceil(8),
    };
    l.largest_saved
        .sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    l.largest_saved.truncate(5);
    l.arena_peak_bytes = sim.peak_live;
    let step = sim.peak_step;
    let saved_at_peak: u64 = sim
        .buffers
        .iter()
        .filter(|buf| buf.allocated_at(step))
        .filter(|buf| {
            buf.values
                .iter()
                .any(|&v| class.kind(v) == TensorKind::SavedActivation)
        })
        .map(|buf| rounded(buf.bytes))
        .sum();
    l.transient_at_peak_bytes = sim
        .peak_live
        .saturating_sub(saved_at_peak)
        .saturating_sub(grad_in_arena);
    l.outputs_bytes = outputs_bytes(graph, b);
    (l.initializer_bytes, l.load_bytes) = constants(graph, b, ort_version);
    l.fixed_bytes = l.outside_arena_bytes() + l.load_bytes;
    l.device_arena_bytes = device_arena_bytes;
    l.total_bytes = l.fixed_bytes + device_arena_bytes;
    l
}

/// What a device total is made of at one step of one run, by ledger line ([`held`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The step of the run: the in-use peak's ([`Simulation::peak_step`], or with the outputs
    /// bound outside the arena [`arena_peak_step`]).
    pub step: usize,
    /// (line, bytes), in a fixed order, zero lines included: what the caller feeds and holds
    /// (parameters, optimizer state, data inputs, the outputs it got back), the constants,
    /// then the arena's buffers at the step by
    /// the value each holds then (saved activations, recomputed activations, gradients,
    /// other values; a buffer whose value is not yet made, or no longer read, is "held
    /// empty"), what else the step holds (graph outputs and kernel scratch outside the
    /// planned buffers), and the arena the profile needs beyond the in-use peak (its
    /// allocator's fragmentation and growth). With an arena need at or above the in-use peak
    /// the lines sum to the ledger's total.
    pub lines: Vec<(&'static str, u64)>,
    /// The largest values in the arena's buffers at the step (at most [`HELD_LARGEST`]):
    /// (line, tensor name, bytes), largest first, then by name; a buffer held empty is named
    /// `previous -> next`, the value last read in it and the one ORT's planner holds it for.
    pub largest: Vec<(&'static str, String, u64)>,
}

/// How many of the largest values at the peak [`held`] names.
pub const HELD_LARGEST: usize = 8;

/// How [`held`] names a buffer held empty at `step`: `previous -> next`, the value last read
/// in it before the step and the one planned into it after (`-` where there is none).
fn empty_between(
    graph: &Graph,
    sim: &Simulation,
    buf: &crate::memory::Buffer,
    step: usize,
) -> String {
    let spans = buf.values.iter().map(|&t| (t, sim.span(graph, t)));
    let before = spans
        .clone()
        .filter(|(_, (_, last))| *last < step)
        .max_by_key(|(_, (_, last))| *last);
    let after = spans
        .filter(|(_, (made, _))| *made > step)
        .min_by_key(|(_, (made, _))| *made);
    let name = |v: Option<(ckpt_ir::TensorId, (usize, usize))>| {
        v.map_or("-".to_string(), |(t, _)| graph.tensor(t).name.clone())
    };
    format!("{} -> {}", name(before), name(after))
}

/// Whether `buf` holds a graph output (outside the arena when the outputs are bound).
fn holds_output(graph: &Graph, buf: &Buffer) -> bool {
    buf.values.iter().any(|&v| graph.tensor(v).is_output)
}

/// The step where the buffers in the arena peak when the graph outputs are bound outside it:
/// [`Simulation::live`] less the buffers that hold a graph output, the earliest on a tie (as
/// [`Simulation::peak_step`], which counts those buffers too: late in a backward, where the
/// gradients pile up, rather than where the arena fills).
pub fn arena_peak_step(graph: &Graph, sim: &Simulation) -> usize {
    let n = sim.live.len();
    let mut delta = vec![0i128; n + 1];
    for b in &sim.buffers {
        if holds_output(graph, b) {
            let bytes = rounded(b.bytes) as i128;
            let end = b.free_after.map_or(n, |f| (f + 1).min(n));
            delta[b.alloc_step.min(n)] += bytes;
            delta[end] -= bytes;
        }
    }
    let mut outside = 0i128;
    let mut best = (0usize, i128::MIN);
    for (s, &live) in sim.live.iter().enumerate() {
        outside += delta[s];
        let here = live as i128 - outside;
        if here > best.1 {
            best = (s, here);
        }
    }
    best.0
}

/// What the run `sim` of `graph` holds at its in-use peak, by ledger line, with the ledger's
/// fixed bytes and the profile's arena beyond that peak: where the total of a plan goes.
///
/// With `outputs_in_arena` false (outputs bound to the runner's buffers), a buffer that holds a
/// graph output is not in the arena: its bytes are the caller's line, and the peak is the
/// arena's ([`arena_peak_step`]).
pub fn held(
    graph: &Graph,
    class: &Classification,
    sim: &Simulation,
    l: &Ledger,
    outputs_in_arena: bool,
) -> Held {
    let step = if outputs_in_arena {
        sim.peak_step
    } else {
        arena_peak_step(graph, sim)
    };
    let (mut saved, mut rebuilt, mut grads, mut other, mut empty) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut outside = 0u64;
    let mut largest: Vec<(&'static str, String, u64)> = Vec::new();
    for buf in &sim.buffers {
        if !buf.allocated_at(step) {
            continue;
        }
        let bytes = rounded(buf.bytes);
        if !outputs_in_arena && holds_output(graph, buf) {
            outside += bytes;
            continue;
        }
        let Some(t) = sim.occupant(graph, buf, step) else {
            empty += bytes;
            largest.push(("held empty", empty_between(graph, sim, buf, step), bytes));
            continue;
        };
        let recomputed = graph
            .tensor(t)
            .producer()
            .is_some_and(|p| class.phase(p) == crate::phases::Phase::Recompute);
        let (line, sum) = match class.kind(t) {
            _ if recomputed => ("recomputed activations", &mut rebuilt),
            TensorKind::SavedActivation => ("saved activations", &mut saved),
            TensorKind::Gradient => ("gradients", &mut grads),
            _ => ("other values", &mut other),
        };
        *sum += bytes;
        largest.push((line, graph.tensor(t).name.clone(), bytes));
    }
    largest.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    largest.truncate(HELD_LARGEST);
    let in_buffers = saved + rebuilt + grads + other + empty;
    // Outputs the run copies (an output that aliases another value) are requests of their own.
    let copied: u64 = if outputs_in_arena {
        0
    } else {
        let output_requests: u64 = sim
            .arena_events
            .iter()
            .filter(|e| e.alloc && e.kind == crate::memory::EventKind::Output)
            .map(|e| rounded(e.bytes))
            .sum();
        let output_buffers: u64 = sim
            .buffers
            .iter()
            .filter(|b| holds_output(graph, b))
            .map(|b| rounded(b.bytes))
            .sum();
        output_requests.saturating_sub(output_buffers)
    };
    let live = sim
        .live
        .get(step)
        .copied()
        .unwrap_or(0)
        .saturating_sub(outside + copied);
    Held {
        step,
        lines: vec![
            ("parameters", l.parameters_bytes),
            ("optimizer state", l.optimizer_state_bytes),
            ("data inputs", l.data_bytes),
            ("outputs held by the caller", l.outputs_bytes),
            ("initializers", l.initializer_bytes + l.load_bytes),
            ("saved activations", saved),
            ("recomputed activations", rebuilt),
            ("gradients", grads),
            ("other values", other),
            ("held empty", empty),
            ("outputs and scratch", live.saturating_sub(in_buffers)),
            (
                "arena beyond the in-use peak",
                l.device_arena_bytes.saturating_sub(live.max(in_buffers)),
            ),
        ],
        largest,
    }
}
