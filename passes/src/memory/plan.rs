//! ORT's allocation plan of one run, decided before any step runs and replayed by
//! [`super::simulate_resolved`]: the values' bytes, the planner's use counts and buffer reuse
//! (alias, in place, the most recently freed buffer of the same size), the buffers in
//! allocation order with the values placed in each, and when each is released.

use ckpt_ir::{Bindings, Graph, Shape, TensorId};
use rustc_hash::FxHashMap;

use super::{tensor_bytes, Buffer, MemoryError, Schedule};
use crate::ort_view::OrtShapes;

/// ORT's allocation plan of one run, decided before any step runs: every value's bytes, the
/// arena buffers in allocation order with the values placed in each and the step after which
/// each is released, and the allocations outside them.
pub(super) struct AllocationPlan {
    /// Requested bytes of each value a node computes (0 for the others).
    pub(super) bytes: Vec<u64>,
    /// The buffer each computed value lives in (`None`: an alias of an input or initializer).
    pub(super) buffer_of: Vec<Option<usize>>,
    pub(super) buffers: Vec<Buffer>,
    /// Whether each buffer holds a graph output (allocated as one, never released).
    pub(super) holds_output: Vec<bool>,
    /// `(step, buffer)` of each release, by step, then buffer.
    pub(super) frees: Vec<(usize, usize)>,
    /// `(step, buffer)` of each buffer allocated again for a value planned into it after its
    /// release (never read: held to the end), by step, then buffer.
    pub(super) extra_allocs: Vec<(usize, usize)>,
    /// Bytes of the graph outputs that are initializers or Constant values: copied into the
    /// arena when the run's frame is created.
    pub(super) copied_outputs: Vec<u64>,
}

/// The allocation plan of `graph` run in `schedule` order: the values' bytes, ORT's planner
/// ([`plan_origins`]), then the buffers and their release steps.
pub(super) fn plan_allocation(
    graph: &Graph,
    schedule: &Schedule,
    bindings: &Bindings,
    ort: &OrtShapes,
) -> Result<AllocationPlan, MemoryError> {
    let nt = graph.tensor_count();
    let mut bytes = vec![0u64; nt];
    let mut computed = vec![false; nt];
    for &n in &schedule.order {
        for t in graph.node(n).output_tensors() {
            bytes[t.index()] = tensor_bytes(graph, t, bindings)?;
            computed[t.index()] = true;
        }
    }
    let origins = plan_origins(graph, schedule, ort, &computed);
    let (buffers, buffer_of) = place_buffers(graph, schedule, &origins, &bytes);
    let mut plan = AllocationPlan {
        bytes,
        buffer_of,
        holds_output: buffers
            .iter()
            .map(|buf| buf.values.iter().any(|&v| origins.is_output[v.index()]))
            .collect(),
        buffers,
        frees: Vec::new(),
        extra_allocs: Vec::new(),
        copied_outputs: Vec::new(),
    };
    schedule_releases(graph, schedule, &mut plan);
    // Graph outputs that are initializers or Constant values: copied at the frame's creation.
    for &t in graph.outputs() {
        let tensor = graph.tensor(t);
        if !computed[t.index()] && !tensor.is_graph_input() {
            plan.copied_outputs.push(tensor_bytes(graph, t, bindings)?);
        }
    }
    Ok(plan)
}

/// What ORT's planner decides for each value, indexed by tensor.
struct Origins {
    /// The value whose buffer each value lives in (itself when it owns one).
    origin: Vec<TensorId>,
    /// Origin values that are arena buffers.
    owns: Vec<bool>,
    /// Graph outputs (each its own buffer).
    is_output: Vec<bool>,
}

