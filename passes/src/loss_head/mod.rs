//! The loss head split into row chunks ([`chunk_loss_head`]): the vocabulary projection and
//! every node that reads its values row by row, forward and backward, written once per chunk
//! of rows, so that no logits-sized value exists whole.
//!
//! The region grows from the projection (a `MatMul` or `Gemm` of rows `[N, D]` by a weight
//! that feeds a `LogSoftmax` over its last axis) to every node whose output is computed row
//! by row from region values, rows of other values (sliced per chunk) and values every row
//! shares: elementwise ops, `LogSoftmax`/`Softmax` off the row axis,
//! `GatherElements`/`ScatterElements` off the row axis, `Squeeze`/`Unsqueeze` off the row
//! axis, a `ReduceSum` off the row axis, and a product of rows by a weight. What leaves it:
//! - a value with rows (the hidden state's gradient): the chunks' `Concat` on axis 0;
//! - a `ReduceSum` over everything (the loss's sum): a chain of `Add`s of the chunks' sums;
//! - a product that sums over the rows, `Gemm(transA=1)` of two row values or a `MatMul` of
//!   a row value's `Transpose` (the weight's gradient): a chain of `Gemm(transA=1)`s, each
//!   adding the one before as its C.
//!
//! The node that wrote each of these becomes the last link (its output and name stay, so a
//! graph output stays one). Chunks run one after another in ONNX Runtime's walk: chunk i+1's
//! rows of the projection's input are a `Pad` with no padding whose constant value is a
//! scalar computed from every value chunk i leaves the region with (the values are
//! unchanged: no position is padded).
//!
//! The sums run in another order than the whole head's, so the losses and gradients are the
//! same within rounding, not bit for bit. ONNX Runtime's CPU `Gemm` never writes over its C,
//! so with more than two chunks two partial sums of the weight's gradient are held at once.

mod order;
mod write;

use std::collections::{HashMap, HashSet};

use ckpt_ir::{DType, Dim, Graph, NodeId, Patch, TensorId};

use write::Writer;

/// The loss head of a graph in chunks of rows: the patch, and what it did.
#[derive(Clone, Debug)]
pub struct ChunkedHead {
    pub patch: Patch,
    /// How many chunks, and the rows of each.
    pub chunks: u64,
    pub rows_per_chunk: u64,
    /// The nodes written once per chunk.
    pub region_nodes: usize,
    /// The projection's output, the head's logits (by name).
    pub logits: String,
}

/// How a product summing over the rows (the head weight's gradient) adds up its chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accumulate {
    /// A chain of `Gemm(transA=1)`, each taking the sum before as its C: ONNX Runtime's CPU
    /// Gemm never writes over its C, so two sums are live at each link but the last, which
    /// may write a graph output.
    Gemm,
    /// A chain of ONNX Runtime's `com.microsoft.FusedConv` (f32 only): a 1×1 convolution of
    /// the chunk's rows of one operand by the other's transposed, each taking the sum before
    /// as its sum input `Z`, which the kernel overwrites in place. One sum is live, at the
    /// cost of a transposed copy of each chunk's rows.
    InPlace,
}

/// How a region value is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Rows on axis 0, computed row by row: one value per chunk.
    Row,
    /// The `Transpose` of a 2-D row value, read only by products summing over the rows.
    Col,
    /// A `ReduceSum` of a row value over every axis.
    Sum,
    /// A product summing over the rows.
    Contraction,
}

/// How a region node's input from outside the region is read per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outside {
    /// Rows on axis 0: sliced per chunk.
    Rows,
    /// The same for every row: read whole by every chunk.
    Shared,
}

const ELEMENTWISE: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Where", "Exp", "Log", "Neg", "Not", "Equal", "Cast", "Less",
    "Greater", "And", "Or", "Abs", "Sqrt", "Relu", "Max", "Min",
];

/// The head found in a graph and the region grown from it.
pub(super) struct Region {
    pub(super) rows: u64,
    pub(super) rows_in: TensorId,
    /// Region nodes in file order.
    pub(super) nodes: Vec<NodeId>,
    pub(super) kind: HashMap<TensorId, Kind>,
    /// The region values read outside it or written as graph outputs.
    pub(super) exits: HashSet<TensorId>,
    pub(super) logits: TensorId,
}

