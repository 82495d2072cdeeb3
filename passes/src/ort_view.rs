//! ONNX Runtime's own view of shapes: what ORT 1.31 resolves for every value when it loads
//! a model, which is what its allocation planner compares (`docs/ort-internals.md` §2.6).
//!
//! Rules (ORT's `Graph::Resolve` → `InferAndVerifyTypeMatch`, per node in topological order):
//! - a value starts with the type the file declares for it (graph input, graph output,
//!   value_info, or the value_info a patch added for a tensor it created); an initializer
//!   has its dims;
//! - each node's ONNX shape function runs on its inputs' resolved types. It sees the data of
//!   constant initializers (`getInputData`; `Constant` nodes are initializers by then) and the
//!   shape values ORT's data propagation computed (`getSymbolicInput`): integers only (the
//!   shape of a tensor with a symbolic dim propagates nothing), through Shape, Concat, Size,
//!   Squeeze, Unsqueeze, and a scalar Gather / Add / Sub / Mul / Div ([`propagates_values`];
//!   not Slice, not a Gather with 1-D indices). A dim the function cannot resolve is left
//!   unknown, and ONNX cannot express a product or sum of symbols (`batch*seq`): such a dim
//!   is unknown too;
//! - the inferred shape is merged into the declared one (`mergeInShapeInfo`): an inferred
//!   value wins, then a declared value, then a declared name, then an inferred name;
//!   otherwise the dim stays unknown. A rank the two disagree on keeps the declared shape.
//!
//! Unknown dims are symbols starting with `?` (as the importer writes them): they never equal
//! anything in [`OrtShapes::same_size`], which is ORT's `SameSize`. The shape rules are the
//! registry's, run through [`ckpt_ir::ops::infer_view`]; concrete shapes for byte counts
//! are the graph's own, not these.

use std::cell::Cell;
use std::collections::HashMap;

use ckpt_ir::ops::{infer_view, InferView, TensorType};
use ckpt_ir::{onnx, DType, Dim, Graph, NodeId, Shape, TensorId};

/// Whether ORT 1.31's data propagation gives node `op`'s output values (with `rank0`: the
/// output is a scalar). Measured (`tests/ort_view.rs`): Shape, Concat and a scalar Gather →
/// Unsqueeze propagate; a Slice and a Gather with 1-D indices do not. Size, Squeeze and scalar
/// Add / Sub / Mul / Div are ORT's own propagators (`core/graph/data_propagation/`).
fn propagates_values(op: &str, rank0: bool) -> bool {
    match op {
        "Shape" | "Concat" | "Size" | "Squeeze" | "Unsqueeze" => true,
        "Gather" | "Add" | "Sub" | "Mul" | "Div" => rank0,
        _ => false,
    }
}

/// ORT's resolved type of every tensor, indexed by tensor, with what resolving them saw (so
/// that a patched graph can be resolved again from it: [`resolved_shapes_after`]).
#[derive(Clone, Debug, Default)]
pub struct OrtShapes {
    types: Vec<Option<TensorType>>,
    declared: Declared,
    /// Unknown dims made so far (`?ort1`, `?ort2`, ...).
    fresh: usize,
}

impl OrtShapes {
    /// The dtype and shape ORT resolved for `t` (`None`: no shape at all).
    pub fn get(&self, t: TensorId) -> Option<(DType, &Shape)> {
        self.types
            .get(t.index())
            .and_then(|x| x.as_ref())
            .map(|tt| (tt.dtype, &tt.shape))
    }

    /// ORT's `SameSize`: same element size (strings never), same rank, and each pair of dims
    /// equal values or equal names; unknown dims match nothing. Two tensors are the same size
    /// exactly when both have a [`OrtShapes::size_key`] and the keys are equal.
    pub fn same_size(&self, a: TensorId, b: TensorId) -> bool {
        matches!((self.size_key(a), self.size_key(b)), (Some(x), Some(y)) if x == y)
    }

