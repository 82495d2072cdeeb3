//! The memory model, and its one source of truth: [`simulate`].
//!
//! It replays what ONNX Runtime 1.31's CPU EP does in one run (memory pattern off), as
//! established in `docs/design/ort-internals.md`:
//! - **order**: [`Schedule`] = ORT's default order over the graph as ORT loads it
//!   (`Constant` nodes become initializers and are not steps), on the runtime that runs the
//!   graph: onnxruntime-training 1.19.2 for one with training ops, which runs each
//!   `Shape`/`Size` right after its input's producer ([`schedule_for`]);
//! - **planner**: use counts; graph outputs get their own buffer, held to the end; alias
//!   ops (Reshape, Identity, Squeeze, Unsqueeze, Flatten) share their input's buffer;
//!   in-place ops (Relu, Sigmoid, Tanh, Softmax, … — `MayInplace`) take their input's
//!   buffer when this node is its last reader and sizes match; otherwise the most recently
//!   freed buffer of exactly the same dtype size and shape is reused (never for rank-0 or
//!   never-read outputs); else a new buffer. "Sizes match" is ORT's `SameSize` on the shapes
//!   ORT resolves at load ([`crate::ort_view`]): a dim ORT leaves unknown blocks both reuse
//!   and in-place; the graph's concrete shapes give only the byte counts;
//! - **runtime**: a buffer is allocated when its first value is produced and released right
//!   after the last node that reads any value in it; never-read buffers and graph outputs stay
//!   to the end; a node's inputs and outputs coexist during its step; a graph output that
//!   is an initializer (in the file, or a `Constant` node's value, as constant folding at
//!   levels basic and above leaves a constant gradient) is copied into an arena buffer of its
//!   size when the run's frame is created (`IExecutionFrame::Init`: the caller must get its
//!   own tensor), before the first node, and held past the run; a graph input that is an
//!   output is returned as fed, no copy;
//! - **arena**: requests are rounded up to 256 B. `live` is the sum of live rounded buffers
//!   (what ORT reports with an always-splitting arena); `arena_peak` replays ORT's BFC arena
//!   (bins, best fit, split rule, coalescing, power-of-two regions from 1 MiB).
//!
//! Graph inputs fed by the caller and initializers are ledger lines, not arena bytes.
//!
//! This module owns the schedule, the simulation and its replay of the run's steps;
//! `plan.rs` owns the allocation plan the replay runs over.

mod plan;

use std::collections::BTreeMap;

use ckpt_ir::{Bindings, Graph, NodeId, ShapeError, TensorId};

use crate::arena::{ArenaConfig, BfcArena};
use crate::ort_view::{resolved_shapes, OrtShapes};
use crate::phases::{Classification, Phase};
use crate::schedule::{try_ort_default_order, OrderNode};
use ckpt_ir::ops::kernel_scratch;
use plan::{plan_allocation, AllocationPlan};

pub use crate::arena::{rounded, ALIGN};

/// Why memory could not be simulated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    #[error("tensor `{tensor}` has no known dtype/shape; the memory model needs it (add value_info or bind its dims)")]
    UnknownType { tensor: String },
    #[error("tensor `{tensor}`: {error}")]
    Shape { tensor: String, error: ShapeError },
    #[error("cannot order the graph: {0}")]
    Order(String),
}

/// The order ORT executes nodes in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Executed nodes, in execution order (no `Constant` nodes).
    pub order: Vec<NodeId>,
    /// Step of each node, indexed by `NodeId::index` (`usize::MAX` for nodes that are not steps).
    pub step: Vec<usize>,
}

