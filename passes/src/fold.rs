//! Zero-FLOP folds into a reader that takes a transposed operand: a 2-D `Transpose` read only
//! by a `MatMul` of two 2-D operands becomes the `transA`/`transB` of a `Gemm` that reads the
//! operand itself, and the transposed copy is never made. Every weight gradient of a linear
//! layer (`mm(t(dY), X)`) is such a MatMul, and the language-model head's is a copy as large
//! as the logits. ONNX Runtime's CPU `Gemm` computes the same values bit for bit as the
//! `MatMul` of the copy, and needs no buffer for the copy
//! (`scripts/ort_probe/loss_head_probe.py`).

use ckpt_ir::build::attr_i;
use ckpt_ir::{DType, Graph, NodeId, Patch, Substitute, TensorId, TensorRef};

/// The folds of `graph` as one patch labelled `label` (empty when there is none): each
/// MatMul whose operands are 2-D f32 or f64 values, either produced by a 2-D Transpose that
/// nothing else reads, becomes a Gemm (ONNX opset 11 on: its bias is optional) and the
/// Transposes it folds are removed.
pub fn fold_transposes(graph: &Graph, label: &str) -> Patch {
    let mut patch = Patch::new(label);
    if graph.opset(ckpt_ir::ONNX_DOMAIN).is_none_or(|v| v < 11) {
        return patch;
    }
    for &n in graph.nodes() {
        let node = graph.node(n);
        if node.domain != ckpt_ir::ONNX_DOMAIN || node.op_type != "MatMul" {
            continue;
        }
        let (Some(Some(a)), Some(Some(b))) = (node.inputs.first(), node.inputs.get(1)) else {
            continue;
        };
        let (a, b) = (*a, *b);
        if a == b || !gemm_operand(graph, a) || !gemm_operand(graph, b) {
            continue;
        }
        let folded = [transposed(graph, a, n), transposed(graph, b, n)];
        if folded.iter().all(Option::is_none) {
            continue;
        }
        let mut attributes = Vec::new();
        let mut inputs = Vec::new();
        for (slot, (t, f)) in [a, b].into_iter().zip(folded).enumerate() {
            match f {
                Some((transpose, source)) => {
                    attributes.push(attr_i(["transA", "transB"][slot], 1));
                    inputs.push(Some(TensorRef::Existing(source)));
                    patch.removals.push(transpose);
                }
                None => inputs.push(Some(TensorRef::Existing(t))),
            }
        }
        patch.substitutes.push(Substitute {
            node: n,
            op_type: "Gemm".into(),
            attributes,
            inputs,
        });
    }
    patch
}

/// Whether `t` is a 2-D f32 or f64 value: what ONNX Runtime's CPU Gemm takes.
fn gemm_operand(graph: &Graph, t: TensorId) -> bool {
    let tensor = graph.tensor(t);
    matches!(tensor.dtype, Some(DType::F32 | DType::F64))
        && tensor.shape.as_ref().is_some_and(|s| s.rank() == 2)
}

/// The Transpose producing `t` and its input, when it swaps the two axes of a 2-D value and
/// `reader` is all that reads `t` (no graph output).
fn transposed(graph: &Graph, t: TensorId, reader: NodeId) -> Option<(NodeId, TensorId)> {
    let tensor = graph.tensor(t);
    if tensor.is_output || tensor.consumers() != [reader] {
        return None;
    }
    let p = tensor.producer()?;
    let node = graph.node(p);
    if node.domain != ckpt_ir::ONNX_DOMAIN || node.op_type != "Transpose" {
        return None;
    }
    let source = node.inputs.first().copied().flatten()?;
    let swaps = node.attr_ints("perm").is_none_or(|p| p == [1, 0]);
    (swaps && gemm_operand(graph, source)).then_some((p, source))
}
