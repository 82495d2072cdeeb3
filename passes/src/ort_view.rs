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

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;

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
    // A patched graph declares what its base declared and what the patch added after it.
    let declared = match base {
        Some((bg, b))
            if graph.shares_model(bg)
                && graph.added_value_info().starts_with(bg.added_value_info()) =>
        {
            b.declared
                .extended(&graph.added_value_info()[bg.added_value_info().len()..])
        }
        _ => Declared::of(graph),
    };
    let view = OrtView {
        declared,
        fresh: Cell::new(base.map_or(0, |(_, b)| b.fresh)),
        same: RefCell::new(vec![Same::Unknown; graph.tensor_count()]),
        base,
    };
    let types = infer_view(graph, &view).into_vec();
    debug_assert_eq!(types.len(), graph.tensor_count());
    OrtShapes {
        types,
        fresh: view.fresh.get(),
        declared: view.declared,
    }
}

/// A declared dtype (when given) and shape (unknown dims as `?` symbols).
type DeclaredType = (Option<DType>, Option<Shape>);

/// What the file (and the patches) declare, by tensor name: the entries a graph shares with
/// the graph it was patched from, and those its patch added (`added`: names not in `shared`;
/// the first entry of a name wins, as in ORT).
#[derive(Clone, Debug, Default)]
struct Declared {
    shared: Arc<HashMap<String, DeclaredType>>,
    added: HashMap<String, DeclaredType>,
}

impl Declared {
    fn get(&self, name: &str) -> Option<&DeclaredType> {
        self.shared.get(name).or_else(|| self.added.get(name))
    }

    /// What `graph` declares (inputs, then outputs, then value_info, then the value_info
    /// patches added).
    fn of(graph: &Graph) -> Declared {
        let mut out = HashMap::new();
        let proto = graph.model().graph.as_ref();
        let entries = proto
            .into_iter()
            .flat_map(|g| g.input.iter().chain(&g.output).chain(&g.value_info))
            .chain(graph.added_value_info());
        for vi in entries {
            if let Some((name, ty)) = declared_entry(vi) {
                out.entry(name).or_insert(ty);
            }
        }
        Declared {
            shared: Arc::new(out),
            added: HashMap::new(),
        }
    }

    /// These declarations and `more` after them.
    fn extended(&self, more: &[onnx::ValueInfoProto]) -> Declared {
        let mut out = Declared {
            shared: self.shared.clone(),
            added: self.added.clone(),
        };
        for vi in more {
            if let Some((name, ty)) = declared_entry(vi) {
                if !out.shared.contains_key(&name) {
                    out.added.entry(name).or_insert(ty);
                }
            }
        }
        out
    }

    /// Whether `name` is declared here as in `base`.
    fn same_as(&self, base: &Declared, name: &str) -> bool {
        if Arc::ptr_eq(&self.shared, &base.shared)
            && !self.added.contains_key(name)
            && !base.added.contains_key(name)
        {
            return true;
        }
        self.get(name) == base.get(name)
    }
}

/// One value_info entry as a declaration, when it types a tensor.
fn declared_entry(vi: &onnx::ValueInfoProto) -> Option<(String, DeclaredType)> {
    let name = vi.name.clone()?;
    let Some(onnx::type_proto::Value::TensorType(tt)) =
        vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return None;
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
    Some((name, (dtype, shape)))
}

/// Whether a tensor's type is known to be its type in the base graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Same {
    Unknown,
    Yes,
    No,
}

struct OrtView<'a> {
    declared: Declared,
    fresh: Cell<usize>,
    /// Per tensor: whether its type so far is the base's (a type copied from the base is;
    /// others are compared once, when a reader asks).
    same: RefCell<Vec<Same>>,
    /// The graph this one was patched from, resolved.
    base: Option<(&'a Graph, &'a OrtShapes)>,
}

impl OrtView<'_> {
    /// Whether `t`'s type in `types` is its type in the base.
    fn same_as_base(&self, t: TensorId, types: &[Option<TensorType>], base: &OrtShapes) -> bool {
        let mut same = self.same.borrow_mut();
        let Some(mark) = same.get_mut(t.index()) else {
            return false;
        };
        if *mark == Same::Unknown {
            let now = types.get(t.index()).and_then(|x| x.as_ref());
            let was = base.types.get(t.index()).and_then(|x| x.as_ref());
            *mark = if now.is_some() && now == was {
                Same::Yes
            } else {
                Same::No
            };
        }
        *mark == Same::Yes
    }

    fn mark_same(&self, t: TensorId) {
        if let Some(mark) = self.same.borrow_mut().get_mut(t.index()) {
            *mark = Same::Yes;
        }
    }

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
    fn known_source(&self, graph: &Graph, t: TensorId) -> Option<Option<TensorType>> {
        // The same stored tensor in the same model: its type and data, all a source's type is
        // made of ([`InferView::source`] here), are the base's.
        let (base_graph, base) = self.base?;
        if !(graph.shares_model(base_graph) && graph.shares_tensor(base_graph, t)) {
            return None;
        }
        self.mark_same(t);
        Some(base.types.get(t.index()).cloned().flatten())
    }

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
        if !n
            .inputs
            .iter()
            .flatten()
            .all(|&t| self.same_as_base(t, types, base))
        {
            return None;
        }
        let known: Option<Vec<Option<TensorType>>> = n
            .outputs
            .iter()
            .map(|slot| match slot {
                None => Some(None),
                Some(t) => self
                    .declared
                    .same_as(&base.declared, &graph.tensor(*t).name)
                    .then(|| base.types.get(t.index()).cloned().flatten()),
            })
            .collect();
        if known.is_some() {
            n.outputs.iter().flatten().for_each(|&t| self.mark_same(t));
        }
        known
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
