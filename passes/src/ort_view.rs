//! ONNX Runtime's own view of shapes: what ORT 1.31 resolves for every value when it loads
//! a model, which is what its allocation planner compares (`docs/design/ort-internals.md` §2.6).
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
//! registry's, run node by node ([`ckpt_ir::ops::infer_node`]); concrete shapes for byte counts
//! are the graph's own, not these.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;

use ckpt_ir::ops::{infer_node, sanitized, source_type, TensorType};
use ckpt_ir::{onnx, DType, Dim, Graph, NodeId, Shape, TensorId, TensorSource};
use rustc_hash::FxHashMap;

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
///
/// A graph resolved from scratch holds every type; a patched graph resolved from one holds
/// only where its types differ (new tensors, and old ones whose type changed) and shares the
/// rest: a trial of the planner's search copies no type it did not change.
#[derive(Clone, Debug, Default)]
pub struct OrtShapes {
    /// The types of the graph resolved from scratch that this one is (or is patched from).
    full: Arc<Vec<Option<TensorType>>>,
    /// Types of tensors past `full`'s end (a patch's new tensors), from `full.len()` on.
    added: Vec<Option<TensorType>>,
    /// Tensors within `full`'s range whose type is not `full`'s.
    changed: FxHashMap<usize, Option<TensorType>>,
    /// Resolved from scratch: what each node's shape rule inferred, by node (before ORT's
    /// merge with declarations), from the input types in `full`. A patched graph's node that
    /// applies the same rule to the same input types (a recompute clone, a rewired reader)
    /// takes it from here instead of running the rule again. Empty in a patched graph's view.
    rules: Arc<Vec<Inferred>>,
    declared: Declared,
    /// Unknown dims made so far (`?ort1`, `?ort2`, ...).
    fresh: usize,
}

impl OrtShapes {
    /// The resolved type of `t` (`None`: no type at all).
    fn ty(&self, t: TensorId) -> Option<&TensorType> {
        let i = t.index();
        if i >= self.full.len() {
            return self.added.get(i - self.full.len()).and_then(|x| x.as_ref());
        }
        if !self.changed.is_empty() {
            if let Some(x) = self.changed.get(&i) {
                return x.as_ref();
            }
        }
        self.full[i].as_ref()
    }

    /// Set `t`'s type (in a patched graph's view: kept apart from the shared types).
    fn set(&mut self, t: TensorId, tt: Option<TensorType>) {
        let i = t.index();
        if i >= self.full.len() {
            let k = i - self.full.len();
            if self.added.len() <= k {
                self.added.resize(k + 1, None);
            }
            self.added[k] = tt;
        } else if self.full[i] == tt {
            self.changed.remove(&i);
        } else {
            self.changed.insert(i, tt);
        }
    }

    /// The dtype and shape ORT resolved for `t` (`None`: no shape at all).
    pub fn get(&self, t: TensorId) -> Option<(DType, &Shape)> {
        self.ty(t).map(|tt| (tt.dtype, &tt.shape))
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
/// outputs are declared as before resolves as before, and is not inferred again; a node that
/// applies a base node's rule to the types that node read (a rewired reader, a recompute
/// clone) takes what the rule inferred there, when `base` was resolved from scratch. The
/// result is [`resolved_shapes`]'s (unknown dims made afresh are named apart from `base`'s)
/// and shares `base`'s types, holding only those that differ.
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
    };
    let mut out = match base {
        None => {
            let (types, rules) = from_scratch(graph, &view);
            OrtShapes {
                full: Arc::new(types),
                rules: Arc::new(rules),
                ..OrtShapes::default()
            }
        }
        Some((base_graph, b)) => patched(graph, base_graph, b, &view),
    };
    out.fresh = view.fresh.get();
    out.declared = view.declared;
    out
}

/// What a node's shape rule inferred: each output's type (`None` for the whole: an input
/// untyped, the op not in the registry, or the rule failed).
type Inferred = Option<Vec<Option<TensorType>>>;

/// Every tensor's type, each source's and each node's in file order, and what each node's
/// rule inferred.
fn from_scratch(graph: &Graph, view: &OrtView) -> (Vec<Option<TensorType>>, Vec<Inferred>) {
    let mut types = vec![None; graph.tensor_count()];
    let mut rules = vec![None; graph.node_bound()];
    for t in graph.tensor_ids() {
        if !matches!(graph.tensor(t).source, TensorSource::Node(_)) {
            types[t.index()] = view.source(graph, t, source_type(graph, t)).map(sanitized);
        }
    }
    for &n in graph.nodes() {
        let result = infer_node(
            graph,
            n,
            input_types(graph, n, |t| types[t.index()].as_ref()),
        );
        for (t, tt) in view.outputs(graph, n, &result) {
            types[t.index()] = tt;
        }
        rules[n.index()] = result;
    }
    (types, rules)
}