/// A loss head this pass can write in chunks ([`LossHead::find`]), found once and written in
/// any number of chunks ([`LossHead::in_chunks`]).
pub struct LossHead {
    region: Region,
}

impl LossHead {
    /// The loss head of `graph`, or `None` where it has none this pass writes (module doc):
    /// no `LogSoftmax` over the last axis of a projection of rows with a known row count, a
    /// region whose values leave it otherwise than as rows, sums or contractions, a value
    /// read back into the region after leaving it, or an ONNX opset below 13.
    pub fn find(graph: &Graph) -> Option<LossHead> {
        if graph.opset(ckpt_ir::ONNX_DOMAIN).is_none_or(|v| v < 13) {
            return None;
        }
        let mut region = grow(graph, head(graph)?)?;
        region.exits = exits(graph, &region)?;
        Some(LossHead { region })
    }

    /// The head of `graph` (the graph it was found in) in `chunks` chunks of rows, as one
    /// patch labelled `label`; `None` where `chunks` is below 2 or does not divide the rows.
    /// The products summing over the rows add up their chunks as `accumulate` says; `None`
    /// also where [`Accumulate::InPlace`] meets a product that is not f32.
    pub fn in_chunks(
        &self,
        graph: &Graph,
        chunks: u64,
        accumulate: Accumulate,
        label: &str,
    ) -> Option<ChunkedHead> {
        let region = &self.region;
        if chunks < 2 || !region.rows.is_multiple_of(chunks) {
            return None;
        }
        let patch = Writer::new(graph, region, chunks, accumulate, label).write()?;
        Some(ChunkedHead {
            patch,
            chunks,
            rows_per_chunk: region.rows / chunks,
            region_nodes: region.nodes.len(),
            logits: graph.tensor(region.logits).name.clone(),
        })
    }
}

/// The loss head of `graph` in `chunks` chunks of rows ([`LossHead::find`], then
/// [`LossHead::in_chunks`]).
pub fn chunk_loss_head(
    graph: &Graph,
    chunks: u64,
    accumulate: Accumulate,
    label: &str,
) -> Option<ChunkedHead> {
    LossHead::find(graph)?.in_chunks(graph, chunks, accumulate, label)
}

fn onnx_op(graph: &Graph, n: NodeId) -> Option<&str> {
    let node = graph.node(n);
    (node.domain == ckpt_ir::ONNX_DOMAIN).then_some(node.op_type.as_str())
}

fn dims(graph: &Graph, t: TensorId) -> Option<&[Dim]> {
    graph.tensor(t).shape.as_ref().map(|s| s.dims())
}

pub(super) fn rank(graph: &Graph, t: TensorId) -> Option<usize> {
    dims(graph, t).map(<[Dim]>::len)
}

/// The first `LogSoftmax` over the last axis of a 2-D `[N, V]` value (N known) that a
/// projection of rows writes: `MatMul(X, W)`, or a `Gemm` of `X` untransposed with no C.
fn head(graph: &Graph) -> Option<Region> {
    for &n in graph.nodes() {
        if onnx_op(graph, n) != Some("LogSoftmax") {
            continue;
        }
        let node = graph.node(n);
        let Some(logits) = node.inputs.first().copied().flatten() else {
            continue;
        };
        let Some([Dim::Known(rows), _]) = dims(graph, logits) else {
            continue;
        };
        if !matches!(node.attr_i("axis").unwrap_or(-1), 1 | -1) || *rows < 2 {
            continue;
        }
        let Some(p) = graph.tensor(logits).producer() else {
            continue;
        };
        if !is_projection(graph, p) {
            continue;
        }
        let Some(rows_in) = graph.node(p).inputs[0] else {
            continue;
        };
        let mut kind = HashMap::new();
        kind.insert(logits, Kind::Row);
        return Some(Region {
            rows: *rows,
            rows_in,
            nodes: vec![p],
            kind,
            exits: HashSet::new(),
            logits,
        });
    }
    None
}

/// Whether `p` is a product of 2-D rows by a weight: a `MatMul` of two 2-D values, or a
/// `Gemm` with A untransposed, no C and alpha 1.
fn is_projection(graph: &Graph, p: NodeId) -> bool {
    let node = graph.node(p);
    let two_d = node.inputs.len() == 2
        && node
            .inputs
            .iter()
            .all(|i| i.is_some_and(|t| rank(graph, t) == Some(2)));
    match onnx_op(graph, p) {
        Some("MatMul") => two_d,
        Some("Gemm") => {
            two_d
                && node.attr_i("transA").unwrap_or(0) == 0
                && node.attr_f("alpha").unwrap_or(1.0) == 1.0
        }
        _ => false,
    }
}