    /// What [`OrtShapes::same_size`] compares, as a value (`None`: `t` matches nothing):
    /// the element bits and the shape, where no dim is unknown and the dtype is not a string.
    pub fn size_key(&self, t: TensorId) -> Option<(u64, &Shape)> {
        let (d, s) = self.get(t)?;
        let comparable = d != DType::String
            && s.dims().iter().all(|x| match x {
                Dim::Known(_) => true,
                Dim::Sym(n) => !is_unknown(n),
                Dim::Expr(_) => false,
            });
        comparable.then_some((d.bits(), s))
    }

    /// Whether ORT resolved `t`'s shape fully: every dim a value or a name.
    pub fn is_resolved(&self, t: TensorId) -> bool {
        self.get(t).is_some_and(|(_, s)| {
            s.dims().iter().all(|d| match d {
                Dim::Known(_) => true,
                Dim::Sym(n) => !is_unknown(n),
                Dim::Expr(_) => false,
            })
        })
    }
}

fn is_unknown(name: &str) -> bool {
    name.starts_with('?')
}

/// ORT's view of `graph`'s shapes (the module doc states the rules).
pub fn resolved_shapes(graph: &Graph) -> OrtShapes {
    resolve(graph, None)
}

/// [`resolved_shapes`] of `graph`, which is `base_graph` patched (its tensors and nodes keep
/// their ids, new ones come after), given `base`, `base_graph`'s: a node of `base_graph`
/// whose proto, inputs and outputs are unchanged, whose inputs resolved as before and whose
/// outputs are declared as before resolves as before, and is not inferred again. The result
/// is [`resolved_shapes`]'s (unknown dims made afresh are named apart from `base`'s).
pub fn resolved_shapes_after(graph: &Graph, base_graph: &Graph, base: &OrtShapes) -> OrtShapes {
    resolve(graph, Some((base_graph, base)))
}

fn resolve(graph: &Graph, base: Option<(&Graph, &OrtShapes)>) -> OrtShapes {
    let view = OrtView {
        declared: declared_types(graph),
        fresh: Cell::new(base.map_or(0, |(_, b)| b.fresh)),
        base,
    };
    let types = infer_view(graph, &view);
    OrtShapes {
        types: graph.tensor_ids().map(|t| types.get(t).cloned()).collect(),
        fresh: view.fresh.get(),
        declared: view.declared,
    }
}

/// What the file (and the patches) declare, by tensor name: dtype (when given) and shape
/// (unknown dims as `?` symbols).
type Declared = HashMap<String, (Option<DType>, Option<Shape>)>;

fn declared_types(graph: &Graph) -> Declared {
    let mut out = Declared::new();
    let proto = graph.model().graph.as_ref();
    let entries = proto
        .into_iter()
        .flat_map(|g| g.input.iter().chain(&g.output).chain(&g.value_info))
        .chain(graph.added_value_info());
    for vi in entries {
        let Some(name) = vi.name.clone() else {
            continue;
        };
        let Some(onnx::type_proto::Value::TensorType(tt)) =
            vi.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            continue;
        };
        let dtype = tt.elem_type.and_then(DType::from_code);
        let shape = tt.shape.as_ref().map(|sp| {
            Shape(
                sp.dim
                    .iter()
                    .enumerate()
                    .map(|(k, d)| {
                        use onnx::tensor_shape_proto::dimension::Value;
                        match &d.value {
                            Some(Value::DimValue(v)) if *v >= 0 => Dim::Known(*v as u64),
                            Some(Value::DimParam(p)) if !p.is_empty() => Dim::Sym(p.clone()),
                            // Named by where it is declared: the same in a patched graph.
                            _ => Dim::Sym(format!("?decl:{name}:{k}")),
                        }
                    })
                    .collect(),
            )
        });
        // The first entry wins, as in ORT (inputs, then outputs, then value_info).
        out.entry(name).or_insert((dtype, shape));
    }
    out
}

struct OrtView<'a> {
    declared: Declared,
    fresh: Cell<usize>,
    /// The graph this one was patched from, resolved.
    base: Option<(&'a Graph, &'a OrtShapes)>,
}