/// `graph`'s types, given `b`, those of `base_graph`, which it is patched from: they start as
/// the base's, and only what the patch touched is resolved again — a source not stored as in
/// the base, and a node that is new, rewired, reads a type that changed, or has an output
/// declared otherwise — in file order, as from scratch.
fn patched(graph: &Graph, base_graph: &Graph, b: &OrtShapes, view: &OrtView) -> OrtShapes {
    let mut out = OrtShapes {
        full: b.full.clone(),
        added: b.added.clone(),
        changed: b.changed.clone(),
        ..OrtShapes::default()
    };
    // Per tensor: its type here is known to be its type in the base.
    let mut same = vec![false; graph.tensor_count()];
    for t in graph.tensor_ids() {
        if matches!(graph.tensor(t).source, TensorSource::Node(_)) {
            continue;
        }
        // The same value in the same model: its type and data, all a source's type is made
        // of, are the base's.
        if graph.same_value(base_graph, t) {
            same[t.index()] = true;
            continue;
        }
        let tt = view.source(graph, t, source_type(graph, t)).map(sanitized);
        same[t.index()] = tt.is_some() && tt.as_ref() == b.ty(t);
        out.set(t, tt);
    }
    for &n in graph.nodes() {
        let node = graph.node(n);
        let kept = n.index() < base_graph.node_bound()
            && node.same_stored(base_graph.node(n))
            && node.inputs.iter().flatten().all(|t| same[t.index()])
            && node
                .outputs
                .iter()
                .flatten()
                .all(|t| view.declared.same_as(&b.declared, &graph.tensor(*t).name));
        if kept {
            node.outputs
                .iter()
                .flatten()
                .for_each(|t| same[t.index()] = true);
            continue;
        }
        let result = match same_rule(graph, n, base_graph, b, &out) {
            Some(known) => known.clone(),
            None => infer_node(graph, n, input_types(graph, n, |t| out.ty(t))),
        };
        for (t, tt) in view.outputs(graph, n, &result) {
            same[t.index()] = tt.is_some() && tt.as_ref() == b.ty(t);
            out.set(t, tt);
        }
    }
    out
}

/// Node `n`'s input types as its rule reads them (`ty`: the types so far), `None` where an
/// input is untyped.
fn input_types<'a>(
    graph: &Graph,
    n: NodeId,
    ty: impl Fn(TensorId) -> Option<&'a TensorType>,
) -> Option<Vec<Option<TensorType>>> {
    graph
        .node(n)
        .inputs
        .iter()
        .map(|slot| match slot {
            None => Some(None),
            Some(t) => ty(*t).cloned().map(Some),
        })
        .collect()
}

/// What node `n`'s rule infers, known without running it: `b` (resolved from scratch) holds
/// what the rule inferred for the base node `n` applies the same rule as — itself, or the
/// node a recompute clone copies — and that node read the types `n` reads now.
fn same_rule<'b>(
    graph: &Graph,
    n: NodeId,
    base_graph: &Graph,
    b: &'b OrtShapes,
    now: &OrtShapes,
) -> Option<&'b Inferred> {
    let node = graph.node(n);
    let m = match node.origin {
        ckpt_ir::NodeOrigin::Recompute { of } => of,
        _ => n,
    };
    if m.index() >= base_graph.node_bound() || m.index() >= b.rules.len() {
        return None;
    }
    let template = base_graph.node(m);
    let same_inputs = node.inputs.len() == template.inputs.len()
        && node
            .inputs
            .iter()
            .zip(&template.inputs)
            .all(|(x, y)| match (x, y) {
                (None, None) => true,
                (Some(x), Some(y)) => now.ty(*x) == b.ty(*y),
                _ => false,
            });
    if !(same_inputs && node.same_rule_as(template)) {
        return None;
    }
    let known = &b.rules[m.index()];
    // A rule names a dim it cannot determine after its node (`?n7.0`): a copy's is named
    // after the copy, so a result holding one is not the copy's.
    if m != n {
        let mine = format!("?{m}.");
        let named = |d: &Dim| d.symbols().iter().any(|x| x.starts_with(&mine));
        let names_node =
            known.iter().flatten().flatten().any(|tt| {
                tt.shape.dims().iter().any(named) || tt.value.iter().flatten().any(named)
            });
        if names_node {
            return None;
        }
    }
    Some(known)
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

/// What one resolve keeps of each type: the declarations it merges inferred types into, and
/// the unknown dims it has made so far.
struct OrtView {
    declared: Declared,
    fresh: Cell<usize>,
}

impl OrtView {
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

    /// Each output of node `n` and the type ORT keeps for it, given what the node's rule
    /// inferred (`result`), sanitized.
    fn outputs<'r>(
        &'r self,
        graph: &'r Graph,
        n: NodeId,
        result: &'r Inferred,
    ) -> impl Iterator<Item = (TensorId, Option<TensorType>)> + 'r {
        graph
            .node(n)
            .outputs
            .iter()
            .enumerate()
            .filter_map(move |(k, slot)| {
                let t = (*slot)?;
                let inferred = result.as_ref().and_then(|r| r.get(k).cloned().flatten());
                Some((t, self.output(graph, n, t, inferred).map(sanitized)))
            })
    }

    /// The type of graph input or initializer `t`, given its declared type.
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