impl Schedule {
    pub fn step_of(&self, n: NodeId) -> Option<usize> {
        self.step
            .get(n.index())
            .copied()
            .filter(|&s| s != usize::MAX)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// True for nodes ORT folds into initializers at load.
pub fn is_constant_node(graph: &Graph, n: NodeId) -> bool {
    ckpt_ir::ops::folded_at_load(graph, n)
}

/// ORT's default execution order for `graph` as stored (no graph transformer applied), on
/// the runtime that runs it ([`ckpt_ir::ort::runtime_version`]).
pub fn schedule(graph: &Graph) -> Result<Schedule, MemoryError> {
    schedule_for(graph, ckpt_ir::ort::runtime_version(graph))
}

/// ORT `ort_version`'s default execution order for `graph` as stored: the reverse depth-first
/// walk, with `Shape`/`Size` nodes moved right after their input's producer where
/// [`ckpt_ir::ort::shape_ops_follow_their_input`].
pub fn schedule_for(graph: &Graph, ort_version: &str) -> Result<Schedule, MemoryError> {
    schedule_of_sequence(graph, graph.nodes(), ort_version)
}

/// [`schedule_for`] as if the file listed `graph`'s nodes in the order of `nodes` (a
/// permutation of [`Graph::nodes`], topological or not: ORT's walk does not care), without
/// rewriting the graph: what a search over file orders compares before it writes one.
pub fn schedule_of_sequence(
    graph: &Graph,
    nodes: &[NodeId],
    ort_version: &str,
) -> Result<Schedule, MemoryError> {
    let mut ort_index = vec![usize::MAX; graph.node_bound()];
    let mut by_index: Vec<NodeId> = Vec::new();
    for &n in nodes {
        if !is_constant_node(graph, n) {
            ort_index[n.index()] = by_index.len();
            by_index.push(n);
        }
    }
    let table: Vec<OrderNode> = by_index
        .iter()
        .map(|&n| {
            OrderNode::new(graph.node(n).inputs.iter().map(|i| {
                i.and_then(|t| graph.tensor(t).producer())
                    .map(|p| ort_index[p.index()])
                    .filter(|&x| x != usize::MAX)
            }))
        })
        .collect();
    let mut order = try_ort_default_order(&table).map_err(|e| MemoryError::Order(e.to_string()))?;
    if ckpt_ir::ort::shape_ops_follow_their_input(ort_version) {
        order = shape_ops_after_their_input(graph, &by_index, &table, &order);
    }
    let order: Vec<NodeId> = order.into_iter().map(|i| by_index[i]).collect();
    let mut step = vec![usize::MAX; graph.node_bound()];
    for (s, n) in order.iter().enumerate() {
        step[n.index()] = s;
    }
    Ok(Schedule { order, step })
}

/// `order` (ORT node indices) with each node followed by its not yet run consumers of an
/// [`ckpt_ir::ort::EARLY_SHAPE_OPS`] type whose producers have all run, in ascending index
/// ([`ckpt_ir::ort::shape_ops_follow_their_input`]).
fn shape_ops_after_their_input(
    graph: &Graph,
    by_index: &[NodeId],
    table: &[OrderNode],
    order: &[usize],
) -> Vec<usize> {
    let n = by_index.len();
    let early: Vec<bool> = by_index
        .iter()
        .map(|&id| {
            let node = graph.node(id);
            ckpt_ir::normalise_domain(&node.domain) == ckpt_ir::ONNX_DOMAIN
                && ckpt_ir::ort::EARLY_SHAPE_OPS.contains(&node.op_type.as_str())
        })
        .collect();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (c, node) in table.iter().enumerate() {
        for &p in node.inputs.iter().flatten() {
            consumers[p].push(c);
        }
    }
    for list in &mut consumers {
        list.sort_unstable();
        list.dedup();
    }
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    for &v in order {
        if done[v] {
            continue;
        }
        done[v] = true;
        out.push(v);
        for &c in &consumers[v] {
            if early[c] && !done[c] && table[c].inputs.iter().flatten().all(|&p| done[p]) {
                done[c] = true;
                out.push(c);
            }
        }
    }
    out
}

/// A planned buffer: one arena allocation shared by one or more values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// Requested bytes (unrounded) of the value that created it.
    pub bytes: u64,
    pub values: Vec<TensorId>,
    pub alloc_step: usize,
    /// Released after this step; `None`: held to the end of the run.
    pub free_after: Option<usize>,
}

impl Buffer {
    /// Whether the buffer is allocated at `step` (in use or held empty).
    pub fn allocated_at(&self, step: usize) -> bool {
        self.alloc_step <= step && self.free_after.is_none_or(|f| f >= step)
    }
}

/// The result of [`simulate`].
#[derive(Clone, Debug)]
pub struct Simulation {
    pub schedule: Schedule,
    /// Requested bytes of every tensor (0 where unknown or not a computed value).
    pub tensor_bytes: Vec<u64>,
    /// The buffer each computed tensor lives in (`None` for inputs, initializers and their aliases).
    pub buffer_of: Vec<Option<usize>>,
    pub buffers: Vec<Buffer>,
    /// Live bytes (rounded buffers) at each step, the step's inputs and outputs included.
    pub live: Vec<u64>,
    /// max of `live`, and where.
    pub peak_live: u64,
    pub peak_step: usize,
    /// What one run asks of the arena, in order: buffers, graph outputs and kernel scratch
    /// (frees of never-read buffers and outputs are not listed: they are held to the run's
    /// end). [`crate::device`] replays them under a deployment profile.
    pub arena_events: Vec<ArenaEvent>,
    /// Requested bytes of each initializer a node reads, in graph order: what a runtime that
    /// allocates initializers from the arena at load ([`ckpt_ir::ort::initializers_in_arena`])
    /// places there before the first run.
    pub initializer_bytes: Vec<u64>,
}

/// What an arena request is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A planned buffer (`kAllocate`): traced by the memory pattern.
    Buffer,
    /// A graph output (`kAllocateOutput`): never in the memory pattern, held past the run.
    Output,
    /// A kernel's temporary: never in the memory pattern.
    Scratch,
}