impl OrtView<'_> {
    fn unknown(&self) -> Dim {
        let k = self.fresh.get() + 1;
        self.fresh.set(k);
        Dim::Sym(format!("?ort{k}"))
    }

    /// A dim as ONNX can hold it: a value, a name, or unknown.
    fn expressible(&self, d: &Dim) -> Dim {
        match d {
            Dim::Known(_) => d.clone(),
            Dim::Sym(_) => d.clone(),
            Dim::Expr(_) => self.unknown(),
        }
    }
}

/// `mergeInDimensionInfo(source = inferred, target = declared)`.
fn merge_dim(inferred: &Dim, declared: &Dim) -> Dim {
    let named = |d: &Dim| matches!(d, Dim::Sym(n) if !is_unknown(n));
    match (inferred, declared) {
        (Dim::Known(_), _) => inferred.clone(),
        (_, Dim::Known(_)) => declared.clone(),
        (_, d) if named(d) => declared.clone(),
        (i, _) if named(i) => inferred.clone(),
        _ => declared.clone(),
    }
}

impl InferView for OrtView<'_> {
    fn known_outputs(
        &self,
        graph: &Graph,
        node: NodeId,
        types: &[Option<TensorType>],
    ) -> Option<Vec<Option<TensorType>>> {
        let (base_graph, base) = self.base?;
        if node.index() >= base_graph.node_bound() {
            return None;
        }
        let (n, was) = (graph.node(node), base_graph.node(node));
        if !n.same_stored(was) {
            return None;
        }
        for t in n.inputs.iter().flatten() {
            let now = types.get(t.index())?;
            if now.is_none() || base.types.get(t.index())? != now {
                return None;
            }
        }
        n.outputs
            .iter()
            .map(|slot| match slot {
                None => Some(None),
                Some(t) => {
                    let name = &graph.tensor(*t).name;
                    (self.declared.get(name) == base.declared.get(name))
                        .then(|| base.types.get(t.index()).cloned().flatten())
                }
            })
            .collect()
    }

    fn source(
        &self,
        graph: &Graph,
        t: TensorId,
        declared: Option<TensorType>,
    ) -> Option<TensorType> {
        let tensor = graph.tensor(t);
        let mut tt = declared?;
        // getInputData sees constant initializers only (not ones a caller may override).
        let constant = matches!(
            tensor.source,
            ckpt_ir::TensorSource::Initializer {
                overridable: false,
                ..
            }
        );
        if !constant {
            tt.value = None;
        }
        Some(tt)
    }

    fn output(
        &self,
        graph: &Graph,
        node: NodeId,
        t: TensorId,
        inferred: Option<TensorType>,
    ) -> Option<TensorType> {
        let name = &graph.tensor(t).name;
        let (declared_dtype, declared_shape) =
            self.declared.get(name).cloned().unwrap_or((None, None));
        let n = graph.node(node);
        let inferred = inferred.map(|mut tt| {
            // A `Constant` node is an initializer by the time ORT infers: its data is seen.
            let propagates = n.domain == ckpt_ir::ONNX_DOMAIN
                && (n.op_type == "Constant" || propagates_values(&n.op_type, tt.shape.rank() == 0));
            tt.shape = Shape(
                tt.shape
                    .dims()
                    .iter()
                    .map(|d| self.expressible(d))
                    .collect(),
            );
            // ORT's propagated values are integers: one unknown element loses them all.
            let concrete = tt
                .value
                .as_ref()
                .is_some_and(|v| v.iter().all(|d| matches!(d, Dim::Known(_))));
            if !(propagates && concrete) {
                tt.value = None;
            }
            tt
        });
        let dtype = declared_dtype.or(inferred.as_ref().map(|tt| tt.dtype))?;
        let value = inferred.as_ref().and_then(|tt| tt.value.clone());
        let shape = match (inferred.map(|tt| tt.shape), declared_shape) {
            (Some(i), Some(d)) if i.rank() == d.rank() => Shape(
                i.dims()
                    .iter()
                    .zip(d.dims())
                    .map(|(i, d)| merge_dim(i, d))
                    .collect(),
            ),
            (_, Some(d)) => d,
            (Some(i), None) => i,
            (None, None) => return None,
        };
        Some(TensorType {
            dtype,
            shape,
            value,
        })
    }
}
