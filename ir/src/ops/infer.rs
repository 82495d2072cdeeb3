//! Shape and dtype inference over a whole graph, in file order.
//!
//! Sources of truth: graph inputs and initializers (their declared types), constants
//! (embedded initializers, `Constant` nodes) and the registry's rules. value_info is read
//! only for the outputs of ops the registry does not know. Small integer tensors (shape
//! vectors, axes, pads: at most [`super::value::MAX_VALUE_ELEMS`] elements) carry their
//! elements as symbolic [`Dim`]s, so `Shape → Gather → Concat → Reshape` chains stay exact.

use crate::dtype::DType;
use crate::graph::{Graph, TensorSource};
use crate::ids::TensorId;

use super::ctx::InferCtx;
use super::op_def;
use super::types::{TensorType, Types};
use super::value::{constant_i64, dim_of, MAX_VALUE_ELEMS};

/// Why inference stopped. Each names the node and op at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InferError {
    #[error("node {node} ({op}): {msg}")]
    Rule {
        node: String,
        op: String,
        msg: String,
    },
    #[error("node {node} ({op}) is not in the op registry and its output `{tensor}` has no {what} in the model's value_info; add value_info for it or a registry entry for {op}")]
    NoRule {
        node: String,
        op: String,
        tensor: String,
        what: &'static str,
    },
    #[error("node {node} ({op}) reads `{tensor}`, which has no declared dtype and shape (a graph input or initializer without a full type)")]
    UntypedInput {
        node: String,
        op: String,
        tensor: String,
    },
}

fn is_int_like(d: DType) -> bool {
    matches!(
        d,
        DType::I64
            | DType::I32
            | DType::I16
            | DType::I8
            | DType::U64
            | DType::U32
            | DType::U16
            | DType::U8
            | DType::Bool
    )
}

/// Keep a value only where it is meaningful: an integer/bool tensor of known, small size
/// whose element count matches.
fn sanitize(mut t: TensorType) -> TensorType {
    // (The element count, a product of dims, is computed only for a value worth keeping.)
    let keep = t.value.as_ref().is_some_and(|v| {
        is_int_like(t.dtype)
            && t.shape
                .numel()
                .known()
                .is_some_and(|n| n <= MAX_VALUE_ELEMS && v.len() as u64 == n)
    });
    if !keep {
        t.value = None;
    }
    t
}

/// The declared type of a graph input or initializer, with its elements when constant.
fn declared(graph: &Graph, t: TensorId) -> Option<TensorType> {
    let tensor = graph.tensor(t);
    let (dtype, shape) = (tensor.dtype?, tensor.shape.clone()?);
    let value = if matches!(tensor.source, TensorSource::Initializer { .. }) && is_int_like(dtype) {
        constant_i64(graph, t).map(|v| v.into_iter().map(dim_of).collect())
    } else {
        None
    };
    Some(sanitize(TensorType {
        dtype,
        shape,
        value,
    }))
}

/// Infer every tensor's dtype and shape. Registry ops never read the value_info of their
/// outputs; ops not in the registry take theirs from value_info, else
/// [`InferError::NoRule`].
pub fn infer(graph: &Graph) -> Result<Types, InferError> {
    let mut out = Types {
        types: vec![None; graph.tensor_count()],
        ..Types::default()
    };
    for t in graph.tensor_ids() {
        if !matches!(graph.tensor(t).source, TensorSource::Node(_)) {
            out.types[t.index()] = declared(graph, t);
        }
    }
    for &n in graph.nodes() {
        let node = graph.node(n);
        let label = node.display_name(n);
        let op = node.op_label();
        let Some(def) = op_def(graph, n) else {
            out.from_value_info.push(n);
            for t in node.output_tensors() {
                let tensor = graph.tensor(t);
                let missing = |what| InferError::NoRule {
                    node: label.clone(),
                    op: op.clone(),
                    tensor: tensor.name.clone(),
                    what,
                };
                let dtype = tensor.dtype.ok_or_else(|| missing("dtype"))?;
                let shape = tensor.shape.clone().ok_or_else(|| missing("shape"))?;
                out.types[t.index()] = Some(TensorType {
                    dtype,
                    shape,
                    value: None,
                });
            }
            continue;
        };
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for slot in &node.inputs {
            match slot {
                None => inputs.push(None),
                Some(t) => match &out.types[t.index()] {
                    Some(tt) => inputs.push(Some(tt.clone())),
                    None => {
                        return Err(InferError::UntypedInput {
                            node: label,
                            op,
                            tensor: graph.tensor(*t).name.clone(),
                        })
                    }
                },
            }
        }
        let opset = graph.opset(&node.domain).unwrap_or(def.since);
        let ctx = InferCtx {
            graph,
            id: n,
            node,
            opset,
            inputs,
            warnings: Default::default(),
        };
        let result = (def.infer)(&ctx).map_err(|msg| InferError::Rule {
            node: label.clone(),
            op: op.clone(),
            msg,
        })?;
        out.warnings.extend(
            ctx.warnings
                .into_inner()
                .into_iter()
                .map(|w| format!("{label} ({op}): {w}")),
        );
        for (k, slot) in node.outputs.iter().enumerate() {
            let Some(t) = slot else { continue };
            match result.get(k).cloned().flatten() {
                Some(tt) => out.types[t.index()] = Some(sanitize(tt)),
                None => {
                    return Err(InferError::Rule {
                        node: label,
                        op,
                        msg: format!(
                            "output {k} (`{}`) is not produced by this op's rule",
                            graph.tensor(*t).name
                        ),
                    })
                }
            }
        }
    }
    Ok(out)
}

/// Infer, then fill every tensor whose dtype or shape the file left out (via
/// [`Graph::set_type`]); declared types are kept as they are.
pub fn infer_into(graph: &mut Graph) -> Result<Types, InferError> {
    let types = infer(graph)?;
    for t in graph.tensor_ids().collect::<Vec<_>>() {
        let Some(tt) = types.get(t) else { continue };
        let tensor = graph.tensor(t);
        if tensor.dtype.is_none() || tensor.shape.is_none() {
            let dtype = tensor.dtype.or(Some(tt.dtype));
            let shape = tensor.shape.clone().or_else(|| Some(tt.shape.clone()));
            graph.set_type(t, dtype, shape);
        }
    }
    Ok(types)
}

/// The type of graph input or initializer `t` as the file declares it (with its elements
/// when it is a small integer constant), sanitized as [`infer`]'s are.
pub fn source_type(graph: &Graph, t: TensorId) -> Option<TensorType> {
    declared(graph, t)
}

/// A type another reader of inference keeps, sanitized as [`infer`]'s are: its elements
/// only where they are meaningful.
pub fn sanitized(t: TensorType) -> TensorType {
    sanitize(t)
}

/// What the registry's rule for node `n` infers from `inputs` (its inputs' types, in slot
/// order; `None` for an absent optional input): `None` where an input is untyped, the op is
/// not in the registry, or the rule fails. For readers that keep types their own way
/// (`passes::ort_view` replays what ONNX Runtime resolves when it loads a model).
pub fn infer_node(
    graph: &Graph,
    n: crate::ids::NodeId,
    inputs: Option<Vec<Option<TensorType>>>,
) -> Option<Vec<Option<TensorType>>> {
    let def = op_def(graph, n)?;
    let node = graph.node(n);
    let ctx = InferCtx {
        graph,
        id: n,
        node,
        opset: graph.opset(&node.domain).unwrap_or(def.since),
        inputs: inputs?,
        warnings: Default::default(),
    };
    (def.infer)(&ctx).ok()
}
