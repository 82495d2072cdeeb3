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
    let keep = match (&t.value, t.shape.numel().known()) {
        (Some(v), Some(n)) => is_int_like(t.dtype) && n <= MAX_VALUE_ELEMS && v.len() as u64 == n,
        _ => false,
    };
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

/// Another reader's view of inference: what it knows of graph inputs and initializers, and
/// what it keeps of each output a rule infers. `passes::ort_view` uses it to replay what
/// ONNX Runtime resolves when it loads a model.
pub trait InferView {
    /// The type of a graph input or initializer, given the registry's (`declared`: its
    /// declared type, with its elements when it is a small integer constant).
    fn source(
        &self,
        graph: &Graph,
        t: TensorId,
        declared: Option<TensorType>,
    ) -> Option<TensorType>;
    /// The type of node output `t`, given what the node's rule inferred from the view's
    /// input types (`None`: the op is not in the registry, an input is untyped, or the rule
    /// failed).
    fn output(
        &self,
        graph: &Graph,
        node: crate::ids::NodeId,
        t: TensorId,
        inferred: Option<TensorType>,
    ) -> Option<TensorType>;
    /// The view's type of graph input or initializer `t` without deriving it, when the view
    /// knows it already (`Some(type)`); `None`, the default: derive it ([`InferView::source`]).
    fn known_source(&self, _graph: &Graph, _t: TensorId) -> Option<Option<TensorType>> {
        None
    }
    /// The view's types of `node`'s outputs without running its rule, when the view knows
    /// them already (an earlier inference of the same node from the same input types and
    /// declarations); `None`, the default: infer. `types`: the view's types so far, indexed
    /// by tensor (every input of `node` is typed by then).
    fn known_outputs(
        &self,
        _graph: &Graph,
        _node: crate::ids::NodeId,
        _types: &[Option<TensorType>],
    ) -> Option<Vec<Option<TensorType>>> {
        None
    }
}

/// Inference as `view` sees it, in file order: never fails (what cannot be inferred is
/// what the view makes of `None`). Values the view keeps are sanitized as [`infer`]'s are.
pub fn infer_view(graph: &Graph, view: &dyn InferView) -> Types {
    let mut out = Types {
        types: vec![None; graph.tensor_count()],
        ..Types::default()
    };
    for t in graph.tensor_ids() {
        if !matches!(graph.tensor(t).source, TensorSource::Node(_)) {
            out.types[t.index()] = match view.known_source(graph, t) {
                Some(known) => known,
                None => view.source(graph, t, declared(graph, t)).map(sanitize),
            };
        }
    }
    for &n in graph.nodes() {
        let node = graph.node(n);
        if let Some(known) = view.known_outputs(graph, n, &out.types) {
            for (slot, tt) in node.outputs.iter().zip(known) {
                if let Some(t) = slot {
                    out.types[t.index()] = tt;
                }
            }
            continue;
        }
        let inputs: Option<Vec<Option<TensorType>>> = node
            .inputs
            .iter()
            .map(|slot| match slot {
                None => Some(None),
                Some(t) => out.types[t.index()].clone().map(Some),
            })
            .collect();
        let result = match (op_def(graph, n), inputs) {
            (Some(def), Some(inputs)) => {
                let ctx = InferCtx {
                    graph,
                    id: n,
                    node,
                    opset: graph.opset(&node.domain).unwrap_or(def.since),
                    inputs,
                    warnings: Default::default(),
                };
                (def.infer)(&ctx).ok()
            }
            _ => None,
        };
        for (k, slot) in node.outputs.iter().enumerate() {
            let Some(t) = slot else { continue };
            let inferred = result.as_ref().and_then(|r| r.get(k).cloned().flatten());
            out.types[t.index()] = view.output(graph, n, *t, inferred).map(sanitize);
        }
    }
    out
}
