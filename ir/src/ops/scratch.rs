//! Kernel scratch: temporaries a CPU kernel takes from the arena during its own step
//! (`docs/ort-internals.md` rule 10, measured on ONNX Runtime 1.31). An entry states its
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
