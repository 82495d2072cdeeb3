//! A shared weight's gradient ([`fold_tied_gradients`]): where one weight is both a token
//! embedding and a product's operand (a language-model head tied to its embedding), the
//! exporters write its gradient as the `Add` of the product's gradient and the embedding's,
//! the latter a `ScatterND(reduction=add)` of the rows into a table of zeros. Both addends
//! and the table are as large as the weight, and the `Add` reads two of them at once at the
//! end of the backward. Scattering the rows into the product's gradient instead computes the
//! same sum with no table and no second addend.
//!
//! The sum is taken in another order: `g + (0 + u1 + u2)` becomes `(g + u1) + u2` for a row
//! two tokens hit, which rounds differently. So the fold is not among [`super::fold`]'s,
//! which are bit for bit: the planner makes it only where asked
//! (`ckpt_planner::PlanOptions::fold_tied`), and validation holds the weight's gradient to
//! its tolerances.

use ckpt_ir::{Graph, NodeId, Patch, Substitute, TensorId, TensorRef};

use super::{onnx_node, single_input, zero_fill};

/// One shared weight's gradient to fold: the `Add` that sums it, the addend the rows are
/// scattered into, the `ScatterND` with its indices and rows, and the table of zeros it reads.
struct TiedSum {
    add: NodeId,
    into: TensorId,
    scatter: NodeId,
    indices: TensorId,
    updates: TensorId,
    zeros: NodeId,
}

/// The shared weights' gradients of `graph` folded as one patch labelled `label` (empty when
/// there is none; ONNX opset 16 on, where `ScatterND` has its `reduction`): each `Add` of
/// such a gradient (`tied_sum`: two addends of one type and known shape, one scattered by a
/// `ScatterND(add)` into a table of +0.0, neither read elsewhere) becomes a
/// `ScatterND(reduction=add)` of the same rows into the other addend, and the old
/// `ScatterND` and its table of zeros are removed.
pub fn fold_tied_gradients(graph: &Graph, label: &str) -> Patch {
    let mut patch = Patch::new(label);
    if graph.opset(ckpt_ir::ONNX_DOMAIN).is_none_or(|v| v < 16) {
        return patch;
    }
    let mut removals = Vec::new();
    for &n in graph.nodes() {
        let Some(f) = tied_sum(graph, n) else {
            continue;
        };
        patch.substitutes.push(Substitute {
            node: f.add,
            op_type: "ScatterND".into(),
            attributes: graph.node(f.scatter).attributes().to_vec(),
            inputs: [f.into, f.indices, f.updates]
                .map(|t| Some(TensorRef::Existing(t)))
                .to_vec(),
        });
        removals.extend([f.scatter, f.zeros]);
    }
    // A removal must leave nothing reading what it removes: the later node first.
    let order = graph.file_positions();
    removals.sort_by_key(|n| std::cmp::Reverse(order[n.index()]));
    patch.removals = removals;
    patch
}

/// The shared weight's gradient that node `n` sums, when it can be folded: `n` is an ONNX
/// `Add` of two values of one element type and one fully known shape (no broadcasting), one
/// written by a `ScatterND` with `reduction="add"` that only `n` reads and that is no graph
/// output, whose data is a table of +0.0 (a `ConstantOfShape` only it reads) of that shape.
fn tied_sum(graph: &Graph, n: NodeId) -> Option<TiedSum> {
    let node = onnx_node(graph, n, "Add")?;
    let [Some(a), Some(b)] = node.inputs[..] else {
        return None;
    };
    if a == b || !same_type(graph, a, b) {
        return None;
    }
    let (scattered, into, scatter) = [(a, b), (b, a)].into_iter().find_map(|(s, other)| {
        let p = graph.tensor(s).producer()?;
        onnx_node(graph, p, "ScatterND").map(|_| (s, other, p))
    })?;
    let s = graph.node(scatter);
    if s.attr_s("reduction").as_deref() != Some("add") || !only_read_by(graph, scattered, n) {
        return None;
    }
    let [Some(data), Some(indices), Some(updates)] = s.inputs[..] else {
        return None;
    };
    let zeros = graph.tensor(data).producer()?;
    zero_fill(graph, zeros)?;
    single_input(graph, zeros)?;
    if !only_read_by(graph, data, scatter) || !same_type(graph, data, into) {
        return None;
    }
    Some(TiedSum {
        add: n,
        into,
        scatter,
        indices,
        updates,
        zeros,
    })
}

/// Whether `t` is read by `n` alone and is no graph output.
fn only_read_by(graph: &Graph, t: TensorId, n: NodeId) -> bool {
    let tensor = graph.tensor(t);
    !tensor.is_output && tensor.consumers() == [n]
}

/// Whether `a` and `b` have one element type and one shape, every dim known.
fn same_type(graph: &Graph, a: TensorId, b: TensorId) -> bool {
    let (ta, tb) = (graph.tensor(a), graph.tensor(b));
    let dims = |t: &ckpt_ir::Tensor| -> Option<Vec<u64>> {
        t.shape.as_ref()?.dims().iter().map(|d| d.known()).collect()
    };
    ta.dtype.is_some() && ta.dtype == tb.dtype && dims(ta).is_some() && dims(ta) == dims(tb)
}