/// The region grown from the head to a fixed point (module doc), or `None` where fewer than
/// two nodes read the logits row by row.
fn grow(graph: &Graph, mut region: Region) -> Option<Region> {
    let mut inside: HashSet<NodeId> = region.nodes.iter().copied().collect();
    loop {
        let mut grew = false;
        for &n in graph.nodes() {
            if inside.contains(&n) {
                continue;
            }
            if let Some(k) = classify(graph, &region, n) {
                let out = graph.node(n).outputs[0]?;
                region.kind.insert(out, k);
                inside.insert(n);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let order = graph.file_positions();
    region.nodes = inside.into_iter().collect();
    region.nodes.sort_by_key(|n| order[n.index()]);
    (region.nodes.len() > 2).then_some(region)
}

/// How input `t` from outside the region is read by a node writing `out_rank` dims: rows
/// (sliced) when it has the output's rank and N rows, shared when it broadcasts over them.
pub(super) fn outside(
    graph: &Graph,
    region: &Region,
    t: TensorId,
    out_rank: usize,
) -> Option<Outside> {
    let d = dims(graph, t)?;
    if d.len() < out_rank || d.first().is_some_and(|x| x.known() == Some(1)) {
        return Some(Outside::Shared);
    }
    (d.len() == out_rank && d.first().and_then(|x| x.known()) == Some(region.rows))
        .then_some(Outside::Rows)
}

/// The kind of `n`'s output when `n` reads the region row by row (module doc), else `None`.
fn classify(graph: &Graph, region: &Region, n: NodeId) -> Option<Kind> {
    let op = onnx_op(graph, n)?;
    let node = graph.node(n);
    if node.outputs.len() != 1 {
        return None;
    }
    let out = node.outputs[0]?;
    let out_rank = rank(graph, out)?;
    let kinds: Vec<Option<Kind>> = node
        .inputs
        .iter()
        .map(|i| i.and_then(|t| region.kind.get(&t).copied()))
        .collect();
    if !kinds.iter().any(Option::is_some) {
        return None;
    }
    // Every input a row value, or rows or a shared value from outside.
    let plain = node.inputs.iter().zip(&kinds).all(|(i, k)| match (i, k) {
        (None, _) => true,
        (Some(_), Some(k)) => *k == Kind::Row,
        (Some(t), None) => outside(graph, region, *t, out_rank).is_some(),
    });
    let first = kinds.first().copied().flatten();
    let off_rows = |axis: i64| axis.rem_euclid(out_rank.max(1) as i64) != 0;
    let axes = || -> Option<Vec<i64>> {
        match node.inputs.get(1).copied().flatten() {
            Some(t) => ckpt_ir::ops::constant_i64(graph, t),
            None => node.attr_ints("axes").map(<[i64]>::to_vec),
        }
    };
    match op {
        _ if ELEMENTWISE.contains(&op) => plain.then_some(Kind::Row),
        "LogSoftmax" | "Softmax" => (first == Some(Kind::Row)
            && off_rows(node.attr_i("axis").unwrap_or(-1)))
        .then_some(Kind::Row),
        "GatherElements" | "ScatterElements" => {
            (plain && first == Some(Kind::Row) && off_rows(node.attr_i("axis").unwrap_or(0)))
                .then_some(Kind::Row)
        }
        "Unsqueeze" | "Squeeze" => {
            let in_rank = rank(graph, node.inputs[0]?)?;
            let r = out_rank.max(in_rank) as i64;
            let a = axes()?;
            (first == Some(Kind::Row) && !a.is_empty() && a.iter().all(|&x| x.rem_euclid(r) != 0))
                .then_some(Kind::Row)
        }
        "ReduceSum" => reduce_sum_kind(graph, node, first, axes()),
        "Transpose" => (first == Some(Kind::Row)
            && out_rank == 2
            && node.attr_ints("perm") == Some(&[1, 0][..]))
        .then_some(Kind::Col),
        "MatMul" | "Gemm" => product_kind(graph, region, n, &kinds),
        _ => None,
    }
}

/// A `ReduceSum` of a row value: off the row axis a row value, over every axis (keepdims 0)
/// a sum.
fn reduce_sum_kind(
    graph: &Graph,
    node: &ckpt_ir::Node,
    first: Option<Kind>,
    axes: Option<Vec<i64>>,
) -> Option<Kind> {
    if first != Some(Kind::Row) {
        return None;
    }
    let in_rank = rank(graph, node.inputs[0]?)? as i64;
    let noop = node.attr_i("noop_with_empty_axes").unwrap_or(0) != 0;
    match axes {
        Some(a) if !a.is_empty() && a.iter().all(|&x| x.rem_euclid(in_rank) != 0) => {
            Some(Kind::Row)
        }
        None if !noop && node.attr_i("keepdims") == Some(0) && node.inputs.len() == 1 => {
            Some(Kind::Sum)
        }
        _ => None,
    }
}

/// A product reading the region: rows by a weight from outside (a row value), or a row
/// value's transpose by rows (`MatMul` of a `Col`, or `Gemm(transA=1)`; a contraction).
fn product_kind(graph: &Graph, region: &Region, n: NodeId, kinds: &[Option<Kind>]) -> Option<Kind> {
    let node = graph.node(n);
    if node.inputs.len() != 2 || node.attr_f("alpha").unwrap_or(1.0) != 1.0 {
        return None;
    }
    let b = node.inputs[1]?;
    let gemm = onnx_op(graph, n) == Some("Gemm");
    let trans_a = gemm && node.attr_i("transA").unwrap_or(0) != 0;
    let trans_b = gemm && node.attr_i("transB").unwrap_or(0) != 0;
    let rows_b = match kinds[1] {
        Some(Kind::Row) => true,
        None => outside(graph, region, b, 2) == Some(Outside::Rows) && !trans_b,
        _ => false,
    };
    match (kinds[0], trans_a) {
        (Some(Kind::Row), false) if kinds[1].is_none() => {
            (rank(graph, node.inputs[0]?) == Some(2)).then_some(Kind::Row)
        }
        (Some(Kind::Row), true) if rows_b && !trans_b => Some(Kind::Contraction),
        (Some(Kind::Col), false) if rows_b && !gemm => Some(Kind::Contraction),
        _ => None,
    }
}

/// The values that leave the region (read outside it or written as graph outputs), where it
/// can be written in chunks: nothing in it reads a sum or a contraction, a transposed row
/// value is read only by contractions, what leaves it is rows, a sum or a contraction of the
/// rows' element type, and no value read into the region depends on one that left it;
/// else `None`.
fn exits(graph: &Graph, region: &Region) -> Option<HashSet<TensorId>> {
    let inside: HashSet<NodeId> = region.nodes.iter().copied().collect();
    let dtype = graph.tensor(region.rows_in).dtype;
    if !matches!(dtype, Some(DType::F32 | DType::F64)) {
        return None;
    }
    for &n in &region.nodes {
        for t in graph.node(n).input_tensors() {
            if matches!(region.kind.get(&t), Some(Kind::Sum | Kind::Contraction)) {
                return None;
            }
        }
    }
    let mut left: Vec<NodeId> = Vec::new();
    let mut exits = HashSet::new();
    for (&t, &k) in &region.kind {
        let tensor = graph.tensor(t);
        let outside_readers: Vec<NodeId> = tensor
            .consumers()
            .iter()
            .copied()
            .filter(|c| !inside.contains(c))
            .collect();
        if k == Kind::Col {
            if tensor.is_output || !outside_readers.is_empty() {
                return None;
            }
            let only_contractions = tensor.consumers().iter().all(|&c| {
                graph.node(c).outputs[0]
                    .is_some_and(|o| region.kind.get(&o) == Some(&Kind::Contraction))
            });
            if !only_contractions {
                return None;
            }
            continue;
        }
        if tensor.is_output || !outside_readers.is_empty() {
            if tensor.dtype != dtype {
                return None;
            }
            exits.insert(t);
        }
        left.extend(outside_readers);
    }
    // Nothing reachable from a value that left the region is read back into it.
    let mut seen: HashSet<NodeId> = HashSet::new();
    while let Some(n) = left.pop() {
        if inside.contains(&n) {
            return None;
        }
        if seen.insert(n) {
            for t in graph.node(n).output_tensors() {
                left.extend(graph.tensor(t).consumers().iter().copied());
            }
        }
    }
    Some(exits)
}
