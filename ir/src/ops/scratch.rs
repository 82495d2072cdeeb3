//! Kernel scratch: temporaries a CPU kernel takes from the arena during its own step
//! (`docs/design/ort-internals.md` rule 10, measured on ONNX Runtime 1.31). An entry states its
//! rule ([`super::OpDef::scratch`]); ops without one showed no scratch in the measurements.
//!
//! Rules see concrete shapes: a node whose inputs cannot be evaluated under the bindings
//! takes no scratch.

use crate::dtype::DType;
use crate::graph::Graph;
use crate::ids::NodeId;
use crate::ort::alloc_rounded;
use crate::shape::Bindings;

use super::op_def;

/// Temporaries of one kernel run, in requested (unrounded) bytes: `before` are allocated
/// before the node's outputs, `after` after them; all are freed before the step's inputs
/// are released.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scratch {
    pub before: Vec<u64>,
    pub after: Vec<u64>,
}

impl Scratch {
    /// Arena bytes of every temporary, each rounded as the arena rounds it.
    pub fn bytes(&self) -> u64 {
        self.before
            .iter()
            .chain(&self.after)
            .map(|&b| alloc_rounded(b))
            .sum()
    }
}

/// Computes a node's scratch from its concrete input shapes.
pub type ScratchFn = fn(&ScratchCtx<'_>) -> Scratch;

/// What a scratch rule sees: the node, the bindings that make its shapes concrete, and the
/// session's intra-op thread count (MLAS sizes some working buffers per thread).
pub struct ScratchCtx<'a> {
    pub graph: &'a Graph,
    pub id: NodeId,
    pub bindings: &'a Bindings,
    pub threads: u32,
}

impl ScratchCtx<'_> {
    /// Input `i`'s dtype and concrete dims, when present, typed and bound.
    pub fn concrete(&self, i: usize) -> Option<(DType, Vec<u64>)> {
        let t = self.graph.node(self.id).inputs.get(i).copied().flatten()?;
        let tensor = self.graph.tensor(t);
        Some((
            tensor.dtype?,
            tensor.shape.as_ref()?.eval(self.bindings).ok()?,
        ))
    }
}

/// Bytes of `numel` elements of `dt` (saturating).
pub(crate) fn bytes_of(dt: DType, numel: u64) -> u64 {
    numel.saturating_mul(dt.bits()).div_ceil(8)
}

/// The scratch of `node` under `b` in a session of `threads` intra-op threads: empty for ops
/// without a rule and ops not in the registry.
pub fn kernel_scratch(graph: &Graph, node: NodeId, b: &Bindings, threads: u32) -> Scratch {
    match op_def(graph, node).and_then(|d| d.scratch) {
        Some(rule) => rule(&ScratchCtx {
            graph,
            id: node,
            bindings: b,
            threads: threads.max(1),
        }),
        None => Scratch::default(),
    }
}

/// Numpy broadcast of concrete shapes.
fn broadcast(shapes: &[Vec<u64>]) -> Vec<u64> {
    let rank = shapes.iter().map(Vec::len).max().unwrap_or(0);
    (0..rank)
        .map(|i| {
            shapes
                .iter()
                .map(|s| {
                    if i + s.len() >= rank {
                        s[i + s.len() - rank]
                    } else {
                        1
                    }
                })
                .fold(1u64, |m, d| if d == 1 { m } else { d })
        })
        .collect()
}

/// Variadic Sum / Max / Min / Mean from opset 8 (`UntypedBroadcastVariadic`,
/// `providers/cpu/math/element_wise_ops.cc`): with N ≥ 3 inputs the kernel folds them
/// pairwise through N − 2 temporaries, each of the broadcast shape of the inputs folded so
/// far and allocated before the previous one is freed; the last one (inputs 0..N−2
/// broadcast) is alive while the output is allocated and is freed when the kernel returns.
/// Broadcast shapes only grow, so the step never holds more than that last temporary and the
/// output: the rule gives that temporary, before the output.
pub(super) fn variadic_scratch(ctx: &ScratchCtx<'_>) -> Scratch {
    let node = ctx.graph.node(ctx.id);
    let n = node.inputs.len();
    if n < 3 || ctx.graph.opset(crate::graph::ONNX_DOMAIN).unwrap_or(8) < 8 {
        return Scratch::default();
    }
    let mut shapes = Vec::with_capacity(n - 1);
    let mut dtype = None;
    for i in 0..n - 1 {
        let Some((dt, s)) = ctx.concrete(i) else {
            return Scratch::default();
        };
        dtype = Some(dt);
        shapes.push(s);
    }
    let Some(dt) = dtype else {
        return Scratch::default();
    };
    let numel = broadcast(&shapes)
        .iter()
        .fold(1u64, |p, &d| p.saturating_mul(d));
    Scratch {
        before: vec![bytes_of(dt, numel)],
        after: Vec::new(),
    }
}

/// ConvTranspose (`providers/cpu/nn/conv_transpose.cc`, `DoConvTranspose`): one column
/// buffer of `M/group · kernel size · input image size` elements (W is [C, M/group, k…], X
/// [N, C, spatial…]), allocated after the output and reused for every image and group.
pub(super) fn conv_transpose_scratch(ctx: &ScratchCtx<'_>) -> Scratch {
    let (Some((dt, x)), Some((_, w))) = (ctx.concrete(0), ctx.concrete(1)) else {
        return Scratch::default();
    };
    if x.len() < 3 || w.len() != x.len() {
        return Scratch::default();
    }
    let kernel_dim = w[1..].iter().fold(1u64, |p, &d| p.saturating_mul(d));
    let image = x[2..].iter().fold(1u64, |p, &d| p.saturating_mul(d));
    Scratch {
        before: Vec::new(),
        after: vec![bytes_of(dt, kernel_dim.saturating_mul(image))],
    }
}