/// ORT's planner over the run: use counts per value (readers, the production, a graph output,
/// a value there before the run); then, node by node, each output aliased, computed in place,
/// given the most recently freed buffer of its size, or a buffer of its own; and the buffers
/// whose count reaches zero freed.
fn plan_origins<'g>(
    graph: &Graph,
    schedule: &Schedule,
    ort: &'g OrtShapes,
    computed: &[bool],
) -> Origins {
    let nt = graph.tensor_count();
    // Use counts per value: readers (slots) + 1 produced + 1 graph output (+1 pre-existing).
    let mut use_count = vec![0i64; nt];
    for t in graph.tensor_ids() {
        let tensor = graph.tensor(t);
        if !computed[t.index()] {
            use_count[t.index()] += 1; // inputs, initializers, Constant outputs: held for the caller
        }
        if tensor.is_output {
            use_count[t.index()] += 1;
        }
    }
    for &n in &schedule.order {
        let node = graph.node(n);
        for t in node.input_tensors() {
            use_count[t.index()] += 1;
        }
        for t in node.output_tensors() {
            use_count[t.index()] += 1;
        }
    }
    let reads: Vec<i64> = {
        let mut r = vec![0i64; nt];
        for &n in &schedule.order {
            for t in graph.node(n).input_tensors() {
                r[t.index()] += 1;
            }
        }
        r
    };

    let mut origin: Vec<TensorId> = graph.tensor_ids().collect();
    // Indexed by origin value.
    let mut buf_count = use_count.clone();
    // The planner's free list, most recently freed first, kept as one stack per size
    // (`OrtShapes::size_key`): the first free buffer of a request's size is the top of its
    // stack. A buffer of no size key matches nothing and is never listed.
    // (Looked up, never iterated: the hasher does not show in the result.)
    let mut free_list: FxHashMap<(u64, &Shape), Vec<TensorId>> = FxHashMap::default();
    let mut owns = vec![false; nt];
    let mut is_output = vec![false; nt];
    for &n in &schedule.order {
        let node = graph.node(n);
        for (slot, out) in node.outputs.iter().enumerate() {
            let Some(out) = *out else { continue };
            if graph.tensor(out).is_output {
                owns[out.index()] = true;
                is_output[out.index()] = true;
                continue;
            }
            let input_for = |pair: Option<(usize, usize)>| {
                pair.filter(|&(o, _)| o == slot)
                    .and_then(|(_, i)| node.inputs.get(i).copied().flatten())
            };
            let mut reuse: Option<TensorId> = None;
            if let Some(src) = input_for(ckpt_ir::ops::alias(graph, n)) {
                reuse = Some(src);
            } else if let Some(src) = input_for(ckpt_ir::ops::may_inplace(graph, n)) {
                let o = origin[src.index()];
                if computed[o.index()] && buf_count[o.index()] == 1 && ort.same_size(src, out) {
                    reuse = Some(src);
                }
            }
            let never_read = reads[out.index()] == 0;
            let rank0 = ort.get(out).is_none_or(|(_, s)| s.rank() == 0);
            if reuse.is_none() && !never_read && !rank0 {
                reuse = ort
                    .size_key(out)
                    .and_then(|k| free_list.get_mut(&k))
                    .and_then(|stack| stack.pop());
            }
            match reuse {
                Some(r) => {
                    let o = origin[r.index()];
                    origin[out.index()] = o;
                    buf_count[o.index()] += use_count[out.index()];
                }
                None => owns[out.index()] = true,
            }
        }
        let release =
            |t: TensorId,
             buf_count: &mut Vec<i64>,
             free_list: &mut FxHashMap<(u64, &'g Shape), Vec<TensorId>>| {
                let o = origin[t.index()];
                buf_count[o.index()] -= 1;
                if buf_count[o.index()] == 0 && computed[o.index()] {
                    if let Some(k) = ort.size_key(o) {
                        free_list.entry(k).or_default().push(o);
                    }
                }
            };
        for t in node.input_tensors() {
            release(t, &mut buf_count, &mut free_list);
        }
        for t in node.output_tensors() {
            release(t, &mut buf_count, &mut free_list);
        }
    }
    Origins {
        origin,
        owns,
        is_output,
    }
}

/// The arena buffers, numbered in the order of their allocation steps, with the values placed
/// in each and the last step that reads any of them; and the buffer of each computed value.
fn place_buffers(
    graph: &Graph,
    schedule: &Schedule,
    origins: &Origins,
    bytes: &[u64],
) -> (Vec<Buffer>, Vec<Option<usize>>) {
    let nt = graph.tensor_count();
    let mut buffer_index = vec![usize::MAX; nt];
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut buffer_of = vec![None; nt];
    for (s, &n) in schedule.order.iter().enumerate() {
        for t in graph.node(n).output_tensors() {
            let o = origins.origin[t.index()];
            if !origins.owns[o.index()] {
                continue; // alias of an input or initializer
            }
            if buffer_index[o.index()] == usize::MAX {
                buffer_index[o.index()] = buffers.len();
                buffers.push(Buffer {
                    bytes: bytes[o.index()],
                    values: Vec::new(),
                    alloc_step: s,
                    free_after: None,
                });
            }
            let b = buffer_index[o.index()];
            buffers[b].values.push(t);
            buffer_of[t.index()] = Some(b);
        }
    }
    for (s, &n) in schedule.order.iter().enumerate() {
        for t in graph.node(n).input_tensors() {
            if let Some(b) = buffer_of[t.index()] {
                buffers[b].free_after = Some(buffers[b].free_after.map_or(s, |f| f.max(s)));
            }
        }
    }
    (buffers, buffer_of)
}

/// The plan's releases and re-allocations: a buffer holding a graph output is never released;
/// a value planned into a buffer already released (never read) allocates it again, kept.
/// Both listed by step (then buffer).
fn schedule_releases(graph: &Graph, schedule: &Schedule, plan: &mut AllocationPlan) {
    let mut extra_allocs: Vec<(usize, usize)> = Vec::new();
    for (b, buf) in plan.buffers.iter_mut().enumerate() {
        if plan.holds_output[b] {
            buf.free_after = None;
        }
        // A value planned into a buffer already released (never read): allocated again, kept.
        if let Some(f) = buf.free_after {
            let late = buf
                .values
                .iter()
                .filter_map(|&v| graph.tensor(v).producer())
                .filter_map(|p| schedule.step_of(p))
                .max();
            if let Some(l) = late.filter(|&l| l > f) {
                extra_allocs.push((l, b));
            }
        }
    }
    let mut frees: Vec<(usize, usize)> = plan
        .buffers
        .iter()
        .enumerate()
        .filter_map(|(b, buf)| buf.free_after.map(|f| (f, b)))
        .collect();
    frees.sort_unstable();
    extra_allocs.sort_unstable();
    plan.frees = frees;
    plan.extra_allocs = extra_allocs;
}