/// One allocation or free of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaEvent {
    pub step: usize,
    pub alloc: bool,
    /// Unique within one run.
    pub key: u64,
    /// Requested bytes (allocations).
    pub bytes: u64,
    pub kind: EventKind,
}

/// Room for each step's scratch keys.
const SCRATCH_STRIDE: u64 = 8;

/// Live bytes per phase: the maximum over the steps of nodes in that phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhasePeak {
    pub bytes: u64,
    pub step: usize,
    pub node: Option<NodeId>,
}

impl Simulation {
    /// Tensors whose buffers are live at `step` with their rounded bytes, largest first.
    pub fn live_tensors_at(&self, step: usize) -> Vec<(TensorId, u64)> {
        let mut v: Vec<(TensorId, u64)> = self
            .buffers
            .iter()
            .filter(|b| b.allocated_at(step))
            .filter_map(|b| b.values.first().map(|&t| (t, rounded(b.bytes))))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// Buffers allocated at `step` that hold no value in use then: each of their values is
    /// either not produced yet or past its last read (ORT keeps a buffer from its first value's
    /// production to the last read of the last value planned into it, so a freed buffer handed
    /// to a much later value stays allocated, empty, in between). Largest first.
    pub fn idle_at(&self, graph: &Graph, step: usize) -> Vec<(usize, u64)> {
        let mut v: Vec<(usize, u64)> = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| b.allocated_at(step) && self.occupant(graph, b, step).is_none())
            .map(|(i, b)| (i, rounded(b.bytes)))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// The values in use at `step`, each with its buffer: the buffers allocated then that
    /// hold one (the others are [`Simulation::idle_at`]'s).
    pub fn in_use_at(&self, graph: &Graph, step: usize) -> Vec<(&Buffer, TensorId)> {
        self.buffers
            .iter()
            .filter(|b| b.allocated_at(step))
            .filter_map(|b| self.occupant(graph, b, step).map(|t| (b, t)))
            .collect()
    }

    /// The value of `buf` in use at `step` (produced at or before it, read at or after it);
    /// `None`: the buffer holds no value in use then.
    pub fn occupant(&self, graph: &Graph, buf: &Buffer, step: usize) -> Option<TensorId> {
        buf.values.iter().copied().find(|&t| {
            let (made, last) = self.span(graph, t);
            made <= step && step <= last
        })
    }

    /// Steps at which value `t` is produced and last read (`usize::MAX` for a graph output,
    /// held past the run; its production step when nothing reads it).
    pub fn span(&self, graph: &Graph, t: TensorId) -> (usize, usize) {
        let sched = &self.schedule;
        let tensor = graph.tensor(t);
        let made = tensor
            .producer()
            .and_then(|p| sched.step_of(p))
            .unwrap_or(0);
        let last = if tensor.is_output {
            usize::MAX
        } else {
            tensor
                .consumers()
                .iter()
                .filter_map(|&c| sched.step_of(c))
                .max()
                .unwrap_or(made)
        };
        (made, last)
    }

    /// The peak of each phase present.
    pub fn phase_peaks(&self, class: &Classification) -> BTreeMap<Phase, PhasePeak> {
        let mut out: BTreeMap<Phase, PhasePeak> = BTreeMap::new();
        for (s, &n) in self.schedule.order.iter().enumerate() {
            let e = out.entry(class.phase(n)).or_default();
            if e.node.is_none() || self.live[s] > e.bytes {
                *e = PhasePeak {
                    bytes: self.live[s],
                    step: s,
                    node: Some(n),
                };
            }
        }
        out
    }
}

fn tensor_bytes(graph: &Graph, t: TensorId, b: &Bindings) -> Result<u64, MemoryError> {
    let tensor = graph.tensor(t);
    let (Some(dtype), Some(shape)) = (tensor.dtype, tensor.shape.as_ref()) else {
        return Err(MemoryError::UnknownType {
            tensor: tensor.name.clone(),
        });
    };
    shape
        .bytes_under(dtype.bits(), b)
        .map_err(|error| MemoryError::Shape {
            tensor: tensor.name.clone(),
            error,
        })
}

/// Simulate one run of `graph` in `schedule` order under `bindings`.
pub fn simulate(
    graph: &Graph,
    schedule: &Schedule,
    bindings: &Bindings,
) -> Result<Simulation, MemoryError> {
    simulate_threads(graph, schedule, bindings, 1)
}

/// [`simulate`] for a session of `threads` intra-op threads (kernel scratch that MLAS sizes
/// per thread depends on it).
pub fn simulate_threads(
    graph: &Graph,
    schedule: &Schedule,
    bindings: &Bindings,
    threads: u32,
) -> Result<Simulation, MemoryError> {
    simulate_resolved(graph, schedule, bindings, threads, &resolved_shapes(graph))
}

/// [`simulate_threads`] given ORT's view of `graph`'s shapes (`ort`: [`resolved_shapes`], or
/// [`crate::ort_view::resolved_shapes_after`] for a patched graph): ORT's allocation plan,
/// decided once (`plan::plan_allocation`), then the run's steps replayed over it (`replay`).
pub fn simulate_resolved(
    graph: &Graph,
    schedule: &Schedule,
    bindings: &Bindings,
    threads: u32,
    ort: &OrtShapes,
) -> Result<Simulation, MemoryError> {
    let plan = plan_allocation(graph, schedule, bindings, ort)?;
    replay(graph, schedule, bindings, threads, plan)
}

/// The run's steps replayed over `plan`: the copied outputs at the frame's creation, then at
/// each step its kernel scratch, the buffers it allocates, the re-allocations, the live bytes,
/// and the releases; the peak, and the initializers a node reads.
fn replay(
    graph: &Graph,
    schedule: &Schedule,
    bindings: &Bindings,
    threads: u32,
    plan: AllocationPlan,
) -> Result<Simulation, MemoryError> {
    let AllocationPlan {
        bytes,
        buffer_of,
        buffers,
        holds_output,
        frees,
        extra_allocs,
        copied_outputs,
    } = plan;
    let nb = buffers.len() as u64;
    let mut live = vec![0u64; schedule.len()];
    let mut current: u64 = 0;
    let mut held_again: u64 = 0;
    let mut arena_events: Vec<ArenaEvent> = Vec::new();
    let mut push = |step: usize, alloc: bool, key: u64, bytes: u64, kind: EventKind| {
        arena_events.push(ArenaEvent {
            step,
            alloc,
            key,
            bytes,
            kind,
        })
    };
    // Keys: buffers 0..nb, their re-allocations nb..2nb, scratch from 2nb on, copied outputs
    // after the last step's scratch.
    let copied_key = 2 * nb + (schedule.len() as u64) * SCRATCH_STRIDE;
    for (i, &bytes) in copied_outputs.iter().enumerate() {
        current += rounded(bytes);
        push(0, true, copied_key + i as u64, bytes, EventKind::Output);
    }
    let (mut next_alloc, mut next_free, mut next_extra) = (0, 0, 0);
    for (s, live_here) in live.iter_mut().enumerate() {
        let scratch = kernel_scratch(graph, schedule.order[s], bindings, threads);
        let scratch_key = |k: usize| 2 * nb + (s as u64) * SCRATCH_STRIDE + k as u64;
        for (k, &bytes) in scratch.before.iter().enumerate() {
            push(s, true, scratch_key(k), bytes, EventKind::Scratch);
        }
        while next_alloc < buffers.len() && buffers[next_alloc].alloc_step == s {
            let b = next_alloc;
            next_alloc += 1;
            current += rounded(buffers[b].bytes);
            let kind = if holds_output[b] {
                EventKind::Output
            } else {
                EventKind::Buffer
            };
            push(s, true, b as u64, buffers[b].bytes, kind);
        }
        let after0 = scratch.before.len();
        for (k, &bytes) in scratch.after.iter().enumerate() {
            push(s, true, scratch_key(after0 + k), bytes, EventKind::Scratch);
        }
        for k in 0..scratch.before.len() + scratch.after.len() {
            push(s, false, scratch_key(k), 0, EventKind::Scratch);
        }
        let scratch_bytes = scratch.bytes();
        current += scratch_bytes;
        while let Some(&(_, b)) = extra_allocs[next_extra..].first().filter(|e| e.0 == s) {
            next_extra += 1;
            held_again += rounded(buffers[b].bytes);
            push(s, true, nb + b as u64, buffers[b].bytes, EventKind::Buffer);
        }
        *live_here = current + held_again;
        current -= scratch_bytes;
        while let Some(&(_, b)) = frees[next_free..].first().filter(|e| e.0 == s) {
            next_free += 1;
            current -= rounded(buffers[b].bytes);
            push(s, false, b as u64, buffers[b].bytes, EventKind::Buffer);
        }
    }
    let (peak_step, peak_live) = live
        .iter()
        .copied()
        .enumerate()
        .max_by_key(|&(s, v)| (v, std::cmp::Reverse(s)))
        .unwrap_or((0, 0));
    let mut initializer_bytes = Vec::new();
    for t in graph.initializers() {
        if !graph.tensor(t).consumers().is_empty() {
            initializer_bytes.push(tensor_bytes(graph, t, bindings)?);
        }
    }
    Ok(Simulation {
        initializer_bytes,
        schedule: schedule.clone(),
        tensor_bytes: bytes,
        buffer_of,
        buffers,
        live,
        peak_live,
        peak_step,
        arena_events,
    })
}

impl Simulation {
    /// Peak of ORT's BFC arena replayed on the run's events (what `MaxInUse` reports with the
    /// default session arena), for reports: the planner's trials never ask for it.
    pub fn arena_peak(&self) -> u64 {
        let mut arena = BfcArena::new(ArenaConfig::ort_default());
        for e in &self.arena_events {
            if e.alloc {
                // Uncapped: cannot run out.
                let _ = arena.alloc(e.key, e.bytes);
            } else {
                arena.free(e.key);
            }
        }
        arena.max_in_use
    }
}

/// Node whose step is the peak, for reports.
pub fn peak_node(sim: &Simulation) -> Option<NodeId> {
    node_at(sim, sim.peak_step)
}

/// Node run at `step` of the run `sim`, for reports.
pub fn node_at(sim: &Simulation, step: usize) -> Option<NodeId> {
    sim.schedule.order.get(step).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckpt_ir::ort::{ORT_VERSION, TRAINING_ORT_VERSION};

    /// `sh = Shape(a)` has a lower index than the chain `b`, `c`, so the reverse depth-first walk
    /// expands the chain first and runs `sh` just before its reader `r`, keeping `a` alive until
    /// then; the training runtime runs it right after `a`'s producer.
    #[test]
    fn the_training_runtime_runs_shape_right_after_its_input() {
        let g = ckpt_ir::parse_graph(
            r#"
input %0 "x": f32[4]
%1 "a": f32[4] = Exp(%0)  # "a"
%2 "sh": i64[1] = Shape(%1)  # "sh"
%3 "b": f32[4] = Exp(%1)  # "b"
%4 "c": f32[4] = Exp(%3)  # "c"
%5 "r": f32[4] = Reshape(%4, %2)  # "r"
output %5 "r"
"#,
        )
        .unwrap();
        let names = |version: &str| -> Vec<String> {
            let s = schedule_for(&g, version).unwrap();
            s.order.iter().map(|&n| g.node(n).name.clone()).collect()
        };
        assert_eq!(names(ORT_VERSION), ["a", "b", "c", "sh", "r"]);
        assert_eq!(names(TRAINING_ORT_VERSION), ["a", "sh", "b", "c", "r"]);
        // No training op: the graph runs on ORT_VERSION, so `schedule` keeps the plain walk.
        assert_eq!(
            schedule(&g).unwrap(),
            schedule_for(&g, ORT_VERSION).unwrap()
        );
    }
}
